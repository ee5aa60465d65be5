"""`benchmarks/bare_gpt_parallel.py`, the plain tensor-, pipeline- and 2-D parallel GPT the
toolkit's layout rows are compared with, run for real: `mpirun -np 2` and `-np 4` CPU ranks over
gloo with a tiny GPT, each layout on the same global batch as one rank of the same script. The
JSON line must give the layout and figures `gpu_scaling.py` reads, and every step's loss must be
one rank's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.rank_output import run_ranks

pytestmark = pytest.mark.integration
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bare_gpt_parallel.py"
MICRO_BATCH, MICRO_BATCHES, STEPS = 2, 4, 5
TINY = ["--device", "cpu", "--hidden", "64", "--layers", "4", "--seq-len", "32", "--vocab",
        "512", "--heads", "4", "--micro-batch", str(MICRO_BATCH), "--micro-batches",
        str(MICRO_BATCHES), "--warmup", "2", "--iters", str(STEPS - 2), "--print-loss"]


def run_script(ranks: int, tmp_path: Path, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-W", "ignore", str(SCRIPT), *TINY, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if ranks > 1:
        stdout = run_ranks(ranks, cmd, tmp_path / "ranks", env, timeout=300)
    else:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        stdout = {0: proc.stdout}
    printed = {rank: [line for line in text.splitlines() if line.startswith("{")]
               for rank, text in stdout.items()}
    assert len(printed[0]) == 1, stdout[0]
    assert not any(printed[rank] for rank in printed if rank), printed  # rank 0 alone prints
    return dict(json.loads(printed[0][0]))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    got = run_script(1, tmp_path_factory.mktemp("one_rank"))
    losses = got["losses"]
    assert len(losses) == STEPS and losses[0] > losses[-1]  # it trains: the batch's loss falls
    assert (got["dp"], got["tp"], got["pp"], got["micro_batches"]) == (1, 1, 1, MICRO_BATCHES)
    return got


@pytest.mark.parametrize(("extra", "layout"), [
    (["--tp", "2"], (1, 2, 1)),
    (["--tp", "2", "--sequence-parallel"], (1, 2, 1)),
    (["--pp", "2"], (1, 1, 2)),
    (["--tp", "4"], (1, 4, 1)),
    (["--tp", "2"], (2, 2, 1)),
    (["--pp", "4"], (1, 1, 4)),
    (["--pp", "2"], (2, 1, 2)),
    (["--tp", "2", "--pp", "2"], (1, 2, 2)),
    ([], (4, 1, 1)),
], ids=["tp2", "tp2-sp", "pp2", "tp4", "dp2-tp2-fsdp", "pp4", "dp2-pp2", "tp2-pp2", "dp4"])
def test_each_layout_prints_itself_and_trains_as_one_rank(one_rank, extra, layout, tmp_path):
    """Every layout on the one-rank global batch (MICRO_BATCH x MICRO_BATCHES rows): a replica
    takes its share of the micro-batches, and the loss printed is the replicas' mean."""
    dp, tp, pp = layout
    micro_batches = MICRO_BATCHES // dp
    got = run_script(dp * tp * pp, tmp_path, *extra, "--micro-batches", str(micro_batches))
    assert (got["dp"], got["tp"], got["pp"]) == layout and got["world"] == dp * tp * pp
    assert (got["micro_batch"], got["micro_batches"]) == (MICRO_BATCH, micro_batches)
    global_batch = MICRO_BATCH * MICRO_BATCHES
    assert got["bare_throughput_sps"] == pytest.approx(global_batch / (got["step_ms"] / 1e3))
    assert got["tflops"] > 0 and got["mfu"] == pytest.approx(got["tflops"] / 989.0)
    assert got["stage_layers"] == {1: [4], 2: [2, 2], 4: [1, 1, 1, 1]}[pp]
    assert got["losses"] == pytest.approx(one_rank["losses"], rel=1e-5)


def test_three_dimensions_at_once_are_refused_plainly():
    """dp x tp x pp all above 1 is a layout the plain script leaves out: it says so and exits
    non-zero instead of training something else."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not installed")
    cmd = [mpirun, "--oversubscribe", "-np", "8", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    proc = subprocess.run([*cmd, sys.executable, "-W", "ignore", str(SCRIPT), *TINY, "--tp",
                           "2", "--pp", "2"], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "dp x tp x pp all above 1" in proc.stdout + proc.stderr
