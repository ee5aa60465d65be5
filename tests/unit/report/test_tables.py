"""The report's table shapes, checked against published benchmark tables where one exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolkit.analysis.summary import SummaryRow, summarize
from toolkit.report.markdown import build_sections, gpt_sections, md_table, render_markdown
from toolkit.report.tables import (
    all_results,
    failed_runs,
    frameworks,
    gpu_memory,
    per_batch_size,
    skipped_files,
    spread_note,
)

SEEDS = Path(__file__).resolve().parents[2] / "data" / "seeds"


def run(nodes: int, gpn: int, bs: int, tput: float | None, *, fw: str = "oneflow",
        model: str = "resnet50", precision: str = "fp32", variant: str = "",
        memory: float | None = None, status: str = "ok", repeat: int = 0,
        **extra: Any) -> dict[str, Any]:
    return {"framework": fw, "model": model, "precision": precision, "variant": variant,
            "num_nodes": nodes, "gpus_per_node": gpn, "batch_size_per_device": bs,
            "throughput_sps": tput, "status": status, "peak_memory_mib": memory,
            "case_id": f"{model}-{fw}-{precision}-{nodes}n{gpn}g-bs{bs}", "repeat": repeat,
            **extra}


# Seed 003 (OneFlow ResNet50-V1.5 report, 2020-08-08): node num, gpus/node, memory, throughput,
# speedup, for batch 128 and 160.
SEED_003 = {
    128: [(1, 1, 12565, 383.760, 1), (1, 2, 12839, 747.295, 1.95), (1, 4, 12987, 1497.618, 3.90),
          (1, 8, 13051, 2942.321, 7.67), (2, 8, 12871, 5839.054, 15.22),
          (4, 8, 12871, 11548.451, 30.09)],
    160: [(1, 1, 15509, 382.324, 1), (1, 2, 15785, 755.956, 1.98), (1, 4, 15881, 1494.733, 3.91),
          (1, 8, 15701, 3016.431, 7.89), (2, 8, 15817, 5877.289, 15.37),
          (4, 8, 15879, 11623.889, 30.40)],
}


def test_gpu_memory_table_reproduces_the_oneflow_benchmark_table() -> None:
    runs = [run(n, g, bs, t, memory=m) for bs, rows in SEED_003.items()
            for n, g, m, t, _ in rows]
    ts = gpu_memory(summarize(runs))
    assert [t.header for t in ts.tables] == [
        ["node num", "gpus/nodes", "gpu num", "bsz/gpu", "GPU Memory Usage", "Throughput",
         "Speedup"]] * 2
    for table in ts.tables:
        bs = int(table.title.split("batch size per device = ")[1].split(",")[0])
        assert "dtype = fp32" in table.title
        for cells, (n, g, m, t, speedup) in zip(table.rows, SEED_003[bs], strict=True):
            assert cells[:6] == [str(n), str(g), str(n * g), str(bs), str(m), f"{t:.3f}"]
            assert float(cells[6]) == pytest.approx(speedup, abs=0.005)
    assert len(ts.records) == 12
    (record,) = [r for r in ts.records if (r["batch_size_per_device"], r["gpus"]) == (128, 2)]
    assert record["peak_memory_mib"] == 12839 and record["throughput_sps"] == 747.295


def test_gpu_memory_table_only_where_memory_was_measured() -> None:
    ts = gpu_memory(summarize([run(1, 1, 8, 10.0), run(1, 2, 8, 19.0)]))
    assert ts.tables == [] and "no GPU memory measured" in ts.empty_note


def seed_000_runs() -> list[dict[str, Any]]:
    runs = []
    for line in (SEEDS / "bert_base_fp32_0822_all_results.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].isdigit():
            runs.append(run(int(cells[0]), int(cells[1]), int(cells[2]), float(cells[3]),
                            model="bert_base", repeat=len(runs)))
    return runs


def test_per_batch_size_table_is_the_seeds_table() -> None:
    published: dict[str, list[list[str]]] = {}
    bs = ""
    for line in (SEEDS / "bert_base_fp32_0822_published.md").read_text().splitlines():
        if line.startswith("### batch size"):
            bs = line.split("=")[1].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].isdigit():
            published.setdefault(bs, []).append(cells)
    ts = per_batch_size(summarize(seed_000_runs()))
    tables = {t.title.rsplit("= ", 1)[1]: t for t in ts.tables}
    assert set(tables) == {"96", "64", "32", "24", "48"}
    for bs, rows in published.items():
        table = tables[bs]
        assert table.header == ["num_nodes", "gpu_num_per_node", "batch_size_per_device",
                                "throughput", "speedup"]  # no FLOP columns: none known
        assert table.title == f"bert_base oneflow fp32, batch size = {bs}"
        for cells, want in zip(table.rows, rows, strict=True):
            assert cells[:3] == want[:3]
            assert float(cells[3]) == pytest.approx(float(want[3]), abs=0.05)
            assert cells[4] == f"{float(want[4]):.2f}"
    assert tables["48"].rows == [["4", "8", "48", "4103.6", "missing"]]


def test_flop_columns_appear_where_known() -> None:
    runs = [run(1, 1, 256, 4700.0, tflops_per_gpu=114.2, mfu=0.1155),
            run(1, 2, 256, 9200.0, tflops_per_gpu=111.8, mfu=0.113)]
    (table,) = per_batch_size(summarize(runs)).tables
    assert table.header[-2:] == ["TFLOP/s per GPU", "MFU %"]
    assert table.rows[0][-2:] == ["114.20", "11.6"]
    record = per_batch_size(summarize(runs)).records[1]
    assert record["tflops_per_gpu"] == 111.8 and record["mfu"] == 0.113


def test_framework_pivot_puts_frameworks_side_by_side() -> None:
    runs = [run(1, 1, 128, 380.0, memory=12000.0), run(1, 8, 128, 2900.0, memory=12500.0),
            run(1, 1, 128, 360.0, fw="torch"), run(1, 8, 128, 2800.0, fw="torch"),
            run(2, 8, 128, 5500.0, fw="torch"),
            run(1, 1, 64, 300.0, fw="torch")]  # one framework at bs 64: no pivot for it
    ts = frameworks(summarize(runs))
    (table,) = ts.tables
    assert table.title == "resnet50 fp32, batch size = 128"
    assert table.header == ["num_nodes", "gpu_num_per_node", "batch_size_per_device",
                            "oneflow samples/s", "torch samples/s", "oneflow speedup",
                            "torch speedup", "oneflow memory (MiB)", "torch memory (MiB)"]
    assert table.rows == [["1", "1", "128", "380.0", "360.0", "1.00", "1.00", "12000", "missing"],
                          ["1", "8", "128", "2900.0", "2800.0", "7.63", "7.78", "12500",
                           "missing"],
                          ["2", "8", "128", "", "5500.0", "", "15.28", "", "missing"]]
    assert ts.records[2]["oneflow throughput_sps"] is None
    assert ts.records[2]["torch speedup"] == pytest.approx(5500 / 360)


def test_framework_pivot_keeps_variants_apart() -> None:
    runs = [run(1, 1, 8, 10.0, fw="torch", variant="seq_len=128"),
            run(1, 1, 8, 5.0, fw="torch", variant="seq_len=512"),
            run(1, 1, 8, 9.0, fw="oneflow", variant="seq_len=128")]
    (table,) = frameworks(summarize(runs)).tables
    assert table.header[3:6] == ["oneflow samples/s", "torch [1] samples/s",
                                 "torch [2] samples/s"]
    assert table.rows[0][3:6] == ["9.0", "10.0", "5.0"]
    assert "torch [2]: `seq_len=512`" in table.note


def test_one_framework_gives_no_pivot_and_says_why() -> None:
    ts = frameworks(summarize([run(1, 1, 8, 10.0)]))
    assert ts.tables == [] and "one framework" in ts.empty_note


def test_all_results_and_failures() -> None:
    runs = [*seed_000_runs()[:3],
            run(1, 8, 96, None, model="bert_base", status="failed", error="rank 3: OOM\nx")]
    ts = all_results(runs)
    (table,) = ts.tables
    assert table.title == "All Results: bert_base oneflow fp32"
    assert table.rows == [["1", "1", "96", "149.9"], ["1", "1", "96", "149.8"],
                          ["1", "1", "96", "149.8"]]
    assert len(ts.records) == 4  # the CSV has every run, failed included
    # its start-up, compile and exit figures among them (absent from an imported log: None)
    assert {"start_to_first_iteration_s", "compile_s", "exit_s"} <= set(ts.records[0])
    timed = all_results([{**runs[0], "exit_s": 1.2}])
    assert timed.records[0]["exit_s"] == 1.2
    (failed,) = failed_runs(runs).tables
    assert failed.rows == [["bert_base-oneflow-fp32-1n8g-bs96", "0", "failed", "rank 3: OOM x"]]
    assert failed_runs(runs[:3]).tables == []


def test_markdown_has_every_section_and_escapes_pipes() -> None:
    runs = seed_000_runs()
    first, rest = build_sections(summarize(runs), runs,
                                 skipped=[("1n1g/x.log", "oneflow_cnn: damaged | log")])
    text = render_markdown("Seeds", ["a note"], first, rest)
    for heading in ("## Throughput and speedup (median of repeats)",
                    "## GPU memory (OneFlow-Benchmark table)", "## Frameworks side by side",
                    "## Summary", "## All Results", "### All Results: bert_base oneflow fp32",
                    "## Log files not imported"):
        assert heading in text
    assert "| 1n1g/x.log | oneflow_cnn: damaged \\| log |" in text
    assert "- a note" in text
    assert md_table(["a|b"], [["c"]]).splitlines()[0] == "| a\\|b |"


def test_gpt_section_only_for_gpt_runs() -> None:
    runs = [run(1, 1, 2, 4.9, model="gpt")]
    sections = gpt_sections(summarize(runs), runs)
    assert [s.key for s in sections] == ["gpt"]
    assert sections[0].tables[0].header[:2] == ["group", "case"]
    assert len(sections[0].records) == 1
    plain = [run(1, 1, 2, 4.9)]
    assert gpt_sections(summarize(plain), plain) == []


def test_skipped_files_table() -> None:
    ts = skipped_files([("a.log", "empty file")])
    assert ts.tables[0].rows == [["a.log", "empty file"]]
    assert ts.records == [{"file": "a.log", "reason": "empty file"}]
    assert skipped_files([]).tables == []


def test_the_spread_note_tells_flagged_cases_of_several_groups_apart():
    def row(model: str, variant: str = "") -> SummaryRow:
        return SummaryRow("torch", model, "fp32", variant, 1, 1, 8, 2, 0, 100.0, 90.0, 110.0,
                          100.0, 1.0, 1.0, None, "", throughput_spread=0.2)

    note = spread_note([row("bert_base"), row("resnet50")], 0.05)
    assert note.endswith(": bert_base torch fp32 1n1g bs8: 20.0% over 2 repeats; "
                         "resnet50 torch fp32 1n1g bs8: 20.0% over 2 repeats")
    note = spread_note([row("resnet50", "data=synthetic"), row("resnet50", "data=dali")], 0.05)
    assert "resnet50 torch fp32 1n1g bs8 (data=synthetic): 20.0%" in note
    assert "resnet50 torch fp32 1n1g bs8 (data=dali): 20.0%" in note


def test_tables_say_per_case_how_the_model_ran_and_its_start_up() -> None:
    from toolkit.report.tables import summary as summary_table

    rows = [run(1, 1, 8, 100.0, fw="torch", repeat=0, compile="compiled",
                start_to_first_iteration_s=70.0, compile_s=60.0),
            run(1, 1, 8, 101.0, fw="torch", repeat=1, compile="compiled",
                start_to_first_iteration_s=12.0, compile_s=3.0),
            run(1, 1, 16, 50.0, fw="torch", compile="eager", start_to_first_iteration_s=5.0,
                compile_s=0.0)]
    summary = summarize(rows)
    (bs16, bs8) = per_batch_size(summary).tables
    assert bs8.header[-1] == "compile" and bs8.rows[0][-1] == "compiled"
    assert bs16.rows[0][-1] == "eager"
    (table,) = summary_table(summary).tables
    cells = {r[0]: dict(zip(table.header, r, strict=True)) for r in table.rows}
    eight = cells["resnet50-torch-fp32-1n1g-bs8"]
    assert (eight["compile"], eight["to 1st iteration s"], eight["compile s"]) == \
        ("compiled", "41.0 (70.0)", "31.5")
    assert cells["resnet50-torch-fp32-1n1g-bs16"]["to 1st iteration s"] == "5.0"
    assert "from the run's launch to the end of its first iteration" in table.note
    # OneFlow rows do not say: no compile column in their tables
    (plain,) = per_batch_size(summarize([run(1, 1, 8, 100.0)])).tables
    assert "compile" not in plain.header


def test_profiled_runs_get_a_kernel_time_table() -> None:
    from toolkit.report.tables import profiles

    rows = [run(1, 1, 8, 100.0, fw="torch", repeat=0),
            run(1, 1, 8, 100.0, fw="torch", repeat=1, profile_rank=0, profile_step_ms=40.0,
                profile_gemm_conv_ms=20.0, profile_attention_ms=0.0,
                profile_norm_elementwise_ms=14.0, profile_communication_ms=0.0,
                profile_optimizer_ms=2.0, profile_other_ms=0.0, profile_idle_ms=4.0)]
    (table,) = profiles(rows).tables
    assert table.header == ["case", "repeat", "rank", "step ms", "GEMM/conv %", "attention %",
                            "norm/elementwise %", "communication %", "optimizer %", "other %",
                            "idle %"]
    assert table.rows == [["resnet50-torch-fp32-1n1g-bs8", "1", "0", "40.0", "50.0", "0.0",
                           "35.0", "0.0", "5.0", "0.0", "10.0"]]
    assert profiles(rows[:1]).tables == []  # nothing profiled: no section
    first, _ = build_sections(summarize(rows), rows)
    assert "profiles" in [ts.key for ts in first]
    # with profiles.csv's rows, a line for each profiled rank of the run
    lowest = {k: v for k, v in rows[1].items() if k.startswith("profile_")}
    ranks = [{"case_id": rows[1]["case_id"], "repeat": 1, "rank": 0, **lowest},
             {"case_id": rows[1]["case_id"], "repeat": 1, "rank": 1, **lowest,
              "profile_step_ms": 50.0, "profile_idle_ms": 14.0}]
    (table,) = profiles(rows, ranks).tables
    assert [r[2:4] for r in table.rows] == [["0", "40.0"], ["1", "50.0"]]
    assert table.rows[1][-1] == "28.0"  # idle: 14 of 50 ms


def test_oversubscribed_and_superlinear_figures_are_marked_in_every_table() -> None:
    why = "ran at the same time as x r0 on vm (CPUs 0-1, 9.0 s overlap)"
    runs = [run(1, 1, 4, 5.2, fw="torch", memory=100.0, oversubscribed=why),
            run(1, 2, 4, 40.9, fw="torch", memory=100.0, oversubscribed=""),
            run(1, 1, 4, 30.0, memory=100.0), run(1, 2, 4, 50.0, memory=100.0)]
    summary = summarize(runs)
    first, rest = build_sections(summary, runs)
    sections = {ts.key: ts for ts in (*first, *rest)}
    text = render_markdown("t", [], first, rest)

    def table(key: str, fw: str = "torch") -> Any:
        return next(t for t in sections[key].tables if fw in t.title or key in ("summary",
                                                                                "frameworks"))

    main = table("per_batch_size")
    assert main.rows == [["1", "1", "4", "5.2 †", "1.00"], ["1", "2", "4", "40.9", "7.87 ‡"]]
    assert "† oversubscribed: ranks shared their CPUs" in main.note
    assert "resnet50 torch fp32 1n1g bs4: 1 of 1 run(s)" in main.note
    assert "‡ scaling efficiency above 1: resnet50 torch fp32 1n2g bs4: efficiency 3.933 > 1 " \
           "(superlinear); likely a slow baseline: 1 of the 1-GPU baseline's runs were " \
           "oversubscribed" in main.note
    assert table("gpu_memory").rows[0][5] == "5.200 †"
    assert table("gpu_memory").rows[1][6] == "7.87 ‡"
    pivot = table("frameworks").rows
    assert pivot[0][3:] == ["30.0", "5.2 †", "1.00", "1.00", "100", "100"]
    assert pivot[1][5:7] == ["1.67", "7.87 ‡"]
    summary_row = next(r for r in table("summary").rows if r[0].endswith("1n2g-bs4")
                       and r[1] == "2" and r[3] == "40.9")
    assert summary_row[7:9] == ["7.87 ‡", "3.933 ‡"]
    everything = table("all_results")
    assert everything.rows[0][3] == "5.2 †" and why in everything.note
    assert text.count("† oversubscribed") >= 5


CROWDED_WHY = ("other processes took 60% of host vm's CPU time while its ranks trained (the "
               "host 100% busy: rule, busy >= 90% and others >= 10%)")


def test_a_crowded_figure_is_marked_in_every_table_with_its_reason() -> None:
    # the 2-rank case measured while another process took the 2-CPU host; its own ranks each
    # had a CPU (not oversubscribed), so only host_crowded says so
    runs = [run(1, 1, 4, 30.0, fw="torch", memory=100.0),
            run(1, 2, 4, 41.0, fw="torch", memory=100.0, host_crowded=CROWDED_WHY),
            run(1, 2, 4, 43.0, fw="torch", memory=100.0, host_crowded="", repeat=1),
            run(1, 1, 4, 30.0, memory=100.0), run(1, 2, 4, 50.0, memory=100.0)]
    summary = summarize(runs)
    two = next(s for s in summary if s.framework == "torch" and s.gpus == 2)
    assert (two.runs_crowded, two.runs_oversubscribed) == (1, 0)
    first, rest = build_sections(summary, runs)
    sections = {ts.key: ts for ts in (*first, *rest)}

    def table(key: str) -> Any:
        return next(t for t in sections[key].tables if "torch" in t.title or key in (
            "summary", "frameworks"))

    words = ("† crowded: other processes, none of the run's ranks, took CPU time of a "
             "saturated host while it trained, so the figure is low by what they took "
             "(runs.csv column `host_crowded` says how much)")
    main = table("per_batch_size")
    assert main.rows == [["1", "1", "4", "30.0", "1.00"], ["1", "2", "4", "42.0 †", "1.40"]]
    assert f"{words}: resnet50 torch fp32 1n2g bs4: 1 of 2 run(s)" in main.note
    assert "oversubscribed" not in main.note
    record = next(r for r in sections["per_batch_size"].records
                  if r["framework"] == "torch" and r["gpus"] == 2)
    assert record["runs_crowded"] == 1
    assert table("gpu_memory").rows[1][5] == "42.000 †"
    assert table("frameworks").rows[1][4] == "42.0 †"
    summary_row = next(r for r in table("summary").rows if r[0].endswith("torch-fp32-1n2g-bs4"))
    assert summary_row[3] == "42.0 †" and words in table("summary").note
    everything = table("all_results")
    assert [r[3] for r in everything.rows] == ["30.0", "41.0 †", "43.0"]
    assert f"{words}: resnet50-torch-fp32-1n2g-bs4 r0: {CROWDED_WHY}" in everything.note
    assert next(r for r in sections["all_results"].records
                if r["repeat"] == 0 and r["gpus_per_node"] == 2
                and r["framework"] == "torch")["host_crowded"] == CROWDED_WHY


def test_a_superlinear_speedup_over_a_crowded_baseline_names_it() -> None:
    # the quickstart's own table on the shared 2-CPU machine: the 1-GPU baseline measured while
    # other processes took the host's CPUs, the 2-GPU case not
    why = ("other processes took 60% of host vm's CPU time while its ranks trained (the host "
           "100% busy: rule, busy >= 90% and others >= 10%)")
    runs = [run(1, 1, 4, 5.0, fw="torch", host_crowded=why),
            run(1, 1, 4, 6.0, fw="torch", host_crowded=why, repeat=1),
            run(1, 2, 4, 59.0, fw="torch", host_crowded="")]
    two = next(s for s in summarize(runs) if s.gpus_per_node == 2)
    assert two.superlinear.startswith(
        "efficiency 5.364 > 1 (superlinear); likely the sides ran differently: the 1-GPU side "
        "was crowded: other processes took a share not recorded of its host's CPU time in 2 of "
        "2 run(s) (runs.csv host_crowded), the 2-GPU side was not crowded; ")
    assert "cache effects" not in two.superlinear


def test_a_superlinear_speedup_names_sides_that_ran_on_other_thread_counts() -> None:
    # on CPU each rank takes the host's CPUs over its ranks: 2 threads alone, 1 each at 2 ranks
    runs = [run(1, 1, 4, 5.0, fw="torch", device="cpu (2 threads)", threads_per_rank=2),
            run(1, 2, 4, 27.0, fw="torch", device="cpu (1 threads)", threads_per_rank=1)]
    two = next(s for s in summarize(runs) if s.gpus_per_node == 2)
    assert two.superlinear == (
        "efficiency 2.700 > 1 (superlinear); likely the sides ran differently: the 1-GPU side "
        "ran 2 threads per rank, the 2-GPU side 1")  # named, instead of cache effects
    other_device = [run(1, 1, 4, 5.0, fw="torch", device="cpu (2 threads)"),
                    run(1, 2, 4, 27.0, fw="torch", device="Tesla V100-SXM2-16GB")]
    assert "the 1-GPU side ran on cpu (2 threads), the 2-GPU side on Tesla V100-SXM2-16GB" \
        in next(s for s in summarize(other_device) if s.gpus_per_node == 2).superlinear
    alike = [run(1, 1, 4, 5.0, fw="torch", device="cpu (1 threads)"),
             run(1, 2, 4, 27.0, fw="torch", device="cpu (1 threads)")]
    assert "ran differently" not in next(
        s for s in summarize(alike) if s.gpus_per_node == 2).superlinear
