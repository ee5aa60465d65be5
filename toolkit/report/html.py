"""`report.html`: the report's tables and plots on one self-contained page. No I/O but reading
the plot PNGs it embeds.

The page carries its images as `data:` URIs, so it can be mailed or archived alone; it has no
scripts and no external style sheets. It shows the same `TableSet`s as `report.md`
(`toolkit.report.tables`), with the plots right after the main throughput tables.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

from toolkit.report.plots import Plot
from toolkit.report.tables import Table, TableSet

HEADER_BACKGROUND = "#dde6f0"
"""The table-header colour; a screenshot test looks for it."""

_STYLE = f"""
body {{ font-family: sans-serif; margin: 16px 24px; color: #111; background: #fff; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; margin-top: 28px; }} h3 {{ font-size: 15px; }}
table {{ border-collapse: collapse; margin: 6px 0 14px 0; font-size: 13px; }}
th, td {{ border: 1px solid #8a9bb0; padding: 3px 8px; text-align: right; }}
th {{ background: {HEADER_BACKGROUND}; }}
td:first-child, th:first-child {{ text-align: left; }}
.note {{ color: #444; font-size: 12px; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 12px; }}
.plots figure {{ margin: 0; }}
.plots img {{ width: 480px; border: 1px solid #ccc; }}
"""


def _inline(text: str) -> str:
    """Escaped text with markdown's `code` spans as <code> (notes are shared with report.md)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _table(t: Table) -> str:
    parts = []
    if t.title:
        parts.append(f"<h3>{html.escape(t.title)}</h3>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in t.rows)
    parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    if t.note:
        parts.append(f'<p class="note">{_inline(t.note)}</p>')
    return "\n".join(parts)


def _section(ts: TableSet) -> str:
    parts = [f'<h2 id="{ts.key}">{html.escape(ts.heading)}</h2>']
    if ts.tables:
        parts += [_table(t) for t in ts.tables]
    elif ts.empty_note:
        parts.append(f'<p class="note">{_inline(ts.empty_note)}</p>')
    else:
        return ""
    return "\n".join(parts)


def _plots(plots: Sequence[Plot]) -> str:
    if not plots:
        return ('<h2 id="plots">Scaling plots</h2><p class="note">no scaling to plot (no series '
                'with two GPU counts)</p>')
    figures = []
    for p in plots:
        data = base64.b64encode(p.path.read_bytes()).decode("ascii")
        figures.append(f'<figure><img alt="{html.escape(p.title)}" '
                       f'src="data:image/png;base64,{data}"></figure>')
    return '<h2 id="plots">Scaling plots</h2>\n<div class="plots">' + "".join(figures) + "</div>"


def render_html(title: str, notes: Sequence[str], first: Sequence[TableSet],
                rest: Sequence[TableSet], plots: Sequence[Plot]) -> str:
    """The page: notes, `first` sections, the plots, then `rest`."""
    note_items = "".join(f"<li>{_inline(n)}</li>" for n in notes)
    sections = [_section(ts) for ts in first] + [_plots(plots)] + [_section(ts) for ts in rest]
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n<ul class=\"note\">{note_items}</ul>\n"
            + "\n".join(s for s in sections if s) + "\n</body></html>\n")


def render_page(title: str, notes: Sequence[str], sections: Sequence[TableSet],
                images: Sequence[tuple[str, bytes]], heading: str = "Plots") -> str:
    """A page of its own (compare, history): notes, the images (alt text, PNG bytes) under
    `heading`, then the sections."""
    note_items = "".join(f"<li>{_inline(n)}</li>" for n in notes)
    figures = "".join(
        f'<figure><img alt="{html.escape(alt)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"></figure>'
        for alt, png in images)
    plots = (f'<h2 id="plots">{html.escape(heading)}</h2>\n<div class="plots">{figures}</div>'
             if images else "")
    body = "\n".join(s for s in [plots, *(_section(ts) for ts in sections)] if s)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n<ul class=\"note\">{note_items}</ul>\n"
            + body + "\n</body></html>\n")
