"""The report's "Where the efficiency went" section and its plot: for every multi-GPU case, its
per-GPU efficiency against its one-GPU baseline and, where both were profiled, the lost step
time split into slower compute, exposed communication, pipeline bubble and idle/host time, with
the communication the bytes and a measured bus bandwidth predict beside what was measured
(`toolkit.analysis.scaling` holds the arithmetic)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.analysis.numbers import finite
from toolkit.analysis.scaling import Breakdown, breakdown
from toolkit.analysis.summary import SummaryRow
from toolkit.report.plots import PALETTE, Plot, png_bytes
from toolkit.report.tables import Table, TableSet, case_labels, fmt, fmt_pct
from toolkit.report.text import plot_text
from toolkit.results.safe_write import atomic_write_bytes, make_dir

PARTS = ("slower compute", "exposed communication", "pipeline bubble", "idle/host")
NOTE = (
    "Per optimizer step, from the lowest profiled rank of the case's last repeat (`profile:` "
    "grid option) and of its one-GPU baseline: ideal = the baseline's step x this case's share "
    "of its work (samples per step / baseline samples per step / GPUs); slower compute = time "
    "a compute kernel ran beyond the baseline's share; exposed communication = time only "
    "communication kernels ran; pipeline bubble = (pp - 1) / micro-batches of the compute "
    "(the computed share of the step in brackets); idle/host = the rest of the time no kernel "
    "ran. The four add up to step - ideal (a negative part: better than the baseline's share). "
    "communication: all communication kernel time; predicted, at the all-reduce bus bandwidth "
    "a preflight measured: dp, the gradients (4 bytes a parameter) all-reduced once; GPT tp, "
    "four all-reduces of a micro-batch's activations per layer and two more per micro-batch "
    "(2 bytes an element under amp); GPT pp, one fp32 activation and its gradient per "
    "micro-batch between neighbouring stages. Communication well above its prediction is "
    "waiting inside a collective (a slower rank, a pipeline stage), not the link.")
NO_PROFILE = ("no profile of this case or its baseline (or one without its exposed "
              "communication): add profile: {ranks: [0, 1], steps: 3} to the grid")


def _profiled_run(runs: Sequence[dict[str, Any]], case_ids: str) -> dict[str, Any] | None:
    """The case's latest ok run with a profile (the profile is taken in the last repeat)."""
    ids = set(case_ids.split())
    found = [r for r in runs if str(r.get("case_id")) in ids and r.get("status") == "ok"
             and finite(r.get("profile_step_ms"))]
    return max(found, key=lambda r: int(r.get("repeat") or 0), default=None)


def breakdowns(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
               bus_bw_gbps: float | None = None
               ) -> list[tuple[SummaryRow, Breakdown | None]]:
    """Every multi-GPU case with a baseline, with its breakdown (None where a profile is
    missing)."""
    by_case = {r.case_ids: r for r in summary}
    out = []
    for r in summary:
        if r.gpus < 2 or not r.baseline_case:
            continue
        base = by_case.get(r.baseline_case)
        mine = _profiled_run(runs, r.case_ids)
        theirs = _profiled_run(runs, r.baseline_case)
        found = None
        if base is not None and mine is not None and theirs is not None:
            dp = r.dp or r.gpus // (r.tp * r.pp)
            found = breakdown(mine, theirs, gpus=r.gpus,
                              samples_per_step=r.batch_size_per_device * dp,
                              baseline_samples_per_step=base.batch_size_per_device,
                              pp=r.pp, micro_batches=r.micro_batches or 1, dp=dp, tp=r.tp,
                              bus_bw_gbps=bus_bw_gbps)
        out.append((r, found))
    return out


def efficiency_section(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                       bus_bw_gbps: float | None = None) -> TableSet:
    """The section's table: a row per multi-GPU case with a baseline, shown where some run was
    profiled (without any profile, the summary's efficiency column says all there is)."""
    items = breakdowns(summary, runs, bus_bw_gbps)
    if not items or not any(finite(r.get("profile_step_ms")) for r in runs):
        return TableSet("efficiency", "Where the efficiency went", [], [],
                        "no profiled multi-GPU case with a one-GPU baseline")
    header = ["case", "layout", "GPUs", "efficiency", "profiled step ms", "ideal ms",
              "profiled efficiency", *(f"{p} ms" for p in PARTS),
              "communication ms (predicted)"]
    body, records = [], []
    labels = case_labels([r for r, _ in items])
    for label, (r, b) in zip(labels, items, strict=True):
        cells = [label, r.layout, str(r.gpus), fmt(r.scaling_efficiency, 3)]
        record: dict[str, Any] = {"case_ids": r.case_ids, "baseline_case": r.baseline_case,
                                  "layout": r.layout, "gpus": r.gpus,
                                  "scaling_efficiency": r.scaling_efficiency}
        if b is None:
            cells += [NO_PROFILE, *([""] * (len(header) - 5))]
        else:
            predicted = (f" ({fmt(b.predicted_communication_ms, 1)})"
                         if b.predicted_communication_ms is not None else "")
            bubble = fmt(b.bubble_ms, 1) + (f" ({fmt_pct(b.bubble_share)}%)"
                                             if b.bubble_share is not None else "")
            cells += [fmt(b.step_ms, 1), fmt(b.ideal_ms, 1), fmt(b.efficiency, 3),
                      fmt(b.slower_compute_ms, 1), fmt(b.exposed_communication_ms, 1), bubble,
                      fmt(b.idle_host_ms, 1), fmt(b.communication_ms, 1) + predicted]
            record.update(step_ms=b.step_ms, ideal_ms=b.ideal_ms,
                          profiled_efficiency=b.efficiency,
                          slower_compute_ms=b.slower_compute_ms,
                          exposed_communication_ms=b.exposed_communication_ms,
                          bubble_ms=b.bubble_ms, bubble_share=b.bubble_share,
                          idle_host_ms=b.idle_host_ms, communication_ms=b.communication_ms,
                          predicted_communication_ms=b.predicted_communication_ms)
        body.append(cells)
        records.append(record)
    note = NOTE + ("" if bus_bw_gbps else " No preflight bus bandwidth: nothing predicted.")
    return TableSet("efficiency", "Where the efficiency went",
                    [Table("efficiency: speedup / GPUs from the throughput; the rest from the "
                           "profiled steps", header, body, note)], records)


def breakdown_plot(summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                   path: Path, root: Path, bus_bw_gbps: float | None = None) -> Plot | None:
    """One horizontal bar per profiled multi-GPU case: its profiled step as the ideal step and
    each part of the loss (parts below zero are not drawn); None where none was profiled."""
    found = breakdowns(summary, runs, bus_bw_gbps)
    items = [(label, b) for label, (_, b) in zip(case_labels([r for r, _ in found]), found,
                                                 strict=True) if b is not None]
    if not items:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = dict(zip(("ideal", *PARTS), PALETTE, strict=False))
    fig, ax = plt.subplots(figsize=(8.0, 1.2 + 0.5 * len(items)), dpi=100)
    try:
        for y, (_, b) in enumerate(items):
            left = 0.0
            for part, value in zip(("ideal", *PARTS),
                                   (b.ideal_ms, b.slower_compute_ms,
                                    b.exposed_communication_ms, b.bubble_ms, b.idle_host_ms),
                                   strict=True):
                if value > 0:
                    ax.barh(y, value, left=left, color=colours[part],
                            label=part if y == 0 or part not in
                            ax.get_legend_handles_labels()[1] else None)
                    left += value
        ax.set_yticks(range(len(items)), [plot_text(label) for label, _ in items])
        ax.set_xlabel("ms per optimizer step (profiled)")
        title = "Where the efficiency went: the ideal step and what was lost"
        ax.set_title(title)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), loc="lower right", fontsize="small")
        fig.tight_layout()
        make_dir(path.parent, root=root)
        atomic_write_bytes(path, png_bytes(fig), durable=False, root=root)
    finally:
        plt.close(fig)
    return Plot(path, title, "efficiency_breakdown", dict(colours))


__all__ = ["breakdown_plot", "breakdowns", "efficiency_section"]
