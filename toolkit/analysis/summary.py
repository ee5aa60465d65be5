"""The summary over repeats, as the benchmark reports define it, on pandas DataFrames.

- Case figure: the median over repeats (the reports take the middle of 7 runs); a run's own
  figure is `toolkit.analysis.throughput`'s.
- Speedup: case median / median of the 1-node-1-GPU case with the same framework, model,
  precision, per-device batch size (the work of one data-parallel replica: for a tp/pp case,
  its global batch per replica) and model variant (`model_variant`: the variant without the
  parallel layout). Among such one-GPU cases: the one of the same variant, else the one of the
  same micro-batch size, else the fastest, so a layout is never measured against an easier
  baseline. Where no one-GPU case has that per-device batch and the case is data parallel
  (dp > 1), the one-GPU case whose batch is the case's global batch (per-device batch x dp:
  strong scaling, the same work split over more GPUs) is its baseline, and its note says so.
  Scaling efficiency: speedup / GPUs. A missing baseline gives a missing speedup,
  never 1.0; the row names its baseline (`baseline_case`) and says where the two sides ran
  differently (`speedup_note`: threads per rank, the CPUs a rank could use, binding, compile
  mode, device, a host crowded by other processes; `side_differences`).
- Oversubscribed and crowded: the counts of a case's ok runs whose ranks shared their CPUs,
  and of those measured while other processes took their host's CPUs
  (`toolkit.analysis.sharing`); their figures are counted, and flagged.
- Superlinear: a scaling efficiency above 1 is not a result but a question; `superlinear` says
  why it likely happened: where the two sides ran differently, an oversubscribed or unstable
  baseline, oversubscribed runs, noise within the repeats' spread; and only where the sides
  ran alike, cache effects or different work per GPU.
- Spread: (max - min) / median of the throughput over a case's ok repeats; None with fewer than
  two. A large spread means the median is not a stable figure (the report flags it,
  `toolkit.report.tables.SPREAD_RULE`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from toolkit.analysis.numbers import finite
from toolkit.analysis.sharing import HOST_CROWDED, HOST_OTHERS_PCT, OVERSUBSCRIBED


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
    dp: int | None = None
    """Data-parallel degree (GPUs / (tp x pp)); None where the runs do not say."""
    tp: int = 1
    pp: int = 1
    pipeline_stages_per_rank: int = 1
    """Pipeline stages each pp rank holds (v of interleaved 1F1B; 1 otherwise)."""
    micro_batch_size: int | None = None
    """Samples per micro-batch (the batch per device when not split); None where unknown."""
    name: str = ""
    """The case's own name (`name:` in the grid), '' for a generated id."""
    baseline_case: str = ""
    """The case id(s) of the one-GPU case the speedup is against; '' without one."""
    speedup_note: str = ""
    """How this case ran differently from its baseline (`side_differences`: threads per rank,
    the CPUs a rank could use, binding, compile mode, a crowded host), said next to the
    speedup; '' where they ran alike or nothing says."""
    runs_oversubscribed: int = 0
    """Ok runs whose ranks shared their CPUs (with each other or with another run)."""
    runs_crowded: int = 0
    """Ok runs measured while processes that were none of their ranks took a saturated host's
    CPU time (`host_crowded`)."""
    superlinear: str = ""
    """Why the scaling efficiency is above 1, likely ('' when it is not)."""
    threads_per_rank: str = ""
    """The compute threads each rank ran (`threads_per_rank` of the case's ok runs; several,
    comma-separated, if they differ); '' where the runs do not say."""
    cpus_per_rank: str = ""
    """The CPUs each rank could run on (`cpus_per_rank`, as threads_per_rank)."""
    binding: str = ""
    """`bound` or `unbound`: whether the ranks' CPU/GPU binding was applied (as
    threads_per_rank)."""
    host_others_pct: float | None = None
    """The largest share (%) of a host's CPU time that processes other than a run's ranks took
    while the case's ok runs trained (`host_others_pct`); None where not recorded."""

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def micro_batches(self) -> int | None:
        """Micro-batches per step (gradient accumulation, or the pipeline's micro-batches)."""
        return micro_batches(self.batch_size_per_device, self.micro_batch_size)

    @property
    def split(self) -> bool:
        """Tensor or pipeline parallel, or micro-batches: the layout says more than the GPU
        count."""
        return is_split(self.tp, self.pp, self.micro_batches)

    @property
    def layout(self) -> str:
        """`dp x tp x pp`, e.g. `1x2x1`."""
        return layout_label(self.gpus, self.tp, self.pp, self.dp)

    @property
    def data_parallel(self) -> int:
        """The data-parallel degree: `dp`, else GPUs / (tp x pp)."""
        return self.dp if self.dp is not None else self.gpus // (self.tp * self.pp)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "gpus": self.gpus}


def micro_batches(batch_size_per_device: int, micro_batch_size: int | None) -> int | None:
    """Micro-batches per step; None where the micro-batch size is not known."""
    return batch_size_per_device // micro_batch_size if micro_batch_size else None


def is_split(tp: int, pp: int, micro_batches: int | None) -> bool:
    """Tensor or pipeline parallel, or more than one micro-batch per step."""
    return tp > 1 or pp > 1 or (micro_batches or 1) > 1


def layout_label(gpus: int, tp: int, pp: int, dp: int | None = None) -> str:
    """`dp x tp x pp`, e.g. `1x2x1` (dp, where not given: GPUs / (tp x pp)), for a summary row
    and a run row alike."""
    return f"{dp if dp is not None else gpus // (tp * pp)}x{tp}x{pp}"


THREADS_PER_RANK = "threads_per_rank"
"""The run column: the compute threads rank 0 ran (torch's, the `cpu (N threads)` its device
names, or the OMP_NUM_THREADS a command case's program was given)."""
CPUS_PER_RANK = "cpus_per_rank"
"""The run column: the fewest CPUs any of its ranks could run on (their affinity)."""
BINDING = "binding"
"""The run column: `bound` or `unbound`, whether rank 0's binding was applied."""
SIDE_COLUMNS = (THREADS_PER_RANK, CPUS_PER_RANK, BINDING)
"""Run columns of how the ranks used the CPUs: a case's values are its runs' distinct ones,
comma-separated, and a scaling row names where its two sides' differ (`side_differences`)."""

SPREAD_THRESHOLD = 0.05
"""Default: a case whose throughput spread over its repeats exceeds this is flagged."""

GROUP_KEYS = ("framework", "model", "precision", "variant", "num_nodes", "gpus_per_node",
              "batch_size_per_device")
LAYOUT_KEYS = ("tp", "pp", "mbs", "schedule", "vstages", "dp_kind", "sp")
"""The variant's keys of the parallel layout (`Case.variant`): cases that differ only in them are
one model, run another way, and share their one-GPU baseline."""
FIRST_COLUMNS = ("dp", "tp", "pp", "pipeline_stages_per_rank", "micro_batch_size", "name")
"""Columns that are one value per case: the first run's."""


def model_variant(variant: str) -> str:
    """The variant without its parallel-layout keys (LAYOUT_KEYS): what the one-GPU baseline of
    a tp, pp or micro-batched case must share with it."""
    bits = [b for b in variant.split(",") if b]
    return ",".join(b for b in bits if b.partition("=")[0] not in LAYOUT_KEYS)
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
    df["_over"] = df["_ok"] & (runs[OVERSUBSCRIBED].fillna("").astype(str).ne("")
                               if OVERSUBSCRIBED in runs else False)
    df["_crowded"] = df["_ok"] & (runs[HOST_CROWDED].fillna("").astype(str).ne("")
                                  if HOST_CROWDED in runs else False)
    df["_device"] = (runs["device"].astype(object).where(runs["device"].notna(), "")
                     .astype(str) if "device" in runs else "")
    df["compile"] = (runs["compile"].astype(object).where(runs["compile"].notna(), "")
                     .astype(str) if "compile" in runs else "")
    for col in SIDE_COLUMNS:  # how the counted runs ran
        df[col] = (runs[col].astype(object).where(runs[col].notna(), "").map(_text)
                   .where(df["_ok"], "") if col in runs else "")
    df[HOST_OTHERS_PCT] = (pd.to_numeric(runs[HOST_OTHERS_PCT].map(finite), errors="coerce")
                           .where(df["_ok"]) if HOST_OTHERS_PCT in runs else float("nan"))
    for col in FIRST_COLUMNS:
        df[col] = runs[col].astype(object) if col in runs else None
    for col in ("throughput_sps", *MEDIAN_COLUMNS):
        values = (pd.to_numeric(runs[col].map(finite), errors="coerce") if col in runs
                  else pd.Series(float("nan"), index=runs.index))
        df[col] = values.where(df["_ok"])
    grouped = df.groupby(list(GROUP_KEYS), sort=False, dropna=False)
    out = grouped.agg(runs_ok=("throughput_sps", "count"),
                      runs_failed=("_ok", lambda s: int((~s).sum())),
                      runs_oversubscribed=("_over", "sum"),
                      runs_crowded=("_crowded", "sum"),
                      devices=("_device", lambda s: ", ".join(sorted(set(s) - {""}))),
                      throughput_median_sps=("throughput_sps", "median"),
                      throughput_min_sps=("throughput_sps", "min"),
                      throughput_max_sps=("throughput_sps", "max"),
                      **{col: (col, "median") for col in MEDIAN_COLUMNS},
                      **{col: (col, _first) for col in FIRST_COLUMNS},
                      start_to_first_iteration_max_s=("start_to_first_iteration_s", "max"),
                      **{col: (col, _distinct) for col in ("compile", *SIDE_COLUMNS)},
                      host_others_pct=(HOST_OTHERS_PCT, "max"),
                      case_ids=("case_id", lambda s: " ".join(sorted(set(s)))))
    out = out.reset_index()
    spread = (out["throughput_max_sps"] - out["throughput_min_sps"]) / out["throughput_median_sps"]
    out["throughput_spread"] = spread.where((out["runs_ok"] >= 2)
                                            & (out["throughput_median_sps"] > 0))
    out = out.join(baselines(out))
    out["speedup"] = out["throughput_median_sps"] / out["baseline_sps"]
    gpus = out["num_nodes"].astype(int) * out["gpus_per_node"].astype(int)
    out["scaling_efficiency"] = out["speedup"] / gpus
    out["superlinear"] = [superlinear_reasons(r) for r in out.to_dict("records")]
    out = out.drop(columns=["_base_spread", "_base_over", "devices"])
    out["_gpus"] = gpus
    out["_neg_bs"] = -out["batch_size_per_device"].astype(int)
    out = out.sort_values(["framework", "model", "precision", "variant", "_neg_bs", "_gpus",
                           "num_nodes"], kind="stable")
    return out.drop(columns=["_gpus", "_neg_bs"]).reset_index(drop=True)


def _batch(value: Any) -> int | None:
    """A per-device batch as an int (runs.csv may give it as text); None where blank."""
    number = finite(value, parse_text=True)
    return int(number) if number is not None else None


def _first(values: pd.Series) -> Any:
    present = values.dropna()
    return present.iloc[0] if len(present) else None


def _text(value: Any) -> str:
    """A run's cell as text: `2`, not `2.0`, for a count pandas read as a float."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _distinct(values: pd.Series) -> str:
    """The distinct non-blank values, sorted (numbers by value), comma-separated."""
    found = set(values) - {""}
    return ", ".join(sorted(found, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0,
                                                  v)))


def baselines(out: pd.DataFrame) -> pd.DataFrame:
    """Per summary row: `baseline_sps`, `baseline_case` and `speedup_note` (see the module
    docstring for the rule; the note is `side_differences`), and the baseline's spread and
    oversubscribed runs (`_base_spread`, `_base_over`: what `superlinear_reasons` reads)."""
    single = out[(out["num_nodes"].astype(int) == 1) & (out["gpus_per_node"].astype(int) == 1)
                 & (out["throughput_median_sps"] > 0)]
    by_key: dict[tuple[Any, ...], list[Any]] = {}
    for row in single.itertuples():
        key = (row.framework, row.model, row.precision, model_variant(str(row.variant)),
               _batch(row.batch_size_per_device))
        by_key.setdefault(key, []).append(row)
    records = []
    by_index = out.to_dict("index")
    for row in out.itertuples():
        batch = _batch(row.batch_size_per_device)
        key = (row.framework, row.model, row.precision, model_variant(str(row.variant)), batch)
        candidates = by_key.get(key, [])
        strong = None
        dp = int(finite(getattr(row, "dp", None), parse_text=True) or 1)
        if not candidates and dp > 1 and batch is not None:
            strong = batch * dp
            candidates = by_key.get((*key[:-1], strong), [])
        base = (next((c for c in candidates if c.variant == row.variant), None)
                or max((c for c in candidates
                        if c.micro_batch_size == row.micro_batch_size
                        and row.micro_batch_size is not None),
                       key=lambda c: c.throughput_median_sps, default=None)
                or max(candidates, key=lambda c: c.throughput_median_sps, default=None))
        if base is None:
            records.append({"baseline_sps": float("nan"), "baseline_case": "",
                            "speedup_note": "", "_base_spread": float("nan"),
                            "_base_over": 0})
            continue
        notes = ([f"strong scaling: against the 1-GPU case at the same global batch "
                  f"({strong})"] if strong is not None else [])
        if base.Index != row.Index:
            notes += side_differences(by_index[base.Index], by_index[row.Index])
        note = "; ".join(notes)
        records.append({"baseline_sps": base.throughput_median_sps,
                        "baseline_case": str(base.case_ids), "speedup_note": note,
                        "_base_spread": base.throughput_spread,
                        "_base_over": base.runs_oversubscribed})
    return pd.DataFrame.from_records(records, index=out.index)


SIDE_WORDS = ((THREADS_PER_RANK, "{side} ran {value} threads per rank", "{side} {value}"),
              (CPUS_PER_RANK, "{side}'s ranks could run on {value} CPUs each",
               "{side}'s on {value}"),
              (BINDING, "{side}'s ranks were {value}", "{side}'s {value}"),
              ("compile", "{side} ran {value}", "{side} {value}"))
"""How `side_differences` names each difference: the 1-GPU side's words, then the other's."""


def side_differences(base: Mapping[Any, Any], row: Mapping[Any, Any]) -> list[str]:
    """Where a scaling row's two sides (`base`, the summary record of its 1-GPU baseline, and
    `row`) ran differently, each named with both values: threads per rank, the CPUs each rank
    could run on, binding and compile mode, where both sides say and they differ; and a host
    crowded by other processes on either side (`runs_crowded`, with `host_others_pct`).

    Threads and CPUs per rank are named only where a side computed on CPU ranks: a GPU rank's
    share of the node's CPUs follows from how many ranks the node runs (the binding divides
    them), not from a difference between the sides' work."""
    one, other = f"the {_gpus(base)}-GPU side", f"the {_gpus(row)}-GPU side"
    on_cpu = any(_device_kind(str(r.get("devices") or "")).split(", ")[0] == "cpu"
                 for r in (base, row))
    out = []
    for col, first, second in SIDE_WORDS:
        if col in (THREADS_PER_RANK, CPUS_PER_RANK) and not on_cpu:
            continue
        mine, theirs = str(base.get(col) or ""), str(row.get(col) or "")
        if mine and theirs and mine != theirs:
            out.append(f"{first.format(side=one, value=mine)}, "
                       f"{second.format(side=other, value=theirs)}")
    mine, theirs = str(base.get("devices") or ""), str(row.get("devices") or "")
    if mine and theirs and _device_kind(mine) != _device_kind(theirs):
        out.append(f"{one} ran on {mine}, {other} on {theirs}")
    if finite(base.get("runs_crowded")) or finite(row.get("runs_crowded")):
        out.append(f"{_crowded_side(one, base)}, {_crowded_side(other, row)}")
    return out


def _device_kind(devices: str) -> str:
    """The devices without the thread count a CPU's name carries (`cpu (2 threads)`: `cpu`),
    which threads_per_rank names."""
    return ", ".join(d.split(" (")[0] if d.startswith("cpu (") and d.endswith(" threads)")
                     else d for d in devices.split(", "))


def _gpus(r: Mapping[Any, Any]) -> int:
    return int(r["num_nodes"]) * int(r["gpus_per_node"])


def _crowded_side(side: str, r: Mapping[Any, Any]) -> str:
    """`the 1-GPU side was crowded (...)` or `the 2-GPU side was not crowded (...)`."""
    pct = finite(r.get("host_others_pct"))
    took = f"up to {pct:.0f}%" if pct is not None else "a share not recorded"
    crowded = int(finite(r.get("runs_crowded")) or 0)
    if not crowded:
        return f"{side} was not crowded" + (f" (others took up to {pct:.0f}%)"
                                            if pct is not None else "")
    return (f"{side} was crowded: other processes took {took} of its host's CPU time in "
            f"{crowded} of {int(r.get('runs_ok') or 0)} run(s) (runs.csv host_crowded)")


SUPERLINEAR_CAUSES = ("cache effects (each GPU's share of the data or model fits a faster "
                      "cache than one GPU's whole)", "different work per GPU than the 1-GPU "
                      "baseline (parallelism, accumulation, a smaller model shard)")
"""What makes an efficiency above 1 besides what the figures themselves show."""


def superlinear_reasons(row: dict[str, Any]) -> str:
    """Why a summary row's scaling efficiency above 1 is likely ('' when it is not above 1):
    what the figures show (where the two sides ran differently, `speedup_note`; oversubscribed
    runs on either side, an unstable baseline, noise within the spread), then, where the sides
    ran alike, SUPERLINEAR_CAUSES."""
    efficiency = finite(row.get("scaling_efficiency"))
    if efficiency is None or efficiency <= 1:
        return ""
    seen = []
    differs = str(row.get("speedup_note") or "")
    if differs:
        seen.append(f"the sides ran differently: {differs}")
    base_over = finite(row.get("_base_over")) or 0
    if base_over:
        seen.append(f"a slow baseline: {int(base_over)} of the 1-GPU baseline's runs were "
                    "oversubscribed")
    base_spread = finite(row.get("_base_spread"))
    if base_spread is not None and base_spread > SPREAD_THRESHOLD:
        seen.append(f"an unstable baseline: its repeats spread by {100 * base_spread:.1f}%")
    over = int(row.get("runs_oversubscribed") or 0)
    if over:
        seen.append(f"{over} of this case's runs were oversubscribed")
    spread = max(finite(row.get("throughput_spread")) or 0.0, base_spread or 0.0)
    if efficiency - 1 <= spread:
        seen.append(f"noise: {100 * (efficiency - 1):.1f}% above 1 is within the repeats' "
                    f"spread ({100 * spread:.1f}%)")
    return (f"efficiency {efficiency:.3f} > 1 (superlinear); likely "
            + "; ".join([*seen, *([] if differs else SUPERLINEAR_CAUSES)]))


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
                    "runs_failed", "runs_oversubscribed", "runs_crowded"):
            values[key] = int(values[key])
        for key in ("tp", "pp", "pipeline_stages_per_rank"):
            values[key] = int(values[key]) if values.get(key) is not None else 1
        for key in ("dp", "micro_batch_size"):
            values[key] = int(values[key]) if values.get(key) is not None else None
        for key in ("framework", "model", "precision", "variant", "compile", "baseline_case",
                    "speedup_note", "superlinear", *SIDE_COLUMNS):
            values[key] = str(values[key])
        values["name"] = str(values["name"]) if values.get("name") else ""
        out.append(SummaryRow(**values))
    return out

