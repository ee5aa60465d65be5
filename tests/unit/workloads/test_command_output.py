"""A command case's program output -> step records -> iterations on one clock. Read from the
recorded logs in tests/data/logs (see their SOURCE.md) as the worker reads them: line by line."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from parsers.foreign import Skipped
from parsers.rows import METHOD_LATENCY, METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW
from toolkit.analysis.throughput import window_throughput
from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case
from toolkit.workloads.command import (
    describe_exit,
    given_threads,
    no_records_reason,
    program_environment,
    visible_devices,
)
from toolkit.workloads.command_output import (
    LineReader,
    StepRecord,
    numbered,
    read_log_text,
    read_report_lines,
    timeline,
)
from toolkit.workloads.command_pump import OutputPump

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"


def feed(reader: LineReader, path: Path) -> list[StepRecord]:
    for i, line in enumerate(path.read_text().splitlines()):
        reader.feed(line, 1000.0 + i)
    return reader.records


def test_megatron_lines_detected_and_read_line_by_line():
    reader = LineReader(None)
    records = feed(reader, LOGS / "megatron/epfllm_issue11.log")
    assert reader.measured_by == "log:megatron"
    assert [r.iteration for r in records] == [122, 123, 124, 125]
    assert records[0].step_time_s == pytest.approx(86.5452)
    assert records[0].samples == 1024 and records[0].loss == pytest.approx(2.504220)


def test_pytorch_imagenet_zero_based_index_read_as_the_whole_log_reads_it():
    reader = LineReader(None, "pytorch_imagenet")
    records = feed(reader, LOGS / "pytorch_imagenet/rocm_issue1147.log")
    from parsers.detect import parse_path
    whole = parse_path(LOGS / "pytorch_imagenet/rocm_issue1147.log")
    assert [r.iteration for r in records] == [r.iteration for r in whole.records]
    assert [r.step_time_s for r in records] == [r.step_time_s for r in whole.records]


def test_dllogger_text_lines():
    reader = LineReader(None)
    records = feed(reader, LOGS / "dllogger/2n8g/r50_b128_fp32_1.log")
    assert reader.measured_by == "log:dllogger"
    assert [r.iteration for r in records] == list(range(1, 13))
    assert records[1].rate_sps == pytest.approx(4294.91)
    assert records[0].timestamp_s is not None


def test_dllogger_json_stream_file():
    text = (LOGS / "dllogger/dllogger_example_resnet_json.log").read_text()
    measured_by, records, skipped = read_log_text(text, "auto", 0.0)
    assert skipped == []
    assert measured_by == "log:dllogger"
    # [0, 5] .. [0, 20], then epoch 1's counter continues: 25 .. 40; validation steps left out
    assert [r.iteration for r in records] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert records[0].timestamp_s == pytest.approx(1570716921.842053)
    assert records[0].rate_sps == pytest.approx(545.2730241953889)
    assert records[0].loss == pytest.approx(8.56640625)


def test_user_pattern():
    reader = LineReader(r"step (?P<iteration>\d+)/\d+ loss (?P<loss>[\d.]+) speed "
                        r"(?P<samples_per_s>[\d.]+) samples/s")
    reader.feed("warming up", 1.0)
    reader.feed("step 1/4 loss 2.5 speed 100.0 samples/s", 2.0)
    reader.feed("step 2/4 loss 2.4 speed 200.0 samples/s", 3.0)
    assert reader.measured_by == "pattern" and reader.lines == 3
    assert [(r.iteration, r.rate_sps, r.loss) for r in reader.records] == [
        (1, 100.0, 2.5), (2, 200.0, 2.4)]


def test_litgpt_pattern_reads_the_recorded_litgpt_log():
    """litgpt's own iteration lines, with the pattern tests/integration/test_command_thirdparty.py
    gives its grid: each line's step time, and the window after 3 warm-up steps."""
    litgpt = LOGS.parent / "litgpt"
    reader = LineReader((litgpt / "pattern.re2").read_text().strip())
    records = feed(reader, litgpt / "finetune_lora_1n2g_rank0.log")
    assert reader.lines == 124
    assert [r.iteration for r in records] == list(range(1, 10))
    assert [r.step_time_s for r in records] == pytest.approx(
        [0.24993, 0.07904, 0.10123, 0.06552, 0.06341, 0.04727, 0.04366, 0.04325, 0.06582])
    assert records[0].loss == 4.382 and records[-1].loss == 4.404
    its, method, clock = timeline(records, samples_per_iteration=8, started_s=0.0)
    assert (method, clock) == (METHOD_LATENCY, "step_time")
    sps, measured = window_throughput([it.elapsed_s for it in its], 8, warmup=3, measured=6)
    assert measured == 6 and sps == pytest.approx(8 * 6 / 0.32893)


def test_step_time_in_ms_and_no_iteration_group():
    reader = LineReader(r"took (?P<step_time_ms>[\d.]+) ms")
    for line in ("took 250 ms", "took 500 ms"):
        reader.feed(line, 0.0)
    items = numbered(reader.records)
    assert [(i, r.step_time_s) for i, r in items] == [(1, 0.25), (2, 0.5)]


def test_numbering_merges_a_step_logged_twice_and_continues_a_restarted_counter():
    recs = [StepRecord(iteration=i, read_s=0.0, loss=float(i)) for i in (5, 5, 10, 5, 10)]
    assert [i for i, _ in numbered(recs)] == [5, 10, 15, 20]
    zero = [StepRecord(iteration=i, read_s=0.0) for i in (0, 1, 2)]
    assert [i for i, _ in numbered(zero)] == [1, 2, 3]


def test_timeline_from_step_times_covers_the_interval_each_line_stands_for():
    recs = [StepRecord(iteration=i, read_s=float(i), step_time_s=0.5) for i in (10, 20, 30)]
    its, method, clock = timeline(recs, samples_per_iteration=4, started_s=0.0)
    assert (method, clock) == (METHOD_LATENCY, "step_time")
    assert [it.elapsed_s for it in its] == [5.0, 10.0, 15.0]
    assert [it.samples for it in its] == [40, 40, 40]


def test_timeline_from_rates_and_from_output_times():
    rates = [StepRecord(iteration=i, read_s=0.0, rate_sps=r) for i, r in ((1, 8.0), (2, 16.0))]
    its, method, _ = timeline(rates, 8, 0.0)
    assert method == METHOD_MEAN_OF_RATES
    assert [it.elapsed_s for it in its] == [1.0, 1.5]
    read = [StepRecord(iteration=None, read_s=t) for t in (102.0, 103.0, 105.0)]
    its, method, clock = timeline(read, 8, 100.0)
    assert (method, clock) == (METHOD_TIMESTAMP_WINDOW, "output")
    assert [it.elapsed_s for it in its] == [2.0, 3.0, 5.0]
    assert [it.time_s for it in its] == [102.0, 103.0, 105.0]


def test_a_rank_rate_times_the_window_as_the_job_rate_of_its_data_parallel_ranks():
    # torchvision's `img/s`: batch 8 per rank over 0.5 s is 16 samples/s on each of 2 ranks;
    # the job (global batch 16 an iteration) does 32
    rates = [StepRecord(iteration=i, read_s=0.0, rate_sps=16.0) for i in (1, 2, 3)]
    as_job, _, _ = timeline(rates, 16, 0.0)
    as_rank, _, _ = timeline(rates, 16, 0.0, rate_ranks=2)
    assert [it.step_time_s for it in as_job] == [1.0] * 3  # the rank's rate taken as the job's
    assert [it.step_time_s for it in as_rank] == [0.5] * 3  # the step it printed the rate of


def test_report_records_skip_a_torn_line():
    lines = [json.dumps({"type": "iter", "time_s": 10.0 + i, "samples": 64, "loss": 1.0})
             .encode() for i in range(3)] + [b'{"type": "iter", "time_s": 1']
    recs = read_report_lines(lines)
    assert [(r.timestamp_s, r.samples) for r in recs] == [(10.0, 64), (11.0, 64), (12.0, 64)]
    its, _, clock = timeline(recs, 8, 9.0)
    assert clock == "log" and [it.samples for it in its] == [64, 64, 64]


def test_no_records_reason_names_the_pattern_and_the_lines():
    case = Case.from_dict({"model": "command", "command": {
        "argv": ["x"], "pattern": r"(?P<samples_per_s>\d+) img/s"}})
    why = no_records_reason(case, [{"command": {"records": 0, "output_lines": 7,
                                                "program_log": "program-rank000.log"}}])
    assert why is not None and "matched none of the 7 line(s)" in why
    assert r"(?P<samples_per_s>\d+) img/s" in why and "program-rank000.log" in why
    assert no_records_reason(case, [{"command": {"records": 3}}]) is None
    auto = Case.from_dict({"model": "command", "command": {"argv": ["x"]}})
    assert "command.log_format" in (no_records_reason(auto, [{"command": {}}]) or "")


def test_visible_devices_put_the_bound_gpu_at_local_rank():
    assert visible_devices(3, 1, 4) == "0,3,2,1"
    assert visible_devices(1, 1, 4) == "0,1,2,3"
    assert visible_devices(None, 0, 4) is None


def test_visible_devices_of_a_node_that_owns_some_gpus_keep_its_gpus():
    """A node of the local cluster (or a Slurm job) given GPUs 2,3: the program sees only
    those, the bound one at LOCAL_RANK."""
    assert visible_devices(3, 0, 2, visible="2,3") == "3,2"
    assert visible_devices(2, 0, 2, visible="2,3") == "2,3"
    assert visible_devices(0, 0, 2, visible="2,3") is None  # not the node's


@pytest.mark.parametrize("value,threads", [("2", 2), (" 4 ", 4), ("0", None), ("", None),
                                           ("2,1", None), ("-1", None)])
def test_the_threads_a_program_was_given_are_its_omp_num_threads(value, threads):
    # OpenMP also reads a list (`2,1`: per nesting level); only a plain count is recorded
    env = {"OMP_NUM_THREADS": value} if value else {}
    assert given_threads(env) == threads


def test_describe_exit():
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-9) == "was killed by SIGKILL"


def _info(rank: int, local_rank: int, node: int) -> RankInfo:
    return RankInfo(rank=rank, world_size=4, local_rank=local_rank, local_size=2,
                    node_index=node, num_nodes=2, host="n1", hosts=("n0", "n0", "n1", "n1"),
                    master_addr="n0", master_port=29511)


def test_per_rank_program_gets_torchruns_environment(tmp_path):
    case = Case.from_dict({"model": "command", "num_nodes": 2, "gpus_per_node": 2,
                           "command": {"argv": ["x"]}})
    env = program_environment(case, _info(3, 1, 1), tmp_path, gpu_index=0, gpu_count=2,
                              base={"SLURM_JOB_ID": "7", "PYTHONPATH": "/mine"})
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "29511"}
    assert env["SLURM_JOB_ID"] == "7"  # the launcher's own variables stay
    # Slurm's per-task variables are this rank's, as srun sets them (not the batch step's)
    assert {k: env[k] for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                                "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE")} == {
        "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS": "4",
        "SLURM_NTASKS_PER_NODE": "2"}
    assert env["PYTHONPATH"].endswith(":/mine")  # trainbench.report importable, theirs kept
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0"  # cuda:LOCAL_RANK is the bound GPU 0
    assert env["TRAINBENCH_REPORT_FILE"] == str(tmp_path / "report-rank003.jsonl")


def test_per_node_program_gets_a_node_and_no_rank(tmp_path):
    case = Case.from_dict({"model": "command", "num_nodes": 2, "gpus_per_node": 2,
                           "command": {"argv": ["x"], "launch": "per_node"}})
    env = program_environment(case, _info(1, 0, 1), tmp_path, gpu_index=None, gpu_count=0,
                              base={"RANK": "1", "WORLD_SIZE": "2"})
    assert "RANK" not in env and "WORLD_SIZE" not in env
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("2", "1", "2")
    assert "SLURM_PROCID" not in env  # not under Slurm: none made up
    # under Slurm the program is the node's one task
    slurm = program_environment(case, _info(2, 0, 1), tmp_path, gpu_index=None, gpu_count=0,
                                base={"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"})
    assert (slurm["SLURM_PROCID"], slurm["SLURM_LOCALID"], slurm["SLURM_NTASKS"],
            slurm["SLURM_NTASKS_PER_NODE"]) == ("1", "0", "2", "1")


def _pump_all(pump: OutputPump) -> list[str]:
    pump.start()
    lines: list[str] = []
    while not pump.drained:
        for _, batch in pump.get(1.0):
            lines += [raw.decode() for raw in batch]
    return lines


def test_the_pump_splits_on_carriage_returns_and_keeps_the_bytes(tmp_path):
    r, w = os.pipe()
    os.write(w, b"50%|#####     | 5/10\r100%|##########| 10/10\rDLL 2020-09-15 14:29:13.4 - x\n"
                b"half a li")
    os.write(w, b"ne\r\nlast, no newline")
    os.close(w)
    log = tmp_path / "program.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    lines = _pump_all(OutputPump(r, fd, chunk=7))
    os.close(r)
    os.close(fd)
    assert lines == ["50%|#####     | 5/10", "100%|##########| 10/10",
                     "DLL 2020-09-15 14:29:13.4 - x", "half a line", "last, no newline"]
    assert log.read_bytes().endswith(b"ne\r\nlast, no newline")  # the log keeps it as printed


def test_a_pump_whose_parser_is_behind_counts_lines_instead_of_waiting(tmp_path):
    r, w = os.pipe()
    fd = os.open(tmp_path / "program.log", os.O_WRONLY | os.O_CREAT)
    pump = OutputPump(r, fd, max_pending_lines=100)
    pump.start()
    # nobody takes lines: the writer is never blocked, whatever it writes
    for i in range(50):
        os.write(w, b"".join(b"line %d\n" % (i * 10 + k) for k in range(10)))
    os.close(w)
    while not pump.closed:
        time.sleep(0.01)
    assert (pump.lines, pump.not_parsed) == (500, 400)
    got = [line for _, batch in pump.get(0.1) for line in batch]
    assert got == [b"line %d" % i for i in range(100)]  # the first 100 were handed on
    assert len((tmp_path / "program.log").read_bytes().splitlines()) == 500  # all logged
    os.close(r)
    os.close(fd)


def test_a_pump_bounds_the_bytes_waiting_too(tmp_path):
    r, w = os.pipe()
    fd = os.open(tmp_path / "program.log", os.O_WRONLY | os.O_CREAT)
    pump = OutputPump(r, fd, max_pending_bytes=10_000)
    pump.start()
    for _ in range(20):  # 20 lines of 1,000 bytes, nobody taking them
        os.write(w, b"x" * 999 + b"\n")
    os.close(w)
    while not pump.closed:
        time.sleep(0.01)
    assert (pump.lines, pump.not_parsed) == (20, 10)
    assert sum(len(batch) for _, batch in pump.get(0.1)) == 10
    os.close(r)
    os.close(fd)


def test_a_pumps_log_keeps_the_head_and_tail_and_counts_what_it_left_out(tmp_path):
    """A program that prints without end: its log keeps the head and the tail, not every
    byte."""
    r, w = os.pipe()
    log = tmp_path / "program.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    pump = OutputPump(r, fd, chunk=64, log_head=1000, log_tail=500)
    for i in range(1000):  # 12,000 bytes
        os.write(w, b"line %06d\n" % i)
    os.close(w)
    lines = _pump_all(pump)
    os.close(r)
    os.close(fd)
    assert len(lines) == 1000  # every line read and handed on
    text = log.read_bytes()
    head, marker, tail = text[:1000], text[1000:].split(b"\n")[1], text[1000:].split(b"]\n")[1]
    assert head == b"".join(b"line %06d\n" % i for i in range(1000))[:1000]
    assert marker == (b"[trainbench: 10500 bytes of the program's output left out here; its "
                      b"last 500 bytes follow]")
    assert len(tail) == 500 and tail.endswith(b"line 000999\n")
    assert (pump.log_written, pump.log_left_out, pump.log_error) == (1500, 10500, None)


def test_a_log_that_cannot_be_written_costs_the_log_not_the_programs_output():
    """On a full disk the pump reads on, so the program is never left writing into a pipe
    nobody reads, and it says why its log is short."""
    r, w = os.pipe()
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
    pump = OutputPump(r, full)
    for i in range(2000):
        os.write(w, b"step %d\n" % i)
    os.close(w)
    lines = _pump_all(pump)
    os.close(r)
    os.close(full)
    assert len(lines) == 2000
    assert pump.log_error == "No space left on device"
    assert pump.log_left_out == sum(len(b"step %d\n" % i) for i in range(2000))


# -- hostile output: a line or a value is refused with its reason, never the run ------------


@pytest.mark.parametrize(("text", "value"), [
    ("1,234.5", 1234.5), ("12,345,678", 12345678.0), ("1 234.5", 1234.5), ("1_000", 1000.0),
    ("1'234", 1234.0), ("1\u202f234.5", 1234.5), ("-1,234", -1234.0), ("2.5e3", 2500.0)])
def test_a_figure_with_thousands_separators_is_read(text, value):
    reader = LineReader(r"speed (?P<samples_per_s>.+?) samples/s")
    reader.feed(f"step speed {text} samples/s", 1.0)
    if value < 0:  # a negative rate is no measurement: refused, with its line
        assert reader.records == [] and "rate_sps" in reader.notes()[0]
        return
    assert [r.rate_sps for r in reader.records] == [value]


@pytest.mark.parametrize(("line", "why"), [
    ("step 3 speed 1,23.5", "group samples_per_s: '1,23.5' is not a number"),
    ("step 3 speed 1,234,56", "group samples_per_s: '1,234,56' is not a number"),
    ("step 3 speed 1,234_567", "group samples_per_s: '1,234_567' is not a number"),
    ("step 1e308 speed 10", "group iteration: '1e308' is not an iteration"),
    ("step 3.5 speed 10", "group iteration: '3.5' is not an iteration"),
    ("step 3 speed 1e308", "rate_sps: 1e+308 is out of range (at most 1e+12"),
    ("step 3 speed " + "9" * 5000, "is 5000 characters long, not a figure"),
])
def test_a_figure_the_pattern_matched_but_no_run_has_is_refused_with_its_line(line, why):
    """The other lines' records stand; the refused line is counted and quoted (never a figure
    dropped silently, an OverflowError, or an infinite timeline)."""
    reader = LineReader(r"step (?P<iteration>\S+) speed (?P<samples_per_s>\S+)")
    reader.feed("step 1 speed 10", 1.0)
    reader.feed(line, 2.0)
    reader.feed("step 2 speed 10", 3.0)
    assert [r.iteration for r in reader.records] == [1, 2]
    (note,) = reader.notes()
    assert note.startswith("1 step line(s) with a figure that cannot be read or that no run "
                           "has, skipped (first: output line 2: ")
    assert why in note and line[:60] in note
    its, _, _ = timeline(reader.records, 8, 0.0)
    assert all(math.isfinite(it.elapsed_s) for it in its)


def test_a_family_line_with_a_number_of_5000_digits_is_refused_with_its_line():
    lines = (LOGS / "megatron" / "epfllm_issue11.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "iteration      124/" in line)
    lines[at] = lines[at].replace("iteration      124/", f"iteration      {'1' * 5000}/")
    reader = LineReader(None)
    for i, line in enumerate(lines):
        reader.feed(line, 1000.0 + i)
    assert reader.family == "megatron" and reader.records
    (note,) = reader.notes()
    assert f"(first: output line {at + 1}: Exceeds the limit (4300 digits) " in note


def _report(**fields) -> bytes:
    return json.dumps({"schema": 1, "type": "iter", "rank": 0, **fields}).encode()


def test_report_lines_nested_too_deep_or_holding_values_no_run_has_are_counted():
    good = [_report(time_s=10.0 + i, iteration=i + 1, samples=64) for i in range(6)]
    hostile = [b"[" * 3000 + b"]" * 3000,  # RecursionError in Python's decoder
               b'{"time_s": 12.5, "x": ' + b"[" * 100 + b"]" * 100 + b"}",
               _report(time_s=13.5, iteration=7, samples=1e308),
               _report(time_s=13.6, iteration=10**400),
               b'{"time_s": ' + b"1" * 5000 + b"}"]
    refused = Skipped("report line(s)")
    recs = read_report_lines([*good[:3], *hostile, *good[3:]], refused)
    assert [r.iteration for r in recs] == [1, 2, 3, 4, 5, 6]
    assert refused.count == 5
    assert refused.first == "report line 4: nested more than 64 levels deep"
    its, _, clock = timeline(recs, 8, 9.0)
    assert clock == "log" and [it.samples for it in its] == [64] * 6


def test_a_dlll_line_nested_too_deep_is_skipped_and_counted():
    lines = (LOGS / "dllogger/dllogger_example_resnet_json.log").read_text().splitlines()
    deep = 'DLLL {"type": "LOG", "step": [0, 7], "data": ' + "[" * 3000 + "]" * 3000 + "}"
    text = "\n".join([*lines[:9], deep, *lines[9:]])
    measured_by, records, skipped = read_log_text(text, "auto", 0.0)
    assert measured_by == "log:dllogger"
    assert [r.iteration for r in records] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert skipped == ["1 DLLL line(s) not JSON or holding a step no run has, skipped (first: "
                       "line 10: nested more than 64 levels deep)"]
    reader = LineReader(None)  # the same line printed by the program, read as it prints
    for i, line in enumerate(text.splitlines()):
        reader.feed(line, 1000.0 + i)
    assert reader.family == "dllogger" and len(reader.records) == 8


def test_a_fatal_error_under_the_fault_handlers_dump_leads_the_failure() -> None:
    from toolkit.workloads.command import fatal_error

    # a litgpt rank that finished its steps and aborted in PyTorch's gloo teardown, stripped
    # as the failure's tail holds its lines
    log = LOGS.parent / "litgpt" / "finetune_lora_2n1g_rank1_gloo_abort.log"
    lines = [line.strip() for line in log.read_text().splitlines()]
    assert fatal_error(lines) == ("terminate called without an active exception: "
                                  "Fatal Python error: Aborted")
    # a fatal error the program went on past is not its end
    assert fatal_error([*lines, "step 10"]) == ""
    assert fatal_error(["step 5", "Traceback (most recent call last):"]) == ""


@pytest.mark.parametrize("world_size", [2, 1])
def test_an_abort_in_teardown_after_the_last_step_fails_the_run_and_says_what_ends_it(
        tmp_path: Path, world_size: int) -> None:
    """A real program (sh) prints the recorded litgpt rank's output and dies of SIGABRT as that
    rank did: the run fails, the abort leads the reason, and a multi-rank run is told how a
    PyTorch program avoids it."""
    from toolkit.workloads import command

    log = LOGS.parent / "litgpt" / "finetune_lora_2n1g_rank1_gloo_abort.log"
    pattern = (LOGS.parent / "litgpt" / "pattern.re2").read_text().strip()
    case = Case.from_dict({"model": "command", "warmup_iterations": 3, "measured_iterations": 6,
                           "command": {"argv": ["/bin/sh", "-c", 'cat "$0"; kill -ABRT $$',
                                                str(log)], "pattern": pattern}})
    info = RankInfo(rank=0, world_size=world_size, local_rank=0, local_size=world_size,
                    node_index=0, num_nodes=1, host="localhost",
                    hosts=("localhost",) * world_size, master_addr="127.0.0.1",
                    master_port=29511)
    with pytest.raises(command.ProgramFailed) as failed:
        command.run(case, "c", info, tmp_path, 0, None, 0, lambda *_: None)
    text = str(failed.value)
    assert "SIGABRT" in text.split("; its last lines")[0], text[:300]
    shown = text.split("newest first (program-rank000.log): ")[1]
    assert shown.startswith("terminate called without an active exception: Fatal Python "
                            "error: Aborted"), shown[:300]
    assert (command.TEARDOWN_HINT in shown.split("; then ")[0]) == (world_size > 1)
