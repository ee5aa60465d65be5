"""Preflight verdicts: each figure against what the hardware should do, `ok | slow | fault` per
GPU and per node, each with its reason and the rule that gave it.

Performance figures (GEMM TFLOP/s, memory and host<->device GB/s, collective and send/receive
busbw; bigger is better) are judged against, in this order:

1. **baseline**: earlier preflights of the same device model (same metric; for collectives the
   same scope, size and rank count), when there are at least `MIN_BASELINE` of them: slow below
   the median x (1 - tolerance), tolerance = max(10 %, 3 x their relative spread (1.4826 x
   MAD / median)).
2. **peers**: otherwise the alike figures of this preflight (GPUs of the same model, nodes,
   pairs of nodes; this one included), when there are at least two: slow below
   `PEER_FRACTION` (85 %) of their median.
3. **datasheet**: always, where the device's datasheet figure is known: slow below
   `DATASHEET_FLOOR` of it (a GPU that reaches less than that is not a healthy one of its kind,
   whatever its peers do); the share of datasheet is reported either way.
4. **site**: also, where the site profile says what a healthy GPU of the model measures there
   (`expected`): slow below the expected figure x (1 - `SITE_TOLERANCE`).

A figure that could not be measured on a GPU (GEMM, memory) is a `fault`; a collective the
backend lacks (gloo has no reduce-scatter) is `n/a`. Health readings from NVML: volatile
uncorrected ECC errors, a page retirement or row remapping pending a reset, or a failed row
remap are a `fault`; a PCIe link under load below its maximum generation or width, a hardware
slowdown (thermal, power brake) in more than `HW_SLOWDOWN_SHARE` of the samples under load, or a
power limit set below the board's default are `slow`. A rank that did not finish is a `fault`.

A node is as bad as its worst figure. For pairs of nodes (all-reduce over two nodes' ranks),
a node whose every pair is slow, and alike slow (within `NODE_PAIRS_ALIKE` of each other), is
slow itself (its network); a pair slow alone, or far slower than the node's other pairs,
names the link.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from toolkit.analysis.flops import PCIE_LANE_GBPS, datasheet

OK, SLOW, FAULT, NA = "ok", "slow", "fault", "n/a"
RANKING = {NA: 0, OK: 1, SLOW: 2, FAULT: 3}

MIN_BASELINE = 3
BASELINE_TOLERANCE = 0.10
PEER_FRACTION = 0.85
NODE_PAIRS_ALIKE = 2.0
"""A node is slow for its network when every pair it is in is slow and the fastest of them is
within this factor of the slowest."""
DATASHEET_FLOOR = {"gemm": 0.5, "memory": 0.6}
HW_SLOWDOWN_SHARE = 0.05
SITE_TOLERANCE = 0.10

Expected = Callable[[str | None], Mapping[str, float]]
"""Device name -> metric -> what the site expects of a GPU of that model."""

PERFORMANCE_PROBES = ("gemm", "memory", "collective", "p2p")
MAX_PERFORMANCE = 1e6
"""A performance figure (TFLOP/s, GB/s) beyond this (an exaflop from one GPU, 1 PB/s over a
link) is no measurement: a `fault`, never `ok`, and never part of a median it would skew or
overflow (a busbw of 1e308)."""


@dataclass(frozen=True)
class Reference:
    value: float
    kind: str
    """`baseline` or `peers`."""
    tolerance: float
    """Slow below value x (1 - tolerance)."""
    count: int
    spread: float | None = None


def figures(frame: pd.DataFrame) -> pd.DataFrame:
    """Performance figures as judged: one per GPU for GEMM and memory, and one per group for
    collectives (the slowest rank's, at the largest size measured)."""
    perf = frame.loc[frame["probe"].isin(PERFORMANCE_PROBES)]
    per_gpu = perf[perf["scope"] == "gpu"]
    coll = every = perf[perf["scope"] != "gpu"]
    if not coll.empty:
        coll = coll.assign(bytes=coll["bytes"].fillna(0))
        largest = coll.groupby(["metric", "scope", "group"])["bytes"].transform("max")
        coll = coll[coll["bytes"] == largest]
        keys = ["tag", "probe", "metric", "scope", "group", "bytes"]
        # The slowest rank's figure: the collective ended for every rank when it ended there.
        idx = coll.assign(_v=coll["value"].fillna(-1.0)).groupby(keys)["_v"].idxmin()
        coll = coll.loc[idx.values]
        # every node that took part, whatever size its ranks measured last
        nodes = every.groupby(["metric", "scope", "group"])["node"].agg(
            lambda s: sorted(set(s.dropna())))
        coll = coll.assign(nodes=[nodes.get((m, sc, g), []) for m, sc, g in
                                  zip(coll["metric"], coll["scope"], coll["group"], strict=True)])
    out = pd.concat([per_gpu.assign(nodes=[[n] for n in per_gpu["node"]]), coll],
                    ignore_index=True)
    return out


def _ranks_in(detail: Any) -> Any:
    return detail.get("ranks") if isinstance(detail, dict) else None


def _key(row: Any) -> tuple[Any, ...]:
    """What makes two figures comparable."""
    if row["scope"] == "gpu":
        return (row["device"], row["metric"])
    return (row["device"], row["metric"], row["scope"], row["bytes"], _ranks_in(row["detail"]))


def _values_by_key(figs: pd.DataFrame) -> dict[tuple[Any, ...], list[float]]:
    """The measured values of `figures`, grouped by what makes them comparable (`_key`)."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for _, r in figs.iterrows():
        if _measurement(r["value"]):
            out.setdefault(_key(r), []).append(float(r["value"]))
    return out


def _measurement(v: Any) -> bool:
    """A figure a device can have: finite, 0..MAX_PERFORMANCE."""
    return _num(v) and math.isfinite(float(v)) and 0 <= float(v) <= MAX_PERFORMANCE


def baseline_reference(values: list[float]) -> Reference | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < MIN_BASELINE:
        return None
    med = statistics.median(values)
    if med <= 0:
        return None
    mad = statistics.median(abs(v - med) for v in values)
    spread = 1.4826 * mad / med
    return Reference(med, "baseline", max(BASELINE_TOLERANCE, 3 * spread), len(values), spread)


def peer_reference(values: list[float]) -> Reference | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return None
    return Reference(statistics.median(values), "peers", 1 - PEER_FRACTION, len(values))


def judge_figures(current: pd.DataFrame, earlier: pd.DataFrame,
                  expected: Expected | None = None) -> pd.DataFrame:
    """`figures(current)` with `reference`, `reference_kind`, `ratio`, `datasheet`,
    `pct_datasheet`, `expected` (the site's), `verdict`, `reason` and `rule`."""
    # the probe's own `reason` (why a figure is missing) becomes `note`; `reason` is the verdict's
    figs = figures(current).rename(columns={"reason": "note"})
    if figs.empty:
        return figs.assign(reference=None, reference_kind=None, ratio=None, datasheet=None,
                           pct_datasheet=None, expected=None, verdict=None, reason=None,
                           rule=None)
    old_by_key = _values_by_key(figures(earlier)) if not earlier.empty else {}
    now_by_key = _values_by_key(figs)
    link = _link_limits(current)
    rows = []
    for _, r in figs.iterrows():
        site = (expected(r["device"]).get(r["metric"])
                if expected is not None and r["scope"] == "gpu" else None)
        rows.append(_judge(r, old_by_key.get(_key(r), []), now_by_key.get(_key(r), []),
                           link.get((r["node"], r["rank"])) if r["metric"] in ("h2d", "d2h")
                           else None, site))
    return pd.concat([figs.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


def _link_limits(frame: pd.DataFrame) -> dict[Any, float]:
    """(node, rank) -> its PCIe link's bandwidth per direction at the link's maximum, GB/s."""
    h = frame[frame["probe"] == "health"]
    out: dict[Any, float] = {}
    for rank, g in h.groupby(["node", "rank"]):
        vals = dict(zip(g["metric"], g["value"], strict=True))
        gen, width = vals.get("pcie_gen_max"), vals.get("pcie_width_max")
        if gen and width and not pd.isna(gen) and not pd.isna(width) and \
                int(gen) in PCIE_LANE_GBPS:
            out[rank] = PCIE_LANE_GBPS[int(gen)] * int(width)
    return out


def _judge(r: Any, old: list[float], now: list[float], link_gbps: float | None,
           site: float | None = None) -> dict[str, Any]:
    value = r["value"]
    sheet = datasheet(r["device"], r["metric"]) if r["scope"] == "gpu" else None
    if sheet is None and link_gbps is not None:
        sheet = link_gbps
    out: dict[str, Any] = {"reference": None, "reference_kind": None, "ratio": None,
                           "datasheet": sheet, "pct_datasheet": None, "expected": site,
                           "rule": None}
    what = f"{r['metric']}" + (f" over {r['group']}" if r["scope"] != "gpu" else "")
    if value is None or pd.isna(value):
        if r["probe"] in ("collective", "p2p"):
            return {**out, "verdict": NA, "reason": f"{what} not measured: {r['note']}"}
        return {**out, "verdict": FAULT, "reason": f"{what} failed: {r['note']}"}
    unit = r["unit"] or ""
    if not _measurement(value):
        return {**out, "verdict": FAULT, "rule": f"a figure in 0..{MAX_PERFORMANCE:g} {unit}",
                "reason": f"{what} {value!r} {unit} is not a measurement (no device or link "
                          f"has more than {MAX_PERFORMANCE:g} {unit})"}
    if sheet:
        out["pct_datasheet"] = value / sheet
    ref = baseline_reference(old)
    if ref is None:
        ref = peer_reference(now)
    reasons, verdict = [], OK
    if ref is not None:
        out.update(reference=ref.value, reference_kind=ref.kind, ratio=value / ref.value)
        floor = ref.value * (1 - ref.tolerance)
        if ref.kind == "baseline":
            out["rule"] = (f"slow below {1 - ref.tolerance:.0%} of the median of "
                           f"{ref.count} earlier preflights (spread {ref.spread:.1%})")
        else:
            out["rule"] = (f"slow below {PEER_FRACTION:.0%} of the median of the {ref.count} "
                           "alike figures of this preflight")
        if value < floor:
            verdict = SLOW
            whose = "baseline's" if ref.kind == "baseline" else "peers'"
            reasons.append(f"{what} {figure(value)} {unit} is "
                           f"{share_below(value / ref.value, floor / ref.value)} of the "
                           f"{whose} median {figure(ref.value)}")
    floor_share = DATASHEET_FLOOR.get(r["probe"])
    if sheet and floor_share and value < floor_share * sheet:
        verdict = SLOW
        reasons.append(f"{what} {figure(value)} {unit} is "
                       f"{share_below(value / sheet, floor_share)} of the datasheet "
                       f"{sheet:,.0f} (slow below {floor_share:.0%})")
        out["rule"] = (out["rule"] + "; " if out["rule"] else "") + \
            f"slow below {floor_share:.0%} of the datasheet"
    if site:
        out["rule"] = (out["rule"] + "; " if out["rule"] else "") + \
            f"slow below {1 - SITE_TOLERANCE:.0%} of the site's expected {figure(site)}"
        if value < site * (1 - SITE_TOLERANCE):
            verdict = SLOW
            reasons.append(f"{what} {figure(value)} {unit} is "
                           f"{share_below(value / site, 1 - SITE_TOLERANCE)} of the site's "
                           f"expected {figure(site)}")
    return {**out, "verdict": verdict, "reason": "; ".join(reasons) or None}


def judge_health(current: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU reading that is not ok (and a `finished` row per rank that stopped)."""
    rows = []
    health = current[current["probe"].isin(["health", "rank"])]
    for (_, rank), g in health.groupby(["node", "rank"], dropna=False):
        vals: dict[str, Any] = dict(zip(g["metric"], g["value"], strict=True))
        details: dict[str, Any] = dict(zip(g["metric"], g["detail"], strict=True))
        first = g.iloc[0]
        base = {"node": first["node"], "rank": rank, "device": first["device"],
                "gpu_bus_id": first["gpu_bus_id"]}

        def bad(verdict: str, metric: str, reason: str, base: dict[str, Any] = base,
                vals: dict[str, Any] = vals) -> None:
            rows.append({**base, "metric": metric, "value": vals.get(metric), "verdict": verdict,
                         "reason": reason})

        if "finished" in vals:
            reason = g[g["metric"] == "finished"]["reason"].iloc[0]
            bad(FAULT, "finished", f"rank {rank} did not finish its preflight: {reason}")
            continue
        if _pos(vals.get("ecc_uncorrected_volatile")):
            bad(FAULT, "ecc_uncorrected_volatile", f"{vals['ecc_uncorrected_volatile']:.0f} "
                "uncorrected ECC errors since the driver loaded")
        if _pos(vals.get("retired_pages_pending")):
            bad(FAULT, "retired_pages_pending", "a page retirement waits for a GPU reset")
        if _pos(vals.get("remapped_rows_pending")):
            bad(FAULT, "remapped_rows_pending", "a row remapping waits for a GPU reset")
        if _pos(vals.get("remapped_rows_failure")):
            bad(FAULT, "remapped_rows_failure", "a row remapping failed: the GPU needs service")
        for what in ("gen", "width"):
            now, top = _float(vals.get(f"pcie_{what}_under_load")), _float(vals.get(
                f"pcie_{what}_max"))
            if now is not None and top is not None and now < top:
                label = f"gen {now:.0f} of {top:.0f}" if what == "gen" else \
                    f"x{now:.0f} of x{top:.0f}"
                bad(SLOW, f"pcie_{what}_under_load", f"PCIe link runs at {label}")
        share = _float(vals.get("hw_slowdown_share"))
        if share is not None and share > HW_SLOWDOWN_SHARE:
            seen = (details.get("hw_slowdown_share") or {}).get("reasons_seen", {})
            named = ", ".join(seen) or "reasons unknown"
            bad(SLOW, "hw_slowdown_share", f"hardware slowdown active in the dump ({named})"
                if (details.get("hw_slowdown_share") or {}).get("snapshot") else
                f"hardware slowdown in {share:.0%} of the samples under load ({named})")
        limit = _float(vals.get("power_limit_w"))
        default = _float((details.get("power_limit_w") or {}).get("default_w"))
        if limit is not None and default is not None and limit < 0.95 * default:
            bad(SLOW, "power_limit_w", f"power limit {limit:.0f} W below the default "
                f"{default:.0f} W")
    return pd.DataFrame(rows, columns=["node", "rank", "device", "gpu_bus_id", "metric",
                                       "value", "verdict", "reason"])


def share_below(share: float, limit: float) -> str:
    """`share` as a percentage with as few decimals as show it below `limit` (a share judged
    slow below 85% reads `84.9%`, not `85%`): none, one or two; `just below 85%` where two
    decimals would still round it up to the limit."""
    for decimals in (0, 1, 2):
        if round(share * 100, decimals) < round(limit * 100, decimals):
            return f"{share:.{decimals}%}"
    return f"just below {limit:.0%}"


def figure(v: float) -> str:
    """Four significant digits, no exponent: 760.4, 4,264, 0.2771."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    digits = max(0, 3 - math.floor(math.log10(abs(v))))
    return f"{v:,.{digits}f}"


def _float(v: Any) -> float | None:
    return float(v) if _num(v) else None


def _num(v: Any) -> bool:
    return v is not None and not pd.isna(v)


def _pos(v: Any) -> bool:
    return _num(v) and float(v) > 0


@dataclass
class Verdict:
    figures: pd.DataFrame
    """Every performance figure with its reference, ratio and verdict."""
    health: pd.DataFrame
    """Health readings that are not ok."""
    nodes: pd.DataFrame
    """One row per node: `node`, `verdict`, `reasons`, `gpus`, and its GEMM and busbw."""
    links: list[str]
    """Pairs of nodes whose all-reduce alone was slow (a link, not a node)."""
    readings: pd.DataFrame = field(default_factory=pd.DataFrame)
    """One row per GPU: its NVML readings (`READINGS`), judged or not."""

    @property
    def exclude(self) -> list[str]:
        """Nodes not ok, for Slurm's `--exclude`."""
        return sorted(self.nodes.loc[self.nodes["verdict"].isin([SLOW, FAULT]), "node"])

    @property
    def ok(self) -> bool:
        return not self.exclude

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """Back from `to_dict` (verdict.json)."""
        def frame(key: str, columns: list[str]) -> pd.DataFrame:
            rows = data.get(key)
            return pd.DataFrame(rows if isinstance(rows, list) else [], columns=None if rows
                                else columns)
        links = data.get("links")
        return cls(frame("figures", ["probe", "metric", "scope", "value", "verdict"]),
                   frame("health", ["node", "rank", "metric", "value", "verdict", "reason"]),
                   frame("nodes", ["node", "verdict", "reasons", "ranks", "device"]),
                   [str(x) for x in links] if isinstance(links, list) else [],
                   frame("readings", ["node", "rank"]))

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            clean = df.drop(columns=[c for c in ("detail",) if c in df.columns])
            return [{k: (None if _is_nan(v) else v) for k, v in rec.items()}
                    for rec in clean.to_dict(orient="records")]
        return {"ok": self.ok, "exclude": self.exclude, "links": self.links,
                "nodes": records(self.nodes), "health": records(self.health),
                "figures": records(self.figures), "readings": records(self.readings)}


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def judge(current: pd.DataFrame, earlier: pd.DataFrame | None = None,
          expected: Expected | None = None) -> Verdict:
    """Verdicts of one preflight (`toolkit.results.preflight.read_preflight`), with `earlier`
    preflights as baselines and the site's `expected` figures."""
    earlier = earlier if earlier is not None else current.iloc[0:0]
    figs = judge_figures(current, earlier, expected)
    health = judge_health(current)
    nodes_all = sorted(n for n in current["node"].dropna().unique())
    findings: dict[str, list[tuple[str, str]]] = {n: [] for n in nodes_all}
    links = []
    pair_rows = figs[figs["scope"] == "pair"] if not figs.empty else figs
    for _, r in figs.iterrows():
        if r["scope"] == "pair" or r["verdict"] not in (SLOW, FAULT):
            continue
        if r["scope"] == "job" and r["verdict"] == SLOW:
            continue  # every node took part: it names no node (a fault vouches for none)
        for n in r["nodes"]:
            findings.setdefault(n, []).append((r["verdict"], r["reason"]))
    for n in nodes_all:
        mine = pair_rows[[n in ns for ns in pair_rows["nodes"]]] if not pair_rows.empty \
            else pair_rows
        slow = mine[mine["verdict"] == SLOW]
        values = [float(v) for v in mine["value"] if _num(v) and v > 0]
        # A node's own link caps every pair it is in at about the same figure; pairs that
        # differ more than NODE_PAIRS_ALIKE are slow for their links (one far below the other).
        alike = bool(values) and len(values) == len(mine) and \
            max(values) <= NODE_PAIRS_ALIKE * min(values)
        if len(mine) and len(slow) == len(mine) and alike:
            findings[n].append((SLOW, f"every all-reduce with {n} is slow: "
                                + "; ".join(slow["reason"].dropna())))
    # A slow pair that holds a node slow in every pair is that node's; only a pair slow with
    # neither of its nodes slow everywhere names the link between them.
    for _, r in pair_rows.iterrows():
        if r["verdict"] == SLOW and not any(any(v == SLOW and "every all-reduce" in why
                                                for v, why in findings.get(n, []))
                                            for n in r["nodes"]):
            links.append(f"{r['group']}: {r['reason']}")
    for _, r in health.iterrows():
        findings.setdefault(r["node"], []).append((r["verdict"], r["reason"]))
    rows = []
    for n in sorted(findings, key=str):
        verdict = max((v for v, _ in findings[n]), key=RANKING.__getitem__, default=OK)
        mine = current[current["node"] == n]
        rows.append({"node": n, "verdict": verdict,
                     "reasons": "; ".join(dict.fromkeys(why for _, why in findings[n])) or None,
                     "ranks": int(mine["rank"].nunique()),
                     "device": next(iter(mine["device"].dropna()), None)})
    nodes = pd.DataFrame(rows, columns=["node", "verdict", "reasons", "ranks", "device"])
    return Verdict(figs, health, nodes, links, readings(current))


READINGS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "retired_pages_pending",
            "remapped_rows_pending", "remapped_rows_failure", "pcie_gen_under_load",
            "pcie_gen_max", "pcie_width_under_load", "pcie_width_max", "sm_clock_under_load_mhz",
            "sm_clock_max_mhz", "power_limit_w", "hw_slowdown_share")
"""The NVML readings tabled per GPU, in this order."""


def readings(current: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU (node, rank) with its READINGS (None where not read)."""
    h = current[current["probe"] == "health"]
    if h.empty:
        return pd.DataFrame(columns=["node", "rank", *READINGS])
    wide = h.pivot_table(index=["node", "rank"], columns="metric", values="value",
                         aggfunc="first", dropna=False)
    wide = wide.reindex(columns=list(READINGS)).reset_index()
    return wide.astype(object).where(wide.notna(), None)
