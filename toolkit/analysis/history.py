"""A case's figures over time, and where they changed.

Runs become points: one point per case, line and batch, where a batch is the runs of one
results directory (one `collect`), a line is one place (executor, site, machine and device,
`toolkit.analysis.places`: runs of different places are never one history) and one value of
the `by` provenance columns (e.g. one driver version), and the point is the batch's median with
its spread (min and max over the repeats) at the batch's first start time. `oversubscribed`
counts the batch's runs whose ranks shared their CPUs, `crowded` those measured while other
processes took their host's CPUs (`host_crowded`): such a point measured contention, so it is
neither flagged as a change point nor part of the history the next points are held against.

Change points, per line in time order: a point is flagged when its median differs from the
median of the WINDOW points before it (at least MIN_HISTORY of them) by more than
K x max(1.4826 x MAD of those points, FLOOR x their median) -- a rolling median/MAD rule: K
robust standard deviations of the recent past, never less than FLOOR (1%) of the figure. The
points before a change point are not the history of those after it: a new level is flagged
once, at its first point, and needs MIN_HISTORY points of its own before the next flag.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import pandas as pd

from toolkit.analysis.places import places
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED

WINDOW = 5
MIN_HISTORY = 3
K = 3.0
FLOOR = 0.01
MAD_TO_SD = 1.4826

POINT_COLUMNS = ("case_id", "line", "results_dir", "started_s", "repeats", "median", "low",
                 "high", "baseline", "change", OVERSUBSCRIBED, "crowded")


def points(runs: pd.DataFrame, value: str = "throughput_sps",
           by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (case, line, batch): POINT_COLUMNS, in time order within each line."""
    runs = runs[runs[value].notna()]
    line = places(runs)
    if by:
        line = line + " · " + runs[list(by)].astype("string").fillna("?").agg(" ".join, axis=1)
    over, crowded = (runs[column].astype("string").fillna("").ne("") if column in runs
                     else pd.Series(False, index=runs.index)
                     for column in (OVERSUBSCRIBED, HOST_CROWDED))
    grouped = runs.assign(line=line, _over=over.astype(int),
                          _crowded=crowded.astype(int)).groupby(
        ["case_id", "line", "results_dir"], sort=False)
    out = grouped.agg(started_s=("started_s", "min"), repeats=(value, "size"),
                      median=(value, "median"), low=(value, "min"),
                      high=(value, "max"), oversubscribed=("_over", "sum"),
                      crowded=("_crowded", "sum")).reset_index()
    out = out.sort_values(["case_id", "line", "started_s"], kind="stable", ignore_index=True)
    baseline = np.full(len(out), np.nan)
    change = np.zeros(len(out), dtype=bool)
    medians = out["median"].to_numpy(float).tolist()
    clean = (out["oversubscribed"].to_numpy() == 0) & (out["crowded"].to_numpy() == 0)
    for all_points in out.groupby(["case_id", "line"], sort=False).indices.values():
        index = all_points[clean[all_points]]  # a point that measured contention is no figure
        start = 0  # the first point since the last change: a new level is its own history
        for j, i in enumerate(index):
            past = medians_of(medians, index[max(start, j - WINDOW):j])
            if len(past) < MIN_HISTORY:
                continue
            centre = _median(past)
            spread = max(MAD_TO_SD * _median([abs(v - centre) for v in past]), FLOOR * centre)
            baseline[i] = centre
            change[i] = abs(medians[i] - centre) > K * spread
            if change[i]:
                start = j
    out["baseline"] = baseline
    out["change"] = change
    return out[list(POINT_COLUMNS)]


def medians_of(medians: list[float], index: np.ndarray) -> list[float]:
    return [medians[k] for k in index]


def _median(values: list[float]) -> float:
    """The median of a handful of figures (statistics.median: no numpy call per window)."""
    return statistics.median(values)
