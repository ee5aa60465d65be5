"""Which network interface a rank's communication is told to use (pure choice; the kernel's
route is asked in the integration tests on namespaced nodes)."""

from __future__ import annotations

from pathlib import Path

from toolkit.rank.network import NETWORK_VARIABLES, apply_network_environment, network_environment


def test_a_multi_node_rank_uses_its_nodes_interface_for_nccl_gloo_and_open_mpi() -> None:
    rec = network_environment(4, {}, "eth0")
    assert rec["interface"] == "eth0" and rec["reason"] is None
    assert rec["env_applied"] == {k: "eth0" for k in NETWORK_VARIABLES}
    assert set(rec["env_applied"]) == {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                       "OMPI_MCA_btl_tcp_if_include"}


def test_what_the_grid_or_site_set_is_kept() -> None:
    rec = network_environment(2, {"NCCL_SOCKET_IFNAME": "ib0"}, "eth0")
    assert rec["env_kept"] == {"NCCL_SOCKET_IFNAME": "ib0"}
    assert "NCCL_SOCKET_IFNAME" not in rec["env_applied"]
    assert rec["env_applied"]["GLOO_SOCKET_IFNAME"] == "eth0"


def test_loopback_is_never_set_and_one_node_sets_nothing() -> None:
    rec = network_environment(2, {}, "lo")
    assert rec["env_applied"] == {} and "loopback is never set" in rec["reason"]
    assert network_environment(1, {}, "eth0")["env_applied"] == {}
    assert network_environment(2, {}, None)["env_applied"] == {}


def test_applied_to_the_environment_given() -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "mine"}
    rec = apply_network_environment(2, env)
    # 127.0.0.1 is reached through loopback: nothing set, the user's variable untouched
    assert rec["interface"] == "lo" and rec["env_applied"] == {}
    assert env == {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "mine"}
    assert rec["rank0_address"] == "127.0.0.1"
    single = {"MASTER_ADDR": "127.0.0.1"}
    assert apply_network_environment(1, single)["rank0_address"] is None and len(single) == 1


def test_interface_speed_is_what_the_driver_reports_and_none_where_it_reports_none() -> None:
    from toolkit.rank.network import interface_speed_mbps

    assert interface_speed_mbps(None) is None
    assert interface_speed_mbps("lo") is None  # loopback has no line rate
    assert interface_speed_mbps("no-such-if0") is None
    # where sysfs (of this namespace) gives a speed, ethtool's ioctl gives the same
    for path in Path("/sys/class/net").iterdir():
        try:
            speed = int((path / "speed").read_text())
        except (OSError, ValueError):
            continue
        assert interface_speed_mbps(path.name) == (speed if speed > 0 else None), path.name
