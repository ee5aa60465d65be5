"""nccl-tests outputs on recorded real runs (tests/data/nccl_tests/SOURCE.md says where from).

Expected values are the figures the files print; the averages are checked against the mean of
the rows' busbw, which is how nccl-tests computes its `Avg bus bandwidth` (over every size,
out-of-place and in-place, from unrounded values: the mean of the printed values agrees to the
printing's rounding, 0.005 GB/s).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from parsers import nccl_tests
from parsers.nccl_tests import max_busbw_gbps, mean_busbw_gbps

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl_tests"
A3MEGA = (DATA / "a3mega_allreduce_2n8g_h100.txt").read_text(encoding="utf-8")
DGX2 = (DATA / "dgx2_v100_5ops_2019.txt").read_text(encoding="utf-8")
OLIVIA = (DATA / "olivia_gh200_allreduce_4n4g_corrupt.txt").read_text(encoding="utf-8")
EKS = (DATA / "eks_efa_v100_allreduce_2n1g_nccl_info.txt").read_text(encoding="utf-8")


def test_two_node_h100_all_reduce_with_root_column() -> None:
    run = nccl_tests.parse(A3MEGA)
    assert run.op == "all_reduce"  # from the mpirun command line above the output
    assert run.version is None and run.nccl_version is None  # this version printed neither
    assert len(run.ranks) == 16
    assert run.hosts == ["ztan-mig-235z", "ztan-mig-gq73"]
    rank8 = run.ranks[8]
    assert (rank8.rank, rank8.group, rank8.pid, rank8.host, rank8.device) == (
        8, 0, 6733, "ztan-mig-gq73", 0)
    assert (rank8.bus_id, rank8.device_name) == ("0000:04:00", "NVIDIA H100 80GB HBM3")
    assert run.settings["nGpus"] == "1" and run.settings["maxBytes"] == "8589934592"
    assert run.settings["warmup iters"] == "5" and run.settings["iters"] == "20"
    # 31 sizes, 8 B doubling to 8 GiB
    assert [r.size_bytes for r in run.rows] == [8 * 2**i for i in range(31)]
    first, last = run.rows[0], run.rows[-1]
    assert (first.count, first.dtype, first.redop, first.root) == (2, "float", "sum", -1)
    assert first.out_of_place is not None and first.in_place is not None
    assert (first.out_of_place.time_us, first.in_place.time_us) == (135.8, 123.5)
    # 8589934592 2147483648 float sum -1  47535 180.71 338.82 0  47743 179.92 337.35 0
    assert last.out_of_place is not None and last.in_place is not None
    assert last.out_of_place.time_us == 47535  # printed with no decimals (%.0f)
    assert (last.out_of_place.algbw_gbps, last.out_of_place.busbw_gbps) == (180.71, 338.82)
    assert (last.in_place.busbw_gbps, last.in_place.wrong) == (337.35, 0)
    assert max_busbw_gbps(run) == 338.82
    assert run.avg_busbw_gbps == 70.742
    assert mean_busbw_gbps(run) == pytest.approx(70.742, abs=0.005)
    assert run.out_of_bounds == 0 and run.cputime is False


def test_version_line_four_hosts_and_wrong_elements() -> None:
    run = nccl_tests.parse(OLIVIA)
    assert run.op == "all_reduce"  # from "# Collective test starting: all_reduce_perf"
    assert run.version == "2.17.9"
    assert run.nccl_version == "2.29.2"  # nccl-library=22902
    assert run.hosts == ["gpu-1-43", "gpu-1-47", "gpu-1-49", "gpu-1-51"]
    assert [r.device for r in run.ranks[:4]] == [0, 1, 2, 3]
    assert (run.ranks[15].bus_id, run.ranks[15].device_name) == ("0039:01:00",
                                                                 "NVIDIA GH200 120GB")
    assert len(run.rows) == 28 and run.rows[-1].size_bytes == 134217728
    assert {r.dtype for r in run.rows} == {"int8"}
    # the page cut the output before its footer
    assert run.avg_busbw_gbps is None and run.out_of_bounds is None
    # 2097152 ... 6249.20 0.34 0.63 18134  6142.32 0.34 0.64 9609
    corrupt = {r.size_bytes: r for r in run.rows}[2097152]
    assert corrupt.out_of_place is not None and corrupt.in_place is not None
    assert (corrupt.out_of_place.time_us, corrupt.out_of_place.wrong) == (6249.20, 18134)
    assert (corrupt.in_place.busbw_gbps, corrupt.in_place.wrong) == (0.64, 9609)
    # 4194304 ... in-place time printed "10542.7", one digit after the point
    row = {r.size_bytes: r for r in run.rows}[4194304]
    assert row.in_place is not None and row.in_place.time_us == 10542.7
    wrong_sizes = [r.size_bytes for r in run.rows
                   if r.out_of_place is not None and r.out_of_place.wrong]
    assert wrong_sizes == [2097152 * 2**i for i in range(6)]
    assert max_busbw_gbps(run) == 89.85  # 134217728 out-of-place


def test_nccl_debug_lines_around_and_inside_the_table() -> None:
    # No binary name in the log: the job file beside it runs all_reduce_perf (SOURCE.md).
    assert nccl_tests.parse(EKS).op is None
    run = nccl_tests.parse(EKS, op="all_reduce")
    assert run.op == "all_reduce"
    assert run.nccl_version == "2.6.4"  # from NCCL's own "NCCL version 2.6.4+cuda10.2"
    assert run.hosts == ["ip-192-168-2-54", "ip-192-168-16-52"]
    assert run.settings["iters"] == "1000"
    # "NCCL INFO Launch mode Parallel" between the header and the first row is skipped
    assert [r.size_bytes for r in run.rows] == [8 * 2**i for i in range(29)]
    last = run.rows[-1]
    assert last.out_of_place is not None and last.in_place is not None
    # 2147483648 536870912 float sum  826687 2.60 2.60 0e+00  828420 2.59 2.59 0e+00
    assert (last.out_of_place.time_us, last.out_of_place.busbw_gbps) == (826687, 2.60)
    assert (last.in_place.busbw_gbps, last.in_place.max_error) == (2.59, 0.0)
    assert max_busbw_gbps(run) == 2.60
    assert run.avg_busbw_gbps == 1.16154
    assert mean_busbw_gbps(run) == pytest.approx(1.16154, abs=0.005)


def test_several_runs_need_parse_all_and_old_columns_are_read_by_header() -> None:
    with pytest.raises(ValueError, match=r"5 nccl-tests runs.*parse_all"):
        nccl_tests.parse(DGX2)
    runs = nccl_tests.parse_all(DGX2)
    # each op from the "Running: ... ./build/<op>_perf" line above its table
    assert [r.op for r in runs] == ["all_gather", "all_reduce", "broadcast", "reduce",
                                    "reduce_scatter"]
    assert [r.avg_busbw_gbps for r in runs] == [30.2993, 42.5578, 41.2456, 41.3386, 20.3609]
    for run in runs:
        assert mean_busbw_gbps(run) == pytest.approx(run.avg_busbw_gbps, abs=0.005)
        assert len(run.rows) == 31 and len(run.ranks) == 12 and run.hosts == ["seville"]
        assert run.version is None
    all_gather, all_reduce, broadcast, reduce, reduce_scatter = runs
    # all_gather: "size count type time ..." -- neither redop nor root
    assert {(r.redop, r.root) for r in all_gather.rows} == {(None, None)}
    assert {(r.redop, r.root) for r in all_reduce.rows} == {("sum", None)}
    assert {(r.redop, r.root) for r in broadcast.rows} == {(None, 0)}
    assert {(r.redop, r.root) for r in reduce.rows} == {("sum", 0)}
    assert {(r.redop, r.root) for r in reduce_scatter.rows} == {("sum", None)}
    # "error" column (maximum deviation, not a count) and the FAILED check
    assert all_gather.out_of_bounds == 4 and all_reduce.out_of_bounds == 0
    last = all_gather.rows[-1]
    assert last.out_of_place is not None and last.in_place is not None
    assert (last.size_bytes, last.out_of_place.max_error, last.in_place.max_error) == (
        8589934560, 1.0, 1.0)
    assert last.out_of_place.wrong is None
    assert all_reduce.rows[0].out_of_place is not None
    assert all_reduce.rows[0].out_of_place.max_error == 2e-07
    # largest all_reduce: 8589934592 ... 127453 67.40 123.56 2e-07  127443 67.40 123.57 2e-07
    assert max_busbw_gbps(all_reduce) == 123.57
    assert all_gather.ranks[0].bus_id == "0x36" and all_gather.ranks[0].group is None
    assert all_gather.ranks[0].pid == 87569


def test_tags_of_mpirun_and_srun_are_stripped() -> None:
    plain = nccl_tests.parse(A3MEGA)
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in A3MEGA.splitlines())
    labelled = "".join(f" 0: {line}\n" for line in OLIVIA.splitlines())
    assert nccl_tests.parse(tagged) == plain
    assert nccl_tests.parse(labelled) == nccl_tests.parse(OLIVIA)


def test_markdown_that_ate_the_hashes_still_reads() -> None:
    # Pasted into an issue without a code fence, "# ..." lines lose their '#'.
    stripped = "\n".join(line.lstrip("#") for line in OLIVIA.splitlines())
    run = nccl_tests.parse(stripped)
    assert run == nccl_tests.parse(OLIVIA)


def test_op_argument_fills_in_and_conflicts_fail() -> None:
    without_command = "\n".join(line for line in A3MEGA.splitlines() if "_perf" not in line)
    assert nccl_tests.parse(without_command).op is None
    assert nccl_tests.parse(without_command, op="all_reduce_perf").op == "all_reduce"
    with pytest.raises(ValueError, match="'all_reduce', the caller 'all_gather'"):
        nccl_tests.parse(OLIVIA, op="all_gather")


def test_garbage_and_broken_rows_name_the_line() -> None:
    with pytest.raises(ValueError, match=r"no nccl-tests result table.* 2 lines"):
        nccl_tests.parse("hello\nworld\n")
    lines = A3MEGA.splitlines()
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith("4096 "))
    lines[index] = lines[index].rsplit(None, 1)[0]  # drop the last field
    with pytest.raises(ValueError, match=rf"line {index + 1}: 12 fields where the nccl-tests "
                                         r"header at line \d+ names 13"):
        nccl_tests.parse("\n".join(lines))
    lines = A3MEGA.splitlines()
    lines[index] = lines[index].replace("0.03", "O.03", 1)
    with pytest.raises(ValueError, match=rf"line {index + 1}: 'O.03' in column algbw"):
        nccl_tests.parse("\n".join(lines))


def _with_token_of_the_4096_row(position: int, value: str) -> tuple[str, int]:
    """The A3 Mega output with token `position` of its 4096-byte row replaced by `value`, and
    that row's line number."""
    lines = A3MEGA.splitlines()
    index = next(i for i, line in enumerate(lines) if line.lstrip().startswith("4096 "))
    tokens = lines[index].split()
    tokens[position] = value
    lines[index] = "  ".join(tokens)
    return "\n".join(lines), index + 1


@pytest.mark.parametrize("column", ["time", "algbw", "busbw"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1.5", "-inf"])
def test_a_row_that_is_no_measurement_is_refused_naming_line_and_column(column: str,
                                                                        value: str) -> None:
    position = {"time": 5, "algbw": 6, "busbw": 7}[column]  # out-of-place group
    text, line = _with_token_of_the_4096_row(position, value)
    with pytest.raises(ValueError, match=rf"line {line}: '{value}' in column {column} is "
                                         r"not a measurement: not a finite number >= 0"):
        nccl_tests.parse(text)


def test_the_recorded_copy_with_an_infinite_busbw_is_refused() -> None:
    # SOURCE.md, "Edited copies": the A3 Mega output with one busbw replaced by `inf`.
    text = (DATA / "a3mega_allreduce_2n8g_h100_busbw_inf.txt").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 49: 'inf' in column busbw is not a measurement"):
        nccl_tests.parse(text)


@pytest.mark.parametrize(("column", "position", "value"), [
    ("count", 1, "-4"), ("count", 1, "inf"), ("root", 4, "-2"), ("#wrong", 8, "nan"),
    ("#wrong", 8, "1.5")])
def test_sizes_counts_roots_and_wrong_counts_are_whole_numbers(column: str, position: int,
                                                               value: str) -> None:
    text, line = _with_token_of_the_4096_row(position, value)
    with pytest.raises(ValueError, match=rf"line {line}: '{value}' in column {column} "
                                         r"is not a whole number"):
        nccl_tests.parse(text)


def test_an_average_that_is_no_measurement_is_refused() -> None:
    text = A3MEGA.replace("Avg bus bandwidth    : 70.742", "Avg bus bandwidth    : nan")
    with pytest.raises(ValueError, match=r"'nan' in column Avg bus bandwidth is not a "
                                         r"measurement"):
        nccl_tests.parse(text)


def test_2017_format_in_milliseconds() -> None:
    # Built here, not recorded (SOURCE.md, "Built in the tests"): the first format's "bytes N
    # type op" header, time in ms ("%7.3f"), "res" for the deviation, no units line.
    text = (
        "# nThread 1 nGpus 2 minBytes 1048576 maxBytes 2097152 step: 2(factor) "
        "warmup iters: 5 iters: 20 validation: 1 \n"
        "#                                                out-of-place"
        "                    in-place\n"
        "#      bytes             N    type      op     time  algbw  busbw      res     time"
        "  algbw  busbw      res\n"
        "     1048576        262144   float     sum    0.085  12.34  12.34    1e-07    0.084"
        "  12.48  12.48    1e-07\n"
        " Avg bus bandwidth    : 12.41 \n"
    )
    run = nccl_tests.parse(text, op="all_reduce")
    (row,) = run.rows
    assert row.out_of_place is not None and row.in_place is not None
    assert row.out_of_place.time_us == pytest.approx(85.0)
    assert row.in_place.max_error == 1e-07 and row.redop == "sum"
    assert run.avg_busbw_gbps == 12.41


def test_per_iteration_columns_and_timestamps_of_2_19() -> None:
    # Built here, not recorded (SOURCE.md, "Built in the tests"): `-I 1 -S 1` adds four
    # per-iteration columns to each placement and a two-word timestamp; the figures are made up.
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv%           timestamp\n"
    )
    row = (
        "     1048576        262144     float     sum      -1    20.31   51.63   90.35       0"
        "    19.84    21.02    21.02     1.55    20.12   52.12   91.21       0    19.70    20.95"
        "    20.95     1.49  2026-07-09 10:00:00\n"
    )
    run = nccl_tests.parse(header + row, op="all_reduce")
    (parsed,) = run.rows
    assert parsed.timestamp == "2026-07-09 10:00:00"
    assert parsed.out_of_place is not None and parsed.in_place is not None
    assert (parsed.out_of_place.busbw_gbps, parsed.in_place.busbw_gbps) == (90.35, 91.21)
    assert (parsed.in_place.time_us, parsed.in_place.wrong) == (20.12, 0)


def _json_document(version: int = 3) -> str:
    """The `-J` file of the A3 Mega run, built here (SOURCE.md, "Built in the tests").

    It holds the first and last rows, two of the ranks and the average the text output prints.
    Files written before 2.17.9 spelled the average's keys "bandwidith".
    """
    def placement(time: float, algbw: float, busbw: float) -> dict[str, object]:
        return {"time": time, "alg_bw": algbw, "bus_bw": busbw, "nwrong": 0.0}

    average_key, bandwidth_key = (("average_bus_bandwidith", "bandwidith") if version == 1
                                  else ("average_bus_bandwidth", "bandwidth"))
    doc = {
        "version": version,
        "start_time": "2025-04-02 10:00:00",
        "args": ["/opt/src/nccl-tests/build/all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2",
                 "-g", "1", "-J", "out.json"],
        "env": [],
        "nccl_version": 22005,
        "config": {
            "nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 8589934592,
            "step_factor": 2, "warmup_iters": 5, "iterations": 20,
            "aggregated_iterations": 1, "validation": 1, "graph": 0,
            "blocking_collectives": "false", "parallel_init": "false",
            "devices": [
                {"rank": 0, "group": 0, "pid": 6899, "hostname": "ztan-mig-235z", "device": 0,
                 "device_hex": "0000:04:00", "device_info": "NVIDIA H100 80GB HBM3"},
                {"rank": 8, "group": 0, "pid": 6733, "hostname": "ztan-mig-gq73", "device": 0,
                 "device_hex": "0000:04:00", "device_info": "NVIDIA H100 80GB HBM3"},
            ],
        },
        "results": [
            {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": placement(135.8, 0.0, 0.0),
             "in_place": placement(123.5, 0.0, 0.0),
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 8589934592, "count": 2147483648, "type": "float", "redop": "sum",
             "root": "    -1", "out_of_place": placement(47535.0, 180.71, 338.82),
             "in_place": placement(47743.0, 179.92, 337.35),
             "actual_iterations": 20, "experiment_name": ""},
        ],
        "out_of_bounds": {"count": 0, "okay": "true"},
        average_key: {bandwidth_key: 70.742, "okay": "unchecked"},
        "errors": [],
        "end_time": "2025-04-02 10:05:00",
    }
    return json.dumps(doc)


@pytest.mark.parametrize("version", [1, 3])
def test_json_output_reads_into_the_same_records(version: int) -> None:
    text_run = nccl_tests.parse(A3MEGA)
    run = nccl_tests.parse_json(_json_document(version))
    assert run.op == "all_reduce"  # from args[0]
    assert run.nccl_version == "2.20.5"  # 22005
    assert run.rows == [text_run.rows[0], text_run.rows[-1]]
    assert run.ranks == [text_run.ranks[0], text_run.ranks[8]]
    assert run.avg_busbw_gbps == text_run.avg_busbw_gbps == 70.742
    assert run.out_of_bounds == 0
    assert run.settings["json_version"] == str(version) and run.settings["ngpus"] == "1"
    assert max_busbw_gbps(run) == 338.82


def test_json_garbage_fails_clearly() -> None:
    with pytest.raises(ValueError, match="not a nccl-tests JSON document: line 1"):
        nccl_tests.parse_json("{not json")
    with pytest.raises(ValueError, match="no 'results' list"):
        nccl_tests.parse_json('{"version": 3}')
    broken = json.loads(_json_document())
    del broken["results"][1]["out_of_place"]["bus_bw"]
    with pytest.raises(ValueError, match=r"results\[1\]\.out_of_place: no 'bus_bw'"):
        nccl_tests.parse_json(json.dumps(broken))


@pytest.mark.parametrize(("column", "position", "value", "why"), [
    ("busbw", 7, "1e308", "more than 1e+06 (no link carries it)"),
    ("algbw", 6, "2e6", "more than 1e+06 (no link carries it)"),
    ("count", 1, "1e308", "is not a whole number in 0..1125899906842624"),
])
def test_a_finite_figure_no_link_or_message_has_is_refused(column: str, position: int,
                                                           value: str, why: str) -> None:
    """A busbw of 1e308 is finite, and was judged "every node ok": no link carries it."""
    text, line = _with_token_of_the_4096_row(position, value)
    with pytest.raises(ValueError, match=rf"line {line}: '{value}' in column {column} .*"
                                         + re.escape(why)):
        nccl_tests.parse(text)
