"""The report's "Where the efficiency went": one row per multi-GPU case with its efficiency, the
profiled split where both sides were profiled (else what to add to the grid), of its slowest
rank, a line per rank where more than one was profiled, and a plot."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.analysis.kernels import (
    COMMUNICATION,
    EXPOSED_COMMUNICATION,
    GEMM_CONV,
    IDLE,
    column,
    trace_kernels,
)
from toolkit.analysis.kernels import breakdown as kernel_breakdown
from toolkit.analysis.summary import summarize
from toolkit.report.markdown import build_sections, render_markdown
from toolkit.report.scaling import (
    PARTS,
    RANK_MARK,
    breakdown_plot,
    breakdowns,
    draw_breakdown,
    efficiency_section,
    rank_label,
)


def run(case_id: str, gpus: int, sps: float, *, tp: int = 1, step: float | None = None,
        idle: float = 2.0, comm: float = 0.0, exposed: float = 0.0) -> dict[str, Any]:
    row: dict[str, Any] = {
        "case_id": case_id, "repeat": 0, "status": "ok", "framework": "torch", "model": "gpt",
        "precision": "amp_bf16", "num_nodes": 1, "gpus_per_node": gpus,
        "batch_size_per_device": 16, "dp": gpus // tp, "tp": tp, "pp": 1,
        "micro_batch_size": 16, "throughput_sps": sps, "compile": "compiled",
        "variant": "hidden_size=64" + (f",tp={tp}" if tp > 1 else ""),
        "parameters": 1_000_000}
    if step is not None:
        row.update({"profile_step_ms": step, column(IDLE): idle,
                    column(COMMUNICATION): comm, column(EXPOSED_COMMUNICATION): exposed})
    return row


def test_every_multi_gpu_case_gets_a_row_and_the_profiled_ones_a_split(tmp_path: Path):
    runs = [run("one", 1, 64.0, step=250.0), run("dp", 2, 124.0, step=258.0, comm=40.0,
                                                 exposed=3.0),
            run("tp", 2, 90.0, tp=2)]
    summary = summarize(runs)
    (table,) = efficiency_section(summary, runs, bus_bw_gbps=300.0).tables
    rows = {r[1]: r for r in table.rows}
    dp, tp = rows["2x1x1"], rows["1x2x1"]
    assert dp[3] == "0.969"  # 124 / 64 / 2
    assert dp[5:8] == ["258.0", "250.0", "0.969"]
    assert dp[9] == "3.0"  # exposed communication
    assert dp[12] == "40.0 (0.0)"  # 4 MB over two ranks at 300 GB/s: 0.013 ms
    assert tp[3] == "0.703" and "no profile" in tp[5] and "profile: {ranks:" in tp[5]
    unprofiled = [{k: v for k, v in r.items() if not k.startswith("profile")} for r in runs]
    assert efficiency_section(summary, unprofiled).tables == []
    plot = breakdown_plot(summary, runs, tmp_path / "plots" / "b.png", tmp_path)
    assert plot is not None and plot.path.read_bytes().startswith(b"\x89PNG")
    first, _ = build_sections(summary, runs)
    assert "efficiency" in [ts.key for ts in first]


def test_one_gpu_results_have_no_efficiency_section(tmp_path: Path):
    runs = [run("one", 1, 64.0, step=250.0)]
    summary = summarize(runs)
    assert efficiency_section(summary, runs).tables == []
    assert breakdown_plot(summary, runs, tmp_path / "b.png", tmp_path) is None
    first, _ = build_sections(summary, runs)
    assert "efficiency" not in [ts.key for ts in first]


def test_the_breakdown_plot_draws_a_model_name_as_text(tmp_path: Path):
    """A `$` in a model name is a dollar sign, not matplotlib mathtext that stops the plot."""
    runs = [{**run("one", 1, 64.0, step=250.0), "model": "gpt$\\badcmd{x}$"},
            {**run("dp", 2, 124.0, step=258.0, comm=40.0), "model": "gpt$\\badcmd{x}$"}]
    plot = breakdown_plot(summarize(runs), runs, tmp_path / "b.png", tmp_path)
    assert plot is not None and plot.path.read_bytes().startswith(b"\x89PNG")


def stage(rank: int, *, compute: float, idle: float) -> dict[str, Any]:
    """profiles.csv's row of one rank of the pp = 2 run below: a 60 ms step of `compute` ms
    of GEMMs, 1 ms of exposed communication and `idle` ms of nothing (made-up figures for the
    arithmetic: the first stage computes less and waits, as a pipeline's lighter stage
    does)."""
    assert compute + 1.0 + idle == 60.0
    return {"case_id": "pp", "repeat": 0, "rank": rank, "host": "n1", "pp_rank": rank,
            "dp_rank": 0, "tp_rank": 0, "profile_steps": 3, "profile_step_ms": 60.0,
            column(GEMM_CONV): compute, column(COMMUNICATION): 2.0,
            column(EXPOSED_COMMUNICATION): 1.0, column(IDLE): idle}


def pipelined_runs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ranks = [stage(0, compute=44.0, idle=15.0), stage(1, compute=51.0, idle=8.0)]
    pp = {**run("pp", 2, 60.0), "dp": 1, "pp": 2, "micro_batch_size": 2,
          "variant": "hidden_size=64,pp=2",
          # runs.csv: the lowest profiled rank's figures, and which rank was slowest
          "profile_rank": 0, "profile_ranks": 2, "profile_slowest_rank": 1,
          **{k: v for k, v in ranks[0].items() if k.startswith("profile_")}}
    return [run("one", 1, 64.0, step=100.0), pp], ranks


def test_a_pipelined_case_is_split_on_its_slowest_stage_with_a_line_per_stage(tmp_path: Path):
    runs, ranks = pipelined_runs()
    summary = summarize(runs)
    section = efficiency_section(summary, runs, rank_profiles=ranks)
    (table,) = section.tables
    case, first, last = table.rows
    assert case[4] == "1 (slowest of 2)"
    assert first[:5] == [RANK_MARK, "", "", "", "stage 0 (rank 0)"]
    assert last[4] == "stage 1 (rank 1)"
    assert case[5:] == last[5:]  # the case's split is its slowest stage's
    # ideal: the baseline's 100 ms step x (16 / 16 / 2); 8 micro-batches of 2
    assert [r[6] for r in table.rows] == ["50.0"] * 3
    lines = {r["line"]: r for r in section.records if r["line"] == "case"}
    assert lines["case"]["rank"] == 1 and lines["case"]["profiled_ranks"] == 2
    per_rank = [r for r in section.records if r["line"] == "rank"]
    assert [(r["rank"], r["pp_rank"]) for r in per_rank] == [(0, 0), (1, 1)]
    for r in section.records:  # every line adds up as the module says
        parts = (r["slower_compute_ms"], r["exposed_communication_ms"], r["bubble_ms"],
                 r["idle_host_ms"])
        assert sum(parts) == pytest.approx(r["step_ms"] - r["ideal_ms"])
    light, heavy = per_rank
    # compute (step - idle - exposed communication) 44 / 51 ms against the baseline's share,
    # 0.5 x 98 ms; the bubble (pp - 1) / 8 of the compute, within the idle; idle/host the
    # rest of the idle beyond the baseline's share, 0.5 x 2 ms
    assert heavy["slower_compute_ms"] == pytest.approx(51.0 - 49.0)
    assert light["slower_compute_ms"] == pytest.approx(44.0 - 49.0)
    assert heavy["bubble_ms"] == pytest.approx(51.0 / 8)
    assert light["idle_host_ms"] == pytest.approx(15.0 - 44.0 / 8 - 1.0)
    text = render_markdown("t", [], [section], [])
    assert "| ↳ |" in text and "stage 1 (rank 1)" in text
    assert all(f"{p} ms" in text for p in PARTS)
    plot = breakdown_plot(summary, runs, tmp_path / "b.png", tmp_path, rank_profiles=ranks)
    assert plot is not None and plot.path.read_bytes().startswith(b"\x89PNG")


def test_one_profiled_rank_gives_no_rank_lines_and_no_profiles_gives_the_lowest():
    runs, ranks = pipelined_runs()
    summary = summarize(runs)
    (table,) = efficiency_section(summary, runs, rank_profiles=ranks[:1]).tables
    (case,) = table.rows
    assert case[4] == "0"
    # without profiles.csv's rows, runs.csv's figures (the lowest profiled rank's) are used
    (table,) = efficiency_section(summary, runs).tables
    (case,) = table.rows
    assert case[4] == "0 (lowest of 2)"
    assert case[5:] == [cell for cell in efficiency_section(summary, runs, rank_profiles=ranks)
                        .tables[0].rows[1][5:]]  # rank 0's line where the rows are there


def test_a_rank_is_named_by_its_stage_and_its_coordinates_where_they_tell_it_apart():
    rows = {r.layout: r for r in summarize([run("tp", 4, 90.0, tp=2),
                                            {**run("pp", 4, 90.0), "dp": 2, "pp": 2},
                                            {**run("both", 8, 90.0, tp=2), "dp": 2, "pp": 2},
                                            run("dp", 2, 90.0)])}
    coords = {"rank": 5, "pp_rank": 1, "dp_rank": 0, "tp_rank": 1}
    assert rank_label(coords, rows["2x2x1"]) == "rank 5 (tp 1, dp 0)"
    assert rank_label(coords, rows["2x1x2"]) == "stage 1 (dp 0, rank 5)"
    assert rank_label(coords, rows["2x2x2"]) == "stage 1 (tp 1, dp 0, rank 5)"
    assert rank_label(coords, rows["2x1x1"]) == "rank 5"
    assert rank_label({"rank": 1, "pp_rank": None}, rows["2x1x2"]) == "rank 1"


def test_an_interleaved_pipeline_shows_its_smaller_bubble():
    """pp = 2 with 8 micro-batches: 1F1B's bubble is (pp - 1) / m = 1/8 of the compute (1/9 of
    the step), interleaved over 2 stages per rank (pp - 1) / (v x m) = 1/16 (1/17)."""
    def pp_run(case_id: str, v: int) -> dict[str, Any]:
        row = {**run(case_id, 2, 100.0, step=140.0, idle=20.0, comm=2.0, exposed=1.0),
               "dp": 1, "pp": 2, "micro_batch_size": 2,
               "variant": "hidden_size=64,pp=2,mbs=2" + (f",vstages={v}" if v > 1 else "")}
        if v > 1:
            row["pipeline_stages_per_rank"] = v
        return row

    runs = [run("one", 1, 64.0, step=250.0), pp_run("plain", 1), pp_run("interleaved", 2)]
    summary = summarize(runs)
    assert {r.case_ids: r.pipeline_stages_per_rank for r in summary} == {
        "one": 1, "plain": 1, "interleaved": 2}
    section = efficiency_section(summary, runs)
    (table,) = section.tables
    assert len(table.rows) == 2, table.rows
    plain, interleaved = (next(r for r in table.rows if ("stages" in r[1]) == v)
                          for v in (False, True))
    compute = 140.0 - 20.0 - 1.0
    assert plain[1] == "1x1x2" and interleaved[1] == "1x1x2, 2 stages per rank"
    assert plain[10] == f"{compute / 8:.1f} (11.1%)"
    assert interleaved[10] == f"{compute / 16:.1f} (5.9%)"
    assert [r["pipeline_stages_per_rank"] for r in section.records] == [1, 2]
    # both measured against the one-GPU case of the same model
    assert all(r.baseline_case == "one" for r in summary if r.gpus == 2)
    # a rank's line names the stages it holds: pipeline rank r holds r, r + pp, ...
    row = next(r for r in summary if r.pipeline_stages_per_rank == 2)
    assert rank_label({"rank": 1, "pp_rank": 1}, row) == "stages 1, 3 (rank 1)"


PROFILES = Path(__file__).resolve().parents[2] / "data" / "profiles"


def real_ddp_runs() -> list[dict[str, Any]]:
    """The recorded GPT profiles (tests/data/profiles, SOURCE.md) as run rows: the one-GPU
    case and rank 1 of the two-GPU DDP case, its exposed communication from its trace. The
    throughputs are placeholders (the split comes from the profiles alone)."""
    summaries = json.loads((PROFILES / "gpt_dp2_h100_summaries.json").read_text())
    with gzip.open(PROFILES / "gpt_dp2_h100_rank1_kernels.json.gz") as fh:
        kernels = trace_kernels(json.load(fh))
    one, two = summaries["one_gpu_rank0"]["profile"], summaries["two_gpus_rank1"]["profile"]
    two_ms = kernel_breakdown(kernels, two["steps"], two["step_ms"])
    rows = []
    for case_id, gpus, sps, prof, kinds in (("gpt-dp-1g", 1, 66.0, one, one["kernel_ms"]),
                                            ("gpt-dp-2g", 2, 125.0, two, two_ms)):
        rows.append({**run(case_id, gpus, sps), "profile_step_ms": prof["step_ms"],
                     **{column(k): v for k, v in kinds.items()}})
    return rows


def test_the_plot_draws_a_part_below_zero_left_of_zero(tmp_path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    real = real_ddp_runs()
    runs, ranks = pipelined_runs()
    runs = [*real, runs[1]]  # the pipeline against the real one-GPU case too
    runs[-1] = {**runs[-1], "profile_step_ms": 130.0}
    ranks = [{**r, "profile_step_ms": 130.0, column(IDLE): r[column(IDLE)] + 70.0}
             for r in ranks]
    summary = summarize(runs)
    items = [(c.row.case_ids, c.split) for c in breakdowns(summary, runs, rank_profiles=ranks)]
    splits = dict(items)
    # the real DDP rank idled 0.18 ms less than its share of the baseline's idle time, and
    # the pipeline's slowest stage computed less than its share of the baseline
    assert splits["gpt-dp-2g"].idle_host_ms == pytest.approx(-0.18, abs=0.01)
    assert splits["pp"].slower_compute_ms < -50
    negative = min(sum(min(0.0, v) for v in (b.slower_compute_ms, b.exposed_communication_ms,
                                             b.bubble_ms, b.idle_host_ms))
                   for _, b in items)
    fig, ax = plt.subplots()
    try:
        draw_breakdown(ax, items)
        low, high = ax.get_xlim()
        below = [p for p in ax.patches if p.get_width() < 0]
        assert low < negative < 0 < high
        # every part below zero is drawn, hatched, inside the axes
        assert len(below) == 2 and all(p.get_hatch() for p in below)
        assert all(low < p.get_x() + p.get_width() < p.get_x() <= 0 for p in below)
    finally:
        plt.close(fig)
    # nothing below zero: the axis starts at zero as before
    fig, ax = plt.subplots()
    try:
        positive = [(label, b) for label, b in items if label == "gpt-dp-2g"]
        positive = [(label, b.__class__(**{**b.__dict__, "idle_host_ms": 0.5}))
                    for label, b in positive]
        draw_breakdown(ax, positive)
        assert ax.get_xlim()[0] >= 0 and not [p for p in ax.patches if p.get_width() < 0]
    finally:
        plt.close(fig)
    plot = breakdown_plot(summary, runs, tmp_path / "plots" / "b.png", tmp_path,
                          rank_profiles=ranks)
    assert plot is not None and plot.path.read_bytes().startswith(b"\x89PNG")


def test_each_stage_line_predicts_its_own_stages_communication():
    runs, ranks = pipelined_runs()
    shape = {"seq_len": 16, "hidden_size": 64, "num_layers": 2}
    runs[1] = {**runs[1], **shape}
    summary = summarize(runs)
    section = efficiency_section(summary, runs, bus_bw_gbps=1.0, rank_profiles=ranks)
    predicted = {r["pp_rank"]: r["predicted_communication_ms"] for r in section.records
                 if r["line"] == "rank"}
    # pp 2: each stage one boundary; 8 micro-batches of 2 x 16 x 64 fp32, forward and back
    one_side = 8 * 2 * (2 * 16 * 64 * 4) / 1e9 * 1e3
    assert predicted == {0: pytest.approx(one_side), 1: pytest.approx(one_side)}
    # runs.csv alone does not say which stage its figures are of: nothing predicted
    (table,) = efficiency_section(summary, runs, bus_bw_gbps=1.0).tables
    assert table.rows[0][-1] == "2.0"
