"""The "Against the reference" table: each compared case's reference and measured figures, their
ratio and verdict (the comparison itself is `toolkit.analysis.reference`).
"""

from __future__ import annotations

from collections.abc import Sequence

from toolkit.analysis.reference import (
    IMPROVEMENT,
    NOT_MEASURED,
    REGRESSION,
    WITHIN,
    Comparison,
    ReferenceRow,
)
from toolkit.report.tables import Table, TableSet, fmt


def _label(ref: ReferenceRow) -> str:
    """`resnet50 torch fp32 1n4g bs128 [loss_scaling=static]` (`*` for a blank key)."""
    k = {key: value or "*" for key, value in ref.keys.items()}
    label = (f"{k['model']} {k['framework']} {k['precision']} {k['num_nodes']}n"
             f"{k['gpus_per_node']}g bs{k['batch_size_per_device']}")
    variant = ref.variant.lstrip("=")
    return f"{label} [{variant}]" if variant else label


def comparison_tables(comparisons: Sequence[Comparison], tolerance: float,
                      reference_path: str) -> TableSet:
    body, records = [], []
    for c in comparisons:
        m, ref = c.measured, c.reference
        case = m.case_ids if m else _label(ref)
        body.append([case, f"{m.gpus}" if m else "", fmt(ref.throughput_sps),
                     fmt(m.throughput_median_sps) if m else "", fmt(c.ratio, 3), c.verdict,
                     ref.source])
        records.append({"case": case, **{f"reference_{k}": v for k, v in ref.keys.items()},
                        "reference_variant": ref.variant.lstrip("="),
                        "reference_sps": ref.throughput_sps,
                        "measured_sps": m.throughput_median_sps if m else None,
                        "ratio": c.ratio, "verdict": c.verdict, "source": ref.source})
    regressions = sum(1 for c in comparisons if c.verdict == REGRESSION)
    note = (f"reference: `{reference_path}`; tolerance ±{100 * tolerance:.1f}%; "
            f"{regressions} regression(s), "
            f"{sum(1 for c in comparisons if c.verdict == IMPROVEMENT)} improvement(s), "
            f"{sum(1 for c in comparisons if c.verdict == WITHIN)} within tolerance, "
            f"{sum(1 for c in comparisons if c.verdict == NOT_MEASURED)} not measured")
    table = Table("", ["case", "GPUs", "reference samples/s", "measured samples/s", "ratio",
                       "verdict", "reference source"], body, note)
    return TableSet("reference", "Against the reference", [table] if body else [], records,
                    note)
