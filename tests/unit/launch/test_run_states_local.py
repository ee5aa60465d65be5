"""A run started outside Slurm (local executor, run_local.sh) whose process died without
writing a status is `lost`, with the process and host, not `running` forever; `--watch` ends."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

from rich.console import Console

from toolkit import status as status_cmd
from toolkit.launch.lifecycle import begin_run
from toolkit.launch.run_states import run_states, watch
from toolkit.results.layout import CaseDir
from toolkit.spec import Case


def _case(tmp_path):
    cdir = CaseDir(tmp_path / "res", "c")
    cdir.write_case(Case.from_dict({"repeats": 1}))
    return cdir


def test_a_local_run_whose_process_was_killed_is_lost_and_watch_ends(tmp_path, capsys):
    cdir = _case(tmp_path)
    script = subprocess.Popen(["sleep", "300"])  # the job script that owns r0
    try:
        begin_run(cdir.path, 0, pid=script.pid)
        [state], _ = run_states(cdir.root, None)
        assert state.state == "running" and state.reason == \
            f"process {script.pid} on host {socket.gethostname()}"
    finally:
        script.send_signal(signal.SIGKILL)
        script.wait()
    [state], _ = run_states(cdir.root, None)
    assert state.state == "lost"
    assert state.reason == (f"process {script.pid} on host {socket.gethostname()} ended "
                            "without writing a status")
    out = io.StringIO()
    assert watch(cdir.root, None, Console(file=out, width=200), interval_s=0.05,
                 timeout_s=20) == 1
    assert "still running" not in out.getvalue() and "ended without writing a status" in \
        out.getvalue()
    assert status_cmd.main([str(cdir.root), "--watch", "--interval", "0.05",
                            "--timeout", "20"]) == 1
    assert "still running" not in capsys.readouterr().out


def test_a_reused_pid_does_not_keep_a_dead_run_running(tmp_path):
    """The recorded pid now belongs to another process (it started at another time)."""
    cdir = _case(tmp_path)
    run = begin_run(cdir.path, 0)  # owned by this process, which runs
    job = json.loads((run / "job.json").read_text())
    job["pid_start"] = job["pid_start"] + "0"
    (run / "job.json").write_text(json.dumps(job))
    [state], _ = run_states(cdir.root, None)
    assert state.state == "lost" and "ended without writing a status" in state.reason


def test_a_run_of_another_host_says_it_cannot_be_checked(tmp_path):
    cdir = _case(tmp_path)
    run = begin_run(cdir.path, 0)
    job = json.loads((run / "job.json").read_text())
    job["host"] = "elsewhere"
    (run / "job.json").write_text(json.dumps(job))
    [state], _ = run_states(cdir.root, None)
    assert state.state == "running"
    assert state.reason == f"process {job['pid']} on host elsewhere; cannot be checked from " \
                           "this host"


def test_a_hand_sbatch_run_whose_script_died_on_this_host_is_lost(tmp_path, monkeypatch):
    """`sbatch submission.sh` by hand (no ledger entry): its job script ran on this host and
    is gone without a status."""
    cdir = _case(tmp_path)
    script = subprocess.Popen(["true"])
    script.wait()
    monkeypatch.setenv("SLURM_JOB_ID", "88")
    begin_run(cdir.path, 0, pid=script.pid)
    [state], _ = run_states(cdir.root, None)
    assert state.state == "lost"
    assert state.reason == (f"Slurm job 88 (process {script.pid} on host "
                            f"{socket.gethostname()}) ended without writing a status")


def test_a_killed_script_not_yet_reaped_is_not_running(tmp_path):
    """A zombie (killed, its parent has not waited for it yet) runs nothing."""
    cdir = _case(tmp_path)
    script = subprocess.Popen(["sleep", "300"])
    try:
        begin_run(cdir.path, 0, pid=script.pid)
        script.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        stat = Path(f"/proc/{script.pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        [state], _ = run_states(cdir.root, None)
        assert state.state == "lost"
    finally:
        script.kill()
        script.wait()


def test_status_shows_escape_sequences_of_a_failure_reason_as_text(tmp_path, capsys):
    """A reason comes from the run's files (a rank's error, the last lines of its log): an
    escape sequence or control character in it is shown as an escape, never sent to the
    terminal, with `status` and with `status --watch`."""
    from toolkit.launch.lifecycle import record_outcome

    cdir = _case(tmp_path)
    begin_run(cdir.path, 0, pid=1)
    hostile = "boom \x1b[2J\x1b[1;1H\x1b[31mred\x1b]0;title\x07 back\rover\x08 \x9b31m"
    record_outcome(cdir.path, 0, {"status": "failed", "reason": hostile,
                                  "log": "output\x1b[8m.log"})
    for argv in ([str(cdir.root)], [str(cdir.root), "--watch", "--interval", "0"]):
        assert status_cmd.main(argv) == (0 if "--watch" not in argv else 1)
        out = capsys.readouterr().out
        line = next(s for s in out.splitlines() if "boom" in s)
        assert not any(c in line for c in "\x1b\x07\r\x08\x9b"), repr(line)
        assert ("boom \\x1b[2J\\x1b[1;1H\\x1b[31mred\\x1b]0;title\\x07 back\\x0dover\\x08 "
                "\\x9b31m") in line
        assert "output\\x1b[8m.log" in line
