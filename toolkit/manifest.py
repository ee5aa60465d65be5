"""What was submitted to Slurm for a results directory: `slurm/jobs.jsonl`, append-only.

One JSON object per line: a `submit` record per sbatch call (job id, script, the (case,
repeats) each array task runs) and a `cancel` record per `toolkit.cancel`. Lines are appended
under an exclusive lock and fsynced, so a crash leaves whole lines and concurrent writers never
interleave; a torn last line is skipped when reading. `toolkit.status` and `toolkit.cancel` read
it; `toolkit.submit` reads it to skip repeats that are already queued.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLURM_DIR = "slurm"
JOBS_FILE = "jobs.jsonl"
LOCK_FILE = ".submit.lock"


@dataclass(frozen=True)
class Entry:
    """One array task (or a whole job when `task` is None) running some repeats of a case."""

    job_id: str
    task: int | None
    case_id: str
    repeats: tuple[int, ...]

    @property
    def slurm_id(self) -> str:
        return self.job_id if self.task is None else f"{self.job_id}_{self.task}"


@dataclass
class Manifest:
    entries: list[Entry] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)
    """Slurm ids (job or job_task) named by a cancel record."""
    scripts: dict[str, str] = field(default_factory=dict)
    """job id -> the script it ran."""

    def latest(self) -> dict[tuple[str, int], Entry]:
        """(case, repeat) -> the most recent entry that runs it."""
        out: dict[tuple[str, int], Entry] = {}
        for e in self.entries:
            for r in e.repeats:
                out[(e.case_id, r)] = e
        return out

    def is_cancelled(self, entry: Entry) -> bool:
        return entry.slurm_id in self.cancelled or entry.job_id in self.cancelled


def jobs_path(root: Path) -> Path:
    return root / SLURM_DIR / JOBS_FILE


def append(root: Path, record: dict[str, Any]) -> None:
    path = jobs_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"time_s": time.time(), **record}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def record_submit(root: Path, job_id: str, script: Path, entries: list[Entry],
                  options: list[str]) -> None:
    append(root, {"type": "submit", "job_id": job_id, "script": str(script),
                  "options": options,
                  "tasks": [{"task": e.task, "case": e.case_id, "repeats": list(e.repeats)}
                            for e in entries]})


def record_cancel(root: Path, slurm_ids: list[str]) -> None:
    append(root, {"type": "cancel", "ids": slurm_ids})


def load(root: Path) -> Manifest:
    m = Manifest()
    try:
        raw = jobs_path(root).read_text()
    except OSError:
        return m
    for line in raw.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if not isinstance(rec, dict):
            continue
        if rec.get("type") == "submit":
            job = str(rec.get("job_id"))
            m.scripts[job] = str(rec.get("script", ""))
            for t in rec.get("tasks", []):
                m.entries.append(Entry(job, t.get("task"), str(t.get("case")),
                                       tuple(int(r) for r in t.get("repeats", []))))
        elif rec.get("type") == "cancel":
            m.cancelled.update(str(i) for i in rec.get("ids", []))
    return m


@contextmanager
def submit_lock(root: Path) -> Iterator[None]:
    """Exclusive per results directory: two submits of one grid never both submit a repeat."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise RuntimeError(f"{root}: another toolkit.submit is running on this results "
                               "directory; wait for it to finish") from err
        yield
    finally:
        os.close(fd)
