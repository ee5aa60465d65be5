"""Ending a program's process group: SIGTERM, then SIGKILL after the grace for what ignored
it; run on a real program (tests/data/command_scripts/endless.py, sources in its README)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from toolkit.workloads.command_pump import GroupEnd, group_alive

ENDLESS = Path(__file__).resolve().parents[2] / "data" / "command_scripts" / "endless.py"


def _end(*flags: str) -> tuple[GroupEnd, int]:
    proc = subprocess.Popen([sys.executable, str(ENDLESS), *flags], process_group=0,
                            stdout=subprocess.DEVNULL)
    time.sleep(0.5)  # its handlers are set
    group = GroupEnd(proc.pid, "a test", grace_s=0.5)
    deadline = time.time() + 10
    while not group.over and time.time() < deadline:
        proc.poll()
        group.step()
        time.sleep(0.05)
    return group, proc.wait(5)


def test_a_program_that_takes_sigterm_gets_no_sigkill():
    group, rc = _end()
    assert rc == -15 and group.signals == ["SIGTERM"]
    assert group.record() == {"by": "trainbench", "why": "a test", "signals": ["SIGTERM"],
                              "grace_s": 0.5}


def test_a_program_that_ignores_sigterm_is_killed_after_the_grace():
    group, rc = _end("--ignore-term")
    assert rc == -9 and group.signals == ["SIGTERM", "SIGKILL"]
    assert time.time() - group.started_s >= 0.5
    assert not group_alive(group.pgid)
