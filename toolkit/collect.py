"""`python -m toolkit.collect results/<grid>`: rank files -> runs.csv, summary.csv, report.md.

Reads every `cases/<id>/r<k>/` run (finished, failed or still running), writes one row per run
(`runs.csv`), the per-case figures (`summary.csv`: median/min/max over repeats, speedup and
scaling efficiency against the 1n1g median), and `report.md` with the seeds' tables; prints the
main table. Runs that failed are listed with their reason, never silently dropped.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from parsers.events import read_run
from parsers.rows import RUN_COLUMNS, RunRow
from toolkit.metrics import SummaryRow, summarize
from toolkit.report import fmt, render_report
from toolkit.results import CASE_FILE, atomic_write_text, load_case_file


def collect_runs(root: Path) -> tuple[list[RunRow], list[str]]:
    """Every run under `root/cases`; plus problems with case directories that could not be read."""
    rows: list[RunRow] = []
    problems: list[str] = []
    for case_dir in sorted((root / "cases").glob("*")):
        if not case_dir.is_dir():
            continue
        try:
            case_id, case = load_case_file(case_dir / CASE_FILE)
        except (OSError, ValueError, KeyError) as err:
            problems.append(f"{case_dir}: unreadable {CASE_FILE} ({err})")
            continue
        runs = sorted((p for p in case_dir.iterdir()
                       if p.is_dir() and p.name.startswith("r") and p.name[1:].isdigit()),
                      key=lambda p: int(p.name[1:]))
        for run_dir in runs:
            rows.append(read_run(run_dir, case_id, case, int(run_dir.name[1:])))
    return rows, problems


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolkit.collect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of one grid")
    p.add_argument("--out", type=Path, default=None, help="where to write (default: results)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    args = p.parse_args(argv)
    err = Console(stderr=True, highlight=False)
    if not (args.results / "cases").is_dir():
        err.print(f"error: {args.results} has no cases/ directory (not a results directory)")
        return 2
    rows, problems = collect_runs(args.results)
    for problem in problems:
        err.print(f"warning: {problem}")
    out = args.out or args.results
    run_dicts = [r.to_dict() for r in rows]
    extra_cols = sorted({k for d in run_dicts for k in d} - set(RUN_COLUMNS))
    atomic_write_text(out / "runs.csv", to_csv(run_dicts, [*RUN_COLUMNS, *extra_cols]))
    summary = summarize(run_dicts)
    sdicts = [s.to_dict() for s in summary]
    scols = list(sdicts[0]) if sdicts else list(SummaryRow.__dataclass_fields__)
    atomic_write_text(out / "summary.csv", to_csv(sdicts, scols))
    notes = [f"results: `{args.results}`", f"runs: {len(rows)} "
             f"({sum(1 for r in rows if r.status == 'ok')} ok)"]
    devices = sorted({str(r.extra.get("device")) for r in rows if r.extra.get("device")})
    if devices:
        notes.append("devices: " + ", ".join(devices))
    atomic_write_text(out / "report.md",
                      render_report(f"Benchmark report: {args.results.name}", summary, run_dicts,
                                    notes))
    if not args.quiet:
        console = Console(highlight=False)
        if not console.is_terminal:
            console.width = max(console.width, 110)
        console.print(main_table(summary, f"{args.results.name} (median of repeats)"))
        failed = [r for r in rows if r.status != "ok"]
        for r in failed:
            err.print(f"[red]{r.status}[/red] {r.case_id} r{r.repeat}: {r.error}")
        print(f"wrote {out / 'runs.csv'}, {out / 'summary.csv'}, {out / 'report.md'}")
    return 0


def main_table(summary: list[SummaryRow], title: str) -> Table:
    table = Table(title=title)
    for col in ("model", "fw", "precision", "nodes", "gpus/node", "bs/dev", "runs",
                "samples/s", "speedup", "eff"):
        table.add_column(col, justify="left" if col in ("model", "fw", "precision") else "right",
                         no_wrap=True)
    for r in summary:
        table.add_row(r.model, r.framework, r.precision, str(r.num_nodes), str(r.gpus_per_node),
                      str(r.batch_size_per_device),
                      f"{r.runs_ok}" + (f"+{r.runs_failed}✗" if r.runs_failed else ""),
                      fmt(r.throughput_median_sps), fmt(r.speedup, 2),
                      fmt(r.scaling_efficiency, 3))
    return table


if __name__ == "__main__":
    sys.exit(main())
