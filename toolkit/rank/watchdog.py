"""The hang watchdog of one rank: a thread that notices when training stops making progress.

A rank that gets no `iter` event for `watchdog.iteration_s` seconds (or none at all within
`watchdog.first_iteration_s` of its start, which covers model build, torch.compile and data
loading) has hung: a peer stopped, a collective deadlocked, a device stopped answering. The
worker then writes an `error` event with the reason, prints it to stderr and aborts the whole
MPI job, so that no rank waits for the time limit.

Which rank stopped? Data-parallel ranks iterate in lockstep, so the peers of a stopped rank wait
for it inside the same iteration and their iteration counts cannot tell. While it watches, the
thread also beats: it sets its rank file's modification time every `heartbeat_s`. A rank that is
stopped (SIGSTOP, a paused container) or stuck in native code holding the GIL cannot beat, and
the rank whose watchdog fires names the peers that went quiet (`silent_ranks`).

What lives here: the deadline logic (`HangWatchdog`, with the clock injected so that tests need
not wait), its thread, the heartbeat check and `abort_job` (MPI_Abort with a fallback). What to
do when it fires (write the event, abort) is the worker's callback.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HANG_EXIT_CODE = 4
"""The MPI_Abort error code (and exit status) of a rank whose watchdog fired."""


@dataclass(frozen=True)
class Hang:
    """What the watchdog saw when it fired."""

    key: str
    """`iteration_s` or `first_iteration_s`: the limit that was passed."""
    limit_s: float
    idle_s: float
    """Seconds since the last iteration (or since the start, before the first)."""
    last_iteration: int | None
    silent_ranks: dict[int, float | None] = field(default_factory=dict)
    """Peers whose heartbeat stopped: rank -> seconds since their last sign of life (None: no
    rank file at all)."""
    phase: str | None = None
    """The step after training that did not finish (`HangWatchdog.phase`), or None."""

    @property
    def message(self) -> str:
        setting = f"hang watchdog, watchdog.{self.key}={self.limit_s:g}"
        if self.phase is not None:
            text = (f"{self.phase} did not finish within {self.idle_s:.0f} s ({setting}); last "
                    f"iteration {self.last_iteration}")
        elif self.last_iteration is None:
            text = f"no first iteration within {self.idle_s:.0f} s of the start ({setting})"
        else:
            text = (f"no iteration for {self.idle_s:.0f} s ({setting}); last iteration "
                    f"{self.last_iteration}")
        for rank, quiet in sorted(self.silent_ranks.items()):
            text += (f"; rank {rank} wrote no rank file" if quiet is None else
                     f"; rank {rank} has shown no sign of life for {quiet:.0f} s (stopped, or "
                     "stuck holding the GIL)")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "limit_s": self.limit_s, "idle_s": round(self.idle_s, 3),
                "last_iteration": self.last_iteration, "phase": self.phase,
                "silent_ranks": [{"rank": r, "silent_s": None if s is None else round(s, 3)}
                                 for r, s in sorted(self.silent_ranks.items())]}


def heartbeat_interval(iteration_s: float, first_iteration_s: float) -> float:
    """A quarter of the shorter limit that is on, between 0.5 and 30 s: a peer quiet for two
    beats has surely stopped long before any limit passes."""
    limits = [x for x in (iteration_s, first_iteration_s) if x > 0]
    return min(max(min(limits, default=120.0) / 4, 0.5), 30.0)


class HangWatchdog:
    """Deadlines of one rank. `iteration(i)` is called from the training loop; `overdue()`
    says whether the current limit has passed. A limit of 0 turns that part off."""

    def __init__(self, iteration_s: float, first_iteration_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.iteration_s = iteration_s
        self.first_iteration_s = first_iteration_s
        self.heartbeat_s = heartbeat_interval(iteration_s, first_iteration_s)
        self.stale_s = 2 * self.heartbeat_s + 1.0
        """A peer whose heartbeat is older than this has stopped (1 s for clock skew)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._last_iteration: int | None = None
        self._phase: str | None = None
        self._since = clock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.iteration_s > 0 or self.first_iteration_s > 0

    def iteration(self, i: int) -> None:
        with self._lock:
            first = self._last_iteration is None
            self._last_iteration = i
            self._since = self._clock()
        if first:  # the limit changes (and may now end sooner): the thread looks again
            self._wake.set()

    def output(self) -> None:
        """The program printed a line (command cases): after its first iteration, new output
        restarts the limit between iterations; before it, the first iteration's limit runs
        on from the start."""
        with self._lock:
            if self._last_iteration is not None and self._phase is None:
                self._since = self._clock()

    def phase(self, name: str) -> None:
        """Training is over and `name` (a collective after it) begins: it gets the limit of
        one iteration (`iteration_s`; `first_iteration_s` when that is off), from now."""
        with self._lock:
            self._phase = name
            self._since = self._clock()
        self._wake.set()

    def _limit(self) -> tuple[str, float]:
        if self._last_iteration is None and self._phase is None:
            return "first_iteration_s", self.first_iteration_s
        if self._phase is not None and self.iteration_s <= 0:
            return "first_iteration_s", self.first_iteration_s
        return "iteration_s", self.iteration_s

    def seconds_left(self) -> float | None:
        """Seconds until the current limit passes (<= 0: passed); None while it is off."""
        with self._lock:
            _, limit = self._limit()
            if limit <= 0:
                return None
            return self._since + limit - self._clock()

    def overdue(self) -> Hang | None:
        with self._lock:
            key, limit = self._limit()
            idle = self._clock() - self._since
            if limit <= 0 or idle < limit:
                return None
            return Hang(key, limit, idle, self._last_iteration, phase=self._phase)

    # -- the thread ------------------------------------------------------------------------------
    def start(self, on_hang: Callable[[Hang], None],
              beat: Callable[[], None] | None = None) -> None:
        """Watch in a daemon thread; call `beat` every `heartbeat_s` and `on_hang` once, from
        that thread, when a limit passes. Nothing starts when both limits are 0."""
        if not self.enabled:
            return

        def watch() -> None:
            next_beat = self._clock()
            while not self._stopped:
                hang = self.overdue()
                if hang is not None:
                    on_hang(hang)
                    return
                if beat is not None and self._clock() >= next_beat:
                    beat()
                    next_beat = self._clock() + self.heartbeat_s
                left = self.seconds_left()
                wait = next_beat - self._clock() if beat is not None else self.heartbeat_s
                if left is not None:
                    wait = min(wait, left)
                self._wake.wait(max(wait, 0.01))
                self._wake.clear()

        self._thread = threading.Thread(target=watch, name="trainbench-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


def beat_file(path: Path) -> None:
    """One heartbeat: the file's modification time set to now, on this host's clock."""
    now = time.time()
    # a missed heartbeat only weakens the diagnosis; it must not stop the rank
    with contextlib.suppress(OSError):
        os.utime(path, (now, now))


def silent_ranks(files: Mapping[int, Path], now_s: float,
                 stale_s: float) -> dict[int, float | None]:
    """Ranks (of `files`: rank -> its event file) whose last heartbeat is older than
    `stale_s`: rank -> seconds since it (None: the file does not exist)."""
    out: dict[int, float | None] = {}
    for rank, path in files.items():
        try:
            quiet = now_s - path.stat().st_mtime
        except OSError:
            out[rank] = None
            continue
        if quiet > stale_s:
            out[rank] = quiet
    return out


def abort_job(abort: Callable[[int], None], code: int = HANG_EXIT_CODE,
              grace_s: float = 5.0) -> None:
    """Abort the MPI job (`abort` is `Comm.abort`, MPI_Abort); if it has not ended this process
    after `grace_s` (Abort can block on a wedged runtime), leave with `os._exit(code)`: the
    launcher sees a rank exit without finalising and tears the job down."""
    fallback = threading.Timer(grace_s, os._exit, (code,))
    fallback.daemon = True
    fallback.start()
    abort(code)
