"""Submitting a grid's runs to Slurm: every distinct allocation checked with `sbatch --test-only`
first, then each sbatch call written ahead to the ledger of submitted jobs, submitted through
the submission queue (which waits out MaxSubmitJobs), and recorded, under a progress bar.

What it needs of the executor (its sbatch calls, their allocation keys, its Slurm client) is the
`Planner` protocol here; the Slurm executor (`toolkit.launch.slurm`) is one and imports this
module, never the other way round.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from toolkit import EXIT_INTERRUPTED
from toolkit.launch import job_ledger, submission_queue
from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, SlurmClient
from toolkit.launch.submission_queue import Submission
from toolkit.spec import Case


class Planner(Protocol):
    """What submitting needs of an executor: the sbatch calls of a plan, the allocation key of
    a case, and the Slurm client to submit through."""

    slurm: SlurmClient

    def plan(self, root: Path, grid_name: str, todo: list[tuple[str, Case, tuple[int, ...]]],
             scripts: Path | None = None) -> list[Submission]:
        """The sbatch calls that run `todo` ((case id, case, repeats to run) per case)."""
        ...

    def shape(self, case: Case) -> str:
        """Key of the directives that decide a case's allocation."""
        ...


def queued_runs(root: Path, slurm: SlurmClient) -> set[tuple[str, int]]:
    """(case, repeat) pairs whose latest job is still pending or running (not cancelled)."""
    m = job_ledger.load(root)
    latest = {key: e for key, e in m.latest().items() if not m.is_cancelled(e)}
    if not latest:
        return set()
    states = slurm.queue(e.slurm_id for e in latest.values())
    return {key for key, e in latest.items()
            if states.get(e.slurm_id, ("", ""))[0] in ACTIVE_STATES}


def submit_slurm(root: Path, grid_name: str, executor: Planner,
                 plan: list[tuple[str, Case, tuple[int, ...]]], console: Console,
                 err: Console, wait: bool) -> int:
    """Check every distinct allocation with sbatch --test-only (nothing is submitted if Slurm
    refuses one), then submit with a progress bar, recording each job as it is accepted. At a
    submission limit (MaxSubmitJobs) the rest stays queued here and goes in as slots free
    (toolkit.launch.submission_queue); Ctrl-C leaves every accepted job recorded, and a
    second submit continues."""
    subs = executor.plan(root, grid_name, plan)
    cases = {cid: case for cid, case, _ in plan}
    seen: set[str] = set()
    for sub in subs:
        shape = executor.shape(cases[sub.tasks[0][1]])
        if shape in seen:
            continue
        seen.add(shape)
        try:
            executor.slurm.sbatch(str(sub.script), sub.options, sub.args, test_only=True)
        except SchedulerError as e:
            if e.limit:
                continue  # a submission limit is what the queue below waits out
            err.print(f"error: Slurm refuses {sub.script} (case {sub.tasks[0][1]}): {e.message}"
                      "\nnothing was submitted", soft_wrap=True)
            return 2
    total = sum(submission_queue.runs(s) for s in subs)
    done = {"jobs": 0, "runs": 0}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("submitting", total=total)
        limit_said = False
        last_note_s = -WAIT_NOTE_EVERY_S

        token = ""  # of the sbatch call under way

        def intent(sub: Submission) -> str:
            nonlocal token
            token = job_ledger.new_token()
            job_ledger.record_intent(root, token, sub.script, list(sub.options), sub.tasks)
            return token

        def refused(sub: Submission) -> None:
            job_ledger.record_void(root, token, "sbatch refused")

        def accepted(sub: Submission, job_id: str) -> None:
            job_ledger.record_submit(root, job_id, sub.script,
                                   [job_ledger.Entry(job_id, t, cid, reps)
                                    for t, cid, reps in sub.tasks], list(sub.options),
                                   token=token)
            done["jobs"] += 1
            done["runs"] += submission_queue.runs(sub)
            progress.update(bar, advance=submission_queue.runs(sub), description="submitting")

        def waiting(active: int, left: int) -> None:
            nonlocal limit_said, last_note_s
            text = (f"waiting for a submission slot ({active} of yours queued at the limit, "
                    f"{left} left to submit)")
            progress.update(bar, description=text)
            if not limit_said:
                limit_said = True
                progress.console.print(
                    f"Slurm's submission limit reached at {active} of your jobs: the other "
                    f"{left} run(s) stay queued here and are submitted as slots free "
                    "(Ctrl-C stops; what was submitted is recorded, submit again continues)",
                    soft_wrap=True)
            now = time.monotonic()
            if not console.is_terminal and now - last_note_s >= WAIT_NOTE_EVERY_S:
                last_note_s = now  # no live bar in a log: a line now and then instead
                progress.console.print(text, soft_wrap=True)

        try:
            stats = submission_queue.submit_queued(subs, executor.slurm, accepted, waiting,
                                           sleep=executor.slurm.sleep, intent=intent,
                                           refused=refused)
        except SchedulerError as e:
            progress.stop()
            unsure = ("\nWhether Slurm queued the last job is unknown; it carries the tag "
                      "recorded in " + str(job_ledger.jobs_path(root)) + ", and the next submit "
                      "adopts it if Slurm has it (never submitting its runs twice)"
                      if e.unsure else "")
            err.print(f"error: sbatch failed: {e.message}\n{done['runs']} of {total} runs "
                      f"({done['jobs']} jobs) were submitted and recorded; submit the grid "
                      f"again to submit the rest{unsure}", soft_wrap=True)
            return 1
        except KeyboardInterrupt:
            progress.stop()
            err.print(f"interrupted: {done['runs']} of {total} runs ({done['jobs']} jobs) were "
                      f"submitted and recorded in {job_ledger.jobs_path(root)}; submit the grid "
                      "again to submit the rest", soft_wrap=True)
            return EXIT_INTERRUPTED
    # The most of ours seen queued at the limit: the last count alone may fall short of the
    # limit when jobs ended between a refusal and that count.
    limit = (f"; at the submission limit ({stats.max_active_seen} jobs) "
             f"{stats.waited_s:.0f} s in all" if stats.limit is not None else "")
    console.print(f"submitted {done['jobs']} job(s), {done['runs']} run(s){limit}. Watch: "
                  f"python -m toolkit.status {root} --watch; tables: python -m toolkit.collect "
                  f"{root}", soft_wrap=True, markup=False)
    if wait and done["jobs"]:
        from toolkit.launch.run_states import watch
        return watch(root, executor.slurm, console)
    return 0


#: Without a terminal (a log, CI) the bar cannot redraw: a waiting line at most this often.
WAIT_NOTE_EVERY_S = 30.0
