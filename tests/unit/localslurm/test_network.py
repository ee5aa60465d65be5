"""The local cluster's network plan, throttles and commands (pure builders; no namespace made)."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest

from toolkit.localslurm import network as net
from toolkit.localslurm.config import ClusterError, render_slurm_conf

DATA = Path(__file__).resolve().parents[2] / "data" / "net"
NODES = ["node1", "node2", "node3", "node4"]


def test_tc_rates_read_as_tc_writes_them() -> None:
    assert net.rate_bits_per_s("20mbit") == 20e6
    assert net.rate_bits_per_s("1Gbit") == 1e9
    assert net.rate_bits_per_s("500kbps") == 500e3 * 8
    assert net.rate_bits_per_s("1mibit") == 2**20
    assert net.rate_bits_per_s("2.5mbit") == 2.5e6


@pytest.mark.parametrize("rate", ["20", "fast", "20 mbit", "-1mbit", "0mbit", "20mb", "1e9bit",
                                  "20mbit; reboot"])
def test_a_rate_tc_would_not_read_is_refused_with_the_form_expected(rate: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        net.rate_bits_per_s(rate)


def test_a_node_throttle_and_a_link_throttle() -> None:
    assert net.parse_throttle("node3=20mbit", NODES) == net.Throttle(("node3",), "20mbit")
    link = net.parse_throttle("node1-node2=50Mbit", NODES)
    assert link == net.Throttle(("node1", "node2"), "50mbit")
    assert link.label == "node1-node2"


@pytest.mark.parametrize(("text", "says"), [
    ("node3", "expected NODE=RATE"),
    ("=20mbit", "expected NODE=RATE"),
    ("node9=20mbit", "no node node9 in this cluster"),
    ("node1-node1=20mbit", "two different nodes"),
    ("node1-node2-node3=1mbit", "at most two nodes"),
    ("node1=quick", "expected a number and a tc unit"),
])
def test_a_bad_throttle_names_what_was_expected(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        net.parse_throttle(text, NODES)


def test_the_plan_gives_each_node_its_own_namespace_address_and_short_interface_names() -> None:
    plan = net.plan_network(17817, [f"node{k}" for k in range(1, 17)], "10.217.3.0/24")
    assert plan.bridge == "tb17817br" and plan.gateway == "10.217.3.254"
    assert [n.address for n in plan.nodes[:2]] == ["10.217.3.1", "10.217.3.2"]
    assert plan.node("node16").namespace == "tb17817-node16"
    assert len({n.address for n in plan.nodes}) == 16
    names = [plan.bridge, *(n.host_interface for n in plan.nodes)]
    assert len(set(names)) == len(names)
    assert max(len(x) for x in names) <= 15  # the kernel's IFNAMSIZ - 1
    assert plan.gateway not in {n.address for n in plan.nodes}


def test_too_many_nodes_for_the_subnet_is_an_error() -> None:
    with pytest.raises(ClusterError, match="do not fit"):
        net.plan_network(17817, [f"node{k}" for k in range(1, 300)], "10.217.3.0/24")


def test_the_subnet_is_one_no_address_or_route_of_the_machine_touches() -> None:
    used = net.parse_ip_networks((DATA / "ip-4-o-addr-show.txt").read_text()
                                 + (DATA / "ip-4-route-show.txt").read_text())
    assert "10.217.0.0/24" in used and "192.0.2.0/24" in used and "127.0.0.0/8" in used
    subnet = net.free_subnet(used)
    assert subnet == "10.217.1.0/24"
    assert not any(ipaddress.ip_network(subnet).overlaps(ipaddress.ip_network(u)) for u in used)
    with pytest.raises(ClusterError, match="no free /24"):
        net.free_subnet(["10.0.0.0/8"])


def test_a_node_rate_shapes_what_it_sends_and_receives_and_a_link_only_that_pair() -> None:
    plan = net.plan_network(17817, NODES, "10.217.3.0/24",
                            [net.Throttle(("node3",), "20mbit"),
                             net.Throttle(("node1", "node2"), "50mbit")])
    cmds = [" ".join(c) for c in net.throttle_commands(plan)]
    # node3: its own rate as the default class inside, and on its bridge port
    assert any("exec tb17817-node3 tc class add dev eth0" in c and "rate 20mbit" in c
               for c in cmds)
    assert "tc qdisc add dev tb17817n3 root handle 1: htb default 2" in cmds
    # node1 and node2: unmatched traffic unshaped (default 0), the peer matched at 50mbit
    assert "ip netns exec tb17817-node1 tc qdisc add dev eth0 root handle 1: htb default 0" in cmds
    assert any("exec tb17817-node1 tc filter" in c and "dst 10.217.3.2/32" in c for c in cmds)
    assert any("exec tb17817-node2 tc filter" in c and "dst 10.217.3.1/32" in c for c in cmds)
    assert not any("node4" in c or "tb17817n4" in c for c in cmds)
    assert not any("dev tb17817n1" in c for c in cmds)  # a link shapes no bridge port


def test_a_link_from_a_throttled_node_takes_the_slower_rate() -> None:
    plan = net.plan_network(17817, NODES, "10.217.3.0/24",
                            [net.Throttle(("node1",), "10mbit"),
                             net.Throttle(("node1", "node2"), "50mbit")])
    node1 = [" ".join(c) for c in net.throttle_commands(plan) if "tb17817-node1" in " ".join(c)]
    assert any("classid 1:10" in c and "rate 5000000bit ceil 10mbit" in c for c in node1)
    assert plan.limits("node1") == ["10mbit", "50mbit to node2"]
    assert plan.limits("node4") == []


def _classes(cmds: list[list[str]], namespace: str) -> dict[str, tuple[str, float, float]]:
    """classid -> (parent, rate, ceil) of the classes made inside `namespace`."""
    out = {}
    for c in cmds:
        if c[:4] == ["ip", "netns", "exec", namespace] and c[5:7] == ["class", "add"]:
            out[c[c.index("classid") + 1]] = (c[c.index("parent") + 1],
                                              net.rate_bits_per_s(c[c.index("rate") + 1]),
                                              net.rate_bits_per_s(c[c.index("ceil") + 1]))
    return out


def test_a_nodes_link_classes_sit_under_its_rate_so_together_they_keep_to_it() -> None:
    # as siblings of the node's class, two 5mbit links would let node1 send 8 + 5 + 5
    plan = net.plan_network(17817, NODES, "10.217.3.0/24",
                            [net.Throttle(("node1",), "8mbit"),
                             net.Throttle(("node1", "node2"), "5mbit"),
                             net.Throttle(("node1", "node3"), "5mbit")])
    classes = _classes(net.throttle_commands(plan), "tb17817-node1")
    assert classes["1:1"] == ("1:", 8e6, 8e6)
    children = {k: v for k, v in classes.items() if k != "1:1"}
    assert set(children) == {"1:2", "1:10", "1:11"}
    assert all(parent == "1:1" for parent, _, _ in children.values())
    assert sum(rate for _, rate, _ in children.values()) <= 8e6  # assured rates share the node's
    assert children["1:10"][2] == children["1:11"][2] == 5e6 and children["1:2"][2] == 8e6


@pytest.mark.parametrize("throttles", [["node1=20mbit", "node1=8mbit"],
                                       ["node1-node2=5mbit", "node2-node1=50mbit"],
                                       ["node1-node2=5mbit", "node1-node2=5mbit"]])
def test_a_node_or_link_given_two_rates_is_refused(throttles: list[str]) -> None:
    with pytest.raises(ValueError, match="already limited by"):
        net.parse_throttles(throttles, NODES)
    assert len(net.parse_throttles(["node1=20mbit", "node1-node2=5mbit"], NODES)) == 2


@pytest.mark.parametrize("rate", ["0.0000001bit", "7bit", "0.5bps", "2tbit", "1tibit"])
def test_a_rate_outside_what_tc_shapes_is_refused(rate: str) -> None:
    with pytest.raises(ValueError, match=r"8bit\.\.1tbit"):
        net.parse_throttle(f"node1={rate}", NODES)
    assert net.rate_bits_per_s("8bit") == 8 and net.rate_bits_per_s("1tbit") == 1e12


def test_every_created_piece_is_removed_and_nothing_else() -> None:
    plan = net.plan_network(17817, NODES[:2], "10.217.3.0/24")
    made = net.create_commands(plan)
    removed = net.remove_commands(plan)
    created_names = {c[3] for c in made if c[:3] == ["ip", "netns", "add"]} | \
        {c[3] for c in made if c[:3] == ["ip", "link", "add"]}
    assert {c[-1] for c in removed} == created_names
    assert removed[-1] == ["ip", "link", "del", "tb17817br"]  # the bridge after its ports


def test_the_record_round_trips() -> None:
    plan = net.plan_network(17817, NODES, "10.217.3.0/24", [net.Throttle(("node2",), "1mbit")])
    assert net.Network.from_json(plan.to_json()) == plan


def test_a_node_runs_under_its_name_and_hosts_file_without_shell_text() -> None:
    plan = net.plan_network(17817, NODES, "10.217.3.0/24")
    argv = net.in_namespace(plan.node("node2"), Path("/s/hosts"), ["slurmd", "-N", "node2"],
                            Path("/s/resolv.conf"))
    assert argv[:2] == ["nsenter", "--net=/run/netns/tb17817-node2"]
    script = argv[argv.index("-c") + 1]
    # name and paths are arguments
    assert "node2" not in script and "/s/hosts" not in script and "/s/resolv" not in script
    assert argv[argv.index("-c") + 2:argv.index("-c") + 5] == ["node2", "/s/hosts",
                                                               "/s/resolv.conf"]
    assert argv[-3:] == ["slurmd", "-N", "node2"]
    hosts = net.hosts_file(plan, "vm")
    assert "10.217.3.254 vm" in hosts and "10.217.3.4 node4" in hosts


def test_slurm_conf_gives_each_node_its_address_and_the_controller_the_bridge() -> None:
    conf = render_slurm_conf(Path("/s"), "vm", 2, 2, 17817,
                             node_addrs=["10.217.3.1", "10.217.3.2"],
                             controller_addr="10.217.3.254")
    assert "SlurmctldHost=vm(10.217.3.254)" in conf
    assert "NodeName=node2 NodeHostname=node2 NodeAddr=10.217.3.2 Port=17819" in conf
    loop = render_slurm_conf(Path("/s"), "vm", 2, 2, 17817)
    assert "NodeName=node2 NodeHostname=vm NodeAddr=127.0.0.1 Port=17819" in loop
    with pytest.raises(ValueError, match="2 node addresses for 3 nodes"):
        render_slurm_conf(Path("/s"), "vm", 3, 2, node_addrs=["a", "b"])


def test_where_the_kernel_refuses_namespaces_auto_falls_back_and_namespaces_is_an_error() -> None:
    assert net.use_namespaces("auto", None, throttled=False)
    assert not net.use_namespaces("auto", "ip netns add failed: Operation not permitted", False)
    assert not net.use_namespaces("loopback", None, throttled=False)
    with pytest.raises(ClusterError, match="Operation not permitted"):
        net.use_namespaces("namespaces", "ip netns add failed: Operation not permitted", False)
    with pytest.raises(ClusterError, match="own network"):  # a throttle needs a link
        net.use_namespaces("auto", "refused", throttled=True)


def test_clearing_removes_the_root_qdisc_of_every_interface_a_throttle_shapes() -> None:
    plan = net.plan_network(17817, NODES, "10.217.3.0/24",
                            [net.Throttle(("node3",), "20mbit"),
                             net.Throttle(("node1", "node2"), "50mbit")])
    def shaped(cmds: list[list[str]]) -> set[tuple[str, str]]:
        return {(c[3] if c[:3] == ["ip", "netns", "exec"] else "host", c[c.index("dev") + 1])
                for c in cmds if "root" in c}
    assert shaped(net.throttle_commands(plan)) <= shaped(net.clear_throttle_commands(plan))
    assert all("del" in c for c in net.clear_throttle_commands(plan))


def test_the_node_script_binds_both_files_then_runs_the_command_as_the_node(
        tmp_path: Path) -> None:
    """The shell part of `in_namespace` run for real with stand-ins for mount and hostname: the
    hosts file and the resolv.conf are bound (the latter only where both exist), the hostname
    set, and the command gets its own arguments only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    for tool in ("mount", "hostname"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        (bin_dir / tool).chmod(0o755)
    plan = net.plan_network(17817, NODES, "10.217.3.0/24")
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    hosts.write_text("127.0.0.1 localhost\n")
    resolv.write_text(net.RESOLV_CONF)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    for given, bound in ((resolv, True), (tmp_path / "absent", False), (None, False)):
        log.unlink(missing_ok=True)
        argv = net.in_namespace(plan.node("node2"), hosts, ["echo", "ran", "a b"], given)
        script_at = argv.index("sh")
        done = subprocess.run(argv[script_at:], env=env, capture_output=True, text=True,
                              check=True)
        assert done.stdout == "ran a b\n"
        calls = log.read_text().splitlines()
        assert calls[0] == f"mount --bind {hosts} /etc/hosts" and calls[-1] == "hostname node2"
        assert (f"mount --bind {resolv} /etc/resolv.conf" in calls) == (
            bound and Path("/etc/resolv.conf").exists()), calls
    assert "nameserver" not in net.RESOLV_CONF


def test_down_counts_what_it_removed_by_kind() -> None:
    from toolkit.localslurm.daemons import network_words

    plan = net.plan_network(17817, NODES[:2], "10.217.3.0/24")
    every = [*(n.host_interface for n in plan.nodes), *(n.namespace for n in plan.nodes),
             plan.bridge]
    assert network_words(plan, every) == "2 namespaces, 2 links, the bridge"
    # another cluster's bridge on the same port base stays: not counted
    assert network_words(plan, [plan.nodes[0].namespace, plan.nodes[0].host_interface]) == \
        "1 namespace, 1 link"
