"""The torch run options of a case: validation naming the key, how they resolve per device, and
that they separate variants (so eager and compiled runs are never one median)."""

from __future__ import annotations

import pytest

from toolkit.spec import Case, CaseError, CompileMode, DataSource, Optimizer, Precision, resolve
from toolkit.spec.grid import GridError, parse_grid
from toolkit.workloads import unsupported_reason
from toolkit.workloads.pytorch.common import RunOptions, configure_precision, resolve_options


@pytest.mark.parametrize("fields,key,text", [
    ({"model": "bert_base", "optimizer": "sgd"}, "optimizer", "adamw or lamb, not sgd"),
    ({"model": "resnet50", "optimizer": "lamb"}, "optimizer", "resnet50 trains with sgd"),
    ({"data": "image_folder"}, "data_path", "needs data_path"),
    ({"data_path": "/data/imagenet"}, "data_path", "only used with data: image_folder"),
    ({"model": "bert_base", "data": "image_folder", "data_path": "/d"}, "data",
     "resnet50 only"),
    ({"data": "image_folder", "data_path": "/d", "data_workers": -1}, "data_workers", ">= 0"),
    ({"compile": False, "cuda_graphs": True}, "cuda_graphs", "needs compile"),
    ({"compile": False, "compile_mode": "max_autotune"}, "compile_mode", "needs compile"),
    ({"compile": False, "kernel_tuning": True}, "kernel_tuning", "needs compile"),
    ({"kernel_tuning": "yes"}, "kernel_tuning", "expected true or false"),
    ({"cudnn_benchmark": "on"}, "cudnn_benchmark", "expected true or false"),
    ({"model": "bert_base", "channels_last": True}, "channels_last", "resnet50 only"),
    ({"ddp_bucket_mb": 0}, "ddp_bucket_mb", "finite number of MiB > 0"),
    ({"ddp_bucket_mb": float("nan")}, "ddp_bucket_mb", "finite number of MiB > 0"),
    ({"ddp_bucket_mb": float("inf")}, "ddp_bucket_mb", "finite number of MiB > 0"),
    ({"model": "gpt", "ddp_bucket_mb": 100}, "ddp_bucket_mb", "resnet50 and bert_base only"),
    ({"compile": False, "compiled_ddp": "one_graph"}, "compiled_ddp", "needs compile"),
    ({"framework": "oneflow", "compiled_ddp": "one_graph"}, "compiled_ddp", "torch only"),
    ({"compiled_ddp": "two_graphs"}, "compiled_ddp", "bucket_graphs"),
    ({"grad_reduce": "fp16"}, "grad_reduce", "fp32, bf16"),
    ({"framework": "oneflow", "grad_reduce": "bf16"}, "grad_reduce", "torch built-in"),
    ({"gpus_per_node": 2, "compiled_ddp": "compiled_autograd", "grad_reduce": "bf16"},
     "grad_reduce", "communication hook"),
    ({"model": "gpt", "gpus_per_node": 2, "sequence_parallel": True}, "sequence_parallel",
     "needs tensor parallelism"),
    ({"model": "gpt", "gpus_per_node": 4, "batch_size_per_device": 4, "sequence_parallel": True,
      "parallel": {"tp": 2, "pp": 2, "micro_batch_size": 2}}, "sequence_parallel",
     "not supported with pipeline stages"),
    ({"model": "bert_base", "sequence_parallel": True}, "sequence_parallel", "only model gpt"),
    ({"model": "bert_base", "async_tp": True}, "async_tp", "only model gpt"),
    ({"model": "gpt", "gpus_per_node": 2, "parallel": {"tp": 2}, "async_tp": True}, "async_tp",
     "needs sequence_parallel"),
    ({"model": "gpt", "gpus_per_node": 2, "parallel": {"tp": 2}, "sequence_parallel": True,
      "async_tp": True, "compile": False}, "async_tp", "needs compile"),
])
def test_bad_options_name_the_key(fields, key, text):
    with pytest.raises(CaseError) as info:
        Case.from_dict(fields)
    assert info.value.key == key
    assert text in info.value.message


def test_unknown_values_list_the_choices_and_grid_errors_name_file_and_key():
    with pytest.raises(CaseError, match="expected one of sgd, adamw, lamb"):
        Case.from_dict({"optimizer": "adam"})
    with pytest.raises(CaseError, match="expected one of synthetic, image_folder"):
        Case.from_dict({"data": "imagenet"})
    with pytest.raises(GridError) as info:
        parse_grid("base: {model: bert_base}\nsweep: {optimizer: [adamw, sgd]}\n",
                   source="g.yaml")
    assert "g.yaml: sweep.optimizer[1]" in str(info.value)


def test_options_resolve_per_device():
    case = resolve(Case.from_dict({"model": "resnet50"}))
    gpu, cpu = resolve_options(case, "cuda"), resolve_options(case, "cpu")
    assert (gpu.compile, gpu.channels_last, gpu.cuda_graphs) == (True, True, True)
    assert (cpu.compile, cpu.channels_last, cpu.cuda_graphs) == (False, False, False)
    assert gpu.torch_compile_mode == "reduce-overhead"  # CUDA graphs, and kernels as default
    assert not cpu.notes  # unset: off on CPU without a note

    graphs = resolve(Case.from_dict({"model": "bert_base", "cuda_graphs": True}))
    assert resolve_options(graphs, "cuda").torch_compile_mode == "reduce-overhead"
    on_cpu = resolve_options(graphs, "cpu")
    assert not on_cpu.cuda_graphs and "not applied on a CPU" in on_cpu.notes[0]
    # BERT has no memory-format option: never channels_last
    assert not resolve_options(graphs, "cuda").channels_last

    tuned = resolve(Case.from_dict({"compile": True, "compile_mode": "max_autotune",
                                    "cuda_graphs": False}))
    assert resolve_options(tuned, "cpu").compile
    assert resolve_options(tuned, "cpu").torch_compile_mode == "max-autotune-no-cudagraphs"
    # a mode asks for compilation where `compile` is unset, on any device and for every model
    for model in ("resnet50", "bert_base", "gpt"):
        mode_only = resolve(Case.from_dict({"model": model, "compile_mode": "max_autotune"}))
        assert resolve_options(mode_only, "cpu").compile
    # kernel tuning: on for a compiled ResNet50 on CUDA, off for the transformers unless asked,
    # never on CPU (recorded as not applied when asked)
    amp = resolve(Case.from_dict({"model": "resnet50", "precision": "amp_bf16"}))
    assert resolve_options(amp, "cuda").kernel_tuning
    assert not resolve_options(amp, "cpu").kernel_tuning
    assert resolve_options(amp, "cuda").to_dict()["kernel_tuning"] is True
    for model in ("bert_base", "gpt"):
        unset = resolve(Case.from_dict({"model": model}))
        assert not resolve_options(unset, "cuda").kernel_tuning
        asked = resolve(Case.from_dict({"model": model, "kernel_tuning": True}))
        assert resolve_options(asked, "cuda").kernel_tuning
        on_cpu = resolve_options(asked, "cpu")
        assert not on_cpu.kernel_tuning and "kernel_tuning: not applied" in on_cpu.notes[0]
    for precision, tuned in (("amp_bf16", True), ("amp_fp16", True), ("tf32", False),
                             ("fp32", False)):
        rn = resolve(Case.from_dict({"model": "resnet50", "precision": precision}))
        assert resolve_options(rn, "cuda").kernel_tuning is tuned, precision
    asked_tf32 = resolve(Case.from_dict({"precision": "tf32", "kernel_tuning": True}))
    assert resolve_options(asked_tf32, "cuda").kernel_tuning
    off = resolve(Case.from_dict({"model": "resnet50", "kernel_tuning": False}))
    assert not resolve_options(off, "cuda").kernel_tuning
    eager = resolve(Case.from_dict({"model": "resnet50", "compile": False}))
    assert not resolve_options(eager, "cuda").kernel_tuning
    explicit = resolve(Case.from_dict({"compile": False, "channels_last": True}))
    assert resolve_options(explicit, "cuda").compile is False
    assert resolve_options(explicit, "cpu").channels_last is True


def test_options_enter_the_variant_and_hash_only_when_set():
    plain = resolve(Case.from_dict({"model": "bert_base"}))
    eager = resolve(Case.from_dict({"model": "bert_base", "compile": False}))
    lamb = resolve(Case.from_dict({"model": "bert_base", "optimizer": "lamb"}))
    assert "compile" not in plain.variant() and "optimizer" not in plain.variant()
    assert eager.variant().endswith("data=synthetic,compile=False")
    assert lamb.variant().endswith("optimizer=lamb")
    assert len({plain.config_hash(), eager.config_hash(), lamb.config_hash()}) == 3
    # kernel_tuning unset leaves the hash of every case that existed before the option
    assert "kernel_tuning" not in plain.to_dict() or plain.to_dict()["kernel_tuning"] is None
    tuned = resolve(Case.from_dict({"model": "bert_base", "kernel_tuning": True}))
    untuned = resolve(Case.from_dict({"model": "bert_base", "kernel_tuning": False}))
    assert tuned.variant().endswith("kernel_tuning=True")
    assert len({plain.config_hash(), tuned.config_hash(), untuned.config_hash()}) == 3
    real = resolve(Case.from_dict({"data": "image_folder", "data_path": "/d/train",
                                   "data_workers": 6}))
    assert "data=image_folder" in real.variant() and "data_workers=6" in real.variant()
    assert real.data is DataSource.IMAGE_FOLDER


def test_cudnn_benchmark_is_off_unless_asked_and_is_what_the_run_sets():
    unset = resolve(Case.from_dict({"model": "resnet50"}))
    asked = resolve(Case.from_dict({"model": "resnet50", "cudnn_benchmark": True}))
    off = resolve(Case.from_dict({"model": "resnet50", "cudnn_benchmark": False}))
    for device in ("cuda", "cpu"):
        assert resolve_options(unset, device).cudnn_benchmark is False
        assert resolve_options(off, device).cudnn_benchmark is False
        assert resolve_options(asked, device).to_dict()["cudnn_benchmark"] is True
    # set, it is a variant of its own; unset, the hash of earlier cases stays as it was
    assert "cudnn" not in unset.variant() and asked.variant().endswith("cudnn_benchmark=True")
    assert unset.to_dict().get("cudnn_benchmark") is None
    assert len({unset.config_hash(), asked.config_hash(), off.config_hash()}) == 3
    assert Case.from_dict(asked.to_dict()) == asked

    torch = pytest.importorskip("torch")
    before = torch.backends.cudnn.benchmark
    try:
        for wanted in (True, False):
            flags = configure_precision(Precision.AMP_BF16, RunOptions(cudnn_benchmark=wanted))
            assert torch.backends.cudnn.benchmark is wanted
            assert flags["torch.backends.cudnn.benchmark"] is wanted
    finally:
        torch.backends.cudnn.benchmark = before


def test_cudnn_benchmark_is_a_torch_option_even_when_false():
    for value in (True, False):
        case = resolve(Case.from_dict({"framework": "oneflow", "model": "resnet50",
                                       "cudnn_benchmark": value}))
        assert "cudnn_benchmark: torch options" in (unsupported_reason(case) or "")
    assert unsupported_reason(resolve(Case.from_dict({"framework": "oneflow",
                                                      "model": "resnet50"}))) is None


def test_options_round_trip_through_plain_dicts():
    case = resolve(Case.from_dict({"model": "bert_base", "optimizer": "lamb", "compile": True,
                                   "compile_mode": "max_autotune", "cuda_graphs": True}))
    again = Case.from_dict(case.to_dict())
    assert again == case
    assert again.optimizer is Optimizer.LAMB and again.compile_mode is CompileMode.MAX_AUTOTUNE


def test_ddp_bucket_size_is_part_of_the_variant():
    case = Case.from_dict({"model": "resnet50", "ddp_bucket_mb": 200})
    assert "ddp_bucket_mb=200" in case.variant()
    assert "ddp_bucket" not in Case.from_dict({"model": "resnet50"}).variant()


@pytest.fixture
def gloo_runtime(tmp_path):
    """A one-rank gloo process group and the CPU runtime `wrap_ddp` takes; torch's module."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from toolkit.workloads.pytorch.common import TorchRuntime

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        yield torch, TorchRuntime(device=torch.device("cpu"), device_name="cpu",
                                  distributed=True, backend="gloo")
    finally:
        dist.destroy_process_group()


def test_wrap_ddp_uses_the_bucket_size(gloo_runtime):
    from toolkit.workloads.pytorch.common import wrap_ddp

    torch, rt = gloo_runtime
    model = torch.nn.Linear(8, 8)
    assert wrap_ddp(model, rt, 200.0).bucket_bytes_cap == 200 * 1024 * 1024
    assert wrap_ddp(model, rt).bucket_bytes_cap == 25 * 1024 * 1024  # torch's default


def test_wrap_ddp_leaves_constant_buffers_unsynced_without_a_deprecated_argument(gloo_runtime):
    import warnings

    from toolkit.workloads.pytorch.common import wrap_ddp

    torch, rt = gloo_runtime
    model = torch.nn.BatchNorm1d(4)  # has buffers
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's FutureWarning on broadcast_buffers
        constant = wrap_ddp(model, rt, broadcast_buffers=False)
        synced = wrap_ddp(model, rt)
    assert not constant.will_sync_module_buffers() and synced.will_sync_module_buffers()


@pytest.mark.parametrize("fields,on", [
    ({}, True),  # one-rank resnet50: CUDA graphs unless set
    ({"precision": "tf32"}, True),
    ({"cuda_graphs": False}, False),
    ({"compile": False}, False),  # nothing compiled, nothing to capture
    ({"gpus_per_node": 2}, True),  # data parallel: the same way as one rank
    ({"num_nodes": 2}, True),
    ({"model": "bert_base"}, True),
    ({"model": "bert_base", "gpus_per_node": 2}, True),
    ({"model": "bert_base", "cuda_graphs": False}, False),
    ({"model": "gpt"}, False),
    ({"device": "cpu"}, False),
])
def test_cuda_graphs_default_and_the_hash_follow_what_runs(fields, on):
    case = resolve(Case.from_dict({"model": "resnet50", "precision": "amp_bf16", **fields}))
    assert resolve_options(case, "cuda").cuda_graphs is on
    assert not resolve_options(case, "cpu").cuda_graphs
    # unset hashes as what it resolves to: the same case as saying so, another than the other
    if "cuda_graphs" not in fields:
        said = resolve(Case.from_dict({**case.to_dict(), "cuda_graphs": on}))
        assert case.config_hash() == said.config_hash()
        # and the same variant: saying the default is not another variant either
        assert "cuda_graphs" not in case.run_options() and said.variant() == case.variant()
        if fields.get("compile") is not False:  # graphs without compile: refused
            other = resolve(Case.from_dict({**case.to_dict(), "cuda_graphs": not on}))
            assert case.config_hash() != other.config_hash()
            assert other.run_options()["cuda_graphs"] is (not on)


def test_oneflow_keeps_cuda_graphs_off_and_its_hash():
    case = resolve(Case.from_dict({"framework": "oneflow", "model": "resnet50"}))
    assert case.cuda_graphs is None and not case.cuda_graphs_by_default
    assert case.config_hash() == resolve(Case.from_dict(
        {"framework": "oneflow", "model": "resnet50", "cuda_graphs": False})).config_hash()


@pytest.mark.parametrize("fields,expected", [
    ({"gpus_per_node": 2}, "one_graph"),  # resnet50: one graph, all-reduced after backward
    ({"model": "bert_base", "num_nodes": 2}, "one_graph"),
    ({"model": "gpt", "gpus_per_node": 2}, "bucket_graphs"),  # torch's own default
    ({"gpus_per_node": 2, "compiled_ddp": "compiled_autograd"}, "compiled_autograd"),
    ({}, None),  # one rank: nothing to reduce
    ({"model": "gpt", "gpus_per_node": 2, "parallel": {"tp": 2}}, None),  # dp = 1
])
def test_compiled_ddp_resolves_where_there_are_data_parallel_ranks(fields, expected):
    case = resolve(Case.from_dict({"model": "resnet50", "precision": "amp_bf16", **fields}))
    got = resolve_options(case, "cuda").compiled_ddp
    assert (got.value if got else None) == expected
    assert resolve_options(case, "cpu").compiled_ddp is None  # eager on CPU unless asked


def test_compiled_ddp_set_where_it_does_not_apply_is_noted():
    options = resolve_options(resolve(Case.from_dict({"compiled_ddp": "one_graph"})), "cuda")
    assert options.compiled_ddp is None
    assert options.notes == ("compiled_ddp: not applied (one data-parallel rank)",)


def test_compiled_ddp_hashes_as_what_runs_and_keeps_torchs_default_hash():
    def case(**fields):
        return Case.from_dict({"model": "resnet50", "precision": "amp_bf16", **fields})

    # unset is the model's default: the same case as saying it
    assert (case(gpus_per_node=2).config_hash()
            == case(gpus_per_node=2, compiled_ddp="one_graph").config_hash())
    assert (case(gpus_per_node=2).config_hash()
            != case(gpus_per_node=2, compiled_ddp="bucket_graphs").config_hash())
    assert "compiled_ddp=bucket_graphs" in case(gpus_per_node=2,
                                                compiled_ddp="bucket_graphs").variant()
    assert "compiled_ddp" not in case(gpus_per_node=2).variant()
    # the GPT's default is torch's own (what every earlier run did): its hash is unchanged by
    # the option, set or unset
    gpt = {"model": "gpt", "gpus_per_node": 2}
    assert case(**gpt).config_hash() == case(**gpt, compiled_ddp="bucket_graphs").config_hash()
    # where it cannot apply (one rank), setting it changes nothing measured
    assert case().config_hash() == case(compiled_ddp="compiled_autograd").config_hash()


def test_async_tp_is_a_variant_of_its_own_and_off_keeps_the_hash():
    tp = {"model": "gpt", "gpus_per_node": 2, "parallel": {"tp": 2}, "sequence_parallel": True}
    plain, overlapped = Case.from_dict(tp), Case.from_dict({**tp, "async_tp": True})
    assert plain.config_hash() == Case.from_dict({**tp, "async_tp": False}).config_hash()
    assert plain.config_hash() != overlapped.config_hash()
    assert "async_tp" in overlapped.variant() and "async_tp" not in plain.variant()


def test_async_tp_says_why_it_did_not_apply_on_a_cpu_rank():
    torch = pytest.importorskip("torch")
    from toolkit.workloads.pytorch.gpt import enable_async_tp

    tp = {"model": "gpt", "gpus_per_node": 2, "parallel": {"tp": 2}, "sequence_parallel": True}
    cpu = torch.device("cpu")
    assert enable_async_tp(Case.from_dict(tp), cpu, None, compiled=True) == "off"
    assert enable_async_tp(Case.from_dict({**tp, "async_tp": True}), cpu, None,
                           compiled=True) == "not applied: a CPU rank has no symmetric memory"


def test_grad_reduce_hashes_as_what_runs_and_applies_with_data_parallel_ranks():
    def case(**fields):
        return resolve(Case.from_dict({"model": "bert_base", "gpus_per_node": 2, **fields}))

    # fp32 is what unset means: the same case, the same hash as every earlier run
    assert case().config_hash() == case(grad_reduce="fp32").config_hash()
    assert case().config_hash() != case(grad_reduce="bf16").config_hash()
    assert "grad_reduce=bf16" in case(grad_reduce="bf16").variant()
    assert "grad_reduce" not in case(grad_reduce="fp32").variant()
    assert resolve_options(case(), "cuda").grad_reduce.value == "fp32"
    assert resolve_options(case(grad_reduce="bf16"), "cpu").grad_reduce.value == "bf16"
    one = resolve_options(case(gpus_per_node=1, grad_reduce="bf16"), "cuda")
    assert one.grad_reduce is None
    assert one.notes == ("grad_reduce: not applied (one data-parallel rank)",)


@pytest.mark.parametrize("value,optimize_ddp,compiled_autograd", [
    ("bucket_graphs", "ddp_optimizer", False),
    ("one_graph", False, False),
    ("compiled_autograd", "python_reducer", True),
])
def test_compiled_ddp_sets_dynamos_ddp_handling(value, optimize_ddp, compiled_autograd):
    import torch._dynamo.config as dynamo_config

    from toolkit.spec import CompiledDDP
    from toolkit.workloads.pytorch.common import apply_compiler_settings

    # Dynamo's config module is restored through its own patch(), not monkeypatch's delattr
    with dynamo_config.patch(optimize_ddp=True, compiled_autograd=False):
        apply_compiler_settings(RunOptions(compile=True, compiled_ddp=CompiledDDP(value)))
        assert dynamo_config.optimize_ddp == optimize_ddp
        assert dynamo_config.compiled_autograd is compiled_autograd


def test_sequence_parallel_is_a_layout_of_its_own_and_off_keeps_the_hash():
    def case(**fields):
        return resolve(Case.from_dict({"model": "gpt", "gpus_per_node": 2,
                                       "parallel": {"tp": 2}, **fields}))

    assert case().config_hash() == case(sequence_parallel=False).config_hash()
    assert case().config_hash() != case(sequence_parallel=True).config_hash()
    assert "sp=True" in case(sequence_parallel=True).variant()
    with pytest.raises(CaseError, match="1001 is not divisible by tp = 2"):
        case(sequence_parallel=True, model_config={"seq_len": 1001})
