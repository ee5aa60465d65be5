"""DeepSpeed engine logs: the `ThroughputTimer` line printed every `steps_per_print` steps.

```
[2023-07-25 21:03:17,269] [INFO] [timer.py:215:stop] epoch=0/micro_step=34/global_step=34,
    RunningAvgSamplesPerSec=7.86..., CurrSamplesPerSec=8.00..., MemAllocated=59.65GB, ...
[2022-03-11 02:06:58,985] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=83.48..., ...
```
(one line each). DeepSpeed 0.8 and later print `epoch=E/micro_step=m/global_step=N`; earlier
versions `E/N` with `SamplesPerSec` (0.3 to 0.6) or `RunningAvgSamplesPerSec` and
`CurrSamplesPerSec` (0.7). The running average covers every step since the timer's start (it
skips the first steps), so it is no window figure: the last one is kept as
`extra["reported_summary_sps"]`. `CurrSamplesPerSec` is the rate of the step just finished.

The throughput is the timestamp window over the lines' `[YYYY-MM-DD HH:MM:SS,mmm]` times
(global batch x steps / seconds; the global batch comes from the hints: DeepSpeed's
`train_batch_size`); without a known global batch, the mean of `CurrSamplesPerSec` after the
warm-up (with the usual warning). DLPerf's DeepSpeed report
(`DeepSpeed/Megatron-LM/README.md`) has no extractor and does not say how its samples/s were
taken; DeepSpeed's Megatron-LM forks also print Megatron iteration lines, which
`parsers.megatron` reads (a log with both is detected as Megatron; `--format deepspeed` reads
its timer lines). Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from dataclasses import replace

from parsers import logtext
from parsers.foreign import (
    EpochIterations,
    IterRecord,
    LogHints,
    ParsedLog,
    finish,
    parse_datetime_s,
    parse_float,
)
from parsers.rows import METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW

FAMILY = "deepspeed"

_NUMBER = r"[-\d.eE+]+|nan|inf"
RECORD = logtext.compile(
    r"(?:\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[INFO\] )?\[timer\.py:\d+:stop\] "
    r"(?:epoch=(?P<epoch>\d+)/micro_step=\d+/global_step=(?P<step>\d+)"
    r"|(?P<old_epoch>\d+)/(?P<old_step>\d+)), "
    rf"(?:RunningAvgSamplesPerSec|SamplesPerSec)=(?P<running>{_NUMBER})"
    rf"(?:, CurrSamplesPerSec=(?P<current>{_NUMBER}))?"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records: list[IterRecord] = []
    counter = EpochIterations()
    running: float | None = None
    for line in text.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        if match["step"] is not None:
            iteration = int(match["step"])  # counted across epochs already
        else:
            iteration = counter.total(int(match["old_epoch"]), int(match["old_step"]))
        stamp = parse_datetime_s(match["stamp"]) if match["stamp"] else None
        running = parse_float(match["running"])
        records.append(IterRecord(
            iteration=iteration, timestamp_s=stamp,
            since_iteration=records[-1].iteration if records else None,
            rate_sps=parse_float(match["current"]) if match["current"] else None))
    parsed = finish(FAMILY, records, hints, order=(METHOD_TIMESTAMP_WINDOW, METHOD_MEAN_OF_RATES))
    if running is None:
        return parsed
    return replace(parsed, extra={**parsed.extra, "reported_summary_sps": running})
