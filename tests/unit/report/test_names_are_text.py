"""Names are text, never markup: a case, model and variant name holding mathtext (`$...$`), raw
HTML, a markdown link, terminal escape sequences and control characters goes through collect
(from an imported MLLOG log), the store, compare (with JUnit) and history; every plot is drawn,
every page written, the markdown holds no raw HTML, link or emphasis, the terminal gets no
escape sequence and the JUnit XML parses."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.unit.store.conftest import synthetic_rows
from toolkit import collect, compare, history
from toolkit.report.junit import JUnitCase, junit_xml
from toolkit.report.text import (
    PLOT_LABEL_CHARS,
    md_cell,
    md_prose,
    plot_text,
    visible,
    xml_text,
)
from toolkit.store.db import open_store
from toolkit.store.ingest import ingest

pytest.importorskip("mlperf_logging")

QUICKSTART = Path(__file__).resolve().parents[2] / "data" / "results_quickstart"
HOSTILE = ("$\\badcmd{x}$ <img src=x onerror=alert(1)> [link](http://evil.example/) *em* "
           "\x1b[31mRED\x1b[0m\x1b]0;title\x07 \r\x0b`tick`|pipe|")
#: What must never reach the terminal or a file.
CONTROL = ("\x1b", "\x07", "\r", "\x0b")
#: What the markdown, rendered by a CommonMark renderer, must never hold: the name's HTML, a
#: link it makes, its emphasis.
MARKUP = ("<img src=x", 'href="http://evil', "<em>em</em>")


def _rendered(page: Path) -> str:
    """The markdown file as HTML, by a CommonMark renderer with GitHub's tables."""
    from markdown_it import MarkdownIt

    text = page.read_text()
    for raw in CONTROL:
        assert raw not in text, (page.name, raw)
    html = MarkdownIt("commonmark").enable("table").render(text)
    for markup in MARKUP:
        assert markup not in html, (page.name, markup)
    return html


def _pngs(page: Path) -> int:
    return len(re.findall(r'src="data:image/png;base64,', page.read_text()))


def _hostile_export(tmp_path: Path) -> Path:
    """The quickstart's MLLOG export with the model, variant and case ids made hostile."""
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    assert collect.main([str(results), "--quiet", "--no-plots", "--no-store"]) == 0
    logs = tmp_path / "logs"
    for log in sorted((results / "mllog").rglob("*.log")):
        lines = []
        for line in log.read_text().splitlines():
            if '"key": "trainbench_run"' in line:
                prefix, event = line.split(" ", 1)
                data = json.loads(event)
                data["value"]["case_id"] += HOSTILE
                data["value"]["model"] = "m" + HOSTILE
                data["value"]["variant"] = "v" + HOSTILE
                line = f"{prefix} {json.dumps(data)}"
            lines.append(line)
        target = logs / log.relative_to(results / "mllog")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
    return logs


def test_collect_of_hostile_names_draws_every_plot_and_writes_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert collect.main(["--import-logs", str(_hostile_export(tmp_path)), "--out", str(out),
                         "--warmup-iterations", "3", "--measured-iterations", "10"]) == 0
    printed = capsys.readouterr()
    html = _rendered(out / "report.md")
    # the names are there, as text: in the tables, the headings and the notes
    assert html.count("m$\\badcmd{x}$ &lt;img src=x onerror=alert(1)&gt; [link](http://evil") > 3
    for raw in CONTROL:
        assert raw not in printed.out + printed.err, raw
    plots = sorted((out / "plots").glob("*.png"))
    assert len(plots) == 3 and _pngs(out / "report.html") == 3
    assert "&lt;img" in (out / "report.html").read_text()


def test_compare_and_history_of_hostile_stored_names(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    for name, shift in ((HOSTILE, 1.1), ("plain", 1.0)):
        for day, (driver, factor) in enumerate((("550", 1.0), ("560", shift))):
            ingest(engine, synthetic_rows(name, [100 * factor * (1 + 0.001 * i)
                                                 for i in range(5)],
                                          start_s=1.78e9 + day * 86400, driver=driver),
                   f"/results/{day}")
    engine.dispose()
    cmp, junit, hist = tmp_path / "cmp", tmp_path / "cmp.xml", tmp_path / "hist"
    assert compare.main(["driver=550", "driver=560", "--store", url, "--out", str(cmp),
                         "--junit", str(junit), "--fail-on", "faster"]) == 1
    assert history.main(["--store", url, "--out", str(hist)]) == 0
    printed = capsys.readouterr()
    for page in (cmp / "compare.md", hist / "history.md"):
        assert "$\\badcmd{x}$ &lt;img src=x" in _rendered(page)
    for raw in CONTROL:
        assert raw not in printed.out + printed.err, raw
    assert _pngs(cmp / "compare.html") == 1 and _pngs(hist / "history.html") == 2
    cases = {c.get("name") for c in ET.parse(junit).getroot().iter("testcase")}
    assert xml_text(HOSTILE) in cases and "plain" in cases


def test_the_escapes_show_the_name_as_written() -> None:
    """What each output makes of the name is the name: markdown's escapes, mathtext's `\\$`
    and the shown control characters undo to it."""
    shown = visible(HOSTILE)
    assert "\x1b" not in shown and "\\x1b" in shown
    unescaped = re.sub(r"\\([\\`*\[\]<|&#~!_])", r"\1", md_cell(HOSTILE))
    assert unescaped.replace("\\|", "|") == shown
    assert plot_text(HOSTILE).replace("\\$", "$") == shown
    # our own sentences keep their code spans; the name outside them is escaped
    assert md_prose(f"results: `{'a<b'}` of <b>x</b>") == "results: `a<b` of \\<b>x\\</b>"
    suite = ET.fromstring(junit_xml(HOSTILE, [JUnitCase(HOSTILE, HOSTILE, failure=HOSTILE)]))
    assert suite.get("name") == xml_text(HOSTILE) == shown.replace("\\x0d", "\r")


def test_a_long_name_is_cut_in_its_middle_on_a_plot_axis() -> None:
    name = "gpt-torch-amp_bf16-1n2g-bs16-" + "x" * 200 + "-pp2 [throughput_sps]"
    label = plot_text(name, PLOT_LABEL_CHARS)
    assert len(label) == 60 and label.count("…") == 1
    assert label.startswith("gpt-torch-amp_bf16-1n2g") and label.endswith("-pp2 [throughput_sps]")
    assert plot_text("$x$", PLOT_LABEL_CHARS) == plot_text("$x$") == "\\$x\\$"  # as written


def test_names_that_look_like_console_markup_are_printed_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rich reads `[red]` and `[/x]` as markup (a closing tag it never opened is an error):
    the commands print names from the command line and the store as they are."""
    url = str(tmp_path / "store.sqlite")
    open_store(url).dispose()
    assert compare.main(["case=[/x]", "case=[bold]b", "--store", url]) == 3
    assert history.main(["--store", url, "--case", "[/x]"]) == 3
    assert history.main(["--store", url, "--by", "[/x]"]) == 2
    assert compare.main(["case=a", "case=b", "--store", url, "--metric", "[/x]"]) == 2
    err = capsys.readouterr().err
    assert err.count("[/x]") == 4 and "[bold]b" in err
