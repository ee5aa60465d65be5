"""compare.html and history.html rendered by headless Chromium: the forest plot shows each
verdict's colour, the trend plot its line and the red ring of the change point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.stats import norm

from tests.unit.report.test_html import near, needs_chromium, screenshot
from tests.unit.store.conftest import synthetic_rows
from toolkit import compare, history
from toolkit.report.ab import VERDICT_COLOURS
from toolkit.report.history import CHANGE_COLOUR, LINE_PALETTE
from toolkit.report.html import HEADER_BACKGROUND
from toolkit.store.db import open_store
from toolkit.store.ingest import ingest

Z7 = norm.ppf((np.arange(7) + 0.5) / 7)


@needs_chromium
def test_compare_and_history_pages_render_their_plots(tmp_path: Path) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    for case, shift in (("up", 1.05), ("down", 0.95), ("same", 1.0)):
        ingest(engine, synthetic_rows(case, list(100 * (1 + 0.01 * Z7)), start_s=1.7e9,
                                      driver="a"), "/before")
        ingest(engine, synthetic_rows(case, list(100 * shift * (1 + 0.01 * Z7[::-1])),
                                      start_s=1.8e9, driver="b"), "/after")
    for day in range(8):
        level = 100.0 if day < 5 else 110.0
        ingest(engine, synthetic_rows("trend", [level, level * 1.002, level * 0.998],
                                      start_s=1.9e9 + day * 86400), f"/nightly/{day}")
    engine.dispose()
    assert compare.main(["driver=a", "driver=b", "--store", url, "--out",
                         str(tmp_path / "cmp"), "--quiet"]) == 0
    shot = screenshot(tmp_path / "cmp" / "compare.html", tmp_path)
    assert near(shot, HEADER_BACKGROUND).sum() > 500  # the table
    for verdict in ("faster", "slower", "no significant change"):
        assert near(shot, VERDICT_COLOURS[verdict], 12).sum() > 20, verdict
    assert history.main(["--store", url, "--case", "trend", "--out", str(tmp_path / "hist"),
                         "--quiet"]) == 0
    shot = screenshot(tmp_path / "hist" / "history.html", tmp_path)
    assert near(shot, LINE_PALETTE[0], 12).sum() > 50
    assert near(shot, CHANGE_COLOUR, 12).sum() > 20
    # a case without a change point: its line, and no red ring anywhere on the page
    assert history.main(["--store", url, "--case", "same", "--out", str(tmp_path / "same"),
                         "--quiet"]) == 0
    shot = screenshot(tmp_path / "same" / "history.html", tmp_path)
    assert near(shot, LINE_PALETTE[0], 12).sum() > 50
    assert near(shot, CHANGE_COLOUR, 12).sum() == 0
