"""History's presentation (`python -m toolkit.history`): one trend plot per case (median per
batch with its repeat spread as an error bar, one line per provenance value, change points
ringed in CHANGE_COLOUR) and the table of points. The arithmetic is `toolkit.analysis.history`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pandas as pd

from toolkit.analysis.history import FLOOR, MIN_HISTORY, WINDOW, K
from toolkit.report.plots import PALETTE, png_bytes
from toolkit.report.tables import OVERSUBSCRIBED_MARK, Table, TableSet, fmt
from toolkit.report.text import plot_text

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


def _row(r: Any) -> list[str]:
    """One point (a row of `analysis.history.points`) as table cells."""
    baseline = None if pd.isna(r.baseline) else float(r.baseline)
    return [str(r.case_id), str(r.line), _date(float(r.started_s)), str(r.repeats),
            fmt(float(r.median)), f"{fmt(float(r.low))}..{fmt(float(r.high))}", fmt(baseline),
            _flag(r), str(r.results_dir)]


def _flag(r: Any) -> str:
    over, crowded = (int(getattr(r, column, 0) or 0) for column in ("oversubscribed", "crowded"))
    what = [f"{n} of {r.repeats} runs {words}" for n, words in
            ((over, "oversubscribed"), (crowded, "crowded by other processes")) if n]
    if what:
        return f"{OVERSUBSCRIBED_MARK} {', '.join(what)}: not a figure, no change point"
    return "change" if r.change else ""


def contended(frame: pd.DataFrame) -> pd.DataFrame:
    """The points some of whose runs measured contention (oversubscribed or crowded)."""
    mask = pd.Series(False, index=frame.index)
    for column in ("oversubscribed", "crowded"):
        if column in frame:
            mask |= frame[column] > 0
    return frame[mask]


POINT_HEADER = ["case", "line", "date (UTC)", "runs", "median", "min..max", "rolling median",
                "flag", "results"]


def table_set(frame: pd.DataFrame, unit: str) -> TableSet:
    """Two tables: the change points, and each case's line(s) in brief (points, dates, the
    latest median); every point is in the records (history.csv)."""
    flagged = frame[frame["change"]]
    crowded = contended(frame)
    changes = Table("Change points", POINT_HEADER,
                    [_row(r) for r in flagged.itertuples()],
                    "" if len(flagged) else "none")
    tables = [changes]
    if len(crowded):
        tables.append(Table("Points that measured contention", POINT_HEADER,
                            [_row(r) for r in crowded.itertuples()],
                            f"{OVERSUBSCRIBED_MARK} some runs of these points shared their CPUs "
                            "with other ranks or another run (oversubscribed: the store's "
                            "`oversubscribed` says with what), or were measured while other "
                            "processes, none of their ranks, took a saturated host's CPUs "
                            "(crowded: the store's `host_crowded` says how much): they "
                            "measured contention, so they are left out of the change points "
                            "and of the history later points are held against"))
    lines = frame.groupby(["case_id", "line"], sort=True).agg(
        points=("median", "size"), first=("started_s", "min"), last=("started_s", "max"),
        latest=("median", "last"), flags=("change", "sum")).reset_index()
    brief = Table("Cases", ["case", "line", "points", "from", "to", "latest median",
                            "change points"],
                  [[str(r.case_id), str(r.line), str(r.points), _date(float(r.first)),
                    _date(float(r.last)), fmt(float(r.latest)), str(int(r.flags))]
                   for r in lines.itertuples()])
    note = (f"{len(frame)} point(s), {len(flagged)} change point(s)"
            + (f", {len(crowded)} measured contention" if len(crowded) else "")
            + f"; {unit}; every point in history.csv; line: where the runs ran (executor, site, "
            f"machine, device; `toolkit.analysis.places`), runs of different places are never "
            f"one line. {RULE}")
    return TableSet("history", "History", [*tables, brief], [], note)


ONE_POINT_SPAN_S = 86400.0
"""A case with points at one time only: its plot spans this much either side of it."""


def trend_figure(frame: pd.DataFrame, case_id: str, unit: str,
                 colours: dict[str, str]) -> Any:
    """The trend plot of one case (rows of `frame` for that case) as a matplotlib Figure; the
    caller closes it. With points at one time only the time axis spans ONE_POINT_SPAN_S either
    side and the value axis starts at 0, so one point reads as one point, not as a trend over
    years of empty axis. Points that measured contention (`contended`) are drawn hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    for line, group in frame.groupby("line", sort=True):
        when = pd.to_datetime(group["started_s"], unit="s")
        colour = colours[str(line)]
        ax.errorbar(when, group["median"],
                    yerr=[group["median"] - group["low"], group["high"] - group["median"]],
                    color=colour, marker="o", markersize=4, linewidth=1.5, capsize=3,
                    label=plot_text(str(line) or case_id))
        crowded = contended(group)
        if len(crowded):
            ax.scatter(pd.to_datetime(crowded["started_s"], unit="s"), crowded["median"],
                       s=60, facecolors="white", edgecolors=colour, linewidths=1.5, zorder=4)
        flagged = group[group["change"]]
        if len(flagged):
            ax.scatter(pd.to_datetime(flagged["started_s"], unit="s"), flagged["median"],
                       s=220, facecolors="none", edgecolors=CHANGE_COLOUR, linewidths=2.5,
                       zorder=5)
    if frame["started_s"].nunique() == 1:
        at = float(frame["started_s"].iloc[0])
        ax.set_xlim(pd.to_datetime(at - ONE_POINT_SPAN_S, unit="s"),
                    pd.to_datetime(at + ONE_POINT_SPAN_S, unit="s"))
        ax.xaxis.set_major_locator(mdates.HourLocator(byhour=(0, 12)))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d %H:%M"))
        ax.set_ylim(0, 1.25 * float(frame["high"].max()) or 1.0)
    ax.set_title(plot_text(case_id), fontsize=10)
    ax.set_ylabel(unit)
    if frame["line"].nunique() > 1 or frame["line"].iloc[0]:
        ax.legend(fontsize=7)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def trend_png(frame: pd.DataFrame, case_id: str, unit: str,
              colours: dict[str, str]) -> bytes:
    """The trend plot of one case (`trend_figure`) as PNG bytes."""
    import matplotlib.pyplot as plt

    fig = trend_figure(frame, case_id, unit, colours)
    try:
        return png_bytes(fig)
    finally:
        plt.close(fig)
