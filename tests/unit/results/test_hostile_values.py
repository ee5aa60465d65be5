"""A hostile line or an absurd number costs that line or that value, never a file, a run or a
grid, and never reaches a report as infinity, NaN or a spreadsheet formula.

Each test runs `collect` (the entry point) on real recorded results (the CPU quickstart's,
tests/data/results_quickstart) or real recorded logs (tests/data/logs), with one hostile line
or value put in: a JSON line nested 3,000 deep (Python's decoder raises RecursionError), a
step of 10**400, times that make a finite 1e308 throughput, a case name that is a formula.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from toolkit import collect, compare

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "results_quickstart"
LOGS = ROOT / "tests" / "data" / "logs"
MLLOG = LOGS / "mllog" / "quickstart_1n1g_r0.log"
DLLL = LOGS / "dllogger" / "dllogger_example_resnet_json.log"
C1 = "bert_base-torch-fp32-1n1g-bs8"
C2 = "bert_base-torch-fp32-1n2g-bs8"
DEEP = "[" * 3000 + "]" * 3000
"""One JSON value 6 KB long nested 3,000 deep."""
FORMULA = re.compile(r"^[=+\-@\t\r]")
NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("SOURCE.md"))
    return root


def _collect(*argv: str) -> int:
    return collect.main([*argv, "--no-plots", "--quiet", "--jobs", "1"])


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "runs.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _cells(out: Path) -> list[str]:
    """Every cell of every CSV file collect wrote."""
    cells = []
    for path in [out / "runs.csv", out / "summary.csv", *sorted((out / "tables").glob("*.csv"))]:
        with path.open(newline="") as fh:
            cells += [cell for row in csv.reader(fh) for cell in row]
    return cells


def test_a_rank_file_line_nested_3000_deep_is_a_counted_garbled_line(results, capsys):
    rank = results / "cases" / C1 / "r0" / "rank000.jsonl"
    lines = rank.read_text().splitlines()
    rank.write_text("\n".join([*lines[:5], DEEP, *lines[5:]]) + "\n")
    assert _collect(str(results)) == 0
    assert "Traceback" not in capsys.readouterr().err
    rows = {(r["case_id"], r["repeat"]): r for r in _rows(results)}
    assert len(rows) == 4 and {r["status"] for r in rows.values()} == {"ok"}
    assert round(float(rows[C1, "0"]["throughput_sps"]), 1) == 327.0  # the figure stands
    assert rows[C1, "0"]["unreadable_lines"] == "1"
    assert "line 6: JSON nested more than 64 levels deep" in (results / "report.md").read_text()


def test_a_status_file_nested_3000_deep_is_a_damaged_file_with_its_reason(results, capsys):
    (results / "cases" / C2 / "r1" / "status.json").write_text(DEEP)
    assert _collect(str(results)) == 0
    rows = {(r["case_id"], r["repeat"]): r for r in _rows(results)}
    assert rows[C2, "1"]["status"] != "ok"
    assert "nested more than 64 levels deep" in rows[C2, "1"]["error"]
    assert rows[C1, "0"]["status"] == rows[C2, "0"]["status"] == "ok"


def _mllog_with(tmp_path: Path, name: str, change: dict | None = None,
                insert: str | None = None) -> Path:
    lines = []
    for line in MLLOG.read_text().splitlines():
        event = json.loads(line.removeprefix(":::MLLOG "))
        if change and event["key"] == "trainbench_run":
            event["value"].update(change)
        lines.append(":::MLLOG " + json.dumps(event))
    if insert is not None:
        lines.insert(8, insert)
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_import_logs_keeps_every_log_beside_lines_nested_too_deep_and_a_step_of_10_400(
        tmp_path, capsys):
    """An MLLOG line and a DLLogger `DLLL` line nested 3,000 deep are skipped and counted; a
    DLLogger step of 10**400 is refused with its reason while the other records are read; the
    good log beside them is imported as it is alone."""
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(MLLOG, logs / "good.log")
    _mllog_with(logs, "deep.log", {"repeat": 1}, insert=":::MLLOG " + DEEP)
    dlll = DLLL.read_text().splitlines()
    (logs / "r50_b32_fp32_1.log").write_text("\n".join(
        [*dlll[:9], 'DLLL {"type": "LOG", "step": [0, 7], "data": ' + DEEP + "}",
         *dlll[9:]]) + "\n")
    huge = json.loads(dlll[9].removeprefix("DLLL "))
    huge["step"] = [0, 10**400]
    (logs / "r50_b32_fp32_2.log").write_text(
        "\n".join([*dlll[:12], "DLLL " + json.dumps(huge), *dlll[12:]]) + "\n")
    out = tmp_path / "out"
    assert _collect("--import-logs", str(logs), "--out", str(out), "--nodes", "1",
                    "--gpus-per-node", "1") == 0
    assert "Traceback" not in capsys.readouterr().err
    rows = {r["source"].rsplit("/", 1)[-1]: r for r in _rows(out)}
    assert set(rows) == {"good.log", "deep.log", "r50_b32_fp32_1.log", "r50_b32_fp32_2.log"}
    assert {r["status"] for r in rows.values()} == {"ok"}
    assert rows["deep.log"]["throughput_sps"] == rows["good.log"]["throughput_sps"]
    assert ("1 :::MLLOG line(s) not JSON, skipped (first: line 9: nested more than 64 levels "
            "deep)") in rows["deep.log"]["parse_warnings"]
    assert ("1 DLLL line(s) not JSON or holding a step no run has, skipped (first: line 10: "
            "nested more than 64 levels deep)") in rows["r50_b32_fp32_1.log"]["parse_warnings"]
    assert ("1 DLLL line(s) not JSON or holding a step no run has, skipped (first: line 13: "
            "step [0, 1000") in rows["r50_b32_fp32_2.log"]["parse_warnings"]
    assert rows["r50_b32_fp32_2.log"]["throughput_sps"] == rows["r50_b32_fp32_1.log"][
        "throughput_sps"]


def test_names_that_are_formulas_are_text_in_every_csv(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    _mllog_with(logs, "mllog.log", {"case_id": "=cmd|' /C calc'!A0", "variant": "+1+cmd"})
    shutil.copy(DLLL, logs / '=HYPERLINK("x")_b32_fp32_1.log')
    out = tmp_path / "out"
    assert _collect("--import-logs", str(logs), "--out", str(out), "--nodes", "1",
                    "--gpus-per-node", "1") == 0
    cells = _cells(out)
    assert "'=cmd|' /C calc'!A0" in cells and "'+1+cmd" in cells
    assert any(c.startswith("'=HYPERLINK(\"x\")") for c in cells)
    assert [c for c in cells if FORMULA.match(c) and not NUMBER.match(c)] == []
    runs = _rows(out)
    assert all(float(r["throughput_sps"]) > 0 for r in runs)  # numbers stay numbers


def _absurd_times(path: Path) -> None:
    """Every iteration 1e-310 s after the one before: finite times whose throughput (samples
    over a window of about 1e-308 s) is no finite float."""
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "iter":
            rec["elapsed_s"] = rec["iteration"] * 1e-310
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")


def test_repeats_whose_times_give_an_overflowing_figure_are_refused_and_compare_holds(
        results, tmp_path, capsys):
    for repeat in ("r0", "r1"):
        _absurd_times(results / "cases" / C1 / repeat / "rank000.jsonl")
    assert _collect(str(results)) == 0
    rows = {(r["case_id"], r["repeat"]): r for r in _rows(results)}
    for repeat in ("0", "1"):
        row = rows[C1, repeat]
        assert row["status"] != "ok" and row["throughput_sps"] == ""
        assert "is not a positive finite number of at most 1e+12" in row["error"]
    assert rows[C2, "0"]["status"] == "ok"
    for cell in _cells(results):
        assert cell.lower() not in ("inf", "-inf", "nan"), cell
    good = tmp_path / "good"
    shutil.copytree(DATA, good, ignore=shutil.ignore_patterns("SOURCE.md"))
    assert compare.main([str(good), str(results), "--quiet"]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_summary_figures_never_overflow():
    """The median of two figures at 1.7e308 would be infinite: such a figure is none."""
    from toolkit.analysis.numbers import finite

    assert finite(1.7e308) is None and finite(10**400) is None
    assert finite(1e100) == 1e100 and math.isfinite(finite(-1e100) or 0.0)


def test_a_log_line_with_a_number_of_5000_digits_is_skipped_and_the_log_imported(
        tmp_path, capsys):
    """Python refuses to convert an integer of more than 4,300 digits (ValueError): the line
    that holds one is skipped and counted, never the whole log lost."""
    source = LOGS / "megatron" / "epfllm_issue11.log"
    lines = source.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "iteration      124/" in line)
    lines[at] = lines[at].replace("iteration      124/", f"iteration      {'1' * 5000}/")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "megatron.log").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert _collect("--import-logs", str(logs), "--out", str(out), "--nodes", "1",
                    "--gpus-per-node", "8", "--batch-size", "128") == 0
    assert "Traceback" not in capsys.readouterr().err
    [row] = _rows(out)
    assert row["status"] == "ok" and float(row["throughput_sps"]) > 0
    assert ("1 line(s) holding a number of more than 100 digits skipped (no log prints one)"
            in row["parse_warnings"])
