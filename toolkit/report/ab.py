"""The A/B comparison's presentation (`python -m toolkit.compare`): a table (markdown, CSV,
HTML), a forest plot of the ratios with their 95% intervals, and JUnit test cases. The
statistics are `toolkit.analysis.ab`.

Forest plot: one row per compared case and metric, the ratio B/A as a dot, its bootstrap 95%
interval as a bar, a vertical line at 1; colours by verdict (VERDICT_COLOURS), so a test can
find them in the pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from toolkit.analysis.ab import (
    ALPHA,
    FASTER,
    LARGER,
    NO_CHANGE,
    OTHER_CONFIG,
    SLOWER,
    SMALLER,
    TOO_FEW,
)
from toolkit.report.junit import JUnitCase
from toolkit.report.plots import png_bytes
from toolkit.report.tables import OVERSUBSCRIBED_MARK, Table, TableSet, fmt
from toolkit.report.text import PLOT_LABEL_CHARS, plot_text

MIXED_MARK = "≠"
"""After a case whose A or B pools runs of different places (executor, site, machine)."""

VERDICT_COLOURS = {FASTER: "#2ca02c", SMALLER: "#2ca02c", SLOWER: "#d62728",
                   LARGER: "#d62728", NO_CHANGE: "#7f7f7f", TOO_FEW: "#ff7f0e",
                   OTHER_CONFIG: "#9467bd"}
UNITY_COLOUR = "#000000"
HEADER = ["case", "metric", "n A", "n B", "median A", "median B", "ratio B/A", "95% CI",
          "p (Mann-Whitney)", "verdict"]


def median_digits(a: float, b: float) -> int:
    """Decimals for a row's two medians, the same for both: four significant digits of the
    smaller (at most four decimals), as the ratio beside them has."""
    smaller = min(abs(a), abs(b))
    if not math.isfinite(smaller) or smaller == 0:
        return 4
    return max(0, min(4, 3 - math.floor(math.log10(smaller))))


def verdict_text(row: pd.Series) -> str:
    if row["verdict"] == OTHER_CONFIG:
        return (f"{OTHER_CONFIG}, not compared ({row.get('config_differs')}); "
                "--across-configs compares them")
    contention = contention_text(row)
    if contention:
        contention = f" ({OVERSUBSCRIBED_MARK} {contention})"
    if row.get("config_differs"):
        return (f"{row['verdict']} (across configurations: {row['config_differs']})"
                + contention)
    same = f" ({row['config_note']})" if row.get("config_note") else ""
    if row["verdict"] == TOO_FEW:
        return (f"{TOO_FEW} (about {row['repeats_needed']} per side needed at this spread)"
                + same + contention)
    return str(row["verdict"]) + same + contention


def contention_text(r: Any) -> str:
    """Which side's runs measured contention and how many, `A 2 of 7 runs crowded by other
    processes; B 1 of 7 oversubscribed`; '' where neither side's did."""
    parts = []
    for side, n in (("A", "n_a"), ("B", "n_b")):
        what = [f"{int(r.get(f'{column}_{side.lower()}') or 0)} {words}"
                for column, words in (("oversubscribed", "oversubscribed"),
                                      ("crowded", "crowded by other processes"))
                if r.get(f"{column}_{side.lower()}")]
        if what:
            parts.append(f"{side}: of {r.get(n)} runs, " + ", ".join(what))
    return "; ".join(parts)


def _mixed(r: Any) -> bool:
    return "; " in str(r.get("places_a") or "") or "; " in str(r.get("places_b") or "")


def _crowded(r: Any) -> bool:
    return bool(r.get("oversubscribed_a") or r.get("oversubscribed_b")
                or r.get("crowded_a") or r.get("crowded_b"))


def case_cell(r: Any) -> str:
    """The case id, with MIXED_MARK when a side pools places and OVERSUBSCRIBED_MARK when a
    side has oversubscribed or crowded runs."""
    return " ".join([str(r["case_id"]), *([MIXED_MARK] if _mixed(r) else []),
                     *([OVERSUBSCRIBED_MARK] if _crowded(r) else [])])


def places_note(frame: pd.DataFrame) -> str:
    """Where each side's runs ran, and why a case carries a mark; '' without places."""
    if frame.empty or "places_a" not in frame:
        return ""
    sides = [" | ".join(sorted({p for ps in frame[f"places_{k}"] for p in str(ps).split("; ")
                                if p})) for k in ("a", "b")]
    parts = [f"runs from: A {sides[0]}; B {sides[1]}"]
    records = frame.drop_duplicates("case_id").to_dict("records")
    mixed = [str(r["case_id"]) for r in records if _mixed(r)]
    if mixed:
        parts.append(f"{MIXED_MARK} a side pools runs of different places (executor, site, "
                     "machine, device), so its spread is not one system's; narrow it with "
                     "--where executor=, site=, hosts= or gpu=: " + ", ".join(mixed))
    over = [f"{r['case_id']} (A {r['oversubscribed_a']}, B {r['oversubscribed_b']})"
            for r in records if r.get("oversubscribed_a") or r.get("oversubscribed_b")]
    if over:
        parts.append(f"{OVERSUBSCRIBED_MARK} runs whose ranks shared their CPUs "
                     "(oversubscribed: the figures measured contention): " + ", ".join(over))
    crowded = [f"{r['case_id']} (A {r.get('crowded_a') or 0}, B {r.get('crowded_b') or 0})"
               for r in records if r.get("crowded_a") or r.get("crowded_b")]
    if crowded:
        parts.append(f"{OVERSUBSCRIBED_MARK} runs measured while other processes, none of "
                     "their ranks, took a saturated host's CPUs (crowded: the figures are low "
                     "by what they took; runs.csv `host_crowded`): " + ", ".join(crowded))
    return "; ".join(parts)


def rows(frame: pd.DataFrame) -> list[list[str]]:
    out = []
    for _, r in frame.iterrows():
        out.append([case_cell(r), str(r["metric"]), str(r["n_a"]), str(r["n_b"]),
                    fmt(r["median_a"], median_digits(r["median_a"], r["median_b"])),
                    fmt(r["median_b"], median_digits(r["median_a"], r["median_b"])),
                    f"{r['ratio']:.4f}",
                    f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]", f"{r['p_value']:.3g}",
                    verdict_text(r)])
    return out


def counts(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "no case in both A and B"
    tally = frame["verdict"].value_counts()
    return ", ".join(f"{tally[v]} {v}" for v in VERDICT_COLOURS if v in tally)


RULE = (f"verdict: `{OTHER_CONFIG}` when the case's config hashes differ between A and B "
        "(not a like-for-like pair; settings absent from one side's record and at their "
        "defaults in the other are no difference); "
        f"`too few repeats` when Mann-Whitney U cannot reach p < {ALPHA} at these "
        f"repeats; `faster`/`slower` (memory: `smaller`/`larger`) when p < {ALPHA} and the "
        "bootstrap 95% CI of the ratio excludes 1; else `no significant change`")


def table_set(frame: pd.DataFrame, label_a: str, label_b: str) -> TableSet:
    where = places_note(frame)
    note = f"A: {label_a}; B: {label_b}; {counts(frame)}. {RULE}" + (f". {where}" if where
                                                                    else "")
    table = Table("", HEADER, rows(frame), note)
    return TableSet("compare", "A/B comparison", [table] if len(frame) else [],
                    [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")], note)


FOREST_ROWS = 40
"""Rows of the forest plot at most: those with a verdict other than no significant change
first, then the rest, each furthest from 1 first (the table and CSV have every row)."""


def forest_rows(frame: pd.DataFrame, limit: int = FOREST_ROWS) -> pd.DataFrame:
    if len(frame) <= limit:
        return frame
    distance = (frame["ratio"].astype(float).map(math.log).abs())
    changed = frame["verdict"] != NO_CHANGE
    order = frame.assign(_c=~changed, _d=-distance).sort_values(["_c", "_d"], kind="stable")
    return frame.loc[order.index[:limit]]


def forest_png(frame: pd.DataFrame, title: str) -> bytes:
    """The forest plot as PNG bytes (matplotlib, Agg), of at most FOREST_ROWS rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = forest_rows(frame)
    if len(shown) < len(frame):
        title = f"{title} ({len(shown)} of {len(frame)}: changed first, furthest from 1)"
    frame = shown
    labels = [plot_text(f"{r.case_id} [{r.metric}]", PLOT_LABEL_CHARS)
              for r in frame.itertuples()]
    height = max(2.0, 0.35 * len(labels) + 1.2)
    fig, ax = plt.subplots(figsize=(8, height), dpi=100)
    try:
        for i, r in enumerate(frame.itertuples()):
            colour = VERDICT_COLOURS.get(str(r.verdict), "#7f7f7f")
            y = len(labels) - 1 - i
            ax.plot([r.ci_low, r.ci_high], [y, y], color=colour, linewidth=3)
            ax.plot([r.ratio], [y], "o", color=colour, markersize=8)
        ax.axvline(1.0, color=UNITY_COLOUR, linewidth=1)
        ax.set_yticks(range(len(labels)), list(reversed(labels)), fontsize=8)
        ax.set_xlabel("ratio B / A (median), bootstrap 95% interval")
        ax.set_title(plot_text(title), fontsize=10)
        if len(frame):
            low = min(frame["ci_low"].min(), 1.0)
            high = max(frame["ci_high"].max(), 1.0)
            pad = max((high - low) * 0.1, 0.005)
            ax.set_xlim(low - pad, high + pad)
        fig.tight_layout()
        return png_bytes(fig)
    finally:
        plt.close(fig)


def junit_cases(frame: pd.DataFrame, fail_on: Sequence[str]) -> list[JUnitCase]:
    """One test case per compared case; it fails when any of its metrics' verdicts is in
    `fail_on`."""
    out = []
    for case_id, group in frame.groupby("case_id", sort=True):
        bad = [f"{r.metric}: {r.verdict} (ratio {r.ratio:.4f}, 95% CI [{r.ci_low:.4f}, "
               f"{r.ci_high:.4f}], p {r.p_value:.3g})"
               for r in group.itertuples() if r.verdict in fail_on]
        output = "\n".join(
            f"{r.metric}: A {r.median_a:.6g} (n={r.n_a}), B {r.median_b:.6g} (n={r.n_b}), "
            f"ratio {r.ratio:.4f} [{r.ci_low:.4f}, {r.ci_high:.4f}], p {r.p_value:.3g}, "
            f"{r.verdict}" for r in group.itertuples())
        first = group.iloc[0]
        out.append(JUnitCase(str(case_id), "trainbench.compare",
                             failure="; ".join(bad) if bad else None, output=output,
                             properties={"verdict": str(first["verdict"]),
                                         "ratio": f"{first['ratio']:.6f}"}))
    return out
