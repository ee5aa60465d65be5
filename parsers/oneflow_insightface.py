"""OneFlow InsightFace (oneflow_face) training logs: `train: iter N, loss L, throughput: T`.

`N` counts from 0, one line per iteration; `T` is the samples per second over all devices the
script printed for that iteration. DLPerf's `OneFlow/Recognition/insightface/
extract_oneflow_logs_time.py` ignores lines with `N <= 5`, numbers the rest from 1 and averages
`T` over lines `W..T` (`--warmup_batches W --train_batches T`, both ends included; a log shorter
than `T` lines gets 0 there, and a warning here). The mean of printed rates is this family's
figure too; a record is at iteration `N + 1` and covers iteration `N`, so for a log that starts
at iteration 0 DLPerf's W..T is `--warmup-iterations 5+W --measured-iterations T-W+1`.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES

FAMILY = "oneflow_insightface"

RECORD = logtext.compile(r"^train: iter (\d+), loss ([-\d.eE+naif]+), throughput: ([\d.]+)\s*$")


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    for line in text.splitlines():
        match = RECORD.match(line.strip())
        if match is None:
            continue
        step, loss, rate = match.groups()
        records.append(IterRecord(iteration=int(step) + 1, since_iteration=int(step),
                                  rate_sps=parse_float(rate), loss=parse_float(loss)))
    return finish(FAMILY, records, hints, order=(METHOD_MEAN_OF_RATES,))
