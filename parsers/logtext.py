"""How the readers in `parsers/` read a file: bounded lines, a bounded file, linear-time patterns.

Logs come from anywhere: a progress bar that rewrites one line with carriage returns for
hours, a file that is one line of gigabytes, a line that nearly matches a pattern millions of
times. Reading one must cost time linear in its size and memory bounded by the limits below:

- every regular expression of `parsers/` (and of the toolkit code that classifies a log) is
  compiled by `compile`, with RE2 (`google-re2`): matching never backtracks, so its time is
  linear in the text whatever the text. RE2 has no look-around and no back-references; the
  few places that would need one test a prefix in Python instead. Python's `re` is not
  imported in `parsers/` (`tests/unit/parsers/test_linear_time.py` checks);
- `read_lines` streams a text file line by line: `\\n`, `\\r\\n` and a lone `\\r` each end a
  line (every update of a carriage-return progress bar is a line of its own); a line longer
  than `MAX_LINE_CHARS` is skipped, read past in chunks without being held whole, and counted
  (`LogText.long_lines`, reported by the caller with `long_lines_note`); a file larger than
  `MAX_FILE_BYTES` is refused before it is read;
- `read_document` reads a whole document (JSON, XML) up to `MAX_DOCUMENT_BYTES`;
- `json_value` is every JSON reader's decoder (rank files, DLLogger and MLLOG lines, report
  files, ledgers): a document nested deeper than `MAX_JSON_DEPTH` (which would raise
  RecursionError in the decoder, or in whatever walks the value after it) and an integer longer
  than Python converts (4,300 digits) are a `ValueError` like any other garbled line, which the
  caller skips and counts.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import re2

if TYPE_CHECKING:
    from typing import TypeAlias

    Pattern: TypeAlias = re2._Regexp[str]
    Match: TypeAlias = re2._Match[str]

MAX_LINE_CHARS = 1 << 20
"""Characters in one line (1 Mi); a longer line is skipped and counted. Real log lines (a
Megatron iteration, an MLLOG event, a DLLogger record behind a progress bar) are well under
10 Ki."""
MAX_FILE_BYTES = 1 << 30
"""Bytes in one text file read line by line (1 GiB: a million Megatron iterations logged one by
one are half of it); a larger one is refused before it is read. The lines kept are held for
the family's parser, which reads them more than once (argument dump, then records)."""
MAX_DOCUMENT_BYTES = 256 << 20
"""Bytes in one JSON or XML document, which is parsed whole (256 MiB; nccl-tests' `-J` file
and `nvidia-smi -q -x` of a node are under a megabyte)."""
_BINARY_PROBE = 65536
"""Bytes at the start of a file where a NUL byte marks it as binary, not text."""
_SKIP_CHUNK = 1 << 16
"""Characters read at a time while skipping the rest of an over-long line."""
MAX_JSON_DEPTH = 64
"""Arrays and objects nested in one JSON value. The deepest record any writer here or in the
families read nests 4; Python's decoder recurses once per level and fails near 1,000."""
_RAW_DECODE = json.JSONDecoder().raw_decode


class JSONDepthError(ValueError):
    """A JSON value nested deeper than `MAX_JSON_DEPTH`."""


class ReadError(ValueError):
    """A file that cannot be read as text within the limits; the message says why (without
    the path: the caller names the file)."""


def compile(pattern: str) -> Pattern:
    """`pattern` compiled with RE2 (linear-time matching). Flags go inline: `(?m)`, `(?s)`."""
    return re2.compile(pattern)


def escape(text: str) -> str:
    """`text` as a pattern that matches it literally."""
    return re2.escape(text)


@dataclass(frozen=True)
class LogText:
    """The text of a file as read: every line within the limit, each ending in `\\n`."""

    text: str
    long_lines: int = 0
    """Lines longer than `MAX_LINE_CHARS`, left out of `text`."""
    max_line_chars: int = MAX_LINE_CHARS


def long_lines_note(count: int, max_line_chars: int = MAX_LINE_CHARS) -> str:
    """How a reader says that lines were skipped."""
    return (f"{count} line(s) longer than {max_line_chars} characters skipped (the limit of "
            "one line)")


def _check_file(path: str | os.PathLike[str], max_file_bytes: int) -> None:
    try:
        info = os.stat(path)
    except OSError as error:
        raise ReadError(f"cannot read: {error.strerror or error}") from error
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
        raise ReadError("not a regular file")
    if info.st_size > max_file_bytes:
        raise ReadError(f"{info.st_size} bytes, more than the limit of {max_file_bytes} bytes "
                        "for one file; not read")


def _refuse_binary(head: bytes) -> None:
    if b"\x00" in head[:_BINARY_PROBE]:
        raise ReadError("binary file (NUL bytes), not a text log")


def read_lines(path: str | os.PathLike[str], *, max_line_chars: int = MAX_LINE_CHARS,
               max_file_bytes: int = MAX_FILE_BYTES) -> LogText:
    """A text file's lines within the limits (UTF-8, undecodable bytes replaced), streamed:
    an over-long line is never held whole. `ReadError` for a file that is not a regular
    file, is binary, is larger than `max_file_bytes` or cannot be read."""
    _check_file(path, max_file_bytes)
    kept: list[str] = []
    long_lines = 0
    read = 0
    try:
        with open(path, "rb") as raw:
            _refuse_binary(raw.read(_BINARY_PROBE))
        with open(path, encoding="utf-8", errors="replace", newline=None) as fh:
            while line := fh.readline(max_line_chars + 1):
                read += len(line)
                if len(line) <= max_line_chars or line.endswith("\n"):
                    kept.append(line if line.endswith("\n") else line + "\n")
                    continue
                long_lines += 1
                while (rest := fh.readline(_SKIP_CHUNK)) and not rest.endswith("\n"):
                    read += len(rest)
                read += len(rest)
                if read > max_file_bytes:  # the file grew while it was read
                    raise ReadError(f"more than the limit of {max_file_bytes} bytes for one "
                                    "file; not read")
    except OSError as error:
        raise ReadError(f"cannot read: {error.strerror or error}") from error
    return LogText("".join(kept), long_lines, max_line_chars)


def read_document(path: str | os.PathLike[str], *,
                  max_file_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """A whole text document (JSON, XML) within the file limit, UTF-8 with undecodable bytes
    replaced; `ReadError` as `read_lines`."""
    _check_file(path, max_file_bytes)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_file_bytes + 1)
    except OSError as error:
        raise ReadError(f"cannot read: {error.strerror or error}") from error
    if len(data) > max_file_bytes:
        raise ReadError(f"more than the limit of {max_file_bytes} bytes for one file; not read")
    _refuse_binary(data)
    return data.decode("utf-8", errors="replace")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` deep in a decoded JSON value, walked
    without recursion (and stopping at the first level past the limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def json_value(text: str | bytes) -> Any:
    """The JSON value of `text` (a line or a document; bytes as UTF-8), which must be the whole
    text but for surrounding whitespace. `ValueError` (or its `UnicodeDecodeError`) for
    anything else: not JSON, cut short, extra data, an integer of more than 4,300 digits, or
    nesting deeper than `MAX_JSON_DEPTH` (`JSONDepthError`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    text = text.strip(" \t\r\n")
    try:
        value, end = _RAW_DECODE(text)
    except RecursionError:
        raise JSONDepthError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    if end != len(text):
        raise ValueError(f"extra data after the value at column {end}")
    if isinstance(value, (dict, list)) and text.count("[") + text.count(
            "{") > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise JSONDepthError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return value
