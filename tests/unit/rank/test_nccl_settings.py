"""NCCL's settings between nodes from the node's network: what the node offers (a fake sysfs
laid out as the kernel's, the one seam), the measured table, what the grid, site or job set
winning, and the record in meta.json, runs.csv and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.rank.nccl_settings import (
    MAX_SOCKETS,
    SOCKET_SETTINGS,
    SocketMeasurement,
    apply_nccl_settings,
    job_link,
    job_settings,
    link_rate,
    nccl_settings,
    node_link,
    socket_row,
)


def fake_sysfs(root: Path, rdma: tuple[str, ...] = (),
               interfaces: dict[str, bool] | None = None) -> Path:
    """A sysfs tree as the kernel lays it out where it matters here: one entry per RDMA
    device under class/infiniband, and class/net/<if> with a `device` link for an interface
    on hardware (a veth, a bridge or loopback has none)."""
    for name in rdma:
        (root / "class" / "infiniband" / name).mkdir(parents=True)
    for name, physical in (interfaces or {}).items():
        net = root / "class" / "net" / name
        net.mkdir(parents=True)
        if physical:
            (root / "devices" / "pci0000:00" / name).mkdir(parents=True)
            (net / "device").symlink_to(root / "devices" / "pci0000:00" / name)
    return root


SOCKET_LINK = {"transport": "socket", "speed_mbps": 10_000, "virtual": True,
               "interfaces": ["eth0"]}


def test_a_node_with_rdma_devices_offers_infiniband_and_one_without_offers_sockets(tmp_path):
    ib = fake_sysfs(tmp_path / "ib", rdma=("mlx5_0", "mlx5_1"), interfaces={"ib0": True})
    link = node_link("ib0", 200_000, ib)
    assert link == {"transport": "ib", "rdma_devices": ["mlx5_0", "mlx5_1"],
                    "interface": "ib0", "speed_mbps": 200_000, "virtual": False}
    veth = fake_sysfs(tmp_path / "veth", interfaces={"eth0": False})
    assert node_link("eth0", 10_000, veth)["transport"] == "socket"
    assert node_link("eth0", 10_000, veth)["virtual"] is True
    assert node_link(None, None, veth)["virtual"] is None  # one node: no interface asked


def test_the_job_takes_the_slowest_node_and_infiniband_only_where_every_node_has_it():
    a = {"transport": "ib", "speed_mbps": 100_000, "virtual": False, "interface": "ib0"}
    b = {"transport": "socket", "speed_mbps": 25_000, "virtual": False, "interface": "eth0"}
    assert job_link([a, a])["transport"] == "ib"
    both = job_link([a, b])
    assert both["transport"] == "socket" and both["speed_mbps"] == 25_000
    assert job_link([b, {**b, "speed_mbps": None}])["speed_mbps"] is None


def test_sockets_between_nodes_take_the_measured_best_settings():
    rec = nccl_settings(SOCKET_LINK, {}, num_nodes=2, uses_nccl=True)
    assert rec["nccl_settings"] == {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "4"}
    assert "10000 Mb/s" in rec["nccl_settings_reason"]
    assert "8.1-11.3 GB/s" in rec["nccl_settings_reason"]  # what was measured, with it


@pytest.mark.parametrize("link,env,nodes,uses,why", [
    (SOCKET_LINK, {}, 1, True, "one node"),
    (SOCKET_LINK, {}, 2, False, "no NCCL"),
    ({**SOCKET_LINK, "transport": "ib"}, {}, 2, True, "InfiniBand"),
    ({**SOCKET_LINK, "speed_mbps": 1_000}, {}, 2, True, "below every measured link"),
    ({**SOCKET_LINK, "speed_mbps": None}, {}, 2, True, "no interface speed"),
])
def test_nothing_set_where_nothing_was_measured_or_nothing_crosses_sockets(link, env, nodes,
                                                                           uses, why):
    rec = nccl_settings(link, env, nodes, uses)
    assert rec["nccl_settings"] == {} and why in rec["nccl_settings_reason"]


@pytest.mark.parametrize("env", [{"NCCL_NSOCKS_PERTHREAD": "2"},
                                 {"NCCL_SOCKET_NTHREADS": "8"}])
def test_a_socket_variable_the_grid_site_or_job_set_wins_and_the_other_is_not_set(env):
    environ = {**env, "OTHER": "x"}
    rec = apply_nccl_settings(SOCKET_LINK, 2, True, environ)
    assert environ == {**env, "OTHER": "x"}
    assert rec["nccl_settings"] == {} and rec["nccl_settings_kept"] == env
    assert "set by the grid, the site or the job" in rec["nccl_settings_reason"]


@pytest.mark.parametrize("env", [{"NCCL_NET": "Socket"}, {"NCCL_IB_DISABLE": "1"}])
def test_infiniband_turned_off_by_the_environment_is_a_socket_link(env):
    rec = nccl_settings({**SOCKET_LINK, "transport": "ib"}, env, 2, True)
    assert rec["link"]["transport"] == "socket"
    assert rec["nccl_settings"]["NCCL_SOCKET_NTHREADS"] == "4"


def test_the_table_keeps_within_nccls_bounds_and_the_fastest_row_reached_applies():
    for row in SOCKET_SETTINGS:
        assert row.nsocks_per_thread * row.socket_threads <= MAX_SOCKETS
    with pytest.raises(ValueError, match=r"1\.\.16"):
        SocketMeasurement(1, 8, 16, 1.0, 2.0, "too many sockets")
    slow = SocketMeasurement(1_000, 2, 2, 0.1, 0.2, "a slower link")
    table = (slow, *SOCKET_SETTINGS)
    assert socket_row(5_000, table) is slow
    assert socket_row(100_000, table) is SOCKET_SETTINGS[0]
    assert socket_row(500, table) is None and socket_row(None, table) is None


def test_the_links_rate_is_the_physical_interfaces_speed_or_what_was_measured_on_a_veth():
    physical = nccl_settings({**SOCKET_LINK, "virtual": False, "speed_mbps": 25_000}, {}, 2,
                             True)
    assert link_rate(physical)["link_rate_gbs"] == pytest.approx(3.125)
    applied = nccl_settings(SOCKET_LINK, {}, 2, True)
    assert link_rate(applied)["link_rate_gbs"] == SOCKET_SETTINGS[0].busbw_gbs
    kept = nccl_settings(SOCKET_LINK, {"NCCL_SOCKET_NTHREADS": "2"}, 2, True)
    assert link_rate(kept)["link_rate_gbs"] == SOCKET_SETTINGS[0].busbw_defaults_gbs
    ib = nccl_settings({**SOCKET_LINK, "transport": "ib"}, {}, 2, True)
    assert link_rate(ib)["link_rate_gbs"] is None


def test_meta_runs_csv_and_the_report_record_what_was_set_and_why():
    from toolkit.report.tables import all_results
    from toolkit.results.runs import placement

    rec = {**nccl_settings(SOCKET_LINK, {}, 2, True), "link_rate_gbs": 8.1}
    choice = {"grad_reduce": "bf16", "chosen_by": "toolkit", "transfer_s": 0.081,
              "backward_s": 0.022}
    meta = job_settings([{"rank": 0, "nccl_settings": rec, "grad_reduce_choice": choice},
                         {"rank": 1, "nccl_settings": rec}])
    assert meta["nccl_settings"] == {"NCCL_NSOCKS_PERTHREAD": "4", "NCCL_SOCKET_NTHREADS": "4"}
    assert meta["nccl_settings_reason"].startswith("sockets between nodes")
    assert meta["grad_reduce_choice"] == choice and "nccl_settings_ranks_differ" not in meta
    row = placement(meta)
    assert row["nccl_settings"] == "NCCL_NSOCKS_PERTHREAD=4 NCCL_SOCKET_NTHREADS=4"
    assert row["grad_reduce_chosen"] == "bf16 (link 81 ms, backward 22 ms)"
    run = {"case_id": "c", "repeat": 0, "status": "ok", "framework": "torch",
           "model": "bert_base", "precision": "amp_bf16", "variant": "", "num_nodes": 2,
           "gpus_per_node": 2, "batch_size_per_device": 32, "dp": 4,
           "throughput_sps": 100.0, **row}
    table = all_results([run]).tables[0]
    assert table.header[-2:] == ["nccl_settings", "grad_reduce_chosen"]
    assert table.rows[0][-1] == "bf16 (link 81 ms, backward 22 ms)"
    assert "nccl_settings: what the toolkit set" in table.note
    assert "grad_reduce_chosen: the gradient reduction" in table.note
    # a case whose reduction the case decided names no choice; nothing set names no settings
    assert placement({"nccl_settings": {}, "grad_reduce_choice": {"chosen_by": "case"}}) == {}
    other = {**rec, "nccl_settings": {}}
    assert job_settings([{"rank": 0, "nccl_settings": rec},
                         {"rank": 1, "nccl_settings": other}])["nccl_settings_ranks_differ"] \
        == [1]


def test_every_rank_holds_the_same_link_rate_the_slowest(monkeypatch):
    """The exchange between ranks is the one seam: a fake allgather that adds a second rank."""
    from toolkit.rank import nccl_settings as ns

    monkeypatch.setattr(ns, "node_link", lambda interface, speed: {
        "transport": "socket", "speed_mbps": 25_000, "virtual": False, "interface": "eth0"})
    for other, agreed in ((1.0, 1.0), (None, None), (3.125, 3.125)):
        def allgather(mine, other=other):
            return [mine, other if isinstance(mine, float | None) else mine]

        rec = ns.job_nccl_settings(allgather, "eth0", 2, True, {})
        assert rec["link_rate_gbs"] == agreed
        assert ("differed" in rec["link_rate_source"]) == (agreed != 3.125)
