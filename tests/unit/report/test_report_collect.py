"""Collect's fast paths give what the plain ones give: the line decoder accepts and rejects
exactly what `json.loads` does, and a process pool reads a tree into the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import CaseDir, rank_file
from toolkit.results.runs import decode_line
from toolkit.results.scan import PARALLEL_MIN_RUNS, collect_runs
from toolkit.spec import Case, resolve


def outcome(fn, line: bytes) -> tuple[str, object]:
    try:
        return "ok", fn(line)
    except (ValueError, UnicodeDecodeError):
        return "rejected", None


@pytest.mark.parametrize("line", [
    b'{"type":"iter","iteration":3,"elapsed_s":1.5}',
    b'  {"a": [1, 2, {"b": null}]}\r',
    b'{"type":"iter","iterat',            # torn by a killed rank
    b'{"a":1}{"b":2}',                     # two records glued together
    b'{"a":1} trailing',
    b'{"a":1},{"b":2}',
    b'[1, 2]', b'42', b'"text"', b'NaN', b'-Infinity', b'nul',
    b'\xff\xfe{"a":1}',                    # not UTF-8
    b'\x0c{"a":1}',                        # form feed: not JSON whitespace
    b'{"s":"caf\xc3\xa9"}',
])
def test_decode_line_matches_json_loads(line: bytes) -> None:
    assert outcome(decode_line, line) == outcome(json.loads, line)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(value=json_values, cut=st.integers(min_value=0, max_value=400),
       junk=st.sampled_from(["", " ", ",", "}", "{", "\t", "x", "\u2028", '"']))
def test_decode_line_matches_json_loads_on_damaged_lines(value: object, cut: int,
                                                         junk: str) -> None:
    text = json.dumps(value, ensure_ascii=bool(cut % 2))
    for line in (text, text[:cut], text + junk, junk + text, text[:cut] + junk):
        raw = line.encode("utf-8")
        assert outcome(decode_line, raw) == outcome(json.loads, raw), raw


def write_tree(root: Path, cases: int, repeats: int) -> None:
    for index in range(cases):
        case = resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": 1 + index,
                                       "warmup_iterations": 1, "measured_iterations": 3}))
        cdir = CaseDir(root, case.base_id())
        cdir.write_case(case)
        for repeat in range(repeats):
            run = cdir.prepare_run(repeat)
            with EventWriter(rank_file(run, 0), 0) as w:
                short = (index, repeat) == (3, 1)  # one run short of its last iteration
                for i in range(1, 4 if short else 5):
                    w.write("iter", iteration=i, elapsed_s=i * (0.1 + index / 100 + repeat / 1000),
                            step_time_s=0.1, samples=1 + index, loss=1.0, time_s=10.0 + i)
            status = "ok" if (index, repeat) != (5, 0) else "failed"
            (run / "status.json").write_text(json.dumps({"status": status, "reason": "x"}))


def test_a_pool_reads_the_same_rows_in_the_same_order(tmp_path: Path) -> None:
    write_tree(tmp_path, cases=12, repeats=3)
    serial, problems = collect_runs(tmp_path, jobs=1)
    assert len(serial) == 36 >= PARALLEL_MIN_RUNS and problems == []
    parallel, _ = collect_runs(tmp_path, jobs=2)
    assert parallel == serial
    statuses = [r.status for r in serial]
    assert statuses.count("ok") == 34
    assert statuses.count("failed") == 1 and statuses.count("incomplete") == 1
    assert len({r.throughput_sps for r in serial if r.status == "ok"}) == 34
