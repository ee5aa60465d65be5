"""The per-local-rank binding plan, `apply`, and the NCCL socket interface."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from topology.model import Nic, parse_cpu_list
from topology.plan import Binding, apply, plan_node, socket_ifname_for, split_cpus
from topology.smi import parse_topo_matrix

DATA = Path(__file__).resolve().parents[2] / "data" / "topo"


def topo(name: str):
    return parse_topo_matrix((DATA / name).read_text())


def test_dgx1_eight_ranks() -> None:
    plan = plan_node(topo("dgx1_v100_seed.txt"), 8)
    assert [b.gpu_index for b in plan] == list(range(8))
    assert [str(b.nic_link) for b in plan] == [
        "NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"
    ]  # fmt: skip
    assert {b.nic.device for b in plan if b.nic} == {"mlx5_0"}
    # 0-11,24-35 split among GPUs 0-3: each rank keeps 3 cores and their SMT siblings.
    assert [b.cpus for b in plan] == [
        parse_cpu_list(c)
        for c in (
            "0-2,24-26", "3-5,27-29", "6-8,30-32", "9-11,33-35",
            "12-14,36-38", "15-17,39-41", "18-20,42-44", "21-23,45-47",
        )
    ]  # fmt: skip
    assert plan[2].env == {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1"}
    assert plan[3].to_dict()["nic"] == "mlx5_0" and plan[3].to_dict()["nic_link"] == "PIX"
    assert plan[0].to_dict()["cpus"] == "0-2,24-26"


def test_subset_of_gpus_splits_only_among_the_ranks_sharing_a_set() -> None:
    plan = plan_node(topo("dgx1_v100_seed.txt"), 3, gpu_indices=[4, 5, 0])
    assert [b.gpu_index for b in plan] == [4, 5, 0]
    assert plan[0].cpus == parse_cpu_list("12-17,36-41")
    assert plan[1].cpus == parse_cpu_list("18-23,42-47")
    assert plan[2].cpus == parse_cpu_list("0-11,24-35")  # alone on its socket


def test_equally_near_nics_are_spread_over_ranks() -> None:
    plan = plan_node(topo("constructed_8gpu_2socket_5nic.txt"), 8)
    assert [(b.nic.device if b.nic else None, str(b.nic_link)) for b in plan] == [
        ("mlx5_0", "PXB"), ("mlx5_1", "PXB"), ("mlx5_2", "PIX"), ("mlx5_2", "PIX"),
        ("mlx5_3", "PIX"), ("mlx5_3", "PIX"), ("mlx5_4", "PXB"), ("mlx5_4", "PXB"),
    ]  # fmt: skip
    assert [b.numa_node for b in plan] == [0] * 4 + [1] * 4
    assert plan[0].cpus == parse_cpu_list("0-11,96-107")
    assert plan[7].cpus == parse_cpu_list("84-95,180-191")


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.txt")))
def test_rank_cpu_sets_partition_each_gpu_affinity_set(name: str) -> None:
    t = topo(name)
    plan = plan_node(t, len(t.gpus))
    for cpus in {g.cpus for g in t.gpus}:
        shares = [b.cpus for b in plan if t.gpu(b.gpu_index).cpus == cpus]
        assert frozenset().union(*shares) == cpus
        assert sum(len(s) for s in shares) == len(cpus)  # disjoint
        assert max(map(len, shares)) - min(map(len, shares)) <= 2  # even (one per range)


def test_h200_pair_without_nic() -> None:
    plan = plan_node(topo("h200x2_nvlink.txt"), 2)
    assert [b.cpus for b in plan] == [frozenset(range(16)), frozenset(range(16, 32))]
    assert all(b.nic is None and b.env == {} for b in plan)


def test_split_cpus_falls_back_to_one_list_when_ranges_are_short() -> None:
    assert split_cpus(parse_cpu_list("0,2,4,6"), 2) == [frozenset({0, 2}), frozenset({4, 6})]
    assert split_cpus(parse_cpu_list("0-6"), 3) == [
        frozenset({0, 1, 2}), frozenset({3, 4}), frozenset({5, 6})
    ]  # fmt: skip
    assert split_cpus(frozenset(), 2) == [frozenset(), frozenset()]


@pytest.mark.parametrize(
    ("ranks", "gpus", "message"),
    [
        (9, None, "ranks_per_node=9 but this node has 8 GPU(s)"),
        (0, None, "ranks_per_node must be at least 1"),
        (2, [3, 3], "two ranks would share one GPU: GPU 3 by local ranks [0, 1]"),
        (2, [0, 8], "gpu_indices [8] do not exist on this node"),
        (2, [0], "gpu_indices lists 1 GPU(s)"),
    ],
)
def test_bad_plans_fail_clearly(ranks: int, gpus: list[int] | None, message: str) -> None:
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        plan_node(topo("dgx1_v100_seed.txt"), ranks, gpu_indices=gpus)


@pytest.fixture
def restore_affinity():
    before = os.sched_getaffinity(0)
    yield before
    os.sched_setaffinity(0, before)


def _binding(cpus: frozenset[int], bus_id: str | None = "0000:18:00.0") -> Binding:
    nic = Nic(name="NIC0", device="mlx5_0")
    return Binding(
        local_rank=0, gpu_index=0, gpu_bus_id=bus_id, gpu_uuid=None, cpus=cpus, numa_node=0,
        nic=nic, nic_link=None, env={"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1"},
    )  # fmt: skip


def test_apply_binds_cpus_and_lets_the_user_win(restore_affinity, monkeypatch) -> None:
    cpu = min(restore_affinity)
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    monkeypatch.setenv("UCX_NET_DEVICES", "mlx5_9:1")
    record = apply(
        _binding(frozenset({cpu})),
        {"UCX_NET_DEVICES": "mlx5_9:1"},
        actual_gpu_bus_id="00000000:18:00.0",
    )
    assert os.sched_getaffinity(0) == {cpu}
    assert record["actual"]["cpus"] == [cpu]
    assert record["affinity_skipped"] is None
    assert os.environ["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert os.environ["UCX_NET_DEVICES"] == "mlx5_9:1"
    assert record["env_applied"] == {"NCCL_IB_HCA": "=mlx5_0:1"}
    assert record["env_user_overrides"] == {"UCX_NET_DEVICES": "mlx5_9:1"}
    assert record["planned"]["cpus"] == str(cpu)
    assert record["mismatches"] == [
        "UCX_NET_DEVICES='mlx5_9:1' set by the user, planned 'mlx5_0:1'"
    ]


def test_apply_skips_cpus_this_machine_lacks(restore_affinity, monkeypatch) -> None:
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    monkeypatch.delenv("UCX_NET_DEVICES", raising=False)
    record = apply(_binding(frozenset({100_000, 100_001})), {}, actual_gpu_bus_id="0000:3b:00.0")
    assert "none of the planned CPUs 100000-100001 exist here" in record["affinity_skipped"]
    assert set(record["actual"]["cpus"]) == restore_affinity
    assert "GPU bus id is 0000:3b:00.0, planned 0000:18:00.0" in record["mismatches"]


def test_socket_ifname_for_loopback_and_unknown_hosts() -> None:
    assert socket_ifname_for("127.0.0.1") == "lo"
    assert socket_ifname_for("localhost") == "lo"
    assert socket_ifname_for("no-such-host.invalid") is None
