"""Submitting under a submission limit (MaxSubmitJobs): queue here, submit as slots free.

Slurm refuses an sbatch that would take this user past a submission limit
("AssocMaxSubmitJobLimit", "QOSMaxSubmitJobPerUserLimit"); a job array of K tasks counts as K
jobs. :func:`submit_queued` keeps what Slurm has not taken yet queued in this process and submits
it as slots free, each accepted piece handed to ``accepted`` at once (which records it), so
nothing accepted is ever submitted again:

- A refused array is cut (:func:`split`: a subset ``--array=`` of its tasks; case-scope arrays of
  repeats and grid-scope ``slurm/array-NNNN.sh`` alike) and the first half tried, down to one task.
- One task refused means we are at the limit. The limit is then taken as the number of this
  user's active jobs (``squeue -r --me``) right after that refusal, and we poll that count with
  back-off until it drops below; the pieces submitted then fill exactly the slots that freed,
  then one more single task probes whether the limit is higher (one refused sbatch per round).

Why discovered rather than read: the limit that bites is the smallest of the user's association,
its parent accounts, the QOS's MaxSubmitJobsPerUser and the partition QOS, any of which may change
while we wait, and PrivateData may hide them; Slurm's refusal is the one authority. Reading it
(``scontrol show assoc_mgr``) would save only the few refused sbatch calls of the first round.

Pure logic over :class:`toolkit.launch.slurm_client.SlurmClient` (its runner is the test seam); the
progress bar and the ledger are the caller's (`toolkit.launch.slurm_submit.submit_slurm`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from toolkit.launch.slurm_client import SchedulerError, SlurmClient

FIRST_POLL_S = 1.0
MAX_POLL_S = 30.0


def array_spec(tasks: Sequence[int]) -> str:
    """Slurm's --array syntax for these task ids, runs folded: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
    parts: list[str] = []
    ids = sorted(set(tasks))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def jobs(sub: Submission) -> int:
    """What the submission counts as against MaxSubmitJobs: its array tasks, or 1."""
    return 1 if sub.tasks[0][0] is None else len(sub.tasks)


def runs(sub: Submission) -> int:
    return sum(len(reps) for _, _, reps in sub.tasks)


def with_tasks(sub: Submission, tasks: Sequence[tuple[int | None, str, tuple[int, ...]]]
               ) -> Submission:
    """The same sbatch call for a subset of its array tasks (``--array=`` on the command line
    overrides the script's own ``#SBATCH --array``)."""
    ids = [t for t, _, _ in tasks]
    if any(t is None for t in ids):
        raise ValueError(f"{sub.script}: a job without array tasks cannot be split")
    options = tuple(o for o in sub.options if not o.startswith("--array="))
    return replace(sub, options=(f"--array={array_spec([t for t in ids if t is not None])}"
                                 f"{array_cap(sub.array_parallelism)}", *options),
                   tasks=tuple(tasks))


def split(sub: Submission, n: int) -> tuple[Submission, Submission | None]:
    """(the first n array tasks, the rest or None). A job without tasks, or n >= its size, is
    returned whole."""
    if n < 1:
        raise ValueError(f"cannot split off {n} tasks")
    if n >= len(sub.tasks) or sub.tasks[0][0] is None:
        return sub, None
    return with_tasks(sub, sub.tasks[:n]), with_tasks(sub, sub.tasks[n:])


@dataclass
class Stats:
    jobs_submitted: int = 0
    """Accepted sbatch calls."""
    refused: int = 0
    """sbatch calls refused for the limit."""
    waits: int = 0
    """Polls of squeue while at the limit."""
    waited_s: float = 0.0
    limit: int | None = None
    """The limit as last measured (our active jobs when one task was refused); None: never hit."""
    max_active_seen: int = 0


class LimitTooLow(SchedulerError):
    """Slurm refuses a single job while none of ours is queued: waiting cannot help."""


def submit_queued(subs: Sequence[Submission], slurm: SlurmClient,
                  accepted: Callable[[Submission, str], None],
                  waiting: Callable[[int, int], None] = lambda active, left: None,
                  sleep: Callable[[float], None] = time.sleep,
                  first_poll_s: float = FIRST_POLL_S, max_poll_s: float = MAX_POLL_S,
                  clock: Callable[[], float] = time.monotonic,
                  intent: Callable[[Submission], str | None] = lambda piece: None,
                  refused: Callable[[Submission], None] = lambda piece: None) -> Stats:
    """Submit every submission, or the pieces of it, in order. ``intent(piece)`` runs before
    each sbatch and returns its tag (``Slurm.sbatch``; the caller records it first);
    ``accepted(piece, job_id)`` runs for each accepted sbatch before anything else happens (a
    Ctrl-C then is deferred until it returns, see :func:`deferred_interrupt`);
    ``refused(piece)`` when Slurm certainly queued nothing for it; ``waiting(active,
    runs_left)`` before each sleep at the limit. Errors other than the limit raise
    :class:`SchedulerError` at once (what was accepted has been handed to ``accepted``)."""
    queue = deque(subs)
    stats = Stats()
    cap: int | None = None        # largest piece to try (halved on a refusal)
    expected = 0                  # our active jobs: last poll + accepted since
    left = sum(runs(s) for s in subs)
    while queue:
        sub = queue.popleft()
        size = jobs(sub)
        want = size if cap is None else min(size, cap)
        if stats.limit is not None:
            want = min(want, max(1, stats.limit - expected))  # 1: the probe beyond the estimate
        piece, rest = split(sub, want)
        try:
            with deferred_interrupt():
                tag = intent(piece)
                job_id = slurm.sbatch(str(piece.script), piece.options, piece.args, tag=tag,
                                      comment=piece.comment)
                accepted(piece, job_id)
        except SchedulerError as e:
            if not e.limit:
                if not e.unsure:
                    refused(piece)
                raise
            stats.refused += 1
            queue.appendleft(sub)
            n = jobs(piece)
            if n > 1:
                refused(piece)
                cap = n // 2
                continue
            # One task refused: at the limit. Measure it at once (our jobs may end meanwhile,
            # and the count would then fall short of the limit), record the refusal, then wait
            # for a slot.
            active = slurm.active_jobs()
            refused(piece)
            if active == 0:
                raise LimitTooLow(e.argv, f"{e.message}\nSlurm refuses even one job while none "
                                          "of yours is queued: the limit is below one job "
                                          "(ask the administrators)", limit=True) from e
            stats.limit = active
            stats.max_active_seen = max(stats.max_active_seen, active)
            expected = _wait_for_slot(slurm, stats, left, waiting, sleep, first_poll_s,
                                      max_poll_s, clock)
            cap = None
            continue
        stats.jobs_submitted += 1
        expected += jobs(piece)
        left -= runs(piece)
        if rest is not None:
            queue.appendleft(rest)
    return stats


def _wait_for_slot(slurm: SlurmClient, stats: Stats, left: int, waiting: Callable[[int, int], None],
                   sleep: Callable[[float], None], first_poll_s: float, max_poll_s: float,
                   clock: Callable[[], float]) -> int:
    """Poll our active jobs with back-off until one is below the limit (or the back-off is at
    its longest: then try anyway, in case the limit counts jobs squeue --me does not show,
    such as other users' under a group limit). Returns the active count last seen."""
    assert stats.limit is not None
    delay = first_poll_s
    active = stats.limit
    start = clock()
    while True:
        waiting(active, left)
        stats.waits += 1
        sleep(delay)
        active = slurm.active_jobs()
        stats.max_active_seen = max(stats.max_active_seen, active)
        if active < stats.limit or delay >= max_poll_s:
            stats.waited_s += clock() - start
            return active
        delay = min(delay * 2, max_poll_s)


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block ends, then raise KeyboardInterrupt: an sbatch the
    controller accepted is always recorded. Only in the main thread (where signals arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt  # also when the block raised: the user asked to stop


@dataclass(frozen=True)
class Submission:
    """One sbatch call: the script, its extra command-line options and arguments, and what
    each array task (or the job, task None) runs."""

    script: Path
    options: tuple[str, ...]
    args: tuple[str, ...]
    tasks: tuple[tuple[int | None, str, tuple[int, ...]], ...]
    """(array task or None, case id, repeats)."""
    comment: str = ""
    """The grid's own --comment (extra_sbatch): sbatch's tag goes after it."""
    array_parallelism: int | None = None
    """slurm.array_parallelism: a subset `--array=` made of this call keeps its `%K`."""

    def command(self) -> list[str]:
        return ["sbatch", *self.options, str(self.script), *self.args]


def array_cap(k: int | None) -> str:
    """`%K` for --array when slurm.array_parallelism caps the tasks running at once."""
    return f"%{k}" if k else ""
