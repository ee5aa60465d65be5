"""HugeCTR training logs: `[HUGECTR][hh:mm:ss][INFO][RANK0]: Iter: N Time(K iters): Xs Loss: ...`.

Each line covers the K iterations before iteration N and took X seconds, so one iteration took
X / K seconds. DLPerf's `HugeCTR/wdl/tools/extract_hugectr_logs.py` reports the latency
`1000 x mean(X) / K` in ms over every line except the one at `--start_iter` (100 by default);
here the records whose interval starts at or after the warm-up count, so `--warmup-iterations
S` is `--start_iter S`. The latency is kept as `latency_ms`; the throughput is global batch /
mean iteration time (`latency`). Only the `[HUGECTR]` lines of rank 0 are printed by HugeCTR;
the times carry no date and no sub-second part, so no timestamp window.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

import statistics

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_LATENCY

FAMILY = "hugectr"

RECORD = logtext.compile(
    r"^\[HUGECTR\]\[[\d:]+\]\[INFO\]\[RANK(\d+)\]: Iter: (\d+) Time\((\d+) iters\): "
    r"([\d.eE+-]+)s(?: Loss: ([-\d.eE+naif]+))?"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    for line in text.splitlines():
        match = RECORD.match(line.strip())
        if match is None:
            continue
        rank, iteration, span, seconds, loss = match.groups()
        iters, elapsed = int(span), parse_float(seconds)
        if iters <= 0 or elapsed is None:
            continue
        records.append(
            IterRecord(
                iteration=int(iteration),
                since_iteration=int(iteration) - iters,
                step_time_s=elapsed / iters,
                loss=parse_float(loss) if loss else None,
                rank=int(rank),
            )
        )
    extra = {}
    timed = [r for r in records if r.since_iteration is not None and r.step_time_s is not None]
    window = [r for r in timed if (r.since_iteration or 0) >= hints.warmup_iterations] or timed[1:]
    if window:
        extra["latency_ms"] = 1000.0 * statistics.fmean(
            r.step_time_s for r in window if r.step_time_s is not None)
    return finish(FAMILY, records, hints, order=(METHOD_LATENCY,), extra=extra)
