"""Damaged result files never crash collect: it exits 0, lists each damaged file in report.md
("Result files not read") with the reason, marks the runs that needed it failed/incomplete with
the reason, and still makes the tables of the good runs.

The starting point is a real results directory (tests/data/results_quickstart: the CPU
quickstart's BERT cases, 2 x 2 runs, see its SOURCE.md); each test corrupts a copy.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit import collect
from toolkit.results.runs import read_run
from toolkit.spec import Case

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "results_quickstart"
C1 = "bert_base-torch-fp32-1n1g-bs8"
C2 = "bert_base-torch-fp32-1n2g-bs8"
#: What the untouched copy gives (samples/s, as recorded when the runs were made).
BASELINE = {(C1, 0): 327.0, (C1, 1): 409.2, (C2, 0): 390.9, (C2, 1): 370.9}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("SOURCE.md"))
    return root


def run_collect(root: Path, capsys: pytest.CaptureFixture[str], *extra: str
                ) -> tuple[int, str, dict[tuple[str, int], dict[str, str]], str]:
    rc = collect.main([str(root), "--no-plots", "--quiet", "--jobs", "1", *extra])
    err = capsys.readouterr().err
    out = Path(extra[extra.index("--out") + 1]) if "--out" in extra else root
    report = (out / "report.md").read_text()
    with (out / "runs.csv").open() as fh:
        rows = {(r["case_id"], int(r["repeat"])): r for r in csv.DictReader(fh)}
    return rc, report, rows, err


def section(report: str, heading: str) -> str:
    start = report.index(f"## {heading}")
    end = report.find("\n## ", start + 1)
    return report[start:end if end > 0 else None]


def test_the_untouched_copy_gives_the_recorded_figures(results, capsys):
    rc, report, rows, err = run_collect(results, capsys)
    assert rc == 0 and "Result files not read" not in report and "not read" not in err
    for key, sps in BASELINE.items():
        assert rows[key]["status"] == "ok"
        assert round(float(rows[key]["throughput_sps"]), 1) == sps


def _cut_mid_line(path: Path) -> None:
    data = path.read_bytes()
    at = data.index(b'"iteration":8')  # inside an iter line, not at a line end
    path.write_bytes(data[:at])


def _replace(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


def _edit_line(path: Path, iteration: int, old: bytes, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    i = next(i for i, ln in enumerate(lines) if f'"iteration":{iteration},'.encode() in ln)
    assert old in lines[i]
    lines[i] = lines[i].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))


def _set_elapsed(path: Path, iteration: int, literal: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    i = next(i for i, ln in enumerate(lines) if f'"iteration":{iteration},'.encode() in ln)
    rec = json.loads(lines[i])
    lines[i] = lines[i].replace(json.dumps(rec["elapsed_s"]).encode(), literal, 1)
    path.write_bytes(b"\n".join(lines))


R = f"cases/{C2}/r1"
Corruption = Callable[[Path], None]
# (id, file under the results dir, how it is damaged, reason in the report, status of run
#  C2 r1 afterwards: None = the run is not counted at all, "ok" = its figure stays)
CASES: list[tuple[str, str, Corruption, str, str | None]] = [
    ("rank cut mid-line", f"{R}/rank001.jsonl", _cut_mid_line,
     "line(s) not readable as events, skipped (first: line 9: cut short or not JSON)",
     "incomplete"),
    ("rank binary garbage", f"{R}/rank001.jsonl",
     lambda p: _replace(p, random.Random(7).randbytes(3000)), "not readable as events",
     "incomplete"),
    ("rank empty", f"{R}/rank001.jsonl", lambda p: _replace(p, b""), "empty file",
     "incomplete"),
    ("rank zero-filled block", f"{R}/rank000.jsonl",
     lambda p: _replace(p, p.read_bytes()[:900] + b"\0" * 1200 + p.read_bytes()[2100:]),
     "NUL bytes", "incomplete"),
    ("rank invalid utf-8", f"{R}/rank000.jsonl",
     lambda p: _edit_line(p, 5, b'"warmup"', b'"warm\xff\xfeup"'), "line 6: not UTF-8",
     "incomplete"),
    ("rank a directory", f"{R}/rank001.jsonl", _directory, "a directory, not a file",
     "incomplete"),
    ("rank a fifo", f"{R}/rank001.jsonl", lambda p: (p.unlink(), os.mkfifo(p)),
     "not a regular file", "incomplete"),
    ("elapsed infinite", f"{R}/rank001.jsonl", lambda p: _set_elapsed(p, 13, b"1e400"),
     "", "incomplete"),
    ("elapsed NaN", f"{R}/rank000.jsonl", lambda p: _set_elapsed(p, 3, b"NaN"), "",
     "incomplete"),
    ("elapsed a 400-digit integer", f"{R}/rank000.jsonl",
     lambda p: _set_elapsed(p, 13, b"9" * 400), "", "incomplete"),
    ("status half written", f"{R}/status.json",
     lambda p: _replace(p, p.read_bytes()[:200]), "not valid JSON (cut short or garbled",
     "incomplete"),
    ("status NUL bytes", f"{R}/status.json", lambda p: _replace(p, b"\0" * 512),
     "not valid JSON", "incomplete"),
    ("status not an object", f"{R}/status.json", lambda p: _replace(p, b'["ok"]'),
     "not a JSON object (a list)", "incomplete"),
    ("status a directory", f"{R}/status.json", _directory, "a directory, not a file",
     "incomplete"),
    ("meta half written", f"{R}/meta.json", lambda p: _replace(p, p.read_bytes()[:300]),
     "not valid JSON (cut short or garbled", "ok"),
    ("meta invalid utf-8", f"{R}/meta.json", lambda p: _replace(p, b"\xff" + p.read_bytes()),
     "not UTF-8 text", "ok"),
    ("meta a directory", f"{R}/meta.json", _directory, "a directory, not a file", "ok"),
    ("case half written", f"cases/{C2}/case.json", lambda p: _replace(p, p.read_bytes()[:500]),
     "its 2 run(s) are not counted", None),
    ("case a directory", f"cases/{C2}/case.json", _directory, "a directory, not a file", None),
    ("case without its case", f"cases/{C2}/case.json",
     lambda p: _replace(p, b'{"id": "x", "case": 3}'), "expected a JSON object", None),
    ("case with an unknown key", f"cases/{C2}/case.json",
     lambda p: _replace(p, p.read_bytes().replace(b'"seed"', b'"sed"')),
     "not a valid case (key `case.sed`: unknown key", None),
    ("case with a hostile id", f"cases/{C2}/case.json",
     lambda p: _replace(p, p.read_bytes().replace(f'"id": "{C2}"'.encode(), b'"id": "../x|\\n"')),
     "no case id (key `id`: expected a case id", None),
    ("a run that is a file", f"cases/{C2}/r7", lambda p: _replace(p, b"x"), "not a directory",
     "ok"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,rel,damage,reason,status", CASES, ids=[c[0] for c in CASES])
def test_collect_survives_a_damaged_file(results, capsys, name, rel, damage, reason, status):
    bad = results / rel
    damage(bad)
    rc, report, rows, err = run_collect(results, capsys)
    assert rc == 0
    key = (C2, 1)
    if reason:  # the file is listed, with the path and why, in the report and on stderr
        listing = section(report, "Result files not read")
        assert f"| {bad} | " in listing and reason in listing, listing
        assert f"not read {bad}: " in err
    if status is None:  # the whole case is out: its runs are not in the tables
        assert not any(k[0] == C2 for k in rows)
    else:
        assert rows[key]["status"] == status
        if status == "ok":
            assert round(float(rows[key]["throughput_sps"]), 1) == BASELINE[key]
        else:
            assert rows[key]["throughput_sps"] == ""  # no half-parsed figure
            failed = section(report, "Failed runs")
            assert f"| {C2} | 1 | {status} | " in failed
            assert rows[key]["error"]
    # every other run keeps its figure, and the 1-rank case its table row
    for other, sps in BASELINE.items():
        if other[0] == C2 and (status is None or other == key):
            continue
        assert rows[other]["status"] == "ok", rows[other]["error"]
        assert round(float(rows[other]["throughput_sps"]), 1) == sps
    median = (float(rows[(C1, 0)]["throughput_sps"]) + float(rows[(C1, 1)]["throughput_sps"])) / 2
    # the recorded 1-rank repeats differ by 22%: the median carries the spread mark
    assert f"| 1 | 1 | 8 | {median:.1f} ⚠ | 1.00 |" in section(report, "Throughput and speedup")


@pytest.mark.timeout(60)
def test_a_case_file_with_a_huge_world_size_is_read_without_enumerating_it(results, capsys):
    """case.json says 4 x 10^17 nodes: the missing ranks are described, not listed one by one
    (that took all memory)."""
    path = results / "cases" / C2 / "case.json"
    path.write_bytes(path.read_bytes().replace(b'"num_nodes": 1', b'"num_nodes": 4' + b"0" * 17))
    rc, _, rows, _ = run_collect(results, capsys)
    assert rc == 0
    for k in (0, 1):
        assert rows[(C2, k)]["status"] == "incomplete"
        assert "no rank file for rank(s) 2-799999999999999999" in rows[(C2, k)]["error"]
    assert rows[(C1, 0)]["status"] == "ok"


def test_a_complete_run_with_a_torn_last_line_keeps_its_figure(results, capsys):
    """A rank killed while writing after its `end` record: every iteration is there, so the
    run counts; the torn line is listed."""
    path = results / R / "rank001.jsonl"
    path.write_bytes(path.read_bytes() + b'{"schema":1,"type":"telemetry","ti')
    rc, report, rows, _ = run_collect(results, capsys)
    assert rc == 0 and rows[(C2, 1)]["status"] == "ok"
    assert round(float(rows[(C2, 1)]["throughput_sps"]), 1) == BASELINE[(C2, 1)]
    assert rows[(C2, 1)]["unreadable_lines"] == "1"
    assert f"| {path} | 1 line(s) not readable" in section(report, "Result files not read")


def test_everything_damaged_still_writes_a_report(results, capsys):
    for case in (C1, C2):
        (results / "cases" / case / "case.json").write_bytes(b"\0\0\0")
    rc, report, rows, err = run_collect(results, capsys)
    assert rc == 0 and rows == {} and err.count("not read ") == 2
    listing = section(report, "Result files not read")
    assert all(f"cases/{c}/case.json | not valid JSON" in listing for c in (C1, C2))


# -- foreign logs (--import-logs) ---------------------------------------------------------------

def test_import_logs_lists_broken_logs_and_imports_the_rest(tmp_path, capsys):
    tree = tmp_path / "logs"
    shutil.copytree(ROOT / "tests" / "data" / "dlperf_tree" / "1n1g", tree / "1n1g")
    good = sorted((tree / "1n1g").glob("*.log"))
    text = good[0].read_bytes()
    broken = tree / "1n8g"
    broken.mkdir()
    (broken / "rn50_b128_fp32_1.log").write_bytes(random.Random(3).randbytes(4000))
    (broken / "rn50_b128_fp32_2.log").write_bytes(b"")
    (broken / "rn50_b128_fp32_3.log").write_bytes(text[:len(text) // 3])
    (broken / "rn50_b128_fp32_4.log").write_bytes(text.replace(b"\n", b"\n\0", 3))
    (broken / "rn50_b128_fp32_5.log").write_bytes(b"\xff\xfe" * 500)
    os.mkfifo(broken / "rn50_b128_fp32_6.log")
    (broken / "rn50_b128_fp32_7.log").mkdir()  # a directory named like a log: walked into
    out = tmp_path / "out"
    rc, report, rows, err = run_collect_import(tree, out, capsys)
    assert rc == 0 and f"not imported {broken / 'rn50_b128_fp32_6.log'}: " in err
    listing = section(report, "Log files not imported")
    for i, reason in ((1, "binary file (NUL bytes)"), (2, "empty file"),
                      (4, "binary file (NUL bytes)"), (5, "no known log format"),
                      (6, "not a regular file")):
        assert f"| {broken / f'rn50_b128_fp32_{i}.log'} | {reason}" in listing, listing
    ok = [r for k, r in rows.items() if r["num_nodes"] == "1" and r["gpus_per_node"] == "1"]
    assert len(ok) == 5 and all(r["status"] == "ok" for r in ok)
    table = section(report, "Throughput and speedup")
    assert "| 1 | 1 | 128 | 321.8 | 1.00 |" in table  # DLPerf's published 1n1g median


def run_collect_import(tree: Path, out: Path, capsys: pytest.CaptureFixture[str]
                       ) -> tuple[int, str, dict[tuple[str, int], dict[str, str]], str]:
    rc = collect.main(["--import-logs", str(tree), "--out", str(out), "--no-plots", "--quiet"])
    err = capsys.readouterr().err
    with (out / "runs.csv").open() as fh:
        rows = {(r["case_id"], int(r["repeat"])): r for r in csv.DictReader(fh)}
    return rc, (out / "report.md").read_text(), rows, err


# -- any damage to the rank files (hypothesis) --------------------------------------------------

RUN = DATA / "cases" / C2 / "r0"
CASE = Case.from_dict(json.loads((DATA / "cases" / C2 / "case.json").read_text())["case"])
LINES = {name: (RUN / name).read_bytes().splitlines(keepends=True)
         for name in ("rank000.jsonl", "rank001.jsonl")}
WEIRD = [b"9" * 400, b"1e400", b"-1e400", b"NaN", b"Infinity", b"-0", b"null", b'"x"', b"[]",
         b"{}", b"true", b"-5", b"1e-400", b'"\\ud800"']


@st.composite
def damaged_line(draw: st.DrawFn, line: bytes) -> bytes:
    kind = draw(st.sampled_from(["keep", "keep", "keep", "cut", "bytes", "value", "record",
                                 "drop"]))
    if kind == "cut":
        return line[:draw(st.integers(0, len(line)))]
    if kind == "bytes":
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(st.binary(max_size=6)) + line[at:]
    if kind == "drop":
        return b""
    if kind == "record":
        return draw(st.sampled_from([
            b"[1, 2]\n", b'"text"\n', b'{"type": ["iter"]}\n', b'{"type": "iter"}\n',
            b'{"type":"iter","iteration":1e300}\n', b'{"type":"iter","iteration":-1}\n',
            b'{"type":"summary","telemetry":[1],"device":{"a":1}}\n',
            b'{"type":"telemetry","time_s":"x","power_w":1e400}\n', b'{"type":"error"}\n',
            b'{"type":"iter","iteration":13,"elapsed_s":"0.5"}\n']))
    if kind == "value":
        rec = json.loads(line)
        old = json.dumps(rec[draw(st.sampled_from(sorted(rec)))]).encode()
        return line.replace(old, draw(st.sampled_from(WEIRD)), 1) if old in line else line
    return line


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_read_run_never_raises_and_never_gives_a_half_figure(tmp_path_factory, data):
    run = tmp_path_factory.mktemp("r")
    for name, lines in LINES.items():
        (run / name).write_bytes(b"".join(data.draw(damaged_line(ln)) for ln in lines))
    status = (RUN / "status.json").read_bytes()
    (run / "status.json").write_bytes(data.draw(st.sampled_from(
        [status, status[:len(status) // 2], b"[]", b'{"status": "ok", "log": {"a": 1}}'])))
    row = read_run(run, C2, CASE, 0)
    for key, value in row.to_dict().items():
        assert not isinstance(value, float) or math.isfinite(value), (key, value)
    if row.status == "ok":
        assert row.throughput_sps is not None and row.throughput_sps > 0 and not row.error
    else:
        assert row.throughput_sps is None and row.error
    assert all(path.startswith(str(run)) and why for path, why in row.skipped_files)
