"""A cluster's shape on one machine: four local Slurm nodes, each in a network namespace of its
own (own address on a bridge, own hostname), so what one node sends another crosses a link that
tc throttles for real. On it: a grid across the four nodes through submit and collect (srun with
PMIx and mpirun), the rank's network interface taken from its node, a throttled node found by the
preflight and kept out of the next submission, a throttled link named as a link and no node, and
`down` removing every namespace, link and rule it made and nothing else."""

from __future__ import annotations

import csv
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import TINY, client_env, skip_without_local_slurm
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import ClusterError, LocalCluster, free_port_base, start_cluster
from toolkit.localslurm import network as net

NODES = 4
#: Far below what a veth between two namespaces carries here (about 1 GB/s), far above what
#: keeps the throttled preflight's collectives short.
RATE = "100mbit"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    skip_without_local_slurm()
    refused = net.namespaces_work("tbtest-probe")
    if refused is not None:
        pytest.skip(f"no network namespaces here: {refused}")
    c = start_cluster(tmp_path_factory.mktemp("shape"), nodes=NODES, network="namespaces",
                      cpus_per_node=2, port_base=free_port_base(NODES, start=19817))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
def env(cluster: LocalCluster) -> dict[str, str]:
    return client_env(cluster)


def _only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def test_every_node_has_its_own_address_and_hostname(cluster: LocalCluster,
                                                     env: dict[str, str]) -> None:
    assert cluster.network is not None
    out = subprocess.run(["srun", f"-N{NODES}", "-n", str(NODES), "sh", "-c",
                          'echo "$(hostname) $SLURMD_NODENAME $(hostname -I)"'],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    seen = {tuple(line.split()) for line in out.splitlines()}
    assert seen == {(n.node, n.node, n.address) for n in cluster.network.nodes}
    status = _tb(env, "localslurm", "status", "--state-dir", str(cluster.state_dir),
                 cwd=cluster.state_dir)
    assert status.returncode == 0, status.stdout + status.stderr
    for n in cluster.network.nodes:
        assert f"{n.address}" in status.stdout and n.node in status.stdout


def test_a_grid_runs_across_every_node_with_srun_and_mpirun(env: dict[str, str],
                                                            tmp_path: Path) -> None:
    grid = tmp_path / "nodes.yaml"
    grid.write_text("name: nodes\nrepeats: 1\nbase:" + TINY + "  slurm: {time_min: 5}\n"
                    "sweep:\n  num_nodes: [1, 4]\n  slurm.launcher: [srun, mpirun]\n")
    res = tmp_path / "res"
    p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor", "slurm",
            "--wait", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = list(csv.DictReader((res / "runs.csv").open()))
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs), runs
    for case in (res / "cases").glob("*-4n1g-*"):
        hosts = set()
        for rank in sorted((case / "r0").glob("rank*.jsonl")):
            records = [json.loads(x) for x in rank.read_text().splitlines()]
            start = next(r for r in records if r["type"] == "start")
            summary = next(r for r in records if r["type"] == "summary")
            hosts.add(start["host"])
            # the node's own interface, never loopback, for NCCL, Gloo and Open MPI
            assert summary["network"]["interface"] == "eth0", summary["network"]
            assert summary["network"]["env_applied"] == {
                "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
                "OMPI_MCA_btl_tcp_if_include": "eth0"}
        assert hosts == {f"node{k}" for k in range(1, NODES + 1)}, case.name
        meta = json.loads((case / "r0" / "meta.json").read_text())
        assert meta["network"]["interface"] == "eth0"
    # four host names, one machine of two CPUs: every 4-node figure is flagged, never plain
    four = [r for r in runs if r["num_nodes"] == "4"]
    assert all("4 ranks on node1, node2, node3, node4" in r["oversubscribed"] for r in four), four
    report = (res / "report.md").read_text()
    assert "| 4 | 1 | 4 |" in report and "† oversubscribed" in report


def test_a_throttled_node_is_found_and_kept_out_of_the_next_submission(
        cluster: LocalCluster, env: dict[str, str], tmp_path: Path) -> None:
    cluster.set_throttles([net.Throttle(("node3",), RATE)])
    try:
        res = tmp_path / "res"
        p = _tb(env, "preflight", "--executor", "slurm", "--nodes", str(NODES), "--device",
                "cpu", "--results", str(res), "--time-min", "10", cwd=tmp_path, timeout=900)
    finally:
        cluster.set_throttles([])
    pf = _only(list((res / "preflight").iterdir()))
    verdict = json.loads((pf / "verdict.json").read_text())
    # every pair of the four nodes was tested, node3's three through the throttle
    pairs = {f["group"]: f for f in verdict["figures"]
             if f["scope"] == "pair" and f["metric"] == "all_reduce"}
    assert sorted(verdict["links_tested"]) == sorted(pairs) and len(pairs) == 6
    slow = {g for g in pairs if "node3" in g}
    assert len(slow) == 3 and max(pairs[g]["value"] for g in slow) < 0.2 * min(
        pairs[g]["value"] for g in pairs if g not in slow), pairs
    nodes = {n["node"]: n for n in verdict["nodes"]}
    if nodes["node3"]["verdict"] == "inconclusive":
        # fewer than two of its pairs measured while other processes left this machine's CPUs
        assert "node3" not in verdict["exclude"], verdict
        assert sum(pairs[g]["verdict"] == "slow" for g in slow) < 2, pairs
        return
    assert p.returncode == 6, p.stdout + p.stderr
    assert nodes["node3"]["verdict"] == "slow", nodes
    assert "every all-reduce with node3 is slow" in nodes["node3"]["reasons"]
    # only that node for its network, and its slow pairs are its own, not links (another node
    # may still be named for a compute figure when something else loads this machine's CPUs)
    assert "node3" in verdict["exclude"], verdict["nodes"]
    assert [n for n, v in nodes.items() if "all-reduce" in (v["reasons"] or "")] == ["node3"]
    assert not any("node3" in link for link in verdict["links"]), verdict["links"]
    assert "node3" in (pf / "exclude.txt").read_text().strip().split(",")

    # a grid that skips bad nodes asks Slurm for its next runs without node3
    grid = tmp_path / "next.yaml"
    grid.write_text("name: next\nrepeats: 1\nbase:" + TINY + "  num_nodes: 2\n"
                    "  preflight: {enabled: true, on_fail: skip_node}\n")
    p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor", "slurm",
            "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"--exclude=(\S+,)?node3\b", p.stdout), p.stdout


def test_a_throttled_link_is_named_as_the_link_and_no_node(cluster: LocalCluster,
                                                           env: dict[str, str],
                                                           tmp_path: Path) -> None:
    cluster.set_throttles([net.Throttle(("node1", "node2"), RATE)])
    try:
        p = _tb(env, "preflight", "--executor", "slurm", "--nodes", str(NODES), "--device",
                "cpu", "--results", str(tmp_path / "res"), "--time-min", "10", cwd=tmp_path,
                timeout=900)
    finally:
        cluster.set_throttles([])
    pf = _only(list((tmp_path / "res" / "preflight").iterdir()))
    verdict = json.loads((pf / "verdict.json").read_text())
    pairs = {f["group"]: f for f in verdict["figures"]
             if f["scope"] == "pair" and f["metric"] == "all_reduce"}
    assert len(pairs) == 6, pairs  # every pair, the throttled link among them
    assert pairs["node1+node2"]["value"] < 0.2 * min(
        f["value"] for g, f in pairs.items() if g != "node1+node2")
    assert not any("every all-reduce" in (n["reasons"] or "") for n in verdict["nodes"])
    if pairs["node1+node2"]["verdict"] == "inconclusive":
        # every measurement of it taken while other processes crowded this machine
        assert p.returncode == 7, p.stdout + p.stderr
        return
    # the link is named (a healthy pair of CPU "nodes" may fall below 85 % of its peers when
    # something else loads the machine, never to a tenth of them as the throttled one does)
    links = {x.split(":")[0]: x for x in verdict["links"]}
    assert "node1+node2" in links, verdict["links"]
    assert pairs["node1+node2"]["measurements"] >= 2  # measured again before it was named
    assert "node1+node2" in p.stdout and p.returncode == 6, p.stdout + p.stderr


def test_down_removes_what_up_made_and_nothing_else() -> None:
    skip_without_local_slurm()
    if net.namespaces_work("tbtest-probe") is not None:
        pytest.skip("no network namespaces here")
    # a namespace and a bridge of someone else's, named like ours
    theirs_ns, theirs_link = "tb29817-node9", "tb29817x"
    net.run(["ip", "netns", "add", theirs_ns])
    net.run(["ip", "link", "add", theirs_link, "type", "bridge"])
    try:
        state = Path(tempfile.mkdtemp(prefix="tbdown-"))  # short: slurmd's socket paths
        c = start_cluster(state, nodes=2, network="namespaces", cpus_per_node=2,
                          port_base=free_port_base(2, start=29817),
                          throttles=["node2=50mbit"])
        assert c.network is not None and set(net.existing(c.network)) == {
            c.network.bridge, *(n.host_interface for n in c.network.nodes),
            *(n.namespace for n in c.network.nodes)}
        down = subprocess.run([sys.executable, "-m", "toolkit.localslurm", "down",
                               "--state-dir", str(state)], capture_output=True, text=True,
                              timeout=120, check=False)
        assert down.returncode == 0, down.stdout + down.stderr
        assert net.existing(c.network) == []
        assert theirs_ns in net.run(["ip", "netns", "list"]).stdout
        assert net.run(["ip", "link", "show", theirs_link], check=False).returncode == 0
        shutil.rmtree(state)
    finally:
        net.run(["ip", "netns", "del", theirs_ns], check=False)
        net.run(["ip", "link", "del", theirs_link], check=False)


def test_loopback_nodes_share_this_machines_address_and_name() -> None:
    skip_without_local_slurm()
    state = Path(tempfile.mkdtemp(prefix="tbloop-"))
    c = start_cluster(state, nodes=2, network="loopback", cpus_per_node=2,
                      port_base=free_port_base(2, start=30817))
    try:
        assert c.network is None
        out = subprocess.run(["srun", "-N2", "-n2", "hostname"], env=client_env(c),
                             capture_output=True, text=True, timeout=60, check=True).stdout
        assert set(out.split()) == {socket.gethostname()}
        with pytest.raises(ClusterError, match=r"127\.0\.0\.1"):  # no link to throttle there
            start_cluster(state, nodes=2, network="auto", cpus_per_node=2,
                          port_base=c.port_base, throttles=["node2=1mbit"])
    finally:
        c.stop()
        shutil.rmtree(state)
