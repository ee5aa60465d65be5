"""Format detection, DLPerf path hints, errors for bad input, and ParsedLog -> RunRow."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from parsers.detect import (
    FAMILIES,
    detect,
    hints_from_dlperf_path,
    parse_path,
    parse_text,
)
from parsers.foreign import LogHints, LogParseError, to_run_row
from parsers.rows import METHOD_TIMESTAMP_WINDOW, STATUS_INCOMPLETE, STATUS_OK

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"

SAMPLES = {
    "dllogger": [
        "dllogger/2n8g/r50_b128_fp32_1.log",
        "dllogger/pytorch_bert_tqdm.log",
        "dllogger/tf1_resnet50_issue881.log",
        "dllogger/pytorch_bert_squad_issue1107.log",
    ],
    "oneflow_cnn": ["oneflow_cnn/2n8g/resnet50_b128_fp32_1.log",
                    "oneflow_cnn/1n1g/resnet50_b128_fp32_1.log"],
    "oneflow_bert": ["oneflow_bert/1n1g/bert_b24_fp32_1.log"],
    "oneflow_gpt": ["oneflow_gpt/gpt_metrics_with_memory.log"],
    "megatron": ["megatron/epfllm_issue11.log", "megatron/megatron_issue756_tflops.log"],
    "horovod": ["horovod/1n1g/r50_b96_fp16_1.log"],
    "pytorch_imagenet": ["pytorch_imagenet/rocm_issue1147.log",
                         "pytorch_imagenet/examples_issue267.log"],
    "tf2_official": ["tf2_official/1n1g/rn50_b128_fp32_1.log"],
    "paddle": ["paddle/models_pr4882_ips.log", "paddle/paddleclas_pr369.log"],
    "mindspore": ["mindspore/mindflow_darcy_readme.log"],
    "paddle_bert": ["paddle_bert/1n1g/bert_b32_fp32_1.log"],
    "hugectr": ["hugectr/dlperf_wdl_docstring.log"],
    "mllog": ["mllog/quickstart_1n1g_r0.log"],
    "mxnet_bert": ["mxnet_bert/1n1g/bert_b8_fp32_1.log"],
    "oneflow_insightface": ["oneflow_insightface/1n8g/fmobilefacenet_b64_fp32_1.log"],
    "tf_bert": ["tf_bert/1n1g/bert_b1_fp16_1.log"],
    "deepspeed": ["deepspeed/deepspeed_issue1825_samplespersec.log"],
    "mxnet_speedometer": ["mxnet_speedometer/1n8g/r100_b64_fp32_1.log",
                          "mxnet_speedometer/1n4g/resnet34_b128_fp32_1.log"],
}


def test_every_family_has_a_sample() -> None:
    assert set(SAMPLES) == set(FAMILIES)


@pytest.mark.parametrize(
    ("family", "relative"), [(f, p) for f, paths in SAMPLES.items() for p in paths]
)
def test_detect_every_sample(family: str, relative: str) -> None:
    assert detect((LOGS / relative).read_text(encoding="utf-8")) == family


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("logs/16n8g/bert-base-adam-training_b96_fp16_5.log",
         (16, 8, 96, "bert-base-adam-training", "fp16", 5)),
        ("/workspace/rn50/scripts/j5_amp_ngc/pytorch/4n8g/r50_b256_amp_3.log",
         (4, 8, 256, "r50", "amp", 3)),
        ("1n1g/rn50_b128_fp32_12.log", (1, 1, 128, "rn50", "fp32", 12)),
        ("128n16g/gpt_2_b1024_bf16_1.log", (128, 16, 1024, "gpt_2", "bf16", 1)),
    ],
)
def test_hints_from_dlperf_path(path: str, expected: tuple[object, ...]) -> None:
    hints = hints_from_dlperf_path(path)
    got = (hints.num_nodes, hints.gpus_per_node, hints.batch_size_per_device, hints.model,
           hints.precision, hints.repeat)
    assert got == expected


def test_hints_from_a_path_outside_the_layout_are_unknown() -> None:
    hints = hints_from_dlperf_path("/tmp/train.log")
    assert hints == LogHints()


def test_explicit_hints_override_the_path() -> None:
    parsed = parse_path(LOGS / "dllogger/2n8g/r50_b128_fp32_1.log",
                        hints=LogHints(num_nodes=1, warmup_iterations=6, measured_iterations=6))
    # 1 x 8 x 128 = 1024 over the 6 -> 12 window: half of the 2-node figure.
    assert parsed.throughput_sps == pytest.approx(1024 * 6 / 2.39192)


def test_hint_conflicting_with_the_log_is_reported() -> None:
    # The path says 1n1g, the argument dump says 2 nodes x 8 GPUs: the path wins, loudly.
    parsed = parse_text(
        (LOGS / "oneflow_cnn/2n8g/resnet50_b128_fp32_1.log").read_text(encoding="utf-8"),
        hints=LogHints(num_nodes=1, gpus_per_node=1),
    )
    assert parsed.throughput_sps == pytest.approx(128 * 100 / 34.6200511)
    assert any("num_nodes=1" in w and "differs" in w for w in parsed.warnings)


def test_binary_file_is_a_parse_error(tmp_path: Path) -> None:
    path = tmp_path / "1n1g" / "r50_b128_fp32_1.log"
    path.parent.mkdir()
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    with pytest.raises(LogParseError, match=r"r50_b128_fp32_1\.log: binary"):
        parse_path(path)


def test_empty_file_is_a_parse_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(LogParseError, match=r"empty\.log: empty file"):
        parse_path(path)


def test_missing_file_is_a_parse_error(tmp_path: Path) -> None:
    with pytest.raises(LogParseError, match="cannot read"):
        parse_path(tmp_path / "nope.log")


def test_garbage_is_a_parse_error_that_lists_the_formats(tmp_path: Path) -> None:
    path = tmp_path / "garbage.log"
    path.write_text("hello\nthis is not a training log\n\u00e9\u00e8 \ufffd\n", encoding="utf-8")
    with pytest.raises(LogParseError, match=r"garbage\.log: no known log format.*megatron"):
        parse_path(path)


def test_invalid_utf8_is_read_not_crashed(tmp_path: Path) -> None:
    path = tmp_path / "latin1.log"
    path.write_bytes(b"caf\xe9 \xff\xfe\n" + (LOGS / "megatron/epfllm_issue11.log").read_bytes())
    assert parse_path(path).family == "megatron"


def test_unknown_format_name_lists_valid_ones() -> None:
    with pytest.raises(LogParseError, match="unknown format 'nvidia'; valid: auto, dllogger"):
        parse_text("x", fmt="nvidia")


def test_forced_format_without_records_is_a_parse_error() -> None:
    text = (LOGS / "megatron/epfllm_issue11.log").read_text(encoding="utf-8")
    with pytest.raises(LogParseError, match="no oneflow_bert training records"):
        parse_text(text, fmt="oneflow_bert")


@pytest.mark.parametrize(
    "relative", [p for paths in SAMPLES.values() for p in paths]
)
def test_truncated_input_gives_a_result_or_a_parse_error(relative: str) -> None:
    # Every cut of the file (byte prefixes) must parse or raise LogParseError, nothing else.
    data = (LOGS / relative).read_bytes()
    step = max(1, len(data) // 40)
    for cut in range(0, len(data), step):
        text = data[:cut].decode("utf-8", errors="replace")
        with contextlib.suppress(LogParseError):
            parse_text(text)


def test_run_row_from_a_dlperf_path() -> None:
    parsed = parse_path(LOGS / "oneflow_cnn/2n8g/resnet50_b128_fp32_1.log")
    row = to_run_row(parsed)
    assert row.status == STATUS_OK
    # the framework the format implies (OneFlow-Benchmark -> oneflow) fills the empty field
    assert row.framework == "oneflow"
    assert row.case_id == "resnet50-oneflow-fp32-2n8g-bs128"
    assert (row.num_nodes, row.gpus_per_node, row.batch_size_per_device) == (2, 8, 128)
    assert row.global_batch_size == 2048
    assert row.method == METHOD_TIMESTAMP_WINDOW
    assert (row.warmup_iterations, row.measured_iterations) == (20, 100)
    assert row.repeat == 1 and row.precision == "fp32"
    assert row.source.endswith("resnet50_b128_fp32_1.log")
    assert row.loss_first == pytest.approx(7.087004)
    assert row.to_dict()["log_family"] == "oneflow_cnn"


def test_run_row_carries_memory_and_latency() -> None:
    parsed = parse_path(LOGS / "oneflow_gpt/gpt_metrics_with_memory.log",
                        hints=LogHints(num_nodes=1, gpus_per_node=8, batch_size_per_device=64,
                                       framework="oneflow", model="gpt"))
    row = to_run_row(parsed)
    assert row.peak_memory_mib == 11958
    assert row.extra["latency_ms"] == pytest.approx(13124.295)
    assert row.throughput_sps == pytest.approx(512 / 13.124295)


def test_run_row_without_throughput_is_incomplete_and_says_why() -> None:
    # OneFlow's graph-mode scripts print `samples/s: -1.000` and no timestamp (format string
    # seen in Oneflow-Inc/models): records, but nothing to measure.
    text = (
        "train: epoch 0, iter 0, loss: 6.900000, top_1: 0.000000, top_k: -1.000000, "
        "samples/s: -1.000\n"
        "train: epoch 0, iter 100, loss: 6.100000, top_1: 0.000000, top_k: -1.000000, "
        "samples/s: -1.000\n"
    )
    parsed = parse_text(text, hints=LogHints(num_nodes=1, gpus_per_node=1,
                                             batch_size_per_device=128))
    assert parsed.family == "oneflow_cnn" and len(parsed.records) == 2
    row = to_run_row(parsed)
    assert row.status == STATUS_INCOMPLETE
    assert row.throughput_sps is None and row.method is None
    assert "no usable timestamps, step times or rates" in row.error


def test_run_row_needs_the_topology() -> None:
    parsed = parse_path(LOGS / "megatron/epfllm_issue11.log")
    assert parsed.throughput_sps is not None  # the log names its own global batch
    with pytest.raises(LogParseError, match="num_nodes, gpus_per_node, batch_size_per_device"):
        to_run_row(parsed)
