"""Which GPU a rank uses, from its binding record (the worker's workloads and the preflight)."""

from __future__ import annotations

import pytest

from toolkit.rank.binding import applied_gpu, cuda_index


def test_applied_gpu_only_when_the_binding_was_applied() -> None:
    assert applied_gpu({"applied": True, "planned": {"gpu_index": 3}}) == 3
    assert applied_gpu({"applied": False, "planned": {"gpu_index": 3}}) is None
    assert applied_gpu({"applied": True}) is None


def test_cuda_index_follows_the_binding_unless_devices_are_masked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_index(5, local_rank=1, count=8) == 5
    assert cuda_index(None, local_rank=1, count=8) == 1
    assert cuda_index(None, local_rank=1, count=1) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert cuda_index(5, local_rank=1, count=1) == 0


def test_cuda_index_is_the_bound_gpus_place_among_the_visible_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node of the local cluster that owns GPUs 2 and 3 (or a Slurm job given them): CUDA
    numbers them 0 and 1, in the order CUDA_VISIBLE_DEVICES lists them."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert cuda_index(3, local_rank=0, count=2) == 1
    assert cuda_index(2, local_rank=1, count=2) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
    assert cuda_index(3, local_rank=1, count=2) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-9b3eccac")
    assert cuda_index(0, local_rank=0, count=1) == 0
