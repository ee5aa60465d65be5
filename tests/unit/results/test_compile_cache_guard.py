"""The ranks compile into the grid's compile cache only while it is a real directory (or not
there yet): a symbolic link planted there after submission is refused before training, by the
worker, with the reason in its error file, and nothing is written through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from toolkit.results.layout import COMPILE_CACHE_DIR, compile_cache_dir, compile_cache_problem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_a_link_or_file_at_the_grids_cache_is_a_problem(tmp_path):
    case_json = tmp_path / "res" / "cases" / "c" / "case.json"
    case_json.parent.mkdir(parents=True)
    cache = str(compile_cache_dir(case_json))
    assert compile_cache_problem(case_json, cache) is None  # not there yet: torch makes it
    (tmp_path / "res" / COMPILE_CACHE_DIR).mkdir()
    assert compile_cache_problem(case_json, cache) is None
    (tmp_path / "res" / COMPILE_CACHE_DIR).rmdir()
    (tmp_path / "res" / COMPILE_CACHE_DIR).symlink_to(tmp_path / "elsewhere")
    assert "compile cache" in compile_cache_problem(case_json, cache)
    # a cache the grid's env chose, or none: not ours to judge
    assert compile_cache_problem(case_json, str(tmp_path / "mine")) is None
    assert compile_cache_problem(case_json, None) is None


def test_the_worker_refuses_a_linked_cache_before_training(tmp_path):
    res = tmp_path / "res"
    case_json = res / "cases" / "c" / "case.json"
    run_dir = case_json.parent / "r0"
    run_dir.mkdir(parents=True)
    case_json.write_text(json.dumps({"id": "c", "case": {"model": "resnet50",
                                                         "device": "cpu"}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (res / COMPILE_CACHE_DIR).symlink_to(elsewhere)
    env = {**os.environ, "PYTHONPATH": ROOT,
           "TORCHINDUCTOR_CACHE_DIR": str(compile_cache_dir(case_json))}
    proc = subprocess.run([sys.executable, "-m", "toolkit.worker", str(case_json), "--run-dir",
                           str(run_dir), "--repeat", "0"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = list(run_dir.glob("error-pid*.jsonl"))
    assert len(errors) == 1 and "compile cache" in errors[0].read_text()
    assert list(elsewhere.iterdir()) == []
