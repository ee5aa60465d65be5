"""How many calls a collective measurement times: as many as asked while calls are quick, fewer
(one at least) once the group's slowest rank took long over its last warm-up call, every rank of
the group agreeing on the count. Two real gloo ranks (processes); the slow link is a call that
one rank delays."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from typing import Any

import pytest


def _rank(rank: int, store: str, delay_s: float, iterations: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    from toolkit.probes.collectives import time_collective

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    buf = torch.ones(1024)
    made = []

    def call() -> None:
        if rank == 1:
            time.sleep(delay_s)
        dist.all_reduce(buf)
        made.append(1)

    try:
        per_call, count = time_collective(call, dist, None, torch.device("cpu"), iterations)
        out.put((rank, per_call, count, len(made)))
    finally:
        dist.destroy_process_group()


def _measure(delay_s: float, iterations: int) -> dict[int, tuple[float, int, int]]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank, args=(r, store, delay_s, iterations, out))
                 for r in range(2)]
        for p in procs:
            p.start()
        got = {}
        for _ in procs:
            rank, per_call, count, made = out.get(timeout=120)
            got[rank] = (per_call, count, made)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
    return got


def test_quick_calls_are_timed_as_often_as_asked_slow_ones_within_the_budget() -> None:
    from toolkit.probes.collectives import SLOW_CALL_BUDGET_S

    quick = _measure(0.0, 5)
    assert {r: (count, made) for r, (_, count, made) in quick.items()} == {0: (5, 7), 1: (5, 7)}
    slow = _measure(0.4, 5)  # 0.4 s a call: 5 calls would take 2 s, the budget holds 2
    expected = int(SLOW_CALL_BUDGET_S / 0.4)
    assert expected == 2
    for rank, (per_call, count, made) in slow.items():
        assert (count, made) == (expected, 2 + expected), rank  # both warm-ups, then 2
        assert per_call == pytest.approx(0.4, abs=0.2)


def test_a_call_slower_than_the_budget_ends_the_warm_up() -> None:
    """A call over a link so slow that one takes longer than the whole budget: one warm-up
    call (it set the link up), then one timed call, on both ranks."""
    from toolkit.probes.collectives import SLOW_CALL_BUDGET_S

    slow = _measure(SLOW_CALL_BUDGET_S + 0.3, 5)
    for rank, (per_call, count, made) in slow.items():
        assert (count, made) == (1, 2), rank
        assert per_call == pytest.approx(SLOW_CALL_BUDGET_S + 0.3, abs=0.3)
