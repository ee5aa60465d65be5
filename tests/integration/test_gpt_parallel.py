"""Numerical check of the GPT sharding with real ranks: `mpirun` starts 2 or 4 CPU processes
that train a tiny GPT with gloo collectives in tensor-, pipeline-, data-parallel and mixed
layouts (`python -m toolkit.workloads.pytorch.gpt_check`); every layout must give the single-rank
model's loss at each of the first steps, on the same global batch and seed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
torch = pytest.importorskip("torch")

from tests.integration.rank_output import run_ranks  # noqa: E402
from toolkit.workloads.pytorch.gpt_check import run_layouts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def mpirun_layouts(np_: int, layouts: list[str], tmp_path: Path) -> dict[str, list[float]]:
    out = tmp_path / f"losses{np_}.json"
    program = [sys.executable, "-W", "ignore", "-m", "toolkit.workloads.pytorch.gpt_check",
               "--steps", str(STEPS), "--out", str(out)]
    for layout in layouts:
        program += ["--layout", layout]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run_ranks(np_, program, tmp_path / "ranks", env, cwd=tmp_path, timeout=600)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reference():
    torch.set_num_threads(1)
    ref = run_layouts(["1x1x1", "1x1x1:bf16"], STEPS, world_size=1, rank=0)
    fp32 = ref["1x1x1"]
    assert fp32[0] > fp32[1] > fp32[2]  # it trains: the fixed batch's loss falls
    return ref


def assert_same(got: list[float], want: list[float], rtol: float) -> None:
    assert len(got) == len(want) == STEPS
    assert got == pytest.approx(want, rel=rtol), f"{got} != {want}"


def test_two_ranks_tensor_pipeline_and_data_parallel_match_one_rank(reference, tmp_path):
    got = mpirun_layouts(2, ["1x2x1", "1x2x1:sp", "1x1x2:gpipe", "1x1x2:1f1b",
                             "1x1x2:interleaved", "2x1x1:ddp", "2x1x1:fsdp", "1x1x2:bf16",
                             "1x2x1:sp:bf16", "2x1x1:ddp:bf16reduce", "2x1x1:fsdp:bf16reduce"],
                         tmp_path)
    # interleaved: each rank holds 2 of the 4 stages (rank 0 the embedding, rank 1 the head)
    for layout in ("1x2x1", "1x2x1:sp", "1x1x2:gpipe", "1x1x2:1f1b", "1x1x2:interleaved",
                   "2x1x1:ddp", "2x1x1:fsdp"):
        assert_same(got[layout], reference["1x1x1"], rtol=1e-5)
    # autocast: the pipeline passes fp32 hidden states and bf16 logits between stages; sequence
    # parallelism gathers bf16 LayerNorm outputs
    assert_same(got["1x1x2:bf16"], reference["1x1x1:bf16"], rtol=1e-3)
    assert_same(got["1x2x1:sp:bf16"], reference["1x1x1:bf16"], rtol=1e-3)
    # gradients summed in bf16 (DDP's hook, FSDP2's reduce dtype): the sum is rounded, AdamW's
    # normalised step hardly moves
    assert_same(got["2x1x1:ddp:bf16reduce"], reference["1x1x1"], rtol=1e-3)
    assert_same(got["2x1x1:fsdp:bf16reduce"], reference["1x1x1"], rtol=1e-3)


def test_four_ranks_mixed_layouts_match_one_rank(reference, tmp_path):
    layouts = ["4x1x1", "1x4x1", "1x4x1:sp", "1x1x4:1f1b", "2x2x1", "2x2x1:sp", "1x2x2",
               "2x1x2:ddp", "2x1x2:ddp:interleaved", "2x1x2:fsdp:interleaved",
               "1x2x2:interleaved"]
    got = mpirun_layouts(4, layouts, tmp_path)
    # the four-GPU matrix's layouts: DDP over 4, tp over 4 (+SP), a 4-stage pipeline (one
    # layer a stage), FSDP2+TP(+SP), TP+PP, DDP+PP; interleaved PP with DDP (a wrapper per
    # stage), with FSDP2 (each stage sharded as its own root) and with TP
    for layout in layouts:
        assert_same(got[layout], reference["1x1x1"], rtol=1e-5)
