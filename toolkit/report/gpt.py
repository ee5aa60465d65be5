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

Two more columns hold each layout against data parallelism (`toolkit.analysis.layouts` has the
rules): `vs dp at N GPUs`, the case's throughput over the dp-only case's at its own GPU count,
and `reference vs dp`, the same ratio of the reference's matched layout (DLPerf's OneFlow GPT
report by default), with a mark where the case lost more than the reference did, and † where
either side of the ratio had runs measured under contention (oversubscribed or crowded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.analysis.layouts import (
    BASELINE,
    KEPT,
    LOST_MORE,
    LOST_MORE_NOISE_UNKNOWN,
    MATCH_KIND,
    MATCH_LAYOUT,
    MATCH_PIPELINED,
    NO_DP,
    NO_REFERENCE,
    NO_RUN,
    WITHIN_NOISE,
    LayoutCase,
    LayoutRatio,
    LayoutReference,
    kind_name,
    layout_ratios,
    layout_text,
    model_keys,
)
from toolkit.analysis.numbers import finite
from toolkit.analysis.reference import ReferenceRow
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
"""The DLPerf GPT report's order; other groups follow."""
VS_DP = "vs dp at N GPUs"
REFERENCE_VS_DP = "reference vs dp"
HEADER = ["group", "case", "latency", "memory", "throughput (samples/s)", "TFLOP/s per GPU",
          "% of peak", "compile", VS_DP, REFERENCE_VS_DP]
CSV_COLUMNS = ["group", "case", "runs_ok", "runs_failed", "gpus", "global_batch_size",
               "latency_ms", "memory_mib", "memory_source", "throughput_sps", "tflops_per_gpu",
               "mfu_pct", "flops_formula", "device", "compile", "runs_oversubscribed",
               "runs_crowded", "error", "layout", "layout_kind", "throughput_spread", "vs_dp",
               "dp_case", "vs_dp_noise", "vs_dp_contended",
               "reference_vs_dp", "reference_case", "reference_layout", "reference_gpus",
               "reference_dp_case", "reference_match", "reference_same_model",
               "layout_verdict"]
NO_RATIO = "-"
"""A ratio that cannot be given (no dp-only case, no reference layout of the kind)."""
MARKS = {LOST_MORE: "▼", LOST_MORE_NOISE_UNKNOWN: "▼?", WITHIN_NOISE: "≈"}
"""The `vs dp` cell's mark per verdict; none where the case kept as much as the reference."""


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


def tp_across_nodes(row: Mapping[str, Any]) -> bool:
    """Whether a run's tensor-parallel groups span nodes. tp varies fastest over the ranks
    (`toolkit.workloads.pytorch.gpt_parallel`) and a node's ranks are consecutive, so a group
    stays inside a node exactly where tp divides the GPUs per node; else some group's
    all-reduces, one per layer forward and backward, cross the link between nodes."""
    tp = int(row.get("tp") or 1)
    return tp > 1 and int(row.get("num_nodes") or 1) > 1 and \
        int(row.get("gpus_per_node") or 1) % tp != 0


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
    throughputs = [float(r["throughput_sps"]) for r in ok]
    middle = median(throughputs) if throughputs else None
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
        "layout": layout_text(layout_of(first)),
        "tp_across_nodes": tp_across_nodes(first),
        "layout_kind": kind_name(layout_of(first)),
        "throughput_spread": (max(throughputs) - min(throughputs)) / middle
        if middle and len(throughputs) >= 2 else None,
    }


def layout_case(record: Mapping[str, Any], first: Mapping[str, Any]) -> LayoutCase:
    """A case's record (`case_record`) and its first run row, as `toolkit.analysis.layouts`
    takes them."""
    gbs = finite(first.get("global_batch_size"), parse_text=True)
    return LayoutCase(case=record["case"], framework=str(first.get("framework") or ""),
                      precision=str(first.get("precision") or ""),
                      num_nodes=int(first.get("num_nodes") or 1),
                      gpus_per_node=int(first.get("gpus_per_node") or 1),
                      layout=layout_of(first), model=model_keys(str(first.get("variant") or "")),
                      global_batch_size=int(gbs) if gbs else None,
                      throughput_sps=record["throughput_sps"],
                      spread=record["throughput_spread"])


def gpt_records(rows: Iterable[Mapping[str, Any]], order: Sequence[str] = (),
                reference: Sequence[ReferenceRow] = ()) -> list[dict[str, Any]]:
    """Per-case records of the GPT rows, grouped in the published order; within a group in `order`
    (e.g. the grid's case order) where given, else by GPU count and name; each with its ratio
    to data parallelism and `reference`'s (`ratio_fields`)."""
    by_case: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("model") == "gpt":
            by_case.setdefault(str(row.get("case_id")), []).append(row)
    records = [case_record(cid, runs) for cid, runs in by_case.items()]
    cases = [layout_case(r, by_case[r["case"]][0]) for r in records]
    ratios = layout_ratios(cases, reference)
    for r in records:
        r.update(ratio_fields(ratios[r["case"]]))
    by_name = {r["case"]: r for r in records}
    for r in records:
        r["vs_dp_contended"] = _contended_sides(r, by_name)
    position = {cid: i for i, cid in enumerate(order)}
    extra_groups = sorted({r["group"] for r in records} - set(GROUPS))
    group_rank = {g: i for i, g in enumerate([*GROUPS, *extra_groups])}
    records.sort(key=lambda r: (group_rank[r["group"]], position.get(r["case"], len(position)),
                                r["gpus"], r["case"]))
    return records


def ratio_fields(ratio: LayoutRatio) -> dict[str, Any]:
    """A case's CSV_COLUMNS of its ratio to data parallelism and the reference's."""
    match = ratio.reference
    return {"vs_dp": ratio.vs_dp, "dp_case": ratio.dp_case.case if ratio.dp_case else None,
            "vs_dp_noise": ratio.noise,
            "reference_vs_dp": match.ratio.ratio if match else None,
            "reference_case": match.ratio.name if match else None,
            "reference_layout": layout_text(match.ratio.layout) if match else None,
            "reference_gpus": match.ratio.gpus if match else None,
            "reference_dp_case": match.ratio.dp_name if match else None,
            "reference_match": match.rule if match else None,
            "reference_same_model": match.same_model if match else None,
            "layout_verdict": ratio.verdict}


def _contended(r: Mapping[str, Any]) -> bool:
    return bool(r["runs_oversubscribed"] or r["runs_crowded"])


def _contended_sides(r: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]]) -> str:
    """Which side of a case's `vs dp` ratio measured contention (oversubscribed or crowded
    runs): `layout`, `dp`, `both`, or '' (neither, or no ratio)."""
    dp = by_name.get(r["dp_case"] or "")
    if r["vs_dp"] is None or dp is None:
        return ""
    sides = [side for side, rec in (("layout", r), ("dp", dp)) if _contended(rec)]
    return "both" if len(sides) == 2 else "".join(sides)


def _vs_dp_cell(r: Mapping[str, Any]) -> str:
    if r["layout_verdict"] == BASELINE:
        return "dp"
    if r["vs_dp"] is None:
        return NO_RATIO
    mark = MARKS.get(r["layout_verdict"], "")
    return mark_oversubscribed(f"{r['vs_dp']:.3f}" + (f" {mark}" if mark else ""),
                               bool(r["vs_dp_contended"]))


def _contended_ratio_note(records: Sequence[Mapping[str, Any]]) -> str:
    """Why `vs dp` cells carry OVERSUBSCRIBED_MARK, per case and side; '' where none does."""
    by_name = {r["case"]: r for r in records}

    def side(name: str) -> str:
        rec = by_name[name]
        what = [f"{n} {words}" for n, words in ((rec["runs_oversubscribed"], "oversubscribed"),
                                                (rec["runs_crowded"], "crowded")) if n]
        return f"{name}, {', '.join(what)} of {rec['runs_ok']} run(s)"

    flagged = []
    for r in records:
        sides = r.get("vs_dp_contended")
        if not sides:
            continue
        named = ([f"the layout's side ({side(r['case'])})"] if sides in ("layout", "both")
                 else []) + ([f"the dp side ({side(r['dp_case'])})"] if sides in ("dp", "both")
                             else [])
        flagged.append(f"{r['case']}: {' and '.join(named)}")
    if not flagged:
        return ""
    return (f"- {OVERSUBSCRIBED_MARK} on {VS_DP}: a side of the ratio measured contention "
            "(its runs oversubscribed or crowded), so the ratio is not the layouts' alone: "
            + "; ".join(flagged) + ".")


def _reference_cell(r: Mapping[str, Any]) -> str:
    if r["layout_verdict"] == BASELINE:
        return "dp"
    if r["reference_vs_dp"] is None:
        return NO_RATIO
    return f"{r['reference_vs_dp']:.3f} ({r['reference_layout']} at {r['reference_gpus']})"


def ratio_notes(records: Sequence[Mapping[str, Any]],
                reference: LayoutReference | None) -> list[str]:
    """The notes that say how the two ratio columns were made and which cases they used."""
    users: dict[str, list[str]] = {}
    for r in records:
        if r["dp_case"] and r["vs_dp"] is not None:
            users.setdefault(r["dp_case"], []).append(r["case"])
    no_dp = [r["case"] for r in records if r["layout_verdict"] == NO_DP]
    no_run = [r["case"] for r in records if r["layout_verdict"] == NO_RUN]
    said = [f"- {VS_DP}: the case's throughput over that of the data-parallel-only case "
            "(dp x 1 x 1) at its GPU count: the same nodes x GPUs per node, framework, "
            "precision and model size; of several, the one of the same global batch, else the "
            "fastest; `dp` on a dp-only case itself."]
    if users:
        said.append("Used: " + "; ".join(f"{dp} for {', '.join(cases)}"
                                         for dp, cases in users.items()) + ".")
    if no_dp:
        said.append(f"`{NO_RATIO}`: no dp-only case at that GPU count ran beside "
                    + ", ".join(no_dp) + ".")
    if no_run:
        said.append(f"`{NO_RATIO}`: no ok run of " + ", ".join(no_run) + ".")
    notes = [" ".join(said)]
    if reference is None:
        notes.append(f"- {REFERENCE_VS_DP}: no reference table given (`{NO_RATIO}`).")
        return notes
    matched = [f"{r['case']} ({r['layout_kind']}): {r['reference_case']} over "
               f"{r['reference_dp_case']} at {r['reference_gpus']} GPUs, {r['reference_match']}"
               + ("" if r["reference_same_model"] else ", another model size")
               for r in records if r["reference_case"]]
    unmatched = [r["case"] for r in records if r["layout_verdict"] == NO_REFERENCE]
    about = f" ({reference.about})" if reference.about else ""
    notes.append(
        f"- {REFERENCE_VS_DP}: the same ratio in `{reference.name}`{about} (one figure per "
        "case, its noise unknown): its layout over its fastest dp-only case of the same nodes "
        "x GPUs per node and model size (the table does not give every case's global batch, "
        "so that is not compared), shown as `ratio (dp x tp x pp at GPUs)`. Matched by the "
        f"rule that finds one first: {MATCH_LAYOUT}; else {MATCH_KIND} (tp only, 2D = dp x "
        f"tp, dp x pp, tp x pp, dp x tp x pp); else, for a pipelined case, {MATCH_PIPELINED} "
        "(any pp > 1); then the same model size, the nearest GPU count, tp and pp, the "
        "table's order."
        + (" " + "; ".join(matched) + "." if matched else "")
        + (f" `{NO_RATIO}`: the reference has no layout of that kind for "
           + ", ".join(unmatched) + "." if unmatched else ""))
    notes.append(
        f"- {MARKS[LOST_MORE]}: lost more of data parallelism's throughput than the reference "
        f"did, beyond the noise: {VS_DP} x (1 + noise) below {REFERENCE_VS_DP}, the noise "
        "being the two cases' repeat spreads ((max - min) / median) added; "
        f"{MARKS[LOST_MORE_NOISE_UNKNOWN]}: below the reference, noise unknown (a side has "
        f"fewer than 2 ok repeats); {MARKS[WITHIN_NOISE]}: below the reference within that "
        f"noise; no mark: at or above the reference ({KEPT}).")
    return notes


def _cell(value: float | None, digits: int, unit: str = "") -> str:
    if value is None:
        return MISSING
    return f"{value:.{digits}f}" + (f" ({unit})" if unit else "")


def gpt_table(rows: Iterable[Mapping[str, Any]], order: Sequence[str] = (),
              reference: LayoutReference | None = None) -> GptTable:
    """The markdown table in the published shape, with each layout's ratio to data parallelism
    beside `reference`'s (`toolkit.analysis.layouts.load_layout_reference`), the notes that
    define them, and its records."""
    records = gpt_records(rows, order, reference.rows if reference else ())
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
                      mark_oversubscribed(_cell(r["throughput_sps"], 2), _contended(r)),
                      _cell(r["tflops_per_gpu"], 1),
                      _cell(r["mfu_pct"], 1), r["compile"] or MISSING, _vs_dp_cell(r),
                      _reference_cell(r)])
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
        *ratio_notes(records, reference),
    ]
    spanning = [f"{r['case']} (dp x tp x pp {r['layout']}, {r['gpus']} GPUs)"
                for r in records if r.get("tp_across_nodes")]
    if spanning:
        notes.append("- tensor parallelism across nodes: " + "; ".join(spanning) + ": its "
                     "tp does not divide the GPUs per node, so some tensor-parallel group spans "
                     "nodes and its all-reduces (one per layer, forward and backward) cross the "
                     "link between them; a tp that divides the GPUs per node keeps every group "
                     "inside one.")
    contended_ratios = _contended_ratio_note(records)
    if contended_ratios:
        notes.append(contended_ratios)
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


