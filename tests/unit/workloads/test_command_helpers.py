"""A program's helpers seen from the worker that runs it: a writer it started outside its
process group (a daemonised logger in a session of its own) that keeps printing to the
inherited output does not keep a finished run alive."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case
from toolkit.workloads import command

PROGRAM = """
import subprocess, sys, time
LOOP = "import time\\nwhile True:\\n    print('hello', flush=True)\\n    time.sleep(0.02)"
helper = subprocess.Popen([sys.executable, "-c", LOOP], start_new_session=True)
open("helper.pid", "w").write(str(helper.pid))
for i in range(1, 7):
    print(f"step {i}/6 speed 100.0", flush=True)
"""


def _one_rank() -> RankInfo:
    return RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0,
                    num_nodes=1, host="n0", hosts=("n0",), master_addr="n0", master_port=29511)


def test_a_writer_outside_the_group_does_not_keep_a_finished_run_alive(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    case = Case.from_dict({"model": "command", "warmup_iterations": 2, "measured_iterations": 4,
                           "command": {"argv": [sys.executable, "prog.py"],
                                       "workdir": str(tmp_path),
                                       "pattern": r"step (?P<iteration>\d+)/\d+ speed "
                                                  r"(?P<samples_per_s>[\d.]+)"}})
    run_dir = tmp_path / "r0"
    run_dir.mkdir()
    beats: list[float] = []
    done: dict[str, object] = {}

    def go() -> None:
        try:
            done["result"] = command.run(case, "own", _one_rank(), run_dir, 0, None, 0,
                                         lambda _n: beats.append(time.monotonic()))
        except Exception as err:  # handed to the test's thread
            done["error"] = err

    started = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    try:
        # exit grace (2 s) + SIGTERM to an empty group + at most 2 s more of reading
        thread.join(timeout=15)
        assert not thread.is_alive(), "a writer outside the group kept the run alive"
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((tmp_path / "helper.pid").read_text()), signal.SIGKILL)
        thread.join(timeout=10)
    assert "error" not in done, done.get("error")
    assert time.monotonic() - started < 10
    iterations, summary = done["result"]  # type: ignore[misc]
    assert len(iterations) == 6
    ended = summary["command"]["ended"]
    assert ended["writer_outside_group"] is True
    assert "a writer outside its process group" in ended["why"]
    assert beats[-1] - started < 10  # the helper's lines stopped feeding the watchdog
