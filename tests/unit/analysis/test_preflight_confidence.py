"""What a preflight verdict rests on: figures measured again, hosts crowded while they were
measured (the runs' crowded mark), figures with nothing to judge them against, and the floor of
a link between two nodes. Frames shaped as `toolkit.results.preflight` reads them, with each
figure's measurements (`detail.attempts`) as the probes record them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.analysis.test_preflight import frame, row
from toolkit.analysis.preflight import (
    INCONCLUSIVE,
    OK,
    SLOW,
    Attempts,
    attempts_of,
    judge,
    link_floor_gbps,
    measure_again,
)
from toolkit.launch.preflight import PREFLIGHT_FAILED, PREFLIGHT_PARTLY_JUDGED, exit_status

CPU = "cpu: Example CPU"

#: One second on a host of two CPUs: the figure's rank took one CPU-second.
CLEAR = {"window_s": 1.0, "host_busy_cpu_s": 1.0, "own_cpu_s": 1.0, "host_cpus": 2,
         "machine": "m1"}
#: The same second with another process busy on the other CPU: crowded.
CROWDED = {**CLEAR, "host_busy_cpu_s": 2.0}


def tried(*attempts: tuple[float, dict[str, Any]], **detail: Any) -> dict[str, Any]:
    return {**detail, "attempts": [{"value": v, "host_load": load} for v, load in attempts]}


def gemm(node: str, rank: int, *attempts: tuple[float, dict[str, Any]]) -> dict[str, Any]:
    return row(node, rank, "gemm_fp32", max(v for v, _ in attempts), device=CPU,
               detail=tried(*attempts))


def by_node(v: Any) -> dict[str, str]:
    return dict(zip(v.nodes["node"], v.nodes["verdict"], strict=True))


def test_a_figure_below_its_peers_confirmed_uncrowded_names_its_node_with_its_evidence() -> None:
    rows = [gemm(f"n{i}", i, (0.064, CLEAR)) for i in range(3)]
    rows.append(gemm("n3", 3, (0.030, CLEAR), (0.032, CLEAR)))
    v = judge(frame(rows))
    assert by_node(v) == {"n0": OK, "n1": OK, "n2": OK, "n3": SLOW}
    assert v.exclude == ["n3"] and exit_status(v) == PREFLIGHT_FAILED
    reason = v.nodes.set_index("node").loc["n3", "reasons"]
    assert "gemm_fp32 0.03200 TFLOP/s is 50% of the peers' median 0.06400" in reason
    assert "best of 2 measurements" in reason
    assert "peers 0.03200, 0.06400, 0.06400, 0.06400, spread 0%" in reason
    fig = v.figures.set_index("node").loc["n3"]
    assert fig["measurements"] == 2 and fig["uncrowded"] == 2 and len(fig["peers"]) == 4


def test_below_its_peers_while_the_host_was_crowded_is_inconclusive_and_never_excluded() -> None:
    rows = [gemm(f"n{i}", i, (0.064, CLEAR)) for i in range(3)]
    rows.append(gemm("n3", 3, (0.020, CROWDED), (0.025, CROWDED), (0.022, CROWDED)))
    v = judge(frame(rows))
    assert by_node(v)["n3"] == INCONCLUSIVE
    assert v.exclude == [] and v.ok and not v.all_judged
    assert exit_status(v) == PREFLIGHT_PARTLY_JUDGED
    (left,) = v.unjudged
    assert left["where"] == "n3/r3" and left["verdict"] == INCONCLUSIVE
    assert "crowded during all 3 measurements" in left["why"]
    assert "other processes took 50% of host n3's CPU time while it was measured" in left["why"]


def test_one_uncrowded_measurement_is_enough_to_judge_what_the_crowded_ones_could_not() -> None:
    rows = [gemm(f"n{i}", i, (0.064, CLEAR)) for i in range(3)]
    rows.append(gemm("n3", 3, (0.020, CROWDED), (0.030, CLEAR), (0.025, CROWDED)))
    v = judge(frame(rows))
    assert by_node(v)["n3"] == SLOW and "best of 3 measurements" in v.nodes.set_index(
        "node").loc["n3", "reasons"]


def test_a_crowded_peer_only_lowers_the_reference_and_a_crowded_figure_may_still_pass() -> None:
    # the healthy node measured while crowded looks as slow as the slow one: nobody is named
    v = judge(frame([gemm("n1", 0, (0.030, CROWDED)), gemm("n2", 1, (0.031, CLEAR))]))
    assert v.exclude == [] and v.ok and v.all_judged
    # a figure that reaches its peers while crowded is ok: contention only lowers one
    v = judge(frame([gemm("n1", 0, (0.064, CLEAR)), gemm("n2", 1, (0.063, CLEAR)),
                     gemm("n3", 2, (0.064, CROWDED))]))
    assert v.ok and v.all_judged and exit_status(v) == 0


def _pairs(values: dict[tuple[str, str], tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Both ranks of each pair, on one machine: each took half a CPU-second of the second."""
    rows = []
    for (a, b), (value, load) in values.items():
        load = {**load, "own_cpu_s": 0.5}
        detail = {"bytes": 8 << 20, "ranks": 2, **tried((value, load), (value, load))}
        rows += [row(node, k, "all_reduce", value, probe="collective", scope="pair",
                     group=f"{a}+{b}", unit="GB/s", device=CPU, detail=detail)
                 for k, node in enumerate((a, b))]
    return rows


def test_a_node_slow_in_every_pair_needs_two_pairs_confirmed_on_an_uncrowded_host() -> None:
    healthy = {("n0", "n1"): (0.6, CLEAR), ("n0", "n2"): (0.6, CLEAR), ("n1", "n2"): (0.6, CLEAR)}
    slow = {("n0", "n3"): (0.011, CLEAR), ("n1", "n3"): (0.011, CLEAR),
            ("n2", "n3"): (0.011, CROWDED)}
    v = judge(frame(_pairs(healthy | slow)))
    assert by_node(v) == {"n0": OK, "n1": OK, "n2": OK, "n3": SLOW} and v.links == []
    assert v.links_tested == sorted(f"{a}+{b}" for a, b in healthy | slow) and v.links_total == 6
    # one pair confirmed, two crowded: the node is inconclusive, and no link is named for it
    slow = {("n0", "n3"): (0.011, CLEAR), ("n1", "n3"): (0.011, CROWDED),
            ("n2", "n3"): (0.011, CROWDED)}
    v = judge(frame(_pairs(healthy | slow)))
    assert by_node(v)["n3"] == INCONCLUSIVE and v.exclude == [] and v.links == []
    assert exit_status(v) == PREFLIGHT_PARTLY_JUDGED


def test_figures_with_nothing_to_compare_with_are_listed_not_passed() -> None:
    v = judge(frame([gemm("n1", 0, (0.064, CLEAR)),
                     row("n1", 0, "all_gather", 0.5, probe="collective", scope="job",
                         group="job", unit="GB/s", device=CPU, detail={"bytes": 1 << 20,
                                                                        "ranks": 1})]))
    assert by_node(v) == {"n1": OK} and v.ok and not v.all_judged
    assert exit_status(v) == PREFLIGHT_PARTLY_JUDGED
    assert exit_status(v, warn=True) == PREFLIGHT_PARTLY_JUDGED
    whys = {u["metric"]: u["why"] for u in v.unjudged}
    assert "no earlier preflight of it; no alike figure in this preflight; no datasheet" \
        in whys["gemm_fp32"]
    assert "one job-wide figure, no peers" in whys["all_gather"]
    assert v.to_dict()["all_judged"] is False and v.to_dict()["not_judged"] == v.unjudged


def _pair_rows(a: str, b: str, value: float, speed: float | None) -> list[dict[str, Any]]:
    detail = {"bytes": 8 << 20, "ranks": 2, **tried((value, CLEAR), (value, CLEAR))}
    return [row(node, k, "all_reduce", value, probe="collective", scope="pair",
                group=f"{a}+{b}", unit="GB/s", device=CPU, detail=detail)
            | {"speed_mbps": speed} for k, node in enumerate((a, b))]


def test_the_link_of_two_nodes_is_judged_against_a_tenth_of_its_interface_speed() -> None:
    # 100 Mbit/s of throttling on a 10 Gbit/s interface: 0.011 GB/s, under its 0.125 floor
    v = judge(frame(_pair_rows("node1", "node2", 0.011, 10_000.0)))
    assert link_floor_gbps([10_000.0, 10_000.0]) == 0.125
    assert not v.ok and v.exclude == [] and exit_status(v) == PREFLIGHT_FAILED
    (link,) = v.links
    assert link == ("node1+node2: all_reduce over node1+node2 0.01100 GB/s is below the link's "
                    "floor 0.1250 (10% of the interface's 10,000 Mbit/s) (best of 2 "
                    "measurements)"), link
    assert v.links_tested == ["node1+node2"] and v.links_total == 1
    # a healthy link is judged ok against the same floor, with nothing left unjudged
    v = judge(frame(_pair_rows("node1", "node2", 0.6, 10_000.0)))
    assert v.ok and v.all_judged and v.links == []
    # no interface speed: not judged, and the verdict says so
    v = judge(frame(_pair_rows("node1", "node2", 0.011, None)))
    assert v.ok and [u["why"] for u in v.unjudged if u["metric"] == "all_reduce"] == [
        "all_reduce over node1+node2: no earlier preflight of it; no alike figure in this "
        "preflight; no interface speed for its link's floor"]


def test_the_measurements_of_a_group_add_up_the_ranks_of_one_machine() -> None:
    # two ranks on one machine of two CPUs, each busy one CPU-second: their own load
    both = {"window_s": 1.0, "host_busy_cpu_s": 2.0, "own_cpu_s": 1.0, "host_cpus": 2,
            "machine": "m1"}
    a = attempts_of([("node1", [{"value": 0.5, "host_load": both}]),
                     ("node2", [{"value": 0.4, "host_load": both}])])
    assert a == Attempts(0.4, 1, 1, None)
    # one rank alone with the same busy host: someone else took the other CPU
    a = attempts_of([("node1", [{"value": 0.5, "host_load": both}])])
    assert a.uncrowded == 0 and a.crowded is not None and "node1" in a.crowded


def test_what_is_measured_again() -> None:
    figs = {"ok": Attempts(1.0, 1, 1), "low": Attempts(0.5, 1, 1),
            "crowded": Attempts(1.0, 1, 0), "confirmed": Attempts(0.5, 2, 2),
            "tried_enough": Attempts(0.1, 3, 0), "unmeasured": Attempts(None, 1, 1),
            "peer": Attempts(1.0, 1, 1), "peer2": Attempts(1.0, 1, 1),
            "peer3": Attempts(1.0, 1, 1)}
    assert measure_again(figs) == ["low"]  # a crowded figure at its peers' level is fine
    # alone, a figure is measured again below its floor only
    assert measure_again({"link": Attempts(0.01, 1, 1)}) == []
    assert measure_again({"link": Attempts(0.01, 1, 1)}, {"link": 0.125}) == ["link"]
    assert measure_again({"link": Attempts(0.01, 2, 1)}, {"link": 0.125}) == ["link"]
    assert measure_again({"link": Attempts(0.01, 2, 2)}, {"link": 0.125}) == []


def waited(load: dict[str, Any], wait_s: float) -> dict[str, Any]:
    return {**load, "own_wait_s": wait_s}


def test_crowded_but_far_below_what_its_waits_for_a_cpu_explain_is_slow_and_says_why() -> None:
    rows = [gemm(f"n{i}", i, (0.064, CLEAR)) for i in range(3)]
    # others took the host, but n3's rank waited for a CPU 0.1 s of each second: without that
    # wait it would have reached 0.012 / 0.9 = 0.0133, and twice that is below 85% of 0.064
    rows.append(gemm("n3", 3, *[(v, waited(CROWDED, 0.1)) for v in (0.010, 0.012, 0.011)]))
    v = judge(frame(rows))
    assert by_node(v)["n3"] == SLOW and v.exclude == ["n3"]
    reason = v.nodes.set_index("node").loc["n3", "reasons"]
    assert "though the host was crowded during all 3 measurements" in reason
    assert "without its ranks' waits for a CPU it would have reached at most 0.01333" in reason
    assert "2 x that is still below 0.05440" in reason
    assert v.figures.set_index("node").loc["n3", "restored"] == pytest.approx(0.012 / 0.9)


def test_crowded_and_as_low_as_its_waits_for_a_cpu_explain_stays_inconclusive() -> None:
    rows = [gemm(f"n{i}", i, (0.064, CLEAR)) for i in range(3)]
    # waiting 0.8 s of each second explains a figure five times lower: not named
    rows.append(gemm("n3", 3, *[(v, waited(CROWDED, 0.8)) for v in (0.010, 0.012, 0.011)]))
    v = judge(frame(rows))
    assert by_node(v)["n3"] == INCONCLUSIVE and v.exclude == []
    (left,) = v.unjudged
    assert "without its ranks' waits for a CPU it could have reached 0.06000" in left["why"]
    # a record without the waits (an older preflight, a kernel without schedstat): inconclusive
    rows[-1] = gemm("n3", 3, (0.010, CROWDED), (0.012, CROWDED), (0.011, CROWDED))
    assert by_node(judge(frame(rows)))["n3"] == INCONCLUSIVE


def test_the_restored_value_adds_up_every_ranks_waits_over_the_longest_window() -> None:
    from toolkit.analysis.preflight import MAX_WAIT_SHARE, restored_value

    two = [{"value": 0.5, "host_load": {"window_s": 4.0, "own_wait_s": 1.0}},
           {"value": 0.4, "host_load": {"window_s": 2.0, "own_wait_s": 1.0}}]
    assert restored_value(two) == pytest.approx(0.4 / (1 - 2.0 / 4.0))
    hogged = [{"value": 0.4, "host_load": {"window_s": 1.0, "own_wait_s": 5.0}}]
    assert restored_value(hogged) == pytest.approx(0.4 / (1 - MAX_WAIT_SHARE))
    for bad in ({"window_s": 1.0}, {"window_s": 0.0, "own_wait_s": 0.1},
                {"window_s": 1.0, "own_wait_s": "0.1"}, {"window_s": 1.0, "own_wait_s": -1.0}):
        assert restored_value([{"value": 0.4, "host_load": bad}]) is None
    assert restored_value([{"value": None, "host_load": {"window_s": 1, "own_wait_s": 0}}]) \
        is None


def test_a_sites_expected_link_figure_judges_two_nodes_above_the_interface_floor() -> None:
    # a link throttled to 2 Gbit/s of a 10 Gbit/s interface passes its floor (0.2 > 0.125);
    # the site says its healthy links reach 0.5 GB/s: slow below 90% of that
    def site(device: str | None) -> dict[str, float]:
        return {"pair_all_reduce": 0.5} if device and "Example CPU" in device else {}

    v = judge(frame(_pair_rows("node1", "node2", 0.2, 10_000.0)), expected=site)
    (link,) = v.links
    assert "0.2000 GB/s is 40% of the site's expected 0.5000" in link, link
    assert not v.ok and v.exclude == []
    assert judge(frame(_pair_rows("node1", "node2", 0.2, 10_000.0))).ok  # the floor alone
    # a healthy link is ok against it; another CPU model's nodes are not held to it
    assert judge(frame(_pair_rows("node1", "node2", 0.48, 10_000.0)), expected=site).ok
    other = [r | {"device": "cpu: Other CPU"} for r in _pair_rows("node1", "node2", 0.2,
                                                                   10_000.0)]
    assert judge(frame(other), expected=site).ok
