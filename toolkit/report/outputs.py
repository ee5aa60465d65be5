"""The files of a report: runs.csv, summary.csv, profiles.csv, tables/*.csv, plots/*.png,
report.md and report.html, each written atomically into the output directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from parsers.rows import RUN_COLUMNS, RunRow
from toolkit.analysis.layouts import LayoutReference
from toolkit.analysis.preflight import Verdict
from toolkit.analysis.summary import SPREAD_THRESHOLD, SummaryRow
from toolkit.report.html import render_html
from toolkit.report.markdown import build_sections, render_markdown
from toolkit.report.plots import Plot, scaling_plots
from toolkit.report.preflight import preflight_plot, report_section
from toolkit.report.scaling import breakdown_plot
from toolkit.report.tables import TableSet
from toolkit.report.text import csv_frame
from toolkit.results.importer import ImportResult
from toolkit.results.layout import (
    PLOTS_DIR,
    PROFILES_CSV,
    REPORT_HTML,
    REPORT_MD,
    RUNS_CSV,
    SUMMARY_CSV,
    TABLES_DIR,
)
from toolkit.results.runs import PROFILE_TABLE_COLUMNS, profile_table
from toolkit.results.safe_write import atomic_write_text, make_dir


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """CSV text of `rows` with exactly `columns` (missing or None cells empty), values as
    Python writes them (no float reformatting), no cell a formula (`csv_frame`)."""
    frame = pd.DataFrame([[row.get(k) for k in columns] for row in rows], columns=columns,
                         dtype=object)
    return csv_frame(frame)


def write_outputs(out: Path, title: str, notes: list[str], rows: list[RunRow],
                  run_dicts: list[dict[str, Any]], summary: list[SummaryRow],
                  imported: ImportResult, comparison: TableSet | None, *,
                  plots: bool = True, unread: Sequence[tuple[str, str]] = (),
                  spread_threshold: float = SPREAD_THRESHOLD,
                  preflights: Sequence[tuple[str, str | None, Verdict]] = (),
                  bus_bw_gbps: float | None = None,
                  missing: Sequence[dict[str, Any]] = (),
                  layout_reference: LayoutReference | None = None) -> list[Path]:
    """runs.csv, summary.csv, profiles.csv (one row per profiled rank of each run: its
    profile figures under runs.csv's names, `toolkit.results.runs.PROFILE_TABLE_COLUMNS`),
    tables/*.csv, plots/*.png, report.md, report.html.

    `unread`: (path, why) of result files that could not be read (listed in the report);
    `preflights`: (tag, case id or None, verdict) of the directory's preflights, oldest first
    (a section, and a plot of the latest); `bus_bw_gbps`: their measured all-reduce bus
    bandwidth (the efficiency section's predicted communication);
    `missing`: the planned runs that did not run, with their state and why (a section);
    `spread_threshold`: cases whose repeats spread by more are flagged in the tables;
    `layout_reference`: the GPT table's reference of layouts against data parallelism."""
    extra_cols = sorted({k for d in run_dicts for k in d} - set(RUN_COLUMNS))
    atomic_write_text(out / RUNS_CSV, to_csv(run_dicts, [*RUN_COLUMNS, *extra_cols]), root=out)
    sdicts = [s.to_dict() for s in summary]
    scols = list(sdicts[0]) if sdicts else [*SummaryRow.__dataclass_fields__, "gpus"]
    atomic_write_text(out / SUMMARY_CSV, to_csv(sdicts, scols), root=out)
    profiles = profile_table(rows)
    atomic_write_text(out / PROFILES_CSV, to_csv(profiles, list(PROFILE_TABLE_COLUMNS)),
                      root=out)
    first, rest = build_sections(summary, run_dicts,
                                 skipped=[(s.path, s.reason) for s in imported.skipped],
                                 reference=comparison, unread=unread,
                                 spread_threshold=spread_threshold, bus_bw_gbps=bus_bw_gbps,
                                 missing=missing, rank_profiles=profiles,
                                 layout_reference=layout_reference)
    if preflights:
        rest = [*rest, report_section(list(preflights))]
    for ts in (*first, *rest):
        if ts.records:
            columns = list(dict.fromkeys(k for r in ts.records for k in r))
            atomic_write_text(out / TABLES_DIR / f"{ts.key}.csv", to_csv(ts.records, columns),
                              root=out)
    drawn: list[Plot] = scaling_plots(summary, out / PLOTS_DIR, out) if plots else []
    if plots:
        lost = breakdown_plot(summary, run_dicts, out / PLOTS_DIR / "efficiency_breakdown.png",
                              out, bus_bw_gbps, profiles)
        if lost is not None:
            drawn.append(lost)
    if plots and preflights:
        make_dir(out / PLOTS_DIR, root=out)
        tag, _, latest = preflights[-1]
        plot = preflight_plot(latest, out / PLOTS_DIR / "preflight.png", out, tag)
        if plot is not None:
            drawn.append(plot)
    atomic_write_text(out / REPORT_MD, render_markdown(title, notes, first, rest, drawn), root=out)
    atomic_write_text(out / REPORT_HTML, render_html(title, notes, first, rest, drawn), root=out)
    return [out / RUNS_CSV, out / SUMMARY_CSV, out / PROFILES_CSV, out / REPORT_MD,
            out / REPORT_HTML, out / TABLES_DIR, *([out / PLOTS_DIR] if drawn else [])]


def written_summary(out: Path, written: Sequence[Path]) -> str:
    """One line on what a report wrote: the files at the top of `out` by name, and each folder
    under it as `name/ (N files)`, so the line stays short whatever the number of runs.

    `written` holds files and folders (a folder counts every file under it)."""
    tops: dict[str, set[Path]] = {}
    for path in written:
        relative = path.relative_to(out)
        files = {p for p in path.rglob("*") if p.is_file()} if path.is_dir() else {path}
        tops.setdefault(relative.parts[0], set()).update(files)
    parts = [top if (out / top).is_file() else
             f"{top}/ ({len(files)} file{'s' if len(files) != 1 else ''})"
             for top, files in tops.items()]
    return f"wrote {', '.join(parts)} in {out}"
