"""`python -m toolkit.submit --grid jobs/bert.yaml`: validate, expand, run every missing repeat.

Everything is checked before anything is written: grid errors, executor limits and results that
already hold a different case under the same id all exit with code 2 and touch nothing. A second
submit of the same grid runs only what has not finished (`--force` adds new repeats instead).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from toolkit.case import Case
from toolkit.executors import EXECUTORS
from toolkit.executors.local import LocalExecutor
from toolkit.grid import Grid, GridError, dump_resolved, load_grid
from toolkit.results import (
    CASE_FILE,
    CaseDir,
    ResultsConflict,
    atomic_write_text,
)
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
                   help="auto = local (the Slurm executor is not in this version)")
    p.add_argument("--dry-run", action="store_true", help="expand and print the cases; run nothing")
    p.add_argument("--force", action="store_true",
                   help="add `repeats` new repeats to cases that already finished")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)
    err = Console(stderr=True, highlight=False)
    try:
        grid = load_grid(args.grid, args.overrides)
    except GridError as e:
        err.print(f"[red]error:[/red] invalid grid\n{e}", markup=True, soft_wrap=True)
        return 2
    if args.executor == "slurm":
        err.print(f"{args.grid}: --executor slurm is not available in this version; use local")
        return 2
    executor = LocalExecutor()
    problems = []
    for cid, case in grid.items():
        reason = unsupported_reason(case)
        if reason:
            problems.append(f"{grid.source}: case {cid}: {reason}")
        for key, message in executor.problems(case):
            problems.append(f"{grid.source}: case {cid}: {key}: {message}")
    root = args.results or Path("results") / grid.name
    if args.dry_run:
        console.print(cases_table(grid, root))
        console.print(f"{len(grid.cases)} cases x {grid.cases[0].repeats} repeats "
                      f"-> {root} (dry run: nothing written)")
        if problems:
            console.print(f"note: {len(problems)} problem(s) would stop this grid on the "
                          f"{executor.name} executor of this machine:\n" + "\n".join(problems),
                          soft_wrap=True)
        return 0
    if problems:
        err.print("error: cannot run this grid here\n" + "\n".join(problems), soft_wrap=True)
        return 2

    # Refuse before writing anything if results hold other configurations under these ids.
    conflicts = [c for cid, case in grid.items() if (c := CaseDir(root, cid).conflict(case))]
    if conflicts:
        err.print("error: the results directory holds different cases under the same ids; use "
                  "a new --results directory\n" + "\n".join(conflicts), soft_wrap=True)
        return 2

    atomic_write_text(root / "grid.yaml", dump_resolved(grid))
    todo: list[tuple[str, Case, CaseDir, int]] = []
    for cid, case in grid.items():
        cdir = CaseDir(root, cid)
        try:
            cdir.write_case(case)
        except ResultsConflict as e:  # raced with another writer
            err.print(f"error: {e}")
            return 2
        present = cdir.repeats_present()
        if args.force:
            start = (max(present) + 1) if present else 0
            repeats = list(range(start, start + case.repeats))
        else:
            repeats = [k for k in range(case.repeats) if not cdir.finished(k)]
        atomic_write_text(cdir.path / "run_local.sh", executor.script(case, cdir.path / CASE_FILE))
        todo += [(cid, case, cdir, k) for k in repeats]
    skipped = sum(c.repeats for c in grid.cases) - len(todo) if not args.force else 0
    console.print(f"grid {grid.name}: {len(grid.cases)} cases, {len(todo)} runs to do"
                  + (f", {skipped} already finished" if skipped else "") + f" -> {root}")
    failures = run_all(todo, executor, console)
    console.print(f"done: {len(todo) - failures} ok, {failures} failed. "
                  f"Tables: python -m toolkit.collect {root}")
    return 1 if failures else 0


def run_all(todo: list[tuple[str, Case, CaseDir, int]], executor: LocalExecutor,
            console: Console) -> int:

    failures = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("runs", total=len(todo))
        for cid, case, cdir, k in todo:
            progress.update(task, description=f"{cid} r{k}")
            run_dir = cdir.prepare_run(k)
            status, row = executor.run(case, cdir.path / CASE_FILE, run_dir, k)
            if status["status"] == "ok" and row.throughput_sps is not None:
                progress.console.print(f"  [green]ok[/green]   {cid} r{k}: "
                                       f"{row.throughput_sps:,.1f} samples/s")
            else:
                failures += 1
                progress.console.print(f"  [red]FAIL[/red] {cid} r{k}: {status.get('reason')} "
                                       f"(log: {run_dir / 'output.log'})")
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
