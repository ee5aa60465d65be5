"""The "Against the reference" table: each compared case's reference and measured figures, their
ratio and verdict (the comparison itself is `toolkit.analysis.reference`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toolkit.analysis.reference import (
    IMPROVEMENT,
    NOT_MEASURED,
    REGRESSION,
    WITHIN,
    Comparison,
    ReferenceRow,
)
from toolkit.analysis.summary import SummaryRow
from toolkit.report.junit import JUnitCase
from toolkit.report.tables import (
    OVERSUBSCRIBED_MARK,
    Table,
    TableSet,
    flag_note,
    fmt,
    fmt_case_throughput,
)


def _label(ref: ReferenceRow) -> str:
    """`resnet50 torch fp32 1n4g bs128 [loss_scaling=static]` (`*` for a blank key)."""
    k = {key: value or "*" for key, value in ref.keys.items()}
    label = (f"{k['model']} {k['framework']} {k['precision']} {k['num_nodes']}n"
             f"{k['gpus_per_node']}g bs{k['batch_size_per_device']}")
    variant = ref.variant.lstrip("=")
    return f"{label} [{variant}]" if variant else label


def contention(m: SummaryRow) -> str:
    """Why a measured case's figure is flagged, `† of 5 runs, 2 oversubscribed, 1 crowded by
    other processes`; '' where none of its runs measured contention."""
    what = [f"{n} {words}" for n, words in ((m.runs_oversubscribed, "oversubscribed"),
                                            (m.runs_crowded, "crowded by other processes"))
            if n]
    return f"{OVERSUBSCRIBED_MARK} of {m.runs_ok} runs, {', '.join(what)}" if what else ""


def verdict_text(c: Comparison) -> str:
    """The verdict, and where the measured figure is flagged, why (`regression († of 5
    runs, 2 oversubscribed)`): a verdict on a figure measured under contention says so."""
    flag = contention(c.measured) if c.measured is not None else ""
    return f"{c.verdict} ({flag})" if flag else c.verdict


def row_tolerance(c: Comparison, tolerance: float) -> float:
    """The tolerance `c`'s verdict was decided with: the reference row's own, else
    `--tolerance`."""
    return tolerance if c.reference.tolerance is None else c.reference.tolerance


def _pct(fraction: float) -> str:
    return f"±{100 * fraction:.1f}%"


def tolerance_note(comparisons: Sequence[Comparison], tolerance: float) -> str:
    """The tolerance the verdicts used, as one phrase: `tolerance ±5.0%` when every compared
    row used the same one, else the range of the rows' own and where the default applied."""
    used = sorted({row_tolerance(c, tolerance) for c in comparisons if c.measured is not None})
    if len(used) <= 1:
        return f"tolerance {_pct(used[0] if used else tolerance)}"
    own = any(c.reference.tolerance is None for c in comparisons if c.measured is not None)
    return (f"tolerance per row, {_pct(used[0])} to {_pct(used[-1])} (column tolerance: the "
            "reference row's own" + (f", else {_pct(tolerance)} from --tolerance" if own
                                     else "") + ")")


def comparison_tables(comparisons: Sequence[Comparison], tolerance: float,
                      reference_path: str) -> TableSet:
    """The table, one row per comparison with the tolerance that row's verdict used; the
    verdict line (the set's `empty_note`, and the table's note with the flags of its figures)
    counts the verdicts."""
    body, records = [], []
    for c in comparisons:
        m, ref = c.measured, c.reference
        case = m.case_ids if m else _label(ref)
        own = row_tolerance(c, tolerance)
        body.append([case, f"{m.gpus}" if m else "", fmt(ref.throughput_sps),
                     fmt_case_throughput(m) if m else "", fmt(c.ratio, 3),
                     _pct(own) if m else "", verdict_text(c), ref.source])
        records.append({"case": case, **{f"reference_{k}": v for k, v in ref.keys.items()},
                        "reference_variant": ref.variant.lstrip("="),
                        "reference_sps": ref.throughput_sps,
                        "measured_sps": m.throughput_median_sps if m else None,
                        "ratio": c.ratio, "tolerance": own, "verdict": c.verdict,
                        "contention": contention(m) if m else "", "source": ref.source})
    regressions = sum(1 for c in comparisons if c.verdict == REGRESSION)
    note = (f"reference: `{reference_path}`; {tolerance_note(comparisons, tolerance)}; "
            f"{regressions} regression(s), "
            f"{sum(1 for c in comparisons if c.verdict == IMPROVEMENT)} improvement(s), "
            f"{sum(1 for c in comparisons if c.verdict == WITHIN)} within tolerance, "
            f"{sum(1 for c in comparisons if c.verdict == NOT_MEASURED)} not measured")
    flags = flag_note(list({id(c.measured): c.measured for c in comparisons
                            if c.measured is not None}.values()))
    table = Table("", ["case", "GPUs", "reference samples/s", "measured samples/s", "ratio",
                       "tolerance", "verdict", "reference source"], body,
                  f"{note}; {flags}" if flags else note)
    return TableSet("reference", "Against the reference", [table] if body else [], records,
                    note)


def _failures(c: Comparison, loss: Mapping[str, str]) -> list[tuple[str, str]]:
    """(kind, why) of each way the measured case of `c` fails the two-sided check."""
    assert c.measured is not None and c.ratio is not None
    figures = (f"{fmt(c.measured.throughput_median_sps)} vs reference "
               f"{fmt(c.reference.throughput_sps)} samples/s (ratio {c.ratio:.3f}, "
               f"{c.reference.source})")
    flag = contention(c.measured)
    if flag:
        figures += f" ({flag})"
    why = []
    if c.verdict == REGRESSION:
        why.append((REGRESSION, figures))
    elif c.verdict == IMPROVEMENT:
        why.append(("too fast", f"{figures}: faster than the reference beyond its tolerance; "
                                "the benchmark probably changed: refresh the reference "
                                "(collect --make-reference)"))
    why += [("loss", loss[case]) for case in c.measured.case_ids.split() if case in loss]
    return why


def gate_failures(comparisons: Sequence[Comparison],
                  loss: Mapping[str, str]) -> list[tuple[str, str]]:
    """(kind, line) per way a measured case fails the two-sided check (a FAILING verdict, or
    a run whose loss did not fall): `regression`, `too fast` or `loss`."""
    return [(kind, f"{c.measured.case_ids}: {why}") for c in comparisons
            if c.measured is not None for kind, why in _failures(c, loss)]


def reference_junit(comparisons: Sequence[Comparison], tolerance: float,
                    loss: Mapping[str, str]) -> list[JUnitCase]:
    """One JUnit test case per compared case; a reference row nothing matched is skipped."""
    cases = []
    for c in comparisons:
        own = row_tolerance(c, tolerance)
        if c.measured is None:
            cases.append(JUnitCase(_label(c.reference), "trainbench.reference",
                                   skipped="not measured"))
            continue
        cases.append(JUnitCase(
            c.measured.case_ids, "trainbench.reference",
            failure="; ".join(f"{k}: {w}" for k, w in _failures(c, loss)) or None,
            output=(f"measured {fmt(c.measured.throughput_median_sps)} samples/s, reference "
                    f"{fmt(c.reference.throughput_sps)} ({c.reference.source}), ratio "
                    f"{c.ratio:.4f}, tolerance ±{100 * own:.1f}%, verdict {verdict_text(c)}"),
            properties={"ratio": f"{c.ratio:.6f}", "verdict": c.verdict,
                        "tolerance": f"{own:.6f}"}))
    return cases
