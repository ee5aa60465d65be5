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
                                         lambda _n, _lines: beats.append(time.monotonic()))
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


REPORTER = """
import sys, time
import trainbench.report as report
for i in range(1, 100000):
    report.step(8)
    time.sleep(0.05)
"""

DLLOGGER = """
import json, sys, time
with open(sys.argv[1], "a") as log:
    for i in range(1, 100000):
        log.write("DLLL " + json.dumps({"timestamp": str(time.time()), "datetime": "x",
                  "elapsedtime": 0.0, "type": "LOG", "step": [0, i],
                  "data": {"train.loss": 1.0, "train.ips": 100.0}}) + "\\n")
        log.flush()
        time.sleep(0.05)
"""


def _run_in_thread(case: Case, run_dir: Path, beats: list[tuple[float, int]],
                   timeout_s: float) -> dict[str, object]:
    done: dict[str, object] = {}

    def go() -> None:
        try:
            done["result"] = command.run(case, "own", _one_rank(), run_dir, 0, None, 0,
                                         lambda n, _lines: beats.append((time.monotonic(), n)))
        except Exception as err:  # handed to the test's thread
            done["error"] = err

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(timeout=timeout_s)
    done["alive"] = thread.is_alive()
    if thread.is_alive():
        command.end_running_programs()
        thread.join(timeout=15)
    return done


def test_report_api_steps_reach_the_watchdog_and_stop_after_window_while_it_runs(tmp_path):
    """A program that reports its steps through `trainbench.report` and has no step limit:
    its steps reach the watchdog and `stop_after_window` while it runs, not when it exits."""
    (tmp_path / "prog.py").write_text(REPORTER)
    case = Case.from_dict({"model": "command", "warmup_iterations": 3, "measured_iterations": 5,
                           "command": {"argv": [sys.executable, "prog.py"],
                                       "workdir": str(tmp_path), "stop_after_window": True}})
    run_dir = tmp_path / "r0"
    run_dir.mkdir()
    beats: list[tuple[float, int]] = []
    started = time.monotonic()
    done = _run_in_thread(case, run_dir, beats, timeout_s=20)
    assert not done["alive"], "stop_after_window never saw the reported steps"
    assert "error" not in done, done.get("error")
    assert beats and max(n for _, n in beats) >= 8  # the watchdog saw the steps as they came
    assert min(t for t, n in beats if n > 0) - started < 5
    _, summary = done["result"]  # type: ignore[misc]
    assert summary["command"]["ended"]["window_read"] is True
    assert summary["command"]["measured_by"] == "report"


def test_a_log_file_is_followed_while_the_program_writes_it(tmp_path):
    (tmp_path / "prog.py").write_text(DLLOGGER)
    case = Case.from_dict({"model": "command", "warmup_iterations": 3, "measured_iterations": 5,
                           "command": {"argv": [sys.executable, "prog.py", "{run_dir}/dll.log"],
                                       "workdir": str(tmp_path), "stop_after_window": True,
                                       "log_file": "{run_dir}/dll.log",
                                       "log_format": "dllogger"}})
    run_dir = tmp_path / "r0"
    run_dir.mkdir()
    beats: list[tuple[float, int]] = []
    done = _run_in_thread(case, run_dir, beats, timeout_s=20)
    assert not done["alive"], "stop_after_window never saw the log file's steps"
    assert "error" not in done, done.get("error")
    assert max(n for _, n in beats) >= 8
    _, summary = done["result"]  # type: ignore[misc]
    assert summary["command"]["ended"]["window_read"] is True


WORKER = """
import sys
from pathlib import Path
from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case
from toolkit.workloads import command
work = Path(sys.argv[1])
case = Case.from_dict({"model": "command", "command": {
    "argv": [sys.executable, "prog.py"], "workdir": str(work),
    "pattern": r"step (?P<iteration>\\\\d+) speed (?P<samples_per_s>[\\\\d.]+)"}})
info = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0, num_nodes=1,
                host="n0", hosts=("n0",), master_addr="n0", master_port=29511)
command.run(case, "own", info, work / "r0", 0, None, 0, lambda n, lines: None)
"""

PARENT = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])  # in the program's process group
open("child.pid", "w").write(str(child.pid))
for i in range(1, 100000):
    print(f"step {i} speed 100.0", flush=True)
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_programs_children_end_with_a_worker_killed_by_sigkill(tmp_path: Path) -> None:
    """kill -9 of the worker: the kernel's parent-death signal ends the program alone; its
    keeper ends the rest of its process group."""
    import subprocess

    (tmp_path / "prog.py").write_text(PARENT)
    (tmp_path / "r0").mkdir()
    root = Path(__file__).resolve().parents[3]
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)],
                              env={**os.environ, "PYTHONPATH": str(root)})
    child = 0
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int((tmp_path / "child.pid").read_text())
        assert _alive(child)
        worker.kill()
        worker.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the program's child outlived a worker killed by SIGKILL"
    finally:
        if worker.poll() is None:
            worker.kill()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
