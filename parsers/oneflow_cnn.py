"""OneFlow-Benchmark CNN logs (`Classification/cnns`): `train: epoch E, iter I, ..., samples/s: R`.

A `key = value` argument dump comes first (model, batch_size_per_device, gpu_num_per_node,
num_nodes, num_examples). Newer logs append a Unix timestamp after the rate, which gives the
timestamp window; older ones do not, and the mean of the printed rates is used (the first
record, which includes start-up, falls in the warm-up). `iter` restarts at each epoch: with
`num_examples` in the dump the epoch length is known, otherwise iterations are continued from
the last one logged. `Saving model to ...` and validation lines are skipped.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

import math

from parsers import logtext
from parsers._argdump import hints_from_arguments, read_argument_dump
from parsers.foreign import (
    EpochIterations,
    IterRecord,
    LogHints,
    ParsedLog,
    finish,
    parse_float,
    parse_int,
)
from parsers.rows import METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW

FAMILY = "oneflow_cnn"

RECORD = logtext.compile(
    r"^train: epoch (\d+), iter (\d+),(?: loss: (\S+),)?.*?samples/s: (-?[\d.]+)"
    r"(?:\s+(\d{9,}\.\d+))?\s*$"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    arguments = read_argument_dump(text, stop=RECORD)
    effective, conflicts = hints.filled_from_log(hints_from_arguments(arguments))
    num_examples = parse_int(arguments.get("num_examples"), "num_examples")
    global_batch = effective.resolved_global_batch_size()
    per_epoch = (
        math.ceil(num_examples / global_batch) if num_examples and global_batch else None
    )
    epochs = EpochIterations(per_epoch)
    records: list[IterRecord] = []
    for line in text.splitlines():
        match = RECORD.match(line.strip())
        if match is None:
            continue
        epoch, step, loss, rate, stamp = match.groups()
        rate_sps = parse_float(rate)
        records.append(
            IterRecord(
                iteration=epochs.total(int(epoch), int(step)),
                timestamp_s=parse_float(stamp) if stamp else None,
                rate_sps=rate_sps if rate_sps is not None and rate_sps > 0 else None,
                loss=parse_float(loss) if loss else None,
            )
        )
    warnings = list(conflicts)
    if epochs.guessed:
        warnings.append("iter restarted at an epoch change and num_examples is not in the "
                        "argument dump; iterations continued from the last one logged")
    return finish(
        FAMILY, records, effective, order=(METHOD_TIMESTAMP_WINDOW, METHOD_MEAN_OF_RATES),
        warnings=warnings, settings=arguments,
    )
