"""Output for a terminal and for a log file: the one place a command makes a rich `Console`
(`console`), and the rich `Table` it prints a report table with (`table`, `print_table`).

rich takes its width from the terminal; written to a pipe or a Slurm log it takes `$COLUMNS`,
else 80, and folds every line and table cell at that width, splitting ids, paths and numbers
over two lines where they can no longer be copied or searched. Here:

- a console that is not a terminal is LOG_WIDTH columns wide, whatever `$COLUMNS` says: a table
  is as wide as its content and a message is one line;
- a table keeps every value of a column on one line, except in the columns named free text (a
  reason, a why), which wrap between words. On a terminal too narrow for a table, the free-text
  columns narrow first; where the values alone are wider than the terminal, `print_table`
  draws the table at the width they need and lets the terminal wrap its lines, rather than
  let rich cut values short with `…`;
- a table is at least as wide as its title, so a title that names a path stays on one line.

Lists of things to copy (failed runs and their logs) are printed as lines, not tables
(`toolkit.launch.run_states.render`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

LOG_WIDTH = 100_000
"""The width of a console that is not a terminal: more than any line a command prints."""


def console(*, stderr: bool = False, markup: bool = True, soft_wrap: bool = False) -> Console:
    """A console on stdout (or stderr) without rich's highlighting of numbers and paths; LOG_WIDTH
    wide when it is not a terminal. `soft_wrap`: a printed message is never broken into lines
    by rich (a terminal wraps it for the eye, a copy gives it whole)."""
    out = Console(stderr=stderr, highlight=False, markup=markup, soft_wrap=soft_wrap)
    if not out.is_terminal:
        out.width = LOG_WIDTH
    return out


def table(title: str, header: Sequence[str], *, text: Collection[str] = (),
          right: Collection[str] = ()) -> Table:
    """A rich table with these column headings: values stay on one line except in the `text`
    columns (free text, wrapped between words); `right` columns are right-aligned (numbers).
    Headings may wrap between words."""
    out = Table(title=title or None, min_width=cell_len(title) or None)
    for name in header:
        wraps = name in text
        out.add_column(Text(name, no_wrap=False), no_wrap=not wraps,
                       overflow="fold" if wraps else "ellipsis",
                       justify="right" if name in right else "left")
    return out


def print_table(out: Console, shown: Table) -> None:
    """Print a table whose one-line values are never shortened: on a terminal narrower than
    they need, the table is drawn at the width they need and the terminal wraps its lines."""
    wide = out.options.update_width(LOG_WIDTH)
    for column in shown.columns:
        if column.no_wrap:  # each value whole, and the heading's longest word
            column.min_width = max([Measurement.get(out, wide, column.header).minimum,
                                    *(Measurement.get(out, wide, c).maximum
                                      for c in column.cells)])
    need = Measurement.get(out, wide, shown).minimum
    if need <= out.width:
        out.print(shown)
        return
    out.print(Segments(out.render(shown, out.options.update_width(need))), crop=False)
