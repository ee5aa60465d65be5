"""The benchmark reports' GPT table from run rows: `group | case | latency | memory | throughput |
TFLOP/s per GPU | % of peak`, one line per case (the median of its repeats), cases under their
group (DP, MP, 2D, PP) as in the OneFlow GPT report (`examples/reference/001_*`). Pure functions
over rows; `python -m toolkit.gpt_table RESULTS` writes the table of a results directory.

Figures per case, over its `ok` runs:
- latency: milliseconds per iteration over the measured window, global batch / samples per s
  (so latency x throughput = global batch, as in the published report);
- memory: peak GPU memory in MiB, the largest rank's (NVML; the framework's allocator peak
  where NVML gave nothing, and the table says so);
- throughput: samples/s; TFLOP/s per GPU and % of peak: `toolkit.analysis.flops` (Megatron-LM's GPT
  formula, 72 without and 96 with activation recomputation; which one is printed with the table);
- compile: eager or compiled (and the torch.compile mode), as the ranks recorded it.

The group comes from the report's case names (`DP_...`, `MP_...`, `2D_...`, `..._PP_...`),
else from the row's dp, tp and pp columns (pp > 1: PP; tp and dp > 1: 2D; tp > 1: MP; else DP).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.analysis.numbers import finite
from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.analysis.throughput import median
from toolkit.report.tables import (
    CROWDED_WORDS,
    MISSING,
    OVERSUBSCRIBED_MARK,
    mark_oversubscribed,
    md_table,
)
from toolkit.report.text import md_prose
from toolkit.results.layout import grid_file

GROUPS = ("DP", "MP", "2D", "PP", "3D")
"""Seed order; other groups follow."""
HEADER = ["group", "case", "latency", "memory", "throughput (samples/s)", "TFLOP/s per GPU",
          "% of peak", "compile"]
CSV_COLUMNS = ["group", "case", "runs_ok", "runs_failed", "gpus", "global_batch_size",
               "latency_ms", "memory_mib", "memory_source", "throughput_sps", "tflops_per_gpu",
               "mfu_pct", "flops_formula", "device", "compile", "runs_oversubscribed",
               "runs_crowded", "error"]


@dataclass(frozen=True)
class GptTable:
    markdown: str
    """Notes (formula, definitions) and the table."""
    records: list[dict[str, Any]]
    """One dict per case, keys `CSV_COLUMNS`, in table order."""
    rows: list[list[str]] = field(default_factory=list)
    """The table's cells (HEADER columns), group rows included."""
    notes: str = ""


def layout_of(row: Mapping[str, Any]) -> tuple[int, int, int]:
    """(dp, tp, pp) of a run row, from its typed columns; dp, where unknown, the ranks left
    over by tp x pp."""
    tp, pp = int(row.get("tp") or 1), int(row.get("pp") or 1)
    gpus = int(row.get("num_nodes") or 1) * int(row.get("gpus_per_node") or 1)
    dp = row.get("dp")
    return (int(dp) if dp else max(1, gpus // (tp * pp))), tp, pp


def case_group(case_id: str, layout: tuple[int, int, int] = (1, 1, 1)) -> str:
    """The report's group of a case: from its name where it follows the report, else its layout."""
    if "_PP_" in case_id or case_id.startswith("PP_"):
        return "PP"
    prefix = case_id.split("_", 1)[0]
    if prefix in GROUPS:
        return prefix
    dp, tp, pp = layout
    if pp > 1:
        return "PP"
    if tp > 1:
        return "2D" if dp > 1 else "MP"
    return "DP"



def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def case_record(case_id: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of one case (median over its ok runs); `None` where unknown."""
    ok = [r for r in runs
          if r.get("status") == "ok" and finite(r.get("throughput_sps"), parse_text=True)]
    first = runs[0]
    gbs = finite(first.get("global_batch_size"), parse_text=True)
    nvml = _median(finite(r.get("peak_memory_mib"), parse_text=True) for r in ok)
    torch_peak = _median(finite(r.get("framework_peak_memory_mib"), parse_text=True) for r in ok)
    mfu = _median(finite(r.get("mfu"), parse_text=True) for r in ok)
    formulas = sorted({str(r["flops_formula"]) for r in ok if r.get("flops_formula")})
    devices = sorted({str(r["device"]) for r in ok if r.get("device")})
    compiled = sorted({str(r["compile"]) for r in runs if r.get("compile")})
    errors = [str(r.get("error") or r.get("status")) for r in runs if r.get("status") != "ok"]
    return {
        "group": case_group(case_id, layout_of(first)),
        "case": case_id,
        "runs_ok": len(ok),
        "runs_failed": len(runs) - len(ok),
        "gpus": int(first.get("num_nodes") or 1) * int(first.get("gpus_per_node") or 1),
        "global_batch_size": int(gbs) if gbs else None,
        "latency_ms": _median(gbs / float(r["throughput_sps"]) * 1000.0 for r in ok)
        if gbs else None,
        "memory_mib": nvml if nvml is not None else torch_peak,
        "memory_source": "nvml" if nvml is not None else ("torch" if torch_peak else None),
        "throughput_sps": _median(finite(r.get("throughput_sps"), parse_text=True) for r in ok),
        "tflops_per_gpu": _median(finite(r.get("tflops_per_gpu"), parse_text=True) for r in ok),
        "mfu_pct": mfu * 100.0 if mfu is not None else None,
        "flops_formula": "; ".join(formulas) or None,
        "device": ", ".join(devices) or None,
        "compile": ", ".join(compiled) or None,
        "runs_oversubscribed": sum(1 for r in ok if r.get(OVERSUBSCRIBED)),
        "runs_crowded": sum(1 for r in ok if r.get(HOST_CROWDED)),
        "error": errors[0] if errors else "",
    }


def gpt_records(rows: Iterable[Mapping[str, Any]],
                order: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Per-case records of the GPT rows, grouped in the published order; within a group in `order`
    (e.g. the grid's case order) where given, else by GPU count and name."""
    by_case: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("model") == "gpt":
            by_case.setdefault(str(row.get("case_id")), []).append(row)
    records = [case_record(cid, runs) for cid, runs in by_case.items()]
    position = {cid: i for i, cid in enumerate(order)}
    extra_groups = sorted({r["group"] for r in records} - set(GROUPS))
    group_rank = {g: i for i, g in enumerate([*GROUPS, *extra_groups])}
    records.sort(key=lambda r: (group_rank[r["group"]], position.get(r["case"], len(position)),
                                r["gpus"], r["case"]))
    return records


def _cell(value: float | None, digits: int, unit: str = "") -> str:
    if value is None:
        return MISSING
    return f"{value:.{digits}f}" + (f" ({unit})" if unit else "")


def gpt_table(rows: Iterable[Mapping[str, Any]], order: Sequence[str] = ()) -> GptTable:
    """The markdown table in the published shape (with the notes that define it) and its records."""
    records = gpt_records(rows, order)
    lines: list[list[str]] = []
    group = None
    for r in records:
        if r["group"] != group:
            group = r["group"]
            lines.append([group, *[""] * (len(HEADER) - 1)])
        memory = _cell(r["memory_mib"], 0, "MiB")
        if r["memory_source"] == "torch":
            memory += " (torch)"
        case = r["case"] if not r["runs_failed"] else (
            f"{r['case']} ({r['runs_failed']} failed)")
        lines.append(["--", case, _cell(r["latency_ms"], 2, "ms"), memory,
                      mark_oversubscribed(_cell(r["throughput_sps"], 2),
                                          bool(r["runs_oversubscribed"] or r["runs_crowded"])),
                      _cell(r["tflops_per_gpu"], 1),
                      _cell(r["mfu_pct"], 1), r["compile"] or MISSING])
    formulas = sorted({f for r in records if r["flops_formula"]
                       for f in str(r["flops_formula"]).split("; ")})
    devices = sorted({d for r in records if r["device"] for d in str(r["device"]).split(", ")})
    notes = [
        "- latency: ms per iteration over the measured window (global batch / samples per s); "
        "memory: peak GPU memory of the largest rank (NVML; `(torch)`: the allocator's peak "
        "where NVML gave nothing); throughput: samples/s; each the median of the case's ok runs.",
        "- TFLOP/s per GPU = FLOPs per sample x samples/s / GPUs, FLOPs per sample by "
        + (", ".join(f"`{f}`" for f in formulas) if formulas else "no formula (missing)")
        + " (Megatron-LM: 72·s·l·h²·(1 + s/6h + V/12lh) without recomputation, "
        "96·s·l·h²·(1 + s/6h + V/16lh) with it); % of peak: against the device's dense peak "
        "for the precision (`toolkit.analysis.flops`)" + (f"; devices: {', '.join(devices)}."
                                                 if devices else "."),
        "- compile: how the case's model ran (`eager`, `compiled` with torch.compile's default "
        "mode, or `compiled (<mode>)`), as its ranks recorded it.",
    ]
    crowded = [f"{r['case']}: {r['runs_oversubscribed']} of {r['runs_ok']} run(s)"
               for r in records if r["runs_oversubscribed"]]
    if crowded:
        notes.append(f"- {OVERSUBSCRIBED_MARK} oversubscribed: ranks shared their CPUs with other "
                     "ranks or another run, so the figure measures contention (runs.csv "
                     "column `oversubscribed` says with what): " + "; ".join(crowded) + ".")
    loaded = [f"{r['case']}: {r['runs_crowded']} of {r['runs_ok']} run(s)"
              for r in records if r["runs_crowded"]]
    if loaded:
        notes.append(f"- {OVERSUBSCRIBED_MARK} {CROWDED_WORDS}: " + "; ".join(loaded) + ".")
    markdown = "\n".join([*map(md_prose, notes), "", md_table(HEADER, lines)]) + "\n"
    return GptTable(markdown=markdown, records=records, rows=lines, notes="\n".join(notes))


def grid_order(results: Path) -> list[str]:
    """Case ids in the grid's order, from the resolved grid submit wrote."""
    import yaml

    try:
        doc = yaml.safe_load(grid_file(results).read_text())
    except (OSError, yaml.YAMLError):
        return []
    cases = doc.get("cases") if isinstance(doc, dict) else None
    return [str(c["id"]) for c in cases or [] if isinstance(c, dict) and "id" in c]


