"""Every test that docs/RELIABILITY.md names as the proof of a promise exists: a file moved or a
test renamed breaks this, not the page silently."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "RELIABILITY.md"
# `tests/x/test_y.py`, `tests/x/test_y.py::name` and, after one of those in the same cell,
# `::name` for another test of that file.
REF = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?")


def references(text: str) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        for cell in line.split("|"):
            current = None
            for m in REF.finditer(cell):
                path, name = m.groups()
                if path:
                    current = path
                if current and (path or name):
                    found.append((current, name))
    return found


def test_the_parser_reads_a_cell_with_continuations():
    cell = "| `tests/a/test_b.py::test_one`, `::test_two`; `tests/c/test_d.py` |"
    assert references(cell) == [("tests/a/test_b.py", "test_one"),
                                ("tests/a/test_b.py", "test_two"),
                                ("tests/c/test_d.py", None)]


def test_every_test_named_as_proof_exists():
    refs = references(PAGE.read_text())
    assert len(refs) > 40
    missing = []
    for path, name in refs:
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\b", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/RELIABILITY.md names tests that do not exist: {missing}"
