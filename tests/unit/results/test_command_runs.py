"""A command case's run directory -> row: the ranks that logged steps are timed, over the
window their program logged; how it was measured is a column."""

from __future__ import annotations

import json

import pytest

from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import rank_file
from toolkit.results.runs import read_run
from toolkit.spec import Case

CASE = Case.from_dict({"model": "command", "gpus_per_node": 2, "batch_size_per_device": 4,
                       "warmup_iterations": 10, "measured_iterations": 20,
                       "command": {"argv": ["train"], "name": "mine"}})


def write_rank(run_dir, rank, logged=(), step_s=0.5, **how):
    with EventWriter(rank_file(run_dir, rank), rank) as w:
        w.write("start", world_size=2)
        for i in logged:  # every 10 iterations, 8 samples each
            w.write("iter", iteration=i, elapsed_s=i * step_s, step_time_s=step_s,
                    samples=80, loss=1.0, warmup=i <= 10, time_s=100.0 + i)
        w.write("summary", device=None, command={
            "records": len(logged), "measured_by": "log:megatron", "method": "latency",
            "clock": "step_time", **how})
        w.write("end")


def ok(run_dir):
    (run_dir / "status.json").write_text(json.dumps({"status": "ok"}))


def test_the_rank_that_printed_is_timed(tmp_path):
    write_rank(tmp_path, 0)  # prints nothing: Megatron prints on the last rank
    write_rank(tmp_path, 1, logged=(10, 20, 30))
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok", row.error
    assert row.throughput_sps == pytest.approx(160 / 10.0)  # iterations 11..30 in 15 - 5 s
    assert row.method == "latency" and row.model == "mine"
    assert row.extra["measured_by"] == "log:megatron" and row.extra["timed_ranks"] == "1"
    assert row.step_time_median_s == pytest.approx(0.5)


def test_window_boundary_not_logged(tmp_path):
    write_rank(tmp_path, 0, logged=(5, 15, 25, 30))
    write_rank(tmp_path, 1)
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "incomplete" and row.throughput_sps is None
    assert "no record of iteration 10" in row.error
    # the window the log allows, within the 30 iterations the program ran
    assert ("a window that starts and ends on iterations it logged: warmup_iterations: 15, "
            "measured_iterations: 15") in row.error


def test_no_rank_logged_a_step(tmp_path):
    write_rank(tmp_path, 0)
    write_rank(tmp_path, 1)
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status != "ok" and "no rank logged a step" in row.error


def test_ranks_that_print_nothing_are_windowed_by_the_timed_rank(tmp_path):
    write_rank(tmp_path, 1, logged=(10, 20, 30))
    with EventWriter(rank_file(tmp_path, 0), 0) as w:  # rank 0's GPU, sampled, no steps
        w.write("start", world_size=2)
        for t in (105.0, 115.0, 125.0, 135.0):  # window: t = 110 (iteration 10) .. 130 (30)
            w.write("telemetry", time_s=t, utilization_pct=50.0 if t < 130 else 0.0,
                    power_w=300.0)
        w.write("summary", device=None, command={"records": 0})
        w.write("end")
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok", row.error
    assert row.extra["mean_utilization_pct"] == pytest.approx(50.0)  # samples at 115 and 125


def test_a_per_node_rank_integrates_each_of_its_gpus_power_alone(tmp_path):
    """A `launch: per_node` rank writes the samples of all its node's GPUs, each named by its
    `gpu_bus_id`: each GPU's power is integrated on its own and the energies summed (taken as
    one series, the samples of two GPUs would give their mean power, half the energy)."""
    case = Case.from_dict({"model": "command", "gpus_per_node": 2, "batch_size_per_device": 4,
                           "warmup_iterations": 10, "measured_iterations": 20,
                           "command": {"argv": ["train"], "launch": "per_node"}})
    assert case.launched_ranks == 1
    with EventWriter(rank_file(tmp_path, 0), 0) as w:
        w.write("start", world_size=1)
        for t in (105.0, 115.0, 125.0, 135.0):  # window: t = 110 .. 130
            w.write("telemetry", time_s=t, gpu_bus_id="0000:18:00.0", utilization_pct=40.0,
                    power_w=100.0)
            w.write("telemetry", time_s=t + 0.5, gpu_bus_id="0000:3b:00.0",
                    utilization_pct=60.0, power_w=300.0)
        for i in (10, 20, 30):
            w.write("iter", iteration=i, elapsed_s=i * 0.5, step_time_s=0.5, samples=80,
                    loss=1.0, warmup=i <= 10, time_s=100.0 + i)
        w.write("summary", device=None, command={"records": 3, "measured_by": "log:megatron",
                                                 "method": "latency", "clock": "step_time"})
        w.write("end")
    ok(tmp_path)
    row = read_run(tmp_path, "c", case, 0)
    assert row.status == "ok", row.error
    assert row.extra["mean_utilization_pct"] == pytest.approx(50.0)
    # (100 W + 300 W) over the 20 s window, per sample of 20 iterations x 8 samples
    assert row.extra["energy_per_sample_j"] == pytest.approx(400.0 * 20 / (8 * 20))


def test_a_figure_from_fewer_ranks_than_ran_says_so(tmp_path):
    write_rank(tmp_path, 0)
    write_rank(tmp_path, 1, logged=(10, 20, 30))
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok"
    assert row.extra["figure_flag"] == "timed on 1 of 2 ranks (rank 1 printed steps)"
    assert "rate_scope" not in row.extra  # step times: whose samples is not a question


def test_every_rank_timed_and_no_rate_no_flag(tmp_path):
    write_rank(tmp_path, 0, logged=(10, 20, 30))
    write_rank(tmp_path, 1, logged=(10, 20, 30))
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok" and "figure_flag" not in row.extra


def test_a_rate_of_unstated_scope_over_two_ranks_is_flagged(tmp_path):
    rate = {"method": "mean_of_rates", "clock": "rate", "rate_scope": "job",
            "rate_scope_stated": False, "rate_ranks": 1}
    write_rank(tmp_path, 0, logged=(10, 20, 30), **rate)
    write_rank(tmp_path, 1)
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok" and row.extra["rate_scope"] == "job (default)"
    assert row.extra["figure_flag"] == (
        "the samples/s printed on rank 0 taken as the whole job's (command.rate unset: job); "
        "if the program prints its own process's rate, set command.rate: rank; "
        "timed on 1 of 2 ranks (rank 0 printed steps)")


def test_a_stated_rank_rate_states_its_rule(tmp_path):
    rate = {"method": "mean_of_rates", "clock": "rate", "rate_scope": "rank",
            "rate_scope_stated": True, "rate_ranks": 2}
    write_rank(tmp_path, 0, logged=(10, 20, 30), **rate)
    write_rank(tmp_path, 1, logged=(10, 20, 30), **rate)
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.extra["rate_scope"] == ("rank: each timed rank's samples/s x 2 data-parallel "
                                       "rank(s), the slowest timed rank's")
    assert "figure_flag" not in row.extra  # stated, and every rank timed


def test_a_reader_that_fell_behind_and_an_ended_program_are_in_the_row(tmp_path):
    ended = {"by": "trainbench", "why": "stop_after_window: iteration 30 read, the measured "
             "window ends at 30", "signals": ["SIGTERM", "SIGKILL"], "grace_s": 10.0,
             "window_read": True}
    write_rank(tmp_path, 0, logged=(10, 20, 30), output_lines=500, lines_not_parsed=400,
               ended=ended)
    write_rank(tmp_path, 1, logged=(10, 20, 30))
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok"
    assert row.extra["figure_flag"] == (
        "the reader fell behind the program on rank 0: 400 of 500 line(s) not parsed (its log "
        "has them all); step records among them may be missing")
    assert row.extra["program_end"] == (
        "rank 0: stop_after_window: iteration 30 read, the measured window ends at 30 "
        "(SIGTERM, then SIGKILL to its process group)")


def test_a_run_whose_host_other_processes_crowded_says_so(tmp_path):
    for rank in (0, 1):
        with EventWriter(rank_file(tmp_path, rank), rank) as w:
            w.write("start", world_size=2, host="vm")
            for i in (10, 20, 30):
                w.write("iter", iteration=i, elapsed_s=i * 0.5, step_time_s=0.5, samples=80,
                        loss=1.0, warmup=i <= 10, time_s=100.0 + i)
            w.write("summary", device=None, command={
                "records": 3, "measured_by": "log:megatron", "method": "latency",
                "clock": "step_time"}, host_load={"window_s": 10.0, "host_busy_cpu_s": 19.0,
                                                 "own_cpu_s": 6.0, "host_cpus": 2})
            w.write("end")
    ok(tmp_path)
    row = read_run(tmp_path, "c", CASE, 0)
    assert row.status == "ok"
    assert row.extra["host_others_pct"] == pytest.approx(35.0)
    assert row.extra["host_crowded"].startswith("other processes took 35% of host vm's CPU")


def test_window_ends_on_the_last_logged_iteration_within_one_interval(tmp_path):
    long_case = Case.from_dict({**CASE.to_dict(), "measured_iterations": 30})  # to 40
    write_rank(tmp_path, 0, logged=(10, 20, 30))
    write_rank(tmp_path, 1)
    ok(tmp_path)
    row = read_run(tmp_path, "c", long_case, 0)
    assert row.status == "ok", row.error
    assert row.throughput_sps == pytest.approx(160 / 10.0)
    assert row.extra["window_end"].startswith("the window ends on iteration 30, the last")
