"""A/B comparison of two sets of repeats: is B faster than A, slower, or is the difference noise?

Per case and metric: the medians of A and B, their ratio B/A, a bootstrap 95% confidence
interval of that ratio, a two-sided Mann-Whitney U p-value (scipy), and a verdict. The rule:

- `too few repeats` when Mann-Whitney U cannot reach p < ALPHA at these numbers of repeats
  whatever the figures (its smallest two-sided p is 2 / C(nA + nB, nA): fewer than 4 repeats a
  side with equal sides); the row says how many repeats per side would be needed;
- `faster` / `slower` (for memory: `smaller` / `larger`) when p < ALPHA **and** the 95%
  interval of the ratio excludes 1, in the metric's direction of better (throughput up; step
  time and memory down);
- `no significant change` otherwise;
- `different configurations`, before all of these, when the case's runs recorded other config
  hashes in A than in B (the same case id, another configuration: seq_len, classes, threads):
  not a like-for-like pair, whatever its figures, unless the caller asks for them
  (`across_configs`); `config_differs` says which settings differ. Hashes that differ only
  because one record lacks settings the other holds at their defaults (a case recorded before
  those settings existed) are the same configuration: compared, and `config_note` says so.

Repeats needed: per side, to detect the observed change (at least MIN_EFFECT) at the observed
spread with POWER: n = ceil(pi/3 x 2 x (z(1 - ALPHA/2) + z(POWER))^2 x (s / d)^2), where s is
the pooled standard deviation of the log figures, d the absolute log ratio of the medians, and
pi/3 Mann-Whitney's efficiency relative to the t test under normal noise; at least the smallest
number that can reach p < ALPHA.

The bootstrap resamples each side with replacement (BOOTSTRAP_RESAMPLES times, a fixed seed, so
the same figures always give the same interval) and takes the 2.5 and 97.5 percentiles of the
ratio of medians.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from toolkit.analysis.places import places
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.spec.command import word_differences

ALPHA = 0.05
POWER = 0.8
MIN_EFFECT = 0.01
BOOTSTRAP_RESAMPLES = 2000
SEED = 0

FASTER, SLOWER, NO_CHANGE, TOO_FEW = "faster", "slower", "no significant change", "too few repeats"
SMALLER, LARGER = "smaller", "larger"
OTHER_CONFIG = "different configurations"
"""A case whose runs in A and B ran under different config hashes: not compared as like."""
VERDICTS = (FASTER, SLOWER, SMALLER, LARGER, NO_CHANGE, TOO_FEW, OTHER_CONFIG)


@dataclass(frozen=True)
class Metric:
    column: str
    label: str
    higher_is_better: bool
    better: str
    worse: str


METRICS = {
    "throughput": Metric("throughput_sps", "throughput (samples/s)", True, FASTER, SLOWER),
    "step_time": Metric("step_time_median_s", "step time (s)", False, FASTER, SLOWER),
    "memory": Metric("peak_memory_mib", "peak memory (MiB)", False, SMALLER, LARGER),
}


@dataclass(frozen=True)
class ABResult:
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    ratio: float
    """median(B) / median(A)."""
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    repeats_needed: int
    """Per side, to detect the observed change at the observed spread (see module doc)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def min_repeats_reachable(n_a: int, n_b: int, alpha: float = ALPHA) -> bool:
    """Whether Mann-Whitney U can give a two-sided p below alpha with these sample sizes."""
    return n_a > 0 and n_b > 0 and 2 / math.comb(n_a + n_b, n_a) < alpha


@functools.cache
def _smallest_reachable(alpha: float = ALPHA) -> int:
    n = 1
    while not min_repeats_reachable(n, n, alpha):
        n += 1
    return n


@functools.cache
def _z(alpha: float, power: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def repeats_needed(a: np.ndarray, b: np.ndarray, alpha: float = ALPHA,
                   power: float = POWER) -> int:
    floor = _smallest_reachable(alpha)
    logs = [np.log(x) for x in (a, b) if len(x) > 1]
    dof = sum(len(x) - 1 for x in logs)
    if not dof:
        return floor
    s = math.sqrt(sum(float(np.sum((x - x.mean()) ** 2)) for x in logs) / dof)
    d = max(abs(math.log(float(np.median(b)) / float(np.median(a)))), math.log1p(MIN_EFFECT))
    z = _z(alpha, power)
    return max(floor, math.ceil(math.pi / 3 * 2 * (z * s / d) ** 2))


def bootstrap_medians(x: np.ndarray, rng: np.random.Generator,
                      resamples: int = BOOTSTRAP_RESAMPLES) -> np.ndarray:
    """The medians of `resamples` resamples of `x` with replacement. A resample's median is
    the sorted sample at the median of its resampled positions (the order is monotone), and
    sorting small integer positions is several times faster than selecting among floats."""
    n = len(x)
    ordered = np.sort(x)
    positions = rng.integers(0, n, (resamples, n), dtype=np.int32 if n > 32767 else np.int16)
    positions.sort(axis=1)
    return (ordered[positions[:, (n - 1) // 2]] + ordered[positions[:, n // 2]]) / 2


def bootstrap_ratio_ci(a: np.ndarray, b: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = SEED) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ratios = bootstrap_medians(b, rng, resamples) / bootstrap_medians(a, rng, resamples)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def compare_samples(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                    metric: Metric = METRICS["throughput"],
                    alpha: float = ALPHA) -> ABResult:
    """The verdict on repeats `a` (before) against `b` (after); figures must be positive."""
    from scipy.stats import mannwhitneyu

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(xa) == 0 or len(xb) == 0 or (xa <= 0).any() or (xb <= 0).any():
        raise ValueError("each side needs at least one positive figure")
    med_a, med_b = float(np.median(xa)), float(np.median(xb))
    ratio = med_b / med_a
    low, high = bootstrap_ratio_ci(xa, xb)
    p = float(mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    needed = repeats_needed(xa, xb, alpha)
    if not min_repeats_reachable(len(xa), len(xb), alpha):
        verdict = TOO_FEW
    elif p < alpha and (low > 1 or high < 1):
        up = ratio > 1
        verdict = metric.better if up == metric.higher_is_better else metric.worse
    else:
        verdict = NO_CHANGE
    return ABResult(len(xa), len(xb), med_a, med_b, ratio, low, high, p, verdict, needed)


CASE_COLUMNS = ("case_id", "framework", "model", "precision", "num_nodes", "gpus_per_node",
                "batch_size_per_device", "variant")


SIDE_COLUMNS = ("places_a", "places_b", "oversubscribed_a", "oversubscribed_b", "crowded_a",
                "crowded_b", "config_differs", "config_note")
"""Per compared case: where each side's runs ran (`toolkit.analysis.places`, `; `-joined when
a side pools runs of several places), how many of them were oversubscribed, how many were
measured while other processes took their host's CPUs (`host_crowded`), and how the case's
configuration differs between A and B ('' when its config hashes are the same, or differ only
by settings one record lacks and the other holds at their defaults: then `config_note` names
them)."""


@dataclass(frozen=True)
class ConfigDifference:
    """How a case's configuration differs between A and B, as `compare_runs` is told it."""

    text: str
    """The differing settings (`key: A vs B; ...`), or the note naming the defaulted ones."""
    same: bool = False
    """Only settings absent from one record and at their default in the other differ."""


def config_hashes(runs: pd.DataFrame) -> dict[str, frozenset[str]]:
    """case_id -> the config hashes its runs recorded (cases without one left out)."""
    if "config_hash" not in runs:
        return {}
    hashes = runs["config_hash"].astype("string").fillna("")
    out: dict[str, set[str]] = {}
    for case, value in zip(runs["case_id"], hashes, strict=True):
        if value:
            out.setdefault(str(case), set()).add(str(value))
    return {case: frozenset(values) for case, values in out.items()}


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any],
                       defaults: Mapping[str, Any] | None = None, prefix: str = "") -> list[str]:
    """`key: A vs B` for every setting (dotted into nested blocks) that differs between two
    case configurations, in key order; of two lists (argv), the words that differ
    (`command.argv[5]: '256' vs '128'`). With `defaults` (a case's settings at their defaults,
    same shape): a setting absent from one side and at its default in the other is no
    difference (`defaulted_settings` names those)."""
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        default = defaults.get(key) if isinstance(defaults, Mapping) else None
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += config_differences(va, vb, default if isinstance(default, Mapping) else None,
                                      f"{prefix}{key}.")
        elif isinstance(va, list) and isinstance(vb, list) and va != vb:
            out += [f"{prefix}{key}{at}: {old} vs {new}"
                    for at, old, new in word_differences(va, vb)]
        elif va != vb and not _absent_at_default(a, b, key, defaults):
            out.append(f"{prefix}{key}: {va!r} vs {vb!r}")
    return out


def defaulted_settings(a: Mapping[str, Any], b: Mapping[str, Any], defaults: Mapping[str, Any],
                       prefix: str = "") -> list[str]:
    """The settings (dotted) absent from one of two case configurations and at their default
    (`defaults`) in the other, in key order: what a record made before they existed lacks."""
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb, default = a.get(key), b.get(key), defaults.get(key)
        if isinstance(va, Mapping) and isinstance(vb, Mapping) and isinstance(default, Mapping):
            out += defaulted_settings(va, vb, default, f"{prefix}{key}.")
        elif va != vb and _absent_at_default(a, b, key, defaults):
            out.append(f"{prefix}{key}")
    return out


def _absent_at_default(a: Mapping[str, Any], b: Mapping[str, Any], key: str,
                       defaults: Mapping[str, Any] | None) -> bool:
    if not isinstance(defaults, Mapping) or key not in defaults or (key in a) == (key in b):
        return False
    return (b if key in b else a)[key] == defaults[key]


def _sides(runs: pd.DataFrame) -> dict[str, tuple[str, int, int]]:
    """case_id -> (its runs' places, `; `-joined; how many of its runs were oversubscribed;
    how many were crowded)."""
    where = places(runs)
    over, crowded = (runs[column].astype("string").fillna("").ne("") if column in runs
                     else pd.Series(False, index=runs.index)
                     for column in (OVERSUBSCRIBED, HOST_CROWDED))
    out = {}
    for case, index in runs.groupby("case_id", sort=False).groups.items():
        out[str(case)] = ("; ".join(sorted(set(where[index]))), int(over[index].sum()),
                          int(crowded[index].sum()))
    return out


SOURCE_CASE = "source_case_id"
"""Column of a run picked by `pair_cases`: the case id it was recorded under."""


def case_ids(runs: pd.DataFrame, limit: int = 20) -> str:
    """The case ids of a side's ok runs, sorted, comma-separated (at most `limit`, then how
    many more); `none` for a side without one."""
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs
    ids = sorted({str(c) for c in ok["case_id"]}) if "case_id" in ok else []
    more = len(ids) - limit
    return (", ".join(ids[:limit]) + (f" and {more} more" if more > 0 else "")) or "none"


def pair_cases(a: pd.DataFrame, case_a: str, b: pd.DataFrame,
               case_b: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs of case `case_a` of A and of `case_b` of B, as one case to compare: both
    under the id `case_a vs case_b` (or the one id, where they are the same), each with the
    id it was recorded under in SOURCE_CASE. ValueError naming a side's case ids where it has
    no run of its case."""
    picked = []
    for side, runs, case_id in (("A", a, case_a), ("B", b, case_b)):
        mine = runs[runs["case_id"] == case_id] if "case_id" in runs else runs.iloc[0:0]
        if mine.empty:
            raise ValueError(f"{side} has no run of case {case_id!r}; its cases: "
                             f"{case_ids(runs)}")
        picked.append(mine.assign(**{SOURCE_CASE: case_id}))
    joint = case_a if case_a == case_b else f"{case_a} vs {case_b}"
    return picked[0].assign(case_id=joint), picked[1].assign(case_id=joint)


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, metrics: Sequence[str] = ("throughput",),
                 alpha: float = ALPHA,
                 differences: Callable[[str, frozenset[str], frozenset[str]],
                                       ConfigDifference] | None = None,
                 across_configs: bool = False) -> pd.DataFrame:
    """One row per (case in both A and B, metric with figures on both sides): CASE_COLUMNS,
    `metric`, the ABResult fields and SIDE_COLUMNS. `a`, `b`: runs, one row each (only status
    ok ones are used), as `toolkit.results.load` or the store gives them.

    A case whose runs recorded other config hashes in A than in B is no like-for-like pair:
    `config_differs` says how (`differences(case_id, hashes_a, hashes_b)`, else the hashes)
    and its verdict is OTHER_CONFIG, unless `across_configs` asks for the statistics' own. One
    that `differences` finds the same configuration is compared, its `config_note` saying why."""
    ok_a = a[a["status"] == "ok"] if "status" in a else a
    ok_b = b[b["status"] == "ok"] if "status" in b else b
    sides_a, sides_b = _sides(ok_a), _sides(ok_b)
    hashes_a, hashes_b = config_hashes(ok_a), config_hashes(ok_b)
    differs: dict[str, str] = {}
    notes: dict[str, str] = {}
    for case_id in hashes_a.keys() & hashes_b.keys():
        ha, hb = hashes_a[case_id], hashes_b[case_id]
        if ha == hb:
            continue
        found = (differences(case_id, ha, hb) if differences is not None else
                 ConfigDifference(f"config hash {', '.join(sorted(ha))} vs "
                                  f"{', '.join(sorted(hb))}"))
        (notes if found.same else differs)[case_id] = found.text
    firsts = ok_a.drop_duplicates("case_id").set_index("case_id")
    records: list[dict[str, Any]] = []
    for name in metrics:
        metric = METRICS[name]
        if metric.column not in ok_a or metric.column not in ok_b:
            continue
        values_a = _positive_by_case(ok_a, metric.column)
        values_b = _positive_by_case(ok_b, metric.column)
        for case_id in sorted(values_a.keys() & values_b.keys()):
            result = compare_samples(values_a[case_id], values_b[case_id], metric, alpha)
            if case_id in differs and not across_configs:
                result = dataclasses.replace(result, verdict=OTHER_CONFIG)
            first = firsts.loc[case_id]
            records.append({"case_id": case_id,
                            **{c: first.get(c) for c in CASE_COLUMNS[1:]},
                            "metric": name, **result.to_dict(),
                            "places_a": sides_a[case_id][0], "places_b": sides_b[case_id][0],
                            "oversubscribed_a": sides_a[case_id][1],
                            "oversubscribed_b": sides_b[case_id][1],
                            "crowded_a": sides_a[case_id][2],
                            "crowded_b": sides_b[case_id][2],
                            "config_differs": differs.get(case_id, ""),
                            "config_note": notes.get(case_id, "")})
    columns = [*CASE_COLUMNS, "metric", *ABResult.__dataclass_fields__, *SIDE_COLUMNS]
    frame = pd.DataFrame.from_records(records, columns=columns)
    order = {m: i for i, m in enumerate(metrics)}
    return frame.sort_values(["case_id", "metric"], key=lambda s: s.map(order)
                             if s.name == "metric" else s, kind="stable", ignore_index=True)


def _positive_by_case(runs: pd.DataFrame, column: str) -> dict[str, np.ndarray]:
    """case_id -> the column's positive finite figures (cases without one left out)."""
    values = pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    keep = np.isfinite(values) & (values > 0)
    cases = runs["case_id"].to_numpy()[keep]
    kept = values[keep]
    return {str(case): kept[index] for case, index in
            pd.Series(cases).groupby(cases, sort=False).indices.items()}
