"""PaddlePaddle training logs, 1.8 (`... train batch 20 ... elapse 0.3630 sec`) and 2.0
(`... train step:50 , ... batch_cost: 0.28419 s, ... ips: 225.2 images/sec.`,
`... elapse: 0.280s ips: 342.69921 images/sec.`).

A record is a line with a step (`train batch N`, `train step:N`, `batch N`, 0-based) and a
batch time (`elapse`, `batch_cost`). Lines with a millisecond timestamp
(`YYYY-MM-DD HH:MM:SS,mmm`, as DLPerf's Paddle 1.8 logs have) give the timestamp window;
otherwise global batch / mean batch time after the warm-up (`latency`). The printed `ips` is
per trainer process and only a last resort. Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

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

FAMILY = "paddle"

_STAMP = logtext.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{3,6})")
_EPOCH = logtext.compile(r"(?:\bPass|\bepoch:?|\bEpoch)\s*\[?(\d+)")
_STEP = logtext.compile(r"(?:train batch|train step:?|\bbatch|\biter:?)\s*(\d+)")
# A number with its exponent, if any: `1.5e-01 sec` is 0.15 s, never 1.5 s.
_NUMBER = r"([\d.]+(?:[eE][-+]?\d+)?)"
BATCH_TIME = logtext.compile(rf"(?:\belapse|\bbatch_cost):?\s*{_NUMBER}\s*(?:s\b|sec\b)?")
_IPS = logtext.compile(rf"\bips:?\s*{_NUMBER}")
_LOSS = logtext.compile(r"\b(?:avg_)?loss:?\s*([-\d.eE+]+)")


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    epochs = EpochIterations()
    for line in text.splitlines():
        batch_time = BATCH_TIME.search(line)
        step = _STEP.search(line)
        if batch_time is None or step is None:
            continue
        epoch = _EPOCH.search(line)
        stamp = _STAMP.search(line)
        try:
            timestamp = parse_datetime_s(stamp.group(1)) if stamp else None
        except ValueError:
            timestamp = None
        ips = _IPS.search(line)
        loss = _LOSS.search(line)
        iteration = epochs.total(int(epoch.group(1)) if epoch else None, int(step.group(1)) + 1)
        records.append(
            IterRecord(
                iteration=iteration,
                timestamp_s=timestamp,
                step_time_s=parse_float(batch_time.group(1)),
                rate_sps=parse_float(ips.group(1)) if ips else None,
                loss=parse_float(loss.group(1)) if loss else None,
            )
        )
    return finish(FAMILY, records, hints)
