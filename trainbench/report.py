"""Exact figures from a user's own training program, for a `model: command` case:

    from trainbench import report
    for step in range(steps):
        loss = train_step()
        torch.cuda.synchronize()          # the step is over on the device
        report.step(samples=global_batch, loss=loss.item())

Each call appends one `iter` record (the toolkit's event schema: wall-clock `time_s`, the
program's `samples`, `iteration`, `loss`, `step_time_s`) to the file the worker named in
`TRAINBENCH_REPORT_FILE`; the worker reads it when the program exits and times the run by it,
in preference to what the program prints. Outside the toolkit (the variable unset) a call
does nothing, so the program runs unchanged on its own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO

FILE_VARIABLE = "TRAINBENCH_REPORT_FILE"
"""Set by the worker for the program (`toolkit.results.layout.REPORT_EVENTS_VARIABLE`)."""

SCHEMA = 1
"""The event schema's version (`toolkit.results.schema.SCHEMA`)."""

_lock = threading.Lock()
_file: IO[str] | None = None
_count = 0


def step(samples: int | None = None, *, iteration: int | None = None,
         loss: float | None = None, step_time_s: float | None = None) -> None:
    """One training step has finished (synchronise the device first). `samples`: samples of
    the step over all ranks (default: the case's global batch); `iteration`: its number
    (default: one more than the last call's)."""
    global _file, _count
    path = os.environ.get(FILE_VARIABLE)
    if not path:
        return
    now = time.time()
    with _lock:
        _count = iteration if iteration is not None else _count + 1
        record: dict[str, object] = {"schema": SCHEMA, "type": "iter",
                                     "rank": int(os.environ.get("RANK", "0") or 0),
                                     "time_s": now, "iteration": _count}
        for key, value in (("samples", samples), ("loss", loss), ("step_time_s", step_time_s)):
            if value is not None:
                record[key] = value
        if _file is None:
            _file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run
        _file.write(json.dumps(record) + "\n")
        _file.flush()
