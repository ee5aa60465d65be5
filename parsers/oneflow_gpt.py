"""OneFlow-GPT (DLPerf) metric tables, with the nvidia-smi memory CSV sampled beside them.

```
| batches  | micro_batches   | samples         | throughput | latency    | loss       |
| 10       | 320             | 5120            | 35.88042   | 14.26962   | 11.23708   |
```
`latency` is seconds per iteration; the global batch is `samples / batches` (or the hint);
throughput = global batch / latency after the warm-up (method `latency`). Peak memory is the
largest `memory.used [MiB]` of an `nvidia-smi --query-gpu=... --format=csv` dump found in the
same text. The `--- arguments ---` table before them (num_nodes, num_gpus_per_node,
micro_batch_size, parallel sizes, model size) gives the run's shape. Shared machinery:
`parsers.foreign`.
"""

from __future__ import annotations

from dataclasses import replace

from parsers import logtext
from parsers._argdump import hints_from_dotted, read_dotted_dump
from parsers.foreign import IterRecord, LogHints, ParsedLog, finish, parse_float
from parsers.rows import METHOD_LATENCY

FAMILY = "oneflow_gpt"

HEADER = logtext.compile(r"(?m)^\|\s*batches\s*\|\s*micro_batches\s*\|\s*samples\s*\|")
_ROW = logtext.compile(
    r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|"
)


def peak_memory_mib(text: str) -> float | None:
    """Largest `memory.used` of nvidia-smi CSV blocks (`utilization.gpu [%], memory.used [MiB]`)."""
    peak: float | None = None
    column: int | None = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if "memory.used [MiB]" in cells:
            column = cells.index("memory.used [MiB]")
            continue
        if column is None or len(cells) <= column:
            column = None if len(cells) <= 1 else column
            continue
        value = cells[column].removesuffix("MiB").strip()
        used = parse_float(value)
        if used is None:
            column = None
            continue
        peak = used if peak is None else max(peak, used)
    return peak


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    records = []
    batches_per_row = []
    for line in text.splitlines():
        match = _ROW.match(line.strip())
        if match is None:
            continue
        batches, _micro, samples, rate, seconds, loss = match.groups()
        if int(batches) == 0:
            continue
        batches_per_row.append(int(samples) // int(batches))
        records.append(
            IterRecord(
                iteration=int(batches),
                rate_sps=parse_float(rate),
                step_time_s=parse_float(seconds),
                loss=parse_float(loss),
            )
        )
    found = {k: v for k, v in hints_from_dotted(read_dotted_dump(text)).items() if v is not None}
    if batches_per_row:
        found.setdefault("global_batch_size", batches_per_row[0])
    effective, conflicts = hints.filled_from_log(found)
    parsed = finish(
        FAMILY, records, effective, order=(METHOD_LATENCY,), warnings=conflicts,
        peak_memory_mib=peak_memory_mib(text),
    )
    if parsed.step_time_median_s is None:
        return parsed
    return replace(parsed, extra={"latency_ms": parsed.step_time_median_s * 1000.0})
