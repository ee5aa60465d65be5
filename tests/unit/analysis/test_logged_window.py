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


def test_a_log_of_steps_1_6_11_gets_the_window_that_works():
    # pytorch/examples' ImageNet prints i % print_freq == 0 with i 0-based: steps 1, 6, 11, ...
    # (print_freq 5); warm-up 10 misses them whatever "divides" means
    points = {i: (0.1 * i, 40.0) for i in range(1, 200, 5)}
    with pytest.raises(MetricError) as info:
        logged_window_throughput(points, 10, 110)
    text = str(info.value)
    assert "it logs every 5 iterations from iteration 1" in text
    assert text.endswith("a window that starts and ends on iterations it logged: "
                         "warmup_iterations: 11, measured_iterations: 95")
    assert logged_window_throughput(points, 11, 11 + 95) > 0  # and that window is read


def test_no_hint_where_no_window_fits():
    with pytest.raises(MetricError) as info:
        logged_window_throughput({5: (1.0, 8.0)}, 10, 20)
    assert str(info.value).endswith("; no logged iterations leave a window")
