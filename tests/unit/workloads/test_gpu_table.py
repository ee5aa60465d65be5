"""`benchmarks/gpu_table.py` gets one run on a GPU machine: its grids must be valid case sets
with every option at its default (what the table claims to measure), and its table must read
runs.csv the way collect writes it."""

from __future__ import annotations

import pytest

from tests.unit.workloads.conftest import benchmark_module
from toolkit.spec import CompileMode, DeviceKind
from toolkit.spec.grid import parse_grid


@pytest.fixture(scope="module")
def gpu_table():
    yield from benchmark_module("gpu_table")


@pytest.mark.parametrize("part", ["cnn", "gpt"])
@pytest.mark.parametrize("smoke", [False, True])
def test_grids_are_valid_and_leave_the_defaults_alone(gpu_table, part, smoke):
    items = gpu_table.rows(part)
    cases = dict(parse_grid(gpu_table.grid_text(part, items, smoke), source="g.yaml").items())
    assert list(cases) == [r.name for r in items]
    for case in cases.values():
        assert case.repeats == 2 and case.compile is None  # the default: compiled on CUDA
        assert case.device is (DeviceKind.CPU if smoke else DeviceKind.AUTO)
    if part == "gpt" and not smoke:
        default, best = cases.values()
        assert default.compile_mode is CompileMode.DEFAULT
        assert best.compile_mode is CompileMode.MAX_AUTOTUNE
        assert default.micro_batch_size == 16 and default.model_config.hidden_size == 1536


def test_table_reads_runs_and_computes_ratios(gpu_table):
    (bf16, *_) = gpu_table.rows("cnn")
    runs = [{"case_id": bf16.name, "repeat": str(k), "status": "ok", "throughput_sps": str(v),
             "mfu": "", "compile": "compiled", "start_to_first_iteration_s": str(first),
             "compile_s": "3.0", "start_up_launch_s": "1.0", "start_up_setup_s": "9.5",
             "start_up_build_s": "2.0", "start_up_first_iteration_s": str(first - 12.5),
             "compile_cache": ["miss, 1105 tuning trials", "hit"][k], "exit_s": ["3.5", ""][k]}
            for k, (v, first) in enumerate(((7000.0, 62.5), (7100.0, 25.8)))]
    gpu_table.summarize(bf16, runs)
    bf16.result["plain"] = {"bare_throughput_sps": 6700.0, "wall_s": 64.0}
    text = gpu_table.table([bf16], "test", 100.0, 64.0)
    # median 7,050 / 6,700 = 1.052 >= 1.05
    assert "| ResNet50 amp_bf16 bs 256 | 7,050 samples/s | compiled | 6,700 | 1.052 | >= 1.05x" \
        " | yes |" in text
    assert (f"| {bf16.name} | 0 | 62.5 | 1.0 / 9.5 / 2.0 / 50.0 | 3.0 | "
            "miss, 1105 tuning trials | 3.5 | 7,000.0 | - |") in text
    assert f"| {bf16.name} | 1 | 25.8 | 1.0 / 9.5 / 2.0 / 13.3 | 3.0 | hit | - |" in text


def test_plain_profile_is_read_from_a_recorded_log_and_shown_beside_the_toolkit(gpu_table):
    from toolkit import PROJECT_ROOT

    log = PROJECT_ROOT / "tests/data/logs/bare_profile/bare_resnet50_profile_h200.log"
    prof = gpu_table.plain_profile(log)
    # 42.41 ms wall, 36.39 ms of kernels; the kinds as the toolkit's runs.csv names them
    assert prof == pytest.approx({"step": 42.41, "idle": 42.41 - 36.39, "norm_elementwise": 20.61,
                                  "gemm_conv": 15.45, "other": 0.19, "optimizer": 0.14})
    (bf16, *_) = gpu_table.rows("cnn")
    gpu_table.summarize(bf16, [{"case_id": bf16.name, "repeat": "0", "status": "ok",
                                "throughput_sps": "7000", "profile_step_ms": "40.0",
                                "profile_gemm_conv_ms": "16.0",
                                "profile_norm_elementwise_ms": "18.0"}])
    bf16.result["plain"] = {"bare_throughput_sps": 6700.0, "profile": prof}
    text = gpu_table.table([bf16], "test", 1.0, 1.0)
    assert f"| {bf16.name} | 40.0 | 40.0 | 0.0 | 45.0 |" in text
    # 15.45 / 42.41 GEMM/conv, 20.61 / 42.41 norm/elementwise, 6.02 / 42.41 idle
    assert ("| plain `bare_resnet50.py` | 42.4 | 36.4 | 0.0 | 48.6 | 0.0 | 0.3 | 0.4 | 14.2 |"
            in text)


def test_a_variant_row_is_the_same_case_with_its_settings_beside_the_same_plain_run(gpu_table):
    (bf16, tf32, bert) = gpu_table.rows("cnn")
    items, same = gpu_table.with_variants([bf16, tf32, bert], [
        "cuda_graphs=false", "cuda_graphs=false,kernel_tuning=false"])
    assert [r.name for r in items] == [
        bf16.name, f"{bf16.name}-cuda-graphs", f"{bf16.name}-cuda-graphs-kernel-tuning",
        tf32.name, f"{tf32.name}-cuda-graphs", f"{tf32.name}-cuda-graphs-kernel-tuning",
        bert.name, f"{bert.name}-cuda-graphs", f"{bert.name}-cuda-graphs-kernel-tuning"]
    assert same == []
    # every row captures CUDA graphs by default: that variant is each row's own case, left out
    own, same = gpu_table.with_variants([bf16, tf32, bert], ["cuda_graphs=true"])
    assert own == [bf16, tf32, bert]
    assert same == [f"{r.name}-cuda-graphs" for r in (bf16, tf32, bert)]
    graphs, both = items[1], items[2]
    assert graphs.fields == {**bf16.fields, "cuda_graphs": False} and graphs.plain == []
    assert both.fields["kernel_tuning"] is False and both.plain_of == bf16.name
    assert graphs.label == "ResNet50 amp_bf16 bs 256, cuda_graphs: false"
    cases = dict(parse_grid(gpu_table.grid_text("cnn", items, False), source="g.yaml").items())
    assert cases[graphs.name].cuda_graphs is False and cases[bf16.name].cuda_graphs is None
    assert cases[both.name].kernel_tuning is False and cases[bf16.name].kernel_tuning is None
    # the variant's ratio is to its base row's plain run, which is listed once
    for r, tput in ((bf16, "7000"), (graphs, "7400")):
        gpu_table.summarize(r, [{"case_id": r.name, "repeat": "0", "status": "ok",
                                 "throughput_sps": tput}])
        r.result["plain"] = {"bare_throughput_sps": 7000.0, "wall_s": 80.0}
    text = gpu_table.table([bf16, graphs], "test", 1.0, 1.0)
    assert "| ResNet50 amp_bf16 bs 256, cuda_graphs: false | 7,400 samples/s | - | 7,000 | " \
        "1.057 | >= 1.05x | yes |" in text
    assert text.count("plain `bare_resnet50.py --compile`") == 1
    for bad in (["cuda_graphs"], ["Cuda=1"], ["cuda_graphs=true,"]):
        with pytest.raises(ValueError, match="expected KEY=VALUE"):
            gpu_table.with_variants([bf16], bad)
