"""Layouts against data parallelism (toolkit.analysis.layouts): the seeds' ratios from the
imported DLPerf GPT table (examples/reference/001_oneflow_gpt_dlperf.csv, held equal here to
the recorded copy of the seed's tables in tests/data/seeds, SOURCE.md), which reference layout a
measured one is held against, and the verdict's rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.analysis.layouts import (
    DLPERF_GPT_REFERENCE,
    KEPT,
    LOST_MORE,
    LOST_MORE_NOISE_UNKNOWN,
    MATCH_KIND,
    MATCH_LAYOUT,
    MATCH_PIPELINED,
    WITHIN_NOISE,
    kind,
    load_layout_reference,
    match_reference,
    model_keys,
    reference_ratios,
    verdict,
)
from toolkit.analysis.reference import ReferenceError, load_reference

ROOT = Path(__file__).resolve().parents[3]
RECORDED = ROOT / "tests" / "data" / "seeds" / "oneflow_gpt_dlperf_tables.md"
H1536 = model_keys("hidden_size=1536,num_layers=16,num_heads=16,intermediate_size=6144,"
                   "seq_len=2048,vocab_size=50304,data=synthetic,tp=4")


def recorded_tables() -> tuple[dict[str, dict[str, str]], dict[str, float]]:
    """The seed's Test Case rows (case -> column -> cell) and Test Result throughputs."""
    cases: dict[str, dict[str, str]] = {}
    results: dict[str, float] = {}
    header: list[str] = []
    section = ""
    for line in RECORDED.read_text().splitlines():
        if line.startswith("## "):
            section, header = line[3:], []
            continue
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5 or not cells[1] or cells[1] == "--":
            continue
        if not header:
            header = cells
        elif section == "Test Case":
            cases[cells[1]] = dict(zip(header, cells, strict=True))
        else:
            results[cells[1]] = float(cells[4])
    return cases, results


def test_the_imported_table_is_the_recorded_seeds_table():
    cases, results = recorded_tables()
    assert len(cases) == len(results) == 18
    rows = load_reference(DLPERF_GPT_REFERENCE)
    by_name = {r.name.split()[-1]: r for r in rows}
    assert set(by_name) == set(results)
    for name, row in by_name.items():
        case = cases[name]
        assert row.throughput_sps == results[name]
        assert (row.keys["num_nodes"], row.keys["gpus_per_node"]) == (
            case["num-nodes"], case["num-gpus-per-node"])
        assert row.keys["batch_size_per_device"] == case["micro-batch-size"]
        assert row.variant.startswith(
            f"dp={case['data-parallel-size']},tp={case['tensor-model-parallel-size']},"
            f"pp={case['pipeline-model-parallel-size']},hidden_size={case['hidden-size']},"
            f"num_layers={case['num-layers']},num_heads={case['num-attention-heads']}")


def test_the_seeds_ratios_against_data_parallelism():
    _, results = recorded_tables()
    ratios = {r.name: r for r in reference_ratios(load_reference(DLPERF_GPT_REFERENCE))}
    # one node of 8: against the fastest dp-only case of that node and model (2D_8x1x1, the
    # 2D group's repeat of DP_8x1x1: 38.29 against 38.28)
    dp8 = max(results["DP_8x1x1_16_1536x16"], results["2D_8x1x1_16_1536x16"])
    assert dp8 == 38.29
    assert ratios["MP_1x8x1_16_1536x16"].ratio == pytest.approx(24.92 / dp8)
    assert ratios["MP_1x8x1_16_1536x16"].dp_name == "2D_8x1x1_16_1536x16"
    assert round(ratios["MP_1x8x1_16_1536x16"].ratio, 2) == 0.65  # the seeds' tp ratio
    assert round(ratios["2D_2x4x1_16_1536x16"].ratio, 2) == 0.77  # and 2D's
    assert ratios["2D_4x2x1_16_1536x16"].ratio == pytest.approx(29.42 / dp8)
    # 32 GPUs: DP_PP_8x1x4 (global 512, 32 accumulation steps) over DP_32x1x1
    assert ratios["DP_PP_8x1x4_512_1536x16"].ratio == pytest.approx(127.8 / 123.4)
    assert ratios["DP_PP_8x1x4_512_1536x16"].gpus == 32
    # the h2304 / h3072 layouts have no dp-only case of their model: no ratio
    assert set(ratios) == {"MP_1x8x1_16_1536x16", "2D_1x8x1_16_1536x16",
                           "2D_2x4x1_16_1536x16", "2D_4x2x1_16_1536x16",
                           "DP_PP_8x1x4_512_1536x16"}


@pytest.mark.parametrize("layout,name,rule", [
    ((1, 8, 1), "MP_1x8x1_16_1536x16", MATCH_LAYOUT),  # its own shape; the first listed
    ((4, 2, 1), "2D_4x2x1_16_1536x16", MATCH_LAYOUT),
    ((1, 4, 1), "MP_1x8x1_16_1536x16", MATCH_KIND),  # tp only at 4 GPUs: the seeds' at 8
    ((1, 2, 1), "MP_1x8x1_16_1536x16", MATCH_KIND),
    ((2, 2, 1), "2D_4x2x1_16_1536x16", MATCH_KIND),  # 2D: the nearest tp degree
    ((2, 4, 1), "2D_2x4x1_16_1536x16", MATCH_LAYOUT),
    ((2, 1, 2), "DP_PP_8x1x4_512_1536x16", MATCH_KIND),  # dp x pp at 32 GPUs
    ((1, 1, 4), "DP_PP_8x1x4_512_1536x16", MATCH_PIPELINED),  # no pp-only in the seeds
    ((1, 2, 2), "DP_PP_8x1x4_512_1536x16", MATCH_PIPELINED),
])
def test_a_layout_is_matched_by_shape_else_kind_else_pipelining(layout, name, rule):
    ratios = reference_ratios(load_reference(DLPERF_GPT_REFERENCE))
    match = match_reference(layout, H1536, ratios)
    assert match is not None
    assert (match.ratio.name, match.rule, match.same_model) == (name, rule, True)


def test_no_reference_for_data_parallelism_or_a_kind_the_table_lacks():
    ratios = reference_ratios(load_reference(DLPERF_GPT_REFERENCE))
    assert match_reference((4, 1, 1), H1536, ratios) is None
    assert match_reference((1, 1, 1), H1536, ratios) is None
    only_tp = [r for r in ratios if kind(r.layout) == "tp"]
    assert match_reference((2, 2, 1), H1536, only_tp) is None
    # another model size still matches, and says so
    other = match_reference((1, 4, 1), model_keys("hidden_size=64,num_layers=2"), ratios)
    assert other is not None and not other.same_model


@pytest.mark.parametrize("layout,name", [((1, 1, 1), "dp"), ((4, 1, 1), "dp"),
                                         ((1, 4, 1), "tp"), ((2, 2, 1), "dp x tp"),
                                         ((1, 1, 4), "pp"), ((2, 1, 2), "dp x pp"),
                                         ((1, 2, 2), "tp x pp"), ((2, 2, 2), "dp x tp x pp")])
def test_the_kind_of_a_layout(layout, name):
    assert kind(layout) == name


@pytest.mark.parametrize("vs_dp,noise,reference,expected", [
    (0.70, 0.02, 0.65, KEPT),
    (0.65, None, 0.65, KEPT),  # as much as the reference: kept
    (0.60, 0.02, 0.65, LOST_MORE),  # 0.60 x 1.02 = 0.612 < 0.65
    (0.64, 0.02, 0.65, WITHIN_NOISE),  # 0.64 x 1.02 = 0.653 >= 0.65
    (0.60, None, 0.65, LOST_MORE_NOISE_UNKNOWN),
])
def test_the_verdict_rule(vs_dp, noise, reference, expected):
    assert verdict(vs_dp, noise, reference) == expected


def test_the_default_reference_and_a_bad_one(tmp_path: Path):
    seeds = load_layout_reference(None)
    assert seeds is not None and len(seeds.rows) == 18
    assert "001_oneflow_gpt_dlperf.csv" in seeds.name
    assert seeds.about.startswith("DLPerf's GPT report")  # what a reader of the table knows
    bad = tmp_path / "ref.csv"
    bad.write_text("framework,model\noneflow,gpt\n")
    with pytest.raises(ReferenceError, match=r"ref\.csv: missing column"):
        load_layout_reference(bad)
