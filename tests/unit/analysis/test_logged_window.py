"""The window of a program that logs every few iterations (a command case)."""

from __future__ import annotations

import pytest

from toolkit.analysis.throughput import MetricError, logged_window_throughput


def test_window_from_the_warmup_record_to_the_last():
    # logged every 10: (elapsed, samples since the last record)
    points = {10: (5.0, 80.0), 20: (9.0, 80.0), 30: (13.0, 80.0)}
    # iterations 11..30: 160 samples in 13 - 5 = 8 s
    assert logged_window_throughput(points, 10, 30) == pytest.approx(20.0)
    assert logged_window_throughput(points, 0, 30) == pytest.approx(240 / 13.0)


def test_missing_boundary_says_what_was_logged():
    with pytest.raises(MetricError, match=r"no record of iteration 15 .* logged 10, 20, 30"):
        logged_window_throughput({10: (1.0, 8.0), 20: (2.0, 8.0), 30: (3.0, 8.0)}, 15, 30)
