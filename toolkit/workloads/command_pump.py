"""A command case's program, seen from the worker while it runs: its output drained in a thread
of its own (`OutputPump`) and its process group ended when trainbench ends it (`GroupEnd`).

Reading never slows the program: the pump's thread only reads the pipe, writes what it read to
the program's log and hands whole lines to the parser in batches; the parser (the worker's main
thread, `toolkit.workloads.command`) takes them when it can. At most `MAX_PENDING_LINES` lines
and `MAX_PENDING_BYTES` bytes wait for it: past that, lines are still written to the log but not
handed on, and counted (`OutputPump.not_parsed`), so a parser that falls behind flags the run
instead of blocking the program on a full pipe.

The program's log keeps its output's first `LOG_HEAD_BYTES` and last `LOG_TAIL_BYTES`, with a
line between them that counts what was left out: a program that prints without end fills no
disk. A log that cannot be written (a full disk) costs the log, not the run: the pump reads on
and says why (`OutputPump.log_error`).

The program runs in a process group of its own (`toolkit.workloads.command` starts it so), which
`GroupEnd` ends: SIGTERM to the group, SIGKILL to what is left after a grace.

What lives elsewhere: turning lines into records (`toolkit.workloads.command_output`), starting
the program and judging its run (`toolkit.workloads.command`).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import select
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

TAIL_LINES = 5
"""Lines of the program's output a failure message quotes (all of it is in its log)."""

TAIL_KEPT = 64
"""Lines of the program's newest output kept in memory: enough to find the error above a
fault handler's dump of threads and modules, which is longer than what is quoted."""

MAX_PENDING_LINES = 200_000
"""Lines read but not yet parsed, at most."""

MAX_PENDING_BYTES = 64 << 20
"""Bytes of lines read but not yet parsed, at most (long lines reach this bound first)."""

WAKE_LINES = 10_000
"""Lines waiting that wake the parser before its timeout."""

LONGEST_LINE_BYTES = 1 << 20
"""A line longer than this is cut into pieces of this size."""

PIPE_BYTES = 1 << 20
"""The pipe's buffer asked for (Linux's default limit for an unprivileged process; its own
default is 64 KiB): a program can print this much while the pump's thread waits its turn."""

NAP_S = 0.002
"""How long the pump waits after a read that emptied the pipe, so that a burst of lines is read
in a few reads rather than one a line; a line's read time is late by at most this. At 5 MB/s
(50,000 lines of 100 bytes a second) the program writes 10 KB meanwhile, within any pipe."""

LOG_HEAD_BYTES = 64 << 20
"""The first bytes of the program's output its log keeps."""

LOG_TAIL_BYTES = 16 << 20
"""The last bytes of the program's output its log keeps, after the head (held in memory until
the output closes)."""

_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, named by the fcntl module from Python 3.10 on Linux
_LINE_END = re.compile(rb"\r\n|\r|\n")
_POLL_MS = 100


class OutputPump:
    """Reads `fd` until it closes (or `stop`), writing every byte to `log_fd` as read and
    handing the lines, each batch with the time it was read, to `get`. A carriage return ends
    a line too: a progress bar's updates are lines, and a record printed after one is read when
    it is printed."""

    def __init__(self, fd: int, log_fd: int, max_pending_lines: int = MAX_PENDING_LINES,
                 chunk: int = 1 << 16, longest: int = LONGEST_LINE_BYTES,
                 max_pending_bytes: int = MAX_PENDING_BYTES, log_head: int = LOG_HEAD_BYTES,
                 log_tail: int = LOG_TAIL_BYTES) -> None:
        self._fd, self._log_fd = fd, log_fd
        self._log_head, self._log_tail = log_head, log_tail
        self._tail_chunks: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self.log_written = 0
        """Bytes of output written to the log as they came (its head)."""
        self.log_left_out = 0
        """Bytes of output the log does not hold: between its head and its tail, or not
        written because writing failed."""
        self.log_error: str | None = None
        """Why the log could not be written (`No space left on device`), once it could not."""
        self._max_pending, self._chunk, self._longest = max_pending_lines, chunk, longest
        self._cond = threading.Condition()
        self._batches: collections.deque[tuple[float, list[bytes]]] = collections.deque()
        self._pending = self._pending_bytes = 0
        self._max_bytes = max_pending_bytes
        self._stop = threading.Event()
        self.lines = 0
        """Lines read so far."""
        self.not_parsed = 0
        """Lines read but never handed to the parser: it was `max_pending_lines` (or
        `max_pending_bytes`) behind."""
        self.closed = False
        """The output has closed (every writer gone) or the pump was stopped."""
        self.tail: collections.deque[bytes] = collections.deque(maxlen=TAIL_KEPT)
        with contextlib.suppress(OSError):  # more room while this thread waits its turn
            fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
        self._thread = threading.Thread(target=self._run, name="program-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop reading (lines already read stay available to `get`)."""
        self._stop.set()
        self._thread.join(timeout_s)

    @property
    def drained(self) -> bool:
        """Closed, and every line handed on has been taken."""
        with self._cond:
            return self.closed and not self._batches

    def get(self, timeout_s: float) -> list[tuple[float, list[bytes]]]:
        """Every batch of lines waiting, each with the time it was read, after at most
        `timeout_s` (sooner when `WAKE_LINES` are waiting or the output closed); [] when none
        came. Taking them in bulk keeps the parser's wake-ups few, whatever the program's
        writes are like."""
        with self._cond:
            if self._pending < WAKE_LINES and not self.closed:
                self._cond.wait(timeout_s)
            batches = list(self._batches)
            self._batches.clear()
            self._pending = self._pending_bytes = 0
            return batches

    def _run(self) -> None:
        pending = b""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while not self._stop.is_set():
                if not poller.poll(_POLL_MS):
                    continue
                data = os.read(self._fd, self._chunk)
                if not data:
                    break
                if len(data) < self._chunk:
                    # less than a chunk was waiting: let the program write on for a moment
                    # without a reader to wake (a wake-up per line costs a context switch a
                    # line and can take the writer's CPU from it)
                    time.sleep(NAP_S)
                read_s = time.time()
                self._log(data)
                pending += data
                *lines, pending = _LINE_END.split(pending)
                if len(pending) > self._longest:
                    lines.append(pending)
                    pending = b""
                self._hand(read_s, lines)
            if pending:
                self._hand(time.time(), [pending])
        finally:
            self._finish_log()
            with self._cond:
                self.closed = True
                self._cond.notify_all()

    def _log(self, data: bytes) -> None:
        """Into the log's head while it has room, else into the tail kept in memory."""
        room = self._log_head - self.log_written
        if room > 0:
            self._write(data[:room])
            data = data[room:]
        if not data:
            return
        self._tail_chunks.append(data)
        self._tail_bytes += len(data)
        while self._tail_bytes > self._log_tail and self._tail_chunks:
            extra = self._tail_bytes - self._log_tail
            first = self._tail_chunks[0]
            if len(first) <= extra:
                self._tail_chunks.popleft()
                cut = len(first)
            else:
                self._tail_chunks[0] = first[extra:]
                cut = extra
            self._tail_bytes -= cut
            self.log_left_out += cut

    def _finish_log(self) -> None:
        """The kept tail, after a line that counts what was left out before it."""
        if self.log_left_out and self.log_error is None:
            self._write(f"\n[trainbench: {self.log_left_out} bytes of the program's output "
                        f"left out here; its last {self._tail_bytes} bytes follow]\n".encode(),
                        counted=False)
        while self._tail_chunks:
            self._write(self._tail_chunks.popleft())
        self._tail_bytes = 0

    def _write(self, data: bytes, counted: bool = True) -> None:
        if self.log_error is not None:
            self.log_left_out += len(data) if counted else 0
            return
        try:
            _write_all(self._log_fd, data)
        except OSError as err:  # a full disk: the run goes on without its log
            self.log_error = err.strerror or str(err)
            self.log_left_out += len(data) if counted else 0
            return
        self.log_written += len(data) if counted else 0

    def _hand(self, read_s: float, lines: list[bytes]) -> None:
        if not lines:
            return
        self.tail.extend(lines[-TAIL_KEPT:])
        with self._cond:
            self.lines += len(lines)
            room = max(self._max_pending - self._pending, 0)
            size = sum(map(len, lines))
            if room < len(lines) or self._pending_bytes + size > self._max_bytes:
                kept, budget = [], self._max_bytes - self._pending_bytes
                for line in lines[:room]:
                    budget -= len(line)
                    if budget < 0:
                        break
                    kept.append(line)
                self.not_parsed += len(lines) - len(kept)
                lines, size = kept, sum(map(len, kept))
            if lines:
                self._batches.append((read_s, lines))
                self._pending += len(lines)
                self._pending_bytes += size
                if self._pending >= WAKE_LINES:
                    self._cond.notify()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@dataclass
class GroupEnd:
    """Ending the program's process group: SIGTERM now, SIGKILL once `grace_s` has passed and
    some of it is still there. `step` advances it without waiting; `record` says what was
    done, for the run's record."""

    pgid: int
    why: str
    grace_s: float
    started_s: float = field(default_factory=time.time)
    signals: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._send(signal.SIGTERM)

    def step(self) -> None:
        if "SIGKILL" not in self.signals and time.time() - self.started_s >= self.grace_s \
                and group_alive(self.pgid):
            self._send(signal.SIGKILL)

    @property
    def over(self) -> bool:
        """SIGKILL was sent (nothing can outlive it), or the group is gone."""
        return "SIGKILL" in self.signals or not group_alive(self.pgid)

    def record(self) -> dict[str, Any]:
        return {"by": "trainbench", "why": self.why, "signals": list(self.signals),
                "grace_s": self.grace_s}

    def _send(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        self.signals.append(sig.name)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (a zombie not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
