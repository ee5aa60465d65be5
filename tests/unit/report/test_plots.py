"""Scaling plots, checked as pixels: every series' colour is drawn, the image is not blank."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from toolkit.analysis.summary import summarize
from toolkit.report.plots import IDEAL_COLOUR, KINDS, plain_number, scaling_plots


def run(fw: str, gpus: int, bs: int, tput: float) -> dict[str, Any]:
    nodes, gpn = (gpus // 8, 8) if gpus > 8 else (1, gpus)
    return {"framework": fw, "model": "resnet50", "precision": "fp32", "variant": "",
            "num_nodes": nodes, "gpus_per_node": gpn, "batch_size_per_device": bs,
            "throughput_sps": tput, "status": "ok", "case_id": f"{fw}-{gpus}-{bs}"}


def rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])


def pixels_near(image: np.ndarray, hex_colour: str, tolerance: int = 12) -> int:
    distance = np.abs(image.astype(int) - rgb(hex_colour)).max(axis=2)
    return int((distance <= tolerance).sum())


@pytest.fixture(scope="module")
def two_frameworks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    runs = []
    for gpus in (1, 2, 4, 8, 16):
        runs.append(run("oneflow", gpus, 128, 380.0 * gpus * (0.96 if gpus > 1 else 1)))
        runs.append(run("torch", gpus, 128, 360.0 * gpus * (0.93 if gpus > 1 else 1)))
    out = tmp_path_factory.mktemp("plots")
    return out, scaling_plots(summarize(runs), out)


def test_three_plots_per_model_and_precision(two_frameworks: tuple[Path, list[Any]]) -> None:
    out, plots = two_frameworks
    assert [p.kind for p in plots] == list(KINDS)
    assert sorted(p.name for p in out.iterdir()) == [
        "resnet50_fp32_efficiency.png", "resnet50_fp32_speedup.png",
        "resnet50_fp32_throughput.png"]
    for p in plots:
        assert set(p.series) == {"oneflow bs=128", "torch bs=128"}
        assert len(set(p.series.values())) == 2


@pytest.mark.parametrize("index", range(3))
def test_each_series_is_drawn_in_its_colour(two_frameworks: tuple[Path, list[Any]],
                                            index: int) -> None:
    plot = two_frameworks[1][index]
    with Image.open(plot.path) as img:
        assert img.format == "PNG" and img.size == (640, 440)
        image = np.asarray(img.convert("RGB"))
    # not blank: plenty of non-white pixels and more than a handful of colours
    non_white = (image < 245).any(axis=2).mean()
    assert non_white > 0.03, non_white
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 50
    for label, colour in plot.series.items():
        # a 2-px line over five points spans hundreds of pixels
        assert pixels_near(image, colour) > 300, (plot.kind, label)
    if plot.kind != "throughput":
        assert pixels_near(image, IDEAL_COLOUR, 40) > 100  # the ideal line (and the text)
    # a colour no series has is absent from the data area (the check can fail)
    assert pixels_near(image, "#17becf") == 0


def test_batch_sizes_are_the_series_with_one_framework(tmp_path: Path) -> None:
    runs = [run("torch", g, bs, bs * g * (1.0 if g == 1 else 0.9)) for g in (1, 2, 4)
            for bs in (64, 128)]
    plots = scaling_plots(summarize(runs), tmp_path)
    assert set(plots[0].series) == {"bs=128", "bs=64"}
    with Image.open(plots[0].path) as img:
        image = np.asarray(img.convert("RGB"))
    for colour in plots[0].series.values():
        assert pixels_near(image, colour) > 200


def test_no_scaling_no_plot(tmp_path: Path) -> None:
    runs = [run("torch", 1, 128, 100.0), run("torch", 1, 64, 90.0)]
    assert scaling_plots(summarize(runs), tmp_path / "plots") == []
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("efficiency", [1.3, 2.5])
def test_a_superlinear_efficiency_is_drawn_inside_the_axes(efficiency: float) -> None:
    """Efficiency above 1 (superlinear scaling) is a result to show: every point of every
    series lies inside the efficiency plot's y-range, none is cut off at the top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toolkit.report.plots import _draw, _series

    runs = [run("torch", 1, 64, 100.0), run("torch", 2, 64, 200.0 * efficiency),
            run("torch", 4, 64, 400.0 * efficiency)]
    summary = summarize(runs)
    assert max(r.scaling_efficiency or 0 for r in summary) == pytest.approx(efficiency)
    fig, ax = plt.subplots()
    try:
        _draw(ax, "efficiency", _series(summary), [1, 2, 4])
        low, high = ax.get_ylim()
        drawn = [y for line in ax.lines if line.get_marker() == "o" for y in line.get_ydata()]
    finally:
        plt.close(fig)
    assert sorted(drawn) == pytest.approx([1.0, efficiency, efficiency])
    assert all(low <= y < high for y in drawn), (drawn, (low, high))


def tick_labels(throughputs: dict[int, float]) -> list[tuple[float, str]]:
    """(value, text) of every labelled tick inside the throughput plot's y-range, as drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toolkit.report.plots import _draw, _series

    summary = summarize([run("torch", g, 64, t) for g, t in throughputs.items()])
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
    try:
        _draw(ax, "throughput", _series(summary), sorted(throughputs))
        fig.canvas.draw()
        low, high = ax.get_ylim()
        ticks = [*ax.yaxis.get_major_ticks(), *ax.yaxis.get_minor_ticks()]
        return sorted((t.get_loc(), t.label1.get_text()) for t in ticks
                      if t.label1.get_visible() and t.label1.get_text()
                      and low <= t.get_loc() <= high)
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("throughputs", "expected"), [
    # 1.2 decades (360 to 5,600 samples/s with the linear-scaling line): one power of ten
    # inside, so 2, 3, 4 and 6 x 10^k are labelled as well
    ({1: 360.0, 2: 690.0, 4: 1380.0, 8: 2700.0, 16: 5300.0},
     ["400", "600", "1,000", "2,000", "3,000", "4,000", "6,000"]),
    # a third of a decade (two CPU ranks): no power of ten inside, every tick labelled
    ({1: 120.0, 2: 130.0}, ["120", "140", "160", "180", "200", "220", "240"]),
    # more than two decades (1 to 512 GPUs): the powers of ten are enough
    ({1: 90.0, 512: 40000.0}, ["100", "1,000", "10,000"]),
])
def test_throughput_ticks_are_labelled_in_plain_numbers(throughputs: dict[int, float],
                                                        expected: list[str]) -> None:
    labels = tick_labels(throughputs)
    assert [text for _, text in labels] == expected  # "2,000", never 2x10^3 or $10^{3}$
    assert all(text == plain_number(value) for value, text in labels)  # each at its value
