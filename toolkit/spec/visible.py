"""Control characters shown as escapes (`\\x1b`): the rule under every output of text that
came from outside (a name, a failure reason read from a run's files); and the CSV cell that a
spreadsheet never runs as a formula (`csv_cell`, with `csv_value` to read it back).

`toolkit.report.text` builds each output's escaping on `visible` (markdown, plots, terminal,
XML); it sits here, in the first stage, so that every stage that prints such text applies the
same rule (`toolkit.launch.run_states` shows the reasons of failed runs).
"""

from __future__ import annotations

import re

#: C0 and C1 control characters, DEL, the Unicode line/paragraph separators and the
#: bidirectional embedding, override and isolate marks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_PROSE_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape(match: re.Match[str]) -> str:
    """One matched character as `\\xNN` (or `\\uNNNN` above 0xff)."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, keep_lines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`); `keep_lines` keeps
    newlines and tabs."""
    return (_PROSE_CONTROL if keep_lines else _CONTROL).sub(escape, str(text))


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP's CSV injection rule)."""
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text, never runs: text that begins with `=`, `+`,
    `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP), unless it is a plain
    number (`-3.5` stays a number). Numbers and None are returned as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS) and not _NUMBER.fullmatch(
            value):
        return "'" + value
    return value


def csv_value(text: str) -> str:
    """A cell `csv_cell` wrote, as it was before (the `'` it added removed)."""
    if text.startswith("'") and text[1:].startswith(_FORMULA_STARTS) and not _NUMBER.fullmatch(
            text[1:]):
        return text[1:]
    return text
