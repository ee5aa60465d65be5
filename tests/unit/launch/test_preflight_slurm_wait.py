"""The standalone Slurm preflight follows its job itself, at a steady pace, instead of
`sbatch --wait` (whose polls grow to 32 s apart): the Slurm commands replaced at the one seam
(`SlurmClient.runner`); the real ones run in tests/integration/test_preflight_slurm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.launch.test_slurm_client import Script
from toolkit.launch.preflight_slurm import (
    POLL_PENDING_S,
    POLL_RUNNING_S,
    SlurmRun,
    job_exit_status,
    wait_for_job,
)
from toolkit.launch.slurm_client import SlurmClient
from toolkit.spec import Case


def job(state: str, code: str = "0:0") -> tuple[int, str, str]:
    """`scontrol show job -o` as Slurm 22.05 prints it, shortened to the words read."""
    return 0, (f"JobId=7 JobName=trainbench-preflight UserId=root(0) JobState={state} "
               f"Reason=None Dependency=(null) Requeue=1 Restarts=0 ExitCode={code}\n"), ""


def test_a_job_is_asked_after_every_second_while_it_runs_and_its_status_returned() -> None:
    runner = Script(job("PENDING"), job("RUNNING"), job("RUNNING"), job("COMPLETING"),
                     job("COMPLETED"))
    slept: list[float] = []
    assert wait_for_job(SlurmClient(runner=runner), "7", slept.append) == 0
    assert slept == [POLL_PENDING_S, POLL_RUNNING_S, POLL_RUNNING_S, POLL_RUNNING_S]
    assert POLL_RUNNING_S <= 1.0 and all(c[:3] == ["scontrol", "show", "job"]
                                         for c in runner.calls)


@pytest.mark.parametrize(("state", "code", "status"), [
    ("COMPLETED", "0:0", 0), ("FAILED", "6:0", 6), ("FAILED", "0:9", 137),
    ("TIMEOUT", "0:15", 143), ("CANCELLED", "0:0", 1), ("NODE_FAIL", "", 1),
])
def test_the_jobs_exit_code_is_its_status(state: str, code: str, status: int) -> None:
    assert job_exit_status(code, state) == status


def test_a_job_the_controller_forgot_is_read_from_the_accounting() -> None:
    gone = (1, "", "slurm_load_jobs error: Invalid job id specified\n")
    runner = Script(job("RUNNING"), gone, (0, "7|FAILED|3:0\n", ""))
    assert wait_for_job(SlurmClient(runner=runner), "7", lambda s: None) == 3
    assert runner.calls[-1][0] == "sacct"
    # neither knows it: an error, not a wait without end
    runner = Script(gone, (0, "", ""))
    assert wait_for_job(SlurmClient(runner=runner), "7", lambda s: None) == 1


def test_run_submits_once_follows_the_job_and_ctrl_c_cancels_it(tmp_path: Path,
                                                                  capsys) -> None:
    case = Case(device="cpu", num_nodes=2)
    runner = Script((0, "7\n", ""), job("RUNNING"), job("COMPLETED", "0:0"))
    run = SlurmRun(case, python="/usr/bin/python3", client=SlurmClient(runner=runner),
                   sleep=lambda s: None)
    assert run.run(tmp_path) == 0
    sbatch = runner.calls[0]
    assert sbatch[0] == "sbatch" and "--wait" not in sbatch and "--parsable" in sbatch
    assert sbatch[-1] == str(tmp_path / "preflight.sh") and (tmp_path / "preflight.sh").exists()
    assert "Slurm job 7" in capsys.readouterr().out

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    runner = Script((0, "8\n", ""), job("RUNNING"), (0, "", ""))
    run = SlurmRun(case, python="/usr/bin/python3", client=SlurmClient(runner=runner),
                   sleep=interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.run(tmp_path)
    assert runner.calls[-1] == ["scancel", "8"]
    # a refusal is Slurm's words and status 1, no wait
    refused = (1, "", "sbatch: error: Batch job submission failed: Invalid partition name "
                      "specified\n")
    run = SlurmRun(case, python="/usr/bin/python3", client=SlurmClient(runner=Script(refused)),
                   sleep=interrupted)
    assert run.run(tmp_path) == 1
    assert "Invalid partition name specified" in capsys.readouterr().err
