"""`python -m toolkit.compare A B`: which cases changed between A and B, beyond the noise?

    python -m toolkit.compare results/before results/after
    python -m toolkit.compare driver=550.54 driver=560.35 --where gpu=H200 --since 2026-01-01
    python -m toolkit.compare results/nightly commit=1a2b3c --fail-on slower --junit cmp.xml
    python -m toolkit.compare results/dle:resnet50-bs128 results/dle:resnet50-bs256

A and B are each a results directory (its ok runs) or a query of the results store
(`KEY=VALUE[,KEY=VALUE...]`, also `since=DATE`, `until=DATE`; keys: case, gpu, driver, cuda,
nccl, framework_version, image, hosts, commit, partition, results_dir, framework, model,
precision, ...). `--where`/`--since`/`--until` narrow both store queries. Cases are matched
by case id (`DIR:CASE` on a side compares the two cases named, whatever their ids and
settings, with the settings that differ in the verdict); all of a case's repeats on one side
are pooled, and the table says where they ran (executor, site, machine, device): a case one of
whose sides pools runs of different places, or holds oversubscribed runs (ranks that shared
their CPUs) or crowded ones (measured while other processes took the host's CPUs), is marked,
with why under the table and in its verdict.
A case whose runs recorded other config hashes in A than in B is not compared as like: its
verdict is `different configurations`, with the settings that differ (from each side's
case.json), unless `--across-configs` asks for the statistics' verdict.

Per case in both and per metric (`--metric`; throughput up is better, step time and memory
down): medians, the ratio B/A, a bootstrap 95% confidence interval of that ratio (2000
resamples, fixed seed), a two-sided Mann-Whitney U p-value, and a verdict by this rule:

  too few repeats        Mann-Whitney U cannot reach p < 0.05 at these numbers of repeats
                         (fewer than 4 a side when the sides are equal); the row says how
                         many per side would be needed to detect the observed change (at
                         least 1%) at the observed spread with 80% power
  faster / slower        p < 0.05 AND the 95% interval of the ratio excludes 1, in the
                         metric's direction (memory: smaller / larger)
  no significant change  otherwise

Each case is tested on its own: over many unchanged cases about --alpha of them (5%) get a
verdict by chance; a smaller --alpha trades that for more repeats.

Prints the table (markdown); `--out DIR` writes compare.md, compare.csv and compare.html (with
a forest plot of the ratios) into a new or empty directory, or one compare wrote before (its
.trainbench-compare marker): any other is refused, exit 2, nothing written; `--junit FILE`
one JUnit test case per compared case.
Exit status: 0 done (no verdict in --fail-on); 1 a verdict in --fail-on (e.g. `--fail-on
slower`); 2 bad input, or a store that cannot be used (not a database, locked, unreachable,
written by a newer trainbench: one line says which and why; nothing written); 3 no case in both
A and B (nothing compared).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from toolkit import interruptible
from toolkit.analysis.ab import (
    ALPHA,
    CASE_COLUMNS,
    METRICS,
    VERDICTS,
    case_ids,
    compare_runs,
    pair_cases,
)
from toolkit.analysis.places import PLACE_COLUMNS
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.report import terminal
from toolkit.report.ab import forest_png, junit_cases, table_set
from toolkit.report.html import render_page
from toolkit.report.junit import junit_xml
from toolkit.report.markdown import md_table
from toolkit.report.text import console_text, csv_frame, md_prose
from toolkit.results.frame import config_differences_of, system_frame
from toolkit.results.layout import foreign_out_dir, is_results_dir, out_marker
from toolkit.results.safe_write import UnsafePath, atomic_write_bytes, atomic_write_text
from toolkit.results.scan import collect_runs
from toolkit.store.db import ENV_VAR, FILE_NAME, StoreError, open_store
from toolkit.store.query import (
    Query,
    QueryError,
    load_runs,
    parse_filters,
    parse_query,
    parse_time,
)

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_COMPARED = 3
FAIL_ON_WORDS = {v.replace(" ", "-"): v for v in VERDICTS}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="results directory or store query (before)")
    p.add_argument("b", metavar="B", help="results directory or store query (after)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                   help="filter of both store queries (repeatable)")
    p.add_argument("--since", default=None, metavar="DATE", help="store runs started since")
    p.add_argument("--until", default=None, metavar="DATE", help="store runs started before")
    p.add_argument("--store", default=None, metavar="PATH|URL",
                   help=f"the results store (default: ${ENV_VAR}, else "
                        f"$XDG_DATA_HOME/trainbench/{FILE_NAME})")
    p.add_argument("--metric", default="throughput",
                   help=f"comma-separated metrics: {', '.join(METRICS)} (default throughput)")
    p.add_argument("--fail-on", default="", metavar="VERDICTS",
                   help="comma-separated verdicts that make the exit status 1: "
                        + ", ".join(FAIL_ON_WORDS))
    p.add_argument("--alpha", type=float, default=ALPHA, help=f"significance (default {ALPHA})")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="write compare.md, compare.csv and compare.html (with the forest plot) "
                        "into DIR: a new or empty directory, or one compare wrote before")
    p.add_argument("--junit", type=Path, default=None, metavar="FILE",
                   help="JUnit XML, one test case per compared case")
    p.add_argument("--across-configs", action="store_true",
                   help="give a verdict on cases whose configuration differs between A and B "
                        "(by default they are named with the settings that differ, and kept "
                        "out of the verdicts)")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    return p


def _side(text: str, args: argparse.Namespace,
          engine: Callable[[], Engine]) -> tuple[pd.DataFrame, str, str | None]:
    """The runs of one side, its label and the case picked from it (`DIR:CASE`, else None);
    `engine()` opens the store when a side needs it."""
    folder, colon, picked = text.rpartition(":")
    if colon and picked and Path(folder).is_dir() and not Path(text).is_dir():
        frame, label, _ = _side(folder, args, engine)
        return frame, f"{label} case `{picked}`", picked
    path = Path(text)
    if path.is_dir():
        if not is_results_dir(path):
            raise ValueError(f"{text}: a directory, but not a results directory")
        rows, _ = collect_runs(path)
        frame = system_frame(rows)
        frame["results_dir"] = str(path.resolve())
        return frame, f"`{text}`", None
    if "=" not in text:
        raise ValueError(f"{text}: neither a results directory nor a store query KEY=VALUE")
    query = parse_query(text)
    common = parse_filters(args.where)
    query = Query(where=query.where + common,
                  since_s=query.since_s if query.since_s is not None else
                  (parse_time(args.since, "--since") if args.since else None),
                  until_s=query.until_s if query.until_s is not None else
                  (parse_time(args.until, "--until") if args.until else None))
    frame = load_runs(engine(), query, [*CASE_COLUMNS, "status",
                                        *(m.column for m in METRICS.values()),
                                        *PLACE_COLUMNS, OVERSUBSCRIBED, HOST_CROWDED,
                                        "config_hash", "results_dir"])
    return frame, f"store query {query.describe()} ({len(frame)} runs)", None


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    metrics = [m.strip() for m in args.metric.split(",") if m.strip()]
    fail_on = [w.strip() for w in args.fail_on.split(",") if w.strip()]
    bad = [m for m in metrics if m not in METRICS] + [w for w in fail_on
                                                      if w not in FAIL_ON_WORDS]
    if bad or not metrics:
        err.print(console_text(f"error: unknown {', '.join(bad) or 'metric'}; metrics: "
                               f"{', '.join(METRICS)}; verdicts: {', '.join(FAIL_ON_WORDS)}"))
        return EXIT_BAD_INPUT
    if not 0 < args.alpha < 1:
        err.print(f"error: --alpha must be in (0, 1), got {args.alpha}")
        return EXIT_BAD_INPUT
    foreign = None if args.out is None else foreign_out_dir(args.out, "compare")
    if foreign:
        err.print(f"error: --out {console_text(foreign)}")
        return EXIT_BAD_INPUT
    engine = functools.cache(lambda: open_store(args.store))
    try:
        a, label_a, case_a = _side(args.a, args, engine)
        b, label_b, case_b = _side(args.b, args, engine)
        if case_a or case_b:
            a, b = pair_cases(a, case_a or str(case_b), b, case_b or str(case_a))
    except (ValueError, QueryError, StoreError) as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    # two cases picked by hand are two settings compared on purpose: their verdict is given,
    # with the settings that differ
    frame = compare_runs(a, b, metrics, args.alpha, config_differences_of(a, b),
                         args.across_configs or bool(case_a or case_b))
    tables = table_set(frame, label_a, label_b)
    markdown = (f"# Compare\n\n{md_prose(tables.empty_note)}\n\n"
                + (md_table(tables.tables[0].header, tables.tables[0].rows) + "\n"
                   if tables.tables else ""))
    if not args.quiet:
        print(markdown)
    try:
        if args.out is not None:
            out = args.out.resolve()
            marker, marker_text = out_marker("compare")
            atomic_write_text(out / marker, marker_text, durable=False, root=out.parent)
            atomic_write_text(out / "compare.md", markdown, durable=False, root=out.parent)
            atomic_write_text(out / "compare.csv", csv_frame(frame), durable=False,
                              root=out.parent)
            png = forest_png(frame, "ratio B / A per case and metric")
            atomic_write_bytes(out / "forest.png", png, durable=False, root=out.parent)
            atomic_write_text(out / "compare.html",
                              render_page("Compare", [f"A: {label_a}", f"B: {label_b}",
                                                      tables.empty_note],
                                          [tables], [("forest plot of the ratios B/A", png)],
                                          heading="Ratios B/A"),
                              durable=False, root=out.parent)
        if args.junit is not None:
            target = args.junit.resolve()
            failing = [FAIL_ON_WORDS[w] for w in fail_on]
            atomic_write_text(target, junit_xml("compare", junit_cases(frame, failing)),
                              durable=False, root=target.parent)
    except (OSError, UnsafePath) as error:
        err.print(f"error: cannot write: {console_text(error)}")
        return EXIT_BAD_INPUT
    if frame.empty:
        err.print(console_text(f"error: no case has ok runs in both A ({label_a}) and B "
                               f"({label_b}); A's cases: {case_ids(a)}; B's cases: "
                               f"{case_ids(b)}; compare two of them with A:CASE B:CASE"))
        return EXIT_NOTHING_COMPARED
    failing_rows = frame[frame["verdict"].isin([FAIL_ON_WORDS[w] for w in fail_on])]
    for r in failing_rows.itertuples():
        err.print(f"[red]{r.verdict}[/red] {console_text(r.case_id)} {r.metric}: ratio "
                  f"{r.ratio:.4f} [{r.ci_low:.4f}, {r.ci_high:.4f}], p {r.p_value:.3g}")
    return EXIT_FAILED if len(failing_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
