"""Ranks that share one GPU (nodes taking turns on a machine's GPUs) measure it in turns, each
alone on it; ranks on GPUs of their own measure at once, as they train."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from toolkit.probes.runner import _in_turns, gpu_turns


def test_each_rank_on_a_shared_gpu_gets_its_own_turn() -> None:
    assert gpu_turns(["a", "b", "c", "d"]) == [0, 0, 0, 0]
    assert gpu_turns(["a", "a", "b", "a"]) == [0, 1, 0, 2]
    assert gpu_turns([None, None, "a"]) == [0, 0, 0]


class _Comm:
    """Ranks as threads: allgather and barrier over them (the seam of MPI's communicator)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size)
        self.slots: list[Any] = [None] * size

    def for_rank(self, rank: int) -> Any:
        comm = self

        class One:
            def allgather(self, value: Any) -> list[Any]:
                comm.slots[rank] = value
                comm.barrier.wait()
                out = list(comm.slots)
                comm.barrier.wait()
                return out

            def quiet_barrier(self) -> None:
                comm.barrier.wait()

        return One()


def _run(gpu_ids: list[str | None]) -> list[tuple[int, int]]:
    """Which ranks measured in which phase: (phase, rank) in the order they ran, where a
    phase is one pass of the barrier."""
    comm = _Comm(len(gpu_ids))
    phase = [0] * len(gpu_ids)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def rank_main(rank: int) -> None:
        one = comm.for_rank(rank)
        original = one.quiet_barrier

        def counted() -> None:
            original()
            phase[rank] += 1

        one.quiet_barrier = counted

        def step() -> None:
            with lock:
                seen.append((phase[rank], rank))

        _in_turns(SimpleNamespace(rank=rank, world_size=len(gpu_ids)), one,
                  SimpleNamespace(type="cuda"), step, gpu_ids[rank])

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(len(gpu_ids))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    return sorted(seen)


def test_gpus_of_their_own_measure_at_once() -> None:
    assert _run(["a", "b", "c"]) == [(0, 0), (0, 1), (0, 2)]


def test_ranks_sharing_a_gpu_measure_one_after_the_other() -> None:
    # ranks 0 and 2 share GPU a, rank 1 has b: 0 and 1 in the first turn, 2 in the second
    assert _run(["a", "b", "a"]) == [(0, 0), (0, 1), (1, 2)]
