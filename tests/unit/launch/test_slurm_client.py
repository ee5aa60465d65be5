"""Slurm client wrapper and run states, with the Slurm commands replaced at the one seam
(`SlurmClient.runner`); the real commands run in tests/integration/test_slurm_submit.py. The error
texts are the ones Slurm 22.05 prints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from toolkit.launch import job_ledger
from toolkit.launch.run_states import run_states
from toolkit.launch.slurm_client import SchedulerError, SlurmClient
from toolkit.results.layout import CaseDir
from toolkit.results.safe_write import atomic_write_json
from toolkit.spec import Case, from_plain, resolve


class Script:
    """Answers each call with the next (returncode, stdout, stderr); records argv."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        rc, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(list(argv), rc, out, err)


DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
#: Recorded: sbatch gave up waiting for a stopped slurmctld, which then queued the job all the
#: same (tests/data/slurm/README.md).
TIMED_OUT = (1, "", (DATA / "sbatch_timeout_but_queued.txt").read_text())
TAGGED = (DATA / "squeue_tagged.txt").read_text()  # job 1 under "site-42 trainbench:5f0c2a"
DOWN = (1, "", "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
               "(connect failure)")


def test_transient_errors_are_retried_with_doubling_back_off() -> None:
    runner = Script(DOWN, DOWN, (0, "42\n", ""))
    sleeps: list[float] = []
    slurm = SlurmClient(runner=runner, backoff_s=0.5, sleep=sleeps.append)
    assert slurm.sbatch("job.sh") == "42"
    assert sleeps == [0.5, 1.0]
    assert runner.calls[-1] == ["sbatch", "--parsable", "job.sh"]


def test_an_untagged_sbatch_that_may_have_queued_its_job_is_not_retried() -> None:
    runner = Script(TIMED_OUT)
    slurm = SlurmClient(runner=runner, sleep=lambda s: pytest.fail("must not retry"))
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh")
    assert err.value.unsure and "Socket timed out" in err.value.message
    assert len(runner.calls) == 1


def test_a_tagged_sbatch_that_timed_out_is_found_by_its_tag_not_submitted_again() -> None:
    runner = Script(TIMED_OUT, (0, TAGGED, ""))
    slurm = SlurmClient(runner=runner, sleep=lambda s: pytest.fail("must not retry"))
    assert slurm.sbatch("job.sh", ["--array=0-1"], tag="5f0c2a", comment="site-42") == "1"
    assert runner.calls[0] == ["sbatch", "--array=0-1", "--comment=site-42 trainbench:5f0c2a",
                               "--parsable", "job.sh"]
    assert runner.calls[1][:2] == ["squeue", "-h"] and "%F|%k" in runner.calls[1]
    assert len(runner.calls) == 2


def test_a_tagged_sbatch_is_retried_held_then_released_when_no_job_carries_its_tag() -> None:
    other = TAGGED.replace("5f0c2a", "0ther")
    runner = Script(TIMED_OUT, (0, other, ""), (0, "43\n", ""),
                    (0, other + "43|trainbench:5f0c2a\n", ""), (0, "", ""))
    sleeps: list[float] = []
    slurm = SlurmClient(runner=runner, backoff_s=0.5, sleep=sleeps.append)
    assert slurm.sbatch("job.sh", tag="5f0c2a") == "43"
    assert sleeps == [0.5]
    assert [c[0] for c in runner.calls] == ["sbatch", "squeue", "sbatch", "squeue", "scontrol"]
    assert "--hold" not in runner.calls[0] and runner.calls[2][1] == "--hold"
    assert runner.calls[-1] == ["scontrol", "release", "43"]


def test_a_first_job_acted_on_late_wins_and_the_held_retry_is_cancelled() -> None:
    """The controller acted on the first request after squeue had not listed it: two jobs
    carry the tag. The held retry never ran: it is cancelled and the first job is the answer."""
    runner = Script(TIMED_OUT, (0, "", ""), (0, "44\n", ""),
                    (0, "44|trainbench:t\n41|trainbench:t\n", ""), (0, "", ""), (0, "", ""))
    slurm = SlurmClient(runner=runner, sleep=lambda s: None)
    assert slurm.sbatch("job.sh", tag="t") == "41"
    # 41 is released too: a no-op unless it is itself a held retry of an earlier attempt.
    assert runner.calls[-2:] == [["scancel", "44"], ["scontrol", "release", "41"]]


def test_a_retry_of_a_job_the_grid_holds_is_left_held(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --hold\n#SBATCH --nodes=1\nsrun true\n")
    runner = Script(TIMED_OUT, (0, "", ""), (0, "46\n", ""), (0, "46|trainbench:t\n", ""))
    slurm = SlurmClient(runner=runner, sleep=lambda s: None)
    assert slurm.sbatch(str(script), tag="t") == "46"
    assert [c[0] for c in runner.calls] == ["sbatch", "squeue", "sbatch", "squeue"]  # no release


def test_when_the_held_retry_times_out_too_the_first_job_stays_and_is_released() -> None:
    """Both the first call and its held retry time out, and both were queued: the first is the
    answer (released, in case it is the held one), the later held retry is cancelled."""
    runner = Script(TIMED_OUT, (0, "", ""), TIMED_OUT,
                    (0, "48|trainbench:t\n47|trainbench:t\n", ""), (0, "", ""), (0, "", ""))
    slurm = SlurmClient(runner=runner, sleep=lambda s: None)
    assert slurm.sbatch("job.sh", tag="t") == "47"
    assert runner.calls[2][:2] == ["sbatch", "--hold"]
    assert runner.calls[4:] == [["scancel", "48"], ["scontrol", "release", "47"]]


def test_a_held_retry_that_cannot_be_released_is_unsure_not_refused() -> None:
    down = (1, "", "scontrol: error: Unable to contact slurm controller (connect failure)")
    runner = Script(TIMED_OUT, (0, "", ""), (0, "45\n", ""), (0, "45|trainbench:t\n", ""),
                    down, down)
    slurm = SlurmClient(runner=runner, retries=1, sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh", tag="t")
    assert err.value.unsure and ("job 45 under the comment trainbench:t may be held and could "
                                 "not be released") in err.value.message


def test_a_tagged_sbatch_is_unsure_when_squeue_does_not_answer_either() -> None:
    down = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    runner = Script(TIMED_OUT, down, down, down)
    slurm = SlurmClient(runner=runner, retries=2, sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh", tag="t")
    assert err.value.unsure and "trainbench:t" in err.value.message
    assert [c[0] for c in runner.calls] == ["sbatch", "squeue", "squeue", "squeue"]


def test_permanent_errors_carry_the_schedulers_words_and_are_not_retried() -> None:
    msg = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    runner = Script((1, "", msg))
    slurm = SlurmClient(runner=runner, sleep=lambda s: pytest.fail("must not retry"))
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh")
    assert err.value.message == msg and not err.value.transient
    assert len(runner.calls) == 1


def test_submit_limits_are_recognised() -> None:
    msg = ("sbatch: error: AssocMaxSubmitJobLimit\nsbatch: error: Batch job submission failed: "
           "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")
    slurm = SlurmClient(runner=Script((1, "", msg)), sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch("job.sh")
    assert err.value.limit and not err.value.transient


def test_retries_give_up_after_the_last_attempt() -> None:
    down = (1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    slurm = SlurmClient(runner=Script(*[down] * 3), retries=2, sleep=lambda s: None)
    with pytest.raises(SchedulerError) as err:
        slurm.queue(["7"])
    assert err.value.transient


def test_queue_parses_expanded_array_tasks() -> None:
    out = "12_0|RUNNING|None\n12_1|PENDING|Resources\n13|COMPLETED|None\n"
    runner = Script((0, out, ""))
    states = SlurmClient(runner=runner).queue(["12_0", "12_1", "13"])
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
    atomic_write_json(cdir.run_dir(0) / "status.json", {"status": "ok"}, root=cdir.root)
    atomic_write_json(cdir.run_dir(1) / "status.json",
                      {"status": "failed", "reason": "launcher exited with exit code 1",
                       "log": "output.log"}, root=cdir.root)
    script = cdir.path / "submission.sh"
    job_ledger.record_submit(root, "12", script,
                           [job_ledger.Entry("12", k, "c", (k,)) for k in range(4)], [])
    job_ledger.record_cancel(root, ["12_3"])
    # r0 finished while squeue still lists the task: the status file wins.
    runner = Script((0, "12_0|RUNNING|None\n12_2|PENDING|Priority\n", ""), NO_ACCOUNTING)
    states, note = run_states(root, SlurmClient(runner=runner))
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
    job_ledger.record_submit(root, "20", cdir.path / "submission.sh",
                           [job_ledger.Entry("20", 0, "c", (0,))], [])
    states, _ = run_states(root, SlurmClient(runner=Script((0, "", ""), NO_ACCOUNTING)))
    assert states[0].state == "lost"
    assert "left the queue without writing a status" in states[0].reason
    assert states[0].log == str(cdir.path / "slurm-20_0.out")
    # With accounting on, sacct names how the job ended.
    states, _ = run_states(root, SlurmClient(runner=Script((0, "", ""),
                                                      (0, "20_0|TIMEOUT|0:0\n", ""))))
    assert states[0].state == "timeout" and "ended TIMEOUT" in states[0].reason
    states, _ = run_states(root, SlurmClient(runner=Script((0, "", ""),
                                                      (0, "20_0|NODE_FAIL|0:0\n", ""))))
    assert states[0].state == "lost" and "ended NODE_FAIL" in states[0].reason


def test_manifest_skips_a_torn_last_line(tmp_path: Path) -> None:
    root = tmp_path
    job_ledger.record_submit(root, "5", root / "s.sh", [job_ledger.Entry("5", None, "c", (0, 1))],
                           [])
    with job_ledger.jobs_path(root).open("a") as fh:
        fh.write(json.dumps({"type": "submit", "job_id": "6"})[:10])
    m = job_ledger.load(root)
    assert [(e.slurm_id, e.repeats) for e in m.entries] == [("5", (0, 1))]
