"""Horovod / `mpirun --tag-output` per-rank logs (NGC MXNet ResNet50 Speedometer lines).

```
[1,0]<stderr>:2020-12-16 08:02:38,301:INFO: Epoch[0] Batch [20-39]<TAB>Speed: 390.66 samples/sec
```
`[1,<rank>]<stdout|stderr>:` names the rank; every rank prints its own line per window, so the
records keep their rank and the throughput is measured on the lowest rank only (never averaged
over duplicated lines). `Batch [a-b]` covers batches a..b of the epoch: the record is at
iteration b + 1. Timestamps (millisecond resolution) give the timestamp window; the printed
`Speed` (per rank) is the fallback. Shared machinery: `parsers.foreign`.
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
from parsers.rows import METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW

FAMILY = "horovod"

_TAG = logtext.compile(r"^\[(\d+),(\d+)\]<(?:stdout|stderr)>:")
RECORD = logtext.compile(
    r"(?:(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\S*\s*)?.*?Epoch\[(\d+)\] Batch \[(\d+)-(\d+)\]"
    r"\s+Speed: ([\d.]+) samples/sec"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    counters: dict[int | None, EpochIterations] = {}
    for line in text.splitlines():
        tag = _TAG.match(line)
        rank = int(tag.group(2)) if tag else None
        body = line[tag.end():] if tag else line
        match = RECORD.search(body)
        if match is None:
            continue
        stamp, epoch, first, last, speed = match.groups()
        try:
            timestamp = parse_datetime_s(stamp) if stamp else None
        except ValueError:
            timestamp = None
        counter = counters.setdefault(rank, EpochIterations())
        end = counter.total(int(epoch), int(last) + 1)
        records.append(
            IterRecord(
                iteration=end,
                since_iteration=end - (int(last) + 1 - int(first)),
                timestamp_s=timestamp,
                rate_sps=parse_float(speed),
                rank=rank,
            )
        )
    warnings = []
    if any(r.rank is not None and r.rank > 0 for r in records):
        warnings.append("Speed is printed per rank; a mean-of-rates fallback is one rank's rate")
    return finish(
        FAMILY, records, hints, order=(METHOD_TIMESTAMP_WINDOW, METHOD_MEAN_OF_RATES),
        warnings=warnings,
    )
