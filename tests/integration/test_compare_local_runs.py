"""compare on two real local runs: the same tiny grid run twice on this machine (4 repeats
each), collected into one store; the results directories and the store queries that select
them give the same comparison."""

from __future__ import annotations

import csv

import pytest
from junitparser import JUnitXml

from toolkit import collect, compare, history, submit
from toolkit.analysis.ab import VERDICTS

pytestmark = pytest.mark.integration

GRID = """
name: ab
repeats: 4
base:
  framework: torch
  model: resnet50
  precision: fp32
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 4
  cpu_threads: 1
  slurm: {time_min: 5}
  model_config: {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}
"""


def test_two_real_local_runs_compared_from_directories_and_from_the_store(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ab.yaml").write_text(GRID)
    store = str(tmp_path / "store.sqlite")
    for side in ("a", "b"):
        assert submit.main(["--grid", "ab.yaml", "--results", side]) == 0
        assert collect.main([side, "--quiet", "--no-plots", "--store", store]) == 0
    assert compare.main(["a", "b", "--out", "dirs", "--junit", "dirs.xml", "--quiet"]) == 0
    assert compare.main([f"results_dir={tmp_path / 'a'}", f"results_dir={tmp_path / 'b'}",
                         "--store", store, "--out", "store", "--quiet"]) == 0
    with open("dirs/compare.csv") as fh:
        (from_dirs,) = list(csv.DictReader(fh))
    with open("store/compare.csv") as fh:
        (from_store,) = list(csv.DictReader(fh))
    assert from_dirs["case_id"] == "resnet50-torch-fp32-1n1g-bs4"
    assert (from_dirs["n_a"], from_dirs["n_b"]) == ("4", "4")
    assert from_dirs["verdict"] in VERDICTS and float(from_dirs["ratio"]) > 0
    for key in ("median_a", "median_b", "ratio", "ci_low", "ci_high", "p_value", "verdict"):
        assert from_store[key] == from_dirs[key], key
    suite = JUnitXml.fromfile("dirs.xml")
    assert suite.tests == 1
    # the store's history has the two results directories as two points of the case
    assert history.main(["--store", store, "--out", "hist", "--quiet"]) == 0
    with open("hist/history.csv") as fh:
        points = list(csv.DictReader(fh))
    assert [p["repeats"] for p in points] == ["4", "4"]
