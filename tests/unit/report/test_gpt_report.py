"""The GPT table (toolkit.report.gpt) on run rows built the way toolkit.results.runs builds them."""

from __future__ import annotations

import csv
import io

import pytest

from parsers.rows import RunRow
from toolkit import gpt_table
from toolkit.analysis.flops import achieved
from toolkit.analysis.layouts import load_layout_reference
from toolkit.report import gpt as report_gpt
from toolkit.report.outputs import to_csv
from toolkit.spec import Case, from_plain, resolve

V100 = "Tesla V100-SXM2-16GB"


def gpt_case(name: str, gpus: int = 1, nodes: int = 1, tp: int = 1, pp: int = 1, bs: int = 2,
             mbs: int | None = None, recompute: bool = True) -> Case:
    return resolve(from_plain(Case, {
        "model": "gpt", "name": name, "num_nodes": nodes, "gpus_per_node": gpus,
        "precision": "amp_fp16", "batch_size_per_device": bs, "activation_checkpointing": recompute,
        "parallel": {"tp": tp, "pp": pp, "micro_batch_size": mbs},
        "model_config": {"hidden_size": 1536, "num_layers": 16, "num_heads": 16,
                         "vocab_size": 51200, "seq_len": 2048}}, ""))


def row(case: Case, throughput: float | None, repeat: int = 0, status: str = "ok",
        nvml_mib: float | None = 11066.0, torch_mib: float | None = 9000.0,
        device: str = V100, error: str = "") -> dict:
    r = RunRow(case_id=case.name or case.base_id(), repeat=repeat, status=status,
               framework="torch", model="gpt", precision=case.precision.value,
               num_nodes=case.num_nodes, gpus_per_node=case.gpus_per_node,
               batch_size_per_device=case.batch_size_per_device,
               global_batch_size=case.global_batch_size, dp=case.dp, tp=case.parallel.tp,
               pp=case.parallel.pp, throughput_sps=throughput,
               peak_memory_mib=nvml_mib, variant=case.variant(), error=error)
    r.extra["device"] = device
    if torch_mib is not None:
        r.extra["framework_peak_memory_mib"] = torch_mib
    if status == "ok":
        r.extra.update(achieved(case, throughput, device))
    return r.to_dict()


def test_seed_figure_reproduced_with_the_96_formula():
    # performance.md: 406.16 ms per iteration at B = 2, l = 16, h = 1536, s = 2048, V = 51200
    # on one V100 is 49.43 TFLOP/s by the 96-formula (the seed's DP_1x1x1_2_1536x16 line).
    case = gpt_case("DP_1x1x1_2_1536x16")
    table = report_gpt.gpt_table([row(case, 2 / 0.40616)])
    (rec,) = table.records
    assert rec["latency_ms"] == pytest.approx(406.16)
    assert rec["tflops_per_gpu"] == pytest.approx(49.43, abs=0.01)
    assert rec["mfu_pct"] == pytest.approx(49.43 / 125 * 100, abs=0.01)
    assert "| -- | DP_1x1x1_2_1536x16 | 406.16 (ms) | 11066 (MiB) | 4.92 | 49.4 | 39.5 |" \
        in table.markdown
    assert "megatron 96-formula (recompute)" in table.markdown
    header = next(line for line in table.markdown.splitlines() if line.startswith("| group"))
    assert header == (
        "| group | case | latency | memory | throughput (samples/s) | TFLOP/s per GPU | % of peak"
        " | compile | vs dp at N GPUs | reference vs dp |")
    # a row that does not say how it ran shows that, never a guess
    assert "| 39.5 | missing |" in table.markdown and rec["compile"] is None


@pytest.mark.parametrize("labels,shown", [(["compiled"], "compiled"),
                                          (["eager", "eager"], "eager"),
                                          (["compiled", "eager"], "compiled, eager")])
def test_each_case_says_how_its_model_ran(labels, shown):
    case = gpt_case("DP_1x1x1_2_1536x16")
    rows = [row(case, 4.9, repeat=k) for k in range(len(labels))]
    for r, label in zip(rows, labels, strict=True):
        r["compile"] = label
    table = report_gpt.gpt_table(rows)
    assert table.records[0]["compile"] == shown
    assert table.rows[-1][report_gpt.HEADER.index("compile")] == shown


def test_groups_in_seed_order_with_medians_and_failures():
    dp1 = gpt_case("DP_1x1x1_2_1536x16")
    dp8 = gpt_case("DP_8x1x1_16_1536x16", gpus=8)
    mp = gpt_case("MP_1x8x1_16_1536x16", gpus=8, tp=8, bs=16)
    pp = gpt_case("2D_PP_2x4x4_512_2304x24", gpus=8, nodes=4, tp=4, pp=4, bs=256, mbs=8)
    rows = [row(pp, 39.0), row(mp, 25.0), row(dp8, 38.0, repeat=0), row(dp8, 40.0, repeat=1),
            row(dp8, 10.0, repeat=2), row(dp8, None, repeat=3, status="failed",
                                          error="rank 3: boom"),
            row(dp1, 4.9)]
    rows[4]["peak_memory_mib"] = 13000.0  # the median of 3 memories
    table = report_gpt.gpt_table(rows)
    cases = [r["case"] for r in table.records]
    groups = [r["group"] for r in table.records]
    assert cases == ["DP_1x1x1_2_1536x16", "DP_8x1x1_16_1536x16", "MP_1x8x1_16_1536x16",
                     "2D_PP_2x4x4_512_2304x24"]
    assert groups == ["DP", "DP", "MP", "PP"]
    dp8_rec = table.records[1]
    assert dp8_rec["throughput_sps"] == 38.0  # median of 38, 40, 10; the failed run excluded
    assert dp8_rec["latency_ms"] == pytest.approx(16 / 38.0 * 1000)
    assert dp8_rec["memory_mib"] == 11066.0
    assert (dp8_rec["runs_ok"], dp8_rec["runs_failed"]) == (3, 1)
    assert dp8_rec["error"] == "rank 3: boom"
    lines = table.markdown.splitlines()
    blank = "  |" * (len(report_gpt.HEADER) - 1)
    assert lines.index(f"| DP |{blank}") < lines.index(f"| MP |{blank}") \
        < lines.index(f"| PP |{blank}")
    assert "DP_8x1x1_16_1536x16 (1 failed)" in table.markdown


def test_a_crowded_case_is_marked_with_why():
    case = gpt_case("DP_1x1x1_2_1536x16")
    crowded = row(case, 4.9)
    crowded["host_crowded"] = ("other processes took 40% of host vm's CPU time while its ranks "
                               "trained (the host 98% busy: rule, busy >= 90% and others >= "
                               "10%)")
    table = report_gpt.gpt_table([crowded, row(case, 5.0, repeat=1)])
    assert table.records[0]["runs_crowded"] == 1
    assert table.rows[-1][4] == "4.95 †"
    assert "- † crowded: other processes, none of the run's ranks, took CPU time of a " \
           "saturated host" in table.notes
    assert "DP_1x1x1_2_1536x16: 1 of 2 run(s)." in table.notes
    assert "runs_crowded" in report_gpt.CSV_COLUMNS


def test_group_from_layout_when_the_name_is_not_the_seeds():
    cases = {"tp": gpt_case("gpt-tp2", gpus=2, tp=2), "pp": gpt_case("gpt-pp2", gpus=2, pp=2,
                                                                       bs=4, mbs=1),
             "2d": gpt_case("gpt-2x2", gpus=4, tp=2), "dp": gpt_case("gpt-dp2", gpus=2)}
    table = report_gpt.gpt_table([row(c, 1.0) for c in cases.values()])
    assert {r["case"]: r["group"] for r in table.records} == {
        "gpt-tp2": "MP", "gpt-pp2": "PP", "gpt-2x2": "2D", "gpt-dp2": "DP"}


def test_order_follows_the_grid_within_a_group_and_other_models_are_left_out():
    a, b = gpt_case("2D_8x1x1_16_1536x16", gpus=8), gpt_case("2D_1x8x1_16_1536x16", gpus=8,
                                                             tp=8, bs=16)
    bert = row(a, 1.0)
    bert["model"], bert["case_id"] = "bert_base", "bert"
    rows = [row(b, 1.0), row(a, 1.0), bert]
    assert [r["case"] for r in report_gpt.gpt_records(rows)] == [
        "2D_1x8x1_16_1536x16", "2D_8x1x1_16_1536x16"]
    ordered = report_gpt.gpt_records(rows, order=["2D_8x1x1_16_1536x16", "2D_1x8x1_16_1536x16"])
    assert [r["case"] for r in ordered] == ["2D_8x1x1_16_1536x16", "2D_1x8x1_16_1536x16"]


def test_unknowns_are_missing_not_guessed_and_csv_round_trips():
    case = gpt_case("DP_1x1x1_2_1536x16", recompute=False)
    no_nvml = row(case, 5.0, nvml_mib=None, torch_mib=8000.0, device="some CPU")
    table = report_gpt.gpt_table([no_nvml])
    (rec,) = table.records
    assert rec["memory_source"] == "torch" and rec["memory_mib"] == 8000.0
    assert rec["mfu_pct"] is None  # unknown device: no peak, no MFU
    assert rec["tflops_per_gpu"] is not None
    assert "8000 (MiB) (torch)" in table.markdown and "| missing |" in table.markdown
    assert "megatron 72-formula" in table.markdown
    parsed = list(csv.DictReader(io.StringIO(to_csv(table.records, report_gpt.CSV_COLUMNS))))
    assert parsed[0]["case"] == "DP_1x1x1_2_1536x16" and parsed[0]["mfu_pct"] == ""
    assert float(parsed[0]["throughput_sps"]) == 5.0


def test_all_failed_case_is_listed_with_missing_figures():
    case = gpt_case("DP_1x1x1_2_1536x16")
    table = report_gpt.gpt_table([row(case, None, status="failed", error="OOM")])
    (rec,) = table.records
    assert rec["runs_ok"] == 0 and rec["throughput_sps"] is None and rec["error"] == "OOM"
    assert "| -- | DP_1x1x1_2_1536x16 (1 failed) | missing | missing | missing |" \
        in table.markdown


def test_cli_refuses_a_directory_that_is_not_results(tmp_path, capsys):
    assert gpt_table.main([str(tmp_path)]) == 2
    assert "is not a results directory" in capsys.readouterr().err


def matrix_rows() -> list[dict]:
    """Run rows (as runs.csv has them) of the GPT layout matrix on 4 GPUs at h1536 L16 seq 2048
    and a 2-GPU tp case with no dp case beside it; made-up throughputs, chosen to land on each
    side of DLPerf's ratios."""
    def case(name: str, gpus: int, tp: int = 1, pp: int = 1, bs: int = 4,
             mbs: int | None = None) -> Case:
        return gpt_case(name, gpus=gpus, tp=tp, pp=pp, bs=bs, mbs=mbs)

    figures = {  # case -> its repeats' samples/s
        case("gpt-dp4", 4): [40.0, 41.0, 39.6],  # global 16: the others' baseline
        case("gpt-dp4-bs8", 4, bs=8): [45.0],  # global 32, faster
        case("gpt-tp4", 4, tp=4, bs=16): [24.0, 24.2, 23.9],
        case("gpt-2x2", 4, tp=2, bs=8): [30.6, 30.8, 30.5],
        case("gpt-pp4", 4, pp=4, bs=64, mbs=2): [48.0],  # global 64
        case("gpt-2x1x2", 4, pp=2, bs=32, mbs=2): [38.0],  # global 64
        case("gpt-tp2", 2, tp=2, bs=16): [15.0, 15.1],
    }
    rows = []
    for c, values in figures.items():
        rows += [row(c, v, repeat=k) for k, v in enumerate(values)]
    return rows


def test_each_layout_against_dp_at_its_gpu_count_beside_the_seeds_ratio():
    table = report_gpt.gpt_table(matrix_rows(), reference=load_layout_reference(None))
    recs = {r["case"]: r for r in table.records}
    cells = {r[1]: r[-2:] for r in table.rows if r[0] == "--"}
    # dp-only cases are the baseline
    assert cells["gpt-dp4"] == ["dp", "dp"] and cells["gpt-dp4-bs8"] == ["dp", "dp"]
    # tp 4 (global 16) against the dp case of the same global batch (40.0), not the faster
    # one: 24.0 / 40.0; the seeds' tp-only 1x8x1 at 8 GPUs kept 0.651; noise 0.3/24 + 1.4/40
    tp4 = recs["gpt-tp4"]
    assert tp4["dp_case"] == "gpt-dp4" and tp4["vs_dp"] == pytest.approx(0.6)
    assert tp4["vs_dp_noise"] == pytest.approx(0.3 / 24.0 + 1.4 / 40.0)
    assert tp4["reference_case"] == "MP_1x8x1_16_1536x16"
    assert tp4["reference_vs_dp"] == pytest.approx(24.92 / 38.29)
    assert tp4["layout_verdict"] == "lost more than the reference"
    assert cells["gpt-tp4"] == ["0.600 ▼", "0.651 (1x8x1 at 8)"]
    # 2D 2x2: 30.6 / 40 = 0.765 below the seeds' 4x2x1 (0.768), within the noise
    assert cells["gpt-2x2"] == ["0.765 ≈", "0.768 (4x2x1 at 8)"]
    assert recs["gpt-2x2"]["reference_match"] == "same kind"
    # pipelined, global 64: no dp case of that batch, so the fastest (45.0); the seeds' only
    # pipelined ratio with a dp case is DP_PP_8x1x4 at 32 GPUs (127.8 / 123.4 = 1.036)
    assert recs["gpt-pp4"]["dp_case"] == "gpt-dp4-bs8"
    assert cells["gpt-pp4"] == ["1.067", "1.036 (8x1x4 at 32)"]
    assert recs["gpt-pp4"]["reference_match"] == "both pipelined"
    # one repeat each: below the reference with its noise unknown
    assert cells["gpt-2x1x2"] == ["0.844 ▼?", "1.036 (8x1x4 at 32)"]
    assert recs["gpt-2x1x2"]["reference_match"] == "same kind"
    # no dp-only case at 2 GPUs: `-`, and said so
    assert cells["gpt-tp2"][0] == "-" and recs["gpt-tp2"]["layout_verdict"] == "no dp case"
    text = table.markdown
    assert "`-`: no dp-only case at that GPU count ran beside gpt-tp2." in text
    assert ("Used: gpt-dp4 for gpt-tp4, gpt-2x2; gpt-dp4-bs8 for gpt-2x1x2, gpt-pp4.") in text
    assert ("gpt-tp4 (tp only): MP_1x8x1_16_1536x16 over 2D_8x1x1_16_1536x16 at 8 GPUs, "
            "same kind") in text
    assert "`examples/reference/001_oneflow_gpt_dlperf.csv` (DLPerf's GPT report" in text
    assert "another model size" not in text  # h1536 L16 s2048, as the seeds'
    assert all(r["reference_same_model"] for r in recs.values() if r["reference_case"])
    # every mark's rule is in the notes
    assert "vs dp at N GPUs x (1 + noise) below reference vs dp" in text
    for mark in ("▼:", "▼?:", "≈:"):
        assert mark in text


def test_without_a_reference_the_column_says_so():
    table = report_gpt.gpt_table(matrix_rows())
    cells = {r[1]: r[-2:] for r in table.rows if r[0] == "--"}
    assert cells["gpt-tp4"] == ["0.600", "-"]  # nothing to lose against: no mark
    assert table.records[0]["layout_verdict"] == "dp baseline"
    assert {r["layout_verdict"] for r in table.records if r["case"] == "gpt-tp4"} == {
        "no reference"}
    assert "reference vs dp: no reference table given (`-`)." in table.markdown
    parsed = list(csv.DictReader(io.StringIO(to_csv(table.records, report_gpt.CSV_COLUMNS))))
    assert {r["case"]: r["vs_dp"] for r in parsed}["gpt-tp4"] == "0.6"


def test_the_report_carries_the_ratios_and_a_bad_reference_is_bad_input(tmp_path, capsys):
    from toolkit import collect
    from toolkit.analysis.summary import summarize
    from toolkit.report.markdown import build_sections
    from toolkit.results.layout import MARKER_FILE

    rows = matrix_rows()
    first, _ = build_sections(summarize(rows), rows,
                              layout_reference=load_layout_reference(None))
    (gpt,) = [ts for ts in first if ts.key == "gpt"]
    cells = {r[1]: r[-2:] for r in gpt.tables[0].rows if r[0] == "--"}
    assert cells["gpt-tp4"] == ["0.600 ▼", "0.651 (1x8x1 at 8)"]
    assert {r["case"]: r["layout_verdict"] for r in gpt.records}["gpt-2x2"] == \
        "below the reference within the noise"
    bad = tmp_path / "layouts.csv"
    bad.write_text("framework,model,precision\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / MARKER_FILE).write_text("")
    assert collect.main([str(results), "--layout-reference", str(bad), "--no-store"]) == 2
    assert f"{bad}: missing column(s)" in capsys.readouterr().err
    assert [f.name for f in results.iterdir()] == [MARKER_FILE]  # nothing written


def test_a_case_without_runs_or_without_a_reference_layout_says_why(tmp_path):
    from toolkit.analysis.layouts import DLPERF_GPT_REFERENCE

    # the seeds' table without its pipelined rows: nothing to hold a pipeline against
    lines = DLPERF_GPT_REFERENCE.read_text().splitlines()
    subset = tmp_path / "no_pp.csv"
    subset.write_text("\n".join(line for line in lines if "PP_" not in line) + "\n")
    failed = gpt_case("gpt-tp4-failed", gpus=4, tp=4, bs=16)
    rows = [*matrix_rows(), row(failed, None, status="failed", error="OOM")]
    table = report_gpt.gpt_table(rows, reference=load_layout_reference(subset))
    recs = {r["case"]: r for r in table.records}
    assert recs["gpt-pp4"]["layout_verdict"] == "no reference"
    assert recs["gpt-pp4"]["vs_dp"] == pytest.approx(48.0 / 45.0)  # still against dp
    assert recs["gpt-tp4-failed"]["layout_verdict"] == "no ok run"
    cells = {r[1]: r[-2:] for r in table.rows if r[0] == "--"}
    assert cells["gpt-pp4"] == ["1.067", "-"]
    assert cells["gpt-tp4-failed (1 failed)"] == ["-", "0.651 (1x8x1 at 8)"]
    assert "`-`: no ok run of gpt-tp4-failed." in table.markdown
    assert ("`-`: the reference has no layout of that kind for gpt-2x1x2, gpt-pp4."
            in table.markdown)
    assert f"`{subset}`" in table.markdown


def test_a_ratio_one_of_whose_sides_measured_contention_is_marked_and_says_which_side():
    rows = matrix_rows()
    for r in rows:
        if r["case_id"] == "gpt-dp4" and r["repeat"] == 0:  # the dp side of tp4 and 2x2
            r["oversubscribed"] = "4 ranks on 2 CPUs"
        if r["case_id"] == "gpt-2x1x2":  # a layout's own side
            r["host_crowded"] = "other processes took 40% of host vm's CPU time"
    table = report_gpt.gpt_table(rows, reference=load_layout_reference(None))
    recs = {r["case"]: r for r in table.records}
    cells = {r[1]: r[-2] for r in table.rows if r[0] == "--"}
    assert cells["gpt-tp4"] == "0.600 ▼ †" and recs["gpt-tp4"]["vs_dp_contended"] == "dp"
    assert cells["gpt-2x2"] == "0.765 ≈ †"
    assert cells["gpt-2x1x2"] == "0.844 ▼? †"
    assert recs["gpt-2x1x2"]["vs_dp_contended"] == "layout"
    # neither side of pp4's ratio (over gpt-dp4-bs8) was flagged; a dp case is no ratio
    assert cells["gpt-pp4"] == "1.067" and recs["gpt-pp4"]["vs_dp_contended"] == ""
    assert cells["gpt-dp4"] == "dp"
    assert ("- † on vs dp at N GPUs: a side of the ratio measured contention (its runs "
            "oversubscribed or crowded), so the ratio is not the layouts' alone: gpt-tp4: the "
            "dp side (gpt-dp4, 1 oversubscribed of 3 run(s)); gpt-2x2: the dp side (gpt-dp4, 1 "
            "oversubscribed of 3 run(s)); gpt-2x1x2: the layout's side (gpt-2x1x2, 1 crowded "
            "of 1 run(s)).") in table.notes
    parsed = list(csv.DictReader(io.StringIO(to_csv(table.records, report_gpt.CSV_COLUMNS))))
    assert {r["case"]: r["vs_dp_contended"] for r in parsed}["gpt-tp4"] == "dp"


def test_without_contention_no_ratio_is_marked():
    table = report_gpt.gpt_table(matrix_rows(), reference=load_layout_reference(None))
    assert not any("†" in r[-2] for r in table.rows)
    assert "on vs dp at N GPUs" not in table.notes


def test_tensor_parallel_groups_that_span_nodes_are_named():
    inside = gpt_case("gpt-2x2-nodes", gpus=2, nodes=2, tp=2)  # each tp pair on one node
    across = gpt_case("gpt-tp4-nodes", gpus=2, nodes=2, tp=4)  # every tp group on both nodes
    one_node = gpt_case("gpt-tp4", gpus=4, tp=4)
    table = report_gpt.gpt_table([row(c, 1.0) for c in (inside, across, one_node)])
    flags = {r["case"]: r["tp_across_nodes"] for r in table.records}
    assert flags == {"gpt-2x2-nodes": False, "gpt-tp4-nodes": True, "gpt-tp4": False}
    assert "- tensor parallelism across nodes: gpt-tp4-nodes (dp x tp x pp 1x4x1, 4 GPUs)" \
        in table.notes
    assert "gpt-2x2-nodes (" not in table.notes
    plain = report_gpt.gpt_table([row(inside, 1.0)])
    assert "tensor parallelism across nodes" not in plain.notes
