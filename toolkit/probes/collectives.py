"""Collective bandwidth over the job's ranks, each node's ranks and pairs of nodes, and
send/receive between the GPUs of a node, through torch.distributed (NCCL on GPUs, gloo on CPUs).

Figures as nccl-tests defines them (its PERFORMANCE.md): for a message of S bytes taking t
seconds on n ranks, algbw = S / t and busbw = algbw x factor, the factor making busbw comparable
with the hardware's link bandwidth whatever the algorithm: all-reduce 2(n-1)/n, all-gather,
reduce-scatter and all-to-all (n-1)/n, send/receive 1. S is the whole buffer (all-gather's
output, reduce-scatter's input). Each rank times its own calls between barriers; the reader
takes the slowest rank of a group, which is when the collective ended for everyone.

Groups, so that a slow figure names its place: `job` (all ranks, when there are several),
`node` (each node's ranks, when it has several), `pair` (all ranks of two nodes: every pair of
nodes up to `ALL_PAIRS_UP_TO` nodes, in the rounds of disjoint pairs of a round-robin schedule,
and a rotating share of them above (`link_rounds`), so a node slow in all its pairs is named and
a link slow alone too), and `p2p` between the local ranks of every node (`pair_rounds`). A pair
below its peers or its floor is measured again, alone, until measurements on an uncrowded host
confirm it (`toolkit.analysis.preflight.measure_again`); every figure carries the host's load
while it was measured (`toolkit.probes.measurement.with_host_load`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from toolkit.analysis.preflight import ROUNDS_AGAIN
from toolkit.probes.measurement import GBPS, Measurement, best_of, with_host_load

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}

GPU_SIZES = (8 << 20, 64 << 20, 512 << 20)
CPU_SIZES = (64 << 10, 1 << 20, 8 << 20)


def node_indices(nodes: list[str]) -> list[int]:
    """Each rank's node (`nodes[rank]`: its name) as an index, the nodes numbered in the order
    of their first rank. One pass: a job of 4,096 ranks asks it on every rank."""
    index: dict[str, int] = {}
    return [index.setdefault(node, len(index)) for node in nodes]


def pair_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs of 0..n-1 in which every member is in two pairs (one pair for
    n = 2, none for n < 2): (0,1), (2,3), ... then (1,2), (3,4), ..., closing the ring with
    (n-1, 0), in a third round when n is odd. The send/receive probe pairs a node's GPUs so."""
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    first = [(i, i + 1) for i in range(0, n - 1, 2)]
    second = [(i, i + 1) for i in range(1, n - 1, 2)]
    if n % 2 == 0:
        return [first, [*second, (n - 1, 0)]]
    return [first, second, [(n - 1, 0)]]


ALL_PAIRS_UP_TO = 16
"""Up to this many nodes one preflight tests every pair of nodes; above it, `ROTATED_ROUNDS`
rounds of the schedule a preflight, the next preflight the next ones (`link_rounds`)."""
ROTATED_ROUNDS = ALL_PAIRS_UP_TO - 1


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of 0..n-1 once, in rounds of disjoint pairs (the circle method): n-1 rounds
    of n/2 pairs for an even n, n rounds of (n-1)/2 pairs for an odd n (each member sits out
    one). Every member is in every round of an even n."""
    if n < 2:
        return []
    m = n + n % 2
    ring = list(range(m))
    rounds = []
    for _ in range(m - 1):
        pairs = [(min(ring[i], ring[m - 1 - i]), max(ring[i], ring[m - 1 - i]))
                 for i in range(m // 2)]
        rounds.append(sorted(p for p in pairs if p[1] < n))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


def preflights_to_cover(n: int) -> int:
    """How many preflights (`link_rounds` with turns 0, 1, ...) test every pair of n nodes."""
    rounds = len(round_robin(n))
    return 1 if n <= ALL_PAIRS_UP_TO else -(-rounds // ROTATED_ROUNDS)


def link_rounds(n: int, turn: int = 0) -> list[list[tuple[int, int]]]:
    """The rounds of pairs of nodes one preflight tests: every round of `round_robin(n)` up
    to `ALL_PAIRS_UP_TO` nodes; above it `ROTATED_ROUNDS` of them, starting where the
    preflight before (`turn` - 1) stopped, so that `preflights_to_cover(n)` preflights in a row
    test every pair."""
    rounds = round_robin(n)
    if n <= ALL_PAIRS_UP_TO:
        return rounds
    start = (turn % preflights_to_cover(n)) * ROTATED_ROUNDS
    return rounds[start:start + ROTATED_ROUNDS]


def _op_call(op: str, dist: Any, buf: Any, out: Any, group: Any) -> Callable[[], Any]:
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(out, buf, group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(out, buf, group=group)
    return lambda: dist.all_to_all_single(out, buf, group=group)


def _buffers(op: str, nbytes: int, n: int, device: Any) -> tuple[Any, Any]:
    """(input, output) for a collective whose whole buffer is `nbytes`."""
    import torch

    elems = max(n, nbytes // 4 // n * n)
    if op == "all_gather":
        return (torch.ones(elems // n, device=device), torch.empty(elems, device=device))
    if op == "reduce_scatter":
        return (torch.ones(elems, device=device), torch.empty(elems // n, device=device))
    return torch.ones(elems, device=device), torch.empty(elems, device=device)


SLOW_CALL_BUDGET_S = 1.0
"""Seconds of timed calls a measurement takes at most once its calls are slow: where the last
warm-up call took the group's slowest rank so long that `iterations` of them would pass this,
budget / that many calls are timed, at least one. A link that slow is slow in every call, and
five 3-second calls of each pair of a node throttled to 20 Mbit/s would add minutes to a
preflight."""


def _slowest(dist: Any, group: Any, seconds: float, device: Any) -> float:
    """The largest of the group's `seconds` (every rank of the group calls it)."""
    import torch

    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def time_collective(call: Callable[[], Any], dist: Any, group: Any, device: Any,
                    iterations: int, warmup: int = 2) -> tuple[float, int]:
    """Seconds per call on this rank and how many calls were timed: warm-up calls (each timed,
    its slowest rank's time agreed by the group, `SLOW_CALL_BUDGET_S`; no further warm-up once
    one call took longer than the whole budget), a barrier, then
    the calls; their mean on a GPU (calls are queued, the device synchronised once), the median
    call on a CPU (gloo's calls return when done), so that a moment's contention from another
    process on the host does not make a healthy link look slow: a slow link is slow in every
    call."""
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    last = 0.0
    for _ in range(max(warmup, 1)):
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        last = _slowest(dist, group, time.perf_counter() - t0, device)
        if last > SLOW_CALL_BUDGET_S:  # set up by now, and every further call as slow
            break
    count = iterations if last * iterations <= SLOW_CALL_BUDGET_S else \
        max(1, min(iterations, int(SLOW_CALL_BUDGET_S / last)))
    dist.barrier(group=group)
    if device.type != "cuda":
        calls = []
        for _ in range(count):
            t0 = time.perf_counter()
            call()
            calls.append(time.perf_counter() - t0)
        return statistics.median(calls), count
    t0 = time.perf_counter()
    for _ in range(count):
        call()
    sync()
    return (time.perf_counter() - t0) / count, count


def measure_group(dist: Any, group: Any, n: int, device: Any, scope: str, name: str,
                  sizes: tuple[int, ...], ops: tuple[str, ...], iterations: int
                  ) -> list[Measurement]:
    """Every op at every size over one group (this rank is in it)."""
    out = []
    for op in ops:
        for nbytes in sizes:
            buf, res = _buffers(op, nbytes, n, device)
            size = (res if op == "all_gather" else buf).numel() * 4
            try:
                per_call, timed = time_collective(_op_call(op, dist, buf, res, group), dist,
                                                  group, device, iterations)
            except (RuntimeError, ValueError) as err:  # gloo lacks some collectives
                out.append(Measurement("collective", op, None, GBPS, scope, name,
                                       detail={"bytes": size, "ranks": n},
                                       reason=f"{type(err).__name__}: {err}"[:300]))
                break
            algbw = size / per_call / 1e9
            out.append(Measurement("collective", op, algbw * BUSBW_FACTOR[op](n), GBPS, scope,
                                   name, detail={"bytes": size, "ranks": n, "call_s": per_call,
                                                 "iterations": timed,
                                                 "algbw_gbps": algbw}))
            del buf, res
    return out


def sendrecv(dist: Any, me: int, peer: int, device: Any, nbytes: int, iterations: int,
             name: str) -> Measurement:
    """Both directions at once between this rank and `peer` (batched isend/irecv)."""
    import torch

    send = torch.ones(nbytes // 4, device=device)
    recv = torch.empty_like(send)

    def call() -> None:
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    t0 = 0.0
    for i in range(iterations + 2):
        if i == 2:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    per_call = (time.perf_counter() - t0) / iterations
    return Measurement("p2p", "sendrecv", nbytes / per_call / 1e9, GBPS, "pair", name,
                       detail={"bytes": nbytes, "call_s": per_call, "iterations": iterations,
                               "peer": peer})


def run_all(dist: Any, rank: int, node_of: list[int], hosts: list[str], device: Any,
            progress: Callable[[str], None], turn: int = 0,
            speed_mbps: list[float | None] | None = None) -> list[Measurement]:
    """Every group this rank belongs to. All ranks call this together: groups are made by
    every rank in the same order, as torch.distributed requires. `turn` picks the pairs of
    nodes above `ALL_PAIRS_UP_TO` nodes (`link_rounds`); `speed_mbps`, each rank's interface
    speed, gives a pair's floor (`toolkit.analysis.preflight.link_floor_gbps`)."""
    world = len(node_of)
    gpu = device.type == "cuda"
    sizes = GPU_SIZES if gpu else CPU_SIZES
    iterations = 20 if gpu else 5
    nodes = sorted(set(node_of))
    node_host = {k: hosts[node_of.index(k)] for k in nodes}
    ranks_of = {k: [r for r in range(world) if node_of[r] == k] for k in nodes}
    out: list[Measurement] = []
    if world > 1:
        progress("collectives over the job")
        out += with_host_load(lambda: measure_group(dist, None, world, device, "job", "job",
                                                    sizes, OPS, iterations))
    node_groups = {k: dist.new_group(ranks_of[k]) for k in nodes}
    mine = node_of[rank]
    if len(ranks_of[mine]) > 1:
        progress("collectives within the node")
        out += with_host_load(lambda: measure_group(dist, node_groups[mine],
                                                    len(ranks_of[mine]), device, "node",
                                                    node_host[mine], sizes, OPS, iterations))
    dist.barrier()
    if len(nodes) >= 2:
        out += _pairs(dist, rank, nodes, node_host, ranks_of, mine, device, progress,
                      sizes[-1:], iterations, link_rounds(len(nodes), turn),
                      _floors(nodes, ranks_of, speed_mbps))
    local = ranks_of[mine]
    if len(local) > 1:
        progress("send/receive between the node's devices")
        i = local.index(rank)
        for pairs in pair_rounds(len(local)):
            for a, b in pairs:
                if i in (a, b):
                    peer = local[b if i == a else a]
                    name = f"{node_host[mine]}:{min(rank, peer)}+{max(rank, peer)}"
                    out += with_host_load(lambda peer=peer, name=name: [  # type: ignore[misc]
                        sendrecv(dist, rank, peer, device, sizes[-1], iterations, name)])
            dist.barrier()
    return out


def _floors(nodes: list[int], ranks_of: dict[int, list[int]],
            speed_mbps: list[float | None] | None) -> dict[tuple[int, int], float]:
    """(a, b) -> the floor of the pair's all-reduce busbw, where both nodes' speeds are known."""
    from toolkit.analysis.preflight import link_floor_gbps

    if not speed_mbps:
        return {}
    node_speed = {k: min((s for r in ranks_of[k] if (s := speed_mbps[r])), default=None)
                  for k in nodes}
    out = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            floor = link_floor_gbps([node_speed[a], node_speed[b]])
            if floor is not None:
                out[(nodes.index(a), nodes.index(b))] = floor
    return out


def _pairs(dist: Any, rank: int, nodes: list[int], node_host: dict[int, str],
           ranks_of: dict[int, list[int]], mine: int, device: Any,
           progress: Callable[[str], None], sizes: tuple[int, ...], iterations: int,
           rounds: list[list[tuple[int, int]]], floors: dict[tuple[int, int], float]
           ) -> list[Measurement]:
    """The all-reduce of every pair of nodes in `rounds` (indices into `nodes`), then again
    for the pairs below their peers or their floor (`measure_again`) until they are
    confirmed; every rank takes part in every step (groups, barriers, the gather)."""
    from toolkit.analysis.preflight import attempts_of, measure_again

    gpu = device.type == "cuda"
    every = [pair for r in rounds for pair in r]
    if not gpu:  # CPU ranks share their host's cores: one pair at a time, as compute runs
        rounds = [[pair] for pair in every]
    groups = {pair: dist.new_group(ranks_of[nodes[pair[0]]] + ranks_of[nodes[pair[1]]])
              for pair in every}
    found: dict[tuple[int, int], list[Measurement]] = {}

    def measure(pair: tuple[int, int]) -> None:
        a, b = nodes[pair[0]], nodes[pair[1]]
        if mine not in (a, b):
            return
        name = f"{node_host[a]}+{node_host[b]}"
        progress(f"all-reduce over {name}")
        n = len(ranks_of[a]) + len(ranks_of[b])
        found.setdefault(pair, []).extend(with_host_load(lambda: measure_group(
            dist, groups[pair], n, device, "pair", name, sizes, ("all_reduce",), iterations)))

    for pairs in rounds:
        for pair in pairs:
            measure(pair)
        dist.barrier()
    host = node_host[mine]
    for _ in range(ROUNDS_AGAIN):
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, {pair: best_of(ms).detail.get("attempts", [])
                                          for pair, ms in found.items()} | {"host": host})
        per_pair: dict[tuple[int, int], list[tuple[str, list[dict[str, Any]]]]] = {}
        for theirs in gathered:
            for pair, attempts in theirs.items():
                if pair != "host":
                    per_pair.setdefault(pair, []).append((theirs["host"], attempts))
        again = measure_again({pair: attempts_of(ranks) for pair, ranks in per_pair.items()},
                              floors)
        if not again:
            break
        for pair in sorted(again):  # one at a time: a pair measured again is measured alone
            measure(pair)
            dist.barrier()
    return [best_of(ms) for _, ms in sorted(found.items())]


