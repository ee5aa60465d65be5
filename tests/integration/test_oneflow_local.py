"""OneFlow for real on this machine's CPU: grid -> local executor -> mpirun -> the worker in the
Python 3.10 OneFlow venv -> OneFlow DDP -> rank files -> collect, with 1 and 2 ranks.

Needs `.venv-oneflow` (`make oneflow-env`; `make test` builds it first). Without it these tests
skip on a developer's machine and fail under CI (CI=true), where the Makefile must have built it.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
from pathlib import Path

import pytest

from toolkit import collect, submit
from toolkit.launch.python_env import python_env
from toolkit.spec import Case
from toolkit.workloads import unsupported_reason

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def oneflow_env():
    env = python_env(Case.from_dict({"framework": "oneflow"}))
    if env.problem:
        if os.environ.get("CI"):
            pytest.fail(env.problem)
        pytest.skip(env.problem)
    return env


def rank_records(run: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (run / f"rank{rank:03d}.jsonl").read_text().splitlines()]


def read_csv(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


GPT_GRID = """
name: oneflow_gpt
repeats: 1
base:
  framework: oneflow
  model: gpt
  warmup_iterations: 2
  measured_iterations: 3
  slurm: {time_min: 5}
  model_config: {hidden_size: 32, num_layers: 2, num_heads: 2, intermediate_size: 128,
                 seq_len: 32, vocab_size: 500}
zip:
  - gpus_per_node: [1, 2]
    precision: [tf32, fp32]
    batch_size_per_device: [2, 4]
    parallel: [{}, {micro_batch_size: 2}]
"""


def test_oneflow_gpt_trains_with_1_and_2_ranks(oneflow_env, tmp_path, capsys):
    grid = tmp_path / "gpt.yaml"
    grid.write_text(GPT_GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 0
    assert collect.main([str(out), "--quiet"]) == 0
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 2
    assert {r["status"] for r in runs} == {"ok"}, [r["error"] for r in runs]
    assert all(float(r["throughput_sps"]) > 0 for r in runs)
    assert {r["framework"] for r in runs} == {"oneflow"}

    run = out / "cases" / "gpt-oneflow-fp32-1n2g-bs4-mb2" / "r0"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["versions"]["oneflow"] == "0.9.0" and meta["versions"]["python"].startswith("3.10")
    assert "torch" not in meta["versions"]  # the ranks never imported torch
    assert [r["backend"] for r in meta["ranks"]] == ["oneflow-cpu", "oneflow-cpu"]
    assert meta["ranks"][0]["precision_flags"]["ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"] == "0"
    assert "every micro-batch" in meta["ranks"][0]["ddp_allreduce"]  # 2 micro-batches of 2
    assert meta["world"]["world_size"] == 2
    for rank in (0, 1):
        iters = [r for r in rank_records(run, rank) if r["type"] == "iter"]
        assert [r["iteration"] for r in iters] == [1, 2, 3, 4, 5]
        assert [r["warmup"] for r in iters] == [True, True, False, False, False]
        assert all(b["elapsed_s"] > a["elapsed_s"] for a, b in itertools.pairwise(iters))
        assert all(r["samples"] == 8 for r in iters)  # 4 per rank x 2 ranks
    tf32 = json.loads((out / "cases" / "gpt-oneflow-tf32-1n1g-bs2" / "r0" / "meta.json")
                      .read_text())
    assert tf32["ranks"][0]["precision_flags"]["ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"] == "1"
    assert tf32["ranks"][0]["backend"] is None  # one rank: no DDP


def test_framework_comparison_example_runs_both_frameworks(oneflow_env, tmp_path, capsys):
    """The OneFlow guide's side-by-side grid (docs/guide/oneflow.md), as shipped (fewer
    iterations): every case ok in both frameworks, each model the same shape in both (equal
    parameter counts)."""
    out = tmp_path / "results"
    assert submit.main(["--grid", str(ROOT / "examples" / "framework_comparison.yaml"),
                        "--results", str(out), "--set", "measured_iterations=4",
                        "--set", "warmup_iterations=2"]) == 0
    assert collect.main([str(out), "--quiet"]) == 0
    runs = read_csv(out / "runs.csv")
    assert len(runs) == 8
    assert {r["status"] for r in runs} == {"ok"}, [r["error"] for r in runs]
    assert all(float(r["throughput_sps"]) > 0 for r in runs)
    assert {(r["framework"], r["gpus_per_node"]) for r in runs} == {
        (f, g) for f in ("torch", "oneflow") for g in ("1", "2")}
    params = {}
    for case_dir in sorted((out / "cases").iterdir()):
        meta = json.loads((case_dir / "r0" / "meta.json").read_text())
        case = meta["case"]
        params.setdefault((case["model"], case["gpus_per_node"]), {})[case["framework"]] = \
            meta["ranks"][0]["parameters"]
    assert len(params) == 4
    for key, by_fw in params.items():
        assert by_fw["torch"] == by_fw["oneflow"], (key, by_fw)
    summary = read_csv(out / "summary.csv")
    assert {r["framework"] for r in summary} == {"torch", "oneflow"}


def test_amp_on_cpu_is_refused_before_anything_runs(tmp_path, capsys):
    case = Case.from_dict({"framework": "oneflow", "precision": "amp_bf16", "device": "cpu"})
    reason = unsupported_reason(case)
    assert reason is not None and "no CPU autocast" in reason
    assert unsupported_reason(Case.from_dict({"framework": "oneflow", "precision": "amp_bf16",
                                              "device": "auto"})) is None  # GPUs may have it
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nbase: {framework: oneflow, precision: amp_fp16, device: cpu}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "out")]) == 2
    assert "no CPU autocast" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
