"""`python -m toolkit.submit --grid jobs/bert.yaml`: validate, expand, run every missing repeat.

Everything is checked before anything is written: grid errors, executor limits and results that
already hold a different case under the same id all exit with code 2 and touch nothing. A second
submit of the same grid runs only what has not finished (`--force` adds new repeats instead).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from toolkit import interruptible
from toolkit.launch.choice import choose_executor
from toolkit.launch.container import path_problem
from toolkit.launch.executor import (
    EXECUTORS,
    Executor,
    LaunchError,
    NoController,
    Plan,
)
from toolkit.launch.hosts import HostsError, parse_hosts, read_hostfile
from toolkit.launch.job_ledger import submit_lock
from toolkit.report import terminal
from toolkit.results.layout import (
    CASE_FILE,
    COMPILE_CACHE_DIR,
    DRY_RUN_FILE,
    GRID_FILE,
    MARKER_FILE,
    MARKER_TEXT,
    SLURM_DIR,
    CaseDir,
    Conflict,
    content_differs,
    dry_run_dir,
    dry_run_target,
    foreign_dir,
    unsafe_root,
)
from toolkit.results.safe_write import (
    ResultsConflict,
    atomic_write_json,
    atomic_write_text,
    make_dir,
    unsafe_below,
)
from toolkit.spec import Case, Framework, Model
from toolkit.spec.grid import Grid, GridError, dump_resolved, load_grid
from toolkit.spec.site import SITE_ENV, SITES_DIR, find_site
from toolkit.workloads import unsupported_reason
from toolkit.workloads.command import planned_command_line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", required=True, type=Path, help="grid YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a base option (dotted keys: model_config.seq_len=512); "
                        "fixes a swept key to one value; also repeats=N. A key inside a "
                        "mapping that a sweep or zip sets as a whole is refused")
    p.add_argument("--max-cases", type=int, default=None, metavar="N",
                   help="refuse a grid that expands to more than N cases (default: "
                        "$TRAINBENCH_MAX_CASES, else 100000)")
    p.add_argument("--site", default=None, metavar="FILE|NAME",
                   help="the site profile: where the grid runs (partition, account, launcher, "
                        "GPU request, environment, modules, container); a YAML file, or the "
                        f"name of one in {SITES_DIR}; default ${SITE_ENV}, else none")
    p.add_argument("--results", type=Path, default=None,
                   help="results directory (default: results/<grid name>)")
    p.add_argument("--executor", choices=EXECUTORS, default="auto",
                   help="auto = slurm where sbatch is on PATH and a controller answers sinfo, "
                        "else local (mpirun on this machine)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", default=None, metavar="HOST[:SLOTS],...",
                       help="run each case through mpirun across these hosts, without Slurm "
                            "(Open MPI's ssh launcher; a case of N nodes takes the first N); "
                            "the results directory must be the same path on every host")
    hosts.add_argument("--hostfile", type=Path, default=None, metavar="FILE",
                       help="as --hosts, one host a line ('HOST', 'HOST:SLOTS' or "
                            "'HOST slots=SLOTS')")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="run only the cases whose id matches this shell-style pattern "
                        "(DP_*, '*-eager'); repeatable; a pattern matching nothing is an error")
    p.add_argument("--dry-run", action="store_true",
                   help="write case.json, every script and a manifest of what would run or "
                        "be submitted (dry-run.json); run and submit nothing. A file that "
                        "exists and would change (a queued job may run it) is left as it is: "
                        "the dry run writes its version under dry-run/ instead")
    p.add_argument("--force", action="store_true",
                   help="add `repeats` new repeats to cases that already finished")
    p.add_argument("--wait", action="store_true",
                   help="slurm: after submitting, watch the jobs until they end (as "
                        "toolkit.status --watch)")
    return p




@interruptible
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = terminal.console()
    # Messages quote grid values and Slurm's words: never rich markup ("[/x]" would crash it).
    err = terminal.console(stderr=True, markup=False)
    try:
        site = find_site(args.site)
    except GridError as e:
        err.print(f"error: invalid site profile\n{e}", soft_wrap=True)
        return 2
    try:
        grid = load_grid(args.grid, args.overrides, args.max_cases, site).select(args.only)
    except GridError as e:
        err.print(f"error: invalid grid\n{e}", soft_wrap=True)
        return 2
    if site is not None:
        console.print(f"site {site.name} ({site.source})", soft_wrap=True, markup=False)
    for warning in grid.warnings:
        err.print(f"warning: {warning}", soft_wrap=True)
    hosts = None
    if args.hosts is not None or args.hostfile is not None:
        if args.executor != "auto":
            err.print(f"error: --hosts and --hostfile run through mpirun across the hosts: "
                      f"leave out --executor {args.executor}", soft_wrap=True)
            return 2
        try:
            hosts = parse_hosts(args.hosts) if args.hosts is not None else \
                read_hostfile(args.hostfile)
        except HostsError as e:
            err.print(f"error: {e}", soft_wrap=True)
            return 2
    try:
        executor = choose_executor(args.executor, hosts)
    except NoController as e:
        err.print(f"error: this machine has Slurm but its controller does not answer ({e}); "
                  "nothing is submitted or run. Submit again when it is back, or run here "
                  "with --executor local.", soft_wrap=True)
        return 2
    problems = executor_problems(grid, executor)
    # `a/../b` means b: without this, mkdir would first make a, a directory outside the results
    root = Path(os.path.normpath(args.results)) if args.results else Path("results") / grid.name
    unsafe = unsafe_root(root) or foreign_dir(root)
    if unsafe:
        err.print(f"error: --results {unsafe}", soft_wrap=True)
        return 2
    problems += container_root_problems(grid, root)
    if problems and not args.dry_run:
        err.print(f"error: cannot run this grid with the {executor.name} executor\n"
                  + "\n".join(problems), soft_wrap=True)
        return 2

    # Refuse before writing anything if results hold other configurations under these ids.
    conflicts = [c for cid, case in grid.items() if (c := CaseDir(root, cid).conflict(case))]
    # ... or hold a symbolic link where a directory of ours belongs.
    links = [u for d in [root / SLURM_DIR, root / COMPILE_CACHE_DIR,
                         *(CaseDir(root, cid).path for cid in grid.case_ids)]
             if (u := unsafe_below(root, d))]
    if conflicts:
        err.print("error: the results directory holds different cases under the same ids; use "
                  "a new --results directory\n" + "\n".join(conflict_lines(conflicts)),
                  soft_wrap=True)
    if links:
        err.print("error: " + "\n".join(links), soft_wrap=True)
    if conflicts or links:
        return 2
    try:
        with submit_lock(root):
            return _submit(args, grid, root, executor, console, err, problems)
    except (RuntimeError, ResultsConflict) as e:
        err.print(f"error: {e}", soft_wrap=True)
        return 2
    except OSError as e:  # a full disk, a quota, an I/O error under the results directory
        where = f" ({e.filename})" if e.filename else ""
        err.print(f"error: writing under {root} failed: {e.strerror or e}{where}; nothing "
                  "more is run. Make room (or mend the error) and submit again: a run whose "
                  "outcome was not written is run again, and what finished stays.",
                  soft_wrap=True)
        return 1


def conflict_lines(conflicts: list[Conflict]) -> list[str]:
    """One line per conflicting case.json, except that cases differing in the same keys (a
    changed base setting) are one line with their count and the first files."""
    by_difference: dict[str, list[Conflict]] = {}
    for c in conflicts:
        by_difference.setdefault(c.differing, []).append(c)
    lines = []
    for differing, group in by_difference.items():
        if not differing or len(group) == 1:
            lines += [str(c) for c in group]
            continue
        shown = ", ".join(str(c.file) for c in group[:3]) + (" ..." if len(group) > 3 else "")
        lines.append(f"{len(group):,} cases hold another configuration ({shown}); differing: "
                     f"{differing}")
    return lines


def container_root_problems(grid: Grid, root: Path) -> list[str]:
    """The results directory is mounted into containers at its own path: one that a mount list
    cannot carry stops the cases that run in one."""
    boxed = [cid for cid, case in grid.items() if case.container.enabled]
    why = path_problem(str(root.absolute())) if boxed else None
    return [f"container: {why} ({len(boxed)} case(s) run in a container)"] if why else []


def executor_problems(grid: Grid, executor: Executor) -> list[str]:
    """What stops the cases on `executor`, one line per distinct problem: a problem shared by
    several cases (a base setting) is said once, with how many cases and the first ids."""
    cases_of: dict[str, list[str]] = {}
    for cid, case in grid.items():
        reason = unsupported_reason(case)
        found = [reason] if reason else []
        found += [f"{key}: {message}" for key, message in executor.problems(case)]
        for problem in found:
            cases_of.setdefault(problem, []).append(cid)
    total = len(grid.cases)
    lines = []
    for problem, cids in cases_of.items():
        if len(cids) == 1:
            lines.append(f"{grid.source}: case {cids[0]}: {problem}")
            continue
        which = (f"all {total:,} cases" if len(cids) == total
                 else f"{len(cids):,} of {total:,} cases")
        shown = ", ".join(cids[:3]) + (" ..." if len(cids) > 3 else "")
        lines.append(f"{grid.source}: {problem} ({which}: {shown})")
    return lines


def _submit(args: argparse.Namespace, grid: Grid, root: Path, executor: Executor,
            console: Console, err: Console, problems: list[str]) -> int:
    atomic_write_text(root / MARKER_FILE, MARKER_TEXT, durable=False, root=root)
    in_flight: set[tuple[str, int]] = set()
    if not args.dry_run:
        try:
            in_flight, lines = executor.in_flight(root)
        except LaunchError as e:
            err.print(f"error: {e}", soft_wrap=True)
            return 2
        for line in lines:
            console.print(line, soft_wrap=True, markup=False)
        changed = queued_changes(root, grid, executor, in_flight)
        if changed:
            err.print("error: queued or running jobs read these files when they start, and "
                      "this grid would change them; nothing is submitted. Wait for the jobs, "
                      "cancel them (python -m toolkit.cancel), or use a new --results "
                      "directory\n" + "\n".join(changed), soft_wrap=True, markup=False)
            return 2
    else:
        shutil.rmtree(dry_run_dir(root), ignore_errors=True)  # a previous dry run's versions
    write(root, root / GRID_FILE, dump_resolved(grid), args.dry_run)
    write_case_files(root, grid, executor, args.dry_run)
    plan: Plan = []
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
    return executor.execute(root, grid.name, plan, console, err, args.wait)


def queued_changes(root: Path, grid: Grid, executor: Executor,
                   in_flight: set[tuple[str, int]]) -> list[str]:
    """The case files that queued or running runs read (their case.json, the script a
    grid-level array task calls) and that this grid would rewrite with other content: a
    resubmit with changed settings outside the config hash (Slurm options, watchdog) must not
    change what an already queued job runs."""
    queued: dict[str, int] = {}
    for cid, _ in in_flight:
        queued[cid] = queued.get(cid, 0) + 1
    out = []
    for cid, case in grid.items():
        if cid not in queued:
            continue
        cdir = CaseDir(root, cid)
        wanted = {CASE_FILE: cdir.case_text(case),
                  executor.script_name: executor.script(case, cid, cdir.path / CASE_FILE)}
        for name, text in wanted.items():
            if content_differs(cdir.path / name, text):
                out.append(f"{cdir.path / name}: would change; {queued[cid]} run(s) of "
                           f"{cid} are queued or running")
    return out


def write(root: Path, path: Path, text: str, dry_run: bool) -> None:
    """Write `text` to `path`; in a dry run, never over a file that holds something else (a
    queued job may read it: case.json, a case script that an array job runs), but under
    dry-run/ (`layout.dry_run_target`)."""
    target = dry_run_target(root, path, text) if dry_run else path
    if target is not None:
        atomic_write_text(target, text, durable=False, root=root)


def write_case_files(root: Path, grid: Grid, executor: Executor, dry_run: bool = False) -> None:
    """case.json and the script of every case. Rendering is Python; the writes are file-system
    round trips (slow on network file systems), so they overlap in a few threads."""
    def one(cid: str, case: Case) -> None:
        cdir = CaseDir(root, cid)
        if dry_run:
            write(root, cdir.path / CASE_FILE, cdir.case_text(case), dry_run)
        else:
            cdir.write_case(case)
        write(root, cdir.path / executor.script_name,
              executor.script(case, cid, cdir.path / CASE_FILE), dry_run)

    executor.prepare(grid.cases)  # e.g. one sinfo, before the threads
    if not dry_run and any(c.framework is Framework.TORCH for c in grid.cases):
        # torch fills it, through this directory of ours (never a link planted in its place)
        make_dir(root / COMPILE_CACHE_DIR, root=root)
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(one, cid, case) for cid, case in grid.items()]:
            future.result()  # the first error, raised here


def _dry_run(grid: Grid, root: Path, executor: Executor, plan: Plan, console: Console,
             problems: list[str], note: str) -> int:
    terminal.print_table(console, cases_table(grid, root))
    for cid, case in grid.items():
        if case.model is Model.COMMAND:
            console.print(f"{cid}: program: {planned_command_line(case, cid)}", soft_wrap=True,
                          markup=False, highlight=False)
    planned, lines = executor.dry_run(root, grid.name, plan)
    for line in lines:
        console.print(line, soft_wrap=True, markup=False)
    atomic_write_json(root / DRY_RUN_FILE, planned, root=root)
    runs = sum(len(r) for _, _, r in plan)
    console.print(f"{len(grid.cases)} cases, {runs} runs{note} -> {root} (dry run: scripts and "
                  f"{DRY_RUN_FILE} written; nothing run or submitted)")
    if problems:
        console.print(f"note: {len(problems)} problem(s) would stop this grid on the "
                      f"{executor.name} executor of this machine:\n" + "\n".join(problems),
                      soft_wrap=True)
    return 0



def cases_table(grid: Grid, root: Path) -> Table:
    table = terminal.table(f"{grid.name}: {len(grid.cases)} cases from {grid.source}",
                           ("case id", "nodes", "gpus/node", "bs/device", "precision", "repeats",
                            "iterations"))
    for cid, c in grid.items():
        table.add_row(cid, str(c.num_nodes), str(c.gpus_per_node), str(c.batch_size_per_device),
                      c.precision.value, str(c.repeats),
                      f"{c.warmup_iterations}+{c.measured_iterations}")
    return table


if __name__ == "__main__":
    sys.exit(main())
