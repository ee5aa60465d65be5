"""Runs whose ranks shared their CPUs: overlapping spans on one host, and more ranks than CPUs.
The spans are those the rank files give (`toolkit.results.runs.rank_spans`); the real recorded
quickstart runs (tests/data/results_quickstart, run one after another) are not flagged."""

from __future__ import annotations

import shutil
from pathlib import Path

from toolkit.analysis.sharing import RankSpan, crowded_hosts, oversubscribed, spans_of
from toolkit.results.scan import collect_runs

QUICKSTART = Path(__file__).resolve().parents[2] / "data" / "results_quickstart"
BOTH = frozenset({0, 1})


def test_runs_at_the_same_time_on_the_same_cpus_are_both_flagged() -> None:
    found = oversubscribed({
        "a r0": [RankSpan("vm", 100.0, 130.0, BOTH, 2)],
        "a r1": [RankSpan("vm", 110.0, 140.0, BOTH, 2)],
        "b r0": [RankSpan("vm", 140.0, 150.0, BOTH, 2)],   # after both: its own CPUs
        "c r0": [RankSpan("other", 100.0, 150.0, BOTH, 2)],  # another host
    })
    assert found == {
        "a r0": ["ran at the same time as a r1 on vm (CPUs 0-1, 20.0 s overlap)"],
        "a r1": ["ran at the same time as a r0 on vm (CPUs 0-1, 20.0 s overlap)"]}


def test_disjoint_cpus_do_not_share_and_unknown_cpus_are_the_whole_host() -> None:
    assert oversubscribed({"a r0": [RankSpan("vm", 0.0, 10.0, frozenset({0}), 2)],
                           "b r0": [RankSpan("vm", 0.0, 10.0, frozenset({1}), 2)]}) == {}
    # an unbound rank (no affinity recorded) may run on any CPU of its host
    found = oversubscribed({"a r0": [RankSpan("vm", 0.0, 10.0, frozenset({1}), 2)],
                            "b r0": [RankSpan("vm", 5.0, 10.0, None, 2)]})
    assert found["b r0"] == ["ran at the same time as a r0 on vm (CPUs 1, 5.0 s overlap)"]


def test_one_run_starting_as_another_exits_is_not_an_overlap() -> None:
    assert oversubscribed({"a r0": [RankSpan("vm", 0.0, 10.0, BOTH, 2)],
                           "a r1": [RankSpan("vm", 9.8, 20.0, BOTH, 2)]}) == {}


def test_more_ranks_than_cpus_on_a_host() -> None:
    four = [RankSpan("vm", 0.0, 10.0, BOTH, 2) for _ in range(4)]
    assert crowded_hosts(four) == ["4 ranks on vm share 2 CPU(s) (0-1)"]
    assert oversubscribed({"a r0": four}) == {"a r0": ["4 ranks on vm share 2 CPU(s) (0-1)"]}
    # two ranks on two CPUs, or on two hosts: each has a CPU
    assert crowded_hosts(four[:2]) == []
    assert crowded_hosts([RankSpan("n1", 0.0, 1.0, frozenset({0}), 1),
                          RankSpan("n2", 0.0, 1.0, frozenset({0}), 1)]) == []
    # CPUs not recorded: the host's count decides
    assert crowded_hosts([RankSpan("vm", 0.0, 1.0, None, 2)] * 3) == [
        "3 ranks on vm share 2 CPU(s) (0-1)"]


def test_spans_of_plain_records_skip_the_incomplete() -> None:
    assert spans_of([{"host": "vm", "start_s": 1.0, "end_s": 2.0, "cpus": [0, 1],
                      "host_cpus": 2},
                     {"host": "vm", "start_s": 3.0, "end_s": 2.0},
                     {"host": None, "start_s": 1.0, "end_s": 2.0}]) == [
        RankSpan("vm", 1.0, 2.0, BOTH, 2)]


def test_real_runs_one_after_another_are_not_flagged(tmp_path: Path) -> None:
    rows, _ = collect_runs(QUICKSTART)
    assert len(rows) == 4
    for row in rows:
        # start and end of every rank from its own file; these runs predate the CPU record
        assert len(row.spans) == row.num_nodes * row.gpus_per_node
        assert all(s["host"] == "vm" and s["end_s"] > s["start_s"] and s["cpus"] is None
                   for s in row.spans)
        assert row.extra["oversubscribed"] == ""
    # the same runs twice in one tree (a copy of a case under another id) ran at the same time
    # as themselves: every run is flagged against its copy
    root = tmp_path / "res"
    shutil.copytree(QUICKSTART, root)
    case = root / "cases" / "bert_base-torch-fp32-1n1g-bs8"
    twin = root / "cases" / "twin"
    shutil.copytree(case, twin)
    text = (twin / "case.json").read_text()
    (twin / "case.json").write_text(text.replace('"bert_base-torch-fp32-1n1g-bs8"', '"twin"', 1))
    rows, problems = collect_runs(root)
    assert problems == []
    flagged = {f"{r.case_id} r{r.repeat}": r.extra["oversubscribed"] for r in rows}
    assert flagged["twin r0"].startswith(
        "ran at the same time as bert_base-torch-fp32-1n1g-bs8 r0 on vm (CPUs not recorded, ")
    assert flagged["bert_base-torch-fp32-1n2g-bs8 r0"] == ""


def test_host_names_of_one_machine_share_its_cpus() -> None:
    # four namespaced nodes of one 2-CPU machine, one rank each: oversubscribed, though each
    # host name alone holds one rank on 2 CPUs
    spans = [RankSpan(f"node{k}", 0.0, 10.0, frozenset({0, 1}), 2, machine="b00t")
             for k in (1, 2, 3, 4)]
    [line] = crowded_hosts(spans)
    assert line.startswith("4 ranks on node1, node2, node3, node4 (4 host names, one machine)")
    assert "share 2 CPU(s)" in line
    # the same host names on four machines are four hosts with a rank each
    apart = [RankSpan(f"node{k}", 0.0, 10.0, frozenset({0, 1}), 2, machine=f"m{k}")
             for k in (1, 2, 3, 4)]
    assert crowded_hosts(apart) == []
    # two runs at once on two host names of one machine share its CPUs
    found = oversubscribed({"a": spans[:1], "b": [RankSpan("node9", 1.0, 5.0, None, 2,
                                                           machine="b00t")]})
    assert "ran at the same time as b on node1, node9" in found["a"][0]
    assert spans_of([{"host": "node1", "start_s": 0, "end_s": 1, "cpus": [0],
                      "host_cpus": 2, "machine": "b00t"}])[0].machine == "b00t"
