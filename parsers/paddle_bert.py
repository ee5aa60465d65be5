"""PaddlePaddle BERT/ERNIE pretraining logs: `epoch: E, progress: a/b, step: N, loss: ..., speed:
S steps/s, file: ...`.

`speed` is optimizer steps per second over the `skip_steps` steps since the previous printed line
(the interval the record covers); samples per second are `speed x global batch`. DLPerf's
`PaddlePaddle/bert/extract_paddle_logs.py` averages exactly those products over the printed lines
of its window (the mean of printed rates); so does this parser. Validation lines
(`[validation_set] ... speed: ...`) measure evaluation, not training, and are not records.
Without a known global batch there is no throughput (a step rate is not a sample rate).
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from dataclasses import replace

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES

FAMILY = "paddle_bert"

RECORD = logtext.compile(
    r"^(?:epoch: (\d+), )?(?:progress: \d+/\d+, )?step: (\d+), .*?\bloss: ([-\d.eE+naif]+)"
    r".*?, speed: ([\d.]+) steps/s"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    global_batch = hints.resolved_global_batch_size()
    records: list[IterRecord] = []
    for line in text.splitlines():
        stripped = line.strip()
        match = None if stripped.startswith("[") else RECORD.match(stripped)
        if match is None:
            continue
        _epoch, step, loss, speed = match.groups()
        steps_per_s = parse_float(speed)
        records.append(
            IterRecord(
                iteration=int(step),
                rate_sps=(steps_per_s * global_batch
                          if steps_per_s is not None and global_batch is not None else None),
                step_time_s=1.0 / steps_per_s if steps_per_s else None,
                loss=parse_float(loss),
            )
        )
    records = [replace(r, since_iteration=records[i - 1].iteration) if i else r
               for i, r in enumerate(records)]
    return finish(FAMILY, records, hints, order=(METHOD_MEAN_OF_RATES,))
