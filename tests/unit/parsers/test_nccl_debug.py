"""NCCL's report of its transports, on real recordings (tests/data/nccl_debug/SOURCE.md), and
the rank's side: where the report goes, what a run records, what one set by the grid leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsers import logtext
from parsers.nccl_debug import read_transports, transports
from toolkit.rank.nccl_report import job_transports, report_environment, transports_record
from toolkit.results.runs import placement

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl_debug"


@pytest.mark.parametrize("name", ["two_hosts.rank0.log", "two_hosts.rank1.log"])
def test_two_hosts_connect_over_the_socket_transport(name):
    found = read_transports(DATA / name, ["host0", "host1"])
    assert found.to_dict() == {"between_nodes": ["NET/Socket"], "within_node": [],
                               "networks": ["Socket"]}


def test_the_same_connections_on_one_host_are_within_a_node():
    found = read_transports(DATA / "two_hosts.rank0.log", ["vm", "vm"])
    assert found.within_node == {"NET/Socket"} and not found.between_nodes


def test_within_node_transports_and_lines_that_are_not_ncclls():
    text = ("n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
            "n1:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/direct pointer\n"
            "n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0\n"
            "n1:1:1 [2] NCCL INFO Channel 00 : 2[2] -> 3[3] via SHM/direct/direct\n"
            "Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0 (the program's own print)\n"
            "n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 9[0] via NET/Socket/0\n")
    found = transports(text, ["a", "a", "b", "b"])
    assert found.within_node == {"P2P/CUMEM", "P2P/direct", "SHM"}
    assert found.between_nodes == {"NET/IB"}


def test_a_binary_file_is_no_report(tmp_path):
    bad = tmp_path / "nccl.rank000.log"
    bad.write_bytes(b"\0\1\2" * 1000)
    with pytest.raises(logtext.ReadError):
        read_transports(bad, ["a"])
    record = transports_record({"file": bad.name, "reason": None}, tmp_path, ["a"])
    assert record["reason"].startswith("nccl.rank000.log: ") and "between_nodes" not in record


def test_a_rank_asks_nccl_for_its_report_unless_someone_chose(tmp_path):
    env: dict[str, str] = {}
    setting = report_environment(env, tmp_path, 3, uses_nccl=True)
    assert setting == {"file": "nccl.rank003.log", "reason": None}
    assert env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.rank003.log")}
    mine = {"NCCL_DEBUG": "WARN"}
    kept = report_environment(mine, tmp_path, 0, uses_nccl=True)
    assert mine == {"NCCL_DEBUG": "WARN"} and kept["file"] is None
    assert "NCCL_DEBUG set by the grid" in kept["reason"]
    none: dict[str, str] = {}
    assert report_environment(none, tmp_path, 0, uses_nccl=False)["file"] is None and not none
    odd = tmp_path / "100%"
    assert report_environment({}, odd, 0, uses_nccl=True)["file"] is None


def test_the_run_records_every_ranks_transports(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"nccl.rank00{rank}.log").write_bytes(
            (DATA / f"two_hosts.rank{rank}.log").read_bytes())
    ranks = [{"rank": r, "nccl_transports": transports_record({"file": f"nccl.rank00{r}.log",
                                                    "reason": None}, tmp_path, ["n1", "n2"])}
             for r in (0, 1)]
    assert job_transports(ranks) == {"between_nodes": ["NET/Socket"], "within_node": [],
                                     "ranks_reporting": 2}
    missing = transports_record({"file": "nccl.rank007.log", "reason": None}, tmp_path, ["a"])
    assert missing["reason"].startswith("NCCL wrote no report")
    assert job_transports([{"nccl_transports": missing}])["reason"].startswith(
        "NCCL wrote no report")


def test_runs_csv_names_the_transports_between_nodes_where_ranks_reported():
    between = {"between_nodes": ["NET/Socket"], "within_node": ["P2P/CUMEM"],
               "ranks_reporting": 4}
    assert placement({"nccl_transports": between}) == {"nccl_between_nodes": "NET/Socket"}
    # a "multi-node" run whose connections all stayed within a node says so
    inside = {"between_nodes": [], "within_node": ["P2P/CUMEM"], "ranks_reporting": 4}
    assert placement({"nccl_transports": inside}) == {"nccl_between_nodes": "none"}
    unknown = {"between_nodes": [], "within_node": [], "ranks_reporting": 0,
               "reason": "no NCCL: one rank, or ranks without GPUs"}
    assert placement({"nccl_transports": unknown}) == {}
