"""One owner per run: a second start of a repeat that a live job script runs refuses it and
leaves the live attempt where it is; `end` writes only into the attempt its `begin` made and
never over an `ok`; once the owner is dead, the next start takes over.

Real processes: the job scripts' repeat loop (`launcher.run_block`) in bash with the real
`python -m toolkit.runstate`, around a stand-in launcher that writes the rank files of a
finished run and then holds for as long as the test says.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.launch.launcher import run_block
from toolkit.launch.lifecycle import RunBusy, begin_run, process_start
from toolkit.results.layout import CaseDir

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "results_quickstart"
CASE = "bert_base-torch-fp32-1n2g-bs8"
SOURCE_RUN = DATA / "cases" / CASE / "r1"


def _setup(tmp_path: Path) -> tuple[CaseDir, Path]:
    cdir = CaseDir(tmp_path / "res", CASE)
    cdir.path.mkdir(parents=True)
    shutil.copy(DATA / "cases" / CASE / "case.json", cdir.path / "case.json")
    launcher = tmp_path / "launcher"
    launcher.write_text(f"""#!/bin/bash
# a rank launcher: the rank files of a finished run, then hold for $HOLD seconds
cp {SOURCE_RUN}/rank000.jsonl {SOURCE_RUN}/rank001.jsonl .
touch "started-$TAG"
sleep "$HOLD"
""")
    launcher.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text("\n".join(["#!/bin/bash", "set -uo pipefail", 'REPEAT="${1:-0}"',
                                 f"export PYTHONPATH={ROOT}",
                                 *run_block(sys.executable, str(launcher), cdir.path,
                                            "local")]) + "\n")
    return cdir, script


def _env(tag: str, hold: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "TAG": tag, "HOLD": str(hold)}


def _job(run_dir: Path) -> dict:
    return json.loads((run_dir / "job.json").read_text())


def test_a_second_start_refuses_a_live_run_and_takes_over_once_its_owner_is_killed(tmp_path):
    cdir, script = _setup(tmp_path)
    run = cdir.run_dir(0)
    first = subprocess.Popen(["bash", str(script), "0"], env=_env("A", 120),
                             start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (run / "started-A").exists():
            assert first.poll() is None, "the first start ended early"
            assert time.monotonic() < deadline, "the first start never ran its launcher"
            time.sleep(0.05)
        owner = _job(run)
        assert owner["pid"] == first.pid and owner["host"] == socket.gethostname()

        # The same repeat started again (run_local.sh K by hand) while the first one runs.
        second = subprocess.run(["bash", str(script), "0"], env=_env("B", 0),
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 1
        assert f"process {first.pid} on host {socket.gethostname()} still runs" in second.stderr
        assert "skipping it" in second.stderr
        assert (run / "started-A").exists() and not (run / "started-B").exists()
        assert _job(run) == owner  # the live attempt is where it was, with its owner
        assert not list(cdir.path.glob("r0.attempt*"))
        assert first.poll() is None
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the owner dies without writing a status
        first.wait(timeout=30)
    assert not (run / "status.json").exists()

    # The owner is dead: the next start takes over and moves the dead attempt aside.
    third = subprocess.run(["bash", str(script), "0"], env=_env("C", 0),
                           capture_output=True, text=True, timeout=120)
    assert third.returncode == 0, third.stderr
    aside = cdir.path / "r0.attempt1"
    assert (aside / "started-A").exists() and _job(aside)["claim"] == owner["claim"]
    assert (run / "started-C").exists() and cdir.finished(0)
    ok = (run / "status.json").read_bytes()

    # The killed owner's `end`, arriving late, writes into its own attempt only.
    def end(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "toolkit.runstate", "end", str(cdir.path),
                               "0", "--executor", "local", *args], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})

    late = end("--claim", owner["claim"], "--rc", "137")
    assert late.returncode == 1
    assert json.loads((aside / "status.json").read_text())["status"] == "failed"
    assert (run / "status.json").read_bytes() == ok
    # And no `end` writes over the finished attempt: neither its own again nor one without claim.
    for args in (("--claim", _job(run)["claim"], "--rc", "1"), ("--rc", "1")):
        again = end(*args)
        assert again.returncode == 1 and "never overwritten" in again.stderr
        assert (run / "status.json").read_bytes() == ok


def test_a_reused_pid_is_not_mistaken_for_the_owner(tmp_path):
    """job.json names a pid that now belongs to another process (it started at another time):
    the owner is gone, and a start takes over."""
    cdir, _ = _setup(tmp_path)
    run = begin_run(cdir.path, 0, pid=os.getpid())
    with pytest.raises(RunBusy):
        begin_run(cdir.path, 0)  # this very process still runs: refused
    job = _job(run)
    job["pid_start"] = f"{process_start(os.getpid())}0"  # the same pid, another start
    (run / "job.json").write_text(json.dumps(job))
    again = begin_run(cdir.path, 0)
    assert _job(again)["claim"] != job["claim"]
    assert _job(cdir.path / "r0.attempt1")["claim"] == job["claim"]



class _Squeue:
    """The SlurmClient's runner seam: squeue answers (rc, stdout); records the ids asked."""

    def __init__(self, rc: int, out: str) -> None:
        self.rc, self.out = rc, out
        self.asked: list[str] = []

    def __call__(self, argv):
        assert argv[0] == "squeue"
        self.asked.append(argv[argv.index("-j") + 1])
        return subprocess.CompletedProcess(list(argv), self.rc, self.out,
                                           "" if self.rc == 0 else "squeue: error: timeout")


def test_a_run_of_a_live_slurm_job_on_another_node_is_not_taken_over(tmp_path, monkeypatch):
    """`sbatch submission.sh` by hand (job 77) while array task 55_0 runs the repeat on node9:
    refused while squeue lists 55_0 (or cannot answer); taken over once it left the queue, and
    by the same job after Slurm requeued it."""
    from toolkit.launch.slurm_client import SlurmClient

    cdir, _ = _setup(tmp_path)
    for k, v in {"SLURM_JOB_ID": "56", "SLURM_ARRAY_JOB_ID": "55",
                 "SLURM_ARRAY_TASK_ID": "0"}.items():
        monkeypatch.setenv(k, v)
    run = begin_run(cdir.path, 0, pid=os.getpid())
    job = _job(run)
    (run / "job.json").write_text(json.dumps({**job, "host": "node9"}))
    for k in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "77")

    running = _Squeue(0, "55_0|RUNNING|None\n")
    with pytest.raises(RunBusy, match=r"Slurm job 55_0 \(process \d+ on host node9\) is running"):
        begin_run(cdir.path, 0, slurm=SlurmClient(runner=running, retries=0))
    assert running.asked == ["55"]
    with pytest.raises(RunBusy, match="Slurm cannot say whether it still runs"):
        begin_run(cdir.path, 0, slurm=SlurmClient(runner=_Squeue(1, ""), retries=0))
    assert _job(run)["claim"] == job["claim"] and not (cdir.path / "r0.attempt1").exists()

    begin_run(cdir.path, 0, slurm=SlurmClient(runner=_Squeue(0, ""), retries=0))
    assert _job(cdir.path / "r0.attempt1")["claim"] == job["claim"]

    # The job that owns r0 now (77) is requeued by Slurm and starts again on another node.
    (run / "job.json").write_text(json.dumps({**_job(run), "host": "node9"}))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    begin_run(cdir.path, 0, slurm=SlurmClient(runner=_Squeue(1, ""), retries=0))
    assert (cdir.path / "r0.attempt2").exists()


def test_the_local_executor_skips_a_repeat_that_a_live_script_runs(tmp_path):
    """`toolkit.submit --executor local` while `run_local.sh 0` runs r0: r0 is left alone and
    counted as not done."""
    import io

    from rich.console import Console

    from toolkit.launch.local import LocalExecutor, run_all
    from toolkit.results.layout import load_case_file

    cdir, _ = _setup(tmp_path)
    _, case = load_case_file(cdir.path / "case.json")
    script = subprocess.Popen(["sleep", "300"])
    try:
        run = begin_run(cdir.path, 0, pid=script.pid)
        owner = _job(run)
        out = io.StringIO()
        failures = run_all([(CASE, case, cdir, 0)], LocalExecutor(mpirun="/bin/false", gpus=0,
                                                                  cpus=2),
                           Console(file=out, width=300))
        assert failures == 1
        assert f"SKIP {CASE} r0" in out.getvalue() and "still runs" in out.getvalue()
        assert _job(run) == owner and not (run / "status.json").exists()
        assert not (cdir.path / "r0.attempt1").exists()
    finally:
        script.kill()
        script.wait()
