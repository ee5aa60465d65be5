"""`benchmarks/bare_gpt_parallel.py`, the plain tensor- and pipeline-parallel GPT the toolkit's
tp and pp rows are compared with, run for real: `mpirun -np 2` CPU ranks over gloo with a tiny
GPT, each layout on the same global batch as one rank of the same script. The JSON line must
give the layout and figures `gpu_scaling.py` reads, and every step's loss must be one rank's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bare_gpt_parallel.py"
MICRO_BATCH, MICRO_BATCHES, STEPS = 2, 4, 5
TINY = ["--device", "cpu", "--hidden", "64", "--layers", "4", "--seq-len", "32", "--vocab",
        "512", "--heads", "4", "--micro-batch", str(MICRO_BATCH), "--micro-batches",
        str(MICRO_BATCHES), "--warmup", "2", "--iters", str(STEPS - 2), "--print-loss"]


def run_script(ranks: int, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-W", "ignore", str(SCRIPT), *TINY, *extra]
    if ranks > 1:
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            pytest.skip("mpirun not installed")
        launcher = [mpirun, "--oversubscribe", "-np", str(ranks), "--bind-to", "none"]
        if os.geteuid() == 0:
            launcher.append("--allow-run-as-root")
        cmd = launcher + cmd
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout  # rank 0 alone prints
    return dict(json.loads(lines[0]))


@pytest.fixture(scope="module")
def one_rank() -> dict[str, Any]:
    got = run_script(1)
    losses = got["losses"]
    assert len(losses) == STEPS and losses[0] > losses[-1]  # it trains: the batch's loss falls
    assert (got["dp"], got["tp"], got["pp"], got["micro_batches"]) == (1, 1, 1, MICRO_BATCHES)
    return got


@pytest.mark.parametrize(("extra", "layout"), [
    (["--tp", "2"], (1, 2, 1)),
    (["--tp", "2", "--sequence-parallel"], (1, 2, 1)),
    (["--pp", "2"], (1, 1, 2)),
], ids=["tp2", "tp2-sp", "pp2"])
def test_two_ranks_print_their_layout_and_train_as_one_rank(one_rank, extra, layout):
    got = run_script(2, *extra)
    assert (got["dp"], got["tp"], got["pp"]) == layout and got["world"] == 2
    assert (got["micro_batch"], got["micro_batches"]) == (MICRO_BATCH, MICRO_BATCHES)
    global_batch = MICRO_BATCH * MICRO_BATCHES  # dp = 1: one replica's batch
    assert got["bare_throughput_sps"] == pytest.approx(global_batch / (got["step_ms"] / 1e3))
    assert got["tflops"] > 0 and got["mfu"] == pytest.approx(got["tflops"] / 989.0)
    assert got["stage_layers"] == ([2, 2] if layout[2] == 2 else [4])
    assert got["losses"] == pytest.approx(one_rank["losses"], rel=1e-5)
