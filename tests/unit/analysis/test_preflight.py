"""Preflight verdicts: each rule on frames shaped as `toolkit.results.preflight` reads them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from toolkit.analysis.preflight import Verdict, baseline_reference, judge
from toolkit.results.preflight import COLUMNS

H100 = "NVIDIA H100 80GB HBM3"


def row(node: str, rank: int, metric: str, value: float | None, *, probe: str = "gemm",
        device: str = H100, scope: str = "gpu", group: str = "", tag: str = "t1",
        detail: dict[str, Any] | None = None, unit: str = "TFLOP/s",
        reason: str | None = None) -> dict[str, Any]:
    detail = detail or {}
    return {"tag": tag, "node": node, "host": node, "rank": rank, "local_rank": 0,
            "device": device, "gpu_uuid": None, "gpu_bus_id": None, "probe": probe,
            "metric": metric, "value": value, "unit": unit, "scope": scope, "group": group,
            "bytes": detail.get("bytes"), "detail": detail, "reason": reason, "time_s": 0.0}


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


def test_a_gpu_below_its_peers_is_slow_and_names_its_node() -> None:
    rows = [row(f"n{i}", i, "gemm_bf16", 760.0) for i in range(3)]
    rows.append(row("n3", 3, "gemm_bf16", 600.0))
    v = judge(frame(rows))
    nodes = dict(zip(v.nodes["node"], v.nodes["verdict"], strict=True))
    assert nodes == {"n0": "ok", "n1": "ok", "n2": "ok", "n3": "slow"}
    assert v.exclude == ["n3"]
    reason = v.nodes.set_index("node").loc["n3", "reasons"]
    assert "gemm_bf16 600.0 TFLOP/s is 79% of the peers' median 760.0" in reason
    slow = v.figures[v.figures["node"] == "n3"].iloc[0]
    assert slow["reference_kind"] == "peers" and abs(slow["pct_datasheet"] - 600 / 989.4) < 1e-9


def test_a_share_just_below_the_rule_is_shown_below_it() -> None:
    from toolkit.analysis.preflight import share_below

    rows = [row(f"n{i}", i, "gemm_bf16", 760.0) for i in range(3)]
    rows.append(row("n3", 3, "gemm_bf16", 0.849 * 760.0))
    reason = judge(frame(rows)).nodes.set_index("node").loc["n3", "reasons"]
    assert "is 84.9% of the peers' median 760.0" in reason  # the rule: slow below 85%
    assert share_below(0.79, 0.85) == "79%" and share_below(0.84999, 0.85) == "just below 85%"


def test_within_the_peer_tolerance_is_ok() -> None:
    v = judge(frame([row("n0", 0, "gemm_bf16", 760.0), row("n1", 1, "gemm_bf16", 660.0)]))
    # median 710: 660 is 93% of it
    assert v.ok and v.exclude == []


def test_baseline_wins_over_peers_and_states_its_spread() -> None:
    earlier = frame([row("n0", 0, "gemm_bf16", v, tag=f"old{i}")
                     for i, v in enumerate([780.0, 790.0, 785.0, 775.0])])
    # two GPUs alike but both 20% under what this model did before
    now = frame([row("n0", 0, "gemm_bf16", 630.0), row("n1", 1, "gemm_bf16", 628.0)])
    v = judge(now, earlier)
    assert v.exclude == ["n0", "n1"]
    fig = v.figures.iloc[0]
    assert fig["reference_kind"] == "baseline" and fig["reference"] == 782.5
    assert "earlier preflights (spread" in fig["rule"]


def test_baseline_tolerance_grows_with_its_spread() -> None:
    ref = baseline_reference([100.0, 80.0, 120.0, 100.0, 90.0, 110.0])
    assert ref is not None
    assert ref.tolerance > 0.10 and abs(ref.tolerance - 3 * ref.spread) < 1e-12  # type: ignore[operator]
    assert baseline_reference([100.0, 101.0]) is None  # fewer than three: no baseline


def test_below_half_the_datasheet_is_slow_without_any_reference() -> None:
    v = judge(frame([row("n0", 0, "gemm_bf16", 400.0)]))
    assert v.exclude == ["n0"]
    assert "of the datasheet 989" in v.nodes["reasons"].iloc[0]
    v = judge(frame([row("n0", 0, "hbm_copy", 2900.0, probe="memory", unit="GB/s")]))
    assert v.ok and abs(v.figures["pct_datasheet"].iloc[0] - 2900 / 3350) < 1e-9


def test_a_probe_that_failed_on_a_gpu_is_a_fault_but_a_missing_collective_is_not() -> None:
    v = judge(frame([row("n0", 0, "gemm_fp8", None, reason="RuntimeError: no fp8"),
                     row("n0", 0, "reduce_scatter", None, probe="collective", scope="job",
                         group="job", unit="GB/s", reason="gloo lacks it")]))
    assert v.nodes["verdict"].tolist() == ["fault"]
    assert set(v.figures["verdict"]) == {"fault", "n/a"}


def test_health_faults_and_slow_links() -> None:
    rows = [row("n0", 0, "gemm_bf16", 760.0), row("n1", 1, "gemm_bf16", 760.0)]
    rows += [row("n0", 0, "ecc_uncorrected_volatile", 2.0, probe="health"),
             row("n1", 1, "pcie_width_under_load", 8.0, probe="health"),
             row("n1", 1, "pcie_width_max", 16.0, probe="health"),
             row("n1", 1, "hw_slowdown_share", 0.4, probe="health",
                 detail={"reasons_seen": {"HW Thermal Slowdown": 0.4}})]
    v = judge(frame(rows))
    nodes = v.nodes.set_index("node")
    assert nodes.loc["n0", "verdict"] == "fault"
    assert "uncorrected ECC" in nodes.loc["n0", "reasons"]
    assert nodes.loc["n1", "verdict"] == "slow"
    assert "runs at x8 of x16" in nodes.loc["n1", "reasons"]
    assert "HW Thermal Slowdown" in nodes.loc["n1", "reasons"]


def test_a_rank_that_did_not_finish_is_a_fault() -> None:
    rows = [row("n0", 0, "gemm_bf16", 760.0),
            row("n1", 1, "finished", None, probe="rank", reason="RuntimeError: CUDA error")]
    v = judge(frame(rows))
    assert v.exclude == ["n1"]
    assert "did not finish" in v.nodes.set_index("node").loc["n1", "reasons"]


def _pair(a: str, b: str, value: float, rank: int) -> dict[str, Any]:
    return row(a, rank, "all_reduce", value, probe="collective", scope="pair",
               group=f"{a}+{b}", unit="GB/s", detail={"bytes": 512 << 20, "ranks": 16})


def test_pairs_name_a_slow_node_or_a_slow_link() -> None:
    # four nodes, pairs (0,1) (2,3) (1,2) (3,0); n3's both pairs slow: n3 is slow
    rows = []
    for a, b, v in (("n0", "n1", 180.0), ("n2", "n3", 90.0), ("n1", "n2", 181.0),
                    ("n3", "n0", 92.0)):
        rows += [_pair(a, b, v, 0) | {"node": a}, _pair(a, b, v, 1) | {"node": b}]
    v = judge(frame(rows))
    assert v.exclude == ["n3"], v.nodes
    assert "every all-reduce with n3 is slow" in v.nodes.set_index("node").loc["n3", "reasons"]
    assert v.links == []  # both slow pairs are n3's, not links of n2 or n0
    # only one slow pair: the link is named, no node
    rows = []
    for a, b, val in (("n0", "n1", 180.0), ("n2", "n3", 90.0), ("n1", "n2", 181.0),
                      ("n3", "n0", 182.0)):
        rows += [_pair(a, b, val, 0) | {"node": a}, _pair(a, b, val, 1) | {"node": b}]
    v = judge(frame(rows))
    # a slow link is not ok, but excludes no node
    assert not v.ok and v.exclude == [] and len(v.links) == 1 and v.links[0].startswith("n2+n3")


def test_a_node_with_one_far_slower_pair_is_not_slow_itself_its_link_is() -> None:
    # n0-n1 throttled (2 GB/s); n0's other pair is healthy but, by noise, just under 85 % of
    # the median: both n0's pairs are slow, yet one is 40 times the other, so the link is named
    rows = []
    for a, b, val in (("n0", "n1", 2.0), ("n1", "n2", 180.0), ("n2", "n3", 182.0),
                      ("n3", "n0", 130.0)):
        rows += [_pair(a, b, val, 0) | {"node": a}, _pair(a, b, val, 1) | {"node": b}]
    v = judge(frame(rows))
    assert not v.ok and v.exclude == [], v.nodes
    assert [x.split(":")[0] for x in v.links] == ["n0+n1", "n3+n0"]


def test_the_slowest_rank_of_a_collective_counts() -> None:
    detail = {"bytes": 1 << 20, "ranks": 2}
    rows = [row("n0", 0, "all_reduce", 10.0, probe="collective", scope="job", group="job",
                detail=detail, unit="GB/s"),
            row("n1", 1, "all_reduce", 8.0, probe="collective", scope="job", group="job",
                detail=detail, unit="GB/s")]
    v = judge(frame(rows))
    assert v.figures["value"].tolist() == [8.0]


def test_verdict_round_trips_through_json() -> None:
    import json

    v = judge(frame([row("n0", 0, "gemm_bf16", 760.0), row("n1", 1, "gemm_bf16", 500.0)]))
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back.exclude == v.exclude == ["n1"]
    assert back.figures["value"].tolist() == v.figures["value"].tolist()


def test_the_sites_expected_figure_finds_gpus_slow_that_peers_and_datasheet_pass() -> None:
    """Two alike H100s at 650 TFLOP/s: fine by their peers and above half the datasheet, but
    this site's healthy H100s measure 760."""
    from toolkit.spec.placement import ExpectedFigure, SiteOptions

    site = SiteOptions(expected=(ExpectedFigure("H100", "gemm_bf16", 760.0),
                                 ExpectedFigure("H200", "gemm_bf16", 800.0)))
    now = frame([row("n0", 0, "gemm_bf16", 650.0), row("n1", 1, "gemm_bf16", 700.0)])
    assert judge(now).ok
    v = judge(now, expected=site.expected_for)
    assert v.exclude == ["n0"]  # 650 < 90% of 760 = 684; 700 is above
    fig = v.figures.set_index("node").loc["n0"]
    assert fig["expected"] == 760.0
    assert "is 86% of the site's expected 760.0" in fig["reason"]
    assert "slow below 90% of the site's expected 760.0" in fig["rule"]
    # another model's expectation does not apply
    other = frame([row("n0", 0, "gemm_bf16", 650.0, device="NVIDIA A100-SXM4-80GB")])
    assert judge(other, expected=site.expected_for).ok


def test_a_figure_no_device_or_link_has_is_a_fault_not_ok() -> None:
    """A busbw of 1e308 GB/s (finite) was judged "every node ok"; a GEMM at 1e308 TFLOP/s beside
    real ones would make the peers' median infinite and every real GPU "slow"."""
    detail = {"bytes": 1 << 20, "ranks": 2}
    coll = [row(f"n{i}", i, "all_reduce", 1e308, probe="collective", scope="job",
                group="job", detail=detail, unit="GB/s") for i in range(2)]
    v = judge(frame(coll))
    assert not v.ok
    (reason,) = set(v.figures["reason"])
    assert reason == ("all_reduce over job 1e+308 GB/s is not a measurement (no device or link "
                      "has more than 1e+06 GB/s)")
    gemm = [row(f"n{i}", i, "gemm_bf16", 760.0) for i in range(3)]
    gemm += [row("n3", 3, "gemm_bf16", 1.7e308), row("n4", 4, "gemm_bf16", 1.7e308)]
    v = judge(frame(gemm))
    nodes = dict(zip(v.nodes["node"], v.nodes["verdict"], strict=True))
    assert nodes == {"n0": "ok", "n1": "ok", "n2": "ok", "n3": "fault", "n4": "fault"}


def test_gpu_health_table_leaves_out_ranks_nvml_did_not_read() -> None:
    from toolkit.report.preflight import preflight_tables

    # a CPU cluster: the health probe ran on every rank and NVML read nothing
    cpu = [row(f"n{i}", i, "gemm_fp32", 1.0, device="cpu") for i in range(4)]
    cpu += [row(f"n{i}", i, "ecc_uncorrected_volatile", None, probe="health", device="cpu",
                reason="no NVML") for i in range(4)]
    titles = [t.title for t in preflight_tables(judge(frame(cpu))).tables]
    assert not any(t.startswith("GPU health") for t in titles)
    gpu = [*cpu, row("g0", 9, "ecc_uncorrected_volatile", 0.0, probe="health")]
    (health,) = [t for t in preflight_tables(judge(frame(gpu))).tables
                 if t.title.startswith("GPU health")]
    assert [r[0] for r in health.rows] == ["g0/r9"]
