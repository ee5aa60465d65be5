"""The report's CSV writer writes what Python's csv module would: every cell as Python prints
it, None empty, quoting only where needed, columns exactly as asked; NaN, pandas' missing value,
is empty too (csv would write `nan`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from toolkit.report.outputs import to_csv
from toolkit.results.scan import collect_runs

ROOT = Path(__file__).resolve().parents[3]


def _reference(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return buf.getvalue()


def test_awkward_cells_are_written_as_the_csv_module_writes_them() -> None:
    rows = [{"a": 1, "b": 0.1 + 0.2, "c": None, "d": 'say "hi", then\nleave', "e": True},
            {"a": None, "b": 1e-12, "c": 256, "d": "", "extra": "not a column"},
            {"b": float("nan")}]
    columns = ["a", "b", "c", "d", "e"]
    assert to_csv(rows, columns) == _reference(rows[:2], columns) + ",,,,\n"


def test_real_run_rows_are_written_unchanged() -> None:
    rows, _ = collect_runs(ROOT / "tests" / "data" / "results_quickstart", jobs=1)
    dicts = [r.to_dict() for r in rows]
    columns = list(dict.fromkeys(k for d in dicts for k in d))
    assert len(dicts) > 0
    assert to_csv(dicts, columns) == _reference(dicts, columns)
