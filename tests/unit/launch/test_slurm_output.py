"""How Slurm ended a job: the parser on real job logs (tests/data/slurm, see its README), the
status a run's script records from it, and how `toolkit.status` shows requeued runs and a
controller that does not answer."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from toolkit.launch import job_ledger
from toolkit.launch.lifecycle import begin_run, end_run
from toolkit.launch.run_states import run_states
from toolkit.launch.slurm_client import SlurmClient
from toolkit.launch.slurm_output import find_cancellation, parse_scontrol_job
from toolkit.results.layout import CaseDir, read_json
from toolkit.results.safe_write import atomic_write_json
from toolkit.spec import Case, from_plain
from toolkit.spec.grid import resolve

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


class Answers:
    """The runner seam: answers each Slurm command by its name; records argv."""

    def __init__(self, **by_command: tuple[int, str, str]) -> None:
        self.by_command = by_command
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        rc, out, err = self.by_command.get(argv[0], (1, "", f"{argv[0]}: not answered"))
        return subprocess.CompletedProcess(list(argv), rc, out, err)


@pytest.mark.parametrize(("name", "status", "cause", "nodes"), [
    ("time-limit.out", "timeout", "TIME LIMIT", ()),
    ("node-failure.out", "node_fail", "NODE FAILURE", ("node2",)),
    ("preempted-requeued.out", "preempted", "PREEMPTION", ()),
    ("scancel-after-requeue.out", "cancelled", "scancel", ()),
])
def test_real_job_logs_say_why_slurm_ended_the_job(name: str, status: str, cause: str,
                                                   nodes: tuple[str, ...]) -> None:
    found = find_cancellation((DATA / name).read_text())
    assert found is not None
    assert (found.status, found.cause, found.failed_nodes) == (status, cause, nodes)
    assert found.at.startswith("2026-11-23T")


def test_a_cause_wins_over_a_bare_cancel_and_plain_logs_say_nothing() -> None:
    both = ("slurmstepd-node1: error: *** JOB 7 ON node1 CANCELLED AT 2026-01-01T00:00:00 ***\n"
            + (DATA / "time-limit.out").read_text())
    c = find_cancellation(both)
    assert c is not None and c.status == "timeout"
    assert find_cancellation("rank 0: iteration 3\nTraceback ...\n") is None


def test_a_programs_slurm_style_line_is_not_slurms() -> None:
    """A program that prints Slurm's words, quoted by the worker inside a line of its own (or
    with no slurmstepd prefix), is not Slurm ending the job: its run is not called timeout."""
    fake = "*** JOB 5 ON node1 CANCELLED AT 2026-11-23T00:00:00 DUE TO TIME LIMIT ***"
    quoted = ("[rank 0] toolkit.workloads.command.ProgramFailed: rank 0: the program exited "
              f"with code 1; its last lines, newest first: slurmstepd: error: {fake} | x\n"
              f"{fake}\nrank 0: srun: error: Node failure on node9\n")
    assert find_cancellation(quoted) is None


def test_scontrol_one_line_output_is_a_dict() -> None:
    line = ("JobId=6 JobName=nf2.sh UserId=root(0) JobState=COMPLETING Reason=NodeDown "
            "Requeue=0 Restarts=0 BatchFlag=1 TimeLimit=00:10:00 StdOut=/tmp/exp/nf2-6.out")
    info = parse_scontrol_job(line)
    assert info["JobState"] == "COMPLETING" and info["Reason"] == "NodeDown"
    assert info["StdOut"] == "/tmp/exp/nf2-6.out" and info["Restarts"] == "0"


def _case_dir(tmp_path: Path) -> CaseDir:
    cdir = CaseDir(tmp_path / "res", "c")
    cdir.write_case(resolve(from_plain(Case, {"model": "resnet50", "repeats": 2}, "")))
    return cdir


def test_a_time_limit_is_recorded_as_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    cdir = _case_dir(tmp_path)
    run_dir = begin_run(cdir.path, 0)
    (run_dir / "output.log").write_text((DATA / "time-limit.out").read_text())
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    scontrol = "JobId=1 JobState=COMPLETING Reason=TimeLimit Requeue=1 Restarts=0 " \
               "TimeLimit=00:01:00"
    status, row = end_run(cdir.path, 0, 143, "slurm", terminated=True,
                      slurm=SlurmClient(runner=Answers(scontrol=(0, scontrol, ""))))
    assert status["status"] == "timeout" and status["terminated"] is True
    assert "time limit" in status["reason"] and "Slurm job 1" in status["reason"]
    assert "requeued" not in status
    assert read_json(run_dir / "status.json")["status"] == "timeout"
    assert row.status == "timeout"


def test_a_node_failure_that_slurm_requeued_shows_as_pending_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cdir = _case_dir(tmp_path)
    run_dir = begin_run(cdir.path, 0)
    (run_dir / "output.log").write_text("srun: error: Node failure on node2\n")
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)  # first attempt
    scontrol = "JobId=31 JobState=COMPLETING Reason=None Requeue=1 Restarts=1"
    status, _ = end_run(cdir.path, 0, 143, "slurm", terminated=True,
                    slurm=SlurmClient(runner=Answers(scontrol=(0, scontrol, ""))))
    assert status["status"] == "node_fail" and status["requeued"] is True
    assert status["failed_nodes"] == ["node2"] and "node2" in status["reason"]
    job_ledger.record_submit(cdir.root, "31", cdir.path / "submission.sh",
                           [job_ledger.Entry("31", None, "c", (0,))], [])
    squeue = Answers(squeue=(0, "31|PENDING|BeginTime\n", ""))
    states, _ = run_states(cdir.root, SlurmClient(runner=squeue))
    r0 = next(s for s in states if s.repeat == 0)
    assert r0.state == "pending" and r0.reason.startswith("requeued: a node of the job failed")
    # Once the job is gone from the queue the attempt stays failed.
    states, _ = run_states(cdir.root, SlurmClient(runner=Answers(squeue=(0, "", ""))))
    assert next(s for s in states if s.repeat == 0).state == "failed"
    # The requeued job's script runs the repeat again; the failed attempt is kept aside.
    begin_run(cdir.path, 0)
    assert (cdir.path / "r0.attempt1" / "status.json").exists()


def test_an_ordinary_failure_under_slurm_stays_the_programs(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    cdir = _case_dir(tmp_path)
    run_dir = begin_run(cdir.path, 1)
    (run_dir / "output.log").write_text("Traceback (most recent call last):\nValueError: x\n")
    monkeypatch.setenv("SLURM_JOB_ID", "40")
    scontrol = "JobId=40 JobState=RUNNING Reason=None Requeue=1 Restarts=0"
    status, _ = end_run(cdir.path, 1, 1, "slurm",
                    slurm=SlurmClient(runner=Answers(scontrol=(0, scontrol, ""))))
    assert status["status"] == "failed"
    assert status["reason"].startswith("launcher exited with exit code 1; log: ")
    assert "slurm" not in status and "requeued" not in status


def test_a_step_srun_ended_after_a_task_crashed_is_the_ranks_failure_not_a_cancel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """srun's `--kill-on-bad-exit` ends the step with a bare `STEP ... CANCELLED` line (a real
    log): the run failed because its rank crashed; nobody ran scancel."""
    log = (DATA / "step-killed-after-crash.out").read_text()
    assert "*** STEP 1.0 ON node1 CANCELLED AT" in log
    assert find_cancellation(log) is None
    cdir = _case_dir(tmp_path)
    run_dir = begin_run(cdir.path, 0)
    (run_dir / "output.log").write_text(log)
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    scontrol = "JobId=1 JobState=RUNNING Reason=None Requeue=1 Restarts=0"
    status, _ = end_run(cdir.path, 0, 143, "slurm",
                        slurm=SlurmClient(runner=Answers(scontrol=(0, scontrol, ""))))
    assert status["status"] == "failed" and "scancel" not in status["reason"]
    assert "rank 0 (host node1) was killed by signal SIGSEGV" in status["reason"]
    # With the batch step's JOB line beside it, the same step line is a scancel of the job.
    job_line = "slurmstepd-node1: error: *** JOB 1 ON node1 CANCELLED AT 2026-11-26T00:11:29 ***\n"
    c = find_cancellation(job_line + log)
    assert c is not None and c.status == "cancelled"


def test_runs_are_unknown_not_lost_while_the_controller_does_not_answer(tmp_path: Path) -> None:
    cdir = _case_dir(tmp_path)
    atomic_write_json(cdir.run_dir(1) / "status.json", {"status": "ok"}, root=cdir.root)
    job_ledger.record_submit(cdir.root, "50", cdir.path / "submission.sh",
                           [job_ledger.Entry("50", k, "c", (k,)) for k in range(2)], [])
    down = Answers(squeue=(1, "", "squeue: error: Unable to contact slurm controller "
                                  "(connect failure)"))
    slurm = SlurmClient(runner=down, retries=1, sleep=lambda s: None)
    states, note = run_states(cdir.root, slurm)
    by = {s.repeat: s for s in states}
    assert by[0].state == "unknown" and by[1].state == "finished"
    assert "squeue failed" in note and "Unable to contact" in note
    assert [c[0] for c in down.calls] == ["squeue", "squeue"]  # retried, no sacct


def test_runs_submitted_to_slurm_are_unknown_where_no_slurm_client_is(tmp_path: Path) -> None:
    cdir = _case_dir(tmp_path)
    job_ledger.record_submit(cdir.root, "51", cdir.path / "submission.sh",
                           [job_ledger.Entry("51", 0, "c", (0,))], [])
    states, note = run_states(cdir.root, None)
    assert [(s.repeat, s.state) for s in states] == [(0, "unknown"), (1, "not submitted")]
    assert "squeue not found" in note


def _stand_in_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rc: int, err: str) -> None:
    """sbatch and sinfo first on PATH; sinfo answers as told (the one seam: the real
    messages are Slurm 22.05's, as printed on the local cluster with slurmctld stopped and
    with SLURM_CONF naming no file)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("sbatch", "sinfo"):
        exe = bindir / name
        exe.write_text(f"#!/bin/sh\necho {shlex.quote(err)} >&2\nexit {rc}\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")


@pytest.mark.parametrize(("rc", "err", "state"), [
    (0, "", "up"),
    (0, "", "absent:SLURM_CONF"),
    (1, "slurm_load_partitions: Unable to contact slurm controller (connect failure)", "down"),
    (1, "sinfo: error: fetch_config: DNS SRV lookup failed\nsinfo: error: "
        "_establish_config_source: failed to fetch config\nsinfo: fatal: Could not establish a "
        "configuration source", "absent"),
])
def test_probe_tells_a_silent_controller_from_no_slurm(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      rc: int, err: str, state: str) -> None:
    _stand_in_slurm(tmp_path, monkeypatch, rc, err)
    if state == "absent:SLURM_CONF":  # a torn-down cluster's file: sinfo would retry 60 s
        monkeypatch.setenv("SLURM_CONF", str(tmp_path / "gone" / "slurm.conf"))
        assert SlurmClient.probe() == ("absent", f"SLURM_CONF names no file ({tmp_path}/gone/"
                                 "slurm.conf)")
        return
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert SlurmClient.probe()[0] == state


def test_submit_auto_runs_nothing_when_the_controller_is_silent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from toolkit import submit

    _stand_in_slurm(tmp_path, monkeypatch, 1, "slurm_load_partitions: Unable to contact slurm "
                    "controller (connect failure)")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nbase: {model: resnet50, device: cpu, batch_size_per_device: 1}\n")
    res = tmp_path / "res"
    assert submit.main(["--grid", str(grid), "--results", str(res)]) == 2
    err = capsys.readouterr().err
    assert "controller does not answer" in err and "--executor local" in err
    assert not res.exists()
