"""The per-family prefilter (`RECORD_MARKERS`) drops no record: on every recorded log in
tests/data/logs (sources in the SOURCE.md beside them), the family reads the same records from
the lines holding one of its markers as from the whole file, and detects the family in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsers.detect import ANY_MARKER, FAMILIES, PARSERS, RECORD_MARKERS, detect, may_hold_record
from parsers.foreign import LogHints

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"

RECORDED = [(family, path) for family in FAMILIES
            for path in sorted((LOGS / family).rglob("*"))
            if path.is_file() and path.suffix != ".md"]


def test_every_family_has_markers_and_a_recorded_log():
    assert set(RECORD_MARKERS) == set(FAMILIES)
    assert {family for family, _ in RECORDED} == set(FAMILIES)


@pytest.mark.parametrize(("family", "path"), RECORDED,
                         ids=[str(p.relative_to(LOGS)) for _, p in RECORDED])
def test_lines_without_a_marker_hold_no_record(family, path):
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    kept = [line for line in lines if may_hold_record(line, RECORD_MARKERS[family])]
    whole = PARSERS[family](text, hints=LogHints()).records
    assert whole, "a recorded log with no record tests nothing"
    assert PARSERS[family]("\n".join(kept), hints=LogHints()).records == whole
    if detect(text) == family:
        assert detect("\n".join(line for line in lines if may_hold_record(line, ANY_MARKER))) \
            == family
