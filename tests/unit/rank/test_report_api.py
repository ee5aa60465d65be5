"""`trainbench.report`: what a user's program imports to report exact steps."""

from __future__ import annotations

import json

from toolkit.results import schema
from toolkit.results.layout import REPORT_EVENTS_VARIABLE
from toolkit.workloads.command_output import read_report_lines
from trainbench import report


def test_names_match_the_toolkits():
    assert report.FILE_VARIABLE == REPORT_EVENTS_VARIABLE
    assert report.SCHEMA == schema.SCHEMA


def test_step_writes_iter_events_the_worker_reads(tmp_path, monkeypatch):
    path = tmp_path / "report-rank000.jsonl"
    monkeypatch.setenv(report.FILE_VARIABLE, str(path))
    monkeypatch.setattr(report, "_file", None)
    monkeypatch.setattr(report, "_count", 0)
    report.step(samples=64, loss=2.5)
    report.step(samples=64)
    report.step(samples=32, iteration=10, step_time_s=0.1)
    report._file.close()  # type: ignore[union-attr]
    lines = path.read_bytes().splitlines()
    first = json.loads(lines[0])
    assert first["type"] == schema.Event.ITER.value and first["schema"] == schema.SCHEMA
    records = read_report_lines(lines)
    assert [(r.iteration, r.samples, r.loss, r.step_time_s) for r in records] == [
        (1, 64, 2.5, None), (2, 64, None, None), (10, 32, None, 0.1)]


def test_outside_the_toolkit_it_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(report.FILE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    report.step(samples=1)
    assert list(tmp_path.iterdir()) == []
