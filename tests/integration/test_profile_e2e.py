"""The `profile:` grid option end to end on this machine's CPU ranks: only the last repeat, every
chosen rank, after the timed window; each rank's trace in the run directory, a row per profiled
rank in profiles.csv, the kernel-time table in the report. (CPU ranks run no GPU kernels: the
figures are all idle; the flow is what is checked.)"""

from __future__ import annotations

import csv
import json

import pytest

from toolkit import collect, submit

pytestmark = pytest.mark.integration

GRID = """
name: profile_e2e
repeats: 2
base:
  framework: torch
  model: resnet50
  gpus_per_node: 2
  batch_size_per_device: 2
  warmup_iterations: 1
  measured_iterations: 2
  telemetry_interval_ms: 0
  model_config: {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
  profile: {ranks: [0, 1], steps: 2}
"""


def test_last_repeat_is_profiled_on_every_chosen_rank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text(GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", "g.yaml", "--results", str(out), "--executor", "local"]) == 0
    (case_dir,) = (out / "cases").iterdir()
    assert not list((case_dir / "r0").glob("profile-*"))  # not the last repeat
    assert sorted(p.name for p in (case_dir / "r1").glob("profile-*")) == [
        "profile-rank000.json", "profile-rank001.json"]
    trace = json.loads((case_dir / "r1" / "profile-rank001.json").read_text())
    assert trace["traceEvents"]
    meta = json.loads((case_dir / "r1" / "meta.json").read_text())
    for rank in (0, 1):
        assert meta["ranks"][rank]["profile"]["steps"] == 2
        assert meta["ranks"][rank]["profile"]["trace"] == f"profile-rank{rank:03d}.json"
    assert collect.main([str(out), "--quiet"]) == 0
    with (out / "runs.csv").open() as fh:
        runs = {r["repeat"]: r for r in csv.DictReader(fh)}
    assert runs["0"]["status"] == runs["1"]["status"] == "ok"
    assert runs["0"]["profile_step_ms"] == "" and float(runs["1"]["profile_step_ms"]) > 0
    assert runs["1"]["profile_rank"] == "0" and runs["1"]["profile_ranks"] == "2"
    assert runs["1"]["profile_slowest_rank"] in ("0", "1")
    with (out / "profiles.csv").open() as fh:
        profiled = list(csv.DictReader(fh))
    assert [(r["case_id"], r["repeat"], r["rank"]) for r in profiled] == [
        (case_dir.name, "1", "0"), (case_dir.name, "1", "1")]
    for row in profiled:
        assert row["host"] and float(row["profile_step_ms"]) > 0
        assert float(row["profile_idle_ms"]) >= 0 and row["profile_steps"] == "2"
    assert profiled[0]["profile_step_ms"] == runs["1"]["profile_step_ms"]  # the lowest rank's
    report = (out / "report.md").read_text()
    assert "## Where the GPU time goes (profiled runs)" in report
    gpu_time = report.split("## Where the GPU time goes (profiled runs)")[1].split("\n## ")[0]
    assert [line.split(" | ")[2] for line in gpu_time.splitlines()
            if line.startswith(f"| {case_dir.name} |")] == ["0", "1"]  # a line per rank
