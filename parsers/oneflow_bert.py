"""OneFlow-Benchmark BERT pretraining logs: `step: N, total_loss: ..., throughput: R <unix ts>`.

Steps are printed 0-based (`step: 19` is the 20th iteration). The `key = value` argument dump
gives batch_size_per_device, gpu_num_per_node and num_nodes. Timestamped logs give the
timestamp window; without timestamps the mean of printed rates is used.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers._argdump import hints_from_arguments, read_argument_dump
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW

FAMILY = "oneflow_bert"

RECORD = logtext.compile(
    r"^step: (\d+), total_loss: (\S+?),.*?throughput: ([\d.]+)(?:\s+(\d{9,}\.\d+))?\s*$"
)


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    arguments = read_argument_dump(text, stop=RECORD)
    effective, conflicts = hints.filled_from_log(hints_from_arguments(arguments))
    records = []
    for line in text.splitlines():
        match = RECORD.match(line.strip())
        if match is None:
            continue
        step, loss, rate, stamp = match.groups()
        records.append(
            IterRecord(
                iteration=int(step) + 1,
                timestamp_s=parse_float(stamp) if stamp else None,
                rate_sps=parse_float(rate),
                loss=parse_float(loss),
            )
        )
    return finish(
        FAMILY, records, effective, order=(METHOD_TIMESTAMP_WINDOW, METHOD_MEAN_OF_RATES),
        warnings=conflicts, settings=arguments,
    )
