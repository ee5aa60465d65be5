"""What was submitted to Slurm for a results directory: `slurm/jobs.jsonl`, append-only.

One JSON object per line: a `submit` record per sbatch call (job id, script, the (case,
repeats) each array task runs) and a `cancel` record per `toolkit.cancel`. Lines are appended
under an exclusive lock and fsynced, so a crash leaves whole lines and concurrent writers never
interleave; a torn last line is skipped when reading. `toolkit.status` and `toolkit.cancel` read
it; `toolkit.submit` reads it to skip repeats that are already queued.

Write-ahead: before each sbatch an `intent` record names its tag (the job's comment, see
`Slurm.sbatch`); the `submit` record carries the tag, and a `void` record closes an intent whose
sbatch Slurm refused. An intent left open (sbatch timed out and squeue did not answer, or the
process died in between) is settled by the next submit (`settle`): the job Slurm lists under the
tag is adopted, else the intent is void. So no run is ever submitted twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers import logtext
from toolkit.launch.slurm_client import SlurmClient, holds_on_purpose
from toolkit.results.layout import JOBS_FILE, LOCK_FILE, SLURM_DIR
from toolkit.results.safe_write import open_file


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


@dataclass(frozen=True)
class Intent:
    """An sbatch call about to be made: what it runs, under which tag."""

    token: str
    script: str
    options: tuple[str, ...]
    tasks: tuple[tuple[int | None, str, tuple[int, ...]], ...]
    """(array task or None, case id, repeats)."""

    def entries(self, job_id: str) -> list[Entry]:
        return [Entry(job_id, t, cid, reps) for t, cid, reps in self.tasks]


@dataclass
class JobLedger:
    intents: dict[str, Intent] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)
    """Tokens of intents closed by a submit or void record."""
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

    @property
    def unconfirmed(self) -> dict[str, Intent]:
        """Intents whose sbatch may or may not have queued a job."""
        return {t: i for t, i in self.intents.items() if t not in self.settled}

    def adopting(self, found: dict[str, str]) -> JobLedger:
        """A copy in which the unconfirmed intents in `found` ({token: job id}) are submits."""
        out = JobLedger(dict(self.intents), set(self.settled), list(self.entries),
                       set(self.cancelled), dict(self.scripts))
        for token, job_id in found.items():
            intent = self.unconfirmed.get(token)
            if intent is not None:
                out.settled.add(token)
                out.entries += intent.entries(job_id)
                out.scripts[job_id] = intent.script
        return out


def jobs_path(root: Path) -> Path:
    return root / SLURM_DIR / JOBS_FILE


def append(root: Path, record: dict[str, Any]) -> None:
    line = json.dumps({"time_s": time.time(), **record}, sort_keys=True) + "\n"
    fd = open_file(jobs_path(root), os.O_WRONLY | os.O_APPEND | os.O_CREAT, root=root,
                   mode=0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _tasks(tasks: Iterable[tuple[int | None, str, tuple[int, ...]]]) -> list[dict[str, Any]]:
    return [{"task": t, "case": cid, "repeats": list(reps)} for t, cid, reps in tasks]


def new_token() -> str:
    return uuid.uuid4().hex


def record_intent(root: Path, token: str, script: Path, options: list[str],
                  tasks: Iterable[tuple[int | None, str, tuple[int, ...]]]) -> None:
    append(root, {"type": "intent", "token": token, "script": str(script), "options": options,
                  "tasks": _tasks(tasks)})


def record_submit(root: Path, job_id: str, script: Path, entries: list[Entry],
                  options: list[str], token: str | None = None, adopted: bool = False) -> None:
    rec: dict[str, Any] = {"type": "submit", "job_id": job_id, "script": str(script),
                           "options": options,
                           "tasks": _tasks((e.task, e.case_id, e.repeats) for e in entries)}
    if token:
        rec["token"] = token
    if adopted:
        rec["adopted"] = True  # found by its tag after the sbatch call itself failed
    append(root, rec)


def record_void(root: Path, token: str, why: str) -> None:
    append(root, {"type": "void", "token": token, "why": why})


def with_tagged(m: JobLedger, slurm: SlurmClient) -> JobLedger:
    """`m` with the jobs Slurm lists under its unconfirmed tags as submits, in memory (status
    and cancel; only a submit, under its lock, writes them). Raises SchedulerError."""
    if not m.unconfirmed:
        return m
    found = slurm.tagged_jobs(m.unconfirmed)
    return m.adopting({t: min(ids, key=int) for t, ids in found.items()})


def settle(root: Path, slurm: SlurmClient) -> list[str]:
    """Decide every unconfirmed intent (under the submit lock): the job Slurm lists under its
    tag becomes a submit record (twins, if any, are cancelled); none listed -> void (a job that
    ran and left the queue meanwhile wrote its run's status, which the caller reads next).
    Returns a line per adopted job. Raises SchedulerError when squeue does not answer, or the
    adopted job cannot be released (its intent then stays open for the next submit)."""
    m = load(root)
    open_ = m.unconfirmed
    if not open_:
        return []
    found = slurm.tagged_jobs(open_)
    said = []
    for token, intent in open_.items():
        ids = sorted(found.get(token, set()), key=int)
        if not ids:
            record_void(root, token, "no job carries its tag")
            continue
        job = slurm.keep_earliest(ids, holds_on_purpose(intent.script, intent.options))
        record_submit(root, job, Path(intent.script), intent.entries(job),
                      list(intent.options), token=token, adopted=True)
        said.append(f"job {job} ({intent.script}): its sbatch failed, but Slurm had queued "
                    "it; recorded now")
        if ids[1:]:
            said.append(f"cancelled {', '.join(ids[1:])}: a second job of the same sbatch")
    return said


def record_cancel(root: Path, slurm_ids: list[str]) -> None:
    append(root, {"type": "cancel", "ids": slurm_ids})


def load(root: Path) -> JobLedger:
    m = JobLedger()
    try:
        raw = jobs_path(root).read_text()
    except OSError:
        return m
    for line in raw.splitlines():
        try:
            rec = logtext.json_value(line)
        except ValueError:
            continue  # a torn last line
        if not isinstance(rec, dict):
            continue
        kind = rec.get("type")
        if kind in ("submit", "void") and rec.get("token"):
            m.settled.add(str(rec["token"]))
        if kind == "submit":
            job = str(rec.get("job_id"))
            m.scripts[job] = str(rec.get("script", ""))
            for t in rec.get("tasks", []):
                m.entries.append(Entry(job, t.get("task"), str(t.get("case")),
                                       tuple(int(r) for r in t.get("repeats", []))))
        elif kind == "intent" and rec.get("token"):
            m.intents[str(rec["token"])] = Intent(
                str(rec["token"]), str(rec.get("script", "")),
                tuple(str(o) for o in rec.get("options", [])),
                tuple((t.get("task"), str(t.get("case")),
                       tuple(int(r) for r in t.get("repeats", [])))
                      for t in rec.get("tasks", [])))
        elif kind == "cancel":
            m.cancelled.update(str(i) for i in rec.get("ids", []))
    return m


@contextmanager
def submit_lock(root: Path) -> Iterator[None]:
    """Exclusive per results directory: two submits of one grid never both submit a repeat."""
    fd = open_file(root / LOCK_FILE, os.O_WRONLY | os.O_CREAT, root=root, mode=0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise RuntimeError(f"{root}: another toolkit.submit is running on this results "
                               "directory; wait for it to finish") from err
        yield
    finally:
        os.close(fd)
