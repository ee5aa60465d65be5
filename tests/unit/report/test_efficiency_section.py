"""The report's "Where the efficiency went": one row per multi-GPU case with its efficiency, the
profiled split where both sides were profiled (else what to add to the grid), and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.analysis.kernels import COMMUNICATION, EXPOSED_COMMUNICATION, IDLE, column
from toolkit.analysis.summary import summarize
from toolkit.report.markdown import build_sections
from toolkit.report.scaling import breakdown_plot, efficiency_section


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
    assert dp[4:7] == ["258.0", "250.0", "0.969"]
    assert dp[8] == "3.0"  # exposed communication
    assert dp[11] == "40.0 (0.0)"  # 4 MB over two ranks at 300 GB/s: 0.013 ms
    assert tp[3] == "0.703" and "no profile" in tp[4] and "profile: {ranks:" in tp[4]
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
