"""Megatron-LM logs: ` iteration  122/ 250000 | ... | elapsed time per iteration (ms): 86545.2 |`.

Printed every `--log-interval` iterations by the last pipeline rank; newer versions prefix a
`[YYYY-MM-DD HH:MM:SS]` time (whole seconds, too coarse for a window, so not used) and may add
`throughput per GPU (TFLOP/s/GPU)`. Each line names its own global batch, so the throughput is
samples / seconds over the lines after the warm-up (method `latency`); the mean TFLOP/s/GPU
over the same lines goes to `extra["tflops_per_gpu"]`. The `time (ms) | forward-compute: ...`
timer lines are not iterations and are ignored. The `--- arguments ---` table, when the log has
it, gives micro batch (the per-device batch), world size, parallel layout and precision.
DeepSpeed-based forks (GPT-NeoX) start the line with ` samples/sec: S |` and name the loss
`lm_loss`; their lines carry no global batch, so it must come from the hints.
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from parsers import logtext
from parsers._argdump import hints_from_dotted, read_dotted_dump
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float, parse_int
from parsers.rows import METHOD_LATENCY

FAMILY = "megatron"

RECORD = logtext.compile(
    r"^\s*(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\s*)?(?:samples/sec: [\d.]+ \|\s*)?"
    r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$"
)
_ELAPSED = "elapsed time per iteration (ms)"
_TFLOPS = "throughput per GPU (TFLOP/s/GPU)"


def _fields(rest: str) -> dict[str, str]:
    found = {}
    for cell in rest.split("|"):
        key, sep, value = cell.rpartition(":")
        if sep:
            found[key.strip()] = value.strip()
    return found


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    tflops: dict[int, float] = {}
    for line in text.splitlines():
        match = RECORD.match(line)
        if match is None:
            continue
        iteration = int(match.group(2))
        cells = _fields(match.group(4))
        elapsed_ms = parse_float(cells.get(_ELAPSED, ""))
        if elapsed_ms is None:
            continue
        loss = next(
            (parse_float(v) for k, v in cells.items()
             if k.endswith((" loss", "_loss")) or k == "loss"),
            None,
        )
        records.append(
            IterRecord(
                iteration=iteration,
                step_time_s=elapsed_ms / 1000.0,
                loss=loss,
                samples=parse_int(cells.get("global batch size"),
                                  f"iteration {iteration}: global batch size")
                or hints.global_batch_size,
            )
        )
        value = parse_float(cells.get(_TFLOPS, ""))
        if value is not None:
            tflops[iteration] = value
    batches = {r.samples for r in records if r.samples is not None}
    found = {k: v for k, v in hints_from_dotted(read_dotted_dump(text)).items() if v is not None}
    warnings = []
    if len(batches) == 1:
        found.setdefault("global_batch_size", batches.pop())
    elif batches:
        warnings.append(f"global batch size changes during the log ({sorted(batches)}); "
                        "each line counts its own")
    effective, conflicts = hints.filled_from_log(found)
    parsed = finish(
        FAMILY, records, effective, order=(METHOD_LATENCY,), warnings=[*warnings, *conflicts]
    )
    extra: dict[str, float] = {}
    if parsed.step_time_median_s is not None:
        extra["latency_ms"] = parsed.step_time_median_s * 1000.0
    start, end = parsed.window_start_iteration, parsed.window_end_iteration
    if start is not None and end is not None:
        inside = [v for k, v in tflops.items() if start < k <= end]
        if inside:
            extra["tflops_per_gpu"] = statistics.fmean(inside)
    return replace(parsed, extra=extra)
