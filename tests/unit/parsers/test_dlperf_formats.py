"""Formats that DLPerf's extractor scripts read, on recorded lines (SOURCE.md in each folder).

Each expected figure is what the DLPerf extractor itself printed for the same file (run with
python on this machine, Oneflow-Inc/DLPerf at c89430bac64f64caabb0445ff7eb80175641454c); the
command is written next to the assertion. DLPerf counts its window in printed lines
(`--warmup_batches W --train_batches T`: lines W..T-1); the importer counts iterations, so the
translation for each log is spelled out too.
"""

from __future__ import annotations

import datetime
import re
import statistics
from pathlib import Path

import pytest

from parsers.detect import detect, parse_path, parse_text
from parsers.foreign import LogHints, window_warnings
from parsers.rows import METHOD_LATENCY, METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW
from toolkit.results.importer import import_logs

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
PADDLE_BERT = LOGS / "paddle_bert/1n1g/bert_b32_fp32_1.log"
HUGECTR = LOGS / "hugectr/dlperf_wdl_docstring.log"


def test_paddle_bert_all_printed_lines_match_dlperf() -> None:
    # extract_paddle_logs.py --log_dir <dir with 1n1g/bert_b32_fp32_1.log> --warmup_batches 0
    #   --train_batches 3  ->  34.1  (mean of speed x 32 over the three training lines)
    parsed = parse_path(PADDLE_BERT, hints=LogHints(warmup_iterations=0, measured_iterations=100))
    assert parsed.family == "paddle_bert" and parsed.method == METHOD_MEAN_OF_RATES
    assert round(parsed.throughput_sps or 0, 2) == 34.1
    assert [r.iteration for r in parsed.records] == [60, 80, 100]  # validation line not a record
    assert parsed.loss_first == 10.487363 and parsed.loss_last == 10.132796
    assert parsed.warnings == ()


def test_paddle_bert_dlperf_warmup_of_one_line_is_the_first_printed_step() -> None:
    # --warmup_batches 1 --train_batches 3  ->  34.19. One printed line here is 20 steps; the
    # first line covers steps up to 60, so dropping it is --warmup-iterations 60.
    parsed = parse_path(PADDLE_BERT, hints=LogHints(warmup_iterations=60, measured_iterations=40))
    assert round(parsed.throughput_sps or 0, 2) == 34.19
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (60, 100)


def test_paddle_bert_without_batch_size_gives_no_throughput_and_says_why() -> None:
    parsed = parse_text(PADDLE_BERT.read_text(encoding="utf-8"))  # no path: no batch size
    assert parsed.throughput_sps is None
    assert any("no throughput" in w for w in parsed.warnings)


def test_hugectr_latency_matches_dlperf() -> None:
    # extract_hugectr_logs.py --benchmark_log_dir <dir with this file>  (default --start_iter
    # 100) printed {'gpu_num_per_node': '1', 'num_nodes': '1', 'latency(ms)': 2.1786, ...}:
    # 1000 x mean(0.213347, 0.222373) / 100. --start_iter 100 is --warmup-iterations 100.
    hints = LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=128,
                     warmup_iterations=100, measured_iterations=1000)
    parsed = parse_path(HUGECTR, hints=hints)
    assert parsed.family == "hugectr" and parsed.method == METHOD_LATENCY
    assert round(parsed.extra["latency_ms"], 4) == 2.1786
    assert parsed.throughput_sps == pytest.approx(128 / 0.0021786)
    assert [r.iteration for r in parsed.records] == [100, 200, 1100]
    assert parsed.warnings == ()


def test_hugectr_latency_without_the_run_shape() -> None:
    # The latency needs no batch size; the throughput does.
    parsed = parse_path(HUGECTR, hints=LogHints(warmup_iterations=100))
    assert round(parsed.extra["latency_ms"], 4) == 2.1786
    assert parsed.throughput_sps is None


def test_window_past_the_end_of_the_log_is_a_warning() -> None:
    # 100 + 1000 iterations asked, the log ends at 1100: fits; 100 + 2000 does not.
    hints = LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=128,
                     warmup_iterations=100, measured_iterations=2000)
    parsed = parse_path(HUGECTR, hints=hints)
    assert parsed.warnings == ("log ends at iteration 1100, before the window end 2100 (100 "
                               "warm-up + 2000 measured); measured up to 1100",)


def test_window_past_the_end_is_reported_per_file_by_the_importer(tmp_path: Path) -> None:
    tree = tmp_path / "logs" / "1n1g"
    tree.mkdir(parents=True)
    (tree / "bert_b32_fp32_1.log").write_bytes(PADDLE_BERT.read_bytes())
    result = import_logs(tmp_path / "logs", hints=LogHints(warmup_iterations=0,
                                                          measured_iterations=500))
    (row,) = result.rows
    assert "log ends at iteration 100, before the window end 500" in row.extra["parse_warnings"]
    assert row.source.endswith("bert_b32_fp32_1.log")


@pytest.mark.parametrize("path", [PADDLE_BERT, HUGECTR])
def test_new_formats_are_detected(path: Path) -> None:
    assert detect(path.read_text(encoding="utf-8")) in ("paddle_bert", "hugectr")


MLLOG = LOGS / "mllog/quickstart_1n1g_r0.log"


def test_mllog_behind_a_launcher_prefix_reads_the_same(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_logging")
    hints = LogHints(warmup_iterations=3, measured_iterations=10)
    plain = parse_path(MLLOG, hints=hints)
    tagged = tmp_path / "tagged.log"
    tagged.write_text("".join(f"[1,0]<stdout>:{line}\n"
                              for line in MLLOG.read_text().splitlines()))
    again = parse_path(tagged, hints=hints)
    assert plain.throughput_sps is not None
    assert again.throughput_sps == plain.throughput_sps
    assert again.settings["case_id"] == "bert_base-torch-fp32-1n1g-bs8"


@pytest.mark.parametrize("garbled", [
    "cut",  # a line cut short
    "deep",  # an event nested 3,000 deep (Python's decoder raises RecursionError)
])
def test_a_garbled_mllog_line_is_skipped_and_counted_naming_it(tmp_path: Path,
                                                               garbled: str) -> None:
    pytest.importorskip("mlperf_logging")
    lines = MLLOG.read_text().splitlines()
    bad = lines[10][:40] if garbled == "cut" else ":::MLLOG " + "[" * 3000 + "]" * 3000
    hints = LogHints(warmup_iterations=3, measured_iterations=10)
    whole = parse_path(MLLOG, hints=hints)
    path = tmp_path / "garbled.log"
    path.write_text("\n".join([*lines[:10], bad, *lines[10:]]) + "\n")
    parsed = parse_path(path, hints=hints)
    assert parsed.throughput_sps == whole.throughput_sps
    assert any(w.startswith("1 :::MLLOG line(s) not JSON, skipped (first: line 11: ")
               for w in parsed.warnings), parsed.warnings


INSIGHTFACE = LOGS / "oneflow_insightface/1n8g/fmobilefacenet_b64_fp32_1.log"


@pytest.mark.parametrize(("w", "t", "warmup", "figure"), [
    # extract_oneflow_logs_time.py -ld <dir with 1n8g/this file> -wb 1 -tb 3  ->  5118.03
    (1, 3, 143997, 5118.03),
    # -wb 2 -tb 3  ->  5145.26 (the first printed iteration, 143997, dropped)
    (2, 3, 143998, 5145.26),
])
def test_oneflow_insightface_matches_dlperf(w: int, t: int, warmup: int, figure: float) -> None:
    # the file's first line is iteration 143997, so DLPerf's line W (from 1) starts where
    # iteration 143996 + W starts; lines W..T (both included) are T-W+1 iterations
    parsed = parse_path(INSIGHTFACE, hints=LogHints(warmup_iterations=warmup,
                                                    measured_iterations=t - w + 1))
    assert parsed.family == "oneflow_insightface" and parsed.method == METHOD_MEAN_OF_RATES
    assert round(parsed.throughput_sps or 0, 2) == figure
    assert parsed.warnings == ()
    assert (parsed.hints.num_nodes, parsed.hints.gpus_per_node) == (1, 8)


def test_oneflow_insightface_window_past_the_end_warns_where_dlperf_gives_zero() -> None:
    # -wb 1 -tb 4 on these three lines: DLPerf prints 0 (its window never closes); here the
    # three lines are measured and the file says it ended early.
    parsed = parse_path(INSIGHTFACE, hints=LogHints(warmup_iterations=143997,
                                                    measured_iterations=4))
    assert round(parsed.throughput_sps or 0, 2) == 5118.03
    assert parsed.warnings == ("log ends at iteration 144000, before the window end 144001 "
                               "(143997 warm-up + 4 measured); measured up to 144000",)


MXNET_BERT = LOGS / "mxnet_bert/1n1g/bert_b8_fp32_1.log"


def _dlperf_mxnet_bert(latencies_ms: list[float], batch: int, gpus: int) -> float:
    """extract_mxnet_logs.py's arithmetic for one rank: 1000 / round(latency, 1) x batch x
    GPUs per line (the median over ranks is the line itself), the mean over the window, rounded
    to 2 places. A cross-check: the script cannot run on five lines (SOURCE.md)."""
    return round(statistics.fmean(1000.0 / round(x, 1) * batch * gpus for x in latencies_ms), 2)


def test_mxnet_bert_matches_dlperfs_arithmetic() -> None:
    latencies = [105.9, 105.8, 106.6, 106.5, 108.0]  # the file's five lines
    parsed = parse_path(MXNET_BERT, hints=LogHints(warmup_iterations=940,
                                                   measured_iterations=50))
    assert parsed.family == "mxnet_bert" and parsed.method == METHOD_MEAN_OF_RATES
    assert round(parsed.throughput_sps or 0, 2) == _dlperf_mxnet_bert(latencies, 8, 1) == 75.08
    assert parsed.warnings == ()
    # a warm-up that drops the first two printed lines (steps up to 960)
    later = parse_path(MXNET_BERT, hints=LogHints(warmup_iterations=960,
                                                  measured_iterations=30))
    assert round(later.throughput_sps or 0, 2) == _dlperf_mxnet_bert(latencies[2:], 8, 1)


def test_mxnet_bert_ranks_tagged_by_mpirun_are_measured_on_rank_0(tmp_path: Path) -> None:
    lines = MXNET_BERT.read_text().splitlines()
    tagged = tmp_path / "1n2g" / "bert_b8_fp32_1.log"
    tagged.parent.mkdir()
    slower = [line.replace("latency=10", "latency=20") for line in lines]
    tagged.write_text("".join(f"[1,0]<stdout>:{a}\n[1,1]<stdout>:{b}\n"
                              for a, b in zip(lines, slower, strict=True)))
    parsed = parse_path(tagged, hints=LogHints(warmup_iterations=940, measured_iterations=50))
    # 2 GPUs: global batch 16; rank 0's lines only, said so
    assert round(parsed.throughput_sps or 0, 2) == round(2 * 75.07913621446943, 2)
    assert "lines from 2 ranks; measured on rank 0" in parsed.warnings



TF_BERT = LOGS / "tf_bert/1n1g/bert_b1_fp16_1.log"
_DLPERF_CLOCK = re.compile(r"(\d{1,2}:\d{1,2}:\d{1,2}.\d{1,6})", re.S)


def _dlperf_tf_bert(path: Path, warmup: int, train: int, total_batch: int) -> float:
    """extract_tensorflow_logs_time.py's arithmetic on the `Train Step:` lines of steps
    `max(20, warmup)` and `train` (its line numbers, one line per step in the whole log)."""
    by_step = {int(m.group(1)): line for line in path.read_text(encoding="utf-8").splitlines()
               if (m := re.search(r"Train Step: (\d+)/", line))}
    start = by_step[20 if warmup <= 20 else warmup]
    end = by_step[train]
    t1 = datetime.datetime.strptime(_DLPERF_CLOCK.findall(start)[0], "%H:%M:%S.%f")
    t2 = datetime.datetime.strptime(_DLPERF_CLOCK.findall(end)[0], "%H:%M:%S.%f")
    return round(float(total_batch) / ((t2 - t1).total_seconds() / (train - warmup)), 2)


@pytest.mark.parametrize(("warmup", "train"), [(35, 72), (36, 71), (47, 48), (35, 36)])
def test_tf_bert_timestamp_window_matches_dlperf(warmup: int, train: int) -> None:
    # DLPerf --warmup_batches W --train_batches T is --warmup-iterations W
    # --measured-iterations T-W (one Train Step line per step).
    hints = LogHints(warmup_iterations=warmup, measured_iterations=train - warmup)
    parsed = parse_path(TF_BERT, hints=hints)
    assert parsed.family == "tf_bert" and parsed.method == METHOD_TIMESTAMP_WINDOW
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (warmup, train)
    assert round(parsed.throughput_sps or 0, 2) == _dlperf_tf_bert(TF_BERT, warmup, train, 1)
    assert parsed.hints.resolved_global_batch_size() == 1  # 1n1g, batch 1 from the path
    assert parsed.warnings == ()


def test_tf_bert_records_and_exact_figure() -> None:
    parsed = parse_path(TF_BERT, hints=LogHints(warmup_iterations=35, measured_iterations=37))
    assert [r.iteration for r in parsed.records] == [11, 12, 35, 36, 47, 48, 71, 72]
    assert parsed.loss_first == 11.1015625 and parsed.loss_last == 11.1953125
    # 37 steps x 1 sample between 02:14:33.799617 and 02:17:40.231345.
    assert parsed.throughput_sps == pytest.approx(37 / 186.431728, rel=1e-9)
    assert parsed.hints.framework == "tensorflow"


def test_tf_bert_lines_without_the_absl_prefix_fall_back_to_the_printed_step_time() -> None:
    text = "\n".join(line.split("] ", 1)[1] for line in TF_BERT.read_text().splitlines()
                     if "Train Step:" in line)
    parsed = parse_text(text, hints=LogHints(global_batch_size=1, warmup_iterations=35,
                                             measured_iterations=37))
    assert parsed.family == "tf_bert" and parsed.method == METHOD_LATENCY
    # Records 36, 47, 48, 71, 72 start at or after step 35; the 47 line covers 11 steps.
    times = [0.135, 0.136 / 11, 0.136, 0.134 / 23, 0.134]
    assert parsed.throughput_sps == pytest.approx(1 / statistics.fmean(times))


def test_tf_bert_window_past_the_log_is_a_warning() -> None:
    parsed = parse_path(TF_BERT, hints=LogHints(warmup_iterations=35, measured_iterations=100))
    assert parsed.window_end_iteration == 72
    assert window_warnings(parsed.warnings)


def test_tf_bert_across_new_year_keeps_time_increasing() -> None:
    text = ("I1231 23:59:59.500000 1 model_training_utils.py:539] Train Step: 1/3  / loss = 1.0\n"
            "I0101 00:00:00.500000 1 model_training_utils.py:539] Train Step: 2/3  / loss = 1.0\n")
    parsed = parse_text(text, hints=LogHints(global_batch_size=8, warmup_iterations=1,
                                             measured_iterations=1))
    assert parsed.throughput_sps == pytest.approx(8.0)


MXNET_ARCFACE = LOGS / "mxnet_speedometer/1n8g/r100_b64_fp32_1.log"
MXNET_RESNET34 = LOGS / "mxnet_speedometer/1n4g/resnet34_b128_fp32_1.log"


@pytest.mark.parametrize(
    ("warmup_batches", "train_batches", "dlperf"),
    [(20, 120, 1274.14), (40, 260, 1292.21), (60, 200, 1295.27), (0, 240, 1282.97)],
)
def test_mxnet_speedometer_matches_dlperf_arcface(
    warmup_batches: int, train_batches: int, dlperf: float
) -> None:
    # MxNet/InsightFace/ArcFace/extract_mxnet_logs.py --log_dir <dir with 1n8g/this file>
    #   --warmup_batches W --train_batches T  printed `dlperf` (run here). A line every 20
    # batches, one per interval: --warmup-iterations W+1 --measured-iterations T-W.
    hints = LogHints(warmup_iterations=warmup_batches + 1,
                     measured_iterations=train_batches - warmup_batches)
    parsed = parse_path(MXNET_ARCFACE, hints=hints)
    assert parsed.family == "mxnet_speedometer" and parsed.method == METHOD_MEAN_OF_RATES
    inside = [r.rate_sps for r in parsed.records
              if warmup_batches < r.iteration - 1 <= train_batches]
    assert len(inside) == (train_batches - warmup_batches) // 20
    assert parsed.throughput_sps == pytest.approx(statistics.fmean(inside))
    # DLPerf rounds each printed speed to 0.1 first: within 0.05 of the exact mean.
    assert abs((parsed.throughput_sps or 0) - dlperf) <= 0.05
    assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("warmup", "measured", "dlperf"), [(1, 100, 252.2), (51, 50, 251.8)],
)
def test_mxnet_speedometer_one_line_per_metric_is_one_record(
    warmup: int, measured: int, dlperf: float
) -> None:
    # Old MXNet prints each interval once per metric; DLPerf counts both lines. A line every 50
    # batches printed twice: DLPerf's lines i=W//20..j=T//20 are intervals i/2..j/2, so
    # --warmup_batches 0 --train_batches 80 (lines 0-3) is --warmup-iterations 1
    # --measured-iterations 100, and 40..80 (lines 2-3) is 51 and 50. DLPerf printed `dlperf`.
    parsed = parse_path(MXNET_RESNET34,
                        hints=LogHints(warmup_iterations=warmup, measured_iterations=measured))
    assert [r.iteration for r in parsed.records] == [51, 101]
    assert round(parsed.throughput_sps or 0, 1) == dlperf
    assert parsed.warnings == ()


def test_mxnet_speedometer_rate_is_per_node_and_unknown_nodes_are_said() -> None:
    text = MXNET_ARCFACE.read_text(encoding="utf-8")
    window = {"warmup_iterations": 21, "measured_iterations": 100}
    one = parse_text(text, hints=LogHints(**window))
    two = parse_text(text, hints=LogHints(num_nodes=2, **window))
    assert two.throughput_sps == pytest.approx(2 * (one.throughput_sps or 0))
    assert any("number of nodes is unknown" in w for w in one.warnings)
    assert two.warnings == ()


def test_mxnet_speedometer_window_shorter_than_a_line_interval_is_a_warning() -> None:
    parsed = parse_path(MXNET_ARCFACE, hints=LogHints(warmup_iterations=21,
                                                      measured_iterations=10))
    assert parsed.throughput_sps == pytest.approx(1277.10)  # the first interval after 21
    assert window_warnings(parsed.warnings) == [
        "no logged interval ends by the window end 31 (the first after the warm-up ends at "
        "41); measured over it"]


def test_mxnet_speedometer_upper_bound_leaves_the_range_form_family_unbounded() -> None:
    # The horovod family (`Batch [a-b]`) has no upper bound: every rate after the warm-up counts.
    ranged = "\n".join(
        f"INFO:root:Epoch[0] Batch [{a}-{a + 20}]\tSpeed: {s} samples/sec\tacc=0.0"
        for a, s in ((0, 100.0), (20, 200.0), (40, 300.0)))
    single = "\n".join(
        f"INFO:root:Epoch[0] Batch [{a + 20}]\tSpeed: {s} samples/sec\tacc=0.0"
        for a, s in ((0, 100.0), (20, 200.0), (40, 300.0)))
    hints = LogHints(warmup_iterations=20, measured_iterations=21)  # window end 41
    assert parse_text(ranged, hints=hints).family == "horovod"
    assert parse_text(ranged, hints=hints).throughput_sps == pytest.approx(250.0)  # 41 and 61
    assert parse_text(single, hints=hints).throughput_sps == pytest.approx(150.0)  # 21 and 41


DEEPSPEED_NEOX = LOGS / "deepspeed/deepspeed_issue3742_gptneox.log"
DEEPSPEED_OLD = LOGS / "deepspeed/deepspeed_issue1825_samplespersec.log"


def test_deepspeed_timer_lines_give_the_timestamp_window() -> None:
    # 14 steps of 32 samples (global_step 20 -> 34) between 21:02:19,296 and 21:03:17,269.
    hints = LogHints(global_batch_size=32, warmup_iterations=20, measured_iterations=14)
    parsed = parse_path(DEEPSPEED_NEOX, fmt="deepspeed", hints=hints)
    assert parsed.family == "deepspeed" and parsed.method == METHOD_TIMESTAMP_WINDOW
    assert [r.iteration for r in parsed.records] == [20, 34]
    assert parsed.throughput_sps == pytest.approx(14 * 32 / 57.973)
    assert parsed.extra["reported_summary_sps"] == pytest.approx(7.864669709950182)
    assert parsed.warnings == ()


def test_deepspeed_without_global_batch_falls_back_to_the_current_rates() -> None:
    parsed = parse_path(DEEPSPEED_NEOX, fmt="deepspeed",
                        hints=LogHints(warmup_iterations=20, measured_iterations=14))
    assert parsed.method == METHOD_MEAN_OF_RATES
    assert parsed.throughput_sps == pytest.approx(8.00912418308922)  # the step-34 line only
    assert any("global batch size is unknown" in w for w in parsed.warnings)


def test_megatron_family_reads_the_deepspeed_gpt_neox_iteration_lines() -> None:
    # The same log's Megatron lines (` samples/sec: S | iteration N/ M | ...`) are what
    # detection picks; each line's own samples/sec is global batch / elapsed time.
    hints = LogHints(global_batch_size=32, warmup_iterations=20, measured_iterations=14)
    parsed = parse_path(DEEPSPEED_NEOX, hints=hints)
    assert parsed.family == "megatron" and parsed.method == METHOD_LATENCY
    assert [r.iteration for r in parsed.records] == [20, 34]
    assert [r.loss for r in parsed.records] == [11.18885, 11.18665]
    assert round(parsed.throughput_sps or 0, 3) == 7.799  # the line prints samples/sec: 7.799
    # Both figures of one run agree within the step-time spread (4.1-4.3 s per step).
    timer = parse_path(DEEPSPEED_NEOX, fmt="deepspeed", hints=hints)
    assert timer.throughput_sps == pytest.approx(parsed.throughput_sps, rel=0.02)


def test_deepspeed_old_samplespersec_lines() -> None:
    assert detect(DEEPSPEED_OLD.read_text(encoding="utf-8")) == "deepspeed"
    parsed = parse_path(DEEPSPEED_OLD, hints=LogHints(global_batch_size=128,
                                                      warmup_iterations=40,
                                                      measured_iterations=10))
    assert [r.iteration for r in parsed.records] == [40, 50]
    assert parsed.throughput_sps == pytest.approx(10 * 128 / 15.145)
    # SamplesPerSec is a running average since the timer started: kept, not the figure.
    assert parsed.extra["reported_summary_sps"] == pytest.approx(83.73838805358588)
    unknown = parse_path(DEEPSPEED_OLD)
    assert unknown.throughput_sps is None
    assert any("global batch size is unknown" in w for w in unknown.warnings)


def test_importer_reads_the_new_families_into_rows(tmp_path: Path) -> None:
    # DLPerf-style tree: the path gives the run's shape, detection the family.
    for relative, source in (("1n1g/bert_b1_fp16_1.log", TF_BERT),
                             ("1n8g/r100_b64_fp32_1.log", MXNET_ARCFACE),
                             ("1n4g/gpt_b8_bf16_1.log", DEEPSPEED_OLD)):
        target = tmp_path / "logs" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    result = import_logs(tmp_path / "logs", hints=LogHints(warmup_iterations=35,
                                                          measured_iterations=15))
    assert result.skipped == []
    rows = {row.extra["log_family"]: row for row in result.rows}
    assert set(rows) == {"tf_bert", "mxnet_speedometer", "deepspeed"}
    assert rows["deepspeed"].global_batch_size == 32  # 1 node x 4 GPUs x 8
    assert rows["deepspeed"].throughput_sps == pytest.approx(10 * 32 / 15.145)
    assert rows["deepspeed"].framework == "deepspeed"
    assert rows["tf_bert"].framework == "tensorflow" and rows["tf_bert"].num_nodes == 1
    assert rows["mxnet_speedometer"].gpus_per_node == 8
    assert all(row.status == "ok" for row in rows.values())
