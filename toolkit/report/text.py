"""Names are text, never markup: one function per kind of output a name reaches.

Case ids, model, framework and variant names, grid, file and directory names come from grids,
foreign logs and other people's stores, so any character may be in them. Each output has its
own markup, and a name is escaped for it where the output is made:

- `md_cell` (a markdown table cell or heading) and `md_prose` (a note, a paragraph): markdown
  and HTML punctuation backslash-escaped outside code spans, which show their content as it
  is; `toolkit.report.markdown`, `md_table` and the compare and history pages apply them;
- `plot_text` (matplotlib reads `$...$` as mathtext): every name in a title, label or legend;
- `terminal_text` (escape sequences would reach the terminal) and `console_text` (the same for
  a `rich` console, whose `[...]` markup it escapes too): every name printed;
- `xml_text` (XML 1.0 has no control characters): `toolkit.report.junit` applies it;
- `csv_cell` (a spreadsheet runs a cell that begins with `=`, `+`, `-`, `@`, a tab or a
  carriage return as a formula): every cell of every CSV file written (`csv_frame`); the
  reference reader undoes it (`csv_value`).

All of them show control characters (and the Unicode line and bidirectional-override marks)
as escapes like `\\x1b` (`toolkit.spec.visible`, re-exported here), so that none acts on what
displays it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from toolkit.spec.visible import csv_cell, escape, visible

if TYPE_CHECKING:
    import pandas as pd

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: ASCII punctuation that starts markup in (GitHub) markdown or HTML (`>` starts none inside a
#: line); `_` separately, where it can start emphasis.
_MD_PUNCT = re.compile(r"([\\`*\[\]<|&#~!])")
_MD_EMPHASIS_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_BACKTICKS = re.compile(r"`+")


def md_cell(text: object) -> str:
    """Text in a markdown table cell or a heading, shown as written: on one line (control
    characters and line breaks shown as escapes), `|` kept inside its cell, and otherwise as
    `md_prose`."""
    return _markdown(visible(text), cell=True)


def md_prose(text: object) -> str:
    """Text in markdown, shown as written: outside code spans every character that markdown or
    HTML would read as markup (`<`, `&`, `*`, `_` at a word's edge, `[`, `]`, a backtick, a
    backslash, ...) is backslash-escaped; a code span (as CommonMark finds them: a run of
    backticks closed by the next run of the same length) shows its content as it is, so our
    own sentences keep theirs. Line breaks are kept; other control characters are shown as
    escapes."""
    return _markdown(visible(text, keep_lines=True), cell=False)


def _markdown(text: str, *, cell: bool) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        opening = _BACKTICKS.search(text, pos)
        if opening is None:
            break
        closing = next((m for m in _BACKTICKS.finditer(text, opening.end())
                        if len(m.group()) == len(opening.group())), None)
        if closing is None:  # a run of backticks that closes nothing is text
            out.append(_punct(text[pos:opening.end()]))
            pos = opening.end()
            continue
        span = text[opening.start():closing.end()]
        # a table splits its row at every |, also inside a code span, unless it is escaped
        out.append(_punct(text[pos:opening.start()])
                   + (span.replace("|", "\\|") if cell else span))
        pos = closing.end()
    out.append(_punct(text[pos:]))
    return "".join(out)


def _punct(text: str) -> str:
    escaped = _MD_PUNCT.sub(r"\\\1", text)
    return _MD_EMPHASIS_UNDERSCORE.sub(r"\\_", escaped)


PLOT_LABEL_CHARS = 60
"""Characters of a tick label at most: a longer name leaves no room for the axes."""


def plot_text(text: object, limit: int | None = None) -> str:
    """A name as matplotlib draws it as written: `$` escaped (no mathtext), control
    characters shown; past `limit` characters (a tick label: `PLOT_LABEL_CHARS`) its middle is
    cut to `…` (the start and the end of a case id are what tell cases apart; the tables keep
    the whole name)."""
    shown = visible(text)
    if limit is not None and len(shown) > limit:
        head = (limit - 1) // 2
        shown = shown[:head] + "…" + shown[len(shown) - (limit - 1 - head):]
    return shown.replace("$", r"\$")


def terminal_text(text: object) -> str:
    """A name for a terminal or a log: no escape sequence, carriage return or other control
    character reaches it (shown as `\\x1b`, ...)."""
    return visible(text)


def console_text(text: object) -> str:
    """A name for a `rich` console: `terminal_text`, with rich's markup (`[red]`) escaped."""
    from rich.markup import escape

    return escape(terminal_text(text))


def xml_text(text: object) -> str:
    """Text XML 1.0 can carry: the characters it forbids shown as escapes."""
    return _XML_INVALID.sub(escape, str(text))


def csv_frame(frame: pd.DataFrame) -> str:
    """CSV text of `frame` (no index, `\\n` line ends, missing cells empty) with every cell
    through `csv_cell`: no cell is a formula, numbers stay numbers."""
    import pandas as pd

    safe = pd.DataFrame(frame, copy=True)  # a new frame; the caller's is left as it was
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):  # text, or cells of any kind
            safe[column] = pd.Series([csv_cell(v) for v in safe[column]], index=safe.index,
                                     dtype=object)
    text: str = safe.to_csv(index=False, lineterminator="\n", na_rep="")
    return text
