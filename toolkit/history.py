"""`python -m toolkit.history`: every case over time, from the results store.

    python -m toolkit.history --out hist/                       # every case, every run stored
    python -m toolkit.history --case resnet50-torch-amp_bf16-1n8g-bs256 --by driver --out hist/
    python -m toolkit.history --where gpu=H200 --since 2026-01-01 --metric step_time

One point per case, line and batch (the runs of one results directory): the median with its
spread (min..max over the repeats), at the batch's first start time. A line is one place
(executor, site, machine, device: runs of a laptop, a local Slurm cluster and a GPU cluster are
never one history) and, with `--by COLS`, one value of those provenance columns (driver, cuda,
nccl, gpu, commit, image, ...). A point some of whose runs were oversubscribed (their ranks
shared their CPUs) or crowded (measured while other processes took the host's CPUs) is listed
apart and never a change point.

Change points (flagged in the table, ringed red in the plots), per line in time order: a
batch's median more than 3 x max(1.4826 x MAD, 1% of the median) away from the median of the
5 batches before it (at least 3) since the last change point -- a rolling median/MAD rule;
a new level is flagged once, at its first batch.

Prints the change points (or that there are none); `--out DIR` writes history.csv,
history.md and history.html with one trend plot per case (the first `--max-plots`), into a new
or empty directory, or one history wrote before (its .trainbench-history marker): any other is
refused, exit 2, nothing written.
Exit status: 0 done; 2 bad input, or a store that cannot be used (not a database, locked,
unreachable, written by a newer trainbench: one line says which and why); 3 nothing in the
store matches.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit import interruptible
from toolkit.analysis.ab import METRICS
from toolkit.analysis.history import points
from toolkit.analysis.places import PLACE_COLUMNS
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.report import terminal
from toolkit.report.history import line_colours, table_set, trend_png
from toolkit.report.html import render_page
from toolkit.report.markdown import md_table
from toolkit.report.text import console_text, csv_frame, md_prose
from toolkit.results.layout import foreign_out_dir, out_marker
from toolkit.results.safe_write import UnsafePath, atomic_write_text
from toolkit.store.db import ENV_VAR, FILE_NAME, StoreError, open_store
from toolkit.store.query import Query, QueryError, load_runs, parse_filters, parse_time
from toolkit.store.schema import ALIASES, FILTER_COLUMNS

EXIT_BAD_INPUT = 2
EXIT_NOTHING = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench history", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", action="append", default=[], metavar="ID",
                   help="only this case (repeatable; default every case)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="filter on provenance or case columns (repeatable)")
    p.add_argument("--since", default=None, metavar="DATE")
    p.add_argument("--until", default=None, metavar="DATE")
    p.add_argument("--by", default="", metavar="COLS",
                   help="comma-separated provenance columns: one line per value")
    p.add_argument("--metric", default="throughput", choices=tuple(METRICS))
    p.add_argument("--store", default=None, metavar="PATH|URL",
                   help=f"the results store (default: ${ENV_VAR}, else "
                        f"$XDG_DATA_HOME/trainbench/{FILE_NAME})")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write history.csv, history.md and history.html (trend plots) into "
                        "DIR: a new or empty directory, or one history wrote before")
    p.add_argument("--max-plots", type=int, default=20, metavar="N",
                   help="trend plots in history.html: the cases with change points first, "
                        "then by name (default 20; the tables and history.csv have every case)")
    p.add_argument("--quiet", action="store_true")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    by = [ALIASES.get(c.strip(), c.strip()) for c in args.by.split(",") if c.strip()]
    bad = [c for c in by if c not in FILTER_COLUMNS]
    if bad:
        err.print(console_text(f"error: --by {', '.join(bad)}: valid columns: "
                               f"{', '.join(FILTER_COLUMNS)}"))
        return EXIT_BAD_INPUT
    metric = METRICS[args.metric]
    foreign = None if args.out is None else foreign_out_dir(args.out, "history")
    if foreign:
        err.print(f"error: --out {console_text(foreign)}")
        return EXIT_BAD_INPUT
    try:
        query = Query(where=parse_filters(args.where),
                      since_s=parse_time(args.since, "--since") if args.since else None,
                      until_s=parse_time(args.until, "--until") if args.until else None)
        engine = open_store(args.store)
    except (QueryError, StoreError) as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    try:
        runs = load_runs(engine, query, list(dict.fromkeys(
            ["case_id", "results_dir", "started_s", metric.column, *PLACE_COLUMNS,
             OVERSUBSCRIBED, HOST_CROWDED, *by])), case_ids=args.case or None)
    except StoreError as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    finally:
        engine.dispose()
    if runs.empty:
        err.print(console_text(f"error: no ok run in the store matches ({query.describe()}"
                               + (f"; cases {', '.join(args.case)}" if args.case else "")
                               + ")"))
        return EXIT_NOTHING
    frame = points(runs, metric.column, by)
    tables = table_set(frame, metric.label)
    changes = frame[frame["change"]]
    if not args.quiet:
        print(f"{frame['case_id'].nunique()} case(s), {len(frame)} point(s) from {len(runs)} "
              f"run(s); {len(changes)} change point(s)")
        if len(changes):
            print(md_table(tables.tables[0].header, tables.tables[0].rows))
        brief = tables.tables[-1]  # each case's line(s) in brief: with or without --out
        print(f"\n{brief.title}\n\n{md_table(brief.header, brief.rows)}")
    if args.out is not None:
        out = args.out.resolve()
        colours = line_colours(frame)
        cases = list(dict.fromkeys([*changes["case_id"], *frame["case_id"]]))[
            :max(args.max_plots, 0)]
        images = [(f"trend of {case}",
                   trend_png(frame[frame["case_id"] == case], str(case), metric.label, colours))
                  for case in cases]
        notes = [f"store query: {query.describe()}", tables.empty_note]
        marker, marker_text = out_marker("history")
        try:
            atomic_write_text(out / marker, marker_text, durable=False, root=out.parent)
            atomic_write_text(out / "history.csv", csv_frame(frame), durable=False,
                              root=out.parent)
            atomic_write_text(out / "history.md",
                              "# History\n\n" + "\n".join(f"- {md_prose(n)}" for n in notes)
                              + "\n\n" + "\n\n".join(f"## {md_prose(t.title)}\n\n"
                                                      + md_table(t.header, t.rows)
                                              for t in tables.tables) + "\n",
                              durable=False, root=out.parent)
            atomic_write_text(out / "history.html",
                              render_page("History", notes, [tables], images,
                                          heading="Trend per case"),
                              durable=False, root=out.parent)
        except (OSError, UnsafePath) as error:
            err.print(f"error: cannot write: {console_text(error)}")
            return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
