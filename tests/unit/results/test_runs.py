"""Native rank files -> run rows: complete runs count, anything partial is reported, not used."""

from __future__ import annotations

import csv
import json

import pytest

from toolkit.analysis.summary import summarize
from toolkit.rank.event_writer import EventWriter
from toolkit.report.outputs import write_outputs
from toolkit.results.importer import ImportResult
from toolkit.results.layout import PROFILES_CSV, rank_file
from toolkit.results.runs import PROFILE_TABLE_COLUMNS, profile_table, read_run
from toolkit.spec import Case

CASE = Case.from_dict({"model": "resnet50", "gpus_per_node": 2, "batch_size_per_device": 4,
                       "warmup_iterations": 2, "measured_iterations": 3})


def write_rank(run_dir, rank, step_s, n=5, end=True, start_time=None, **summary):
    with EventWriter(rank_file(run_dir, rank), rank) as w:
        w.write("start", world_size=2, **({} if start_time is None else {"time_s": start_time}))
        # telemetry before the window (model build): must not count
        w.write("telemetry", time_s=50.0, utilization_pct=0.0, power_w=100.0)
        for i in range(1, n + 1):
            w.write("iter", iteration=i, elapsed_s=i * step_s, step_time_s=step_s, samples=8,
                    loss=10.0 - i, warmup=i <= 2, time_s=100.0 + i)
        # window: end of iteration 2 (t=102) to end of iteration 5 (t=105)
        for t, util, power in ((102.5, 90.0 + rank, 400.0), (104.5, 90.0 + rank, 400.0)):
            w.write("telemetry", time_s=t, utilization_pct=util, power_w=power)
        w.write("summary", device="cpu", framework_peak_memory_mib=None,
                telemetry={"peak_memory_mib": 1000.0 + rank, "mean_utilization_pct": 90.0 + rank,
                           "energy_j": 400.0}, **summary)
        if end:  # True, or the time of the end record
            w.write("end", **({} if end is True else {"time_s": end}))


def ok_status(run_dir):
    (run_dir / "status.json").write_text(json.dumps({"status": "ok", "log": "output.log"}))


def test_complete_run(tmp_path):
    write_rank(tmp_path, 0, 0.5)
    write_rank(tmp_path, 1, 1.0)  # the slower rank sets the figure
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok", row.error
    assert row.global_batch_size == 8
    assert row.throughput_sps == pytest.approx(8 * 3 / 3.0)
    assert row.loss_first == 9.0 and row.loss_last == 5.0
    assert row.peak_memory_mib == 1001.0
    assert row.extra["mean_utilization_pct"] == pytest.approx(90.5)
    # 400 W over the 3 s window on each of 2 GPUs, over 3 measured iterations x 8 samples
    assert row.extra["energy_per_sample_j"] == pytest.approx(2 * 400.0 * 3 / 24)
    assert row.step_time_median_s == pytest.approx(0.5)


@pytest.mark.parametrize("summary,label", [
    ({"run_options": {"compile": True, "torch_compile_mode": None}}, "compiled"),
    ({"run_options": {"compile": True, "torch_compile_mode": "max-autotune-no-cudagraphs"}},
     "compiled (max-autotune-no-cudagraphs)"),
    ({"run_options": {"compile": True, "torch_compile_mode": None, "kernel_tuning": True}},
     "compiled (tuned kernels)"),
    ({"run_options": {"compile": True, "torch_compile_mode": "reduce-overhead",
                      "kernel_tuning": True}}, "compiled (reduce-overhead, tuned kernels)"),
    ({"run_options": {"compile": True, "torch_compile_mode": None, "kernel_tuning": False}},
     "compiled"),
    ({"run_options": {"compile": False, "torch_compile_mode": None}}, "eager"),
    ({"compile": False, "torch_compile_mode": None}, "eager"),  # a GPT run of an older version
    ({}, None),  # OneFlow: says nothing, so the row says nothing
])
def test_the_row_says_how_the_model_ran(tmp_path, summary, label):
    write_rank(tmp_path, 0, 0.5, **summary)
    write_rank(tmp_path, 1, 0.5, **summary)
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok" and row.extra.get("compile") == label


def test_start_up_and_compile_time_per_run(tmp_path):
    write_rank(tmp_path, 0, 0.5, compile_s=12.5)  # iteration 1 ends at t = 101
    write_rank(tmp_path, 1, 0.5, compile_s=13.0)
    (tmp_path / "status.json").write_text(json.dumps({"status": "ok", "started_s": 60.0}))
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.extra["start_to_first_iteration_s"] == pytest.approx(41.0)
    assert row.extra["compile_s"] == 12.5  # rank 0's
    # no start time (an older run, or a clock that went backwards): no figure, no guess
    for status in ({"status": "ok"}, {"status": "ok", "started_s": 200.0}):
        (tmp_path / "status.json").write_text(json.dumps(status))
        assert "start_to_first_iteration_s" not in read_run(tmp_path, "c", CASE, 0).extra


def test_exit_time_from_rank_0s_end_to_the_runs_end(tmp_path):
    write_rank(tmp_path, 0, 0.5, end=110.0)
    write_rank(tmp_path, 1, 0.5, end=115.0)  # not rank 0: not read
    (tmp_path / "status.json").write_text(json.dumps({"status": "ok", "finished_s": 112.5}))
    assert read_run(tmp_path, "c", CASE, 0).extra["exit_s"] == 2.5
    # no end record (a rank that died), no finish time, or a clock that went backwards
    for n, (end, status) in enumerate((
            (False, {"status": "failed", "finished_s": 112.5}), (110.0, {"status": "ok"}),
            (110.0, {"status": "ok", "finished_s": 109.0}))):
        run_dir = tmp_path / str(n)
        run_dir.mkdir()
        write_rank(run_dir, 0, 0.5, end=end)
        (run_dir / "status.json").write_text(json.dumps(status))
        assert "exit_s" not in read_run(run_dir, "c", CASE, 0).extra


@pytest.mark.parametrize("counts,label", [
    ({"graph_hits": 0, "graph_misses": 2, "autograd_misses": 1, "tuning_trials": 1105},
     "miss, 1105 tuning trials"),
    ({"graph_hits": 2, "graph_misses": 0, "autograd_hits": 1, "tuning_trials": 0}, "hit"),
    ({"graph_hits": 1, "graph_misses": 1}, "partial (1 of 2 graphs)"),
    ({"graph_hits": 1, "graph_bypasses": 1}, "partial (1 of 2 graphs)"),
    ({"graph_hits": 2, "tuning_trials": 5}, "hit, 5 tuning trials"),
    ({"graph_hits": 0, "graph_misses": 0}, None),  # nothing compiled
    ({"graph_hits": "2", "graph_misses": None}, None),  # not numbers: no guess
    (None, None),  # eager, OneFlow, or an older run
])
def test_the_row_says_what_the_compile_cache_held(tmp_path, counts, label):
    summary = {} if counts is None else {"compile_cache": counts}
    write_rank(tmp_path, 0, 0.5, **summary)
    write_rank(tmp_path, 1, 0.5, compile_cache={"graph_hits": 9})  # not rank 0: not read
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok" and row.extra.get("compile_cache") == label


def test_start_up_is_cut_into_its_phases_where_rank_0_stamped_them(tmp_path):
    # launched at 60, worker started at 61, framework ready at 70, loop from 75, 1st iteration
    # ends at 101
    write_rank(tmp_path, 0, 0.5, start_time=61.0, ready_time_s=70.0, loop_start_time_s=75.0)
    write_rank(tmp_path, 1, 0.5, start_time=90.0, ready_time_s=95.0, loop_start_time_s=99.0)
    (tmp_path / "status.json").write_text(json.dumps({"status": "ok", "started_s": 60.0}))
    extra = read_run(tmp_path, "c", CASE, 0).extra
    assert (extra["start_up_launch_s"], extra["start_up_setup_s"], extra["start_up_build_s"],
            extra["start_up_first_iteration_s"]) == (1.0, 9.0, 5.0, 26.0)  # rank 0's
    assert extra["start_to_first_iteration_s"] == 41.0  # their sum
    # a workload that stamps nothing (OneFlow), or stamps out of order: only what is sound
    write_rank(tmp_path, 0, 0.5, start_time=61.0)
    extra = read_run(tmp_path, "c", CASE, 0).extra
    assert extra["start_up_launch_s"] == 1.0 and "start_up_setup_s" not in extra
    assert "start_up_build_s" not in extra and "start_up_first_iteration_s" not in extra
    write_rank(tmp_path, 0, 0.5, start_time=61.0, ready_time_s=80.0, loop_start_time_s=75.0)
    extra = read_run(tmp_path, "c", CASE, 0).extra
    assert extra["start_up_setup_s"] == 19.0 and "start_up_build_s" not in extra
    assert extra["start_up_first_iteration_s"] == 26.0


def test_the_lowest_profiled_rank_gives_the_profile_columns(tmp_path):
    kernel_ms = {"GEMM/conv": 6.0, "attention": 1.0, "norm/elementwise": 2.0,
                 "communication": 0.5, "optimizer": 0.25, "other": 0.0, "idle": 0.5}
    write_rank(tmp_path, 0, 0.5)  # rank 0 not profiled
    write_rank(tmp_path, 1, 0.5, profile={"steps": 3, "step_ms": 10.0, "kernel_ms": kernel_ms,
                                          "trace": "profile-rank001.json"})
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0).to_dict()
    assert row["profile_rank"] == 1 and row["profile_step_ms"] == 10.0
    assert row["profile_gemm_conv_ms"] == 6.0 and row["profile_norm_elementwise_ms"] == 2.0
    assert row["profile_idle_ms"] == 0.5
    # a rank whose profile could not run (OneFlow) gives no columns
    write_rank(tmp_path, 1, 0.5, profile={"steps": 0, "reason": "no profiler for oneflow"})
    assert "profile_step_ms" not in read_run(tmp_path, "c", CASE, 0).to_dict()


def _stage(stage: int, compute_ms: float, idle_ms: float) -> dict:
    """A summary's profile and mesh record of a GPT pipeline stage on two ranks (its figures
    made up for the test: a 20 ms step split between compute, 1 ms of exposed communication
    and idle)."""
    kernel_ms = {"GEMM/conv": compute_ms, "attention": 0.0, "norm/elementwise": 0.0,
                 "communication": 2.0, "optimizer": 0.0, "other": 0.0,
                 "exposed communication": 1.0, "idle": idle_ms}
    return {"profile": {"steps": 3, "step_ms": 20.0, "kernels": 10, "kernel_ms": kernel_ms,
                        "trace": f"profile-rank{stage:03d}.json"},
            "parallel": {"dp": 1, "tp": 1, "pp": 2, "stage": stage, "dp_rank": 0,
                         "tp_rank": 0}}


def test_every_profiled_rank_gives_a_profile_and_runs_csv_names_the_slowest(tmp_path):
    write_rank(tmp_path, 0, 0.5, **_stage(0, compute_ms=12.0, idle_ms=7.0))
    write_rank(tmp_path, 1, 0.5, **_stage(1, compute_ms=17.0, idle_ms=2.0))  # the last stage
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 1)
    assert [p["rank"] for p in row.profiles] == [0, 1]
    last = row.profiles[1]
    assert (last["pp_rank"], last["dp_rank"], last["tp_rank"]) == (1, 0, 0)
    assert last["profile_steps"] == 3 and last["profile_step_ms"] == 20.0
    assert last["profile_gemm_conv_ms"] == 17.0 and last["profile_idle_ms"] == 2.0
    assert last["profile_exposed_communication_ms"] == 1.0
    columns = row.to_dict()
    # runs.csv keeps the lowest profiled rank's figures, and names the one the others waited
    # for: the most compute (step - idle - exposed communication)
    assert columns["profile_rank"] == 0 and columns["profile_idle_ms"] == 7.0
    assert columns["profile_ranks"] == 2 and columns["profile_slowest_rank"] == 1
    assert "profiles" not in columns
    table = profile_table([row])
    assert [(r["case_id"], r["repeat"], r["rank"]) for r in table] == [("c", 1, 0), ("c", 1, 1)]
    assert all(set(r) <= set(PROFILE_TABLE_COLUMNS) for r in table)


def test_one_profiled_rank_gives_one_profile_row(tmp_path):
    write_rank(tmp_path, 0, 0.5)
    write_rank(tmp_path, 1, 0.5, **_stage(1, compute_ms=17.0, idle_ms=2.0))
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    (only,) = profile_table([row])
    assert only["rank"] == 1 and only["pp_rank"] == 1
    assert row.extra["profile_slowest_rank"] == 1 == row.extra["profile_rank"]
    # a workload that records no mesh (ResNet50, BERT): the coordinates are left empty
    write_rank(tmp_path, 1, 0.5, profile=_stage(1, 17.0, 2.0)["profile"])
    (only,) = profile_table([read_run(tmp_path, "c", CASE, 0)])
    assert only["pp_rank"] is only["dp_rank"] is only["tp_rank"] is None
    # no profile, no row
    write_rank(tmp_path, 1, 0.5)
    assert profile_table([read_run(tmp_path, "c", CASE, 0)]) == []


def test_profiles_csv_has_a_row_per_profiled_rank_in_fixed_columns(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_rank(run_dir, 0, 0.5, **_stage(0, compute_ms=12.0, idle_ms=7.0))
    write_rank(run_dir, 1, 0.5, **_stage(1, compute_ms=17.0, idle_ms=2.0))
    ok_status(run_dir)
    rows = [read_run(run_dir, "c", CASE, 0)]
    dicts = [r.to_dict() for r in rows]
    out = tmp_path / "out"
    out.mkdir()
    write_outputs(out, "t", [], rows, dicts, summarize(dicts), ImportResult(), None,
                  plots=False)
    with (out / PROFILES_CSV).open() as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == PROFILE_TABLE_COLUMNS
        written = list(reader)
    assert [(r["case_id"], r["repeat"], r["rank"], r["pp_rank"]) for r in written] == [
        ("c", "0", "0", "0"), ("c", "0", "1", "1")]
    assert [float(r["profile_idle_ms"]) for r in written] == [7.0, 2.0]
    assert written[1]["host"] == "" and written[1]["profile_norm_elementwise_ms"] == "0.0"


def test_missing_rank_and_short_rank_are_incomplete(tmp_path):
    write_rank(tmp_path, 0, 0.5, n=4)
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "incomplete" and row.throughput_sps is None
    assert "no rank file for rank(s) 1" in row.error
    assert "rank(s) 0 logged fewer than 5 iterations" in row.error


def test_failed_run_keeps_reason_and_log(tmp_path):
    write_rank(tmp_path, 0, 0.5)
    with EventWriter(rank_file(tmp_path, 1), 1) as w:
        w.write("error", message="RuntimeError: boom")
    (tmp_path / "status.json").write_text(json.dumps(
        {"status": "failed", "reason": "mpirun exited with exit code 1", "log": "output.log"}))
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "failed"
    assert "exit code 1" in row.error and "rank 1: RuntimeError: boom" in row.error
    assert str(tmp_path / "output.log") in row.error


def test_truncated_and_binary_lines_are_skipped(tmp_path):
    write_rank(tmp_path, 0, 0.5)
    write_rank(tmp_path, 1, 0.5)
    with (rank_file(tmp_path, 1)).open("ab") as fh:
        fh.write(b'{"type": "iter", "iterat')
        fh.write(b"\n\xff\xfe\x00garbage\n")
    ok_status(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok"
    assert row.extra["unreadable_lines"] == 2


def test_no_status_means_incomplete(tmp_path):
    write_rank(tmp_path, 0, 0.5)
    write_rank(tmp_path, 1, 0.5)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "incomplete" and "no status.json" in row.error


def test_telemetry_record_moves_sampler_stamp_to_wall_clock():
    from toolkit.rank.telemetry import telemetry_record

    rec = telemetry_record({"time_s": 10.0, "power_w": 500.0}, now_wall_s=1000.0,
                           now_monotonic_s=10.5)
    assert rec == {"monotonic_s": 10.0, "time_s": 999.5, "power_w": 500.0}
