"""`python -m toolkit.collect`: results (and old logs) -> CSVs, markdown, plots, an HTML page.

    python -m toolkit.collect results/<grid>                       # the toolkit's own runs
    python -m toolkit.collect --import-logs old_logs/ --out imported/   # logs of earlier benchmarks
    python -m toolkit.collect results/<grid> --import-logs old/ --out both/   # in one table
    python -m toolkit.collect results/<grid> --reference examples/reference/<report>.csv

Reads every `cases/<id>/r<k>/` run (finished, failed or still running) and, with
`--import-logs`, every `*.log` under a DLPerf-style tree (`<N>n<G>g/<model>_b<bs>_<prec>_<k>.log`;
format detected per file). Writes `runs.csv` (one row per run), `summary.csv` (median/min/max
over repeats, speedup and scaling efficiency against the 1n1g median, memory, TFLOP/s, MFU),
`tables/*.csv`, `plots/*.png`, `report.md` and `report.html`; prints the main table. Failed
runs and log files that could not be imported are listed with their reason, never dropped.

Damaged results never stop it: a case.json, status.json, meta.json or rank file that is cut
short, binary, not UTF-8, or a directory where a file belongs is listed under "Result files not
read" (and on stderr) with the reason; a run whose data it needed is `failed` or `incomplete`
with the reason, and every readable run still makes its tables. It reads only files that are
complete: status.json and case.json are replaced atomically, and a run without status.json
(still running) is `incomplete`, never counted. The exit status does not depend on them.

Every finished run (and every imported log's run) also goes into the results store, once
(`--store PATH|URL`, else $TRAINBENCH_STORE, else $XDG_DATA_HOME/trainbench/store.sqlite;
`--no-store` skips it): `python -m toolkit.compare` and `python -m toolkit.history` read it.

With `--reference` each case is compared with the reference figure: `regression` below
(1 - tolerance) x reference, `improvement` above (1 + tolerance) x, else `within tolerance`.
The check is two-sided: an improvement beyond the tolerance fails too (it usually means the
benchmark changed: refresh the reference), and so does a case one of whose runs' loss did not
fall (last logged loss not below the first). When no measured case matches any reference row,
nothing was checked: the outputs are written and the exit status is 1, so a CI gate never
passes on nothing. `--junit FILE` writes the check as JUnit XML, one test case per case.

`--make-reference FILE` writes a reference CSV from this directory's repeats: per case and
system (GPU model, partition) with at least 3 ok repeats, the median and a tolerance of
3 x 1.4826 x MAD / median (three standard deviations of the repeats), at least 2%. Repeats
measured under contention (oversubscribed, crowded) are left out of it, and each case that lost
some is named; a checked case whose runs were is marked † in its verdict, with why.

Exit status: 0 done; 1 done, but no case matched the reference; 2 bad input (nothing written);
3 done, but a case failed the reference check (regressed, beyond its tolerance faster, or its
loss did not fall); 4 done, but the runs could not be stored (every output is written; the
last line on stderr and a note in the report say why: a store that is not a database, locked,
unreachable, or written by a newer trainbench); 130 interrupted (Ctrl-C), with one line on
stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shutil
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from parsers.detect import FAMILIES, LONG_LINES_SKIPPED
from parsers.foreign import (
    DEFAULT_MEASURED_ITERATIONS,
    DEFAULT_WARMUP_ITERATIONS,
    LogHints,
    LogParseError,
)
from parsers.logtext import MAX_LINE_CHARS, long_lines_note
from parsers.rows import RunRow
from toolkit import interruptible
from toolkit.analysis.layouts import LAYOUT_REFERENCE_HELP, load_layout_reference
from toolkit.analysis.preflight import Verdict
from toolkit.analysis.reference import (
    KEY_COLUMNS,
    REFERENCE_FLOOR,
    REFERENCE_K,
    ReferenceError,
    ReferenceRow,
    case_systems,
    compare,
    load_reference,
    loss_not_falling,
    make_reference,
)
from toolkit.analysis.sharing import HOST_CROWDED
from toolkit.analysis.summary import SPREAD_THRESHOLD, SummaryRow, summarize
from toolkit.launch.run_states import RunState, runs_not_run
from toolkit.launch.slurm_client import SlurmClient
from toolkit.report import terminal
from toolkit.report.interchange import DEFAULT_SUBMITTER, write_exports
from toolkit.report.junit import junit_xml
from toolkit.report.outputs import write_outputs, written_summary
from toolkit.report.reference import comparison_tables, gate_failures, reference_junit
from toolkit.report.tables import (
    NOT_RUN_HEADING,
    OVERSUBSCRIBED_MARK,
    TableSet,
    flag_note,
    fmt_speedup,
    fmt_throughput,
    spread_note,
)
from toolkit.report.text import console_text, csv_frame
from toolkit.results.archive import ArchiveError, import_archive, is_archive
from toolkit.results.frame import system_frame
from toolkit.results.importer import DEFAULT_PATTERN, ImportResult, import_logs
from toolkit.results.layout import (
    foreign_out_dir,
    is_results_dir,
    out_marker,
)
from toolkit.results.preflight import (
    attach_measured_mfu,
    case_of,
    measured_bus_bandwidth,
    measured_peaks,
)
from toolkit.results.preflight import verdicts as preflight_verdicts
from toolkit.results.runs import FIGURE_FLAG
from toolkit.results.safe_write import UnsafePath, atomic_write_text
from toolkit.results.scan import (
    PARALLEL_MIN_RANKS,
    PARALLEL_MIN_RUNS,
    collect_runs,
    planned_runs,
)
from toolkit.store.db import ENV_VAR, FILE_NAME, StoreError, describe, open_store, resolve
from toolkit.store.ingest import ingest

EXIT_NOTHING_COMPARED = 1
EXIT_BAD_INPUT = 2
EXIT_REGRESSION = 3
EXIT_STORE = 4


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench collect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="?", default=None,
                   help="results directory of one grid (optional with --import-logs)")
    p.add_argument("--out", type=Path, default=None,
                   help="where to write (default: the results directory; needed when only "
                        "importing logs)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    p.add_argument("--no-plots", action="store_true", help="write no plots/*.png")
    p.add_argument("--spread-threshold", type=float, default=SPREAD_THRESHOLD, metavar="F",
                   help="flag a case whose throughput spread over its repeats, (max - min) / "
                        f"median, exceeds F (default {SPREAD_THRESHOLD} = "
                        f"{100 * SPREAD_THRESHOLD:g}%%): its median is not a stable figure")
    p.add_argument("--jobs", type=int, default=0,
                   help="processes reading the runs (default 0: one per CPU, for trees of "
                        f"{PARALLEL_MIN_RUNS} runs or more and runs of {PARALLEL_MIN_RANKS} "
                        "ranks or more; 1: read in this process)")
    g = p.add_argument_group("importing logs of earlier benchmarks")
    g.add_argument("--import-logs", type=Path, default=None, metavar="DIR|ARCHIVE",
                   help="a tree of foreign logs, e.g. <N>n<G>g/<model>_b<bs>_<prec>_<k>.log "
                        "(MLPerf :::MLLOG logs too), or a results archive made by "
                        "python -m toolkit.archive (read back as the runs it holds)")
    g.add_argument("--format", default="auto", choices=("auto", *FAMILIES),
                   help="log format of every file (default: detected per file)")
    g.add_argument("--pattern", default=DEFAULT_PATTERN,
                   help=f"file names to read under DIR (default: {DEFAULT_PATTERN}; the "
                        "others are counted)")
    g.add_argument("--framework", default=None,
                   help="framework name for the imported rows (default: what the format "
                        "implies, e.g. oneflow for OneFlow-Benchmark logs)")
    g.add_argument("--nodes", type=int, default=None,
                   help="nodes of every imported run, where the path and the log do not say")
    g.add_argument("--gpus-per-node", type=int, default=None, help="likewise, GPUs per node")
    g.add_argument("--batch-size", type=int, default=None,
                   help="likewise, batch size per device")
    g.add_argument("--warmup-iterations", type=int, default=DEFAULT_WARMUP_ITERATIONS,
                   help=f"iterations dropped before the window (default "
                        f"{DEFAULT_WARMUP_ITERATIONS}). DLPerf's extractors' --warmup_batches "
                        "W --train_batches T count printed lines, T being an end index: for "
                        "a log that prints every iteration that is --warmup-iterations W "
                        "--measured-iterations T-W; for one that prints every k iterations, "
                        "k*W and k*(T-W) (HugeCTR's --start_iter S is --warmup-iterations S; "
                        "DLPerf's InsightFace extractor skips iterations 0-5 and includes "
                        "line T: --warmup-iterations 5+W --measured-iterations T-W+1; "
                        "its MXNet ArcFace extractor averages Speedometer lines printed every "
                        "20 batches: --warmup-iterations W+1 --measured-iterations T-W; its "
                        "TensorFlow BERT one never starts before line 20)")
    g.add_argument("--measured-iterations", type=int, default=DEFAULT_MEASURED_ITERATIONS,
                   help=f"iterations in the window (default {DEFAULT_MEASURED_ITERATIONS}): "
                        "timestamped logs are measured from warm-up to warm-up + measured; "
                        "printed rates and step times are averaged from the warm-up on (up "
                        "to warm-up + measured for MXNet Speedometer logs, as DLPerf). A "
                        "log that ends before warm-up + measured is measured over what it "
                        "has, with a warning for that file")
    g.add_argument("--warmup-batches", type=int, default=None, metavar="W",
                   help="DLPerf's form of the window, with --train-batches T: the same as "
                        "--warmup-iterations W --measured-iterations T-W")
    g.add_argument("--train-batches", type=int, default=None, metavar="T",
                   help="DLPerf's end index of the window (see --warmup-batches)")
    e = p.add_argument_group("exporting")
    e.add_argument("--no-export", action="store_true",
                   help="do not write mllog/<case>/r<k>.log (MLPerf logging lines) and "
                        "systems/<case>/r<k>.json (system description) for each run")
    e.add_argument("--submitter", default=DEFAULT_SUBMITTER,
                   help=f"submitter named in the exports (default {DEFAULT_SUBMITTER})")
    r = p.add_argument_group("comparing with a reference")
    r.add_argument("--reference", type=Path, default=None, metavar="REF",
                   help="a reference CSV (see examples/reference/) or a results directory "
                        "with a summary.csv; exit status 3 when a case regresses, 1 when no "
                        "case matches any reference row")
    r.add_argument("--tolerance", type=float, default=0.05,
                   help="relative tolerance of the reference check (default 0.05 = ±5%%)")
    r.add_argument("--reference-ignore", default="", metavar="COLS",
                   help="comma-separated key columns not to match on (e.g. framework)")
    r.add_argument("--junit", type=Path, default=None, metavar="FILE",
                   help="write the reference check as JUnit XML (one test case per case)")
    r.add_argument("--make-reference", type=Path, default=None, metavar="FILE",
                   help="write a reference CSV from these repeats (median per case and "
                        f"system, tolerance {REFERENCE_K:g} x 1.4826 x MAD / median, at least "
                        f"{100 * REFERENCE_FLOOR:g}%%)")
    r.add_argument("--layout-reference", type=Path, default=None, metavar="CSV",
                   help=LAYOUT_REFERENCE_HELP)
    st = p.add_argument_group("the results store")
    st.add_argument("--store", default=None, metavar="PATH|URL",
                    help=f"where to store the runs: a SQLite file or a database URL (default: "
                         f"${ENV_VAR}, else $XDG_DATA_HOME/trainbench/{FILE_NAME})")
    st.add_argument("--no-store", action="store_true", help="do not store the runs")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # soft_wrap: messages stay one line each, whole paths included (grep-able logs)
    err = terminal.console(stderr=True, soft_wrap=True)
    problem = _check_args(args)
    if problem:
        err.print(f"error: {console_text(problem)}")
        return EXIT_BAD_INPUT
    out: Path = args.out or args.results
    reference = None
    try:
        if args.reference is not None:
            reference = load_reference(args.reference)
        layout_reference = load_layout_reference(args.layout_reference)
    except ReferenceError as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT

    rows: list[RunRow] = []
    native: list[RunRow] = []
    notes: list[str] = []
    unread: list[tuple[str, str]] = []
    missing: list[RunState] = []
    if args.results is not None:
        native, unread = collect_runs(args.results, args.jobs)
        unread += [f for r in native for f in r.skipped_files]
        rows += native
        cases, planned = planned_runs(args.results)
        missing, why = runs_not_run(args.results,
                                    {(r.case_id, r.repeat): r.status for r in native},
                                    _slurm_client)
        notes.append(f"results: `{args.results}` ({len(native)} runs; the grid plans {planned} "
                     f"in {cases} case(s)" + (f"; {_not_run_counts(missing)}: listed under "
                                               f"\"{NOT_RUN_HEADING}\"" if missing else "")
                     + ")" + (f"; {why}" if why else ""))
        if not native:
            not_yet = (f"no run has started yet: 0 of the {planned} run(s) planned in {cases} "
                       f"case(s) of {args.results} has a run directory (cases/<id>/r<k>/); "
                       "submit the grid, or see python -m toolkit.status")
            notes.append(not_yet)
            err.print(console_text(not_yet))
        if unread:
            notes.append(f"result files not read: {len(unread)} (listed below)")
    imported = ImportResult()
    if args.import_logs is not None and is_archive(args.import_logs):
        try:
            archived, unread_archived = import_archive(args.import_logs, args.jobs)
        except ArchiveError as error:
            err.print(f"error: {console_text(error)}")
            return EXIT_BAD_INPUT
        rows += archived
        unread += unread_archived + [f for r in archived for f in r.skipped_files]
        notes.append(f"archive: `{args.import_logs}` ({len(archived)} runs)")
    elif args.import_logs is not None:
        imported = import_logs(args.import_logs, fmt=args.format, hints=_hints(args),
                               defaults=LogHints(num_nodes=args.nodes,
                                                 gpus_per_node=args.gpus_per_node,
                                                 batch_size_per_device=args.batch_size),
                               pattern=args.pattern)
        rows += imported.rows
        notes += _import_notes(args, imported)
    notes.append(f"runs: {len(rows)} ({sum(1 for r in rows if r.status == 'ok')} ok)")
    devices = sorted({str(r.extra.get("device")) for r in rows if r.extra.get("device")})
    if devices:
        notes.append("devices: " + ", ".join(devices))

    not_stored: str | None = None
    if not args.no_store:
        note, not_stored = _store(args.store, [(native, args.results),
                                               (imported.rows, args.import_logs)])
        notes.append(note)

    run_dicts = [r.to_dict() for r in rows]
    preflights = []
    bus_bw = None
    if args.results is not None:
        found = preflight_verdicts(args.results)
        attach_measured_mfu(run_dicts, measured_peaks(found))
        bus_bw = measured_bus_bandwidth(found)
        preflights = [(d.name, case_of(d), Verdict.from_dict(v)) for d, v in found]
        bad = sorted({n for _, _, v in preflights for n in v.exclude})
        if preflights:
            notes.append(f"preflights: {len(preflights)}" + (
                f"; nodes not ok in some: {', '.join(bad)}" if bad else ""))
    summary = summarize(run_dicts)
    comparison: TableSet | None = None
    regressions: list[tuple[str, str]] = []
    unmatched: str | None = None
    frame = system_frame(rows)
    if reference is not None:
        ignore = [c.strip() for c in args.reference_ignore.split(",") if c.strip()]
        try:
            comparisons = compare(summary, reference, args.tolerance, ignore,
                                  systems=case_systems(summary, frame))
        except ReferenceError as error:
            err.print(f"error: {console_text(error)}")
            return EXIT_BAD_INPUT
        comparison = comparison_tables(comparisons, args.tolerance, str(args.reference))
        no_fall = loss_not_falling(frame)
        regressions = gate_failures(comparisons, no_fall)
        if not any(c.measured is not None for c in comparisons):
            unmatched = _nothing_matched(args.reference, reference, summary, ignore)
        if args.junit is not None:
            text = junit_xml(f"reference {args.reference}",
                             reference_junit(comparisons, args.tolerance, no_fall))
            problem = _write_file(args.junit, text)
            if problem:
                err.print(f"error: {console_text(problem)}")
                return EXIT_BAD_INPUT
    if args.make_reference is not None:
        made, left_out, contended = make_reference(frame, str(args.results or args.import_logs))
        problem = _write_file(args.make_reference, csv_frame(made))
        if problem:
            err.print(f"error: {console_text(problem)}")
            return EXIT_BAD_INPUT
        for line in contended:
            err.print(f"[yellow]{OVERSUBSCRIBED_MARK}[/yellow] {console_text(line)}")
        for line in left_out:
            err.print(f"[yellow]no reference[/yellow] {console_text(line)}")
        print(f"reference of {len(made)} case(s) written to {args.make_reference}")

    title = f"Benchmark report: {(args.results or args.import_logs).name}"
    try:
        if not is_results_dir(out):
            marker, marker_text = out_marker("collect")
            atomic_write_text(out / marker, marker_text, durable=False, root=out)
        written = write_outputs(out, title, notes, rows, run_dicts, summary, imported,
                                comparison, plots=not args.no_plots, unread=unread,
                                spread_threshold=args.spread_threshold, preflights=preflights,
                                bus_bw_gbps=bus_bw,
                                missing=[dataclasses.asdict(s) for s in missing],
                                layout_reference=layout_reference)
        if not args.no_export:
            exported = write_exports(out, rows, submitter=args.submitter)
            written += exported.written
            for path, why in exported.skipped:
                err.print(f"[yellow]not exported[/yellow] {console_text(path)}: "
                          f"{console_text(why)}")
    except UnsafePath as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    # whatever --quiet says, a file that gave no row is never silent
    for path, why in unread:
        err.print(f"[yellow]not read[/yellow] {console_text(path)}: {console_text(why)}")
    for s in imported.skipped:
        err.print(f"[yellow]not imported[/yellow] {console_text(s.path)}: "
                  f"{console_text(s.reason)}")
    for row in imported.rows:
        if row.extra.get(LONG_LINES_SKIPPED):
            err.print(f"[yellow]long lines[/yellow] {console_text(row.source)}: "
                      f"{console_text(long_lines_note(int(row.extra[LONG_LINES_SKIPPED])))}")
        if row.extra.get("window_warning"):
            err.print(f"[yellow]window[/yellow] {console_text(row.source)}: "
                      f"{console_text(row.extra['window_warning'])}")
    for row in rows:  # a command case's figure that rests on fewer ranks or an unstated rate
        for key, word in ((FIGURE_FLAG, "figure"), (HOST_CROWDED, "crowded")):
            if row.extra.get(key):
                err.print(f"[yellow]{word}[/yellow] {console_text(row.case_id)} "
                          f"r{row.repeat}: {console_text(row.extra[key])}")
    if not args.quiet:
        _print(summary, rows, title, err, args.spread_threshold)
        print(written_summary(out, written))
    if comparison is not None:  # the check's verdict line, --quiet or not
        print(comparison.empty_note)
    for gone in missing:  # whatever --quiet says, a run that did not run is named
        err.print(f"[yellow]{gone.state}[/yellow] {console_text(gone.case_id)} r{gone.repeat}: "
                  f"{console_text(gone.reason)}"
                  + (f" (job {console_text(gone.job)})" if gone.job else ""))
    for kind, line in regressions:
        err.print(f"[red]{kind}[/red] {console_text(line)}")
    if unmatched is not None:
        err.print(f"error: {console_text(unmatched)}")
        return EXIT_NOTHING_COMPARED
    if not_stored is not None:
        # last, after every output is written: the store's problem never costs the report
        err.print(f"error: runs not stored: {console_text(not_stored)}")
    if regressions:
        return EXIT_REGRESSION
    return EXIT_STORE if not_stored is not None else 0


def _store(store: str | None, batches: list[tuple[list[RunRow], Path | None]]
           ) -> tuple[str, str | None]:
    """Store the finished runs of each (rows, directory they were read from): the report's
    note, and why the runs were not stored (None when they were)."""
    try:
        engine = open_store(store)
    except StoreError as error:
        return f"runs not stored: {error}", str(error)
    added = already = unfinished = 0
    try:
        for batch, directory in batches:
            if batch and directory is not None:
                done = ingest(engine, batch, directory)
                added, already = added + done.added, already + done.already
                unfinished += done.unfinished
    except StoreError as error:
        return f"runs not stored: {error}", str(error)
    finally:
        engine.dispose()
    return (f"store: `{describe(resolve(store))}` ({added} run(s) added, {already} already "
            "there" + (f", {unfinished} unfinished, not stored" if unfinished else "") + ")",
            None)


def _slurm_client() -> SlurmClient | None:
    """Slurm's client where squeue is on PATH; no retries: collect reports, it does not wait
    out a controller that is away."""
    return SlurmClient(retries=0) if shutil.which("squeue") else None


def _not_run_counts(missing: list[RunState]) -> str:
    counts = Counter(s.state for s in missing)
    return f"{len(missing)} did not run (" + ", ".join(
        f"{n} {state}" for state, n in sorted(counts.items())) + ")"


def _write_file(path: Path, text: str) -> str | None:
    """Write a file the user named (--junit, --make-reference); the problem, or None."""
    target = path.resolve()
    try:
        atomic_write_text(target, text, durable=False, root=target.parent)
    except (OSError, UnsafePath) as error:
        return f"{path}: cannot write: {error}"
    return None


def _nothing_matched(path: Path, reference: list[ReferenceRow], summary: list[SummaryRow],
                     ignore: list[str]) -> str:
    """Why the reference check compared nothing: what was matched on, and what was measured."""
    keys = [k for k in (*KEY_COLUMNS, "variant", "case_id") if k not in ignore]
    measured = [r for r in summary if r.throughput_median_sps is not None]
    cases = ", ".join(r.case_ids for r in measured[:5]) + (", ..." if len(measured) > 5 else "")
    return (f"--reference {path}: no measured case matched any of its {len(reference)} "
            f"reference row(s), so nothing was compared (matched on {', '.join(keys)}; "
            f"{len(measured)} case(s) with a throughput" + (f": {cases}" if measured else "")
            + "); exit status 1")


def _check_args(args: argparse.Namespace) -> str | None:
    if args.results is None and args.import_logs is None:
        return "give a results directory, --import-logs DIR, or both"
    if args.results is not None and not is_results_dir(args.results):
        return (f"{args.results} is not a results directory (no .trainbench-results marker, "
                "no cases/<id>/case.json)")
    if args.import_logs is not None and not (args.import_logs.is_dir()
                                             or is_archive(args.import_logs)):
        return (f"--import-logs {args.import_logs}: not a directory, nor an archive made by "
                "python -m toolkit.archive")
    if (args.warmup_batches is None) != (args.train_batches is None):
        return "--warmup-batches and --train-batches go together (DLPerf's window W..T)"
    if args.warmup_batches is not None:
        if not 0 <= args.warmup_batches < args.train_batches:
            return (f"--train-batches must be more than --warmup-batches (an end index), got "
                    f"W={args.warmup_batches} T={args.train_batches}")
        args.warmup_iterations = args.warmup_batches
        args.measured_iterations = args.train_batches - args.warmup_batches
    if args.results is None and args.out is None:
        return "--out DIR is needed when only importing logs (where to write the results)"
    if args.out is not None:
        foreign = foreign_out_dir(args.out)
        if foreign:
            return f"--out {foreign}"
    if args.jobs < 0:
        return f"--jobs must be 0 (one per CPU) or more, got {args.jobs}"
    for name in ("nodes", "gpus_per_node", "batch_size", "measured_iterations"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {value}"
    if args.warmup_iterations < 0:
        return f"--warmup-iterations must be 0 or more, got {args.warmup_iterations}"
    try:
        LogHints(num_nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                 batch_size_per_device=args.batch_size, framework=args.framework)
    except LogParseError as error:
        return f"--nodes, --gpus-per-node, --batch-size or --framework: {error}"
    if not 0 <= args.spread_threshold < math.inf:
        return f"--spread-threshold must be a fraction of 0 or more, got {args.spread_threshold}"
    if not 0 <= args.tolerance < 1:
        return f"--tolerance must be in [0, 1), got {args.tolerance}"
    return None


def _hints(args: argparse.Namespace) -> LogHints:
    return LogHints(framework=args.framework, warmup_iterations=args.warmup_iterations,
                    measured_iterations=args.measured_iterations)


def _import_notes(args: argparse.Namespace, imported: ImportResult) -> list[str]:
    methods = Counter(r.method or "none" for r in imported.rows)
    notes = [f"imported logs: `{args.import_logs}` ({len(imported.rows)} runs from "
             f"`{imported.pattern}` files; window: {args.warmup_iterations} warm-up + "
             f"{args.measured_iterations} measured iterations)"]
    short = sum(1 for r in imported.rows if r.extra.get("window_warning"))
    if short:
        notes.append(f"imported logs that do not fit the window: {short} (measured over what "
                     "they have; runs.csv column window_warning, and on stderr)")
    long_lines = [int(r.extra[LONG_LINES_SKIPPED]) for r in imported.rows
                  if r.extra.get(LONG_LINES_SKIPPED)]
    if long_lines:
        notes.append(f"imported logs with lines over the limit of {MAX_LINE_CHARS} characters: "
                     f"{len(long_lines)} ({sum(long_lines)} line(s) skipped; runs.csv column "
                     f"{LONG_LINES_SKIPPED}, and on stderr)")
    if methods:
        notes.append("throughput method of imported runs: " + ", ".join(
            f"{m} {n}" for m, n in sorted(methods.items())))
    if imported.skipped:
        notes.append(f"log files not imported: {len(imported.skipped)} (listed below)")
    if imported.ignored:
        notes.append(f"other files under the import directory, not read: {imported.ignored}")
    return notes


def _print(summary: list[SummaryRow], rows: list[RunRow], title: str, err: Console,
           spread_threshold: float = SPREAD_THRESHOLD) -> None:
    console = terminal.console()
    name = title.removeprefix("Benchmark report: ")
    terminal.print_table(console, main_table(summary, console_text(f"{name} (median of repeats)"),
                                             spread_threshold))
    for note in (spread_note(summary, spread_threshold), flag_note(summary)):
        if note:
            console.print(console_text(note), soft_wrap=True)
    for r in rows:
        if r.status != "ok":
            err.print(f"[red]{r.status}[/red] {console_text(r.case_id)} r{r.repeat}: "
                      f"{console_text(r.error)}")


def main_table(summary: list[SummaryRow], title: str,
               spread_threshold: float = SPREAD_THRESHOLD) -> Table:
    header = ("model", "fw", "precision", "nodes", "gpus/node", "bs/dev", "runs", "samples/s",
              "speedup", "eff")
    table = terminal.table(title, header, right=header[3:])
    for r in summary:
        table.add_row(console_text(r.model), console_text(r.framework),
                      console_text(r.precision), str(r.num_nodes), str(r.gpus_per_node),
                      str(r.batch_size_per_device),
                      f"{r.runs_ok}" + (f"+{r.runs_failed}✗" if r.runs_failed else ""),
                      fmt_throughput(r, spread_threshold), fmt_speedup(r, r.speedup),
                      fmt_speedup(r, r.scaling_efficiency, 3))
    return table


if __name__ == "__main__":
    sys.exit(main())
