"""`toolkit.compare` and `toolkit.history` end to end on a store: verdicts, exit status for CI
gating, JUnit XML checked by a JUnit parser, the forest and trend plots checked by their pixels,
and two real recorded results directories compared with each other."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from junitparser import Failure, JUnitXml
from PIL import Image
from scipy.stats import norm

from tests.unit.store.conftest import synthetic_rows
from toolkit import collect, compare, history
from toolkit.report.ab import VERDICT_COLOURS
from toolkit.report.history import CHANGE_COLOUR, LINE_PALETTE
from toolkit.spec.case import Case
from toolkit.store.db import open_store
from toolkit.store.ingest import ingest

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "tests" / "data" / "results_quickstart"
QUICKSTART_HASH = "301456776d37"  # bert_base-torch-fp32-1n1g-bs8's, in its case.json
Z7 = norm.ppf((np.arange(7) + 0.5) / 7)


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def pixels(png: bytes) -> set[tuple[int, int, int]]:
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    return {(int(r), int(g), int(b)) for r, g, b in np.unique(image, axis=0)}


def html_images(page: Path) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'base64,([^"]+)"', page.read_text())]


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Driver 550 -> 560: `fast` gains 3% at 1% noise, `noisy` 1% at 3% noise, `slow` loses 5%
    at 1% noise, `short` has 2 repeats a side."""
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    spread = {"fast": (1.03, 0.01), "noisy": (1.01, 0.03), "slow": (0.95, 0.01),
              "short": (0.9, 0.01)}
    for case, (shift, noise) in spread.items():
        z = Z7[:2] if case == "short" else Z7
        ingest(engine, synthetic_rows(case, list(100 * (1 + noise * z)), start_s=1.7e9,
                                      driver="550.54", gpu_model="NVIDIA H200"), "/before")
        ingest(engine, synthetic_rows(case, list(100 * shift * (1 + noise * z[::-1])),
                                      start_s=1.8e9, driver="560.35",
                                      gpu_model="NVIDIA H200"), "/after")
    engine.dispose()
    return url


def test_compare_store_queries_verdicts_exit_status_and_junit(store: str, tmp_path: Path,
                                                             capsys) -> None:
    out, junit = tmp_path / "cmp", tmp_path / "cmp.xml"
    code = compare.main(["driver=550.54", "driver=560.35", "--where", "gpu=H200", "--store",
                         store, "--out", str(out), "--junit", str(junit), "--fail-on", "slower"])
    assert code == 1
    printed = capsys.readouterr()
    verdicts = {line.split("|")[1].strip(): line.split("|")[10].strip()
                for line in printed.out.splitlines() if line.startswith("| ") and "---" not in line
                and not line.startswith("| case")}
    assert verdicts == {"fast": "faster", "noisy": "no significant change", "slow": "slower",
                        "short": "too few repeats (about 4 per side needed at this spread)"}
    assert "slower slow throughput" in printed.err
    suite = JUnitXml.fromfile(str(junit))
    cases = {c.name: c for s in suite for c in s}
    assert set(cases) == {"fast", "noisy", "slow", "short"}
    assert [type(r) for r in cases["slow"].result] == [Failure]
    assert all(not cases[n].result for n in ("fast", "noisy", "short"))
    assert suite.failures == 1 and suite.tests == 4
    assert "throughput: slower (ratio 0.9500" in cases["slow"].result[0].message
    # without --fail-on the same comparison passes
    assert compare.main(["driver=550.54", "driver=560.35", "--store", store, "--quiet"]) == 0
    assert compare.main(["driver=550.54", "driver=560.35", "--store", store, "--quiet",
                         "--fail-on", "too-few-repeats"]) == 1
    # the CSV holds every figure; the page embeds the forest plot in the verdicts' colours
    csv = (out / "compare.csv").read_text().splitlines()
    assert csv[0].startswith("case_id,framework,model") and len(csv) == 5
    (forest,) = html_images(out / "compare.html")
    seen = pixels(forest)
    for verdict in ("faster", "slower", "no significant change", "too few repeats"):
        assert rgb(VERDICT_COLOURS[verdict]) in seen, verdict


def test_compare_says_what_is_wrong_with_its_input(store: str, tmp_path: Path, capsys) -> None:
    assert compare.main(["driver=550.54", "nothing-here", "--store", store]) == 2
    assert "nothing-here: neither a results directory nor a store query" in \
        capsys.readouterr().err
    assert compare.main(["speed=1", "driver=1", "--store", store]) == 2
    assert "no key 'speed'" in capsys.readouterr().err
    assert compare.main(["driver=550.54", "driver=999", "--store", store]) == 3
    assert "no case has ok runs in both" in capsys.readouterr().err
    assert compare.main(["driver=550.54", "driver=560.35", "--store", store,
                         "--fail-on", "worse"]) == 2


def test_compare_two_real_results_directories(tmp_path: Path, capsys) -> None:
    """The recorded quickstart (two repeats per case) against a copy of itself: the same
    figures, so a ratio of exactly 1, and too few repeats to say more."""
    copy = tmp_path / "again"
    shutil.copytree(QUICKSTART, copy)
    assert compare.main([str(QUICKSTART), str(copy), "--metric", "throughput,step_time",
                         "--out", str(tmp_path / "o"), "--fail-on", "slower"]) == 0
    text = (tmp_path / "o" / "compare.md").read_text()
    assert text.count("| 1.0000 |") == 4
    assert text.count("too few repeats") >= 4


def test_compare_two_cases_picked_by_hand(tmp_path: Path, capsys) -> None:
    """Two settings of one grid (1 and 2 ranks of the recorded quickstart) share no case id:
    both sides' ids are listed, and A:CASE B:CASE compares them with the same statistics."""
    one, two = "bert_base-torch-fp32-1n1g-bs8", "bert_base-torch-fp32-1n2g-bs8"
    only_one, only_two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(QUICKSTART, only_one)
    shutil.copytree(QUICKSTART, only_two)
    shutil.rmtree(only_one / "cases" / two)
    shutil.rmtree(only_two / "cases" / one)
    assert compare.main([str(only_one), str(only_two), "--quiet"]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert (f"A's cases: {one}; B's cases: {two}; compare two of them with A:CASE B:CASE"
            in err)
    assert compare.main([f"{only_one}:{one}", f"{only_two}:{two}"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith(f"| {one} vs {two} | throughput"))
    assert "too few repeats" in row
    assert "across configurations: config" in row and "gpus_per_node: 1 vs 2" in row
    assert compare.main([f"{only_one}:nope", f"{only_two}:{two}"]) == 2
    assert f"A has no run of case 'nope'; its cases: {one}" in capsys.readouterr().err


def test_argv_differences_show_the_words_that_differ() -> None:
    from toolkit.analysis.ab import config_differences
    from toolkit.results.layout import config_difference

    argv = ["{python}", "dle_run.py", "--arch", "resnet50", "--data-backend", "syntetic",
            "-b", "256", "--epochs", "1", "--prof", "{total_iterations+20}"]
    other = [*argv[:7], "128", *argv[8:], "--amp"]
    a, b = {"command": {"argv": argv}}, {"command": {"argv": other}}
    assert config_differences(a, b) == ["command.argv[7]: '256' vs '128'",
                                        "command.argv[12]: (none) vs '--amp'"]
    assert config_difference(a, b) == ("command.argv[7]: '256' -> '128'; "
                                       "command.argv[12]: (none) -> '--amp'")


def test_history_trend_plot_and_change_points(tmp_path: Path, capsys) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    rng = np.random.default_rng(3)
    for day in range(10):
        level = 100.0 if day < 6 else 106.0  # a 6% step at the 7th results directory
        values = list(level * (1 + 0.003 * rng.standard_normal(5)))
        ingest(engine, synthetic_rows("gpt", values, start_s=1.78e9 + day * 86400,
                                      driver="550" if day < 6 else "560"), f"/results/{day}")
    engine.dispose()
    out = tmp_path / "hist"
    assert history.main(["--store", url, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 case(s), 10 point(s) from 50 run(s); 1 change point(s)" in printed
    assert "/results/6 |" in printed and "/results/7 |" not in printed
    (trend,) = html_images(out / "history.html")
    seen = pixels(trend)
    assert rgb(LINE_PALETTE[0]) in seen and rgb(CHANGE_COLOUR) in seen
    # one line per driver: each line is steady on its own, nothing flagged, two colours
    assert history.main(["--store", url, "--out", str(out), "--by", "driver"]) == 0
    assert "0 change point(s)" in capsys.readouterr().out
    (trend,) = html_images(out / "history.html")
    seen = pixels(trend)
    assert {rgb(LINE_PALETTE[0]), rgb(LINE_PALETTE[1])} <= seen
    assert rgb(CHANGE_COLOUR) not in seen
    assert history.main(["--store", url, "--case", "none"]) == 3
    assert history.main(["--store", url, "--by", "speed"]) == 2


def test_the_forest_plot_shows_the_changed_cases_first_when_there_are_many() -> None:
    import pandas as pd

    from toolkit.report.ab import forest_rows

    frame = pd.DataFrame({"case_id": [f"c{i}" for i in range(100)],
                          "ratio": [1 + i / 1000 for i in range(100)],
                          "verdict": ["no significant change"] * 98 + ["slower", "faster"]})
    shown = forest_rows(frame, 5)
    assert list(shown["case_id"]) == ["c99", "c98", "c97", "c96", "c95"]
    assert list(shown["verdict"][:2]) == ["faster", "slower"]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_compare_and_history_out_write_only_into_a_new_empty_or_own_directory(
        store: str, tmp_path: Path, capsys) -> None:
    """As collect's --out: a directory with someone else's files is refused before anything
    is written (exit 2, its files unchanged, nothing added); a new or empty one, one the same
    command wrote, or one an older version wrote (its two files, no marker) is written."""
    compare_args = ["driver=550.54", "driver=560.35", "--store", store, "--quiet", "--out"]
    history_args = ["--store", store, "--quiet", "--out"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.md").write_text("my own notes\n")
    (mine / "compare.md").write_text("my own compare\n")
    collected = tmp_path / "collected"
    assert collect.main([str(QUICKSTART), "--out", str(collected), "--quiet", "--no-plots",
                         "--no-store"]) == 0
    for main, args in ((compare.main, compare_args), (history.main, history_args)):
        for foreign in (mine, collected):
            before = _tree(foreign)
            assert main([*args, str(foreign)]) == 2
            err = capsys.readouterr().err
            assert f"--out {foreign} is a directory with files in it that" in err, err
            assert _tree(foreign) == before
        fresh, empty = tmp_path / f"{main.__module__}-new", tmp_path / f"{main.__module__}-empty"
        empty.mkdir()
        for out in (fresh, empty, fresh):  # the last: again into its own directory
            assert main([*args, str(out)]) == 0, capsys.readouterr().err
    # what an older compare and history left (their two files, no marker) is theirs too
    for name, main, args in (("compare", compare.main, compare_args),
                             ("history", history.main, history_args)):
        older = tmp_path / f"older-{name}"
        older.mkdir()
        (older / f"{name}.md").write_text("old\n")
        (older / f"{name}.csv").write_text("old\n")
        assert main([*args, str(older)]) == 0
        assert (older / f"{name}.md").read_text() != "old\n"
    # collect's own --out is no place for compare's or history's report, nor theirs for it
    assert collect.main([str(QUICKSTART), "--out", str(tmp_path / "older-compare"), "--quiet",
                         "--no-plots", "--no-store"]) == 2


def _placed(rows: list, executor: str, oversubscribed: str = "", **_: object) -> list:
    for row in rows:
        row.extra.update(executor=executor, oversubscribed=oversubscribed)
    return rows


def test_history_keeps_executors_sites_and_machines_apart(tmp_path: Path, capsys) -> None:
    # five laptop batches at 100, then the same case on the local Slurm cluster at 50 (another
    # machine, another executor), then the laptop again: nothing changed on either
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    for day, (executor, level, prov) in enumerate(
            [("local", 100.0, {"hosts": "laptop"})] * 5
            + [("slurm", 50.0, {"hosts": "node1", "site": "local", "partition": "debug"})]
            + [("local", 100.0, {"hosts": "laptop"})]):
        rows = synthetic_rows("c", [level, level * 1.001, level * 0.999],
                              start_s=1.78e9 + day * 86400, gpu_model="cpu", **prov)
        ingest(engine, _placed(rows, executor), f"/results/{day}")
    engine.dispose()
    out = tmp_path / "hist"
    assert history.main(["--store", url, "--out", str(out)]) == 0
    assert "1 case(s), 7 point(s) from 21 run(s); 0 change point(s)" in capsys.readouterr().out
    lines = set((out / "history.csv").read_text().split("\n")[1:-1])
    assert {line.split(",")[1] for line in lines} == {
        "local on laptop (cpu)", "slurm site local partition debug (cpu)"}
    assert "| c | slurm site local partition debug (cpu) | 1 |" in (out / "history.md").read_text()


def test_an_oversubscribed_point_is_listed_apart_and_never_a_change_point(
        tmp_path: Path, capsys) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    why = "ran at the same time as c r1 on vm (CPUs 0-1, 9.0 s overlap)"
    for day in range(7):
        crowded = day == 5  # the 5.2 samples/s of a one-GPU case that shared its cores
        rows = synthetic_rows("c", [5.2, 5.3] if crowded else [92.0, 92.5],
                              start_s=1.78e9 + day * 86400, hosts="vm")
        ingest(engine, _placed(rows, "slurm", why if crowded else ""), f"/results/{day}")
    engine.dispose()
    out = tmp_path / "hist"
    assert history.main(["--store", url, "--out", str(out)]) == 0
    assert "7 point(s) from 14 run(s); 0 change point(s)" in capsys.readouterr().out
    text = (out / "history.md").read_text()
    assert "## Points that measured contention" in text
    assert "† 2 of 2 runs oversubscribed: not a figure, no change point | /results/5 |" in text


CROWDED = ("other processes took 55% of host vm's CPU time while its ranks trained (the host "
           "99% busy: rule, busy >= 90% and others >= 10%)")


def test_a_crowded_point_is_listed_apart_and_never_a_change_point(
        tmp_path: Path, capsys) -> None:
    # the runs' own ranks had their CPUs, but a build took half the machine on day 5
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    for day in range(7):
        rows = synthetic_rows("c", [41.0, 43.0] if day == 5 else [92.0, 92.5],
                              start_s=1.78e9 + day * 86400, hosts="vm")
        _placed(rows, "local")
        if day == 5:
            rows[0].extra["host_crowded"] = CROWDED
        ingest(engine, rows, f"/results/{day}")
    engine.dispose()
    out = tmp_path / "hist"
    assert history.main(["--store", url, "--out", str(out)]) == 0
    assert "7 point(s) from 14 run(s); 0 change point(s)" in capsys.readouterr().out
    text = (out / "history.md").read_text()
    assert "## Points that measured contention" in text
    assert "† 1 of 2 runs crowded by other processes: not a figure, no change point | " \
           "/results/5 |" in text
    assert "1 measured contention" in text
    day5 = next(line for line in (out / "history.csv").read_text().splitlines()
                if "/results/5" in line)
    assert day5.split(",")[-2:] == ["0", "1"]  # oversubscribed, crowded


def test_a_one_point_history_plot_has_an_axis_around_its_point(tmp_path: Path) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from toolkit.analysis.history import points
    from toolkit.report.history import line_colours, trend_figure

    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    ingest(engine, _placed(synthetic_rows("c", [5.2, 5.2], start_s=1.78e9), "local"), "/r")
    engine.dispose()
    assert history.main(["--store", url, "--out", str(tmp_path / "h"), "--quiet"]) == 0
    import pandas as pd

    frame = points(pd.DataFrame({"case_id": ["c", "c"], "results_dir": ["/r", "/r"],
                                 "started_s": [1.78e9, 1.78e9 + 1], "executor": "local",
                                 "throughput_sps": [5.2, 5.2]}))
    fig = trend_figure(frame, "c", "samples/s", line_colours(frame))
    try:
        ax = fig.axes[0]
        low, high = (mdates.num2date(x).timestamp() for x in ax.get_xlim())
        # a day either side, not years of empty axis; the values from 0
        assert high - low == pytest.approx(2 * 86400, rel=0.01)
        assert low < 1.78e9 < high
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] == pytest.approx(1.25 * 5.2)
    finally:
        plt.close(fig)


def test_compare_says_where_each_side_ran_and_marks_pooled_and_oversubscribed_runs(
        tmp_path: Path, capsys) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    values = list(100 * (1 + 0.01 * Z7))
    # A: commit aaa, some runs on the laptop and some on the local cluster; B: commit bbb,
    # on the laptop, two runs of which shared their cores
    ingest(engine, _placed(synthetic_rows("c", values[:4], git_commit="aaa", hosts="laptop"),
                           "local"), "/a1")
    ingest(engine, _placed(synthetic_rows("c", values[4:], start_s=1.79e9, git_commit="aaa",
                                          partition="debug"), "slurm"), "/a2")
    crowded = synthetic_rows("c", values, start_s=1.8e9, git_commit="bbb", hosts="laptop")
    _placed(crowded, "local")
    for row in crowded[:2]:
        row.extra["oversubscribed"] = "4 ranks on laptop share 2 CPU(s) (0-1)"
    ingest(engine, crowded, "/b")
    engine.dispose()
    assert compare.main(["commit=aaa", "commit=bbb", "--store", url]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "| c ≠ † | throughput | 7 | 7 |" in text
    # markdown text: the separator escaped as markdown shows it
    assert "runs from: A local on laptop \\| slurm partition debug; B local on laptop" in text
    assert "≠ a side pools runs of different places" in text
    assert "† runs whose ranks shared their CPUs (oversubscribed: the figures measured " \
           "contention): c (A 0, B 2)" in text


def test_compare_names_a_pair_with_a_crowded_side_and_its_verdict_says_so(
        tmp_path: Path, capsys) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    values = list(100 * (1 + 0.01 * Z7))
    ingest(engine, _placed(synthetic_rows("c", values, git_commit="aaa", hosts="vm"), "local"),
           "/a")
    ingest(engine, _placed(synthetic_rows("d", values, git_commit="aaa", hosts="vm"), "local"),
           "/a")
    crowded = _placed(synthetic_rows("c", [0.8 * v for v in values], start_s=1.8e9,
                                     git_commit="bbb", hosts="vm"), "local")
    for row in crowded[:3]:
        row.extra["host_crowded"] = CROWDED
    ingest(engine, crowded, "/b")
    ingest(engine, _placed(synthetic_rows("d", values, start_s=1.8e9, git_commit="bbb",
                                          hosts="vm"), "local"), "/b")
    engine.dispose()
    out = tmp_path / "cmp"
    assert compare.main(["commit=aaa", "commit=bbb", "--store", url, "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "| c † | throughput | 7 | 7 |" in text
    assert "| slower († B: of 7 runs, 3 crowded by other processes) |" in text
    assert "| d | throughput | 7 | 7 |" in text  # the clean case: no mark, a plain verdict
    assert "| no significant change |" in text
    assert "† runs measured while other processes, none of their ranks, took a saturated " \
           "host's CPUs (crowded: the figures are low by what they took; runs.csv " \
           "`host_crowded`): c (A 0, B 3)" in text
    with (out / "compare.csv").open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    assert (rows["c"]["crowded_a"], rows["c"]["crowded_b"]) == ("0", "3")
    assert rows["d"]["crowded_b"] == "0"


def test_two_recorded_results_directories_name_the_crowded_side(capsys) -> None:
    # the recorded quickstart against the recording whose 1-rank runs another process crowded
    loaded = ROOT / "tests" / "data" / "results_loaded"
    assert compare.main([str(QUICKSTART), str(loaded), "--across-configs"]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    one = next(line for line in lines if line.startswith("| bert_base-torch-fp32-1n1g-bs8"))
    two = next(line for line in lines if line.startswith("| bert_base-torch-fp32-1n2g-bs8"))
    assert one.startswith(
        "| bert_base-torch-fp32-1n1g-bs8 † | throughput | 2 | 2 | 368.10 | 25.88 |")
    assert one.endswith(" († B: of 2 runs, 2 crowded by other processes) |")
    assert "†" not in two


def test_a_case_of_another_configuration_is_named_and_kept_out_of_the_verdict(
        tmp_path: Path, capsys) -> None:
    # the recorded quickstart, and the same case ids run again with seq_len 32 (its case.json
    # and the config hash its runs recorded, as a grid with another seq_len writes them)
    other = tmp_path / "other"
    shutil.copytree(QUICKSTART, other)
    case = other / "cases" / "bert_base-torch-fp32-1n1g-bs8"
    data = json.loads((case / "case.json").read_text())
    data["case"]["model_config"]["seq_len"] = 32
    data["config_hash"] = "0123456789ab"
    (case / "case.json").write_text(json.dumps(data))
    for meta in case.glob("r*/meta.json"):
        meta.write_text(meta.read_text().replace(QUICKSTART_HASH, "0123456789ab"))
    assert compare.main([str(QUICKSTART), str(other), "--out", str(tmp_path / "o"),
                         "--fail-on", "slower,faster"]) == 0
    capsys.readouterr()
    with (tmp_path / "o" / "compare.csv").open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    changed = rows["bert_base-torch-fp32-1n1g-bs8"]
    assert changed["verdict"] == "different configurations"
    assert changed["config_differs"] == (
        f"config {QUICKSTART_HASH} vs 0123456789ab: model_config.seq_len: 64 vs 32")
    assert rows["bert_base-torch-fp32-1n2g-bs8"]["config_differs"] in ("", None)
    assert "different configurations, not compared (config " in \
        (tmp_path / "o" / "compare.md").read_text()
    # asked for, the pair gets the statistics' verdict, still named
    assert compare.main([str(QUICKSTART), str(other), "--across-configs", "--quiet",
                         "--out", str(tmp_path / "p")]) == 0
    text = (tmp_path / "p" / "compare.md").read_text()
    assert "(across configurations: config " in text and "not compared" not in text


def _recorded_today(tmp_path: Path, change: dict[str, object] | None = None) -> Path:
    """The recorded quickstart as today's trainbench records it: each case.json also holds the
    settings added to `Case` since (at their defaults), under another config hash; `change`
    sets settings besides (a genuinely other configuration)."""
    today = tmp_path / "today"
    shutil.copytree(QUICKSTART, today)
    defaults = Case().to_dict()
    for case in (today / "cases").iterdir():
        data = json.loads((case / "case.json").read_text())
        old_hash = data["config_hash"]
        data["case"] = {**{k: v for k, v in defaults.items() if k not in data["case"]},
                        **data["case"], **(change or {})}
        data["config_hash"] = "0123456789ab"
        (case / "case.json").write_text(json.dumps(data))
        for meta in case.glob("r*/meta.json"):
            meta.write_text(meta.read_text().replace(old_hash, "0123456789ab"))
    return today


def test_settings_an_older_record_lacks_at_their_defaults_are_the_same_configuration(
        tmp_path: Path, capsys) -> None:
    # the recorded quickstart (no `command`, `sequence_parallel`, `async_tp` in its case.json)
    # against the same grid recorded with those settings at their defaults
    assert "sequence_parallel" not in (QUICKSTART / "cases" / "bert_base-torch-fp32-1n1g-bs8"
                                       / "case.json").read_text()
    today = _recorded_today(tmp_path)
    assert compare.main([str(QUICKSTART), str(today), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    with (tmp_path / "o" / "compare.csv").open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    one = rows["bert_base-torch-fp32-1n1g-bs8"]
    assert one["verdict"] == "too few repeats"  # compared: 2 repeats a side
    assert one["config_differs"] in ("", None)
    note = one["config_note"]
    assert note.startswith("same configuration (settings absent from one record are at their "
                           "defaults in the other: ")
    for key in ("async_tp", "command", "sequence_parallel"):
        assert key in note.split(": ", 1)[1]
    assert "watchdog" not in note  # not measured: no part of the configuration
    line = next(line for line in (tmp_path / "o" / "compare.md").read_text().splitlines()
                if line.startswith("| bert_base-torch-fp32-1n1g-bs8"))
    assert "per side needed at this spread) (same configuration (settings absent" in line


def test_a_genuine_difference_beside_defaulted_settings_is_still_refused(
        tmp_path: Path, capsys) -> None:
    today = _recorded_today(tmp_path, {"seed": 7})
    assert compare.main([str(QUICKSTART), str(today), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    with (tmp_path / "o" / "compare.csv").open() as fh:
        one = {r["case_id"]: r for r in csv.DictReader(fh)}["bert_base-torch-fp32-1n1g-bs8"]
    assert one["verdict"] == "different configurations"
    assert one["config_differs"] == (f"config {QUICKSTART_HASH} vs 0123456789ab: "
                                     "seed: 1234 vs 7")
    assert one["config_note"] in ("", None)


def test_history_prints_each_cases_table_without_out(tmp_path: Path, capsys) -> None:
    url = str(tmp_path / "store.sqlite")
    engine = open_store(url)
    for day in range(3):  # steady: no change point
        ingest(engine, synthetic_rows("gpt", [100.0, 100.2, 99.8, 100.1, 99.9],
                                      start_s=1.78e9 + day * 86400), f"/results/{day}")
    engine.dispose()
    assert history.main(["--store", url]) == 0
    printed = capsys.readouterr().out
    assert "0 change point(s)" in printed
    assert "| case | line | points | from | to | latest median | change points |" in printed
    assert "| gpt |" in printed


def test_a_rows_medians_share_their_decimals() -> None:
    from toolkit.report.ab import median_digits
    from toolkit.report.tables import fmt

    digits = median_digits(26.5, 7.7204)
    assert (fmt(26.5, digits), fmt(7.7204, digits)) == ("26.500", "7.720")
    assert median_digits(1234.5, 1240.1) == 0 and median_digits(0.01234, 0.5) == 4
