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
    0) to that of iteration `total`; both must be logged."""
    missing = [i for i in (warmup, total) if i > 0 and i not in points]
    if missing:
        logged = sorted(points)
        shown = ", ".join(map(str, logged[:8])) + (" ..." if len(logged) > 8 else "")
        raise MetricError(
            f"no record of iteration {' or '.join(map(str, missing))} (the window runs from "
            f"iteration {warmup} to {total}; the program logged {shown or 'none'})"
            + window_hint(logged, warmup, total))
    t_start = points[warmup][0] if warmup > 0 else 0.0
    span = points[total][0] - t_start
    if not math.isfinite(span) or span <= 0:
        raise MetricError(f"measurement window of {span} s is not a positive finite number")
    samples = sum(s for i, (_, s) in points.items() if warmup < i <= total)
    return _sane(samples / span)


def window_hint(logged: list[int], warmup: int, total: int) -> str:
    """What window the logged iterations allow, for a window that missed them: the log's
    interval (when it is regular) and the warm-up and measured iterations that start and end
    on logged iterations within the iterations the program ran (`; ...`, '' when none do)."""
    steps = {b - a for a, b in itertools.pairwise(logged)}
    interval = (f"; it logs every {next(iter(steps))} iterations from iteration {logged[0]}"
                if len(steps) == 1 else "")
    start = 0 if warmup == 0 else next((i for i in logged if i >= warmup), None)
    end = max((i for i in logged if start is not None and start < i <= total), default=None)
    if start is None or end is None:
        return interval + ("; no logged iterations leave a window" if logged else "")
    return (f"{interval}; a window that starts and ends on iterations it logged: "
            f"warmup_iterations: {start}, measured_iterations: {end - start}")
