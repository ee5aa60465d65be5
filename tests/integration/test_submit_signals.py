"""A signal to `submit` never leaves its runs' processes behind, and a run whose processes are
alive is never started twice: a real `submit` (local executor, mpirun, the worker, a program
that trains for minutes) in a session of its own, signalled as `timeout`, a CI runner or Slurm
(SIGTERM), a closed terminal (SIGHUP) or `kill -INT` (SIGINT to the process alone, which a
background job of a script inherits ignored) would; then killed by SIGKILL, which no process
can catch."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit import status, submit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ("import time\\nfor i in range(1, 100000):\\n    print('step %d speed 10 samples/s' % i, "
           "flush=True)\\n    time.sleep(0.2)")
GRID = f"""
name: slow
base:
  model: command
  warmup_iterations: 2
  measured_iterations: 4
  slurm: {{time_min: 10}}
  command:
    argv: ['{{python}}', '-c', "{PROGRAM}"]
    pattern: 'step (?P<iteration>\\d+) speed (?P<samples_per_s>\\S+)'
"""
RUN = Path("results") / "cases" / "command-torch-fp32-1n1g-bs32" / "r0"


def _start(tmp_path: Path, ignore_sigint: bool = False) -> subprocess.Popen[bytes]:
    (tmp_path / "slow.yaml").write_text(GRID)

    def setup() -> None:  # pragma: no cover - runs in the child
        if ignore_sigint:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.submit", "--grid", "slow.yaml", "--results", "results"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=setup,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def _training(tmp_path: Path, proc: subprocess.Popen[bytes]) -> int:
    """The launcher's process group, once the program has printed steps."""
    run = tmp_path / RUN
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            job = json.loads((run / "job.json").read_text())
            if "step 2 " in (run / "program-rank000.log").read_text():
                return int(job["launcher_pgid"])
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"the program never trained: {proc.poll()}, {proc.stderr}")


def _gone(pgid: int, within_s: float = 30.0, *, group: bool = True) -> bool:
    """Whether process group (or process) `pgid` has ended within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            (os.killpg if group else os.kill)(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _rank_pid(tmp_path: Path) -> int:
    """The rank's worker (Open MPI starts each rank in a process group of its own)."""
    start = json.loads((tmp_path / RUN / "rank000.jsonl").read_text().splitlines()[0])
    return int(start["pid"])


def _kill(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_to_submit_ends_its_runs_and_records_them_cancelled(tmp_path, sig):
    proc = _start(tmp_path, ignore_sigint=sig == signal.SIGINT)
    pgid = _training(tmp_path, proc)
    rank = _rank_pid(tmp_path)
    try:
        os.kill(proc.pid, sig)  # the submit process alone, not its group
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err
        assert "Traceback" not in err.decode()
        assert _gone(pgid), "the launcher's process group outlived submit"
        assert _gone(rank, group=False), "the rank outlived submit"
        done = json.loads((tmp_path / RUN / "status.json").read_text())
        assert done["status"] == "cancelled"
        assert done["reason"].startswith(f"submit received {sig.name}: the run's launcher and "
                                         "ranks were ended")
    finally:
        _kill(pgid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank, signal.SIGKILL)


def test_after_submit_is_killed_its_live_run_is_running_and_never_started_twice(tmp_path,
                                                                               capsys):
    proc = _start(tmp_path)
    pgid = _training(tmp_path, proc)
    rank = _rank_pid(tmp_path)
    try:
        proc.kill()  # SIGKILL: no handler runs; mpirun and the ranks go on
        proc.wait(timeout=30)
        assert not _gone(pgid, 1)
        os.chdir(tmp_path)
        capsys.readouterr()
        status.main([str(tmp_path / "results")])
        out = capsys.readouterr().out
        assert "lost" not in out and "running" in out, out
        job = (tmp_path / RUN / "job.json").read_text()
        assert submit.main(["--grid", "slow.yaml", "--results", "results"]) == 1
        err = capsys.readouterr()
        said = err.out + err.err
        assert "is not started again" in said and f"process group {pgid}" in said, said
        assert (tmp_path / RUN / "job.json").read_text() == job  # the live r0 untouched
        assert not list((tmp_path / RUN.parent).glob("r0.attempt*"))
    finally:
        _kill(pgid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank, signal.SIGKILL)
