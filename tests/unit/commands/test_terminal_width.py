"""The commands' output read in a log file (stdout a pipe, as in a Slurm job's output file) and on a
terminal of 80 columns: no case id, path, node name or number is split over two lines, or cut.

Each command runs as a process with `COLUMNS=80`, on real inputs: the CPU quickstart's results
(tests/data/results_quickstart, one run marked failed) under a long directory name, and the
recorded nccl-tests output and nvidia-smi dump of an H100 node (tests/data/nccl_tests,
tests/data/nvidia_smi; sources in their SOURCE.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
FAILED_CASE = "bert_base-torch-fp32-1n2g-bs8"
REASON = ("rank 1 exited with status 1: RuntimeError: CUDA out of memory while allocating "
          "1,298.7 MiB for the gradient buckets")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(module: str, *args: str, terminal: bool = False) -> str:
    """stdout of `python -m module args` at 80 columns: a pipe, or a terminal to rich."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("TTY_COMPATIBLE", None)
    if terminal:
        env["TTY_COMPATIBLE"] = "1"  # rich writes as to a terminal of $COLUMNS columns
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return ANSI.sub("", proc.stdout)


def assert_whole(out: str, words: list[str]) -> None:
    """Each word is on one line of `out`, whole."""
    missing = [w for w in words if w not in out]
    assert not missing, f"split or cut: {missing}\n{out}"
    assert "…" not in out, out


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """The quickstart's results, deep in a directory with a long name; one run failed."""
    root = (tmp_path / "a-rather-long-directory-name-for-the-results"
            / "bert-base-fp32-scaling-on-the-cpu-partition-of-the-test-cluster-two-repeats-each")
    shutil.copytree(DATA / "results_quickstart", root)
    status = root / "cases" / FAILED_CASE / "r1" / "status.json"
    record = json.loads(status.read_text())
    status.write_text(json.dumps({**record, "status": "failed", "returncode": 1,
                                  "reason": REASON}))
    return root


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_status_keeps_the_path_case_ids_and_log_whole(results: Path, terminal: bool) -> None:
    out = run("toolkit.status", str(results), terminal=terminal)
    log = results / "cases" / FAILED_CASE / "r1" / "output.log"
    assert_whole(out, [f"{results}: 4 runs", FAILED_CASE, str(log), "1,298.7"])
    line = next(x for x in out.splitlines() if FAILED_CASE in x)
    assert line.strip() == f"failed {FAILED_CASE} r1: {REASON} (log: {log})"


def test_collect_keeps_names_and_figures_whole(results: Path) -> None:
    out = run("toolkit.collect", str(results), "--no-store", "--no-plots")
    header = next(x for x in out.splitlines() if "samples/s" in x)
    assert all(word in header for word in ("model", "precision", "gpus/node", "bs/dev",
                                           "speedup", "eff"))
    # medians of the recorded repeats (SOURCE.md): 1 rank 327.0 and 409.2; 2 ranks 390.9
    assert_whole(out, [f"{results.name} (median of repeats)", "bert_base", "368.1", "390.9",
                       "1.06", "0.531"])


def test_compare_keeps_case_ids_whole(results: Path, tmp_path: Path) -> None:
    other = tmp_path / "b" / "another-rather-long-directory-name-for-the-same-runs"
    shutil.copytree(DATA / "results_quickstart", other)
    out = run("toolkit.compare", str(results), str(other))
    assert_whole(out, ["bert_base-torch-fp32-1n1g-bs8", str(results), str(other)])


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_preflight_report_keeps_node_names_and_figures_whole(tmp_path: Path,
                                                             terminal: bool) -> None:
    out = run("toolkit.preflight", "import",
              str(DATA / "nccl_tests" / "a3mega_allreduce_2n8g_h100.txt"),
              str(DATA / "nvidia_smi" / "h100_8gpu_535.161.08.txt"),
              "--results", str(tmp_path / "preflight"), terminal=terminal)
    assert_whole(out, ["h100_8gpu_535.161.08", "h100_8gpu_535.161.08/r7", "ztan-mig-235z",
                       "job ztan-mig-235z+ztan-mig-gq73", "NVIDIA H100 80GB HBM3", "all_reduce",
                       "338.8", "GB/s", "- / 1980", "hw_slowdown_share",
                       "--exclude=h100_8gpu_535.161.08"])


def test_a_dry_run_keeps_case_ids_and_the_grid_path_whole(tmp_path: Path) -> None:
    grid = tmp_path / "a-grid-file-with-a-name-long-enough-to-fill-a-line-of-a-log.yaml"
    shutil.copy(ROOT / "examples" / "quickstart.yaml", grid)
    out = run("toolkit.submit", "--grid", str(grid), "--results", str(tmp_path / "r"),
              "--executor", "local", "--dry-run")
    assert_whole(out, [f"quickstart: 4 cases from {grid}", "bert_base-torch-fp32-1n2g-bs8",
                       "resnet50-torch-fp32-1n1g-bs8"])
