"""Foreign log trees -> run rows, for `python -m toolkit.collect --import-logs <dir>`.

Walks a directory of old benchmark logs (DLPerf style: `<N>n<G>g/<model>_b<bs>_<prec>_<k>.log`,
or any tree with the shape in the logs themselves), parses each file with `parsers.detect`
(`--format auto` per file), and returns the same `RunRow`s the toolkit's own runs give, so
imported and native results share every table. Model and precision names are brought to the
toolkit's vocabulary (`rn50` -> `resnet50`, `amp`/`fp16` -> `amp_fp16`) so that the same
workload lines up across frameworks; the name the log used stays in the row (`log_model`,
`log_precision`).

Nothing is dropped silently: a file that cannot be read or understood, or whose run shape is
unknown, is returned in `skipped` with the reason; a file with the same bytes as an earlier one
of the same case is the same run and skipped too (it would be counted twice in the median),
while a different log of a case and repeat already read is another run of the case, its next
repeat (the row's `repeat_note` says so); files that do not match the pattern are counted. The
per-format line parsing lives in `parsers/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from parsers import logtext
from parsers.detect import parse_path
from parsers.foreign import LogHints, LogParseError, ParsedLog, to_run_row
from parsers.rows import RunRow
from toolkit.spec.command import file_sha256

DEFAULT_PATTERN = "*.log"

# Model names seen in DLPerf-era trees and logs -> the toolkit's `Model` values.
_MODEL_RULES: tuple[tuple[logtext.Pattern, str], ...] = (
    (logtext.compile(r"^(r|rn|resnet)[-_]?50([-_.]?v1\.?5)?$"), "resnet50"),
    (logtext.compile(r"^bert([-_]base.*)?$"), "bert_base"),
    (logtext.compile(r"^(gpt|megatron)([-_]?\w*)?$"), "gpt"),
)

# Precision names -> the toolkit's `Precision` values. DLPerf's `amp` is fp16 mixed precision
# (V100 era: no bf16).
_PRECISIONS = {
    "fp32": "fp32", "float32": "fp32", "tf32": "tf32",
    "fp16": "amp_fp16", "amp": "amp_fp16", "amp_fp16": "amp_fp16", "mixed": "amp_fp16",
    "bf16": "amp_bf16", "amp_bf16": "amp_bf16",
}


def normalize_model(name: str | None) -> str | None:
    """`rn50`/`r50`/`resnet50` -> `resnet50`, `bert-base-...` -> `bert_base`; others unchanged."""
    if not name:
        return name
    low = name.strip().lower()
    for pattern, canonical in _MODEL_RULES:
        if pattern.match(low):
            return canonical
    return name


def normalize_precision(name: str | None) -> str | None:
    """`fp16`/`amp` -> `amp_fp16`, `bf16` -> `amp_bf16`, `fp32`, `tf32`; others unchanged."""
    if not name:
        return name
    return _PRECISIONS.get(name.strip().lower(), name)


@dataclass(frozen=True)
class Skipped:
    """A file that gave no run row, and why."""

    path: str
    reason: str


@dataclass
class ImportResult:
    rows: list[RunRow] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    ignored: int = 0
    """Files under the root that do not match the pattern (counted, not read)."""
    pattern: str = DEFAULT_PATTERN


def _reason(path: Path, error: Exception) -> str:
    """The parse error without the path it starts with (the listing shows the path)."""
    text = str(error)
    prefix = f"{path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def row_from_log(parsed: ParsedLog) -> RunRow:
    """`to_run_row` after bringing model and precision names to the toolkit's vocabulary."""
    hints = parsed.hints
    model, precision = normalize_model(hints.model), normalize_precision(hints.precision)
    row = to_run_row(replace(parsed, hints=replace(hints, model=model, precision=precision)))
    if hints.model and model != hints.model:
        row.extra["log_model"] = hints.model
    if hints.precision and precision != hints.precision:
        row.extra["log_precision"] = hints.precision
    return row


_SHAPE = ("num_nodes", "gpus_per_node", "batch_size_per_device")


def read_log(path: Path, fmt: str = "auto", hints: LogHints | None = None,
             defaults: LogHints | None = None) -> RunRow:
    """One log -> one row; `LogParseError` says why not.

    `hints` override what the path and the log say (framework, window); `defaults` give the
    run's shape (nodes, GPUs per node, batch) only where neither the path nor the log does:
    the file is parsed again with them, since the throughput depends on the global batch.
    """
    parsed = parse_path(path, fmt, hints)
    try:
        return row_from_log(parsed)
    except LogParseError:
        if defaults is None:
            raise
        known = dict(zip(_SHAPE, (*parsed.hints.resolved_topology(),
                                  parsed.hints.batch_size_per_device), strict=True))
        fill = {k: getattr(defaults, k) for k in _SHAPE
                if known[k] is None and getattr(defaults, k) is not None}
        if not fill:
            raise
    return row_from_log(parse_path(path, fmt, replace(hints or LogHints(), **fill)))


def import_logs(root: Path, *, fmt: str = "auto", hints: LogHints | None = None,
                defaults: LogHints | None = None,
                pattern: str = DEFAULT_PATTERN) -> ImportResult:
    """Every file under `root` matching `pattern` -> a row, or an entry in `skipped`.

    `hints` override what the path and the log say; `defaults` fill the run's shape where
    neither says it (`read_log`).
    """
    result = ImportResult(pattern=pattern)
    seen: dict[tuple[str, int], str] = {}  # (case, repeat) -> the file that gave it
    logs: dict[tuple[str, str], str] = {}  # (sha256 of its bytes, case) -> the file read
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if not path.match(pattern):
                result.ignored += 1
                continue
            try:
                row = read_log(path, fmt, hints, defaults)
            except LogParseError as error:
                result.skipped.append(Skipped(str(path), _reason(path, error)))
                continue
            digest = (file_sha256(path), row.case_id)
            if digest in logs:
                result.skipped.append(Skipped(
                    str(path), f"the same log of {row.case_id} as {logs[digest]} (identical "
                               "bytes): one run, not counted twice"))
                continue
            key = (row.case_id, row.repeat)
            if key in seen:
                # another run of the case (its bytes differ): its next repeat, not a duplicate
                taken = max(r for c, r in seen if c == row.case_id)
                row.extra["repeat_note"] = (
                    f"repeat {taken + 1}: another run of {row.case_id} than {seen[key]} "
                    f"(its bytes differ) whose name gives the same repeat {row.repeat}; "
                    "numbered in the order of the file names")
                row.repeat = taken + 1
                key = (row.case_id, row.repeat)
            seen[key] = logs[digest] = str(path)
            result.rows.append(row)
    return result
