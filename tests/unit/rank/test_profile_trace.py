"""A profiled rank's trace is written beside its events up to a size limit; past it only the
breakdown stays, and the summary says why the trace is missing."""

from __future__ import annotations

import json

from toolkit.rank.profile_trace import save_trace

TRACE = {"traceEvents": [{"cat": "kernel", "name": "k", "ts": 0, "dur": 5}] * 50}
BREAKDOWN = {"steps": 3, "step_ms": 10.0, "kernel_ms": {"GEMM/conv": 6.0}}


def test_a_trace_within_the_limit_is_written_and_named(tmp_path):
    got = save_trace(tmp_path, 1, TRACE, BREAKDOWN)
    assert got == {**BREAKDOWN, "trace": "profile-rank001.json"}
    assert json.loads((tmp_path / "profile-rank001.json").read_text()) == TRACE


def test_a_trace_over_the_limit_is_not_written_but_the_breakdown_stays(tmp_path):
    got = save_trace(tmp_path, 0, TRACE, BREAKDOWN, limit=1000)
    assert got["kernel_ms"] == BREAKDOWN["kernel_ms"] and got["trace"] is None
    assert "over the 0 MiB limit: not written" in got["trace_skipped"]
    assert list(tmp_path.iterdir()) == []


def test_a_planted_symlink_is_not_written_through(tmp_path):
    outside = tmp_path / "outside.json"
    run_dir = tmp_path / "r0"
    run_dir.mkdir()
    (run_dir / "profile-rank000.json").symlink_to(outside)
    save_trace(run_dir, 0, TRACE, BREAKDOWN)
    assert not outside.exists()  # the link was replaced by the file, not followed
    assert not (run_dir / "profile-rank000.json").is_symlink()
