"""Collect while a run is still being written: every collect succeeds and reports a consistent
partial state.

A writer thread plays a real run (tests/data/results_quickstart, 2 ranks) into a new repeat the
way the toolkit does it: `lifecycle.begin_run` makes `r2/` and job.json, the ranks append their
event lines (each line in two writes, as a rank killed or preempted mid-line would leave it), and
`lifecycle.record_outcome` decides the run and renames status.json in. Meanwhile collect runs
again and again, and a reader reads its outputs while collect replaces them.
"""

from __future__ import annotations

import ast
import csv
import io
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from toolkit import collect
from toolkit.launch.lifecycle import begin_run, record_outcome
from toolkit.results.layout import CaseDir

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "results_quickstart"
CASE = "bert_base-torch-fp32-1n2g-bs8"
SOURCE_RUN = DATA / "cases" / CASE / "r1"


def _runs(out: Path) -> dict[tuple[str, int], dict[str, str]]:
    with (out / "runs.csv").open() as fh:
        return {(r["case_id"], int(r["repeat"])): r for r in csv.DictReader(fh)}


CHECKPOINTS = (2, 7, 12)
"""Lines at which the writer, with a line half written, waits until one collect has run (so
the partial states are seen however slow the machine is)."""


def _writer(case_dir: Path, pause_s: float, lines_done: threading.Event,
            paused: threading.Event, observed: threading.Event,
            errors: list[BaseException]) -> None:
    try:
        run_dir = begin_run(case_dir, 2)
        streams = {name: (SOURCE_RUN / name).read_bytes().splitlines(keepends=True)
                   for name in ("rank000.jsonl", "rank001.jsonl")}
        handles = {name: (run_dir / name).open("ab", buffering=0) for name in streams}
        try:
            for i in range(max(len(v) for v in streams.values())):
                for name, lines in streams.items():
                    if i < len(lines):
                        half = len(lines[i]) // 2
                        handles[name].write(lines[i][:half])  # a reader may see this half
                        if i in CHECKPOINTS and name == "rank001.jsonl":
                            paused.set()
                            assert observed.wait(60), "no collect ran"
                            observed.clear()
                            paused.clear()
                        time.sleep(pause_s)
                        handles[name].write(lines[i][half:])
        finally:
            for fh in handles.values():
                fh.close()
        lines_done.set()
        time.sleep(0.2)  # collects that see every line but no status.json yet
        record_outcome(case_dir, 2, {"executor": "local", "status": "ok", "returncode": 0})
    except BaseException as err:  # handed to the test thread
        errors.append(err)


def _reader(out: Path, stop: threading.Event, seen: list[int],
            errors: list[BaseException]) -> None:
    """Reads collect's outputs while collect replaces them: always a whole file."""
    try:
        while not stop.is_set():
            for name in ("runs.csv", "report.md"):
                path = out / name
                if not path.exists():
                    continue
                text = path.read_text()
                assert text.endswith("\n"), f"{name} read half written"
                if name == "runs.csv":
                    rows = list(csv.DictReader(io.StringIO(text)))
                    assert rows and all(r["case_id"] for r in rows)
                else:
                    assert text.startswith("# Benchmark report") and "## All Results" in text
                seen[0] += 1
    except BaseException as err:  # handed to the test thread
        errors.append(err)


@pytest.mark.timeout(120)
def test_collect_while_a_run_is_being_written(tmp_path, capsys):
    root = tmp_path / "results"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("SOURCE.md"))
    baseline = collect.main([str(root), "--quiet", "--no-plots", "--jobs", "1"])
    assert baseline == 0
    expected = float(_runs(root)[(CASE, 1)]["throughput_sps"])  # r2 replays r1's events

    errors: list[BaseException] = []
    lines_done, stop = threading.Event(), threading.Event()
    paused, observed = threading.Event(), threading.Event()
    seen_reads = [0]
    writer = threading.Thread(target=_writer, args=(root / "cases" / CASE, 0.002, lines_done,
                                                    paused, observed, errors))
    reader = threading.Thread(target=_reader, args=(root, stop, seen_reads, errors))
    reader.start()
    writer.start()
    states: list[tuple[str, int]] = []
    torn = 0  # collects that met a rank's line half written
    try:
        while True:
            finished = not writer.is_alive()
            was_paused = paused.is_set()
            assert collect.main([str(root), "--quiet", "--no-plots", "--jobs", "1"]) == 0
            if was_paused:
                observed.set()
            rows = _runs(root)
            assert all(rows[(c, k)]["status"] == "ok" for c, k in
                       [(CASE, 0), (CASE, 1)])  # the finished runs never waver
            row = rows.get((CASE, 2))
            if row is not None:
                status_file = root / "cases" / CASE / "r2" / "status.json"
                if row["status"] == "ok":
                    # only with status.json in place, and then with the whole figure
                    assert status_file.exists() and lines_done.is_set()
                    assert float(row["throughput_sps"]) == pytest.approx(expected, rel=1e-12)
                else:
                    assert row["status"] == "incomplete" and row["throughput_sps"] == ""
                    assert "no status.json: the run is still going" in row["error"]
                n = len(re.findall(rb'"type":"iter"', b"".join(
                    p.read_bytes() for p in (root / "cases" / CASE / "r2").glob("rank*"))))
                states.append((row["status"], n))
                torn += row.get("unreadable_lines", "") not in ("", "0")
            if finished:
                break
    finally:
        stop.set()
        writer.join(60)
        reader.join(60)
    capsys.readouterr()
    assert not errors, errors
    assert states[-1][0] == "ok"
    partial = [n for status, n in states if status == "incomplete"]
    assert len(set(partial)) >= 3 and min(partial) < 26, states  # seen while being written
    assert torn > 0, states  # and a line cut in half did not stop it
    assert seen_reads[0] > 0
    # the run ends as any finished run does
    assert CaseDir(root, CASE).finished(2)


# -- the writes that collect relies on are atomic ------------------------------------------------

RESULT_FILES = re.compile(r"STATUS_FILE|META_FILE|CASE_FILE|JOB_FILE|DRY_RUN_FILE|"
                          r"status\.json|meta\.json|case\.json|job\.json")
PLAIN_WRITES = {"write_text", "write_bytes", "open", "dump", "fdopen"}


def test_result_files_are_only_written_through_atomic_write():
    """Every statement in toolkit/ that names status/meta/case/job files and writes uses
    `atomic_write_text`/`atomic_write_json` (write to a temp file, then rename): a reader sees
    the old file or the new one, never half of one."""
    offenders = []
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        if path.name == "results.py":  # where atomic_write_text itself lives
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in PLAIN_WRITES:
                continue
            text = ast.unparse(node)
            mode_w = name != "open" or re.search(r"['\"][wax]b?\+?['\"]", text)
            if mode_w and RESULT_FILES.search(text):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    assert not offenders, offenders
