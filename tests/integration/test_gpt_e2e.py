"""A 2-rank GPT grid end to end on this machine: submit (local executor: mpirun, mpi4py,
torch with gloo) -> rank files -> collect -> the GPT table. Tiny model sizes; the tensor-parallel
case with sequence parallelism, and asynchronous TP asked for where it cannot run."""

from __future__ import annotations

import csv
import json

import pytest

from toolkit import collect, gpt_table, submit

pytestmark = pytest.mark.integration

GRID = """
name: gpt_e2e
base:
  framework: torch
  model: gpt
  gpus_per_node: 2
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 4
  telemetry_interval_ms: 0
  model_config: {hidden_size: 32, num_layers: 2, num_heads: 4, seq_len: 16, vocab_size: 128}
  slurm: {time_min: 5}
zip:
  - name: [MP_1x2x1_4_32x2, PP_1x1x2_4_32x2]
    parallel.tp: [2, 1]
    parallel.pp: [1, 2]
    parallel.micro_batch_size: [4, 2]
    sequence_parallel: [true, false]
    async_tp: [true, false]
"""


def test_two_rank_gpt_cases_run_and_make_the_gpt_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text(GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", "g.yaml", "--results", str(out), "--executor", "local"]) == 0
    assert collect.main([str(out), "--quiet"]) == 0
    report = (out / "report.md").read_text()  # collect's report carries the GPT table too
    assert "GPT (latency" in report and "| -- | MP_1x2x1_4_32x2 |" in report
    with (out / "runs.csv").open() as fh:
        runs = {r["case_id"]: r for r in csv.DictReader(fh)}
    assert set(runs) == {"MP_1x2x1_4_32x2", "PP_1x1x2_4_32x2"}
    for r in runs.values():
        assert r["status"] == "ok", r["error"]
        assert float(r["throughput_sps"]) > 0 and float(r["tflops_per_gpu"]) > 0
        assert float(r["loss_last"]) < float(r["loss_first"])  # it trains
        assert "megatron 72-formula" in r["flops_formula"]

    meta = json.loads((out / "cases" / "PP_1x1x2_4_32x2" / "r0" / "meta.json").read_text())
    # `compile` unset: eager on these CPU ranks, recorded per rank as it ran
    assert [r["run_options"]["compile"] for r in meta["ranks"]] == [False, False]
    stages = [rank["parallel"] for rank in meta["ranks"]]
    assert [s["stage"] for s in stages] == [0, 1]
    assert stages[0]["pipeline_schedule"] == "1f1b" and stages[0]["micro_batches"] == 2
    assert stages[0]["stage_layers"] + stages[1]["stage_layers"] == [0, 1]
    # every stage reports the step's loss (the last stage computes it)
    for rank in (0, 1):
        lines = (out / "cases" / "PP_1x1x2_4_32x2" / "r0" / f"rank{rank:03d}.jsonl")
        losses = [json.loads(x)["loss"] for x in lines.read_text().splitlines()
                  if json.loads(x)["type"] == "iter"]
        assert len(losses) == 6 and all(v > 0 for v in losses)

    # asynchronous TP asked for on CPU ranks: trained with sequence parallelism, and each rank
    # says why the overlap did not apply
    meta = json.loads((out / "cases" / "MP_1x2x1_4_32x2" / "r0" / "meta.json").read_text())
    assert [r["parallel"]["sequence_parallel"] for r in meta["ranks"]] == [True, True]
    assert {r["parallel"]["async_tp"] for r in meta["ranks"]} == {
        "not applied: a CPU rank has no symmetric memory"}

    capsys.readouterr()
    assert gpt_table.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| MP |" in printed and "| PP |" in printed
    assert "| -- | MP_1x2x1_4_32x2 |" in printed and "(ms)" in printed
    # no dp-only case on these two ranks: no ratio to data parallelism, and the seeds' ratio
    # of the same kind of layout beside it, of another model size, as the note says
    assert "| - | 0.651 (1x8x1 at 8) |" in printed and "| - | 1.036 (8x1x4 at 32) |" in printed
    assert "`-`: no dp-only case at that GPU count ran beside MP_1x2x1_4_32x2, " in printed
    assert "over 2D_8x1x1_16_1536x16 at 8 GPUs, same kind, another model size" in printed
    with (out / "gpt_table.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert [r["case"] for r in table] == ["MP_1x2x1_4_32x2", "PP_1x1x2_4_32x2"]
    assert all(float(r["latency_ms"]) > 0 for r in table)
