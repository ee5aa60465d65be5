"""Reading a log costs time linear in its size, whatever the log holds.

Every family's parser, format detection, `collect --import-logs` and `preflight import` get
lines of megabytes built to make a backtracking pattern take hours: one character repeated,
a carriage-return progress bar, and near-misses of the family's own records (a real record
line from `tests/data/logs/` cut short, repeated along one line). Each must finish within a
bound far below what a quadratic pattern needs (Python's `re` took 13 s on 20 KB of one of
them, which is hours on a megabyte).
"""

from __future__ import annotations

import ast
import contextlib
import os
import time
from pathlib import Path

import pytest

from parsers import logtext
from parsers.detect import FAMILIES, detect, parse_path, parse_text
from parsers.foreign import LogHints, LogParseError
from tests.unit.parsers.test_detect import LOGS, SAMPLES

ROOT = Path(__file__).resolve().parents[3]
LINE = 700_000
"""Characters in each adversarial line: under `MAX_LINE_CHARS`, so the readers keep it and
the patterns see it."""
DETECT_LINE = 100_000
"""Characters of each line that detection gets alone (a quadratic pattern takes minutes)."""
BOUND_S = 30.0
"""Seconds one family may take on its several megabytes (measured: under 3 s)."""
HINTS = LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=32)

#: Modules that read or classify a log: only RE2 patterns (`parsers.logtext.compile`).
LOG_READERS = (
    *sorted((ROOT / "parsers").glob("*.py")),
    ROOT / "toolkit/results/importer.py",
    ROOT / "toolkit/results/preflight_import.py",
    ROOT / "toolkit/results/launcher_output.py",
    ROOT / "toolkit/launch/slurm_output.py",
)


def test_no_log_reader_uses_a_backtracking_regex_engine() -> None:
    users = []
    for path in LOG_READERS:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            users += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                      if n in ("re", "regex")]
    assert users == []


def _repeated(text: str, size: int = LINE) -> str:
    return (text * (size // max(1, len(text)) + 1))[:size]


def _near_misses(family: str) -> list[str]:
    """Lines of the family's recorded samples cut short (at a third, half, two thirds), each
    repeated along one line: a pattern that backtracks retries every occurrence from each."""
    lines: list[str] = []
    for relative in SAMPLES[family]:
        text = (LOGS / relative).read_text(encoding="utf-8", errors="replace")
        lines += [ln for ln in text.splitlines()[:400] if any(c.isdigit() for c in ln)]
    chosen = sorted(set(lines), key=len, reverse=True)[:2]
    return [_repeated(ln[:len(ln) * k // 6] + " ", LINE // 2) for ln in chosen for k in (2, 3, 4)]


GENERIC = [
    _repeated(c) for c in ("a", " ", "1", "|", "-", "\t")
] + [
    _repeated(" x ...."), _repeated("a: "), _repeated("Epoch[0] Batch [1] "),
    "DLL 2020-01-01 00:00:00.1 - " + _repeated("a"),
    # a progress bar rewritten with carriage returns, glued to the start of a record
    "\r".join(f" {i % 100:3d}%|{'#' * (i % 40):40s}| {i}/100000 [00:01<00:02, 3.0it/s]"
              for i in range(20_000)) + "\rDLL 2020-01-01 00:00:00.1 - ",
]


def _hostile_text(family: str) -> str:
    return "\n".join([*GENERIC, *_near_misses(family)]) + "\n"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_reads_megabytes_of_hostile_lines_in_linear_time(family: str) -> None:
    text = _hostile_text(family)
    assert len(text) > 5_000_000
    start = time.perf_counter()
    with contextlib.suppress(LogParseError):  # refusing the text is fine; taking hours is not
        parse_text(text, family, HINTS)
    elapsed = time.perf_counter() - start
    assert elapsed < BOUND_S, f"{family}: {elapsed:.1f} s for {len(text)} characters"


@pytest.mark.timeout(300)
def test_detection_reads_near_misses_of_every_family_in_linear_time() -> None:
    """Each line alone, so that no early match spares the signatures after it."""
    lines = {ln[:DETECT_LINE] for ln in GENERIC}
    lines |= {ln[:DETECT_LINE] for family in FAMILIES for ln in _near_misses(family)}
    start = time.perf_counter()
    for line in sorted(lines):
        detect(line)
    elapsed = time.perf_counter() - start
    assert elapsed < BOUND_S, f"{elapsed:.1f} s for {len(lines)} lines"


def test_a_carriage_return_progress_bar_is_many_short_lines(tmp_path: Path) -> None:
    log = tmp_path / "tqdm.log"
    updates = "\r".join(f"{i:3d}%|{'#' * (i % 40):40s}|" for i in range(200_000))
    log.write_text(updates + "\r\nlast line\n")
    read = logtext.read_lines(log)
    assert read.long_lines == 0
    assert read.text.count("\n") == 200_001 and read.text.endswith("\nlast line\n")


def test_an_over_long_line_is_skipped_and_counted(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    with log.open("w") as fh:
        fh.write("first\n" + "x" * (3 * logtext.MAX_LINE_CHARS) + "\nsecond\n"
                 + "y" * (logtext.MAX_LINE_CHARS + 1))
    read = logtext.read_lines(log)
    assert read.text == "first\nsecond\n" and read.long_lines == 2
    exact = tmp_path / "exact.log"
    exact.write_text("z" * 100 + "\n")
    assert logtext.read_lines(exact, max_line_chars=100).text == "z" * 100 + "\n"


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.log"
    with huge.open("wb") as fh:  # sparse: costs no disk
        fh.truncate(logtext.MAX_FILE_BYTES + 1)
    start = time.perf_counter()
    with pytest.raises(LogParseError, match=r"huge\.log: .*more than the limit"):
        parse_path(huge)
    assert time.perf_counter() - start < 1.0
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    with pytest.raises(LogParseError, match="not a regular file"):
        parse_path(fifo)


def test_a_log_of_only_over_long_lines_says_so(tmp_path: Path) -> None:
    log = tmp_path / "1n1g" / "rn50_b32_fp32_1.log"
    log.parent.mkdir()
    log.write_text("DLL " + "9" * (logtext.MAX_LINE_CHARS + 10) + "\n")
    with pytest.raises(LogParseError, match=r"empty file \(1 line\(s\) longer than"):
        parse_path(log)


def test_skipped_lines_are_reported_with_the_parsed_log(tmp_path: Path) -> None:
    sample = LOGS / SAMPLES["oneflow_cnn"][1]
    log = tmp_path / "1n1g" / "resnet50_b128_fp32_1.log"
    log.parent.mkdir()
    log.write_text(sample.read_text() + "q" * (logtext.MAX_LINE_CHARS + 1) + "\n")
    parsed = parse_path(log)
    assert parsed.throughput_sps == parse_path(sample).throughput_sps
    assert any(w.startswith("1 line(s) longer than") for w in parsed.warnings)


# ---------------------------------------------------------------------------------------------
# Through the commands: collect --import-logs and preflight import.

NCCL = Path(__file__).resolve().parents[2] / "data" / "nccl_tests"


@pytest.mark.timeout(300)
def test_collect_import_logs_of_hostile_files_in_linear_time_and_says_what_it_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit import collect

    tree = tmp_path / "logs" / "1n1g"
    tree.mkdir(parents=True)
    over_long = "x" * (3 * logtext.MAX_LINE_CHARS) + "\n"
    good = LOGS / SAMPLES["oneflow_cnn"][1]
    (tree / "resnet50_b128_fp32_1.log").write_text(
        good.read_text() + over_long + "\n".join(_near_misses("oneflow_cnn")) + "\n")
    for family in ("dllogger", "megatron", "horovod", "paddle_bert"):
        (tree / f"{family}_b32_fp32_1.log").write_text(over_long + _hostile_text(family))
    start = time.perf_counter()
    rc = collect.main(["--import-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "out"),
                       "--no-plots", "--no-store", "--quiet"])
    elapsed = time.perf_counter() - start
    assert rc == 0 and elapsed < 4 * BOUND_S, f"{elapsed:.1f} s"
    err = capsys.readouterr().err
    assert "resnet50_b128_fp32_1.log: 1 line(s) longer than 1048576 characters skipped" in err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "imported logs with lines over the limit of 1048576 characters: " in report
    assert "(1 line(s) longer than 1048576 characters skipped" in report  # a file not imported


@pytest.mark.timeout(300)
def test_preflight_import_of_hostile_text_in_linear_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.preflight import main

    sample = (NCCL / "a3mega_allreduce_2n8g_h100.txt").read_text()
    hostile = "\n".join(ln[:300_000] for ln in GENERIC) + "\n"
    near = "\n".join(_repeated(ln[:len(ln) // 2] + " ", 300_000)
                     for ln in sample.splitlines() if ln.strip()[:1] in ("#", "1", "2")) + "\n"
    text = tmp_path / "allreduce.txt"
    text.write_text(hostile + near[:3_000_000] + "y" * (2 * logtext.MAX_LINE_CHARS) + "\n"
                    + sample)
    assert text.stat().st_size > 5_000_000
    start = time.perf_counter()
    rc = main(["import", str(text), "--results", str(tmp_path / "res")])
    elapsed = time.perf_counter() - start
    assert elapsed < 2 * BOUND_S, f"{elapsed:.1f} s"
    err = " ".join(capsys.readouterr().err.split())
    assert "allreduce.txt" in err and "Traceback" not in err
    assert "1 line(s) longer than 1048576 characters skipped" in err
    assert rc in (0, 2, 6, 7)


@pytest.mark.timeout(300)
def test_preflight_import_of_a_hostile_nvidia_smi_dump_in_linear_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.preflight import main

    sample = (NCCL.parent / "nvidia_smi" / "h200_device_580.159.04.txt").read_text()
    head, _, rest = sample.partition("\n")
    hostile = "\n".join(["a" + " " * 300_000 + "b", "    Key" + " " * 300_000 + ": x",
                         *(ln[:300_000] for ln in GENERIC)])
    dump = tmp_path / "gpu0.txt"
    dump.write_text(f"{head}\n{hostile}\n{'z' * (2 * logtext.MAX_LINE_CHARS)}\n{rest}")
    start = time.perf_counter()
    rc = main(["import", str(dump), "--results", str(tmp_path / "res")])
    elapsed = time.perf_counter() - start
    assert elapsed < BOUND_S, f"{elapsed:.1f} s"
    err = " ".join(capsys.readouterr().err.split())
    assert rc in (0, 2, 6, 7) and "gpu0.txt" in err and "Traceback" not in err
    assert "1 line(s) longer than 1048576 characters skipped" in err


def test_preflight_import_refuses_a_document_over_its_limit_before_reading_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.preflight import main

    huge = tmp_path / "allreduce.json"
    with huge.open("wb") as fh:  # sparse past its first byte: costs no disk
        fh.write(b"{")
        fh.truncate(logtext.MAX_DOCUMENT_BYTES + 1)
    start = time.perf_counter()
    assert main(["import", str(huge), "--results", str(tmp_path / "res")]) == 2
    assert time.perf_counter() - start < 5.0
    err = " ".join(capsys.readouterr().err.split())
    assert f"allreduce.json: {logtext.MAX_DOCUMENT_BYTES + 1} bytes, more than the limit" in err
