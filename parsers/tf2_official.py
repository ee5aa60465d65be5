"""TensorFlow 2 official models (tensorflow/models `keras_utils.TimeHistory`) logs.

`TimeHistory: 39.13 seconds, 327.08 examples/second between steps 100 and 200` reports a rate
over all replicas for each logging interval; the throughput is the mean of the intervals that
start after the warm-up (method `mean_of_rates`). The absl prefix (`I0826 15:12:50.113950`)
carries no year and no date across midnight, so it is not used as a timestamp.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from dataclasses import replace

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES

FAMILY = "tf2_official"

RECORD = logtext.compile(
    r"TimeHistory: ([\d.]+) seconds, ([\d.]+) examples/second between steps (\d+) and (\d+)"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    for line in text.splitlines():
        match = RECORD.search(line)
        if match is None:
            continue
        seconds, rate, first, last = match.groups()
        steps = int(last) - int(first)
        elapsed = parse_float(seconds)
        records.append(
            IterRecord(
                iteration=int(last),
                since_iteration=int(first),
                rate_sps=parse_float(rate),
                step_time_s=elapsed / steps if elapsed is not None and steps > 0 else None,
            )
        )
    parsed = finish(FAMILY, records, hints, order=(METHOD_MEAN_OF_RATES,))
    if parsed.throughput_sps is None:
        return parsed
    return replace(parsed, step_time_median_s=None)
