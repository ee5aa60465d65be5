"""The config hash of every case of the shipped grids is fixed: results on disk are matched to
their cases by it, so a refactoring that changed one would orphan every earlier result.

tests/data/config_hashes.json was recorded from the code as it was; a deliberate change to what
a case measures is the only reason to edit it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.spec.grid import load_grid

ROOT = Path(__file__).resolve().parents[3]
RECORDED: dict[str, dict[str, str]] = json.loads(
    (ROOT / "tests" / "data" / "config_hashes.json").read_text())


def test_every_shipped_grid_is_recorded() -> None:
    shipped = sorted(str(p.relative_to(ROOT)) for pattern in ("jobs/*.yaml", "examples/*.yaml")
                     for p in ROOT.glob(pattern))
    assert sorted(RECORDED) == shipped


@pytest.mark.parametrize("grid_file", sorted(RECORDED))
def test_config_hashes_unchanged(grid_file: str) -> None:
    grid = load_grid(ROOT / grid_file)
    assert {cid: case.config_hash() for cid, case in grid.items()} == RECORDED[grid_file]
