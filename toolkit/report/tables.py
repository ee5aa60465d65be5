"""The report's tables as data: one builder per table shape of the published reports. No I/O.

Each builder returns a `TableSet`: the tables to show (markdown and HTML render the same
`Table`s, with figures already formatted) and the records for its CSV (raw numbers, one row per
table row, with the grouping columns the titles carry). Shapes, after the published reports:

- `per_batch_size`: `| num_nodes | gpu_num_per_node | batch_size_per_device | throughput |
  speedup |` per framework/model/precision/variant and batch size (median of the repeats;
  speedup against the 1n1g median, `missing` where there is none), plus `TFLOP/s per GPU` and
  `MFU %` where the FLOPs are known (`toolkit.analysis.flops`);
- `gpu_memory`: the OneFlow-Benchmark table `| node num | gpus/nodes | gpu num | bsz/gpu | GPU
  Memory Usage | Throughput | Speedup |`, for groups with measured memory;
- `frameworks`: the cross-framework pivot, one throughput, speedup and memory column per
  framework, per model/precision/batch size;
- `summary`, `all_results` (one row per run), `failed_runs`, `unread_files`, `skipped_files`.

A case whose throughput spread over its repeats (`SummaryRow.throughput_spread`) exceeds the
threshold gets `SPREAD_MARK` next to its throughput in `per_batch_size` and `summary`, and the
table's note states the rule once (`spread_note`). Likewise a figure from runs that measured
contention carries OVERSUBSCRIBED_MARK (runs whose ranks shared their CPUs, `oversubscribed`, and
runs measured while other processes took their host's CPUs, `host_crowded`), and a speedup whose
efficiency is above 1 carries SUPERLINEAR_MARK, in every table that shows it; the note says why
(`flag_note`).

The GPT table has its own module (`toolkit.report.gpt`); `toolkit.report.markdown` puts them
together.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.analysis.kernels import CATEGORIES, IDLE, column
from toolkit.analysis.numbers import finite
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.analysis.summary import (
    SPREAD_THRESHOLD,
    SummaryRow,
    is_split,
    layout_label,
    micro_batches,
    model_variant,
)
from toolkit.report.text import md_cell

MISSING = "missing"
SPREAD_MARK = "⚠"
OVERSUBSCRIBED_MARK = "†"
SUPERLINEAR_MARK = "‡"
SPREAD_DEFINITION = "spread = (max - min) / median of the throughput over a case's finished repeats"


def fmt(value: float | None, digits: int = 1) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def fmt_pct(fraction: float | None, digits: int = 1) -> str:
    return MISSING if fraction is None else f"{100 * fraction:.{digits}f}"


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass(frozen=True)
class TableSet:
    """Tables of one shape, and the CSV (`tables/<key>.csv`) that holds all their rows."""

    key: str
    heading: str
    tables: list[Table]
    records: list[dict[str, Any]] = field(default_factory=list)
    empty_note: str = ""
    """Said instead of tables when there are none (why the section is empty)."""


def unstable(r: SummaryRow, threshold: float) -> bool:
    """The case's repeats spread by more than `threshold`: its median is not a stable figure."""
    return r.throughput_spread is not None and r.throughput_spread > threshold


def fmt_throughput(r: SummaryRow, threshold: float) -> str:
    """The median throughput, with SPREAD_MARK when the repeats spread by more than threshold
    and OVERSUBSCRIBED_MARK when some of its runs were oversubscribed."""
    text = fmt_case_throughput(r)
    return f"{text} {SPREAD_MARK}" if unstable(r, threshold) else text


def mark_oversubscribed(text: str, oversubscribed: bool) -> str:
    return f"{text} {OVERSUBSCRIBED_MARK}" if oversubscribed else text


def fmt_speedup(r: SummaryRow, value: float | None, digits: int = 2) -> str:
    """A speedup or efficiency of `r`, with SUPERLINEAR_MARK when the efficiency is above 1."""
    text = fmt(value, digits)
    return f"{text} {SUPERLINEAR_MARK}" if r.superlinear and value is not None else text


def fmt_case_throughput(r: SummaryRow, digits: int = 1) -> str:
    """The median throughput with OVERSUBSCRIBED_MARK when some of its runs were
    oversubscribed or crowded."""
    return mark_oversubscribed(fmt(r.throughput_median_sps, digits), contended(r))


def contended(r: SummaryRow) -> bool:
    """Some of the case's runs measured contention: oversubscribed or crowded."""
    return r.runs_oversubscribed > 0 or r.runs_crowded > 0


CROWDED_WORDS = ("crowded: other processes, none of the run's ranks, took CPU time of a "
                 "saturated host while it trained, so the figure is low by what they took "
                 "(runs.csv column `host_crowded` says how much)")
"""What OVERSUBSCRIBED_MARK means for a run whose host other processes crowded."""


def flag_note(rows: Iterable[SummaryRow]) -> str:
    """Why figures carry OVERSUBSCRIBED_MARK or SUPERLINEAR_MARK, per case; '' when none
    does."""
    rows = list(rows)
    labels = dict(zip(map(id, rows), case_labels(rows), strict=True))
    over = [f"{labels[id(r)]}: {r.runs_oversubscribed} of {r.runs_ok} run(s)" for r in rows
            if r.runs_oversubscribed]
    crowded = [f"{labels[id(r)]}: {r.runs_crowded} of {r.runs_ok} run(s)" for r in rows
               if r.runs_crowded]
    superlinear = [f"{labels[id(r)]}: {r.superlinear}" for r in rows if r.superlinear]
    notes = []
    if over:
        notes.append(f"{OVERSUBSCRIBED_MARK} oversubscribed: ranks shared their CPUs (or their "
                     "GPUs) with other ranks or another run at the same time, so the figure "
                     "measures contention, not the benchmark (runs.csv column `oversubscribed` "
                     "says with what): "
                     + "; ".join(over))
    if crowded:
        notes.append(f"{OVERSUBSCRIBED_MARK} {CROWDED_WORDS}: " + "; ".join(crowded))
    if superlinear:
        notes.append(f"{SUPERLINEAR_MARK} scaling efficiency above 1: "
                     + " | ".join(superlinear))
    return "; ".join(notes)


def spread_note(rows: Iterable[SummaryRow], threshold: float) -> str:
    """The rule, once, and each flagged case; '' when none is flagged."""
    flagged = [r for r in rows if unstable(r, threshold)]
    if not flagged:
        return ""
    cases = "; ".join(f"{label}: {fmt_pct(r.throughput_spread)}% over {r.runs_ok} repeats"
                      for label, r in zip(case_labels(flagged), flagged, strict=True))
    return (f"{SPREAD_MARK} spread > {100 * threshold:g}% over the repeats: the median is not "
            f"a stable figure ({SPREAD_DEFINITION}): {cases}")


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def group_title(r: SummaryRow) -> str:
    return f"{r.model} {r.framework} {r.precision}"


def case_labels(rows: list[SummaryRow]) -> list[str]:
    """Each case in words that tell it from the others listed (`bert_base torch fp32 1n1g
    bs8`, its layout and micro-batch where it is split, its name where it has one; the variant
    is added only where two would still read the same)."""
    plain = [f"{group_title(r)} {r.num_nodes}n{r.gpus_per_node}g bs{r.batch_size_per_device}"
             + (f" {layout_text(r)}" if r.split else "") + (f" [{r.name}]" if r.name else "")
             for r in rows]
    return [f"{label} ({r.variant})" if r.variant and plain.count(label) > 1 else label
            for label, r in zip(plain, rows, strict=True)]


def _variant_note(variant: str) -> str:
    return f"variant: `{variant}`" if variant else ""


LAYOUT_HEADER = ["dp x tp x pp", "micro-batch"]
LAYOUT_DEFINITION = ("dp x tp x pp: data-, tensor- and pipeline-parallel degrees; micro-batch: "
                     "samples per micro-batch x micro-batches per step")


def layout_text(r: SummaryRow) -> str:
    """`1x2x1, mb 8 x 16`: the layout, and the micro-batches where the batch is split."""
    return f"{r.layout}, mb {micro_batch_text(r)}" if (r.micro_batches or 1) > 1 else r.layout


def micro_batch_text(r: SummaryRow) -> str:
    return micro_batch_label(r.batch_size_per_device, r.micro_batch_size)


def micro_batch_label(batch_size_per_device: int, micro_batch_size: int | None) -> str:
    """`8 x 16`: samples per micro-batch x micro-batches per step; MISSING where unknown."""
    count = micro_batches(batch_size_per_device, micro_batch_size)
    return f"{micro_batch_size} x {count}" if count is not None else MISSING


def speedup_notes(rows: Sequence[SummaryRow]) -> str:
    """For the rows of a table: which one-GPU case each split layout's speedup is against
    (where it is not the row's own variant), and where the two sides ran differently."""
    notes = []
    for label, r in zip(case_labels(list(rows)), rows, strict=True):
        if r.gpus == 1 or r.speedup is None:
            continue
        against = f"speedup against {r.baseline_case}" if r.split else ""
        if against or r.speedup_note:
            notes.append(f"{label}: " + "; ".join(n for n in (against, r.speedup_note) if n))
    return "; ".join(notes)


_GROUP = ("framework", "model", "precision", "variant")


def _by_group_and_batch(summary: Sequence[SummaryRow]
                        ) -> dict[tuple[str, str, str, str, int], list[SummaryRow]]:
    """Rows per framework, model, precision, model variant (the variant without the parallel
    layout: one GPU, dp, tp and pp of one model share a table) and batch size."""
    groups: dict[tuple[str, str, str, str, int], list[SummaryRow]] = {}
    for r in summary:
        groups.setdefault((r.framework, r.model, r.precision, model_variant(r.variant),
                           r.batch_size_per_device), []).append(r)
    return {k: sorted(v, key=lambda r: (r.gpus, r.num_nodes, r.tp, r.pp, r.layout,
                                        -(r.micro_batch_size or 0), r.name))
            for k, v in groups.items()}


def _group_record(r: SummaryRow) -> dict[str, Any]:
    return {"framework": r.framework, "model": r.model, "precision": r.precision,
            "variant": r.variant, "num_nodes": r.num_nodes, "gpus_per_node": r.gpus_per_node,
            "gpus": r.gpus, "batch_size_per_device": r.batch_size_per_device, "dp": r.dp,
            "tp": r.tp, "pp": r.pp, "micro_batch_size": r.micro_batch_size, "name": r.name,
            "baseline_case": r.baseline_case, "speedup_note": r.speedup_note}


def per_batch_size(summary: Sequence[SummaryRow],
                   spread_threshold: float = SPREAD_THRESHOLD) -> TableSet:
    """The benchmark reports' main table; FLOP columns only where a row of the table knows them.
    A throughput whose repeats spread by more than `spread_threshold` carries SPREAD_MARK."""
    tables, records = [], []
    for (_, _, _, variant, bs), rows in _by_group_and_batch(summary).items():
        header = ["num_nodes", "gpu_num_per_node", "batch_size_per_device", "throughput",
                  "speedup"]
        with_layout = any(r.split for r in rows)
        with_name = any(r.name for r in rows)
        if with_layout:
            header[3:3] = LAYOUT_HEADER
        if with_name:
            header.insert(0, "case")
        with_compile = any(r.compile for r in rows)
        with_flops = any(r.tflops_per_gpu is not None for r in rows)
        with_mfu = any(r.mfu is not None for r in rows)
        with_measured = any(r.mfu_measured is not None for r in rows)
        if with_flops:
            header.append("TFLOP/s per GPU")
        if with_mfu:
            header.append("MFU %")
        if with_measured:
            header.append("% of measured peak")
        if with_compile:
            header.append("compile")
        body = []
        for r in rows:
            cells = [str(r.num_nodes), str(r.gpus_per_node), str(r.batch_size_per_device),
                     fmt_throughput(r, spread_threshold), fmt_speedup(r, r.speedup)]
            if with_layout:
                cells[3:3] = [r.layout, micro_batch_text(r)]
            if with_name:
                cells.insert(0, r.name or "-")
            if with_flops:
                cells.append(fmt(r.tflops_per_gpu, 2))
            if with_mfu:
                cells.append(fmt_pct(r.mfu))
            if with_measured:
                cells.append(fmt_pct(r.mfu_measured))
            if with_compile:
                cells.append(r.compile or MISSING)
            body.append(cells)
            records.append({**_group_record(r), "throughput_sps": r.throughput_median_sps,
                            "speedup": r.speedup, "scaling_efficiency": r.scaling_efficiency,
                            "runs_ok": r.runs_ok, "throughput_spread": r.throughput_spread,
                            "spread_flagged": unstable(r, spread_threshold),
                            "runs_oversubscribed": r.runs_oversubscribed,
                            "runs_crowded": r.runs_crowded,
                            "superlinear": r.superlinear,
                            "tflops_per_gpu": r.tflops_per_gpu, "mfu": r.mfu,
                            "mfu_measured": r.mfu_measured, "compile": r.compile})
        peaks = ("MFU %: of the datasheet's dense peak; % of measured peak: of the GEMM peak "
                 "the preflight measured on these GPUs") if with_measured else ""
        tables.append(Table(f"{group_title(rows[0])}, batch size = {bs}", header, body,
                            _join(_variant_note(variant),
                                  LAYOUT_DEFINITION if with_layout else "",
                                  speedup_notes(rows), spread_note(rows, spread_threshold),
                                  flag_note(rows), peaks)))
    return TableSet("per_batch_size", "Throughput and speedup (median of repeats)", tables,
                    records, "no runs")


def gpu_memory(summary: Sequence[SummaryRow]) -> TableSet:
    """OneFlow-Benchmark's table (`examples/reference/003_*`): memory, throughput and speedup
    per topology."""
    tables, records = [], []
    for (_, _, _, variant, bs), rows in _by_group_and_batch(summary).items():
        if all(r.peak_memory_mib is None for r in rows):
            continue
        body = [[str(r.num_nodes), str(r.gpus_per_node), str(r.gpus),
                 str(r.batch_size_per_device), fmt(r.peak_memory_mib, 0),
                 fmt_case_throughput(r, 3), fmt_speedup(r, r.speedup)] for r in rows]
        records += [{**_group_record(r), "peak_memory_mib": r.peak_memory_mib,
                     "throughput_sps": r.throughput_median_sps, "speedup": r.speedup}
                    for r in rows]
        title = (f"{rows[0].model} {rows[0].framework}, batch size per device = {bs}, "
                 f"dtype = {rows[0].precision}")
        tables.append(Table(title, ["node num", "gpus/nodes", "gpu num", "bsz/gpu",
                                    "GPU Memory Usage", "Throughput", "Speedup"], body,
                            _join(_variant_note(variant), flag_note(rows))))
    return TableSet("gpu_memory", "GPU memory (OneFlow-Benchmark table)", tables, records,
                    "no GPU memory measured (CPU runs, or logs without an nvidia-smi dump)")


def frameworks(summary: Sequence[SummaryRow]) -> TableSet:
    """The cross-framework pivot: per model/precision/batch size, one column set per framework.

    A framework with several variants at the same point gets one column set per variant
    (`torch [2]`), listed under the table, so no two different configurations share a column.
    """
    names = sorted({r.framework for r in summary})
    if len(names) < 2:
        only = names[0] if names else "none"
        return TableSet("frameworks", "Frameworks side by side", [], [],
                        f"one framework in these results ({only}): nothing to set side by "
                        "side")
    groups: dict[tuple[str, str, int], list[SummaryRow]] = {}
    for r in summary:
        groups.setdefault((r.model, r.precision, r.batch_size_per_device), []).append(r)
    tables, records = [], []
    for (model, precision, bs), rows in sorted(groups.items()):
        columns = sorted({(r.framework, r.variant) for r in rows})
        if len({fw for fw, _ in columns}) < 2:
            continue
        labels = _column_labels(columns)
        points = sorted({(r.num_nodes, r.gpus_per_node) for r in rows},
                        key=lambda p: (p[0] * p[1], p[0]))
        cell = {(r.framework, r.variant, r.num_nodes, r.gpus_per_node): r for r in rows}
        with_memory = any(r.peak_memory_mib is not None for r in rows)
        header = ["num_nodes", "gpu_num_per_node", "batch_size_per_device"]
        header += [f"{labels[c]} samples/s" for c in columns]
        header += [f"{labels[c]} speedup" for c in columns]
        if with_memory:
            header += [f"{labels[c]} memory (MiB)" for c in columns]
        body = []
        for nodes, gpn in points:
            found = [cell.get((fw, v, nodes, gpn)) for fw, v in columns]
            cells = [str(nodes), str(gpn), str(bs)]
            cells += [fmt_case_throughput(s) if s else "" for s in found]
            cells += [fmt_speedup(s, s.speedup) if s else "" for s in found]
            if with_memory:
                cells += [fmt(s.peak_memory_mib, 0) if s else "" for s in found]
            body.append(cells)
            record: dict[str, Any] = {"model": model, "precision": precision,
                                      "num_nodes": nodes, "gpus_per_node": gpn,
                                      "batch_size_per_device": bs}
            for c, s in zip(columns, found, strict=True):
                record[f"{labels[c]} throughput_sps"] = s.throughput_median_sps if s else None
                record[f"{labels[c]} speedup"] = s.speedup if s else None
                record[f"{labels[c]} peak_memory_mib"] = s.peak_memory_mib if s else None
            records.append(record)
        legend = "; ".join(f"{labels[c]}: `{c[1]}`" for c in columns if c[1])
        tables.append(Table(f"{model} {precision}, batch size = {bs}", header, body,
                            _join(f"variants: {legend}" if legend else "", flag_note(rows))))
    return TableSet("frameworks", "Frameworks side by side", tables, records,
                    "no model, precision and batch size was run by more than one framework")


def _column_labels(columns: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    counts: dict[str, int] = {}
    for fw, _ in columns:
        counts[fw] = counts.get(fw, 0) + 1
    labels, seen = {}, dict.fromkeys(counts, 0)
    for fw, variant in columns:
        seen[fw] += 1
        labels[(fw, variant)] = fw if counts[fw] == 1 else f"{fw} [{seen[fw]}]"
    return labels


def summary(summary: Sequence[SummaryRow],
            spread_threshold: float = SPREAD_THRESHOLD) -> TableSet:
    with_layout = any(r.split for r in summary)
    body = [[r.case_ids, *([layout_text(r)] if with_layout else []), str(r.gpus),
             f"{r.runs_ok}" + (f" (+{r.runs_failed} failed)" if r.runs_failed else ""),
             fmt_throughput(r, spread_threshold), fmt(r.throughput_min_sps),
             fmt(r.throughput_max_sps), fmt_pct(r.throughput_spread),
             fmt_speedup(r, r.speedup), fmt_speedup(r, r.scaling_efficiency, 3),
             fmt(r.peak_memory_mib, 0),
             fmt(r.mean_utilization_pct, 1), fmt(r.energy_per_sample_j, 3),
             fmt(r.tflops_per_gpu, 2), fmt_pct(r.mfu), r.compile or MISSING,
             _start_up(r), fmt(r.compile_s, 1)]
            for r in summary]
    header = ["case", *(["layout"] if with_layout else []), "GPUs", "runs",
              "median samples/s", "min", "max", "spread %", "speedup", "efficiency",
              "memory (MiB)", "GPU util %", "J/sample", "TFLOP/s per GPU", "MFU %", "compile",
              "to 1st iteration s", "compile s"]
    note = _join(f"spread %: {SPREAD_DEFINITION}" if body else "",
                 "layout: dp x tp x pp, and the micro-batch size x micro-batches per step "
                 "where a step is split" if with_layout else "",
                 speedup_notes(summary),
                 START_UP_DEFINITION if body else "",
                 spread_note(summary, spread_threshold), flag_note(summary))
    return TableSet("summary", "Summary", [Table("", header, body, note)] if body else [],
                    [r.to_dict() for r in summary], "no runs")


START_UP_DEFINITION = (
    "compile: how the model ran (eager, or compiled and torch.compile's mode); to 1st "
    "iteration s: from the run's launch to the end of its first iteration, median over the "
    "repeats (the longest in brackets where it differs: the first repeat pays the cold "
    "compile caches); compile s: rank 0's time in torch.compile, median")


def _start_up(r: SummaryRow) -> str:
    text = fmt(r.start_to_first_iteration_s, 1)
    longest = r.start_to_first_iteration_max_s
    if longest is not None and r.start_to_first_iteration_s is not None and \
            longest - r.start_to_first_iteration_s >= 0.05:
        text += f" ({fmt(longest, 1)})"
    return text


_RUN_COLUMNS = ("case_id", "repeat", "status", "framework", "model", "precision", "variant",
                "num_nodes", "gpus_per_node", "batch_size_per_device", "dp", "tp", "pp",
                "micro_batch_size", "name", "throughput_sps",
                "method", "peak_memory_mib", "tflops_per_gpu", "mfu", "compile",
                "start_to_first_iteration_s", "compile_s", "compile_cache", "exit_s", "source",
                "error")


#: Where a run ran (meta.json): its site profile and its container (runtime:image); and what
#: the toolkit chose from the link between its nodes: NCCL's settings and the gradient
#: reduction (`toolkit.results.runs.placement`).
_PLACEMENT_COLUMNS = ("site", "container", "nccl_settings", "grad_reduce_chosen")


LINK_CHOICES = {
    "nccl_settings": "nccl_settings: what the toolkit set for NCCL from the link between the "
                     "run's nodes (meta.json's nccl_settings_reason says why)",
    "grad_reduce_chosen": "grad_reduce_chosen: the gradient reduction the toolkit chose from "
                          "the link, bf16 where the link's time for a step's gradients exceeds "
                          "the backward's (meta.json's grad_reduce_choice has every figure)",
}
"""The notes under All Results for the columns of what the toolkit chose from the link."""


def _run_layout(r: dict[str, Any]) -> tuple[str, str, bool]:
    """(`dp x tp x pp`, `micro-batch x count`, whether the run is split) of a run row, labelled
    as a summary row's are."""
    tp, pp = int(r.get("tp") or 1), int(r.get("pp") or 1)
    gpus = int(r["num_nodes"]) * int(r["gpus_per_node"])
    bs = int(r["batch_size_per_device"])
    mbs = int(r["micro_batch_size"]) if r.get("micro_batch_size") else None
    return (layout_label(gpus, tp, pp, int(r["dp"]) if r.get("dp") else None),
            micro_batch_label(bs, mbs), is_split(tp, pp, micro_batches(bs, mbs)))


def all_results(runs: Sequence[dict[str, Any]]) -> TableSet:
    """The benchmark reports' `All Results`: every counted run, per framework, model,
    precision and model variant (one GPU, dp, tp and pp of one model in one table, told apart
    by their layout and, for a named case, its name)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in runs:
        if r.get("status") == "ok":
            key = (str(r.get("framework") or ""), str(r.get("model") or ""),
                   str(r.get("precision") or ""), model_variant(str(r.get("variant") or "")))
            groups.setdefault(key, []).append(r)
    tables = []
    for (fw, model, precision, variant), rows in groups.items():
        rows = sorted(rows, key=lambda r: (-int(r["batch_size_per_device"]),
                                           int(r["num_nodes"]) * int(r["gpus_per_node"]),
                                           int(r["num_nodes"]), _run_layout(r)[0],
                                           str(r.get("case_id")), int(r.get("repeat") or 0)))
        # Where each run ran, when any of them names a site or a container.
        where = [k for k in _PLACEMENT_COLUMNS if any(r.get(k) for r in rows)]
        with_layout = any(_run_layout(r)[2] for r in rows)
        with_name = any(r.get("name") for r in rows)
        body = []
        for r in rows:
            cells = [str(r["num_nodes"]), str(r["gpus_per_node"]),
                     str(r["batch_size_per_device"]),
                     mark_oversubscribed(fmt(finite(r.get("throughput_sps"))),
                                         bool(r.get(OVERSUBSCRIBED) or r.get(HOST_CROWDED))),
                     *(str(r.get(k) or "-") for k in where)]
            if with_layout:
                cells[3:3] = list(_run_layout(r)[:2])
            if with_name:
                cells.insert(0, str(r.get("name") or "-"))
            body.append(cells)
        header = ["num_nodes", "gpu_num_per_node", "batch_size_per_device", "throughput",
                  *where]
        if with_layout:
            header[3:3] = LAYOUT_HEADER
        if with_name:
            header.insert(0, "case")
        tables.append(Table(f"All Results: {model} {fw} {precision}", header, body,
                            _join(_variant_note(variant),
                                  LAYOUT_DEFINITION if with_layout else "",
                                  *(LINK_CHOICES[k] for k in where if k in LINK_CHOICES),
                                  _oversubscribed_runs_note(rows))))
    placed = [k for k in (*_PLACEMENT_COLUMNS, OVERSUBSCRIBED, HOST_CROWDED)
              if any(r.get(k) for r in runs)]
    records = [{k: r.get(k) for k in (*_RUN_COLUMNS, *placed)} for r in runs]
    return TableSet("all_results", "All Results", tables, records, "no run finished")


def _oversubscribed_runs_note(runs: Sequence[dict[str, Any]]) -> str:
    """Why each run's figure carries OVERSUBSCRIBED_MARK (oversubscribed, crowded); '' when
    none does."""
    notes = []
    for key, words in ((OVERSUBSCRIBED, "oversubscribed, the figure measures contention"),
                       (HOST_CROWDED, CROWDED_WORDS)):
        flagged = [f"{r.get('case_id')} r{r.get('repeat')}: {r.get(key)}" for r in runs
                   if r.get(key)]
        if flagged:
            notes.append(f"{OVERSUBSCRIBED_MARK} {words}: " + "; ".join(flagged))
    return "; ".join(notes)


def failed_runs(runs: Sequence[dict[str, Any]]) -> TableSet:
    bad = [r for r in runs if r.get("status") != "ok"]
    body = [[str(r["case_id"]), str(r["repeat"]), str(r["status"]), _one_line(r.get("error"))]
            for r in bad]
    return TableSet("failed_runs", "Failed runs",
                    [Table("", ["case", "repeat", "status", "reason"], body)] if body else [],
                    [{k: r.get(k) for k in ("case_id", "repeat", "status", "source", "error")}
                     for r in bad], "")


NOT_RUN_HEADING = "Runs that did not run"


def not_run(missing: Sequence[dict[str, Any]]) -> TableSet:
    """The planned runs that gave no figure and no failure of their own: never started,
    cancelled, lost, still queued or running, with why and the job (`case_id`, `repeat`,
    `state`, `reason`, `job`, `log` per run; `toolkit.launch.run_states` decides them)."""
    body = [[str(r["case_id"]), str(r["repeat"]), str(r["state"]), _one_line(r.get("reason")),
             str(r.get("job") or "-")] for r in missing]
    return TableSet("not_run", NOT_RUN_HEADING,
                    [Table("", ["case", "repeat", "state", "why", "job"], body)] if body else [],
                    [dict(r) for r in missing], "")


def profiles(runs: Sequence[dict[str, Any]],
             rank_profiles: Sequence[dict[str, Any]] = ()) -> TableSet:
    """Where the GPU time goes, per profiled rank of each profiled run (`profile:` grid
    option): the profiled steps' wall time and each kernel kind's share of it, idle included
    (`toolkit.analysis.kernels`). `rank_profiles`: profiles.csv's rows; a run without any
    there shows its runs.csv figures (the lowest profiled rank's)."""
    kinds = (*CATEGORIES, IDLE)
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in rank_profiles:
        by_run.setdefault((str(p.get("case_id")), str(p.get("repeat"))), []).append(p)
    body, records = [], []
    for r in runs:
        if finite(r.get("profile_step_ms")) is None:
            continue
        ranks = by_run.get((str(r.get("case_id")), str(r.get("repeat"))))
        for p in ranks or [{**r, "rank": r.get("profile_rank")}]:
            step = finite(p.get("profile_step_ms"))
            if step is None or step <= 0:
                continue
            ms = {k: finite(p.get(column(k))) for k in kinds}
            body.append([str(r.get("case_id")), str(r.get("repeat")), str(p.get("rank")),
                         fmt(step, 1), *(fmt_pct(v / step if v is not None else None)
                                        for v in ms.values())])
            records.append({"case_id": r.get("case_id"), "repeat": r.get("repeat"),
                            "rank": p.get("rank"), "step_ms": step,
                            **{column(k): v for k, v in ms.items()}})
    header = ["case", "repeat", "rank", "step ms", *(f"{k} %" for k in kinds)]
    note = ("% of the profiled steps' wall time (after the timed window of the case's last "
            "repeat); kernels that overlap (communication beside compute) count in full in "
            "their kind, idle is the time no kernel ran")
    return TableSet("profiles", "Where the GPU time goes (profiled runs)",
                    [Table("", header, body, note)] if body else [], records)


#: How a command case's figure was read, in words (the `measured_by` column's kinds).
MEASURED_BY_WORDS = {"pattern": "the grid's pattern", "report": "trainbench.report"}
CLOCK_WORDS = {"step_time": "the log's step times", "rate": "the log's samples/s",
               "log": "the log's timestamps", "output": "when its lines were printed"}


def measured_by(runs: Sequence[dict[str, Any]]) -> TableSet:
    """How each command case (a user's own program) was measured: what its figures were read
    from (a log family, the grid's pattern, or its `trainbench.report` records), the method and
    clock of the window, whose samples a printed rate counts (`rate_scope`), the ranks whose
    steps were timed, and why the figure is to be read with care (`figure_flag`); one row per
    case, from its first run that says, with every run's flag."""
    body, records, seen = [], [], set()
    flags: dict[Any, list[str]] = {}
    for r in runs:
        if r.get("figure_flag"):
            flags.setdefault(r.get("case_id"), []).append(str(r["figure_flag"]))
    for r in runs:
        how = r.get("measured_by")
        if not isinstance(how, str) or not how or r.get("case_id") in seen:
            continue
        seen.add(r.get("case_id"))
        read = (f"{how.removeprefix('log:')} log" if how.startswith("log:")
                else MEASURED_BY_WORDS.get(how, how))
        clock = CLOCK_WORDS.get(str(r.get("measured_clock")), str(r.get("measured_clock")))
        flag = " | ".join(dict.fromkeys(flags.get(r.get("case_id"), [])))
        body.append([str(r.get("case_id")), read, str(r.get("method")), clock,
                     str(r.get("rate_scope") or "-"), str(r.get("timed_ranks")),
                     flag or "-"])
        records.append({"case_id": r.get("case_id"), "measured_by": how,
                        "method": r.get("method"), "clock": r.get("measured_clock"),
                        "rate_scope": r.get("rate_scope") or "",
                        "timed_ranks": r.get("timed_ranks"), "figure_flag": flag})
    header = ["case", "measured by", "method", "window timed by", "rate", "timed ranks",
              "flag"]
    note = ("the measured window runs from the end of the warm-up iteration to the last "
            "measured one, as for built-in workloads; a program that logs every few steps is "
            "timed over the records it logged; a printed rate counts the whole job's samples "
            "(`command.rate: job`, the default) or its own process's (`rank`: times the "
            "data-parallel ranks); a flag says what the figure rests on that a plain number "
            "would hide")
    return TableSet("measured_by", "How each own-script case was measured (measured_by)",
                    [Table("", header, body, note)] if body else [], records)


def skipped_files(skipped: Iterable[tuple[str, str]]) -> TableSet:
    """Foreign logs that gave no row, with the reason (never dropped silently)."""
    items = list(skipped)
    body = [[path, _one_line(reason)] for path, reason in items]
    return TableSet("skipped_files", "Log files not imported",
                    [Table("", ["file", "reason"], body)] if body else [],
                    [{"file": p, "reason": r} for p, r in items], "")


def unread_files(unread: Iterable[tuple[str, str]]) -> TableSet:
    """Result files that could not be read (cut short, binary, a directory...), with why."""
    items = list(unread)
    body = [[path, _one_line(reason)] for path, reason in items]
    return TableSet("unread_files", "Result files not read",
                    [Table("", ["file", "reason"], body)] if body else [],
                    [{"file": p, "reason": r} for p, r in items], "")



def _one_line(text: Any) -> str:
    return str(text or "").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |",
             "| " + " | ".join("--------" for _ in header) + " |"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
