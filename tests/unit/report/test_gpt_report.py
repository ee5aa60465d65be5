"""The GPT table (toolkit.report.gpt) on run rows built the way toolkit.results.runs builds them."""

from __future__ import annotations

import csv
import io

import pytest

from parsers.rows import RunRow
from toolkit import gpt_table
from toolkit.analysis.flops import achieved
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
    assert table.markdown.splitlines()[4].startswith(
        "| group | case | latency | memory | throughput (samples/s) | TFLOP/s per GPU | % of peak"
        " | compile |")
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
    assert table.rows[-1][-1] == shown


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
    assert lines.index("| DP |  |  |  |  |  |  |  |") < lines.index("| MP |  |  |  |  |  |  |  |") \
        < lines.index("| PP |  |  |  |  |  |  |  |")
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
