"""Markdown tables in the seeds' shapes, from summary and run rows. Pure text; no I/O.

- per batch size: `| num_nodes | gpu_num_per_node | batch_size_per_device | throughput | speedup |`
  (the median of the repeats; speedup against the 1n1g median, `missing` where there is none),
- `All Results`: one row per run,
- a summary with min/max, scaling efficiency and memory, and the failed runs with their reasons.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from toolkit.metrics import SummaryRow

MISSING = "missing"


def fmt(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("--------" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def group_title(r: SummaryRow) -> str:
    return f"{r.model} {r.framework} {r.precision}"


def per_batch_tables(summary: Sequence[SummaryRow]) -> list[tuple[str, str]]:
    """(title, table) per framework/model/precision/variant and batch size."""
    groups: dict[tuple[str, str, str, str, int], list[SummaryRow]] = {}
    for r in summary:
        groups.setdefault((r.framework, r.model, r.precision, r.variant,
                           r.batch_size_per_device), []).append(r)
    out = []
    for (_, _, _, _, bs), rows in groups.items():
        rows = sorted(rows, key=lambda r: (r.gpus, r.num_nodes))
        title = f"{group_title(rows[0])}, batch size = {bs}"
        table = md_table(
            ["num_nodes", "gpu_num_per_node", "batch_size_per_device", "throughput", "speedup"],
            [[r.num_nodes, r.gpus_per_node, r.batch_size_per_device,
              fmt(r.throughput_median_sps), fmt(r.speedup, 2)] for r in rows])
        out.append((title, table))
    return out


def all_results_table(runs: Sequence[dict[str, Any]]) -> str:
    ok = [r for r in runs if r.get("status") == "ok"]
    return md_table(["num_nodes", "gpu_num_per_node", "batch_size_per_device", "throughput"],
                    [[r["num_nodes"], r["gpus_per_node"], r["batch_size_per_device"],
                      fmt(r.get("throughput_sps"))] for r in ok])


def summary_table(summary: Sequence[SummaryRow]) -> str:
    return md_table(
        ["case", "GPUs", "runs", "median samples/s", "min", "max", "speedup", "efficiency",
         "memory (MiB)", "GPU util %", "J/sample"],
        [[r.case_ids, r.gpus, f"{r.runs_ok}" + (f" (+{r.runs_failed} failed)"
                                                 if r.runs_failed else ""),
          fmt(r.throughput_median_sps), fmt(r.throughput_min_sps), fmt(r.throughput_max_sps),
          fmt(r.speedup, 2), fmt(r.scaling_efficiency, 3), fmt(r.peak_memory_mib, 0),
          fmt(r.mean_utilization_pct, 1), fmt(r.energy_per_sample_j, 3)]
         for r in summary])


def failures_table(runs: Sequence[dict[str, Any]]) -> str | None:
    bad = [r for r in runs if r.get("status") != "ok"]
    if not bad:
        return None
    return md_table(["case", "repeat", "status", "reason"],
                    [[r["case_id"], r["repeat"], r["status"],
                      str(r.get("error", "")).replace("|", "\\|").replace("\n", " ")]
                     for r in bad])


def render_report(title: str, summary: Sequence[SummaryRow], runs: Sequence[dict[str, Any]],
                  notes: Sequence[str] = ()) -> str:
    parts = [f"# {title}", ""]
    parts += [f"- {n}" for n in notes]
    parts += ["- throughput: samples/s over the measured window (warm-up dropped), median of "
              "the repeats; speedup: against the 1-node-1-GPU median of the same framework, "
              f"model, precision, batch size and model size (`{MISSING}` where there is none).",
              ""]
    for title_, table in per_batch_tables(summary):
        parts += [f"### {title_}", "", table, ""]
    parts += ["### Summary", "", summary_table(summary), ""]
    parts += ["### All Results", "", all_results_table(runs), ""]
    failed = failures_table(runs)
    if failed:
        parts += ["### Failed runs", "", failed, ""]
    variants = sorted({r.variant for r in summary})
    if variants:
        parts += ["### Model variants", ""] + [f"- `{v}`" for v in variants] + [""]
    return "\n".join(parts)
