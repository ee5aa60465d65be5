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
   `PEER_FRACTION` (85 %) of their median, or, with at least `MIN_PEERS_FOR_SPREAD` of them,
   below the median x (1 - tolerance), tolerance = max(15 %, 3 x their relative spread), at
   most `MAX_PEER_TOLERANCE` (a figure below half its peers' median is slow whatever their
   noise): among 28 healthy pairs a spread of 12 % puts the lowest at 80 % of the median.
3. **datasheet**: always, where the device's datasheet figure is known: slow below
   `DATASHEET_FLOOR` of it (a GPU that reaches less than that is not a healthy one of its kind,
   whatever its peers do); the share of datasheet is reported either way.
4. **site**: also, where the site profile says what a healthy GPU of the model measures there
   (`expected`), or what an all-reduce over two such nodes' ranks reaches (`pair_all_reduce`,
   judging every pair's and a two-node job's): slow below the expected figure x
   (1 - `SITE_TOLERANCE`).

A figure that could not be measured on a GPU (GEMM, memory) is a `fault`; a collective the
backend lacks (gloo has no reduce-scatter) is `n/a`. Health readings from NVML: volatile
uncorrected ECC errors, a page retirement or row remapping pending a reset, or a failed row
remap are a `fault`; a PCIe link under load below its maximum generation or width, a hardware
slowdown (thermal, power brake) in more than `HW_SLOWDOWN_SHARE` of the samples under load, or a
power limit set below the board's default are `slow`. A rank that did not finish is a `fault`.

5. **link floor**: an all-reduce across nodes, where every node's interface speed is known:
   slow below `LINK_FLOOR_SHARE` of the slowest (the only reference of two nodes' link). Not
   the other collectives: gloo's reduce-scatter of healthy CPU nodes runs below it.

What a verdict rests on: each figure is the best of its measurements (`detail.attempts`, each
with the host's load while it ran); a figure below its reference was measured again until
`CONFIRMATIONS` uncrowded measurements (`measure_again`). A figure below its reference whose
every measurement was taken while a host was crowded (the runs' crowded mark,
`toolkit.analysis.sharing.crowded_while`) is `inconclusive`, unless even the figure its ranks
could have reached without their waits for a CPU (`restored_value`), times `WAIT_MARGIN`, falls
short: contention does not explain that, and it is `slow`, saying so. A figure with
nothing to judge it against is `not judged`; both are listed (`not_judged`). A named figure's
reason gives its value, the reference, its peers and their spread, and its measurements.

A node is as bad as its worst figure (an inconclusive node is never excluded). For pairs of
nodes (all-reduce over two nodes' ranks), a node in two pairs or more whose every pair is below
its reference, alike (within `NODE_PAIRS_ALIKE` of each other) and at least
`NODE_PAIRS_CONFIRMED` of them slow (on an uncrowded host, or beyond what its crowding
explains), is slow itself (its network); a pair slow alone, or far slower than the node's other
pairs, names the link, and a slow link makes the preflight not ok without excluding a node.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd

from toolkit.analysis.flops import PCIE_LANE_GBPS, datasheet
from toolkit.analysis.sharing import crowded_while
from toolkit.spec.placement import PAIR_ALL_REDUCE

OK, SLOW, FAULT, NA = "ok", "slow", "fault", "n/a"
INCONCLUSIVE = "inconclusive"
"""Below its reference, but every measurement was taken while the host was crowded: never
named slow, never excluded."""
NOT_JUDGED = "not judged"
"""Nothing to judge the figure against (no baseline, no peers, no datasheet, site or link
floor)."""
RANKING = {NA: 0, NOT_JUDGED: 0, OK: 1, INCONCLUSIVE: 2, SLOW: 3, FAULT: 4}

MIN_BASELINE = 3
BASELINE_TOLERANCE = 0.10
PEER_FRACTION = 0.85
MIN_PEERS_FOR_SPREAD = 5
"""Peers enough to tell their noise: with fewer, one slow figure moves their spread as much
as their median."""
NOISE_SPREADS = 3.0
"""A figure is told from its peers' noise this many relative spreads below their median (as
for a baseline)."""
MAX_PEER_TOLERANCE = 0.5
NODE_PAIRS_ALIKE = 2.0
"""A node is slow for its network when every pair it is in (two at least) is below its
reference and the fastest of them is within this factor of the slowest..."""
NODE_PAIRS_CONFIRMED = 2
"""...and at least this many of them were slow on an uncrowded host (the others below their
reference while it was crowded); fewer: the node is inconclusive."""
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


K = TypeVar("K")


@dataclass(frozen=True)
class Attempts:
    """The measurements of one figure: its best value and how many measurements made it."""

    value: float | None
    """The figure: the best measurement (the slowest rank's for a group)."""
    count: int
    uncrowded: int
    """Measurements during which no host of the figure was crowded (`crowded_while`)."""
    crowded: str | None = None
    """Why the host was crowded during the last crowded measurement."""
    restored: float | None = None
    """The most the figure could have been had its ranks never waited for a CPU: each
    measurement over (1 - its ranks' run-queue waits, added up, as a share of its time), the
    best of them (`restored`); None where a rank's record lacks its waits."""


def attempts_of(ranks: list[tuple[str, list[dict[str, Any]]]]) -> Attempts:
    """One figure from each of its ranks' (host, `detail.attempts`): the slowest rank's best
    value; a measurement was crowded when any host was crowded while it ran (the hosts' loads
    of one machine added up), or its ranks waited for a CPU `WAIT_BOUND_SHARE` of its time."""
    lists = [(host, [a for a in attempts if isinstance(a, dict)]) for host, attempts in ranks]
    count = min((len(a) for _, a in lists), default=0)
    bests = [max((float(a["value"]) for a in attempts if _num(a.get("value"))), default=None)
             for _, attempts in lists]
    value = None if not bests or any(b is None for b in bests) else \
        min(b for b in bests if b is not None)
    uncrowded, crowded = 0, None
    restored: list[float | None] = []
    for k in range(count):
        measurement = [attempts[k] for _, attempts in lists]
        waited = _waits(measurement)
        why = crowded_while([(host, attempts[k].get("host_load") or {})
                             for host, attempts in lists])
        if why is None and waited is not None and waited[1] >= WAIT_BOUND_SHARE:
            why = (f"its ranks' threads waited for a CPU {waited[1]:.0%} of its time (added "
                   "up): bound by the CPUs it got, not by what it measures")
        if why is None:
            uncrowded += 1
        else:
            crowded = why
        restored.append(None if waited is None else _restored(*waited))
    best = None if not restored or any(r is None for r in restored) else \
        max(r for r in restored if r is not None)
    return Attempts(value, count, uncrowded, crowded, best)


WAIT_MARGIN = 2.0
"""A figure measured only while its host was crowded is still named slow where this many times
its `restored` value falls short of what it had to reach: contention can cost a measurement
more than its ranks' own waits for a CPU (the kernel's network work deferred to threads that
wait in turn, caches emptied by others). The margin is a judgement, not a bound: a figure below
half of what its waits explain is taken as the hardware's."""

MAX_WAIT_SHARE = 0.95
"""The run-queue waits of a measurement's ranks explain at most this share of its time (a
figure restored at most 20-fold)."""


WAIT_BOUND_SHARE = 0.5
"""A measurement whose ranks' threads waited for a CPU, added up, at least this share of its
time counts as crowded, whoever took the CPUs (their own threads included): it measured the
CPUs it got. CPU ranks' pair all-reduces on one 2-core machine wait 1-2.9 x their time,
network-bound ones over a throttled link 0.01-0.2 x."""


def _waits(attempt: list[dict[str, Any]]) -> tuple[list[float], float] | None:
    """Each rank's value and the ranks' run-queue waits over the longest window: (values,
    share); the share is above 1 where several waited at once. None where a rank lacks its
    value, window or waits."""
    values, waits, windows = [], [], []
    for a in attempt:
        load = a.get("host_load") or {}
        got = [a.get("value"), load.get("own_wait_s"), load.get("window_s")]
        numbers = [float(x) for x in got if isinstance(x, (int, float)) and math.isfinite(x)
                   and x >= 0]
        if len(numbers) < 3 or numbers[2] <= 0:
            return None
        values.append(numbers[0])
        waits.append(numbers[1])
        windows.append(numbers[2])
    if not values:
        return None
    return values, sum(waits) / max(windows)


def restored_value(attempt: list[dict[str, Any]]) -> float | None:
    """One measurement of a figure (each rank's record of it) as it could have been without
    its ranks' waits for a CPU: the slowest rank's value over (1 - share), share = the ranks'
    run-queue waits added up (`host_load.own_wait_s`: waits of threads and ranks at one time
    count each, so the share is never too small) over the longest rank's window, at most
    `MAX_WAIT_SHARE`. None where a rank lacks its value, window or waits."""
    got = _waits(attempt)
    return None if got is None else _restored(*got)


def _restored(values: list[float], share: float) -> float:
    return min(values) / (1 - min(share, MAX_WAIT_SHARE))


CONFIRMATIONS = 2
"""A figure below its reference is measured until this many measurements while no host was
crowded (or `ATTEMPTS` in all) before it names a node or a link."""
ATTEMPTS = 3
"""At most this many measurements of one figure (`measure_again`)."""
ROUNDS_AGAIN = 2 * (ATTEMPTS - 1)
"""Rounds of measuring again: a figure can fall below its peers only once a peer measured
again rose, a round after the first ones; no figure is measured more than `ATTEMPTS` times."""


def measure_again(figures: Mapping[K, Attempts], floors: Mapping[K, float] | None = None
                  ) -> list[K]:
    """Which of alike figures to measure again: those slow against the median of them all
    (when there are at least two; `peer_tolerance`) or below their floor (the least a healthy
    one reaches), until `CONFIRMATIONS` measurements on an uncrowded host confirm them or
    `ATTEMPTS` were taken. A figure at its peers' level is not measured again, crowded or
    not: contention only lowers a figure."""
    values = [f.value for f in figures.values() if f.value is not None]
    median = statistics.median(values) if len(values) >= 2 else None
    below = 1 - peer_tolerance(values)[0]
    out = []
    for k, f in figures.items():
        if f.value is None or f.count >= ATTEMPTS or f.uncrowded >= CONFIRMATIONS:
            continue
        floor = (floors or {}).get(k)
        low = (median is not None and f.value < below * median) or \
            (floor is not None and f.value < floor)
        if low:
            out.append(k)
    return out


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
        # every rank's measurements of the group's figure, to tell whether a host was crowded
        ranks = every.groupby(["metric", "scope", "group", "bytes"], dropna=False)
        tried = {key: attempts_of([(str(n), _attempt_list(d)) for n, d in
                                   zip(g["node"], g["detail"], strict=True)])
                 for key, g in ranks}
        coll = coll.assign(_attempts=[tried.get((m, sc, g, b)) for m, sc, g, b in zip(
            coll["metric"], coll["scope"], coll["group"], coll["bytes"], strict=True)])
    per_gpu = per_gpu.assign(_attempts=[attempts_of([(str(n), _attempt_list(d))])
                                        for n, d in zip(per_gpu["node"], per_gpu["detail"],
                                                        strict=True)])
    out = pd.concat([per_gpu.assign(nodes=[[n] for n in per_gpu["node"]]), coll],
                    ignore_index=True)
    tries = [a if isinstance(a, Attempts) else None for a in out["_attempts"]]
    return out.drop(columns=["_attempts"]).assign(
        measurements=[a.count if a and a.count else None for a in tries],
        uncrowded=[a.uncrowded if a and a.count else None for a in tries],
        crowded=[a.crowded if a and a.count else None for a in tries],
        restored=[a.restored if a and a.count else None for a in tries])


def _attempt_list(detail: Any) -> list[dict[str, Any]]:
    attempts = detail.get("attempts") if isinstance(detail, dict) else None
    return attempts if isinstance(attempts, list) else []


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


def peer_tolerance(values: list[float]) -> tuple[float, float | None]:
    """How far below the median of alike figures one is slow, and their relative spread
    (None with fewer than `MIN_PEERS_FOR_SPREAD`): 1 - `PEER_FRACTION`, widened to
    `NOISE_SPREADS` spreads, at most `MAX_PEER_TOLERANCE`."""
    if len(values) < MIN_PEERS_FOR_SPREAD:
        return 1 - PEER_FRACTION, None
    spread = relative_spread(values)
    if spread is None:
        return 1 - PEER_FRACTION, None
    return min(MAX_PEER_TOLERANCE, max(1 - PEER_FRACTION, NOISE_SPREADS * spread)), spread


def peer_reference(values: list[float]) -> Reference | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < 2:
        return None
    med = statistics.median(values)
    if med <= 0:
        return None
    tolerance, spread = peer_tolerance(values)
    return Reference(med, "peers", tolerance, len(values), spread)


def judge_figures(current: pd.DataFrame, earlier: pd.DataFrame,
                  expected: Expected | None = None) -> pd.DataFrame:
    """`figures(current)` with `reference`, `reference_kind`, `ratio`, `peers` (the alike
    figures of this preflight) and their `spread`, `datasheet`, `pct_datasheet`, `expected`
    (the site's), `floor` (a link's), `verdict`, `reason` and `rule`. Each figure also has
    its `measurements`, how many of them were `uncrowded` and why the host was `crowded`."""
    # the probe's own `reason` (why a figure is missing) becomes `note`; `reason` is the verdict's
    figs = figures(current).rename(columns={"reason": "note"})
    if figs.empty:
        return figs.assign(reference=None, reference_kind=None, ratio=None, peers=None,
                           spread=None, datasheet=None, pct_datasheet=None, expected=None,
                           floor=None, verdict=None, reason=None, rule=None)
    old_by_key = _values_by_key(figures(earlier)) if not earlier.empty else {}
    # every alike figure is a peer, crowded or not: contention only lowers a figure, so a
    # crowded peer lowers the reference (a slow figure missed, never a healthy one named)
    now_by_key = _values_by_key(figs)
    link = _link_limits(current)
    speeds = _node_speeds(current)
    rows = []
    for _, r in figs.iterrows():
        site = None
        if expected is not None and r["scope"] == "gpu":
            site = expected(r["device"]).get(r["metric"])
        elif expected is not None and _across_two_nodes(r):
            site = expected(r["device"]).get(PAIR_ALL_REDUCE)
        floor = link_floor_gbps([speeds.get(n) for n in r["nodes"]]) \
            if r["metric"] == "all_reduce" and len(r["nodes"]) >= 2 else None
        rows.append(_judge(r, old_by_key.get(_key(r), []), now_by_key.get(_key(r), []),
                           link.get((r["node"], r["rank"])) if r["metric"] in ("h2d", "d2h")
                           else None, site, floor))
    return pd.concat([figs.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


def _across_two_nodes(r: Any) -> bool:
    """An all-reduce over the ranks of two nodes: a pair's, or the job's of two nodes."""
    nodes = r["nodes"] if isinstance(r["nodes"], list) else []
    return r["probe"] == "collective" and r["metric"] == "all_reduce" and \
        r["scope"] in ("pair", "job") and len(nodes) == 2


LINK_FLOOR_SHARE = 0.1
"""An all-reduce across nodes whose busbw is below this share of the nodes' interface speed is
slow whatever its peers do (a link that reaches a tenth of its line rate is a broken one: a
throttled port, a cable that trained down, traffic on a slower path): the floor that judges
the link of two nodes, which have no other pair to compare with."""


def link_floor_gbps(speeds_mbps: list[float | None]) -> float | None:
    """The floor of a collective's busbw over nodes whose interfaces run at `speeds_mbps`
    (Mbit/s): `LINK_FLOOR_SHARE` of the slowest, in GB/s; None unless every speed is known."""
    known = [float(v) for v in speeds_mbps if _num(v) and float(v) > 0]  # type: ignore[arg-type]
    if not known or len(known) < len(speeds_mbps):
        return None
    return LINK_FLOOR_SHARE * min(known) / 8000


def _node_speeds(frame: pd.DataFrame) -> dict[Any, float]:
    """node -> the link speed (Mbit/s) of its interface to the other nodes, where known."""
    if "speed_mbps" not in frame:
        return {}
    known = frame[frame["speed_mbps"].notna()]
    return {n: float(v) for n, v in known.groupby("node")["speed_mbps"].min().items()}


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
           site: float | None = None, floor: float | None = None) -> dict[str, Any]:
    value = r["value"]
    sheet = datasheet(r["device"], r["metric"]) if r["scope"] == "gpu" else None
    if sheet is None and link_gbps is not None:
        sheet = link_gbps
    out: dict[str, Any] = {"reference": None, "reference_kind": None, "ratio": None,
                           "peers": None, "spread": None, "datasheet": sheet,
                           "pct_datasheet": None, "expected": site, "floor": floor,
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
    rules, reasons, verdict = [], [], OK
    limits: list[float] = []  # what the figure fell short of, rule by rule
    if len(now) >= 2:
        out.update(peers=sorted(now), spread=relative_spread(now))
    if ref is not None:
        out.update(reference=ref.value, reference_kind=ref.kind, ratio=value / ref.value)
        if ref.kind == "baseline":
            rules.append(f"slow below {1 - ref.tolerance:.0%} of the median of {ref.count} "
                         f"earlier preflights (spread {ref.spread:.1%})")
        else:
            rules.append(f"slow below {1 - ref.tolerance:.0%} of the median of the "
                         f"{ref.count} alike figures of this preflight"
                         + (f" ({PEER_FRACTION:.0%}, or {NOISE_SPREADS:g} x their spread "
                            f"{ref.spread:.1%} below it)" if ref.spread is not None else ""))
        if value < ref.value * (1 - ref.tolerance):
            verdict = SLOW
            limits.append(ref.value * (1 - ref.tolerance))
            whose = "baseline's" if ref.kind == "baseline" else "peers'"
            reasons.append(f"{what} {figure(value)} {unit} is "
                           f"{share_below(value / ref.value, 1 - ref.tolerance)} of the "
                           f"{whose} median {figure(ref.value)}" + _evidence(out, r))
    floor_share = DATASHEET_FLOOR.get(r["probe"])
    if sheet and floor_share:
        rules.append(f"slow below {floor_share:.0%} of the datasheet")
        if value < floor_share * sheet:
            verdict = SLOW
            limits.append(floor_share * sheet)
            reasons.append(f"{what} {figure(value)} {unit} is "
                           f"{share_below(value / sheet, floor_share)} of the datasheet "
                           f"{sheet:,.0f} (slow below {floor_share:.0%})" + _evidence(out, r))
    if site:
        rules.append(f"slow below {1 - SITE_TOLERANCE:.0%} of the site's expected "
                     f"{figure(site)}")
        if value < site * (1 - SITE_TOLERANCE):
            verdict = SLOW
            limits.append(site * (1 - SITE_TOLERANCE))
            reasons.append(f"{what} {figure(value)} {unit} is "
                           f"{share_below(value / site, 1 - SITE_TOLERANCE)} of the site's "
                           f"expected {figure(site)}" + _evidence(out, r))
    if floor:
        rules.append(f"slow below the link's floor, {LINK_FLOOR_SHARE:.0%} of its interface "
                     "speed")
        if value < floor:
            verdict = SLOW
            limits.append(floor)
            reasons.append(f"{what} {figure(value)} {unit} is below the link's floor "
                           f"{figure(floor)} ({LINK_FLOOR_SHARE:.0%} of the interface's "
                           f"{floor * 8000 / LINK_FLOOR_SHARE:,.0f} Mbit/s)" + _evidence(out, r))
    out["rule"] = "; ".join(rules) or None
    if not rules:
        return {**out, "verdict": NOT_JUDGED,
                "reason": f"{what}: {_unjudged_why(r, old)}"}
    measurements, uncrowded = r.get("measurements"), r.get("uncrowded")
    if verdict == SLOW and _num(measurements) and uncrowded == 0:
        during = (f"all {measurements:.0f} measurements" if measurements > 1
                  else "its one measurement") + f" ({r.get('crowded')})"
        restored = r.get("restored")
        short = [t for t in limits if _num(restored) and restored * WAIT_MARGIN < t]
        if not short:
            return {**out, "verdict": INCONCLUSIVE,
                    "reason": "; ".join(reasons) + ", but the host was crowded during "
                              + during + (f"; without its ranks' waits for a CPU it could have "
                                          f"reached {figure(restored)}"
                                          if _num(restored) else "")}
        return {**out, "verdict": SLOW,
                "reason": "; ".join(reasons) + f", though the host was crowded during {during}: "
                          f"without its ranks' waits for a CPU it would have reached at most "
                          f"{figure(restored)}, and {WAIT_MARGIN:g} x that is still below "
                          f"{figure(max(short))}"}
    return {**out, "verdict": verdict, "reason": "; ".join(reasons) or None}


def relative_spread(values: list[float]) -> float | None:
    """1.4826 x MAD / median of `values` (a standard deviation's share of the median for
    normal figures, untouched by one outlier); None for a median of 0."""
    med = statistics.median(values)
    if med <= 0:
        return None
    return 1.4826 * statistics.median(abs(v - med) for v in values) / med


def _evidence(out: dict[str, Any], r: Any) -> str:
    """` (best of 3 measurements; peers 0.03, 0.06, 0.06, spread 2%)`: what a named figure
    rests on."""
    parts = []
    if _num(r.get("measurements")):
        n = int(r["measurements"])
        parts.append(f"best of {n} measurements" if n > 1 else "one measurement")
    if out.get("peers"):
        spread = out.get("spread")
        parts.append("peers " + ", ".join(figure(v) for v in out["peers"])
                     + (f", spread {spread:.0%}" if spread is not None else ""))
    return f" ({'; '.join(parts)})" if parts else ""


def _unjudged_why(r: Any, old: list[float]) -> str:
    """Why a figure had nothing to be judged against."""
    why = []
    why.append(f"{len(old)} earlier preflight(s) of it, {MIN_BASELINE} needed for a baseline"
               if old else "no earlier preflight of it")
    why.append("no alike figure in this preflight" if r["scope"] != "job" else
               "one job-wide figure, no peers")
    if r["scope"] == "gpu":
        why.append("no datasheet or site figure for its device")
    elif r["metric"] == "all_reduce" and len(r["nodes"]) >= 2:
        why.append("no interface speed for its link's floor")
    return "; ".join(why)


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
    unjudged: list[dict[str, Any]] = field(default_factory=list)
    """The figures not judged (`not_judged`): `where`, `metric`, `verdict`, `why`."""
    links_tested: list[str] = field(default_factory=list)
    """The pairs of nodes whose all-reduce this preflight measured (`a+b`)."""
    links_total: int = 0
    """The pairs of nodes the preflight's nodes make."""

    @property
    def exclude(self) -> list[str]:
        """Nodes not ok, for Slurm's `--exclude` (never an inconclusive one)."""
        return sorted(self.nodes.loc[self.nodes["verdict"].isin([SLOW, FAULT]), "node"])

    @property
    def ok(self) -> bool:
        """No node and no link found slow or faulty, as far as judged."""
        return not self.exclude and not self.links

    @property
    def all_judged(self) -> bool:
        """Every figure had something to be judged against, on an uncrowded host."""
        return not self.unjudged

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """Back from `to_dict` (verdict.json)."""
        def frame(key: str, columns: list[str]) -> pd.DataFrame:
            rows = data.get(key)
            return pd.DataFrame(rows if isinstance(rows, list) else [], columns=None if rows
                                else columns)
        def strings(key: str) -> list[str]:
            values = data.get(key)
            return [str(x) for x in values] if isinstance(values, list) else []

        unjudged = data.get("not_judged")
        total = data.get("links_total")
        return cls(frame("figures", ["probe", "metric", "scope", "value", "verdict"]),
                   frame("health", ["node", "rank", "metric", "value", "verdict", "reason"]),
                   frame("nodes", ["node", "verdict", "reasons", "ranks", "device"]),
                   strings("links"), frame("readings", ["node", "rank"]),
                   [u for u in unjudged if isinstance(u, dict)]
                   if isinstance(unjudged, list) else [],
                   strings("links_tested"), total if isinstance(total, int) else 0)

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            clean = df.drop(columns=[c for c in ("detail",) if c in df.columns])
            return [{k: (None if _is_nan(v) else v) for k, v in rec.items()}
                    for rec in clean.to_dict(orient="records")]
        return {"ok": self.ok, "all_judged": self.all_judged, "exclude": self.exclude,
                "links": self.links, "not_judged": self.unjudged,
                "links_tested": self.links_tested, "links_total": self.links_total,
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
    pair_rows = figs[(figs["scope"] == "pair") & (figs["probe"] == "collective")] \
        if not figs.empty else figs
    for _, r in figs.iterrows():
        if (r["scope"] == "pair" and r["probe"] == "collective") or \
                r["verdict"] not in (SLOW, FAULT, INCONCLUSIVE):
            continue
        if r["scope"] == "job" and r["verdict"] != FAULT:
            continue  # every node took part: it names no node (a fault vouches for none)
        for n in r["nodes"]:
            findings.setdefault(n, []).append((r["verdict"], r["reason"]))
    for n in nodes_all:
        mine = pair_rows[[n in ns for ns in pair_rows["nodes"]]] if not pair_rows.empty \
            else pair_rows
        below = mine[mine["verdict"].isin([SLOW, INCONCLUSIVE])]
        slow = mine[mine["verdict"] == SLOW]
        values = [float(v) for v in mine["value"] if _num(v) and v > 0]
        # A node's own link caps every pair it is in at about the same figure; pairs that
        # differ more than NODE_PAIRS_ALIKE are slow for their links (one far below the other).
        # A node in one pair only (two nodes) cannot be told from its link.
        alike = bool(values) and len(values) == len(mine) and \
            max(values) <= NODE_PAIRS_ALIKE * min(values)
        if len(mine) < 2 or len(below) < len(mine) or not alike:
            continue
        reasons = "; ".join(below["reason"].dropna())
        if len(slow) >= NODE_PAIRS_CONFIRMED:
            findings[n].append((SLOW, f"every all-reduce with {n} is slow: {reasons}"))
        else:
            findings[n].append((INCONCLUSIVE, f"every all-reduce with {n} is below its peers, "
                                f"but fewer than {NODE_PAIRS_CONFIRMED} of them slow on an "
                                f"uncrowded host or beyond what its crowding explains: "
                                f"{reasons}"))
    # A slow pair that holds a node slow in every pair is that node's; only a pair slow with
    # neither of its nodes slow everywhere names the link between them.
    for _, r in pair_rows.iterrows():
        if r["verdict"] == SLOW and not any(any("every all-reduce" in why
                                                for _, why in findings.get(n, []))
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
    return Verdict(figs, health, nodes, links, readings(current), not_judged(figs),
                   sorted(str(g) for g in pair_rows["group"].unique()) if not pair_rows.empty
                   else [], len(nodes_all) * (len(nodes_all) - 1) // 2)


def not_judged(figs: pd.DataFrame) -> list[dict[str, Any]]:
    """The figures that were not judged, and why: nothing to judge them against, or a host
    crowded during every measurement of a figure below its reference (`INCONCLUSIVE`)."""
    if figs.empty:
        return []
    left = figs[figs["verdict"].isin([NOT_JUDGED, INCONCLUSIVE])]
    return [{"where": f"{r['node']}/r{r['rank']}" if r["scope"] == "gpu"
             else f"{r['scope']} {r['group']}", "metric": r["metric"], "verdict": r["verdict"],
             "why": r["reason"]} for _, r in left.iterrows()]


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
