"""A real local CPU run, archived and read back: the same summary, and its MLLOG exports pass
mlperf-logging's reader and read back through the importer to the run's figure."""

from __future__ import annotations

import csv

import pytest

from parsers.foreign import LogHints
from toolkit import archive, collect, submit
from toolkit.results.importer import import_logs

pytestmark = pytest.mark.integration

GRID = """
name: travel
repeats: 2
base:
  framework: torch
  model: resnet50
  precision: fp32
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 4
  slurm: {time_min: 5}
  model_config: {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
sweep:
  gpus_per_node: [1, 2]
"""


def test_local_run_archives_and_imports_back(tmp_path, capsys, monkeypatch):
    mlp_parser = pytest.importorskip("mlperf_logging.compliance_checker.mlp_parser")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "travel.yaml").write_text(GRID)
    assert submit.main(["--grid", "travel.yaml", "--results", "results"]) == 0
    results = tmp_path / "results"
    assert collect.main([str(results), "--no-plots", "--quiet"]) == 0
    with (results / "runs.csv").open() as fh:
        runs = {(r["case_id"], r["repeat"]): r for r in csv.DictReader(fh)}
    assert len(runs) == 4 and {r["status"] for r in runs.values()} == {"ok"}

    assert archive.main([str(results), "--out", str(tmp_path / "travel.tar.gz")]) == 0
    out = tmp_path / "back"
    assert collect.main(["--import-logs", str(tmp_path / "travel.tar.gz"), "--out", str(out),
                         "--no-plots", "--quiet"]) == 0
    assert (out / "summary.csv").read_text() == (results / "summary.csv").read_text()

    logs = sorted((results / "mllog").rglob("*.log"))
    assert len(logs) == 4
    for log in logs:
        lines, errors = mlp_parser.parse_file(str(log), ruleset="6.1.0")
        assert errors == [] and lines[-1].key == "run_stop"
    imported = import_logs(results / "mllog",
                           hints=LogHints(warmup_iterations=2, measured_iterations=4))
    assert imported.skipped == []
    for row in imported.rows:
        native = runs[(row.case_id, str(row.repeat))]
        assert row.extra["reported_summary_sps"] == float(native["throughput_sps"])
        if row.gpus_per_node == 1:  # one rank: its window is the run's window
            assert row.throughput_sps == pytest.approx(float(native["throughput_sps"]),
                                                       rel=1e-4)
