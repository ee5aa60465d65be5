"""The report's assembly: which tables, in which order, as markdown. Pure text; no I/O.

`build_sections` picks the `TableSet`s (`toolkit.report.tables`) for a set of results; the
markdown (`render_markdown`) and the HTML page (`toolkit.report.html`) show the same sections,
and `toolkit.collect` writes each set's CSV. Order: the reports' per-batch-size tables, the GPU
memory (OneFlow-Benchmark) tables, the cross-framework pivot, the GPT table, the reference
check, then the summary, All Results, failed runs, the runs that did not run and skipped log
files. Every name reaches the markdown as text (`toolkit.report.text`): cells and the title
through `md_cell`, our own sentences (notes, table titles) through `md_prose`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.analysis.layouts import LayoutReference
from toolkit.analysis.summary import SPREAD_THRESHOLD, SummaryRow
from toolkit.report.gpt import HEADER, gpt_table
from toolkit.report.plots import Plot
from toolkit.report.scaling import efficiency_section
from toolkit.report.tables import (
    MISSING,
    Table,
    TableSet,
    all_results,
    failed_runs,
    fmt,
    frameworks,
    gpu_memory,
    md_table,
    measured_by,
    not_run,
    per_batch_size,
    profiles,
    skipped_files,
    unread_files,
)
from toolkit.report.tables import summary as summary_tables
from toolkit.report.text import md_cell, md_prose
from toolkit.results.layout import PLOTS_DIR

__all__ = ["MISSING", "build_sections", "fmt", "md_table", "render_markdown"]


def gpt_sections(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                 layout_reference: LayoutReference | None = None) -> list[TableSet]:
    """The GPT table (`group | case | latency | memory | throughput | TFLOP/s per GPU | % of
    peak | compile | vs dp at N GPUs | reference vs dp`) of the rows with `model == gpt`.

    Built by `toolkit.report.gpt` from the run rows (medians per case, the report's grouping;
    each layout against data parallelism and `layout_reference`'s ratios).
    """
    gpt_runs = [r for r in runs if r.get("model") == "gpt"]
    if not gpt_runs:
        return []
    t = gpt_table(gpt_runs, reference=layout_reference)
    return [TableSet(key="gpt", heading="GPT (latency, memory, throughput, TFLOP/s per GPU)",
                     tables=[Table(title="GPT", header=list(HEADER), rows=t.rows,
                                   note=t.notes)],
                     records=t.records)]


def build_sections(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]], *,
                   skipped: Sequence[tuple[str, str]] = (),
                   reference: TableSet | None = None,
                   unread: Sequence[tuple[str, str]] = (),
                   spread_threshold: float = SPREAD_THRESHOLD,
                   bus_bw_gbps: float | None = None,
                   missing: Sequence[dict[str, Any]] = (),
                   rank_profiles: Sequence[dict[str, Any]] = (),
                   layout_reference: LayoutReference | None = None
                   ) -> tuple[list[TableSet], list[TableSet]]:
    """(main sections, shown before the plots; the rest, after them). `skipped`: foreign logs
    not imported; `unread`: result files that could not be read; both (path, why). `missing`:
    the planned runs that did not run, with their state and why (`tables.not_run`).
    `spread_threshold`: a case whose repeats spread by more is flagged (`tables.spread_note`).
    `bus_bw_gbps`: the all-reduce bus bandwidth a preflight measured, for the communication
    the efficiency section predicts. `rank_profiles`: profiles.csv's rows, one per profiled
    rank (the GPU time of each, and the efficiency section's lines per rank).
    `layout_reference`: the GPT table's reference of layouts against data parallelism."""
    first = [per_batch_size(summary, spread_threshold), gpu_memory(summary),
             frameworks(summary)]
    first += gpt_sections(summary, runs, layout_reference)
    first.append(profiles(runs, rank_profiles))
    efficiency = efficiency_section(summary, runs, bus_bw_gbps, rank_profiles)
    if efficiency.tables:
        first.append(efficiency)
    first.append(measured_by(runs))
    if reference is not None:
        first.append(reference)
    rest = [summary_tables(summary, spread_threshold), all_results(runs), failed_runs(runs),
            not_run(missing), unread_files(unread), skipped_files(skipped)]
    return first, rest


def _md_section(ts: TableSet) -> list[str]:
    if not ts.tables and not ts.empty_note:
        return []
    parts = [f"## {md_prose(ts.heading)}", ""]
    if not ts.tables:
        return [*parts, f"_{md_prose(ts.empty_note)}_", ""]
    for t in ts.tables:
        parts += _md_table(t)
    return parts


def _md_table(t: Table) -> list[str]:
    parts = [f"### {md_prose(t.title)}", ""] if t.title else []
    parts += [md_table(t.header, t.rows), ""]
    if t.note:
        parts += [md_prose(t.note), ""]
    return parts


def render_markdown(title: str, notes: Sequence[str], first: Sequence[TableSet],
                    rest: Sequence[TableSet], plots: Sequence[Plot] = (),
                    plots_dir: str = PLOTS_DIR) -> str:
    parts = [f"# {md_cell(title)}", ""]
    parts += [f"- {md_prose(n)}" for n in notes]
    parts += ["- throughput: samples/s over the measured window (warm-up dropped), median of "
              "the repeats; speedup: against the 1-node-1-GPU median of the same framework, "
              f"model, precision, batch size and model size (`{MISSING}` where there is none).",
              "- the same tables as CSV in `tables/`; tables and plots together in "
              "`report.html`.", ""]
    for ts in first:
        parts += _md_section(ts)
    if plots:
        parts += ["## Scaling plots", ""]
        parts += [f"![{md_cell(p.title)}]({plots_dir}/{p.path.name})" for p in plots]
        parts.append("")
    for ts in rest:
        parts += _md_section(ts)
    return "\n".join(parts)
