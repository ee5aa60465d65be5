"""Slurm client wrapper and run states, with the Slurm commands replaced at the one seam
(`Slurm.runner`); the real commands run in tests/integration/test_slurm_submit.py. The error
texts are the ones Slurm 22.05 prints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from toolkit import manifest
from toolkit.case import Case, from_plain, resolve
from toolkit.results import CaseDir, atomic_write_json
from toolkit.scheduler import SchedulerError, Slurm
from toolkit.status import run_states


class Script:
    """Answers each call with the next (returncode, stdout, stderr); records argv."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        rc, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(list(argv), rc, out, err)


def test_transient_errors_are_retried_with_doubling_back_off() -> None:
    busy = (1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                   "operation")
    runner = Script(busy, busy, (0, "42\n", ""))
    sleeps: list[float] = []
    slurm = Slurm(runner=runner, backoff_s=0.5, sleep=sleeps.append)
    assert slurm.sbatch("job.sh") == "42"
    assert sleeps == [0.5, 1.0]
    assert runner.calls[-1] == ["sbatch", "--parsable", "job.sh"]


def test_permanent_errors_carry_the_schedulers_words_and_are_not_retried() -> None:
    msg = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    runner = Script((1, "", msg))
    slurm = Slurm(runner=runner, sleep=lambda s: pytest.fail("must not retry"))
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh")
    assert err.value.message == msg and not err.value.transient
    assert len(runner.calls) == 1


def test_submit_limits_are_recognised() -> None:
    msg = ("sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: Batch job submission failed: "
           "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")
    slurm = Slurm(runner=Script((1, "", msg)), sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh")
    assert err.value.limit and not err.value.transient


def test_retries_give_up_after_the_last_attempt() -> None:
    down = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    slurm = Slurm(runner=Script(*[down] * 3), retries=2, sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.queue(["7"])
    assert err.value.transient


def test_queue_parses_expanded_array_tasks() -> None:
    out = "12_0|RUNNING|None\n12_1|PENDING|Resources\n13|COMPLETED|None\n"
    runner = Script((0, out, ""))
    states = Slurm(runner=runner).queue(["12_0", "12_1", "13"])
    assert states == {"12_0": ("RUNNING", "None"), "12_1": ("PENDING", "Resources"),
                      "13": ("COMPLETED", "None")}
    assert runner.calls[0][:4] == ["squeue", "-h", "-r", "--states=all"]
    assert "12,13" in runner.calls[0]


NO_ACCOUNTING = (1, "", "sacct: error: Slurm accounting storage is disabled")


def _case(repeats: int) -> Case:
    return resolve(from_plain(Case, {"model": "resnet50", "repeats": repeats}, ""))


def test_run_states_from_files_first_then_the_queue(tmp_path: Path) -> None:
    root = tmp_path / "res"
    cdir = CaseDir(root, "c")
    cdir.write_case(_case(repeats=5))
    atomic_write_json(cdir.run_dir(0) / "status.json", {"status": "ok"})
    atomic_write_json(cdir.run_dir(1) / "status.json",
                      {"status": "failed", "reason": "launcher exited with exit code 1",
                       "log": "output.log"})
    script = cdir.path / "submission.sh"
    manifest.record_submit(root, "12", script,
                           [manifest.Entry("12", k, "c", (k,)) for k in range(4)], [])
    manifest.record_cancel(root, ["12_3"])
    # r0 finished while squeue still lists the task: the status file wins.
    runner = Script((0, "12_0|RUNNING|None\n12_2|PENDING|Priority\n", ""), NO_ACCOUNTING)
    states, note = run_states(root, Slurm(runner=runner))
    by = {s.repeat: s for s in states}
    assert by[0].state == "finished"
    assert by[1].state == "failed" and by[1].log.endswith("c/r1/output.log")
    assert by[2].state == "pending" and by[2].reason == "Priority"
    assert by[3].state == "cancelled"
    assert by[4].state == "not submitted"
    assert note == ""


def test_a_job_gone_without_a_status_is_lost_with_its_log(tmp_path: Path) -> None:
    root = tmp_path / "res"
    cdir = CaseDir(root, "c")
    cdir.write_case(_case(repeats=1))
    manifest.record_submit(root, "20", cdir.path / "submission.sh",
                           [manifest.Entry("20", 0, "c", (0,))], [])
    states, _ = run_states(root, Slurm(runner=Script((0, "", ""), NO_ACCOUNTING)))
    assert states[0].state == "lost"
    assert "left the queue without writing a status" in states[0].reason
    assert states[0].log == str(cdir.path / "slurm-20_0.out")
    # With accounting on, sacct names how the job ended.
    states, _ = run_states(root, Slurm(runner=Script((0, "", ""),
                                                      (0, "20_0|TIMEOUT|0:0\n", ""))))
    assert states[0].state == "timeout" and "ended TIMEOUT" in states[0].reason
    states, _ = run_states(root, Slurm(runner=Script((0, "", ""),
                                                      (0, "20_0|NODE_FAIL|0:0\n", ""))))
    assert states[0].state == "lost" and "ended NODE_FAIL" in states[0].reason


def test_manifest_skips_a_torn_last_line(tmp_path: Path) -> None:
    root = tmp_path
    manifest.record_submit(root, "5", root / "s.sh", [manifest.Entry("5", None, "c", (0, 1))],
                           [])
    with manifest.jobs_path(root).open("a") as fh:
        fh.write(json.dumps({"type": "submit", "job_id": "6"})[:10])
    m = manifest.load(root)
    assert [(e.slurm_id, e.repeats) for e in m.entries] == [("5", (0, 1))]
