"""`benchmarks/gpu_fast.py` gets one run on a GPU machine: every grid it writes must be a valid
case set, and its table must read the toolkit's results the way collect writes them. (The whole
flow runs on CPU ranks with `--smoke`; that takes minutes and is not part of the suite.)"""

from __future__ import annotations

import csv
import json

import pytest

from tests.unit.workloads.conftest import benchmark_module
from toolkit.spec import Precision
from toolkit.spec.grid import parse_grid


@pytest.fixture(scope="module")
def gpu_fast():
    yield from benchmark_module("gpu_fast")


@pytest.mark.parametrize("mode", [{}, {"prewarm": True}, {"eager": True}, {"smoke": True}])
def test_every_grid_is_a_valid_case(gpu_fast, mode):
    items = gpu_fast.benches(two_gpus=True)
    names = [b.name for b in items]
    assert len(set(names)) == len(names) and "rn50-bf16-bs256-2gpu" in names
    for b in items:
        text = gpu_fast.grid_for(b, warmup=5, measured=7, prewarm=mode.get("prewarm", False),
                                 eager=mode.get("eager", False), smoke=mode.get("smoke", False))
        grid = parse_grid(text, source=b.name)
        (cid, case), = grid.items()
        assert cid == b.name + ("-prewarm" if mode.get("prewarm") else "")
        assert case.gpus_per_node == b.gpus
        assert dict(case.env)["NCCL_NVLS_ENABLE"] == "0"
        if mode.get("eager"):
            assert case.compile is False and not case.cuda_graphs
        assert (case.warmup_iterations, case.measured_iterations) == (5, 7)
        if mode.get("prewarm"):  # compiles only: no sampler, no binding (they run side by side)
            assert case.telemetry_interval_ms == 0 and case.binding.value == "none"
        if mode.get("smoke"):
            assert case.device.value == "cpu" and case.batch_size_per_device == 4
    fp16 = [b for b in items if b.fields.get("precision") == Precision.AMP_FP16.value]
    assert sorted(b.fields["loss_scaling"] for b in fp16) == ["dynamic", "static"]
    assert not any(b.required for b in items if b.fields.get("cuda_graphs"))


def test_table_reads_runs_and_computes_speedup(gpu_fast, tmp_path):
    items = gpu_fast.benches(two_gpus=True)
    figures = {"rn50-bf16-bs256": 7400.0, "rn50-bf16-bs256-2gpu": 14652.0,
               "rn50-fp16dyn-bs256": 7000.0, "rn50-fp16static-bs256": 7140.0}
    with (tmp_path / "runs.csv").open("w") as fh:
        w = csv.DictWriter(fh, ["case_id", "status", "throughput_sps", "mfu", "error"])
        w.writeheader()
        for name, tput in figures.items():
            w.writerow({"case_id": name, "status": "ok", "throughput_sps": tput, "mfu": 0.18})
        w.writerow({"case_id": "rn50-tf32-bs256", "status": "failed",
                    "error": "rank 0: RuntimeError: boom"})
    run = tmp_path / "cases" / "rn50-bf16-bs256" / "r0"
    run.mkdir(parents=True)
    (run / "rank000.jsonl").write_text(json.dumps(
        {"type": "summary", "loss_check": {"passed": True}, "optimizer": "SGD(fused)"}) + "\n")
    gpu_fast.read_results(tmp_path, items)
    by_name = {b.name: b for b in items}
    assert by_name["rn50-bf16-bs256-2gpu"].result["speedup"] == pytest.approx(1.98)
    assert by_name["rn50-bf16-bs256"].result["loss_check"] is True
    text = gpu_fast.table(items, "test")
    assert "| rn50-bf16-bs256 | ok | 7,400 |" in text and "| 7,300 | yes | True |" in text
    assert "7,326 (speedup 1.980)" in text and ">= 1.97 speedup | yes" in text
    assert "failed: rank 0: RuntimeError: boom" in text
    assert "| bert128-bf16-bs256 | skipped (time budget) |" in text
    assert "static is +2.00%" in text
