"""Comparing results with reference figures: `collect --reference ref.csv|<results dir>`.

Like a performance check in an HPC test harness: each case's median throughput is compared with
a reference value, and the verdict is `regression` (measured < reference x (1 - tolerance)),
`improvement` (measured > reference x (1 + tolerance)) or `within tolerance`. A reference
row that no measured case matches is listed as `not measured` (it does not fail the check).

A reference CSV has the columns `framework, model, precision, num_nodes, gpus_per_node,
batch_size_per_device, throughput_sps` and optionally `variant`, `case_id`, `source` and any
notes. A blank key cell matches anything (the reports' tables in `examples/reference/` leave out
what they do not say); `variant` is a list of `key=value` pairs that must all appear in the
measured case's variant; `case_id`, when given, must match exactly. A results directory as
reference means its `summary.csv` (written by `collect`), compared case by case.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.analysis.summary import SummaryRow

KEY_COLUMNS = ("framework", "model", "precision", "num_nodes", "gpus_per_node",
               "batch_size_per_device")
_INT_COLUMNS = ("num_nodes", "gpus_per_node", "batch_size_per_device")

REGRESSION = "regression"
IMPROVEMENT = "improvement"
WITHIN = "within tolerance"
NOT_MEASURED = "not measured"

SUMMARY_FILE = "summary.csv"
"""What collect writes into a results directory (`toolkit.results.layout.SUMMARY_CSV`, which
this stage may not import; a test keeps the two equal)."""


class ReferenceError(ValueError):
    """A reference that cannot be used; the message names the file, line and column."""


@dataclass(frozen=True)
class ReferenceRow:
    keys: dict[str, str]
    """KEY_COLUMNS -> value; '' matches anything."""
    variant: str
    case_id: str
    throughput_sps: float
    source: str
    """Where the figure comes from (the CSV's `source` column, else file:line)."""


@dataclass(frozen=True)
class Comparison:
    reference: ReferenceRow
    measured: SummaryRow | None
    ratio: float | None
    verdict: str


def load_reference(path: Path) -> list[ReferenceRow]:
    """Reference rows from a CSV file, or from a results directory's `summary.csv`."""
    if path.is_dir():
        summary = path / SUMMARY_FILE
        if not summary.is_file():
            raise ReferenceError(f"{path}: no {SUMMARY_FILE} (run `python -m toolkit.collect` on "
                                 f"it first, or pass a reference CSV)")
        return _read_csv(summary, value_column="throughput_median_sps", exact_variant=True)
    if not path.is_file():
        raise ReferenceError(f"{path}: no such file or directory")
    return _read_csv(path, value_column="throughput_sps", exact_variant=False)


def _read_csv(path: Path, *, value_column: str, exact_variant: bool) -> list[ReferenceRow]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in (*KEY_COLUMNS, value_column) if c not in header]
            if missing:
                raise ReferenceError(
                    f"{path}: missing column(s) {', '.join(missing)}; a reference needs "
                    f"{', '.join((*KEY_COLUMNS, value_column))} (blank cells match anything)")
            rows = []
            for line, raw in enumerate(reader, start=2):
                row = _row(path, line, raw, value_column, exact_variant)
                if row is not None:
                    rows.append(row)
    except (OSError, UnicodeDecodeError) as err:
        raise ReferenceError(f"{path}: cannot read: {err}") from err
    if not rows:
        raise ReferenceError(f"{path}: no reference rows")
    return rows


def _row(path: Path, line: int, raw: dict[str, str | None], value_column: str,
         exact_variant: bool) -> ReferenceRow | None:
    keys = {k: (raw.get(k) or "").strip() for k in KEY_COLUMNS}
    for k in _INT_COLUMNS:
        if keys[k] and not keys[k].isdigit():
            raise ReferenceError(f"{path}:{line}: column {k}: expected a whole number or "
                                 f"blank, got {keys[k]!r}")
    text = (raw.get(value_column) or "").strip()
    if not text:
        return None  # a case the reference has no figure for (e.g. a failed run)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ReferenceError(f"{path}:{line}: column {value_column}: expected a positive "
                             f"number of samples/s, got {text!r}")
    variant = (raw.get("variant") or "").strip()
    return ReferenceRow(keys=keys, variant=("=" + variant) if exact_variant else variant,
                        case_id=(raw.get("case_id") or "").strip(), throughput_sps=value,
                        source=(raw.get("source") or "").strip() or f"{path.name}:{line}")


def _pairs(variant: str) -> set[str]:
    return {p.strip() for p in variant.split(",") if p.strip()}


def matches(ref: ReferenceRow, row: SummaryRow, ignore: Iterable[str] = ()) -> bool:
    skip = set(ignore)
    for key in KEY_COLUMNS:
        want = ref.keys[key]
        if want and key not in skip and str(getattr(row, key)) != want:
            return False
    if ref.case_id and "case_id" not in skip and ref.case_id not in row.case_ids.split():
        return False
    if ref.variant and "variant" not in skip:
        if ref.variant.startswith("="):  # from a results dir: the same case, exactly
            return ref.variant[1:] == row.variant
        return _pairs(ref.variant) <= _pairs(row.variant)
    return True


def verdict(ratio: float, tolerance: float) -> str:
    if ratio < 1 - tolerance:
        return REGRESSION
    if ratio > 1 + tolerance:
        return IMPROVEMENT
    return WITHIN


def compare(summary: Sequence[SummaryRow], reference: Sequence[ReferenceRow],
            tolerance: float, ignore: Iterable[str] = ()) -> list[Comparison]:
    """One comparison per (reference row, measured case it matches), plus the unmatched
    reference rows as `not measured`. `ignore`: key columns not to compare (e.g. framework,
    to hold a new framework against another's published figures)."""
    if not 0 <= tolerance < 1:
        raise ReferenceError(f"tolerance must be in [0, 1), got {tolerance}")
    skip = tuple(ignore)
    unknown = set(skip) - {*KEY_COLUMNS, "variant", "case_id"}
    if unknown:
        raise ReferenceError(f"cannot ignore {', '.join(sorted(unknown))}; valid: "
                             f"{', '.join((*KEY_COLUMNS, 'variant', 'case_id'))}")
    out = []
    for ref in reference:
        hits = [r for r in summary if r.throughput_median_sps is not None
                and matches(ref, r, skip)]
        if not hits:
            out.append(Comparison(ref, None, None, NOT_MEASURED))
        for row in hits:
            assert row.throughput_median_sps is not None
            ratio = row.throughput_median_sps / ref.throughput_sps
            out.append(Comparison(ref, row, ratio, verdict(ratio, tolerance)))
    return out


