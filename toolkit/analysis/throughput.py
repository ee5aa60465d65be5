"""Throughput arithmetic, as the benchmark reports define it: pure functions over numbers.

- Run throughput: global samples per step x measured iterations / (time from the end of the last
  warm-up iteration to the end of the last measured one). Each rank measures with its own clock
  (clocks of different nodes are not compared); the run takes the slowest rank's window.
- Case figure: the median over repeats (the reports take the middle of 7 runs).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from toolkit.analysis.numbers import throughput_problem


class MetricError(ValueError):
    pass


def window_throughput(elapsed_s: Sequence[float], samples_per_iter: int, warmup: int,
                      measured: int | None = None) -> tuple[float, int]:
    """Samples/s over iterations warmup+1 .. warmup+measured.

    `elapsed_s[i]` is the time iteration i+1 finished, from a common start (elapsed 0 is the
    start of iteration 1). Returns (throughput, iterations measured).
    """
    n = len(elapsed_s)
    if measured is None:
        measured = n - warmup
    if warmup < 0 or measured < 1 or warmup + measured > n:
        raise MetricError(f"need {warmup} warm-up + {measured} measured iterations, have {n}")
    t_start = elapsed_s[warmup - 1] if warmup > 0 else 0.0
    t_end = elapsed_s[warmup + measured - 1]
    span = t_end - t_start
    if not math.isfinite(span) or span <= 0:  # NaN would pass `span <= 0` and give a NaN figure
        raise MetricError(f"measurement window of {span} s is not a positive finite number")
    return _sane(samples_per_iter * measured / span), measured


def _sane(figure: float) -> float:
    """`figure` (samples/s), or `MetricError` saying why no run has it (a window of 1e-308 s
    gives a finite figure of 1e310, whose later arithmetic is infinite or NaN)."""
    refused = throughput_problem(figure)
    if refused is not None:
        raise MetricError(refused)
    return figure


def run_throughput(per_rank_elapsed: Iterable[Sequence[float]], samples_per_iter: int,
                   warmup: int, measured: int) -> float:
    """The run's figure: the slowest rank's window (every rank must have the full window)."""
    spans = []
    for elapsed in per_rank_elapsed:
        tput, _ = window_throughput(elapsed, samples_per_iter, warmup, measured)
        spans.append(samples_per_iter * measured / tput)
    if not spans:
        raise MetricError("no rank has timing data")
    return samples_per_iter * measured / max(spans)


def median(values: Sequence[float]) -> float:
    if not values:
        raise MetricError("median of no values")
    return float(statistics.median(values))


def logged_window_throughput(points: Mapping[int, tuple[float, float]], warmup: int,
                             total: int) -> float:
    """Samples/s of one rank whose program logs some iterations only (a log interval):
    `points` maps each logged iteration to (elapsed_s, samples since the previous logged
    one). The window runs from the record of iteration `warmup` (elapsed 0 where warmup is
    0) to that of iteration `total`, or to the end `logged_window_end` allows."""
    return logged_window(points, warmup, total)[0]


def logged_window(points: Mapping[int, tuple[float, float]], warmup: int,
                  total: int) -> tuple[float, int]:
    """(samples/s, the iteration the window ended on) of `logged_window_throughput`."""
    logged = sorted(points)
    end = logged_window_end(logged, warmup, total)
    missing = [i for i in (warmup, end) if i > 0 and i not in points]
    if missing:
        shown = ", ".join(map(str, logged[:8])) + (" ..." if len(logged) > 8 else "")
        raise MetricError(
            f"no record of iteration {' or '.join(map(str, missing))} (the window runs from "
            f"iteration {warmup} to {total}; the program logged {shown or 'none'})"
            + window_hint(logged, warmup, total))
    t_start = points[warmup][0] if warmup > 0 else 0.0
    span = points[end][0] - t_start
    if not math.isfinite(span) or span <= 0:
        raise MetricError(f"measurement window of {span} s is not a positive finite number")
    samples = sum(s for i, (_, s) in points.items() if warmup < i <= end)
    return _sane(samples / span), end


def log_interval(logged: Sequence[int]) -> int | None:
    """The interval a program logs at, when every gap between its logged iterations is the
    same (None for fewer than two records or an irregular log)."""
    steps = {b - a for a, b in itertools.pairwise(logged)}
    return next(iter(steps)) if len(steps) == 1 else None


def logged_window_end(logged: Sequence[int], warmup: int, total: int) -> int:
    """The iteration a logged window ends on: `total` where it was logged; else the last
    logged iteration, where the log is regular and that iteration is after `warmup` and
    within one interval of `total` (a program that logs every k iterations but not its last
    ones, or whose step count is not a multiple of k); else `total` (and the window is
    refused as not logged)."""
    if total in logged or not logged:
        return total
    interval = log_interval(logged)
    last = max((i for i in logged if i < total), default=None)
    if interval is None or last is None or last <= warmup or total - last > interval:
        return total
    return last


def window_end_note(end: int, total: int, interval: int | None) -> str:
    """What a runs.csv row says of a window that ended before `total` ('' when it did not)."""
    if end >= total:
        return ""
    return (f"the window ends on iteration {end}, the last the program logged, not {total}: "
            f"it logs every {interval} iterations and not iteration {total}")


def window_hint(logged: list[int], warmup: int, total: int) -> str:
    """What window the logged iterations allow, for a window that missed them: the log's
    interval (when it is regular), the warm-up and measured iterations that start and end on
    logged iterations within the iterations the program ran (`; ...`, '' when none do), and,
    where the log stops short of `total`, the steps to give the program beyond the window
    (`{total_iterations+N}`), which the window does not move with."""
    interval_k = log_interval(logged)
    interval = (f"; it logs every {interval_k} iterations from iteration {logged[0]}"
                if interval_k is not None else "")
    start = 0 if warmup == 0 else next((i for i in logged if i >= warmup), None)
    end = max((i for i in logged if start is not None and start < i <= total), default=None)
    if start is None or end is None:
        return interval + ("; no logged iterations leave a window" if logged else "")
    more = ""
    if logged[-1] < total and start == warmup:
        more = (f"; or, where the program's step count is {{total_iterations}}, give it more "
                f"steps than the window: {{total_iterations+{total - logged[-1]}}}")
    return (f"{interval}; a window that starts and ends on iterations it logged: "
            f"warmup_iterations: {start}, measured_iterations: {end - start}{more}")
