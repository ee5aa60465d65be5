"""A stale record of one cluster never touches another's network: names come from the port base
alone, so what `up` makes carries its record's mark, and `down` removes (and ends processes in)
only what carries it. The attack runs with real namespaces, links and a bridge where root may
make them (a second or so)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from toolkit.localslurm import network as net
from toolkit.localslurm.daemons import LocalCluster, stop_cluster

PORT = 39517  # far from the clusters of the other tests, whose names carry their ports


def test_everything_up_makes_carries_the_mark_and_an_alias_is_read_back() -> None:
    plan = net.plan_network(PORT, ["node1", "node2"], "10.217.3.0/24", mark="trainbench /s 1")
    made = [" ".join(c) for c in net.create_commands(plan)]
    for name in (f"tb{PORT}br", f"tb{PORT}n1", f"tb{PORT}n2"):
        assert f"ip link set {name} alias trainbench /s 1" in made
    for ns in (f"tb{PORT}-node1", f"tb{PORT}-node2"):
        assert f"ip -n {ns} link set lo alias trainbench /s 1" in made
    line = ("6: tbbr: <BROADCAST> mtu 1500 qdisc noop state DOWN\\    link/ether 66:93:85:a5:46:7e "
            "brd ff:ff:ff:ff:ff:ff\\    alias trainbench /s 1\n")
    assert net.parse_alias(line) == "trainbench /s 1"
    assert net.parse_alias(line.split("\\    alias")[0]) is None
    assert net.Network.from_json(plan.to_json()).mark == "trainbench /s 1"


def _namespaces_here() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    return net.namespaces_work(f"tb{PORT}-probe")


def _record(state: Path, network: net.Network) -> LocalCluster:
    return LocalCluster(state_dir=state, nodes=[n.node for n in network.nodes], cpus_per_node=1,
                        port_base=PORT, daemons=[], started_at=time.time(), network=network)


def test_down_of_a_stale_record_leaves_the_cluster_now_on_its_port_base_alone(tmp_path) -> None:
    why = _namespaces_here()
    if why is not None:
        pytest.skip(f"no network namespaces here: {why}")
    names = ["node1", "node2"]
    subnet = net.free_subnet(net.used_networks())
    b = net.plan_network(PORT, names, subnet, mark=net.new_mark(tmp_path / "b"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    net.create(b)
    step = None
    try:
        # a job step of B's node1
        step = subprocess.Popen(["ip", "netns", "exec", f"tb{PORT}-node1", "sleep", "60"])
        time.sleep(0.3)
        stale_a = net.plan_network(PORT, names, subnet, mark=net.new_mark(tmp_path / "a"))
        unmarked_a = net.plan_network(PORT, names, subnet)  # a record made before marks
        for record in (stale_a, unmarked_a):
            cluster = _record(tmp_path / "a", record)
            assert stop_cluster(cluster, timeout_s=1) == []
            assert step.poll() is None, "down of a stale record killed another cluster's step"
            assert sorted(net.existing(b)) == sorted(net.existing(stale_a)) and \
                len(net.existing(b)) == 5, "down of a stale record removed another's network"
        own = _record(tmp_path / "b", b)
        own.save()
        assert stop_cluster(own, timeout_s=2)[-1] == \
            "the network it made (2 namespaces, 2 links, the bridge)"
        assert net.existing(b) == []
        assert step.wait(timeout=5) is not None
        assert own.network is None  # the record names no network once it is gone
        assert '"network": null' in (tmp_path / "b" / "cluster.json").read_text()
    finally:
        if step is not None and step.poll() is None:
            step.kill()
            step.wait()
        for argv in net.remove_commands(b):
            net.run(argv, check=False)
