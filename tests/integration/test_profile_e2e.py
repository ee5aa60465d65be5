"""The `profile:` grid option end to end on this machine's CPU ranks: only the last repeat, only
the chosen rank, after the timed window; the trace in the run directory, the kernel-time table
in the report. (CPU ranks run no GPU kernels: the figures are all idle; the flow is what is
checked.)"""

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
  profile: {ranks: [1], steps: 2}
"""


def test_last_repeat_is_profiled_on_the_chosen_rank(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text(GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", "g.yaml", "--results", str(out), "--executor", "local"]) == 0
    (case_dir,) = (out / "cases").iterdir()
    assert not list((case_dir / "r0").glob("profile-*"))  # not the last repeat
    assert [p.name for p in (case_dir / "r1").glob("profile-*")] == ["profile-rank001.json"]
    trace = json.loads((case_dir / "r1" / "profile-rank001.json").read_text())
    assert trace["traceEvents"]
    meta = json.loads((case_dir / "r1" / "meta.json").read_text())
    assert "profile" not in meta["ranks"][0]
    assert meta["ranks"][1]["profile"]["steps"] == 2
    assert meta["ranks"][1]["profile"]["trace"] == "profile-rank001.json"
    assert collect.main([str(out), "--quiet"]) == 0
    with (out / "runs.csv").open() as fh:
        runs = {r["repeat"]: r for r in csv.DictReader(fh)}
    assert runs["0"]["status"] == runs["1"]["status"] == "ok"
    assert runs["0"]["profile_step_ms"] == "" and float(runs["1"]["profile_step_ms"]) > 0
    assert runs["1"]["profile_rank"] == "1"
    report = (out / "report.md").read_text()
    assert "## Where the GPU time goes (profiled runs)" in report
