"""Speedups of parallel layouts: a tp, pp or micro-batched case is measured against the one-GPU
case of the same model and work (never "missing" for want of an identical variant), names its
baseline, says where the two sides ran differently, and the tables tell layouts apart."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.analysis.summary import model_variant, summarize
from toolkit.report.tables import all_results, per_batch_size, summary

SIZE = "hidden_size=1536,num_layers=16,data=synthetic"


def run(case_id: str, gpus: int, sps: float, *, bs: int = 16, mbs: int | None = None,
        tp: int = 1, pp: int = 1, extra: str = "", compile_: str = "compiled",
        name: str | None = None) -> dict[str, Any]:
    mbs = mbs or bs
    bits = [SIZE, *(f"{k}={v}" for k, v in (("tp", tp), ("pp", pp)) if v > 1)]
    if mbs != bs:
        bits.append(f"mbs={mbs}")
    if pp > 1:
        bits.append("schedule=1f1b")
    row = {"case_id": case_id, "repeat": 0, "status": "ok", "framework": "torch",
           "model": "gpt", "precision": "amp_bf16", "num_nodes": 1, "gpus_per_node": gpus,
           "batch_size_per_device": bs, "dp": gpus // (tp * pp), "tp": tp, "pp": pp,
           "micro_batch_size": mbs, "throughput_sps": sps, "compile": compile_,
           "variant": ",".join(bits) + extra}
    if name:
        row["name"] = name
    return row


def test_model_variant_drops_the_layout_keys_only():
    assert model_variant(f"{SIZE},tp=2,mbs=8,schedule=1f1b,dp_kind=fsdp") == SIZE
    assert model_variant(f"{SIZE},pp=2,mbs=2,schedule=interleaved_1f1b,vstages=2") == SIZE
    assert model_variant(f"{SIZE},compile=False") == f"{SIZE},compile=False"


def test_tp_and_pp_speedups_are_against_the_one_gpu_case_of_the_same_model_and_work():
    rows = summarize([
        run("one", 1, 65.0), run("dp", 2, 126.0), run("tp", 2, 90.0, tp=2),
        run("one-128", 1, 66.0, bs=128), run("one-128-mb8", 1, 60.0, bs=128, mbs=8),
        run("pp", 2, 118.0, bs=128, mbs=8, pp=2),
        run("other-size", 2, 50.0, tp=2, extra=",num_heads=32"),
    ])
    by_id = {r.case_ids: r for r in rows}
    assert by_id["dp"].speedup == pytest.approx(126 / 65) and by_id["dp"].baseline_case == "one"
    assert by_id["tp"].speedup == pytest.approx(90 / 65) and by_id["tp"].baseline_case == "one"
    assert by_id["tp"].scaling_efficiency == pytest.approx(90 / 65 / 2)
    # the one-GPU case of the same micro-batch size is preferred over a faster one
    assert by_id["pp"].baseline_case == "one-128-mb8"
    assert by_id["pp"].speedup == pytest.approx(118 / 60)
    # another model size has no one-GPU case: missing, never 1.0
    assert by_id["other-size"].speedup is None and by_id["other-size"].baseline_case == ""
    assert (by_id["tp"].layout, by_id["pp"].layout) == ("1x2x1", "1x1x2")
    assert by_id["pp"].micro_batches == 16 and by_id["pp"].split and not by_id["dp"].split


def test_without_the_same_micro_batch_the_fastest_one_gpu_case_is_the_baseline():
    rows = summarize([run("slow", 1, 60.0, bs=128, mbs=4), run("fast", 1, 66.0, bs=128),
                      run("pp", 2, 118.0, bs=128, mbs=8, pp=2)])
    pp = next(r for r in rows if r.case_ids == "pp")
    assert pp.baseline_case == "fast" and pp.speedup == pytest.approx(118 / 66)


def test_a_speedup_says_where_the_two_sides_ran_differently():
    rows = summarize([run("one", 1, 5750.0, compile_="compiled (reduce-overhead)"),
                      run("two", 2, 11000.0, compile_="compiled"),
                      run("same", 2, 11200.0, compile_="compiled (reduce-overhead)",
                          extra=",x=1")])
    two = next(r for r in rows if r.case_ids == "two")
    assert two.speedup_note == ("the 1-GPU side ran compiled (reduce-overhead), the 2-GPU "
                                "side compiled")
    text = "\n".join(t.note for t in per_batch_size(rows).tables)
    assert "the 1-GPU side ran compiled (reduce-overhead), the 2-GPU side compiled" in text
    assert next(r for r in rows if r.case_ids == "one").speedup_note == ""


def test_tables_show_the_layout_and_the_name_of_each_case():
    runs = [run("one", 1, 65.0, name="DP_1x1x1"), run("tp", 2, 90.0, tp=2, name="MP_1x2x1"),
            run("dp", 2, 126.0)]
    rows = summarize(runs)
    (table,) = per_batch_size(rows).tables  # one model: one table for every layout
    assert table.header[:6] == ["case", "num_nodes", "gpu_num_per_node",
                                "batch_size_per_device", "dp x tp x pp", "micro-batch"]
    assert [c[0] for c in table.rows] == ["DP_1x1x1", "-", "MP_1x2x1"]
    assert [c[4] for c in table.rows] == ["1x1x1", "2x1x1", "1x2x1"]
    assert [c[7] for c in table.rows] == ["1.00", "1.94", "1.38"]
    (s,) = summary(rows).tables
    assert s.header[:2] == ["case", "layout"] and "1x2x1" in [c[1] for c in s.rows]
    (a,) = all_results(runs).tables
    assert "dp x tp x pp" in a.header and a.header[0] == "case"
    assert sorted(c[0] for c in a.rows) == ["-", "DP_1x1x1", "MP_1x2x1"]


def test_a_plain_data_parallel_table_keeps_the_reports_shape():
    rows = summarize([run("one", 1, 65.0), run("dp", 2, 126.0)])
    (table,) = per_batch_size(rows).tables
    assert table.header[:5] == ["num_nodes", "gpu_num_per_node", "batch_size_per_device",
                                "throughput", "speedup"]


@pytest.mark.parametrize("summary_record,label", [
    ({"run_options": {"compile": True, "torch_compile_mode": None}}, "compiled"),
    ({"run_options": {"compile": True, "torch_compile_mode": "reduce-overhead",
                      "kernel_tuning": True}}, "compiled (reduce-overhead, tuned kernels)"),
    ({"run_options": {"compile": True}, "compile_scope": "model and loss, one graph"},
     "compiled"),
    ({"run_options": {"compile": True}, "compile_scope": "each layer, and the loss"},
     "compiled (layer by layer)"),
    ({"run_options": {"compile": False}}, "eager"),
])
def test_how_a_run_compiled_says_when_its_model_was_not_one_graph(summary_record, label):
    from toolkit.results.runs import compile_label

    assert compile_label(summary_record) == label


def test_a_tp_speedup_says_its_layers_compiled_one_by_one():
    rows = summarize([run("one", 1, 65.0), run("tp", 2, 90.0, tp=2,
                                                compile_="compiled (layer by layer)")])
    tp = next(r for r in rows if r.case_ids == "tp")
    assert tp.speedup_note == ("the 1-GPU side ran compiled, the 2-GPU side compiled (layer by "
                               "layer)")


def test_a_run_row_carries_the_stages_per_rank_of_an_interleaved_pipeline(tmp_path):
    """The summary reads v from the run rows (the bubble divides by it); a case without an
    interleaved pipeline adds no column."""
    from toolkit.results.runs import read_run
    from toolkit.spec import Case, from_plain, resolve

    def case(**kw: Any) -> Case:
        return resolve(from_plain(Case, {
            "model": "gpt", "gpus_per_node": 2, "batch_size_per_device": 4,
            "parallel": {"pp": 2, "micro_batch_size": 1},
            "model_config": {"hidden_size": 64, "num_heads": 4, "num_layers": 8,
                             "vocab_size": 128, "seq_len": 16}, **kw}, ""))

    interleaved = read_run(tmp_path, "c", case(pipeline_schedule="interleaved_1f1b",
                                               pipeline_stages_per_rank=4), 0)
    assert interleaved.to_dict()["pipeline_stages_per_rank"] == 4
    assert "pipeline_stages_per_rank" not in read_run(tmp_path, "c", case(), 0).to_dict()
