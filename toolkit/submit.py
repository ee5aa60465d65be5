"""`python -m toolkit.submit --grid jobs/bert.yaml`: validate, expand, run every missing repeat.

Everything is checked before anything is written: grid errors, executor limits and results that
already hold a different case under the same id all exit with code 2 and touch nothing. A second
submit of the same grid runs only what has not finished (`--force` adds new repeats instead).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from toolkit.launch import job_ledger as manifest
from toolkit.launch import submission_queue as throttle
from toolkit.launch.executor import EXECUTORS
from toolkit.launch.job_ledger import submit_lock
from toolkit.launch.lifecycle import begin
from toolkit.launch.local import LocalExecutor
from toolkit.launch.slurm import SCRIPT_NAME, SlurmExecutor, Submission
from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, Slurm
from toolkit.results.layout import (
    CASE_FILE,
    CaseDir,
    ResultsConflict,
    atomic_write_json,
    atomic_write_text,
    unsafe_root,
)
from toolkit.spec import Case
from toolkit.spec.grid import Grid, GridError, dump_resolved, load_grid
from toolkit.workloads import unsupported_reason


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolkit.submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", required=True, type=Path, help="grid YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a base option (dotted keys: model_config.seq_len=512); "
                        "fixes a swept key to one value; also repeats=N")
    p.add_argument("--results", type=Path, default=None,
                   help="results directory (default: results/<grid name>)")
    p.add_argument("--executor", choices=EXECUTORS, default="auto",
                   help="auto = slurm where sbatch is on PATH and a controller answers sinfo, "
                        "else local (mpirun on this machine)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="run only the cases whose id matches this shell-style pattern "
                        "(DP_*, '*-eager'); repeatable; a pattern matching nothing is an error")
    p.add_argument("--dry-run", action="store_true",
                   help="write case.json, every script and a manifest of what would run or "
                        "be submitted (dry-run.json); run and submit nothing")
    p.add_argument("--force", action="store_true",
                   help="add `repeats` new repeats to cases that already finished")
    p.add_argument("--wait", action="store_true",
                   help="slurm: after submitting, watch the jobs until they end (as "
                        "toolkit.status --watch)")
    return p


Executor = LocalExecutor | SlurmExecutor


class NoController(Exception):
    """`--executor auto` on a machine whose Slurm does not answer: running the grid here
    instead would be a surprise (and a login node's CPU), so nothing runs."""


def choose_executor(name: str) -> Executor:
    if name == "slurm":
        return SlurmExecutor()
    if name == "auto":
        state, why = Slurm.probe()
        if state == "up":
            return SlurmExecutor()
        if state == "down":
            raise NoController(why)
    return LocalExecutor()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)
    # Messages quote grid values and Slurm's words: never rich markup ("[/x]" would crash it).
    err = Console(stderr=True, highlight=False, markup=False)
    try:
        grid = load_grid(args.grid, args.overrides).select(args.only)
    except GridError as e:
        err.print(f"error: invalid grid\n{e}", soft_wrap=True)
        return 2
    try:
        executor = choose_executor(args.executor)
    except NoController as e:
        err.print(f"error: this machine has Slurm but its controller does not answer ({e}); "
                  "nothing is submitted or run. Submit again when it is back, or run here "
                  "with --executor local.", soft_wrap=True)
        return 2
    problems = []
    for cid, case in grid.items():
        reason = unsupported_reason(case)
        if reason:
            problems.append(f"{grid.source}: case {cid}: {reason}")
        for key, message in executor.problems(case):
            problems.append(f"{grid.source}: case {cid}: {key}: {message}")
    # `a/../b` means b: without this, mkdir would first make a, a directory outside the results
    root = Path(os.path.normpath(args.results)) if args.results else Path("results") / grid.name
    unsafe = unsafe_root(root)
    if unsafe:
        err.print(f"error: --results {unsafe}", soft_wrap=True)
        return 2
    if problems and not args.dry_run:
        err.print(f"error: cannot run this grid with the {executor.name} executor\n"
                  + "\n".join(problems), soft_wrap=True)
        return 2

    # Refuse before writing anything if results hold other configurations under these ids.
    conflicts = [c for cid, case in grid.items() if (c := CaseDir(root, cid).conflict(case))]
    if conflicts:
        err.print("error: the results directory holds different cases under the same ids; use "
                  "a new --results directory\n" + "\n".join(conflicts), soft_wrap=True)
        return 2
    try:
        with submit_lock(root):
            return _submit(args, grid, root, executor, console, err, problems)
    except (RuntimeError, ResultsConflict) as e:
        err.print(f"error: {e}", soft_wrap=True)
        return 2


def _submit(args: argparse.Namespace, grid: Grid, root: Path, executor: Executor,
            console: Console, err: Console, problems: list[str]) -> int:
    atomic_write_text(root / "grid.yaml", dump_resolved(grid), durable=False)
    write_case_files(root, grid, executor)
    in_flight: set[tuple[str, int]] = set()
    if isinstance(executor, SlurmExecutor) and not args.dry_run:
        try:
            for line in manifest.settle(root, executor.slurm):
                console.print(line, soft_wrap=True, markup=False)
            in_flight = queued_runs(root, executor.slurm)
        except SchedulerError as e:
            err.print(f"error: cannot ask Slurm which runs are already queued, so nothing is "
                      f"submitted (a resubmit could duplicate them): {e.message}",
                      soft_wrap=True)
            return 2
    plan: list[tuple[str, Case, tuple[int, ...]]] = []
    for cid, case in grid.items():
        cdir = CaseDir(root, cid)
        if args.force:
            present = cdir.repeats_present() + [r for (c, r) in in_flight if c == cid]
            start = (max(present) + 1) if present else 0
            repeats = tuple(range(start, start + case.repeats))
        else:
            repeats = tuple(k for k in range(case.repeats)
                            if not cdir.finished(k) and (cid, k) not in in_flight)
        plan.append((cid, case, repeats))
    runs = sum(len(r) for _, _, r in plan)
    finished = sum(c.repeats for c in grid.cases) - runs - len(in_flight) if not args.force else 0
    note = (f", {finished} already finished" if finished > 0 else "") + \
        (f", {len(in_flight)} already queued" if in_flight else "")
    if args.dry_run:
        return _dry_run(grid, root, executor, plan, console, problems, note)
    console.print(f"grid {grid.name}: {len(grid.cases)} cases, {runs} runs to do{note} -> {root}",
                  markup=False)
    if isinstance(executor, SlurmExecutor):
        return submit_slurm(root, grid.name, executor, plan, console, err, args.wait)
    todo = [(cid, case, CaseDir(root, cid), k) for cid, case, reps in plan for k in reps]
    failures = run_all(todo, executor, console)
    console.print(f"done: {len(todo) - failures} ok, {failures} failed. "
                  f"Tables: python -m toolkit.collect {root}")
    return 1 if failures else 0


def write_case_files(root: Path, grid: Grid, executor: Executor) -> None:
    """case.json and the script of every case. Rendering is Python; the writes are file-system
    round trips (slow on network file systems), so they overlap in a few threads."""
    def one(cid: str, case: Case) -> None:
        cdir = CaseDir(root, cid)
        cdir.write_case(case)
        if isinstance(executor, SlurmExecutor):
            atomic_write_text(cdir.path / SCRIPT_NAME,
                              executor.script(case, cid, cdir.path / CASE_FILE), durable=False)
        else:
            atomic_write_text(cdir.path / "run_local.sh",
                              executor.script(case, cdir.path / CASE_FILE), durable=False)

    if isinstance(executor, SlurmExecutor) and grid.cases:
        executor.resolve_gpus(grid.cases)  # one sinfo, before the threads
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(one, cid, case) for cid, case in grid.items()]:
            future.result()  # the first error, raised here


def _dry_run(grid: Grid, root: Path, executor: Executor,
             plan: list[tuple[str, Case, tuple[int, ...]]], console: Console,
             problems: list[str], note: str) -> int:
    console.print(cases_table(grid, root))
    if isinstance(executor, SlurmExecutor):
        subs = executor.plan(root, grid.name, plan)
        planned: dict[str, Any] = {"executor": "slurm", "submissions": [
            {"command": s.command(), "tasks": [{"task": t, "case": cid, "repeats": list(r)}
                                               for t, cid, r in s.tasks]} for s in subs]}
        for s in subs:
            console.print("  " + shlex.join(s.command()), soft_wrap=True)
    else:
        planned = {"executor": "local", "runs": [
            {"case": cid, "repeat": k,
             "command": executor.command(case, CaseDir(root, cid).path / CASE_FILE,
                                         CaseDir(root, cid).run_dir(k), k)}
            for cid, case, reps in plan for k in reps]}
    atomic_write_json(root / DRY_RUN_FILE, planned)
    runs = sum(len(r) for _, _, r in plan)
    console.print(f"{len(grid.cases)} cases, {runs} runs{note} -> {root} (dry run: scripts and "
                  f"{DRY_RUN_FILE} written; nothing run or submitted)")
    if problems:
        console.print(f"note: {len(problems)} problem(s) would stop this grid on the "
                      f"{executor.name} executor of this machine:\n" + "\n".join(problems),
                      soft_wrap=True)
    return 0


def queued_runs(root: Path, slurm: Slurm) -> set[tuple[str, int]]:
    """(case, repeat) pairs whose latest job is still pending or running (not cancelled)."""
    m = manifest.load(root)
    latest = {key: e for key, e in m.latest().items() if not m.is_cancelled(e)}
    if not latest:
        return set()
    states = slurm.queue(e.slurm_id for e in latest.values())
    return {key for key, e in latest.items()
            if states.get(e.slurm_id, ("", ""))[0] in ACTIVE_STATES}


def submit_slurm(root: Path, grid_name: str, executor: SlurmExecutor,
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
    total = sum(throttle.runs(s) for s in subs)
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
            token = manifest.new_token()
            manifest.record_intent(root, token, sub.script, list(sub.options), sub.tasks)
            return token

        def refused(sub: Submission) -> None:
            manifest.record_void(root, token, "sbatch refused")

        def accepted(sub: Submission, job_id: str) -> None:
            manifest.record_submit(root, job_id, sub.script,
                                   [manifest.Entry(job_id, t, cid, reps)
                                    for t, cid, reps in sub.tasks], list(sub.options),
                                   token=token)
            done["jobs"] += 1
            done["runs"] += throttle.runs(sub)
            progress.update(bar, advance=throttle.runs(sub), description="submitting")

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
            stats = throttle.submit_queued(subs, executor.slurm, accepted, waiting,
                                           sleep=executor.slurm.sleep, intent=intent,
                                           refused=refused)
        except SchedulerError as e:
            progress.stop()
            unsure = ("\nWhether Slurm queued the last job is unknown; it carries the tag "
                      "recorded in " + str(manifest.jobs_path(root)) + ", and the next submit "
                      "adopts it if Slurm has it (never submitting its runs twice)"
                      if e.unsure else "")
            err.print(f"error: sbatch failed: {e.message}\n{done['runs']} of {total} runs "
                      f"({done['jobs']} jobs) were submitted and recorded; submit the grid "
                      f"again to submit the rest{unsure}", soft_wrap=True)
            return 1
        except KeyboardInterrupt:
            progress.stop()
            err.print(f"interrupted: {done['runs']} of {total} runs ({done['jobs']} jobs) were "
                      f"submitted and recorded in {manifest.jobs_path(root)}; submit the grid "
                      "again to submit the rest", soft_wrap=True)
            return 130
    # The most of ours seen queued at the limit: the last count alone may fall short of the
    # limit when jobs ended between a refusal and that count.
    limit = (f"; at the submission limit ({stats.max_active_seen} jobs) "
             f"{stats.waited_s:.0f} s in all" if stats.limit is not None else "")
    console.print(f"submitted {done['jobs']} job(s), {done['runs']} run(s){limit}. Watch: "
                  f"python -m toolkit.status {root} --watch; tables: python -m toolkit.collect "
                  f"{root}", soft_wrap=True, markup=False)
    if wait and done["jobs"]:
        from toolkit.status import watch
        return watch(root, executor.slurm, console)
    return 0


#: Without a terminal (a log, CI) the bar cannot redraw: a waiting line at most this often.
WAIT_NOTE_EVERY_S = 30.0
DRY_RUN_FILE = "dry-run.json"


def run_all(todo: list[tuple[str, Case, CaseDir, int]], executor: LocalExecutor,
            console: Console) -> int:

    failures = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("runs", total=len(todo))
        for cid, case, cdir, k in todo:
            progress.update(task, description=f"{cid} r{k}")
            run_dir = begin(cdir.path, k)
            status, row = executor.run(case, cdir.path / CASE_FILE, run_dir, k)
            if status["status"] == "ok" and row.throughput_sps is not None:
                progress.console.print(f"  [green]ok[/green]   {cid} r{k}: "
                                       f"{row.throughput_sps:,.1f} samples/s")
            else:
                failures += 1
                # reasons quote ranks' errors, which may hold [brackets]: not rich markup
                progress.console.print(f"  [red]FAIL[/red] {cid} r{k}: "
                                       f"{escape(str(status.get('reason')))}")
            progress.advance(task)
    return failures


def cases_table(grid: Grid, root: Path) -> Table:
    table = Table(title=f"{grid.name}: {len(grid.cases)} cases from {grid.source}")
    for col in ("case id", "nodes", "gpus/node", "bs/device", "precision", "repeats",
                "iterations"):
        table.add_column(col, no_wrap=True)
    for cid, c in grid.items():
        table.add_row(cid, str(c.num_nodes), str(c.gpus_per_node), str(c.batch_size_per_device),
                      c.precision.value, str(c.repeats),
                      f"{c.warmup_iterations}+{c.measured_iterations}")
    return table


if __name__ == "__main__":
    sys.exit(main())
