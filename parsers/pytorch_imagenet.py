"""pytorch/examples ImageNet logs: `Epoch: [0][ 5/53]  Time  0.360 ( 2.410)  Data ...  Loss ...`.

`Time` is the current batch's seconds followed by the running average in parentheses; the
current value is read (the number right after `Time`, however it is padded). `[i/N]` counts
batches of N per epoch: older versions print the 0-based index, newer ones `i + 1`; a log with
an index 0 is read as 0-based, any other as 1-based. The record is at iteration
`epoch * N + completed` and covers one batch. Throughput = global batch / mean batch time
after the warm-up (`latency`); pytorch/examples' `-b` is the batch of all GPUs of a node, so
pass the per-device batch or `global_batch_size` in the hints. Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_LATENCY

FAMILY = "pytorch_imagenet"

RECORD = logtext.compile(
    r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]\s+Time\s+([\d.]+)\s*\(\s*[\d.]+\)"
    r"(?:.*?Loss\s+(\S+)\s*\()?"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    matches = [m for m in map(RECORD.search, text.splitlines()) if m is not None]
    zero_based = any(int(m.group(2)) == 0 for m in matches)
    records = []
    for match in matches:
        epoch, index, per_epoch, seconds, loss = match.groups()
        iteration = int(epoch) * int(per_epoch) + int(index) + (1 if zero_based else 0)
        records.append(
            IterRecord(
                iteration=iteration,
                since_iteration=iteration - 1,
                step_time_s=parse_float(seconds),
                loss=parse_float(loss) if loss else None,
            )
        )
    return finish(FAMILY, records, hints, order=(METHOD_LATENCY,))
