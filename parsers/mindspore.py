"""MindSpore model-zoo logs: `epoch: 3 step: 100, loss is 4.1` then
`epoch time: 1146.296 ms, per step time: 143.287 ms` (TimeMonitor).

The `epoch time` line belongs to the `epoch: ... step: ...` line before it; with dataset sink
mode `step` is the number of steps per epoch, so the record is at iteration `epoch * step`
(the convention of DLPerf's MindSpore extractor). Throughput = global batch / mean per-step
time over the epochs after the warm-up (`latency`). Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

from parsers import logtext
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_LATENCY

FAMILY = "mindspore"

_EPOCH = logtext.compile(r"epoch: (\d+) step: (\d+), loss is (\S+)")
TIME = logtext.compile(r"epoch time: ([\d.]+) ms, per step time: ([\d.]+) ms")


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    pending: tuple[int, int, float | None] | None = None
    orphans = 0
    for line in text.splitlines():
        epoch_line = _EPOCH.search(line)
        if epoch_line is not None:
            epoch, steps, loss = epoch_line.groups()
            pending = (int(epoch), int(steps), parse_float(loss))
            continue
        time_line = TIME.search(line)
        if time_line is None:
            continue
        if pending is None:
            orphans += 1
            continue
        epoch_number, steps_per_epoch, loss_value = pending
        pending = None
        step_ms = parse_float(time_line.group(2))
        records.append(
            IterRecord(
                iteration=epoch_number * steps_per_epoch,
                since_iteration=(epoch_number - 1) * steps_per_epoch,
                step_time_s=step_ms / 1000.0 if step_ms is not None else None,
                loss=loss_value,
            )
        )
    warnings = []
    if orphans:
        warnings.append(f"{orphans} 'epoch time' line(s) without a preceding 'epoch: ... step:' "
                        "line ignored")
    return finish(FAMILY, records, hints, order=(METHOD_LATENCY,), warnings=warnings)
