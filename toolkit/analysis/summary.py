"""The summary over repeats, as the benchmark reports define it, on pandas DataFrames.

- Case figure: the median over repeats (the reports take the middle of 7 runs); a run's own
  figure is `toolkit.analysis.throughput`'s.
- Speedup: case median / median of the 1-node-1-GPU case with the same framework, model,
  precision, per-device batch size and variant. Scaling efficiency: speedup / GPUs.
  A missing baseline gives a missing speedup, never 1.0.
- Spread: (max - min) / median of the throughput over a case's ok repeats; None with fewer than
  two. A large spread means the median is not a stable figure (the report flags it,
  `toolkit.report.tables.SPREAD_RULE`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from toolkit.analysis.numbers import finite


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
    mfu_measured: float | None = None
    """Median of TFLOP/s per GPU over the GEMM peak a preflight measured (0..1); None without
    a preflight."""
    throughput_spread: float | None = None
    """(max - min) / median of the throughput over the ok repeats, a fraction (0.05 = 5%);
    None with fewer than two ok repeats."""
    compile: str = ""
    """How the model ran in the case's runs (`eager`, `compiled`, `compiled (<mode>)`; several,
    comma-separated, if its runs differ); '' where the runs do not say (OneFlow, imports)."""
    start_to_first_iteration_s: float | None = None
    """Median over the ok runs of the seconds from launch to the end of the first iteration."""
    start_to_first_iteration_max_s: float | None = None
    """The longest of them (typically the first repeat, before the compile caches are warm)."""
    compile_s: float | None = None
    """Median over the ok runs of the seconds rank 0 spent in torch.compile."""

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "gpus": self.gpus}


SPREAD_THRESHOLD = 0.05
"""Default: a case whose throughput spread over its repeats exceeds this is flagged."""

GROUP_KEYS = ("framework", "model", "precision", "variant", "num_nodes", "gpus_per_node",
              "batch_size_per_device")
MEDIAN_COLUMNS = ("peak_memory_mib", "mean_utilization_pct", "energy_per_sample_j",
                  "tflops_per_gpu", "mfu", "mfu_measured", "start_to_first_iteration_s",
                  "compile_s")
"""Columns summarised as the median over a case's ok runs."""


def summary_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per group of GROUP_KEYS: runs ok and failed, median/min/max throughput over the
    ok runs and their spread, the 1n1g baseline of the same framework, model, precision,
    variant and batch size, speedup and efficiency against it, medians of the memory,
    utilisation, energy, FLOP and start-up columns, how the model ran (`compile`), and the case
    ids. Only `status == ok` runs with a
    throughput count towards the figures; the others are counted as failed."""
    df = pd.DataFrame(index=runs.index)
    for key in GROUP_KEYS:
        df[key] = (runs[key].astype(object).where(runs[key].notna(), "")
                   if key in runs else "")
    status = runs["status"] if "status" in runs else pd.Series("", index=runs.index)
    df["case_id"] = runs["case_id"].astype(str) if "case_id" in runs else ""
    df["_ok"] = status.eq("ok")
    df["compile"] = (runs["compile"].astype(object).where(runs["compile"].notna(), "")
                     .astype(str) if "compile" in runs else "")
    for col in ("throughput_sps", *MEDIAN_COLUMNS):
        values = (pd.to_numeric(runs[col].map(finite), errors="coerce") if col in runs
                  else pd.Series(float("nan"), index=runs.index))
        df[col] = values.where(df["_ok"])
    grouped = df.groupby(list(GROUP_KEYS), sort=False, dropna=False)
    out = grouped.agg(runs_ok=("throughput_sps", "count"),
                      runs_failed=("_ok", lambda s: int((~s).sum())),
                      throughput_median_sps=("throughput_sps", "median"),
                      throughput_min_sps=("throughput_sps", "min"),
                      throughput_max_sps=("throughput_sps", "max"),
                      **{col: (col, "median") for col in MEDIAN_COLUMNS},
                      start_to_first_iteration_max_s=("start_to_first_iteration_s", "max"),
                      compile=("compile", lambda s: ", ".join(sorted(set(s) - {""}))),
                      case_ids=("case_id", lambda s: " ".join(sorted(set(s)))))
    out = out.reset_index()
    spread = (out["throughput_max_sps"] - out["throughput_min_sps"]) / out["throughput_median_sps"]
    out["throughput_spread"] = spread.where((out["runs_ok"] >= 2)
                                            & (out["throughput_median_sps"] > 0))
    base_keys = ["framework", "model", "precision", "variant", "batch_size_per_device"]
    single = out[(out["num_nodes"].astype(int) == 1) & (out["gpus_per_node"].astype(int) == 1)]
    baseline = single.set_index(base_keys)["throughput_median_sps"].rename("baseline_sps")
    out = out.join(baseline, on=base_keys)
    out.loc[out["baseline_sps"] == 0, "baseline_sps"] = float("nan")
    out["speedup"] = out["throughput_median_sps"] / out["baseline_sps"]
    gpus = out["num_nodes"].astype(int) * out["gpus_per_node"].astype(int)
    out["scaling_efficiency"] = out["speedup"] / gpus
    out["_gpus"] = gpus
    out["_neg_bs"] = -out["batch_size_per_device"].astype(int)
    out = out.sort_values(["framework", "model", "precision", "variant", "_neg_bs", "_gpus",
                           "num_nodes"], kind="stable")
    return out.drop(columns=["_gpus", "_neg_bs"]).reset_index(drop=True)


def summarize(rows: Iterable[dict[str, Any]]) -> list[SummaryRow]:
    """`summary_frame` of run rows (`parsers.rows.RunRow.to_dict()`), as SummaryRow records."""
    runs = pd.DataFrame.from_records(list(rows))
    if runs.empty:
        return []
    frame = summary_frame(runs)
    names = [f.name for f in dataclasses.fields(SummaryRow)]
    out = []
    for record in frame.to_dict("records"):
        values: dict[str, Any] = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                  for k, v in record.items() if k in names}
        for key in ("num_nodes", "gpus_per_node", "batch_size_per_device", "runs_ok",
                    "runs_failed"):
            values[key] = int(values[key])
        for key in ("framework", "model", "precision", "variant", "compile"):
            values[key] = str(values[key])
        out.append(SummaryRow(**values))
    return out

