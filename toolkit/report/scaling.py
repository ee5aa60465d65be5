"""The report's "Where the efficiency went" section and its plot: for every multi-GPU case, its
per-GPU efficiency against its one-GPU baseline and, where both were profiled, the lost step
time split into slower compute, exposed communication, pipeline bubble and idle/host time, with
the communication the bytes and a measured bus bandwidth predict beside what was measured. The
case's split is of its slowest profiled rank; where more than one rank was profiled, a line per
rank (by stage under pipeline parallelism) follows it, from profiles.csv's rows
(`toolkit.analysis.scaling` holds the arithmetic and why the slowest rank)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from toolkit.analysis.numbers import finite
from toolkit.analysis.scaling import Breakdown, breakdown, slowest_rank, stage_ids
from toolkit.analysis.summary import SummaryRow
from toolkit.report.plots import IDEAL_COLOUR, PALETTE, Plot, png_bytes
from toolkit.report.tables import Table, TableSet, case_labels, fmt, fmt_pct
from toolkit.report.text import PLOT_LABEL_CHARS, plot_text
from toolkit.results.safe_write import atomic_write_bytes, make_dir

PARTS = ("slower compute", "exposed communication", "pipeline bubble", "idle/host")
RANK_MARK = "↳"
"""Begins a rank's line under its case's line."""
NOTE = (
    "Per optimizer step, from the slowest profiled rank of the case's last profiled repeat "
    "(`profile:` grid option; the rank with the most compute time, the one the others waited "
    "for) and from its one-GPU baseline; where more than one rank was profiled, a line "
    f"({RANK_MARK}) per rank, a pipeline's by stage (every rank's figures in profiles.csv). "
    "ideal = the baseline's step x this case's share "
    "of its work (samples per step / baseline samples per step / GPUs); slower compute = time "
    "a compute kernel ran beyond the baseline's share; exposed communication = time only "
    "communication kernels ran; pipeline bubble = (pp - 1) / (v x micro-batches) of the "
    "compute, v the stages per rank of interleaved 1F1B (1 for GPipe and 1F1B; the computed "
    "share of the step in brackets); idle/host = the rest of the time no kernel "
    "ran. On each line the four add up to its step - ideal (a negative part: better than the "
    "baseline's share); a rank that waits for a slower one shows the wait as idle/host or "
    "exposed communication where the slower rank shows slower compute or bubble. "
    "communication: all communication kernel time; predicted, at the all-reduce bus bandwidth "
    "a preflight measured, for that line's rank: dp, the gradients (4 bytes a parameter) "
    "all-reduced once; GPT tp, four all-reduces of a micro-batch's activations per layer of "
    "the rank's stage, and one more on the first stage (the embedding) and on the last (the "
    "output layer), per micro-batch (2 bytes an element under amp); GPT pp, one fp32 "
    "activation and its gradient per micro-batch across each boundary the rank's stages have "
    "with a neighbouring stage (one for the first and the last stage, two for a middle one, "
    "each stage of an interleaved rank counted; nothing predicted where the rank's stage is "
    "not recorded). Communication well above its prediction is waiting inside a collective "
    "(a slower rank, a pipeline stage), not the link.")
NO_PROFILE = ("no profile of this case or its baseline (or one without its exposed "
              "communication): add profile: {ranks: [0, 1], steps: 3} to the grid")


@dataclass(frozen=True)
class RankSplit:
    """One profiled rank of a case's profiled run, and the split of its step."""

    profile: dict[str, Any]
    """The rank's profiles.csv row (`toolkit.results.runs.rank_profile`)."""
    split: Breakdown | None


@dataclass(frozen=True)
class CaseSplit:
    """A multi-GPU case with a baseline: the split of its slowest profiled rank (None where a
    profile is missing), which rank that is, of how many, and every profiled rank's split
    where there was more than one."""

    row: SummaryRow
    split: Breakdown | None
    rank: Any = None
    """The rank the case's split is of."""
    which: str = "slowest"
    """How that rank was chosen: `slowest`, or `lowest` where only runs.csv's figures (the
    lowest profiled rank's) were there."""
    profiled_ranks: int = 0
    ranks: list[RankSplit] = field(default_factory=list)


def _profiled_run(runs: Sequence[dict[str, Any]], case_ids: str) -> dict[str, Any] | None:
    """The case's latest ok run with a profile (the profile is taken in the last repeat)."""
    ids = set(case_ids.split())
    found = [r for r in runs if str(r.get("case_id")) in ids and r.get("status") == "ok"
             and finite(r.get("profile_step_ms"))]
    return max(found, key=lambda r: int(r.get("repeat") or 0), default=None)


def _same_run(profile: dict[str, Any], run: dict[str, Any]) -> bool:
    return (str(profile.get("case_id")) == str(run.get("case_id"))
            and str(profile.get("repeat")) == str(run.get("repeat")))


def with_profile(run: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """The run row with one rank's profile figures in place of the lowest rank's."""
    return {**{k: v for k, v in run.items() if not k.startswith("profile_")}, **profile}


def rank_label(profile: dict[str, Any], row: SummaryRow) -> str:
    """`stage 1 (rank 1)` under pipelining (`stages 1, 3 (rank 1)` for a rank of an interleaved
    pipeline: pipeline rank r holds stages r, r + pp, ...), else `rank 1`; with the rank's
    tensor-parallel coordinate under tp, and its data-parallel one where dp is combined with
    tp or pp (alone, it is the rank): `stage 0 (tp 1, dp 0, rank 2)`."""
    dp = row.data_parallel
    coords = []
    if row.tp > 1 and profile.get("tp_rank") is not None:
        coords.append(f"tp {profile['tp_rank']}")
    if dp > 1 and (row.tp > 1 or row.pp > 1) and profile.get("dp_rank") is not None:
        coords.append(f"dp {profile['dp_rank']}")
    rank = f"rank {profile.get('rank')}"
    if row.pp > 1 and profile.get("pp_rank") is not None:
        v, first = row.pipeline_stages_per_rank, finite(profile["pp_rank"])
        stages = (", ".join(map(str, stage_ids(int(first), row.pp, v)))
                  if first is not None else str(profile["pp_rank"]))
        return f"stage{'s' if v > 1 else ''} {stages} ({', '.join([*coords, rank])})"
    return rank + (f" ({', '.join(coords)})" if coords else "")


def breakdowns(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
               bus_bw_gbps: float | None = None,
               rank_profiles: Sequence[dict[str, Any]] = ()) -> list[CaseSplit]:
    """Every multi-GPU case with a baseline, with the split of its slowest profiled rank
    (None where a profile is missing) and, where more than one rank was profiled, of each.
    `rank_profiles`: profiles.csv's rows; without those of a run, its runs.csv figures (the
    lowest profiled rank's) are all there is."""
    by_case = {r.case_ids: r for r in summary}
    out = []
    for r in summary:
        if r.gpus < 2 or not r.baseline_case:
            continue
        base = by_case.get(r.baseline_case)
        mine = _profiled_run(runs, r.case_ids)
        theirs = _profiled_run(runs, r.baseline_case)
        if base is None or mine is None or theirs is None:
            out.append(CaseSplit(r, None))
            continue
        split = partial(_split, baseline=theirs, r=r, base=base, bus_bw_gbps=bus_bw_gbps)
        ranks = sorted((p for p in rank_profiles if _same_run(p, mine)),
                       key=lambda p: (finite(p.get("pp_rank")) or 0, finite(p.get("rank")) or 0))
        slowest = slowest_rank(ranks)
        if slowest is None:
            out.append(CaseSplit(r, split(mine), mine.get("profile_rank"), "lowest",
                                 len(ranks) or int(finite(mine.get("profile_ranks")) or 1)))
            continue
        lines = [RankSplit(p, split(with_profile(mine, p))) for p in ranks] \
            if len(ranks) > 1 else []
        out.append(CaseSplit(r, split(with_profile(mine, slowest)), slowest.get("rank"),
                             "slowest", len(ranks), lines))
    return out


def _split(run: dict[str, Any], baseline: dict[str, Any], r: SummaryRow, base: SummaryRow,
           bus_bw_gbps: float | None) -> Breakdown | None:
    """The split of `run` (case `r`, with one rank's profile) against `baseline` (a run of
    `base`, its one-GPU baseline)."""
    dp = r.data_parallel
    return breakdown(run, baseline, gpus=r.gpus, samples_per_step=r.batch_size_per_device * dp,
                     baseline_samples_per_step=base.batch_size_per_device, pp=r.pp,
                     micro_batches=r.micro_batches or 1, dp=dp, tp=r.tp,
                     bus_bw_gbps=bus_bw_gbps, virtual_stages=r.pipeline_stages_per_rank)


def _split_cells(b: Breakdown) -> list[str]:
    predicted = (f" ({fmt(b.predicted_communication_ms, 1)})"
                 if b.predicted_communication_ms is not None else "")
    bubble = fmt(b.bubble_ms, 1) + (f" ({fmt_pct(b.bubble_share)}%)"
                                     if b.bubble_share is not None else "")
    return [fmt(b.step_ms, 1), fmt(b.ideal_ms, 1), fmt(b.efficiency, 3),
            fmt(b.slower_compute_ms, 1), fmt(b.exposed_communication_ms, 1), bubble,
            fmt(b.idle_host_ms, 1), fmt(b.communication_ms, 1) + predicted]


def _split_record(b: Breakdown) -> dict[str, Any]:
    return {"step_ms": b.step_ms, "ideal_ms": b.ideal_ms, "profiled_efficiency": b.efficiency,
            "slower_compute_ms": b.slower_compute_ms,
            "exposed_communication_ms": b.exposed_communication_ms, "bubble_ms": b.bubble_ms,
            "bubble_share": b.bubble_share, "idle_host_ms": b.idle_host_ms,
            "communication_ms": b.communication_ms,
            "predicted_communication_ms": b.predicted_communication_ms}


def _rank_text(c: CaseSplit) -> str:
    if c.split is None or c.rank is None:
        return ""
    return (f"{c.rank} ({c.which} of {c.profiled_ranks})" if c.profiled_ranks > 1
            else str(c.rank))


def efficiency_section(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                       bus_bw_gbps: float | None = None,
                       rank_profiles: Sequence[dict[str, Any]] = ()) -> TableSet:
    """The section's table: a row per multi-GPU case with a baseline, and under it a row per
    profiled rank where more than one was (`rank_profiles`: profiles.csv's rows), shown where some
    run was profiled (without any profile, the summary's efficiency column says all there
    is)."""
    items = breakdowns(summary, runs, bus_bw_gbps, rank_profiles)
    if not items or not any(finite(r.get("profile_step_ms")) for r in runs):
        return TableSet("efficiency", "Where the efficiency went", [], [],
                        "no profiled multi-GPU case with a one-GPU baseline")
    header = ["case", "layout", "GPUs", "efficiency", "profiled rank", "profiled step ms",
              "ideal ms", "profiled efficiency", *(f"{p} ms" for p in PARTS),
              "communication ms (predicted)"]
    body, records = [], []
    labels = case_labels([c.row for c in items])
    for label, c in zip(labels, items, strict=True):
        r = c.row
        layout = r.layout + (f", {r.pipeline_stages_per_rank} stages per rank"
                             if r.pipeline_stages_per_rank > 1 else "")
        cells = [label, layout, str(r.gpus), fmt(r.scaling_efficiency, 3), _rank_text(c)]
        record: dict[str, Any] = {"case_ids": r.case_ids, "baseline_case": r.baseline_case,
                                  "layout": r.layout, "gpus": r.gpus,
                                  "pipeline_stages_per_rank": r.pipeline_stages_per_rank,
                                  "scaling_efficiency": r.scaling_efficiency, "line": "case",
                                  "rank": c.rank if c.split is not None else None,
                                  "rank_chosen": c.which if c.split is not None else None,
                                  "profiled_ranks": c.profiled_ranks or None}
        if c.split is None:
            cells += [NO_PROFILE, *([""] * (len(header) - len(cells) - 1))]
        else:
            cells += _split_cells(c.split)
            record.update(_split_record(c.split))
        body.append(cells)
        records.append(record)
        for line in c.ranks:
            p = line.profile
            body.append([RANK_MARK, "", "", "", rank_label(p, r),
                         *(_split_cells(line.split) if line.split is not None else
                           [NO_PROFILE, *([""] * (len(header) - 6))])])
            records.append({"case_ids": r.case_ids, "baseline_case": r.baseline_case,
                            "layout": r.layout, "gpus": r.gpus, "line": "rank",
                            "rank": p.get("rank"), "pp_rank": p.get("pp_rank"),
                            "dp_rank": p.get("dp_rank"), "tp_rank": p.get("tp_rank"),
                            **(_split_record(line.split) if line.split is not None else {})})
    note = NOTE + ("" if bus_bw_gbps else " No preflight bus bandwidth: nothing predicted.")
    return TableSet("efficiency", "Where the efficiency went",
                    [Table("efficiency: speedup / GPUs from the throughput; the rest from the "
                           "profiled steps", header, body, note)], records)


COLOURS = dict(zip(("ideal", *PARTS), PALETTE, strict=False))
"""The plot's colour of the ideal step and of each part."""
BELOW_ZERO_HATCH = "//"
BELOW_ZERO_LABEL = "hatched, left of 0: below zero"


def draw_breakdown(ax: Any, items: Sequence[tuple[str, Breakdown]]) -> None:
    """One horizontal bar per item on `ax`, top down: the ideal step and the parts above zero
    stacked rightwards from 0, the parts below zero (a rank that computed faster than its share
    of the baseline, less idle time than the baseline's) hatched and stacked leftwards from 0
    with their value beside them, and a black tick at the profiled step. The x axis reaches
    below zero wherever a part is negative, so that no part is clipped; the right-hand stack
    then passes the step by as much as the parts below zero add up to."""
    lowest, highest = 0.0, 0.0
    labelled: set[str] = set()
    below: set[str] = set()
    for y, (_, b) in enumerate(items):
        right, left = 0.0, 0.0
        for part, value in zip(("ideal", *PARTS),
                               (b.ideal_ms, b.slower_compute_ms, b.exposed_communication_ms,
                                b.bubble_ms, b.idle_host_ms), strict=True):
            if value > 0:
                ax.barh(y, value, left=right, color=COLOURS[part],
                        label=part if part not in labelled else None)
                labelled.add(part)
                right += value
            elif value < 0:
                ax.barh(y, value, left=left, color=COLOURS[part], hatch=BELOW_ZERO_HATCH,
                        edgecolor=IDEAL_COLOUR, linewidth=0.5)
                below.add(part)
                left += value
        if left < 0:
            ax.annotate(f"{left:.1f}", (left, y), xytext=(-2, 0), textcoords="offset points",
                        ha="right", va="center", fontsize="x-small")
        ax.plot([b.step_ms, b.step_ms], [y - 0.45, y + 0.45], color=IDEAL_COLOUR,
                linewidth=1.5, label="profiled step" if y == 0 else None)
        lowest, highest = min(lowest, left), max(highest, right, b.step_ms)
    if lowest < 0:
        # room for the value beside the leftmost bar, and a line at zero
        span = highest - lowest
        ax.set_xlim(lowest - 0.08 * span, highest + 0.02 * span)
        ax.axvline(0.0, color=IDEAL_COLOUR, linewidth=0.8)
        # no width: only their legend entries show (a part's colour, and the hatching)
        for part in PARTS:
            if part in below - labelled:
                ax.barh(0, 0.0, color=COLOURS[part], label=part)
        ax.barh(0, 0.0, color="white", hatch=BELOW_ZERO_HATCH, edgecolor=IDEAL_COLOUR,
                linewidth=0.5, label=BELOW_ZERO_LABEL)
    ax.set_yticks(range(len(items)), [plot_text(label, PLOT_LABEL_CHARS) for label, _ in items])
    ax.invert_yaxis()  # top down, as the table lists them: a case, then its ranks
    ax.set_xlabel("ms per optimizer step (profiled)")


def breakdown_plot(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                   path: Path, root: Path, bus_bw_gbps: float | None = None,
                   rank_profiles: Sequence[dict[str, Any]] = ()) -> Plot | None:
    """One horizontal bar per profiled multi-GPU case (its slowest profiled rank's) and, under
    it, one per profiled rank where more than one was (`draw_breakdown`: the ideal step and
    each part of the loss, parts below zero left of zero); None where none was profiled."""
    found = breakdowns(summary, runs, bus_bw_gbps, rank_profiles)
    items: list[tuple[str, Breakdown]] = []
    for label, c in zip(case_labels([c.row for c in found]), found, strict=True):
        if c.split is None:
            continue
        items.append((label, c.split))
        items += [(f"{RANK_MARK} {rank_label(line.profile, c.row)}", line.split)
                  for line in c.ranks if line.split is not None]
    if not items:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height_in = 1.7 + 0.5 * len(items)
    fig, ax = plt.subplots(figsize=(8.0, height_in), dpi=100)
    try:
        draw_breakdown(ax, items)
        title = "Where the efficiency went: the ideal step and what was lost"
        ax.set_title(title, fontsize="medium")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        # below the axes, so that no bar is hidden behind it
        fig.legend(unique.values(), unique.keys(), loc="lower center", fontsize="small",
                   ncol=3, frameon=False)
        fig.tight_layout(rect=(0.0, 0.5 / height_in, 1.0, 1.0))
        make_dir(path.parent, root=root)
        atomic_write_bytes(path, png_bytes(fig), durable=False, root=root)
    finally:
        plt.close(fig)
    return Plot(path, title, "efficiency_breakdown", dict(COLOURS))


__all__ = ["breakdown_plot", "breakdowns", "draw_breakdown", "efficiency_section"]
