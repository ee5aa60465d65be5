"""What importing needs from the parsers: run shapes from argument dumps, world sizes and log
names (so Megatron / OneFlow-GPT logs make rows without a DLPerf path), the framework a
format implies, and an explicit window for short logs."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from parsers import megatron
from parsers.detect import hints_from_gpt_log_name, parse_path, parse_text
from parsers.foreign import LogHints, LogParseError, to_run_row
from parsers.rows import METHOD_LATENCY, METHOD_TIMESTAMP_WINDOW, STATUS_OK

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"

# The run's arguments as DLLogger prints them, verbatim from the seed 004 (two-node run of the
# NGC PyTorch ResNet50 report: world_size 16, batch 128, no topology in the line).
PARAMETER_2N8G = (
    "DLL 2020-09-15 14:28:53.498443 - PARAMETER data : /data/image  data_backend : dali-cpu  "
    "arch : resnet50  model_config : fanin  num_classes : 1000  workers : 8  epochs : 1  "
    "run_epochs : -1  batch_size : 128  optimizer_batch_size : -1  lr : 1.024  "
    "lr_schedule : cosine  warmup : 8  label_smoothing : 0.1  mixup : 0.0  momentum : 0.125  "
    "weight_decay : 3.0517578125e-05  bn_weight_decay : False  nesterov : False  "
    "print_freq : 1  resume : None  pretrained_weights :   fp16 : False  "
    "static_loss_scale : 1  dynamic_loss_scale : False  prof : 121  amp : False  seed : None  "
    "gather_checkpoints : False  raport_file : /workspace/rn50/raport.json  evaluate : False  "
    "training_only : True  save_checkpoints : False  checkpoint_filename : checkpoint.pth.tar  "
    "workspace : /workspace/rn50  memory_format : nchw  distributed : True  local_rank : 0  "
    "gpu : 8  world_size : 16 \n"
)


def test_oneflow_gpt_argument_table_gives_the_run_shape_without_path_hints() -> None:
    # DLPerf README log: 4 nodes x 8 GPUs, dp 2 tp 4 pp 4, micro batch 8, global 512, fp16.
    parsed = parse_path(LOGS / "oneflow_gpt/dlperf_readme_2d_pp_2x4x4.log")
    hints = parsed.hints
    assert (hints.num_nodes, hints.gpus_per_node, hints.batch_size_per_device) == (4, 8, 8)
    assert hints.global_batch_size == 512 and hints.precision == "amp_fp16"
    assert hints.variant == ("dp=2,tp=4,pp=4,hidden_size=2304,num_layers=24,num_heads=24,"
                             "seq_len=2048")
    # the log stops at iteration 100, short of the default window's end (20 + 100): said so
    assert parsed.warnings == ("log ends at iteration 100, before the window end 120 (20 "
                               "warm-up + 100 measured); measured up to 100",)
    row = to_run_row(parsed)
    assert row.status == STATUS_OK and row.method == METHOD_LATENCY
    assert (row.framework, row.model) == ("oneflow", "gpt")  # what the format implies
    assert (row.dp, row.tp, row.pp) == (2, 4, 4)  # typed columns, not only the variant
    # the rows after the 20 warm-up iterations: batches 30..100, 8 latencies
    latencies = [13.12469, 13.12390, 13.12932, 13.12500, 13.11330, 13.11041, 13.11229,
                 13.12494]
    assert row.throughput_sps == pytest.approx(512 / statistics.fmean(latencies))
    assert round(row.throughput_sps or 0, 2) == 39.02  # the README's table: 39.03 (own window)
    assert row.peak_memory_mib == 11958
    assert row.case_id == "gpt-oneflow-amp_fp16-4n8g-bs8-dp2-tp4-pp4-h2304-l24-nh24-s2048"


def test_gpt_log_name_gives_topology_batches_and_layout() -> None:
    hints = hints_from_gpt_log_name(
        "perf_test_logs/pretrain_gpt_4n8d_dp2_mp4_pp4_mbz8_gbz512_s2048_l24_h2304_nh24.log")
    assert (hints.num_nodes, hints.gpus_per_node, hints.batch_size_per_device,
            hints.global_batch_size, hints.model) == (4, 8, 8, 512, "gpt")
    assert (hints.dp, hints.tp, hints.pp) == (2, 4, 4)
    # the same variant string as the argument table: a log with both gives no conflict
    table = parse_path(LOGS / "oneflow_gpt/dlperf_readme_2d_pp_2x4x4.log").hints.variant
    assert hints.variant == table
    assert hints_from_gpt_log_name("train.log") == LogHints()


def test_gpt_log_name_is_read_by_parse_path(tmp_path: Path) -> None:
    name = "pretrain_gpt_1n8d_dp8_mp1_pp1_mbz2_gbz16_s2048_l16_h1536_nh16.log"
    text = (LOGS / "oneflow_gpt/gpt_metrics_with_memory.log").read_text(encoding="utf-8")
    (tmp_path / name).write_text(text, encoding="utf-8")
    parsed = parse_path(tmp_path / name)
    row = to_run_row(parsed)
    assert (row.num_nodes, row.gpus_per_node, row.batch_size_per_device) == (1, 8, 2)
    assert row.variant.startswith("dp=8,tp=1,pp=1,")
    # the metric table's own global batch (5120 / 10 = 512) disagrees with the name's 16: kept,
    # and said
    assert any("global_batch_size=16" in w and "differs" in w for w in parsed.warnings)


def test_megatron_without_topology_is_refused_with_what_to_pass() -> None:
    parsed = parse_path(LOGS / "megatron/epfllm_issue11.log")
    with pytest.raises(LogParseError, match="--gpus-per-node"):
        to_run_row(parsed)


def test_megatron_world_size_and_gpus_per_node_give_the_nodes() -> None:
    # Megatron's dotted argument table (the format Megatron-LM prints; these lines are written
    # for the test) in front of the real iteration lines of epfLLM issue #11.
    dump = (
        "------------------------ arguments ------------------------\n"
        "  bf16 ............................................ True\n"
        "  fp16 ............................................ False\n"
        "  global_batch_size ............................... 1024\n"
        "  hidden_size ..................................... 8192\n"
        "  micro_batch_size ................................ 1\n"
        "  num_attention_heads ............................. 64\n"
        "  num_layers ...................................... 80\n"
        "  pipeline_model_parallel_size .................... 8\n"
        "  seq_length ...................................... 4096\n"
        "  tensor_model_parallel_size ...................... 8\n"
        "  wandb_exp_name .................................. \n"
        "  world_size ...................................... 128\n"
        "-------------------- end of arguments ---------------------\n"
    )
    text = dump + (LOGS / "megatron/epfllm_issue11.log").read_text(encoding="utf-8")
    parsed = megatron.parse(text, hints=LogHints(gpus_per_node=8))
    assert parsed.hints.world_size == 128 and parsed.hints.precision == "amp_bf16"
    assert parsed.hints.variant == ("dp=2,tp=8,pp=8,hidden_size=8192,num_layers=80,"
                                    "num_heads=64,seq_len=4096")
    row = to_run_row(parsed)
    assert (row.num_nodes, row.gpus_per_node, row.batch_size_per_device) == (16, 8, 1)
    assert row.throughput_sps == pytest.approx(4096 / 352.9668)
    # without the GPUs per node the world size alone does not say the topology
    with pytest.raises(LogParseError, match=r"world_size=128"):
        to_run_row(megatron.parse(text, hints=LogHints()))
    # and a world size the GPUs per node do not divide is not rounded
    with pytest.raises(LogParseError, match="num_nodes"):
        to_run_row(megatron.parse(text, hints=LogHints(gpus_per_node=6)))


def test_dllogger_world_size_window_and_framework() -> None:
    # The 5137.3 img/s of log-formats.md needs the explicit 6 -> 12 window (the log has 12
    # iterations) and 16 GPUs; here the GPUs come from the PARAMETER line's world_size and the
    # caller's 8 GPUs per node instead of a DLPerf path.
    lines = (LOGS / "dllogger/2n8g/r50_b128_fp32_1.log").read_text(encoding="utf-8")
    parsed = parse_text(PARAMETER_2N8G + lines, hints=LogHints(
        gpus_per_node=8, warmup_iterations=6, measured_iterations=6))
    assert parsed.method == METHOD_TIMESTAMP_WINDOW
    assert round(parsed.throughput_sps or 0, 1) == 5137.3
    row = to_run_row(parsed)
    assert (row.num_nodes, row.gpus_per_node, row.batch_size_per_device) == (2, 8, 128)
    assert (row.framework, row.model) == ("torch", "resnet50")  # PyTorch record shape, arch


def test_tensorflow_dllogger_and_tf2_logs_say_tensorflow() -> None:
    assert parse_path(LOGS / "dllogger/tf1_resnet50_issue881.log").hints.framework == \
        "tensorflow"
    assert parse_path(LOGS / "tf2_official/1n1g/rn50_b128_fp32_1.log").hints.framework == \
        "tensorflow"
    # a caller's framework wins over the format's default
    assert parse_path(LOGS / "tf2_official/1n1g/rn50_b128_fp32_1.log",
                      hints=LogHints(framework="tf2.3")).hints.framework == "tf2.3"
