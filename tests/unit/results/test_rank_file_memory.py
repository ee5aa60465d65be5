"""A rank file is read in bounded memory: a chunk at a time, whatever its size, and a line too
long to be a record is skipped without being held."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from toolkit.results import runs
from toolkit.results.runs import read_rank_file

MIB = 1 << 20
START = json.dumps({"schema": 1, "type": "start", "rank": 0, "time_s": 1.0, "world_size": 1})


def _peak_reading(path: Path) -> tuple[runs.RankLog, int]:
    tracemalloc.start()
    try:
        log = read_rank_file(path)
        return log, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture()
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "READ_CHUNK_BYTES", 1 * MIB)
    monkeypatch.setattr(runs, "MAX_RECORD_BYTES", 2 * MIB)


def test_a_large_rank_file_is_read_a_chunk_at_a_time(tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "rank000.jsonl"
    noise = json.dumps({"schema": 1, "type": "note", "rank": 0, "time_s": 1.0, "x": "a" * 1000})
    with path.open("w") as fh:
        fh.write(START + "\n")
        for _ in range(30_000):  # 30 MB of records no reader keeps
            fh.write(noise + "\n")
        fh.write(json.dumps({"schema": 1, "type": "end", "rank": 0, "time_s": 2.0,
                             "wall_s": 1.0}) + "\n")
    log, peak = _peak_reading(path)
    assert log.start is not None and log.end is not None and log.bad_lines == 0
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB to read a 30 MB rank file"


def test_a_line_too_long_to_be_a_record_is_counted_and_skipped_unheld(
        tmp_path: Path, small_chunks: None) -> None:
    path = tmp_path / "rank000.jsonl"
    with path.open("wb") as fh:
        fh.write(START.encode() + b"\n" + b"x" * (30 * MIB) + b"\n")
        fh.write(json.dumps({"schema": 1, "type": "end", "rank": 0, "time_s": 2.0}).encode())
    log, peak = _peak_reading(path)
    assert log.start is not None and log.end is not None
    assert (log.bad_lines, log.first_bad) == (1, f"line 2: longer than {2 * MIB} bytes")
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB to skip a 30 MB line"


def test_line_numbers_and_carriage_returns_read_as_before(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "READ_CHUNK_BYTES", 7)  # lines cut across many chunks
    path = tmp_path / "rank000.jsonl"
    path.write_bytes(START.encode() + b"\r\n\n" + b'{"type": "end"}\r' + b"not json\n"
                     + b'{"type": "error", "message": "x", "n": 12345678901234567890}')
    log = read_rank_file(path)
    assert log.start is not None and log.end is not None
    assert (log.bad_lines, log.first_bad) == (1, "line 4: cut short or not JSON")
    assert log.errors[0]["n"] == 12345678901234567890  # an integer, not orjson's float
