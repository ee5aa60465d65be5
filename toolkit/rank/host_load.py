"""How busy this rank's host was while the rank trained, and how much of that was the rank's own:
the host's busy CPU time from /proc/stat, the process's own CPU time (its threads, and the
children it has waited for: a command case's program) from getrusage, and the time its threads
spent runnable but waiting for a CPU (each thread's /proc/self/task/<tid>/schedstat), at the
start of the workload and at its end (`HostLoad`). The rank's summary carries the record
(`host_load`); `toolkit.analysis.sharing.other_load` adds up a host's ranks and says whether
other processes took the CPUs the run could have used; the preflight restores a figure by its
ranks' waits (`toolkit.analysis.preflight.restored_value`).

What lives elsewhere: which CPUs a rank may run on (`toolkit.rank.binding.cpu_record`), runs
of trainbench that shared CPUs with each other (`toolkit.analysis.sharing`).
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

PROC_STAT = "/proc/stat"
TASKS = "/proc/self/task"

def busy_cpu_s(stat_text: str, ticks_per_s: float) -> float | None:
    """CPU-seconds the host spent busy since boot, from /proc/stat's `cpu` line: user, nice,
    system, irq, softirq and steal (guest time is within user); None without that line."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]] + [0] * 8
            user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
            return (user + nice + system + irq + softirq + steal) / ticks_per_s
    return None


def own_cpu_s() -> float:
    """CPU-seconds of this process (every thread) and of its children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def schedstat_wait_s(text: str) -> float | None:
    """Seconds a thread has waited on a run queue (runnable, no CPU free for it), from its
    schedstat line (`<ns on a CPU> <ns waiting on a run queue> <timeslices>`); None where the
    line has no such field."""
    fields = text.split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]) / 1e9


def runqueue_waits_s(tasks: str = TASKS) -> dict[str, float]:
    """Each live thread of this process: the seconds it has waited for a CPU (`schedstat_wait_s`);
    {} where the kernel keeps no schedstat."""
    out = {}
    try:
        tids = os.listdir(tasks)
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(os.path.join(tasks, tid, "schedstat")) as f:
                wait = schedstat_wait_s(f.read())
        except OSError:  # a thread that ended in between
            continue
        if wait is not None:
            out[tid] = wait
    return out


class HostLoad:
    """`start()` before the workload, `stop()` after it: the record for the rank's summary."""

    def __init__(self, stat_path: str = PROC_STAT, tasks: str = TASKS) -> None:
        self._path, self._tasks = stat_path, tasks
        self._waits: dict[str, float] = {}
        self._ticks = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._start: tuple[float, float | None, float] | None = None

    def _busy(self) -> float | None:
        try:
            with open(self._path) as f:
                return busy_cpu_s(f.read(), self._ticks)
        except (OSError, ValueError):
            return None

    def start(self) -> None:
        self._waits = runqueue_waits_s(self._tasks)
        self._start = (time.monotonic(), self._busy(), own_cpu_s())

    def stop(self) -> dict[str, Any]:
        """{window_s, host_busy_cpu_s, own_cpu_s, own_wait_s, host_cpus}: host_busy_cpu_s None
        where /proc/stat cannot be read; own_wait_s, the seconds this process's threads waited
        for a CPU in the window (added up over threads: waits at the same time count each), None
        where the kernel keeps no schedstat. A thread that ended in the window takes its wait
        with it."""
        assert self._start is not None, "stop() before start()"
        t0, busy0, own0 = self._start
        busy1 = self._busy()
        busy = busy1 - busy0 if busy0 is not None and busy1 is not None else None
        waits = runqueue_waits_s(self._tasks)
        wait = sum(max(w - self._waits.get(tid, 0.0), 0.0) for tid, w in waits.items()) \
            if waits else None
        return {"window_s": time.monotonic() - t0, "host_busy_cpu_s": busy,
                "own_cpu_s": own_cpu_s() - own0, "own_wait_s": wait,
                "host_cpus": os.cpu_count()}
