"""Throughput arithmetic, as the benchmark reports define it. Pure functions over numbers and
rows.

- Run throughput: global samples per step x measured iterations / (time from the end of the last
  warm-up iteration to the end of the last measured one). Each rank measures with its own clock
  (clocks of different nodes are not compared); the run takes the slowest rank's window.
- Case figure: the median over repeats (the published reports take the middle of 7 runs).
- Speedup: case median / median of the 1-node-1-GPU case with the same framework, model,
  precision, per-device batch size and variant. Scaling efficiency: speedup / GPUs.
  A missing baseline gives a missing speedup, never 1.0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class MetricError(ValueError):
    pass


def window_throughput(elapsed_s: Sequence[float], samples_per_iter: int, warmup: int,
                      measured: int | None = None) -> tuple[float, int]:
    """Samples/s over iterations warmup+1 .. warmup+measured.

    `elapsed_s[i]` is the time iteration i+1 finished, from a common start (elapsed 0 is the
    start of iteration 1). Returns (throughput, iterations measured).
    """
    n = len(elapsed_s)
    if measured is None:
        measured = n - warmup
    if warmup < 0 or measured < 1 or warmup + measured > n:
        raise MetricError(f"need {warmup} warm-up + {measured} measured iterations, have {n}")
    t_start = elapsed_s[warmup - 1] if warmup > 0 else 0.0
    t_end = elapsed_s[warmup + measured - 1]
    span = t_end - t_start
    if not math.isfinite(span) or span <= 0:  # NaN would pass `span <= 0` and give a NaN figure
        raise MetricError(f"measurement window of {span} s is not a positive finite number")
    return samples_per_iter * measured / span, measured


def run_throughput(per_rank_elapsed: Iterable[Sequence[float]], samples_per_iter: int,
                   warmup: int, measured: int) -> float:
    """The run's figure: the slowest rank's window (every rank must have the full window)."""
    spans = []
    for elapsed in per_rank_elapsed:
        tput, _ = window_throughput(elapsed, samples_per_iter, warmup, measured)
        spans.append(samples_per_iter * measured / tput)
    if not spans:
        raise MetricError("no rank has timing data")
    return samples_per_iter * measured / max(spans)


def median(values: Sequence[float]) -> float:
    if not values:
        raise MetricError("median of no values")
    return float(statistics.median(values))


@dataclass(frozen=True)
class SummaryRow:
    framework: str
    model: str
    precision: str
    variant: str
    num_nodes: int
    gpus_per_node: int
    batch_size_per_device: int
    runs_ok: int
    runs_failed: int
    throughput_median_sps: float | None
    throughput_min_sps: float | None
    throughput_max_sps: float | None
    baseline_sps: float | None
    """The 1n1g median this row's speedup is measured against; None when there is none."""
    speedup: float | None
    scaling_efficiency: float | None
    peak_memory_mib: float | None
    case_ids: str
    mean_utilization_pct: float | None = None
    energy_per_sample_j: float | None = None
    tflops_per_gpu: float | None = None
    """Median achieved model TFLOP/s per GPU (toolkit.analysis.flops); None without a formula."""
    mfu: float | None = None
    """Median model FLOPs utilisation (0..1) against the device's dense peak; None if unknown."""

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "gpus": self.gpus}


GROUP_KEYS = ("framework", "model", "precision", "variant", "num_nodes", "gpus_per_node",
              "batch_size_per_device")


def summarize(rows: Iterable[dict[str, Any]]) -> list[SummaryRow]:
    """Median/min/max over repeats, speedup and efficiency against the matching 1n1g median.

    `rows` are run rows (`parsers.rows.RunRow.to_dict()`); only `status == ok` rows with a
    throughput count towards the figures, failed ones are counted.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = tuple(row.get(k) if row.get(k) is not None else "" for k in GROUP_KEYS)
        groups.setdefault(key, []).append(row)
    medians: dict[tuple[Any, ...], float] = {}
    stats: dict[tuple[Any, ...], tuple[list[float], int, list[str]]] = {}
    extras: dict[tuple[Any, ...], dict[str, float | None]] = {}
    for key, members in groups.items():
        ok = [float(r["throughput_sps"]) for r in members
              if r.get("status") == "ok" and r.get("throughput_sps") is not None]
        failed = sum(1 for r in members if r.get("status") != "ok")
        ids = sorted({str(r.get("case_id", "")) for r in members})
        stats[key] = (ok, failed, ids)
        extras[key] = {col: _median_of(members, col) for col in
                       ("peak_memory_mib", "mean_utilization_pct", "energy_per_sample_j",
                        "tflops_per_gpu", "mfu")}
        if ok:
            medians[key] = median(ok)
    out = []
    for key, (ok, failed, ids) in stats.items():
        fw, model, prec, variant, nodes, gpn, bs = key
        base_key = (fw, model, prec, variant, 1, 1, bs)
        med = medians.get(key)
        base = medians.get(base_key)
        speedup = med / base if (med is not None and base) else None
        gpus = int(nodes) * int(gpn)
        out.append(SummaryRow(
            framework=fw, model=model, precision=prec, variant=variant, num_nodes=int(nodes),
            gpus_per_node=int(gpn), batch_size_per_device=int(bs), runs_ok=len(ok),
            runs_failed=failed, throughput_median_sps=med,
            throughput_min_sps=min(ok) if ok else None,
            throughput_max_sps=max(ok) if ok else None, baseline_sps=base, speedup=speedup,
            scaling_efficiency=speedup / gpus if speedup is not None else None,
            peak_memory_mib=extras[key]["peak_memory_mib"], case_ids=" ".join(ids),
            mean_utilization_pct=extras[key]["mean_utilization_pct"],
            energy_per_sample_j=extras[key]["energy_per_sample_j"],
            tflops_per_gpu=extras[key]["tflops_per_gpu"], mfu=extras[key]["mfu"]))
    out.sort(key=lambda r: (r.framework, r.model, r.precision, r.variant,
                            -r.batch_size_per_device, r.gpus, r.num_nodes))
    return out


def _median_of(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [float(r[column]) for r in rows
              if r.get("status") == "ok" and isinstance(r.get(column), (int, float))]
    return median(values) if values else None
