"""`benchmarks/gpu_variants.py` gets one run on a GPU machine: each row must be compared with
the plain run of its own precision, a failed run must say so and where its log is, and a run
must be read from the script's own JSON line and profile output."""

from __future__ import annotations

import sys

import pytest

from tests.unit.workloads.conftest import benchmark_module


@pytest.fixture(scope="module")
def gpu_variants():
    yield from benchmark_module("gpu_variants")


def test_each_row_is_compared_with_the_plain_run_of_its_precision(gpu_variants):
    vs = gpu_variants.variants("resnet")
    by_name = {v.name: v for v in vs}
    by_name["bf16 plain compiled"].result = {"bare_throughput_sps": 100.0, "wall_s": 20}
    by_name["bf16 + coordinate-descent tuning"].result = {"bare_throughput_sps": 105.0,
                                                          "wall_s": 70}
    by_name["tf32 plain compiled"].result = {"bare_throughput_sps": 50.0, "wall_s": 25}
    by_name["tf32 + coordinate-descent tuning"].result = {"rc": 124, "wall_s": 200,
                                                          "log": "logs/measure-v7.log"}
    text = gpu_variants.table("resnet", vs, {"bare_throughput_sps": 99.0, "wall_s": 21})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert "| 105.0 | 1.050 |" in rows["bf16 + coordinate-descent tuning"]
    assert "| 50.0 | 1.000 |" in rows["tf32 plain compiled"]
    assert "failed (rc 124, logs/measure-v7.log)" in rows["tf32 + coordinate-descent tuning"]
    assert "skipped (budget)" in rows["bf16 + CUDA graphs (reduce-overhead)"]
    # the drift row compares the first plain run with itself, whatever precision came last
    assert "| 99.0 | 0.990 |" in rows["bf16 plain compiled, again at the end"]


def test_a_run_is_read_from_its_json_line_and_profile(gpu_variants, tmp_path, monkeypatch):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "fake.py").write_text(
        'import json\nprint("noise")\n'
        'print(json.dumps({"bare_throughput_sps": 12.5, "mfu": 0.5}))\n'
        'print("profile: 3 iterations\\nshare kind")\n')
    monkeypatch.setattr(gpu_variants, "ROOT", tmp_path)
    monkeypatch.setattr(gpu_variants, "CACHE", tmp_path / "cache")
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    v = gpu_variants.Variant("fake", ["fake.py", "--x"])
    got = gpu_variants.run(v, out, 0, "measure", [], 60.0)
    assert got["rc"] == 0 and got["bare_throughput_sps"] == 12.5 and got["mfu"] == 0.5
    assert got["profile"].startswith("profile: 3 iterations")
    assert sys.executable in (out / "logs" / "measure-v0.log").read_text()
