"""History's presentation (`python -m toolkit.history`): one trend plot per case (median per
batch with its repeat spread as an error bar, one line per provenance value, change points
ringed in CHANGE_COLOUR) and the table of points. The arithmetic is `toolkit.analysis.history`.
"""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pandas as pd

from toolkit.analysis.history import FLOOR, MIN_HISTORY, WINDOW, K
from toolkit.report.plots import PALETTE
from toolkit.report.tables import Table, TableSet, fmt

CHANGE_COLOUR = "#d62728"
LINE_PALETTE = tuple(c for c in PALETTE if c != CHANGE_COLOUR)
RULE = (f"change point: a batch's median more than {K:g} x max(1.4826 x MAD, {100 * FLOOR:g}% "
        f"of the median) away from the median of the {WINDOW} batches before it on the same "
        f"line since its last change point (at least {MIN_HISTORY})")


def _date(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M")


def line_colours(frame: pd.DataFrame) -> dict[str, str]:
    lines = sorted(frame["line"].unique())
    return {line: LINE_PALETTE[i % len(LINE_PALETTE)] for i, line in enumerate(lines)}


def table_set(frame: pd.DataFrame, unit: str) -> TableSet:
    body = [[str(r["case_id"]), str(r["line"]), _date(float(r["started_s"])), str(r["repeats"]),
             fmt(float(r["median"])), f"{fmt(float(r['low']))}..{fmt(float(r['high']))}",
             fmt(None if pd.isna(r["baseline"]) else float(r["baseline"])),
             "change" if r["change"] else "", str(r["results_dir"])]
            for r in frame.to_dict("records")]
    changes = int(frame["change"].sum()) if len(frame) else 0
    note = f"{len(frame)} point(s), {changes} change point(s); {unit}. {RULE}"
    table = Table("", ["case", "line", "date (UTC)", "runs", "median", "min..max",
                       "rolling median", "flag", "results"], body, note)
    records = [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
    return TableSet("history", "History", [table] if body else [], records, note)


def trend_png(frame: pd.DataFrame, case_id: str, unit: str,
              colours: dict[str, str]) -> bytes:
    """The trend plot of one case (rows of `frame` for that case) as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    try:
        for line, group in frame.groupby("line", sort=True):
            when = pd.to_datetime(group["started_s"], unit="s")
            colour = colours[str(line)]
            ax.errorbar(when, group["median"],
                        yerr=[group["median"] - group["low"], group["high"] - group["median"]],
                        color=colour, marker="o", markersize=4, linewidth=1.5, capsize=3,
                        label=str(line) or case_id)
            flagged = group[group["change"]]
            if len(flagged):
                ax.scatter(pd.to_datetime(flagged["started_s"], unit="s"), flagged["median"],
                           s=220, facecolors="none", edgecolors=CHANGE_COLOUR, linewidths=2.5,
                           zorder=5)
        ax.set_title(case_id, fontsize=10)
        ax.set_ylabel(unit)
        if frame["line"].nunique() > 1 or frame["line"].iloc[0]:
            ax.legend(fontsize=7)
        fig.autofmt_xdate()
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png")
        return png.getvalue()
    finally:
        plt.close(fig)
