"""End to end on this machine, for real: grid -> mpirun -> mpi4py -> torch DDP (gloo on CPU, NCCL
on GPUs) -> rank files -> collect. Tiny model sizes so it runs on 2 CPU cores."""

from __future__ import annotations

import csv
import itertools
import json

import pytest

from toolkit import collect, submit

pytestmark = pytest.mark.integration

GRID = """
name: e2e
repeats: 1
base:
  framework: torch
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 4
  slurm: {time_min: 5}
  env: {TRAINBENCH_TEST_MARKER: "a b;$(touch SHOULD_NOT_EXIST)"}
zip:
  - model: [resnet50, resnet50, bert_base, bert_base, resnet50]
    precision: [fp32, fp32, amp_bf16, amp_fp16, tf32]
    loss_scaling: [null, null, null, static, null]
    gpus_per_node: [1, 2, 1, 1, 1]
    model_config:
      - {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
      - {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
      - {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, seq_len: 32,
         vocab_size: 500, masked_positions: 5}
      - {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, seq_len: 32,
         vocab_size: 500, masked_positions: 5}
      - {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
"""


def test_grid_runs_for_real_and_collects(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = tmp_path / "e2e.yaml"
    grid.write_text(GRID)
    out = tmp_path / "results"
    # relative, as a user types it (the ranks run in the run directory)
    assert submit.main(["--grid", "e2e.yaml", "--results", "results"]) == 0
    capsys.readouterr()

    rid = "resnet50-torch-fp32-1n2g-bs4"
    run = out / "cases" / rid / "r0"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["world"]["world_size"] == 2
    assert len(meta["ranks"]) == 2
    assert meta["ranks"][0]["backend"] == "gloo"
    assert meta["ranks"][0]["precision_flags"]["torch.backends.cudnn.allow_tf32"] is False
    assert meta["env"]["TRAINBENCH_TEST_MARKER"] == "a b;$(touch SHOULD_NOT_EXIST)"
    assert not list(tmp_path.rglob("SHOULD_NOT_EXIST"))
    records = [json.loads(x) for x in (run / "rank001.jsonl").read_text().splitlines()]
    iters = [r for r in records if r["type"] == "iter"]
    assert [r["iteration"] for r in iters] == [1, 2, 3, 4, 5, 6]
    assert all(b["elapsed_s"] > a["elapsed_s"] for a, b in itertools.pairwise(iters))
    assert records[-1]["type"] == "end"

    assert collect.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "resnet50" in printed and "bert_base" in printed
    with (out / "runs.csv").open() as fh:
        runs = list(csv.DictReader(fh))
    assert len(runs) == 5
    assert {r["status"] for r in runs} == {"ok"}, [r["error"] for r in runs]
    assert all(float(r["throughput_sps"]) > 0 for r in runs)
    with (out / "summary.csv").open() as fh:
        summary = list(csv.DictReader(fh))
    two = next(r for r in summary if r["gpus_per_node"] == "2")
    one = next(r for r in summary if r["gpus_per_node"] == "1" and r["model"] == "resnet50"
               and r["precision"] == "fp32")
    assert float(two["speedup"]) == pytest.approx(
        float(two["throughput_median_sps"]) / float(one["throughput_median_sps"]))
    tf32 = next(r for r in summary if r["precision"] == "tf32")
    assert float(tf32["speedup"]) == 1.0  # a 1n1g case is its own baseline
    report = (out / "report.md").read_text()
    assert "| num_nodes | gpu_num_per_node | batch_size_per_device | throughput | speedup |" \
        in report
    assert "### All Results" in report

    # resume: everything finished, nothing runs again, nothing is overwritten
    mtime = (run / "status.json").stat().st_mtime_ns
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 0
    assert "0 runs to do, 5 already finished" in capsys.readouterr().out
    assert (run / "status.json").stat().st_mtime_ns == mtime
    # --force adds a new repeat instead of overwriting
    assert submit.main(["--grid", str(grid), "--results", str(out), "--force",
                        "--set", "model=resnet50", "--set", "precision=tf32",
                        "--set", "gpus_per_node=1", "--set", "loss_scaling=null",
                        "--set", "model_config={image_size: 32, resnet_layers: [1,1,1,1], "
                                 "num_classes: 10}"]) == 0
    assert (out / "cases" / "resnet50-torch-tf32-1n1g-bs4" / "r1" / "status.json").exists()


def test_run_local_script_reruns_a_repeat_by_hand(tmp_path):
    import subprocess

    from toolkit.launch.local import LocalExecutor
    from toolkit.results.layout import CaseDir
    from toolkit.spec import Case, resolve

    case = resolve(Case.from_dict({
        "model": "resnet50", "batch_size_per_device": 2, "warmup_iterations": 1,
        "measured_iterations": 2,
        "model_config": {"image_size": 32, "resnet_layers": [1, 1, 1, 1], "num_classes": 10},
        "env": {"TRAINBENCH_TEST_MARKER": "x'; touch SHOULD_NOT_EXIST; echo '$(touch A)"}}))
    cdir = CaseDir(tmp_path / "results dir", "c1")  # a space in the path, too
    cdir.write_case(case)
    script = cdir.path / "run_local.sh"
    script.write_text(LocalExecutor().script(case, cdir.path.name, cdir.path / "case.json"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    subprocess.run(["bash", str(script), "3"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=300)
    records = [json.loads(x) for x in (cdir.run_dir(3) / "rank000.jsonl").read_text().splitlines()]
    assert records[-1]["type"] == "end"
    meta = json.loads((cdir.run_dir(3) / "meta.json").read_text())
    assert meta["env"]["TRAINBENCH_TEST_MARKER"] == case.env[0][1]
    assert not list(tmp_path.rglob("SHOULD_NOT_EXIST")) and not list(tmp_path.rglob("A"))
    # The script decides and writes the run's status like the executor does ...
    status = json.loads((cdir.run_dir(3) / "status.json").read_text())
    assert status["status"] == "ok" and status["executor"] == "local"
    # ... and never overwrites a finished repeat: a second call skips it.
    before = (cdir.run_dir(3) / "rank000.jsonl").read_bytes()
    again = subprocess.run(["bash", str(script), "3"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already finished" in again.stderr
    assert (cdir.run_dir(3) / "rank000.jsonl").read_bytes() == before
