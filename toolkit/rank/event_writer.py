"""Structured per-rank event log: one JSON object per line, schema-versioned.

Records (every one has `schema`, `type`, `rank`, `time_s` = wall clock, Unix seconds):

- `start`: world, local rank, node, host, device, case id, config hash, repeat.
- `iter`: `iteration` (1-based), `time_s` (wall clock when the device finished it),
  `elapsed_s` (monotonic seconds from one synchronised start to when the device finished it),
  `step_time_s`, `samples` (global samples in the step), `loss`, `warmup` (bool).
- `telemetry`: one sample of the rank's GPU (memory, utilisation, power, clocks).
- `summary`: figures the rank computed at the end (framework peak memory, telemetry summary).
- `end`: the rank finished normally. `error`: it did not (`message`, `traceback`; a hang
  watchdog's error has `watchdog` instead: limit, idle seconds, last iteration, silent peers).

Readers (`toolkit.results.runs`) need no regular expressions. This module only writes.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Any

SCHEMA = 1


class EventWriter:
    """Appends records to `rank<NNN>.jsonl`, one flushed line per record, so that a crash
    loses at most the record being written."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = path.open("a", buffering=1)
        self._lock = threading.Lock()  # the NVML sampler thread writes too

    def write(self, kind: str, **fields: Any) -> None:
        record = {"schema": SCHEMA, "type": kind, "rank": self.rank, "time_s": time.time()}
        record.update(fields)
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._fh is not None:
                self._fh.write(line)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rank_file_name(rank: int) -> str:
    return f"rank{rank:03d}.jsonl"
