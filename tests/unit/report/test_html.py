"""report.html rendered by headless Chromium: the screenshot shows the tables and the plots.

Chromium is the Debian package `chromium` (`make system-deps` installs it); without it these
tests are skipped, saying so (under CI they run, and fail without it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from toolkit import collect
from toolkit.report.html import HEADER_BACKGROUND
from toolkit.report.plots import PALETTE

TREE = Path(__file__).resolve().parents[2] / "data" / "dlperf_tree"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                    reason="chromium not installed (make system-deps)")


def screenshot(page: Path, tmp_path: Path, size: tuple[int, int] = (1200, 1500)) -> np.ndarray:
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
         "--hide-scrollbars", f"--window-size={size[0]},{size[1]}",
         f"--screenshot={shot}", page.resolve().as_uri()],
        check=True, capture_output=True, timeout=120)
    with Image.open(shot) as img:
        assert img.size == size
        return np.asarray(img.convert("RGB"))


def near(image: np.ndarray, hex_colour: str, tolerance: int = 10) -> np.ndarray:
    want = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    return np.abs(image.astype(int) - want).max(axis=2) <= tolerance


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("html")
    with_plots, without = base / "with", base / "without"
    assert collect.main(["--import-logs", str(TREE), "--out", str(with_plots), "--quiet"]) == 0
    assert collect.main(["--import-logs", str(TREE), "--out", str(without), "--quiet",
                         "--no-plots"]) == 0
    return with_plots / "report.html", without / "report.html"


def test_page_is_self_contained(reports: tuple[Path, Path]) -> None:
    text = reports[0].read_text(encoding="utf-8")
    assert text.count('src="data:image/png;base64,') == 3
    assert 'src="plots/' not in text and "<script" not in text and "http" not in text
    assert "<th>num_nodes</th>" in text and "<td>9418.4</td>" in text
    assert "<code>*.log</code>" in text and "`" not in text  # markdown code spans converted
    assert "no scaling to plot" in reports[1].read_text(encoding="utf-8")


@needs_chromium
def test_screenshot_shows_tables_above_plots(reports: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    image = screenshot(reports[0], tmp_path)
    non_white = (image < 240).any(axis=2).mean()
    assert non_white > 0.05, f"page looks blank ({non_white:.3f} non-white)"
    header = near(image, HEADER_BACKGROUND, 4)
    line = near(image, PALETTE[0], 12)  # the series' colour in the embedded plots
    assert header.sum() > 2000, header.sum()  # header cells of the throughput table
    assert line.sum() > 500, line.sum()
    header_rows, line_rows = np.nonzero(header.any(axis=1))[0], np.nonzero(line.any(axis=1))[0]
    # the throughput table comes first, the plots below it
    assert header_rows.min() < line_rows.min()
    # two plots side by side: the second reaches past the middle of the page
    assert np.nonzero(line.any(axis=0))[0].max() > image.shape[1] // 2


@needs_chromium
def test_screenshot_without_plots_has_no_plot_pixels(reports: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    image = screenshot(reports[1], tmp_path)
    assert near(image, HEADER_BACKGROUND, 4).sum() > 2000
    assert near(image, PALETTE[0], 12).sum() < 50
