"""MLPerf logging (`:::MLLOG {json}`) logs, as `python -m toolkit.collect` exports them.

Each line is one JSON event with `time_ms`, `event_type`, `key`, `value` and `metadata`; the
standard key names come from the `mlperf-logging` package (`mlperf_logging.mllog.constants`),
never spelled here. A training step is a `block_start`/`block_stop` pair whose metadata carry
`step_num` and the cumulative `samples_count`; `global_batch_size` gives the samples per step.
Two keys are trainbench's own (MLPerf logging has no name for them): `TRAINBENCH_RUN` (the
run's shape, so a log read back lands in the same case) and `TRAINBENCH_THROUGHPUT` (the
figure the run itself computed, kept as `reported_summary_sps`).

Logs of other MLPerf submissions have no per-step blocks: they are read as far as they go
(blocks or epochs that carry `samples_count` give records; otherwise "no records").
Shared machinery: `parsers.foreign`.
"""

from __future__ import annotations

import math
from typing import Any

from parsers import logtext
from parsers.foreign import (
    MAX_ITERATION,
    MAX_TEXT,
    IterRecord,
    LogHints,
    LogParseError,
    ParsedLog,
    Skipped,
    checked_int,
    checked_number,
    finish,
)
from parsers.rows import METHOD_TIMESTAMP_WINDOW

FAMILY = "mllog"
TOKEN = ":::MLLOG "
"""What starts an event (after any prefix a launcher adds, e.g. `[1,0]<stdout>:`)."""

TRAINBENCH_RUN = "trainbench_run"
"""Value: {case_id, repeat, framework, model, precision, num_nodes, gpus_per_node,
batch_size_per_device, variant}."""
TRAINBENCH_THROUGHPUT = "trainbench_throughput"
"""Value: the run's samples/s; metadata: method, warmup_iterations, measured_iterations."""

#: TRAINBENCH_RUN fields -> LogHints fields
_RUN_HINTS = ("framework", "model", "precision", "num_nodes", "gpus_per_node",
              "batch_size_per_device", "repeat", "variant")


def constants() -> Any:
    """`mlperf_logging.mllog.constants`; a clear error where the package is not installed."""
    try:
        from mlperf_logging.mllog import constants as mllog_constants
    except ImportError as error:
        raise LogParseError("reading or writing MLPerf logs needs the mlperf-logging package "
                            "(pip install 'trainbench[mlperf]')") from error
    return mllog_constants


def events(text: str, garbled: Skipped) -> list[dict[str, Any]]:
    """Every `:::MLLOG` event of `text`, in order, with its line number added (`line`). A line
    that is cut or not JSON (or nested too deep) is counted in `garbled` and skipped; one
    whose key, time or metadata is of the wrong type or range raises `LogParseError` naming
    the line."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        at = line.find(TOKEN)
        if at < 0:
            continue
        try:
            event = logtext.json_value(line[at + len(TOKEN):])
        except ValueError as error:
            garbled.add(f"line {number}: {error!s:.100}")
            continue
        if not isinstance(event, dict) or "key" not in event or "time_ms" not in event:
            raise LogParseError(f"line {number}: :::MLLOG event without 'key' or 'time_ms'")
        if not isinstance(event["key"], str):
            raise LogParseError(f"line {number}: key {event['key']!r:.60} is not text")
        checked_number(f"line {number}: time_ms", event["time_ms"])
        if not isinstance(event.get("metadata") or {}, dict):
            raise LogParseError(f"line {number}: metadata is not an object")
        event["line"] = number
        found.append(event)
    return found


def parse(text: str, *, hints: LogHints) -> ParsedLog:
    c = constants()
    garbled = Skipped(":::MLLOG line(s) not JSON")
    found = events(text, garbled)
    known: dict[str, Any] = {}
    settings: dict[str, str] = {}
    extra: dict[str, float] = {}
    records: list[IterRecord] = []
    for event in found:
        key, value = event["key"], event.get("value")
        metadata = event.get("metadata") or {}
        where = f"line {event['line']}: {key}"
        if key == TRAINBENCH_RUN and isinstance(value, dict):
            known.update({k: value[k] for k in _RUN_HINTS if value.get(k) not in (None, "")})
            if value.get("case_id"):
                if not isinstance(value["case_id"], str) or len(value["case_id"]) > MAX_TEXT:
                    raise LogParseError(f"{where}: case_id {value['case_id']!r:.60} is not a "
                                        f"name (text of at most {MAX_TEXT} characters)")
                settings["case_id"] = value["case_id"]
        elif key == c.GLOBAL_BATCH_SIZE:
            known["global_batch_size"] = value
        elif key == c.GRADIENT_ACCUMULATION_STEPS:
            known["accumulation"] = value
        elif key == c.TENSOR_PARALLELISM:
            known["tp"] = value
        elif key == c.PIPELINE_PARALLELISM:
            known["pp"] = value
        elif key == TRAINBENCH_THROUGHPUT:
            extra["reported_summary_sps"] = checked_number(f"{where}: value", value)
        elif key in (c.BLOCK_STOP, c.EPOCH_STOP) and "samples_count" in metadata:
            step = metadata.get(c.STEP_NUM, metadata.get(c.EPOCH_NUM, len(records) + 1))
            loss = metadata.get("loss")
            records.append(IterRecord(
                iteration=checked_int(f"{where}: step", step, 0, MAX_ITERATION),
                timestamp_s=float(event["time_ms"]) / 1000.0,
                loss=float(loss) if isinstance(loss, (int, float)) and not isinstance(
                    loss, bool) and math.isfinite(loss) else None))
    effective, conflicts = hints.filled_from_log(known)
    return finish(FAMILY, records, effective, order=(METHOD_TIMESTAMP_WINDOW,),
                  warnings=[*garbled.notes(), *conflicts], extra=extra, settings=settings)
