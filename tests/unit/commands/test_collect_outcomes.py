"""What `collect` says about what it found: a grid that never ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit import collect
from toolkit.results.layout import CaseDir
from toolkit.spec import Case, resolve


def planned_grid(root: Path, repeats: list[int]) -> None:
    """case.json files only, as `submit` leaves them before any job starts."""
    for index, n in enumerate(repeats):
        case = resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": 1 + index,
                                       "repeats": n}))
        CaseDir(root, case.base_id()).write_case(case)


def test_a_grid_that_never_ran_says_how_many_runs_were_planned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planned_grid(tmp_path, [2, 3, 1])
    assert collect.main([str(tmp_path), "--quiet", "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "no run has started yet: 0 of the 6 run(s) planned in 3 case(s)" in err
    report = (tmp_path / "report.md").read_text()
    assert "0 of the 6 run(s) planned in 3 case(s)" in report
    assert "the grid plans 6 in 3 case(s)" in report
