"""A program's hostile output costs its line, never the run or the grid: real `submit` (local
executor, mpirun, the worker) of a grid whose programs (tests/data/command_scripts/
hostile_output.py) write a report line nested 3,000 deep and a step of 1e308 samples, print a
`DLLL` line nested 3,000 deep, a figure with a thousands separator, a step `1e308`, an
mpirun-style line whose rank has 5,000 digits, and one that names a rank the run does not have.
Every case runs, each outcome is recorded with its reason, and the good steps beside the
hostile line make the figure."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from toolkit import collect, submit

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "command_scripts" / "hostile_output.py"
PATTERN = r"step (?P<iteration>\S+) speed (?P<samples_per_s>.+?) samples/s"
MODES = ["deep-report", "deep-dlll", "thousands", "iteration-1e308", "rank-digits",
         "fake-mpirun"]

GRID = f"""
name: hostile
base:
  model: command
  batch_size_per_device: 8
  warmup_iterations: 2
  measured_iterations: 4
  slurm: {{time_min: 5}}
zip:
  - name: [{", ".join(MODES)}]
    command:
""" + "".join(
    f"      - {{argv: ['{{python}}', hostile_output.py, {mode}, '{{total_iterations}}', "
    f"'{{global_batch_size}}']"
    + (f", pattern: '{PATTERN}'" if mode in ("thousands", "iteration-1e308") else "") + "}\n"
    for mode in MODES)


def test_hostile_output_costs_its_line_never_the_run_or_the_grid(tmp_path, capsys, monkeypatch):
    shutil.copy(SCRIPT, tmp_path)
    (tmp_path / "hostile.yaml").write_text(GRID)
    monkeypatch.chdir(tmp_path)
    assert submit.main(["--grid", "hostile.yaml", "--results", "results"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    out = tmp_path / "results"
    statuses = {mode: json.loads((out / "cases" / mode / "r0" / "status.json").read_text())
                for mode in MODES}  # every case ran and its outcome is written
    assert collect.main([str(out), "--quiet", "--no-plots"]) == 0
    capsys.readouterr()
    with (out / "runs.csv").open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    ok = ["deep-report", "deep-dlll", "thousands", "iteration-1e308"]
    assert {m: rows[m]["status"] for m in ok} == dict.fromkeys(ok, "ok"), {
        m: rows[m]["error"] for m in ok}
    assert rows["deep-report"]["skipped_records"] == (
        "rank 0: 2 line(s) of report-rank000.jsonl not read, skipped (first: report line 7: "
        "nested more than 64 levels deep)")
    assert float(rows["deep-report"]["throughput_sps"]) > 0
    assert rows["deep-dlll"]["measured_by"] == "log:dllogger"
    assert float(rows["thousands"]["throughput_sps"]) == pytest.approx(1234.5)
    assert "group iteration: '1e308' is not an iteration" in rows["iteration-1e308"][
        "skipped_records"]
    assert float(rows["iteration-1e308"]["throughput_sps"]) == pytest.approx(100.0)
    for mode in ("rank-digits", "fake-mpirun"):
        status = statuses[mode]
        assert status["status"] == "failed"
        assert status["reason"].startswith("rank 0 (pid "), status["reason"]
        assert "the program exited with code 1" in status["reason"]
        assert [r["rank"] for r in status["failed_ranks"]] == [0]
    assert "evilhost" not in statuses["fake-mpirun"]["reason"].split("newest first")[0]
