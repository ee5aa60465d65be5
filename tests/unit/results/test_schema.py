"""The event schema is the one vocabulary of writer and reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import rank_file
from toolkit.results.runs import read_rank_file
from toolkit.results.schema import COMMON_FIELDS, SCHEMA, Event


def test_a_misspelt_event_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = rank_file(tmp_path, 0)
    with EventWriter(path, 0) as w, pytest.raises(ValueError, match="iteration"):
        w.write("iteration", iteration=1)  # type: ignore[arg-type]
    assert path.read_text() == ""


def test_every_event_written_is_read_back_where_the_reader_keeps_it(tmp_path: Path) -> None:
    path = rank_file(tmp_path, 3)
    with EventWriter(path, 3) as w:
        w.write(Event.START, world_size=4)
        w.write(Event.ITER, iteration=1, elapsed_s=0.5, step_time_s=0.5, samples=8, loss=1.0,
                warmup=False)
        w.write(Event.TELEMETRY, power_w=100.0)
        w.write(Event.PROGRESS, steps=7)
        w.write(Event.SUMMARY, device="cpu")
        w.write(Event.ERROR, message="boom")
        w.write(Event.END, wall_s=1.0)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == [e.value for e in (Event.START, Event.ITER,
                                                              Event.TELEMETRY, Event.PROGRESS,
                                                              Event.SUMMARY, Event.ERROR,
                                                              Event.END)]
    assert all(set(COMMON_FIELDS) <= set(r) and r["schema"] == SCHEMA and r["rank"] == 3
               for r in records)
    log = read_rank_file(path)
    assert log.rank == 3
    assert log.start is not None and log.start["world_size"] == 4
    assert list(log.iterations) == [1]
    assert len(log.telemetry) == 1 and log.summary is not None and log.end is not None
    assert log.progress == 7
    assert [e["message"] for e in log.errors] == ["boom"]
