"""toolkit.results.load: one row per run of a real recorded results directory, typed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

import toolkit.results
from parsers.rows import RUN_COLUMNS
from toolkit.results.scan import collect_runs

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "tests" / "data" / "results_quickstart"


def test_load_gives_one_typed_row_per_run(tmp_path: Path) -> None:
    tree = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, tree)
    rows, _ = collect_runs(tree, jobs=1)
    runs = toolkit.results.load(tree, jobs=1)
    assert len(runs) == len(rows) > 0
    assert list(runs.columns[:len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    assert runs["throughput_sps"].dtype == "Float64"
    assert runs["gpus_per_node"].dtype == "Int64" and runs["case_id"].dtype == "string"
    # the same figures as the rows the report is made of, in the same order
    assert runs["throughput_sps"].tolist() == [r.throughput_sps for r in rows]
    assert runs["case_id"].tolist() == [r.case_id for r in rows]
    assert (runs["tp"] == 1).all() and (runs["dp"] == runs["gpus_per_node"]).all()
    # what a notebook does with it
    medians = runs[runs["status"] == "ok"].groupby("gpus_per_node")["throughput_sps"].median()
    assert set(medians.index) == set(runs["gpus_per_node"])


def test_an_empty_tree_gives_an_empty_frame_with_the_columns(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    runs = toolkit.results.load(tmp_path)
    assert isinstance(runs, pd.DataFrame) and runs.empty
    assert list(runs.columns) == list(RUN_COLUMNS)
