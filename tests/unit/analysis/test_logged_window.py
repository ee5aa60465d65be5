"""The window of a program that logs every few iterations (a command case)."""

from __future__ import annotations

import pytest

from toolkit.analysis.throughput import (
    MetricError,
    log_interval,
    logged_window,
    logged_window_throughput,
    window_end_note,
)


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


def test_a_log_that_stops_within_one_interval_ends_the_window_on_its_last_record():
    # logs every 10, not iteration 100 (its last steps unlogged): the window ends on 90
    points = {i: (0.1 * i, 80.0) for i in range(10, 100, 10)}
    figure, end = logged_window(points, 20, 100)
    assert end == 90
    assert figure == pytest.approx(7 * 80 / (9.0 - 2.0))
    assert window_end_note(end, 100, log_interval(sorted(points))) == (
        "the window ends on iteration 90, the last the program logged, not 100: it logs "
        "every 10 iterations and not iteration 100")
    assert window_end_note(100, 100, 10) == ""


def test_a_log_that_stops_further_back_is_refused_with_advice_the_window_keeps():
    # DeepLearningExamples' main.py --prof N: logs every 10 but not its last 20 steps; a
    # smaller window moves its step count with it, more steps than the window do not
    points = {i: (0.1 * i, 80.0) for i in range(10, 90, 10)}
    with pytest.raises(MetricError) as info:
        logged_window(points, 20, 100)
    assert str(info.value).endswith(
        "; or, where the program's step count is {total_iterations}, give it more steps than "
        "the window: {total_iterations+20}")


def test_an_irregular_log_is_not_read_short():
    points = {10: (1.0, 80.0), 20: (2.0, 80.0), 25: (2.5, 40.0), 35: (3.5, 80.0)}
    with pytest.raises(MetricError, match="no record of iteration 40"):
        logged_window(points, 10, 40)
