"""The per-rank event writer: appends records of the event schema (`toolkit.results.schema`)
to `rank<NNN>.jsonl`, one JSON object per line. This module only writes; the reader is
`toolkit.results.runs`."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import IO, Any

from toolkit.results.safe_write import open_file
from toolkit.results.schema import SCHEMA, Event


class EventWriter:
    """Appends records to `rank<NNN>.jsonl`, one flushed line per record, so that a crash
    loses at most the record being written."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        # never through a symbolic link planted in the run directory
        fd = open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, root=path.parent)
        self._fh: IO[str] | None = os.fdopen(fd, "a", buffering=1)
        self._lock = threading.Lock()  # the NVML sampler thread writes too

    def write(self, kind: Event, **fields: Any) -> None:
        """One record; `kind` must be an event of the schema (a misspelt one raises)."""
        record = {"schema": SCHEMA, "type": Event(kind).value, "rank": self.rank,
                  "time_s": time.time()}
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

