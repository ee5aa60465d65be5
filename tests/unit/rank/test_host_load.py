"""How busy a rank's host was while it trained, and how much of it was the rank's own: /proc/stat
(a recorded one, tests/data/proc/README.md, and this machine's own), getrusage, and the rule
that says other processes crowded a run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.analysis.sharing import crowded_by_others, other_load
from toolkit.rank.host_load import HostLoad, busy_cpu_s, runqueue_waits_s, schedstat_wait_s

STAT = Path(__file__).resolve().parents[2] / "data" / "proc" / "stat_2cpu.txt"


def test_busy_time_is_user_nice_system_irq_softirq_steal():
    # cpu  283504 211 75650 83128 2512 0 1084 466 0 0  (USER_HZ 100)
    text = STAT.read_text()
    fields = [int(v) for v in text.split()[1:9]]
    user, nice, system, _, _, irq, softirq, steal = fields
    assert busy_cpu_s(text, 100.0) == pytest.approx(
        (user + nice + system + irq + softirq + steal) / 100.0)
    assert busy_cpu_s("intr 1 2 3\n", 100.0) is None


def test_a_process_that_is_no_rank_is_others_time_the_ranks_own_is_its_own():
    load = HostLoad()
    load.start()
    spin = subprocess.Popen([sys.executable, "-c",
                             "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"])
    end = time.thread_time() + 0.5
    while time.thread_time() < end:  # this process's own CPU time: half a second
        pass
    time.sleep(max(0.0, 1.6 - 0.5))
    record = load.stop()  # before the spinning child is waited for: not this process's
    spin.wait()
    assert record["own_cpu_s"] >= 0.45
    assert record["host_busy_cpu_s"] - record["own_cpu_s"] >= 1.0  # the child's 1.5 s, at least
    busy, others = other_load([record]) or (0.0, 0.0)
    assert others * record["window_s"] * record["host_cpus"] >= 1.0
    assert 0 < busy <= 1


def test_the_rule_names_a_crowded_host_and_spares_a_free_one():
    # 2 CPUs for 10 s: the ranks used 12 CPU-s of the 19 the host was busy
    ranks = [{"window_s": 10.0, "host_busy_cpu_s": 19.0, "own_cpu_s": 6.0, "host_cpus": 2},
             {"window_s": 9.5, "host_busy_cpu_s": 18.0, "own_cpu_s": 6.0, "host_cpus": 2}]
    shares = other_load(ranks)
    assert shares == pytest.approx((0.95, 0.35))
    assert crowded_by_others("vm", shares) == (
        "other processes took 35% of host vm's CPU time while its ranks trained (the host 95% "
        "busy: rule, busy >= 90% and others >= 10%)")
    # the host not saturated: the others took CPUs the run did not need
    assert crowded_by_others("vm", other_load([dict(ranks[0], host_busy_cpu_s=15.0)])) is None
    assert other_load([dict(ranks[0], host_busy_cpu_s=None)]) is None


SCHEDSTAT = STAT.parent / "schedstat_thread.txt"


def test_a_threads_wait_for_a_cpu_is_the_second_schedstat_field():
    on_cpu_ns, wait_ns, _ = (int(v) for v in SCHEDSTAT.read_text().split())
    assert schedstat_wait_s(SCHEDSTAT.read_text()) == pytest.approx(wait_ns / 1e9)
    assert schedstat_wait_s(f"{on_cpu_ns}\n") is None and schedstat_wait_s("") is None
    assert runqueue_waits_s("/nonexistent") == {}


def test_a_thread_that_shares_its_cpu_with_busy_processes_is_counted_waiting():
    """This thread and two busy processes on one CPU: the window's `own_wait_s` holds the time
    this thread was runnable while they ran, and no more than the window."""
    import os

    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spin = [subprocess.Popen([sys.executable, "-c",
                              f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\n"
                              "t = time.time()\nwhile time.time() - t < 2.0: pass"])
            for _ in range(2)]
    os.sched_setaffinity(0, {cpu})  # this thread only
    try:
        time.sleep(0.3)  # the spinners are running
        load = HostLoad()
        load.start()
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        record = load.stop()
    finally:
        os.sched_setaffinity(0, before)
        for p in spin:
            p.wait()
    assert 0.3 <= record["own_wait_s"] <= record["window_s"] * 1.05, record
