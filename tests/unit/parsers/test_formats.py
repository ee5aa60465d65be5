"""Every foreign-log family on recorded real lines (tests/data/logs/*/SOURCE.md says where from).

Expected values are computed by hand from the lines in each file; the arithmetic is spelled
out next to each assertion.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from parsers import dllogger, horovod, megatron, oneflow_cnn, paddle
from parsers.detect import parse_path
from parsers.foreign import LogHints
from parsers.rows import METHOD_LATENCY, METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"


def test_dllogger_pytorch_resnet50_window_6_to_12() -> None:
    # 2 nodes x 8 GPUs x 128 (from the path 2n8g/r50_b128_...), window 6 -> 12:
    # 2048 x 6 / (18.553769 - 16.161849) s = 5137.3 img/s.
    parsed = parse_path(
        LOGS / "dllogger/2n8g/r50_b128_fp32_1.log",
        hints=LogHints(warmup_iterations=6, measured_iterations=6),
    )
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (6, 12)
    assert parsed.throughput_sps == pytest.approx(2048 * 6 / 2.39192)
    assert round(parsed.throughput_sps or 0, 1) == 5137.3
    assert parsed.warnings == ()
    assert [r.iteration for r in parsed.records] == list(range(1, 13))
    assert parsed.loss_first == 7.09304 and parsed.loss_last == 6.67351


def test_dllogger_short_log_default_window_uses_what_exists_and_says_so() -> None:
    # Only 12 iterations, the default 20 -> 120 is not there: 1 -> 12,
    # 2048 x 11 / (18.553769 - 13.473765) s = 4434.6 img/s, with a warning.
    parsed = parse_path(LOGS / "dllogger/2n8g/r50_b128_fp32_1.log")
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (1, 12)
    assert parsed.throughput_sps == pytest.approx(2048 * 11 / 5.080004)
    assert any("does not cover the window 20->120" in w for w in parsed.warnings)


def test_dllogger_pytorch_bert_tqdm_glued_and_accumulation() -> None:
    # 8 GPUs x 32 x 264 accumulation = 67584 sequences per optimizer step, iterations 1 -> 4:
    # 67584 x 3 / (09:11:37.977804 - 09:08:15.742973 = 202.234831 s) = 1002.6 seq/s.
    text = (LOGS / "dllogger/pytorch_bert_tqdm.log").read_text(encoding="utf-8")
    hints = LogHints(num_nodes=1, gpus_per_node=8, batch_size_per_device=32, accumulation=264)
    parsed = dllogger.parse(text, hints=hints)
    assert [r.iteration for r in parsed.records] == [1, 2, 3, 4]
    assert round(parsed.throughput_sps or 0, 1) == 1002.6
    assert parsed.loss_first == pytest.approx(11.192132949829102)  # step_loss, not average
    assert parsed.extra["reported_summary_sps"] == pytest.approx(999.9906940433281)


def test_dllogger_tf1_resnet50_issue881() -> None:
    path = LOGS / "dllogger/tf1_resnet50_issue881.log"
    rates = [
        2879.142978189404, 2888.2350738640644, 2894.29203258344, 2881.9481285647184,
        2879.204740836082, 2906.883780615574, 2900.3274430464544, 2889.719715910467,
        2882.5748173124935, 2884.5495071714677, 2901.9657139768383, 2899.0040687612554,
        2888.5380967112783, 2892.662411939816, 2888.38269243702, 2872.6572422280487,
        2887.4040298920863,
    ]
    # No batch size known: the mean of the 17 printed total_ips, said so in the warnings.
    parsed = parse_path(path)
    assert parsed.method == METHOD_MEAN_OF_RATES
    assert parsed.throughput_sps == pytest.approx(statistics.fmean(rates))
    assert any("global batch size is unknown" in w for w in parsed.warnings)
    # With batch 256 on one GPU (the total_ips of ~2890 img/s fit 256 / 0.089 s per step):
    # 256 x 16 / (40.247934 - 38.824370 = 1.423564 s) = 2877.3 img/s.
    hints = LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=256)
    parsed = parse_path(path, hints=hints)
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (120, 136)
    assert parsed.throughput_sps == pytest.approx(256 * 16 / 1.423564)


def test_dllogger_tf1_bert_summary_line_skipped() -> None:
    # Lines built to the shape log-formats.md describes (no public sample was found):
    # the final summary record has no `Iteration:` and must not become an iteration.
    text = (
        "DLL 2020-08-26 18:06:39.000000 - Iteration: 20  throughput_train : 100.0 seq/s "
        "mlm_loss : 7.5  total_loss : 8.25\n"
        "DLL 2020-08-26 18:06:49.000000 - Iteration: 120  throughput_train : 200.0 seq/s "
        "mlm_loss : 7.0  total_loss : 8.0\n"
        "DLL 2020-08-26 18:06:50.000000 -  throughput_train : 150.0 seq/s\n"
    )
    parsed = dllogger.parse(text, hints=LogHints(num_nodes=1, gpus_per_node=1,
                                                 batch_size_per_device=48))
    assert [r.iteration for r in parsed.records] == [20, 120]
    assert parsed.throughput_sps == pytest.approx(48 * 100 / 10.0)
    assert parsed.extra["reported_summary_sps"] == 150.0


def test_dllogger_pytorch_bert_squad_issue1107() -> None:
    # Iterations 2872 -> 3272 (the excerpt starts long after warm-up, so first -> last),
    # batch 32 on one GPU given as a hint (the thread does not say):
    # 32 x 400 / (02:23:43.103490 - 02:22:54.614486 = 48.489004 s) = 264.0 seq/s.
    parsed = parse_path(
        LOGS / "dllogger/pytorch_bert_squad_issue1107.log",
        hints=LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=32),
    )
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (2872, 3272)
    assert parsed.throughput_sps == pytest.approx(32 * 400 / 48.489004)
    # Median of the eight 50-iteration gaps, (6.047765 + 6.078678) / 2 s, per iteration.
    assert parsed.step_time_median_s == pytest.approx((6.047765 + 6.078678) / 2 / 50)
    assert parsed.loss_last == pytest.approx(0.4844636023044586)


def test_oneflow_cnn_with_timestamps() -> None:
    # Argument dump: 2 nodes x 8 GPUs x 128; 2048 x 100 / 34.6200511 s = 5915.6.
    parsed = parse_path(LOGS / "oneflow_cnn/2n8g/resnet50_b128_fp32_1.log")
    assert parsed.family == "oneflow_cnn"
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert round(parsed.throughput_sps or 0, 1) == 5915.6
    assert parsed.settings["model"] == "resnet50"
    assert parsed.hints.num_nodes == 2 and parsed.hints.gpus_per_node == 8


def test_oneflow_cnn_without_timestamps_seed_003() -> None:
    # Mean of the nine rates after the first: 3465.861 / 9 = 385.096 -> 385.1.
    parsed = parse_path(LOGS / "oneflow_cnn/1n1g/resnet50_b128_fp32_1.log")
    assert parsed.method == METHOD_MEAN_OF_RATES
    assert parsed.throughput_sps == pytest.approx(3465.861 / 9)
    assert round(parsed.throughput_sps or 0, 1) == 385.1
    assert parsed.warnings == ()


def test_oneflow_cnn_iter_restarts_each_epoch_and_saving_lines() -> None:
    # num_examples 12800 / (1 x 1 x 128) = 100 iterations per epoch, so epoch 1 iter 20 is
    # iteration 120: 128 x 100 / 25 s = 512.
    text = (
        "model = resnet50\nbatch_size_per_device = 128\ngpu_num_per_node = 1\nnum_nodes = 1\n"
        "num_examples = 12800\n"
        "train: epoch 0, iter 20, loss: 7.0, top_1: 0.0, top_k: 0.0, samples/s: 400.0 "
        "1597933900.0\n"
        "train: epoch 0, iter 100, loss: 6.0, top_1: 0.0, top_k: 0.0, samples/s: 512.0 "
        "1597933920.0\n"
        "Saving model to ./output/snapshot_epoch_0.\n"
        "train: epoch 1, iter 20, loss: 5.0, top_1: 0.0, top_k: 0.0, samples/s: 512.0 "
        "1597933925.0\n"
    )
    parsed = oneflow_cnn.parse(text, hints=LogHints())
    assert [r.iteration for r in parsed.records] == [20, 100, 120]
    assert parsed.throughput_sps == pytest.approx(128 * 100 / 25.0)


def test_oneflow_bert() -> None:
    # 0-based steps 19 and 119 are iterations 20 and 120: 24 x 100 / 17.1185193 s = 140.2.
    parsed = parse_path(LOGS / "oneflow_bert/1n1g/bert_b24_fp32_1.log")
    assert [r.iteration for r in parsed.records] == [20, 120]
    assert round(parsed.throughput_sps or 0, 1) == 140.2
    assert parsed.loss_last == 8.010


def test_oneflow_gpt_latency_and_memory() -> None:
    # Global batch 5120 / 10 = 512. Rows after the 20 warm-up iterations: 30 and 40,
    # mean latency (13.12469 + 13.12390) / 2 s: 512 / 13.124295 = 39.01 samples/s.
    parsed = parse_path(LOGS / "oneflow_gpt/gpt_metrics_with_memory.log")
    assert parsed.method == METHOD_LATENCY
    assert parsed.hints.global_batch_size == 512
    assert parsed.throughput_sps == pytest.approx(512 / 13.124295)
    assert parsed.peak_memory_mib == 11958
    assert parsed.extra["latency_ms"] == pytest.approx(13124.295)


def test_megatron_reference_line() -> None:
    # 1024 / 86.5452 s = 11.83 samples/s.
    parsed = parse_path(LOGS / "megatron/epfllm_issue11_single.log")
    assert parsed.family == "megatron"
    assert round(parsed.throughput_sps or 0, 2) == 11.83
    assert parsed.loss_first == pytest.approx(2.504220)


def test_megatron_old_format_issue11() -> None:
    # 4 x 1024 / (86545.2 + 87871.6 + 89474.8 + 89075.2 ms) = 4096 / 352.9668 s = 11.60.
    parsed = parse_path(LOGS / "megatron/epfllm_issue11.log")
    assert parsed.throughput_sps == pytest.approx(4096 / 352.9668)
    assert parsed.measured_iterations == 4


def test_megatron_new_format_with_tflops_issue756() -> None:
    # 3 x 128 / (5444.9 + 5533.8 + 5718.6 ms = 16.6973 s) = 23.00 samples/s;
    # TFLOP/s/GPU mean (239.8 + 236.0 + 228.4) / 3 = 234.73. Timer lines are ignored.
    text = (LOGS / "megatron/megatron_issue756_tflops.log").read_text(encoding="utf-8")
    text += (" time (ms) | forward-backward: 5400.1 | forward-compute: 1200.3 | "
             "backward-compute: 4100.2 | optimizer: 30.5\n")
    parsed = parse_path(LOGS / "megatron/megatron_issue756_tflops.log")
    assert len(parsed.records) == 3
    assert parsed.throughput_sps == pytest.approx(384 / 16.6973)
    assert parsed.extra["tflops_per_gpu"] == pytest.approx((239.8 + 236.0 + 228.4) / 3)
    assert len(megatron.parse(text, hints=LogHints()).records) == 3


def test_horovod_reference_lines() -> None:
    # 1 GPU x 96, batches 20..39 between the two timestamps:
    # 96 x 20 / (08:02:38.301 - 08:02:33.385 = 4.916 s) = 390.6 img/s.
    parsed = parse_path(LOGS / "horovod/1n1g/r50_b96_fp16_1.log")
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert (parsed.window_start_iteration, parsed.window_end_iteration) == (20, 40)
    assert round(parsed.throughput_sps or 0, 1) == 390.6


def test_horovod_groups_by_rank_instead_of_averaging_duplicates() -> None:
    text = (LOGS / "horovod/1n1g/r50_b96_fp16_1.log").read_text(encoding="utf-8")
    other_rank = text.replace("[1,0]", "[1,1]").replace("08:02:38,301", "08:02:40,000")
    parsed = horovod.parse(other_rank + text, hints=LogHints(
        num_nodes=1, gpus_per_node=2, batch_size_per_device=96))
    assert {r.rank for r in parsed.records} == {0, 1}
    # Measured on rank 0 only: 192 x 20 / 4.916 s.
    assert parsed.throughput_sps == pytest.approx(192 * 20 / 4.916)
    assert any("measured on rank 0" in w for w in parsed.warnings)


def test_pytorch_imagenet_reads_current_time() -> None:
    # Records 1, 21, ..., 121 (1-based index); after 20 warm-up iterations the current
    # Time values 1.175, 1.186, 1.205, 1.188, 1.199, 1.168 (mean 1.186833 s), global batch 256
    # given as a hint: 256 / 1.186833 = 215.7 img/s. The first record's Time is 60.000.
    parsed = parse_path(LOGS / "pytorch_imagenet/rocm_issue1147.log",
                        hints=LogHints(global_batch_size=256))
    assert parsed.records[0].step_time_s == 60.0
    assert parsed.records[1].step_time_s == 1.175
    assert parsed.throughput_sps == pytest.approx(256 / (7.121 / 6))
    assert parsed.loss_first == pytest.approx(6.9078)


def test_pytorch_imagenet_old_format_ignores_test_lines() -> None:
    parsed = parse_path(LOGS / "pytorch_imagenet/examples_issue267.log",
                        hints=LogHints(global_batch_size=256))
    times = [0.544, 0.965, 0.517, 0.719, 0.526, 0.837, 0.512]
    assert [r.step_time_s for r in parsed.records] == times
    assert parsed.throughput_sps == pytest.approx(256 / statistics.fmean(times))


def test_tf2_timehistory_mean_of_rates() -> None:
    # Intervals starting at step >= 20: (327.08 + 324.90 + 327.40 + 318.56 + 321.57) / 5.
    parsed = parse_path(LOGS / "tf2_official/1n1g/rn50_b128_fp32_1.log")
    assert parsed.method == METHOD_MEAN_OF_RATES
    assert parsed.throughput_sps == pytest.approx(1619.51 / 5)
    assert parsed.warnings == ()


def test_paddle_batch_cost_and_ips_pr4882() -> None:
    # Records at iterations 1, 11, 21, 31; only the interval 21 -> 31 starts after the 20
    # warm-up iterations: 128 / 0.12962 s = 987.5 img/s (the line's own ips: 987.52497).
    parsed = parse_path(LOGS / "paddle/models_pr4882_ips.log",
                        hints=LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=128))
    assert parsed.family == "paddle"
    assert [r.iteration for r in parsed.records] == [1, 11, 21, 31]
    assert parsed.method == METHOD_LATENCY
    assert parsed.throughput_sps == pytest.approx(128 / 0.12962)


def test_paddle_18_and_20_lines_pr369() -> None:
    lines = (LOGS / "paddle/paddleclas_pr369.log").read_text(encoding="utf-8").splitlines()
    old = paddle.parse(lines[0], hints=LogHints()).records[0]
    assert (old.iteration, old.step_time_s, old.loss) == (311, 0.1418407, 6.88331)
    new = paddle.parse(lines[1], hints=LogHints()).records[0]
    assert (new.iteration, new.step_time_s, new.rate_sps) == (51, 0.28419, 225.20036)


def test_mindspore_epoch_and_step_time() -> None:
    # Ten epochs of 8 steps (1991..2000); the leading orphan `epoch time` is skipped.
    # Mean per-step time 1626.636 / 10 ms; batch 8192: 8192 / 0.1626636 s = 50361.7.
    parsed = parse_path(LOGS / "mindspore/mindflow_darcy_readme.log",
                        hints=LogHints(global_batch_size=8192))
    assert [r.iteration for r in parsed.records] == [e * 8 for e in range(1991, 2001)]
    assert parsed.records[3].step_time_s == pytest.approx(0.295807)  # epoch 1994
    assert parsed.throughput_sps == pytest.approx(8192 / 0.1626636)
    assert any("without a preceding" in w for w in parsed.warnings)


def test_dllogger_json_stream_resnet50():
    # NVIDIA/dllogger's recorded ResNet50 JSON stream: steps [0,5]..[0,20], [1,5]..[1,20] at
    # 128 img per step on 1 GPU; window 10 -> 40 from the records' own timestamps:
    # 128 x 30 / (1570716931.323747 - 1570716922.790879 = 8.532868 s) = 450.03 img/s.
    path = LOGS / "dllogger/dllogger_example_resnet_json.log"
    hints = LogHints(num_nodes=1, gpus_per_node=1, warmup_iterations=10, measured_iterations=30)
    parsed = parse_path(path, hints=hints)
    assert parsed.family == "dllogger"
    assert [r.iteration for r in parsed.records] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert parsed.hints.batch_size_per_device == 128  # from its PARAMETER record
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert parsed.throughput_sps == pytest.approx(128 * 30 / 8.532868)
    assert parsed.loss_first == pytest.approx(8.56640625)
    assert parsed.extra["reported_summary_sps"] == pytest.approx(661.9801574510492)
    # the two records of one step are one iteration: the second's timings do not add one
    assert parsed.records[0].rate_sps == pytest.approx(545.2730241953889)
