"""Submitting under MaxSubmitJobs (toolkit.launch.submission_queue, toolkit.launch.slurm_submit)
against a fake scheduler at the one seam, `SlurmClient.runner`: it answers sbatch and squeue
as Slurm 22.05 does (the refusal is the text real sbatch printed at the limit,
tests/data/slurm/README.md), and its `sleep` lets the oldest jobs finish. The real scheduler runs in
tests/integration/test_slurm_limits.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from toolkit.launch import job_ledger
from toolkit.launch.run_states import run_states
from toolkit.launch.slurm import SlurmExecutor
from toolkit.launch.slurm_client import SchedulerError, SlurmClient
from toolkit.launch.slurm_submit import queued_runs, submit_slurm
from toolkit.launch.submission_queue import (
    LimitTooLow,
    Submission,
    array_spec,
    split,
    submit_queued,
)
from toolkit.spec import Case, CaseError

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"
LIMIT_ERROR = (DATA / "sbatch_limit_error.txt").read_text()
TIMED_OUT = (DATA / "sbatch_timeout_but_queued.txt").read_text()  # and the job was queued
SQUEUE_DOWN = "squeue: error: Unable to contact slurm controller (connect failure)"


def parse_array(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


class FakeSlurm:
    """A controller with MaxSubmitJobs=`limit` on this user; `finish_per_sleep` of the oldest
    jobs end at every sleep."""

    def __init__(self, limit: int, finish_per_sleep: int = 0) -> None:
        self.limit = limit
        self.finish_per_sleep = finish_per_sleep
        self.active: list[str] = []        # slurm ids, oldest first
        self.accepted: list[list[str]] = []  # sbatch argv of accepted submissions
        self.refused = 0
        self.sleeps: list[float] = []
        self.max_active = 0
        self.next_id = 100
        self.fail_with: str | None = None   # a non-limit error for the next sbatch
        self.during_sbatch = lambda: None
        self.lose_answers = 0  # the next N accepted sbatch calls fail as if timed out
        self.unreachable = False  # squeue cannot reach the controller
        self.comments: dict[str, str] = {}  # job id -> its --comment
        self.released: list[str] = []  # scontrol release

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        if argv[0] == "sbatch":
            return self.sbatch(argv)
        if argv[0] == "squeue":
            if self.unreachable:
                return subprocess.CompletedProcess(argv, 1, "", SQUEUE_DOWN)
            if "%F|%k" in argv:
                out = "".join(f"{i.split('_')[0]}|{self.comments.get(i.split('_')[0], '')}\n"
                              for i in self.active)
            elif "--me" in argv:
                out = "".join(f"{i}|PENDING\n" for i in self.active)
            else:
                out = "".join(f"{i}|PENDING|AssocMaxJobsLimit\n" for i in self.active)
            return subprocess.CompletedProcess(argv, 0, out, "")
        if argv[:2] == ["scontrol", "release"]:
            self.released.append(argv[2])
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Slurm accounting "
                                                            "storage is disabled")
        raise AssertionError(f"unexpected command {argv}")

    def sbatch(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        if "--test-only" in argv:
            return subprocess.CompletedProcess(argv, 0, "", "sbatch: Job 3 to start at now")
        if self.fail_with:
            msg, self.fail_with = self.fail_with, None
            return subprocess.CompletedProcess(argv, 1, "", msg)
        self.during_sbatch()
        arrays = [a.split("=", 1)[1] for a in argv if a.startswith("--array=")]
        script = Path(next(a for a in argv[1:] if not a.startswith("-")))
        if not arrays and script.exists():  # as Slurm: the script's own #SBATCH --array
            arrays = [ln.split("=", 1)[1] for ln in script.read_text().splitlines()
                      if ln.startswith("#SBATCH --array=")]
        tasks = parse_array(arrays[0]) if arrays else None
        if len(self.active) + (len(tasks) if tasks else 1) > self.limit:
            self.refused += 1
            return subprocess.CompletedProcess(argv, 1, "", LIMIT_ERROR)
        job = str(self.next_id)
        self.next_id += 1
        self.active += [f"{job}_{t}" for t in tasks] if tasks else [job]
        self.max_active = max(self.max_active, len(self.active))
        self.accepted.append(argv)
        self.comments[job] = next((a.split("=", 1)[1] for a in argv
                                   if a.startswith("--comment=")), "")
        if self.lose_answers:
            self.lose_answers -= 1
            return subprocess.CompletedProcess(argv, 1, "", TIMED_OUT)
        return subprocess.CompletedProcess(argv, 0, f"{job}\n", "")

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        del self.active[:self.finish_per_sleep]

    def client(self) -> SlurmClient:
        return SlurmClient(runner=self, sleep=self.sleep)


def grid_array(folder: Path, n: int) -> Submission:
    """A grid-scope array as SlurmExecutor.plan makes it: the tasks in the script's directive."""
    script = folder / "array-0000.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --array=0-{n - 1}\n")
    return Submission(script, (), (), tuple((i, f"case{i:04d}", (0,)) for i in range(n)))


def case_array(cid: str, repeats: int) -> Submission:
    return Submission(Path(f"/r/cases/{cid}/submission.sh"),
                      (f"--array={','.join(map(str, range(repeats)))}",), (),
                      tuple((r, cid, (r,)) for r in range(repeats)))


def arrays_of(fake: FakeSlurm) -> list[str]:
    return [next((a for a in argv if a.startswith("--array=")), "-") for argv in fake.accepted]


# -- pieces -----------------------------------------------------------------------------------

def test_array_spec_folds_runs() -> None:
    assert array_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert array_spec([3]) == "3"
    assert array_spec([9, 8, 8, 10]) == "8-10"


def test_split_cuts_case_and_grid_arrays_into_subset_arrays(tmp_path: Path) -> None:
    head, rest = split(case_array("c", 4), 3)
    assert head.options == ("--array=0-2",) and [t for t, _, _ in head.tasks] == [0, 1, 2]
    assert rest is not None and rest.options == ("--array=3",) and rest.tasks == ((3, "c", (3,)),)
    head, rest = split(grid_array(tmp_path, 10), 4)
    assert head.options == ("--array=0-3",) and head.script == tmp_path / "array-0000.sh"
    assert rest is not None and rest.options == ("--array=4-9",) and len(rest.tasks) == 6
    whole = Submission(Path("s.sh"), (), ("0 1",), ((None, "c", (0, 1)),))
    assert split(whole, 1) == (whole, None)  # one job (repeats in sequence): never cut


# -- the queue --------------------------------------------------------------------------------

def test_a_1000_task_array_goes_in_as_slots_free_each_task_once(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=50, finish_per_sleep=20)
    got: list[Submission] = []
    waits: list[tuple[int, int]] = []
    stats = submit_queued([grid_array(tmp_path, 1000)], fake.client(),
                          lambda sub, job: got.append(sub), lambda a, left: waits.append((a, left)),
                          sleep=fake.sleep)
    tasks = [t for sub in got for t, _, _ in sub.tasks]
    assert sorted(tasks) == list(range(1000)) and len(tasks) == 1000
    # Slurm saw exactly the recorded tasks, in pieces no larger than the limit.
    assert sorted(t for argv in fake.accepted
                  for t in parse_array(next(a for a in argv if a.startswith("--array="))[8:])
                  ) == list(range(1000))
    assert fake.max_active == 50 and stats.limit == 50
    assert waits[0] == (50, 950) and all(a == 50 for a, _ in waits)
    # First round halves 1000 -> 31 (5 refusals); then each round fills what freed and
    # probes once: about one refused sbatch per round, not a storm.
    assert stats.refused <= stats.waits + 10, (stats.refused, stats.waits)
    assert stats.jobs_submitted == len(fake.accepted)


def test_case_arrays_are_cut_at_the_limit_and_waited_for() -> None:
    fake = FakeSlurm(limit=3, finish_per_sleep=2)
    subs = [case_array("a", 4), case_array("b", 2)]
    stats = submit_queued(subs, fake.client(), lambda s, j: None, sleep=fake.sleep)
    # a[0-3] refused -> a[0-1]; a[2-3] refused -> a[2]; a[3] refused at 3 active: wait (2 end),
    # then fill the 2 free slots (a[3], then b[0]), probe b[1] (refused), wait, b[1].
    assert arrays_of(fake) == ["--array=0-1", "--array=2", "--array=3", "--array=0",
                               "--array=1"]
    assert [argv[-1] for argv in fake.accepted] == [
        "/r/cases/a/submission.sh"] * 3 + ["/r/cases/b/submission.sh"] * 2
    assert stats.limit == 3 and fake.max_active == 3


def test_jobs_without_array_tasks_count_as_one_and_are_never_cut() -> None:
    fake = FakeSlurm(limit=2, finish_per_sleep=1)
    subs = [Submission(Path(f"/r/cases/c{i}/submission.sh"), (), ("0 1 2",),
                       ((None, f"c{i}", (0, 1, 2)),)) for i in range(5)]
    runs_done: list[int] = []
    submit_queued(subs, fake.client(), lambda s, j: runs_done.append(len(s.tasks[0][2])),
                  sleep=fake.sleep)
    assert arrays_of(fake) == ["-"] * 5 and sum(runs_done) == 15
    assert all(argv[-1] == "0 1 2" for argv in fake.accepted)


def test_back_off_doubles_while_nothing_frees_then_a_raised_limit_is_used(tmp_path: Path
                                                                        ) -> None:
    """Nothing of ours ends, but the administrator raises the limit from 2 to 4: the polls
    back off to the longest interval, then probe and fill the new slots."""
    fake = FakeSlurm(limit=2)
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 3:
            fake.limit = 4

    stats = submit_queued([grid_array(tmp_path, 4)], SlurmClient(runner=fake, sleep=sleep),
                          lambda s, j: None, sleep=sleep, first_poll_s=1, max_poll_s=8)
    assert sleeps == [1, 2, 4, 8]
    assert arrays_of(fake) == ["--array=0-1", "--array=2", "--array=3"]
    assert stats.limit == 2  # measured before the raise; the probes found the room


def test_a_limit_below_one_job_stops_with_slurms_words(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=0)
    with pytest.raises(LimitTooLow) as err:
        submit_queued([grid_array(tmp_path, 3)], fake.client(),
                      lambda s, j: pytest.fail("accepted"), sleep=fake.sleep)
    assert "AssocMaxSubmitJobLimit" in err.value.message
    assert "none of yours is queued" in err.value.message


def test_other_errors_stop_at_once_after_recording_what_was_accepted() -> None:
    fake = FakeSlurm(limit=10)
    got: list[str] = []

    def accepted(sub: Submission, job: str) -> None:
        got.append(job)
        fake.fail_with = "sbatch: error: Batch job submission failed: Invalid account"

    with pytest.raises(SchedulerError) as err:
        submit_queued([case_array("a", 1), case_array("b", 1)], fake.client(), accepted,
                      sleep=fake.sleep)
    assert got == ["100"] and "Invalid account" in err.value.message and not err.value.limit


def test_ctrl_c_during_sbatch_is_held_until_the_job_is_recorded() -> None:
    fake = FakeSlurm(limit=10)
    fake.during_sbatch = lambda: os.kill(os.getpid(), signal.SIGINT)
    got: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        submit_queued([case_array("a", 1), case_array("b", 1)], fake.client(),
                      lambda s, j: got.append(j), sleep=fake.sleep)
    assert got == ["100"] and len(fake.accepted) == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# -- submit_slurm: progress, manifest, Ctrl-C and the re-run ------------------------------------

def _plan(tmp_path: Path, n: int) -> list[tuple[str, Case, tuple[int, ...]]]:
    case = Case.from_dict({"device": "cpu", "slurm": {"array_scope": "grid"}})
    return [(f"case{i}", case, (0,)) for i in range(n)]


def test_submit_slurm_records_every_piece_and_shows_the_waiting_state(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=4, finish_per_sleep=4)
    executor = SlurmExecutor(python="python3", slurm=fake.client(), gpus=False)
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    rc = submit_slurm(tmp_path, "g", executor, _plan(tmp_path, 10), console, console, False)
    text = out.getvalue()
    assert rc == 0, text
    assert "Slurm's submission limit reached at 4 of your jobs: the other 6 run(s)" in text
    assert "waiting for a submission slot (4 of yours queued at the limit, 6 left to submit)" \
        in text
    assert "10/10" in text and "submitted 4 job(s), 10 run(s); at the submission limit (4 jobs)" \
        in text
    m = job_ledger.load(tmp_path)
    assert sorted(e.case_id for e in m.entries) == [f"case{i}" for i in range(10)]
    assert sorted(e.task for e in m.entries if e.task is not None) == list(range(10))


def test_ctrl_c_while_waiting_then_a_rerun_submits_only_the_rest(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=4)

    def interrupt(s: float) -> None:
        raise KeyboardInterrupt

    executor = SlurmExecutor(python="python3", slurm=SlurmClient(runner=fake, sleep=interrupt),
                             gpus=False)
    out = io.StringIO()
    console = Console(file=out, width=200)
    plan = _plan(tmp_path, 10)
    assert submit_slurm(tmp_path, "g", executor, plan, console, console, False) == 130
    assert "interrupted: 4 of 10 runs (2 jobs) were submitted and recorded" in out.getvalue()
    # The re-run: what is queued is skipped (toolkit.submit does this through queued_runs).
    queued = queued_runs(tmp_path, fake.client())
    assert len(queued) == 4
    rest = [(cid, case, tuple(r for r in reps if (cid, r) not in queued))
            for cid, case, reps in plan]
    fake.active.clear()  # the first four finished meanwhile
    fake.finish_per_sleep = 4
    executor.slurm = fake.client()
    assert submit_slurm(tmp_path, "g", executor, rest, console, console, False) == 0
    cases = [e.case_id for e in job_ledger.load(tmp_path).entries]
    assert sorted(cases) == [f"case{i}" for i in range(10)]  # each exactly once


# -- an sbatch that fails although Slurm queued its job ---------------------------------------

def _submit(tmp_path: Path, fake: FakeSlurm, n: int) -> tuple[int, str]:
    executor = SlurmExecutor(python="python3", slurm=fake.client(), gpus=False)
    out = io.StringIO()
    console = Console(file=out, width=200)
    plan = [(cid, case, tuple(r for r in reps if (cid, r) not in queued_runs(tmp_path,
                                                                            fake.client())))
            for cid, case, reps in _plan(tmp_path, n)]
    rc = submit_slurm(tmp_path, "g", executor, plan, console, console, False)
    return rc, out.getvalue()


def test_a_timed_out_sbatch_whose_job_was_queued_is_recorded_once(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=100)
    fake.lose_answers = 1
    rc, text = _submit(tmp_path, fake, 3)
    assert rc == 0, text
    assert len(fake.accepted) == 1  # found by its tag: no second job
    m = job_ledger.load(tmp_path)
    assert sorted(e.case_id for e in m.entries) == ["case0", "case1", "case2"]
    assert not m.unconfirmed and len(m.intents) == 1
    assert {e.job_id for e in m.entries} == {"100"}


def test_when_squeue_cannot_tell_the_next_submit_adopts_the_job(tmp_path: Path) -> None:
    """sbatch times out and squeue is down too: the submit stops, saying the job's fate is
    unknown; the next submit finds it by its tag, records it and submits nothing again."""
    fake = FakeSlurm(limit=100)
    fake.lose_answers = 1
    fake.unreachable = True
    rc, text = _submit(tmp_path, fake, 2)
    assert rc == 1 and "Whether Slurm queued the last job is unknown" in text, text
    m = job_ledger.load(tmp_path)
    assert not m.entries and len(m.unconfirmed) == 1
    assert [s.state for s in run_states(tmp_path, fake.client())[0]] == ["unknown"] * 2
    fake.unreachable = False
    states, _ = run_states(tmp_path, fake.client())  # status adopts it in memory
    assert {s.state for s in states} == {"pending"} and {s.job for s in states} == {"100_0",
                                                                                       "100_1"}
    assert job_ledger.load(tmp_path).unconfirmed  # ... and writes nothing
    assert job_ledger.settle(tmp_path, fake.client()) == [
        f"job 100 ({tmp_path / 'slurm' / 'array-0000.sh'}): its sbatch failed, but Slurm had "
        "queued it; recorded now"]
    rc, text = _submit(tmp_path, fake, 2)
    assert rc == 0 and "submitted 0 job(s), 0 run(s)" in text, text
    assert len(fake.accepted) == 1 and fake.released == ["100"]
    assert [r for r in (tmp_path / "slurm" / "jobs.jsonl").read_text().splitlines()
            if '"adopted": true' in r]


def test_an_intent_slurm_has_no_job_for_is_void_and_its_runs_are_submitted(
        tmp_path: Path) -> None:
    """The process died between writing its intent and sbatch (or Slurm lost the request):
    nothing carries the tag, so the runs are submitted again, once."""
    job_ledger.record_intent(tmp_path, "dead", tmp_path / "x.sh", [], [(0, "case0", (0,))])
    fake = FakeSlurm(limit=100)
    assert job_ledger.settle(tmp_path, fake.client()) == []
    m = job_ledger.load(tmp_path)
    assert not m.unconfirmed and "dead" in m.settled
    rc, text = _submit(tmp_path, fake, 1)
    assert rc == 0 and len(fake.accepted) == 1, text


def test_a_refused_sbatch_closes_its_intent(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=100)
    fake.fail_with = "sbatch: error: Batch job submission failed: Invalid account"
    rc, text = _submit(tmp_path, fake, 1)
    assert rc == 1 and "Invalid account" in text and "unknown" not in text
    m = job_ledger.load(tmp_path)
    assert len(m.intents) == 1 and not m.unconfirmed and not m.entries


def test_the_grid_comment_is_kept_before_the_tag(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=100)
    case = Case.from_dict({"device": "cpu", "slurm": {"extra_sbatch": ["--comment=site-42"]}})
    (tmp_path / "cases" / "c").mkdir(parents=True)
    executor = SlurmExecutor(python="python3", slurm=fake.client(), gpus=False)
    console = Console(file=io.StringIO(), width=200)
    assert submit_slurm(tmp_path, "g", executor, [("c", case, (0, 1))], console, console,
                        False) == 0
    token = next(iter(job_ledger.load(tmp_path).intents))
    assert fake.comments["100"] == f"site-42 trainbench:{token}"


# -- slurm.array_parallelism ------------------------------------------------------------------

def test_array_parallelism_caps_every_array_even_when_it_is_cut(tmp_path: Path) -> None:
    """`%K` on the case's --array, in the grid-level script's directive, and on every piece a
    submission limit cuts off; cases that differ only in it do not share a grid array."""
    capped = Case.from_dict({"device": "cpu", "repeats": 4, "slurm": {"array_parallelism": 2}})
    executor = SlurmExecutor(python="python3", slurm=FakeSlurm(limit=100).client(), gpus=False)
    (tmp_path / "cases" / "c").mkdir(parents=True)
    [sub] = executor.plan(tmp_path, "g", [("c", capped, (0, 1, 3))])
    assert sub.options == ("--array=0,1,3%2",)
    head, rest = split(sub, 2)
    assert head.options == ("--array=0-1%2",) and rest is not None
    assert rest.options == ("--array=3%2",)
    assert "#SBATCH --array=0-3%2" in executor.script(capped, "c", tmp_path / "c.json")

    grid = {"array_scope": "grid"}
    one = Case.from_dict({"device": "cpu", "slurm": {**grid, "array_parallelism": 1}})
    free = Case.from_dict({"device": "cpu", "slurm": grid})
    subs = executor.plan(tmp_path, "g", [("a", one, (0,)), ("b", one, (0,)), ("c", free, (0,))])
    assert [len(s.tasks) for s in subs] == [2, 1]
    assert "#SBATCH --array=0-1%1" in subs[0].script.read_text()
    assert "%" not in subs[1].script.read_text().split("--array=")[1].split("\n")[0]
    assert [s.options for s in subs] == [(), ()]
    assert split(subs[0], 1)[0].options == ("--array=0%1",)


def test_array_parallelism_below_one_is_refused() -> None:
    with pytest.raises(CaseError, match=r"slurm.array_parallelism: expected an integer >= 1"):
        Case.from_dict({"device": "cpu", "slurm": {"array_parallelism": 0}})


def test_a_job_adopted_for_a_grid_that_holds_its_jobs_stays_held(tmp_path: Path) -> None:
    fake = FakeSlurm(limit=100)
    case = Case.from_dict({"device": "cpu", "slurm": {"extra_sbatch": ["--hold"]}})
    (tmp_path / "cases" / "c").mkdir(parents=True)
    executor = SlurmExecutor(python="python3", slurm=fake.client(), gpus=False)
    script = tmp_path / "cases" / "c" / "submission.sh"
    script.write_text(executor.script(case, "c", tmp_path / "cases" / "c" / "case.json"))
    assert "#SBATCH --hold" in script.read_text().split("\n")
    fake.lose_answers = 1
    fake.unreachable = True
    console = Console(file=io.StringIO(), width=200)
    assert submit_slurm(tmp_path, "g", executor, [("c", case, (0,))], console, console,
                        False) == 1
    fake.unreachable = False
    assert len(job_ledger.settle(tmp_path, fake.client())) == 1
    assert fake.released == [] and [e.job_id for e in job_ledger.load(tmp_path).entries] == ["100"]


def test_an_adopted_job_that_cannot_be_released_stays_unsettled(tmp_path: Path) -> None:
    """The next submit adopts a job only once it is released: else it says Slurm does not
    answer, records nothing, and a later submit tries again."""
    fake = FakeSlurm(limit=100)
    fake.lose_answers = 1
    fake.unreachable = True
    assert _submit(tmp_path, fake, 1)[0] == 1
    fake.unreachable = False
    no_release = SlurmClient(runner=lambda argv: (
        subprocess.CompletedProcess(argv, 1, "", SQUEUE_DOWN.replace("squeue", "scontrol"))
        if argv[0] == "scontrol" else fake(argv)), retries=1, sleep=lambda s: None)
    with pytest.raises(SchedulerError):
        job_ledger.settle(tmp_path, no_release)
    assert len(job_ledger.load(tmp_path).unconfirmed) == 1 and not job_ledger.load(tmp_path).entries
    assert len(job_ledger.settle(tmp_path, fake.client())) == 1 and fake.released == ["100"]
