"""Scaling plots as PNG (matplotlib, Agg): throughput, speedup and efficiency against GPUs.

Per model and precision, three figures, one line per series (framework x batch size x variant):

- `<model>_<precision>_throughput.png`: median samples/s against GPUs, with each series'
  linear-scaling line (its 1-GPU median x GPUs, dashed, same colour) where it has a 1n1g point;
- `..._speedup.png`: speedup against GPUs and the ideal `speedup = GPUs`;
- `..._efficiency.png`: scaling efficiency (speedup / GPUs) and the ideal 1.0; the y-axis
  reaches above the highest point, so a superlinear efficiency is drawn, never cut off.

Series colours come from a fixed palette and are returned with each plot, so a test can look
for them in the pixels. A group where no series has two GPU counts gives no plot: there is no
scaling to show. Names reach matplotlib through `toolkit.report.text.plot_text` (a `$` in a
name is a dollar sign, not mathtext). Tables live in `toolkit.report.tables`, the page in
`toolkit.report.html`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.analysis.summary import SummaryRow
from toolkit.report.text import plot_text
from toolkit.results.safe_write import atomic_write_bytes, make_dir

#: matplotlib's tab10, fixed here so colours do not depend on the installed style.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
IDEAL_COLOUR = "#000000"
KINDS = ("throughput", "speedup", "efficiency")


@dataclass(frozen=True)
class Plot:
    path: Path
    title: str
    kind: str
    """One of KINDS, or `preflight`."""
    series: dict[str, str]
    """Series label -> its line colour (hex)."""


@dataclass(frozen=True)
class _Series:
    label: str
    colour: str
    rows: list[SummaryRow]


def png_bytes(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes: every plot is rendered in memory and written through
    the no-follow primitive (or embedded in HTML), never by savefig to a path."""
    png = io.BytesIO()
    fig.savefig(png, format="png")
    return png.getvalue()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "plot"


def _series(rows: Sequence[SummaryRow]) -> list[_Series]:
    keys = sorted({(r.framework, r.batch_size_per_device, r.variant) for r in rows},
                  key=lambda k: (k[0], -k[1], k[2]))
    frameworks = {k[0] for k in keys}
    variants: dict[str, int] = {}
    out = []
    for i, (fw, bs, variant) in enumerate(keys):
        label = f"bs={bs}" if len(frameworks) == 1 else f"{fw} bs={bs}"
        if variant and sum(1 for k in keys if k[:2] == (fw, bs)) > 1:
            variants.setdefault(variant, len(variants) + 1)
            label += f" [{variants[variant]}]"
        members = sorted((r for r in rows if (r.framework, r.batch_size_per_device, r.variant)
                          == (fw, bs, variant) and r.throughput_median_sps is not None),
                         key=lambda r: (r.gpus, r.num_nodes))
        out.append(_Series(label, PALETTE[i % len(PALETTE)], members))
    return out


def scaling_plots(summary: Sequence[SummaryRow], out_dir: Path,
                  root: Path | None = None) -> list[Plot]:
    """Write the three figures per model/precision into `out_dir`; return what was written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str], list[SummaryRow]] = {}
    for r in summary:
        groups.setdefault((r.model, r.precision), []).append(r)
    plots: list[Plot] = []
    for (model, precision), rows in sorted(groups.items()):
        series = [s for s in _series(rows) if s.rows]
        if not any(len({r.gpus for r in s.rows}) > 1 for s in series):
            continue
        make_dir(out_dir, root=root or out_dir)
        gpus = sorted({r.gpus for s in series for r in s.rows})
        for kind in KINDS:
            fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
            try:
                _draw(ax, kind, series, gpus)
                title = f"{model} {precision}: {kind} vs GPUs"
                ax.set_title(plot_text(title))
                fig.tight_layout()
                path = out_dir / f"{_slug(model)}_{_slug(precision)}_{kind}.png"
                atomic_write_bytes(path, png_bytes(fig), durable=False, root=root or out_dir)
            finally:
                plt.close(fig)
            plots.append(Plot(path, title, kind, {s.label: s.colour for s in series}))
    return plots


def plain_number(value: float) -> str:
    """A tick value as a reader writes it: 50, 0.5, 2,000, 20,000 (never a power of ten)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


#: Decades the axis spans above which only powers of ten are labelled, and below which every
#: tick is (between the two: 2, 3, 4 and 6 x 10^k as well), as matplotlib's LogFormatter reads
#: its `minor_thresholds`.
LOG_LABEL_THRESHOLDS = (2.0, 0.5)


def label_log_ticks(axis: Any) -> None:
    """Label a base-10 log axis in plain numbers (`2,000`, not `2x10^3`), at the powers of ten
    and, where the axis spans less than LOG_LABEL_THRESHOLDS[0] decades, at minor ticks too,
    so that a throughput axis shows more than one number."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        """LogFormatter's choice of which ticks to label, in plain numbers."""

        def __call__(self, x: float, pos: int | None = None) -> str:
            return plain_number(x) if super().__call__(x, pos) else ""

    for set_formatter in (axis.set_major_formatter, axis.set_minor_formatter):
        set_formatter(PlainLogFormatter(labelOnlyBase=False,
                                        minor_thresholds=LOG_LABEL_THRESHOLDS))


def _draw(ax: Any, kind: str, series: Sequence[_Series], gpus: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(gpus))
    ax.set_xticklabels([str(g) for g in gpus])
    ax.set_xlabel("GPUs")
    ax.grid(True, which="major", alpha=0.3)
    span = [min(gpus), max(gpus)]
    if kind == "speedup":
        ax.set_yscale("log", base=2)
        ax.set_yticks(list(gpus))
        ax.set_yticklabels([str(g) for g in gpus])
        ax.plot(span, span, linestyle=":", color=IDEAL_COLOUR, linewidth=1, label="ideal")
        ax.set_ylabel("speedup vs 1 GPU")
    elif kind == "efficiency":
        ax.axhline(1.0, linestyle=":", color=IDEAL_COLOUR, linewidth=1, label="ideal")
        ax.set_ylabel("scaling efficiency")
        # a superlinear point (efficiency above 1: caches, a slow 1-GPU baseline) is a finding
        # to see, so the axis grows to hold the highest one instead of cutting it off
        top = max((r.scaling_efficiency for s in series for r in s.rows
                   if r.scaling_efficiency is not None), default=1.0)
        ax.set_ylim(0, max(1.15, top * 1.08))
    else:
        ax.set_yscale("log")
        label_log_ticks(ax.yaxis)
        ax.set_ylabel("samples/s (median of repeats)")
    for s in series:
        xs = [r.gpus for r in s.rows]
        if kind == "throughput":
            ys: list[float | None] = [r.throughput_median_sps for r in s.rows]
            base = next((r.baseline_sps for r in s.rows if r.baseline_sps), None)
            if base:
                ax.plot(span, [base * g for g in span], linestyle="--", color=s.colour,
                        linewidth=1, alpha=0.6)
        elif kind == "speedup":
            ys = [r.speedup for r in s.rows]
        else:
            ys = [r.scaling_efficiency for r in s.rows]
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=2,
                    color=s.colour, label=plot_text(s.label))
    if kind == "throughput":
        ax.plot([], [], linestyle="--", color="#555555", linewidth=1, label="linear scaling")
    ax.legend(fontsize="small")
