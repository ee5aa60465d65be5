"""Comparing results with reference figures: `collect --reference ref.csv|<results dir>`.

Like a performance check in an HPC test harness: each case's median throughput is compared with
a reference value, and the verdict is `regression` (measured < reference x (1 - tolerance)),
`improvement` (measured > reference x (1 + tolerance)) or `within tolerance`. The check is
two-sided: an improvement beyond the tolerance fails too (`FAILING`), because a large speed-up
usually means the benchmark itself changed and the reference needs refreshing. A reference
row that no measured case matches is listed as `not measured` (it does not fail the check).

A reference made from repeats (`collect --make-reference`, `make_reference`) has one row per
case and system (GPU model, partition): the median over the case's ok repeats measured without
contention (an oversubscribed or crowded run is left out, and said) and a tolerance
of REFERENCE_K x MAD / median (MAD scaled by 1.4826 to estimate a standard deviation, so 3
standard deviations of the repeats), never below REFERENCE_FLOOR. Its per-row `tolerance` is
used in place of `--tolerance`; its `gpu_model` / `partition`, when filled, must match the
measured case's.

A reference CSV has the columns `framework, model, precision, num_nodes, gpus_per_node,
batch_size_per_device, throughput_sps` and optionally `variant`, `case_id`, `source`, `name`
(the published case's name) and any notes. A blank key cell matches anything (the reports'
tables in `examples/reference/` leave out what they do not say); `variant` is a list of
`key=value` pairs that must all appear in the measured case's variant; `case_id`, when given,
must match exactly. A results directory as reference means its `summary.csv` (written by
`collect`), compared case by case.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from toolkit.analysis.sharing import HOST_CROWDED, OVERSUBSCRIBED
from toolkit.analysis.summary import SummaryRow
from toolkit.spec.visible import csv_value

KEY_COLUMNS = ("framework", "model", "precision", "num_nodes", "gpus_per_node",
               "batch_size_per_device")
_INT_COLUMNS = ("num_nodes", "gpus_per_node", "batch_size_per_device")

REGRESSION = "regression"
IMPROVEMENT = "improvement"
WITHIN = "within tolerance"
NOT_MEASURED = "not measured"
FAILING = (REGRESSION, IMPROVEMENT)
"""Verdicts that fail the check (two-sided)."""

SYSTEM_COLUMNS = ("gpu_model", "partition")
REFERENCE_K = 3.0
REFERENCE_FLOOR = 0.02
MAD_TO_SD = 1.4826
MIN_REFERENCE_REPEATS = 3

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
    tolerance: float | None = None
    """This row's own relative tolerance (a reference made from repeats); None: `--tolerance`."""
    system: tuple[tuple[str, str], ...] = ()
    """(SYSTEM_COLUMNS key, value) the measured case's system must have."""
    name: str = ""
    """The CSV's `name` column, where it has one (the published report's group and case)."""


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
            for line, cells in enumerate(reader, start=2):
                # names as they were before collect kept a spreadsheet from running them
                raw = {k: csv_value(v) if isinstance(v, str) else v for k, v in cells.items()}
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
    tolerance = None
    text = (raw.get("tolerance") or "").strip()
    if text:
        try:
            tolerance = float(text)
        except ValueError:
            tolerance = math.nan
        if not 0 <= tolerance < 1:
            raise ReferenceError(f"{path}:{line}: column tolerance: expected a fraction in "
                                 f"[0, 1) or blank, got {text!r}")
    system = tuple((k, v) for k in SYSTEM_COLUMNS if (v := (raw.get(k) or "").strip()))
    return ReferenceRow(keys=keys, variant=("=" + variant) if exact_variant else variant,
                        case_id=(raw.get("case_id") or "").strip(), throughput_sps=value,
                        source=(raw.get("source") or "").strip() or f"{path.name}:{line}",
                        tolerance=tolerance, system=system,
                        name=(raw.get("name") or "").strip())


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
            tolerance: float, ignore: Iterable[str] = (),
            systems: Mapping[str, Mapping[str, str | None]] | None = None) -> list[Comparison]:
    """One comparison per (reference row, measured case it matches), plus the unmatched
    reference rows as `not measured`. `ignore`: key columns not to compare (e.g. framework,
    to hold a new framework against another's published figures). `systems`: a case's
    `case_ids` -> its SYSTEM_COLUMNS values, matched against reference rows that name one."""
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
                and matches(ref, r, skip) and _same_system(ref, r, systems or {})]
        if not hits:
            out.append(Comparison(ref, None, None, NOT_MEASURED))
        for row in hits:
            assert row.throughput_median_sps is not None
            ratio = row.throughput_median_sps / ref.throughput_sps
            own = tolerance if ref.tolerance is None else ref.tolerance
            out.append(Comparison(ref, row, ratio, verdict(ratio, own)))
    return out


def _same_system(ref: ReferenceRow, row: SummaryRow,
                 systems: Mapping[str, Mapping[str, str | None]]) -> bool:
    if not ref.system:
        return True
    have = systems.get(row.case_ids, {})
    return all((have.get(k) or "") == v for k, v in ref.system)


def make_reference(runs: pd.DataFrame,
                   source: str) -> tuple[pd.DataFrame, list[str], list[str]]:
    """A reference from repeats: one row per case and system with at least
    MIN_REFERENCE_REPEATS ok repeats measured without contention (columns: KEY_COLUMNS,
    variant, case_id, SYSTEM_COLUMNS, throughput_sps, tolerance, repeats, mad_sps, source);
    a line per case left without a reference; and a line per case some of whose ok repeats
    were left out because they were oversubscribed or crowded (a baseline measured while the
    CPUs were shared is no baseline)."""
    ok = runs[(runs["status"] == "ok") & runs["throughput_sps"].notna()]
    for column in SYSTEM_COLUMNS:
        if column not in ok:
            ok = ok.assign(**{column: ""})
    over, crowded = (ok[column].astype("string").fillna("").ne("") if column in ok
                     else pd.Series(False, index=ok.index)
                     for column in (OVERSUBSCRIBED, HOST_CROWDED))
    ok = ok.assign(_over=over, _crowded=crowded)
    keys = ["case_id", *KEY_COLUMNS, "variant", *SYSTEM_COLUMNS]
    records, skipped, flagged_out = [], [], []
    for key, group in ok.fillna({c: "" for c in SYSTEM_COLUMNS}).groupby(keys, sort=True):
        flagged = group["_over"] | group["_crowded"]
        values = group.loc[~flagged, "throughput_sps"].astype(float)
        if flagged.any():
            why = ", ".join(f"{int(n)} {words}" for n, words in
                            ((group["_over"].sum(), "oversubscribed"),
                             ((group["_crowded"] & ~group["_over"]).sum(),
                              "crowded by other processes")) if n)
            flagged_out.append(f"{key[0]}: {int(flagged.sum())} of {len(group)} ok repeat(s) "
                               f"left out of the reference ({why}; runs.csv columns "
                               f"`{OVERSUBSCRIBED}`, `{HOST_CROWDED}`): measured under "
                               "contention, not the benchmark")
        if len(values) < MIN_REFERENCE_REPEATS:
            unflagged = " without contention" if flagged.any() else ""
            skipped.append(f"{key[0]}: {len(values)} ok repeat(s){unflagged}, a reference "
                           f"needs at least {MIN_REFERENCE_REPEATS}")
            continue
        median = float(values.median())
        mad = float((values - median).abs().median())
        tolerance = max(REFERENCE_K * MAD_TO_SD * mad / median, REFERENCE_FLOOR)
        records.append({**dict(zip(keys, key, strict=True)), "throughput_sps": median,
                        "tolerance": round(tolerance, 6), "repeats": len(values),
                        "mad_sps": mad, "source": f"{source} ({len(values)} repeats)"})
    missing = sorted(set(runs["case_id"]) - set(ok["case_id"]))
    skipped += [f"{c}: no ok repeat" for c in missing]
    columns = [*KEY_COLUMNS, "variant", "case_id", *SYSTEM_COLUMNS, "throughput_sps",
               "tolerance", "repeats", "mad_sps", "source"]
    return pd.DataFrame.from_records(records, columns=columns), skipped, flagged_out


def case_systems(summary: Sequence[SummaryRow],
                 runs: pd.DataFrame) -> dict[str, dict[str, str | None]]:
    """Each summary row's `case_ids` -> the SYSTEM_COLUMNS of its first run (`runs`: one row
    per run with `case_id` and SYSTEM_COLUMNS)."""
    first = runs.drop_duplicates("case_id").set_index("case_id")
    out: dict[str, dict[str, str | None]] = {}
    for row in summary:
        case = row.case_ids.split()[0] if row.case_ids else ""
        if case in first.index:
            out[row.case_ids] = {k: (str(first.at[case, k]) if k in first
                                     and pd.notna(first.at[case, k]) else None)
                                 for k in SYSTEM_COLUMNS}
    return out


def loss_not_falling(runs: pd.DataFrame) -> dict[str, str]:
    """case_id -> why, for each case one of whose ok runs logged a last loss not below its
    first (a training run that did not learn is not a benchmark figure)."""
    if "loss_first" not in runs or "loss_last" not in runs:
        return {}
    ok = runs[(runs["status"] == "ok") & runs["loss_first"].notna() & runs["loss_last"].notna()]
    bad = ok[ok["loss_last"].astype(float) >= ok["loss_first"].astype(float)]
    return {str(case): "loss did not fall in repeat(s) " + ", ".join(
                f"r{r.repeat} ({r.loss_first:.4g} -> {r.loss_last:.4g})"
                for r in group.itertuples())
            for case, group in bad.groupby("case_id", sort=True)}
