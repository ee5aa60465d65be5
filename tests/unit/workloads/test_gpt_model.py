"""The GPT model and the single-process parts of its parallel machinery, on CPU: shapes,
causality, recomputation, the stage-independent initialisation, the pipeline split, the mesh
check and fp16 loss scaling. Multi-rank equivalence is in tests/integration/test_gpt_parallel.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from toolkit.analysis.scaling import stage_ids  # noqa: E402
from toolkit.spec import Case, from_plain, resolve  # noqa: E402
from toolkit.workloads.pytorch import gpt_model as torch_gpt  # noqa: E402
from toolkit.workloads.pytorch.gpt import LossScaler, synthetic_tokens  # noqa: E402
from toolkit.workloads.pytorch.gpt_model import GPT, GPTConfig, init_parameters  # noqa: E402
from toolkit.workloads.pytorch.gpt_parallel import (  # noqa: E402
    MeshError,
    ParallelDims,
    split_layers,
)

TINY = GPTConfig(vocab_size=64, seq_len=8, hidden_size=16, num_layers=4, num_heads=2,
                 ffn_size=64)


def built(cfg: GPTConfig = TINY, **kw) -> GPT:
    model = GPT(cfg, **kw)
    init_parameters(model, seed=7)
    return model


def test_forward_shapes_tied_weights_and_parameter_count():
    model = built()
    tokens = torch.randint(0, 64, (3, 8))
    assert model(tokens).shape == (3, 8, 64)
    assert model.lm_head.weight is model.tok_emb.weight
    assert TINY.parameter_count() == sum(p.numel() for p in model.parameters())


def test_attention_is_causal():
    model = built()
    a = torch.randint(0, 64, (1, 8))
    b = a.clone()
    b[0, 5] = (a[0, 5] + 1) % 64
    la, lb = model(a), model(b)
    assert torch.equal(la[0, :5], lb[0, :5])  # earlier positions never see a later token
    assert not torch.allclose(la[0, 5:], lb[0, 5:])


def test_recomputation_gives_the_same_gradients():
    plain = built()
    recompute = built(GPTConfig(**{**TINY.__dict__, "activation_checkpointing": True}))
    tokens = torch.randint(0, 64, (2, 9))
    grads = []
    for m in (plain, recompute):
        loss = torch.nn.functional.cross_entropy(m(tokens[:, :-1]).flatten(0, 1),
                                                 tokens[:, 1:].flatten())
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, msg=name)


def test_linears_after_a_layer_norm_get_the_autocast_dtype_and_the_same_numbers(monkeypatch):
    # Under tensor parallelism a column-parallel layer's input gradient is all-reduced in its
    # input's dtype: bf16, not the fp32 that LayerNorm returns under autocast.
    model = built()
    model.amp_dtype = torch.bfloat16
    seen: list[torch.dtype] = []
    for name, mod in model.named_modules():
        if name.endswith(("attn.qkv", "mlp.fc")) or name == "lm_head":
            mod.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    tokens = torch.randint(0, 64, (2, 8))
    out = model(tokens)
    assert len(seen) == 2 * TINY.num_layers + 1 and set(seen) == {torch.bfloat16}
    seen.clear()
    monkeypatch.setattr(torch_gpt, "to_autocast_dtype", lambda x: x)
    ref = model(tokens)  # each linear casts its fp32 input itself
    assert set(seen) == {torch.float32}
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    monkeypatch.undo()
    model.amp_dtype = None
    seen.clear()
    model(tokens)
    assert set(seen) == {torch.float32}  # no autocast: nothing is cast


def test_stages_hold_the_whole_models_values_by_name():
    full = built()
    values = dict(full.named_parameters())
    stages = split_layers(TINY, 2)
    first = built(layer_ids=stages[0], first=True, last=False)
    last = built(layer_ids=stages[1], first=False, last=True)
    for stage in (first, last):
        for name, p in stage.named_parameters():
            ref = values.get(name, values["tok_emb.weight"] if name == "lm_head.weight" else None)
            assert ref is not None, name
            assert torch.equal(p, ref), name
    assert last.tok_emb is None and first.lm_head is None
    # chaining the stages is the whole model
    tokens = torch.randint(0, 64, (2, 8))
    torch.testing.assert_close(last(first(tokens)), full(tokens))
    other = GPT(TINY)
    init_parameters(other, seed=8)
    assert not torch.equal(other.layers["0"].attn.qkv.weight, full.layers["0"].attn.qkv.weight)


def test_pipeline_split_balances_the_output_layer():
    cfg = GPTConfig(vocab_size=50304, seq_len=2048, hidden_size=1536, num_layers=16,
                    num_heads=16, ffn_size=6144)
    # the output layer costs ~2.2 layers at this size: the last stage gets fewer layers
    assert [len(s) for s in split_layers(cfg, 2)] == [9, 7]
    assert split_layers(cfg, 1) == [list(range(16))]
    for pp in (3, 4, 8, 16):
        stages = split_layers(cfg, pp)
        assert [i for s in stages for i in s] == list(range(16)) and all(stages)
    with pytest.raises(MeshError, match="16 layers cannot fill 17 pipeline stages"):
        split_layers(cfg, 17)


def test_interleaved_stages_are_balanced_over_pp_times_v_and_placed_round_robin():
    cfg = GPTConfig(vocab_size=50304, seq_len=2048, hidden_size=1536, num_layers=16,
                    num_heads=16, ffn_size=6144)
    # pp = 4, v = 2: eight stages; the costliest costs 3 layers (the last: 1 + the output
    # layer's 2.2), and the layers it leaves over are spread evenly, not 1 1 1 3 3 3 3 1
    assert [len(s) for s in split_layers(cfg, 8)] == [2, 2, 2, 2, 2, 2, 3, 1]
    # pp = 2, v = 2: the last stage carries the output layer
    assert [len(s) for s in split_layers(cfg, 4)] == [4, 5, 5, 2]
    assert stage_ids(0, 2, 2) == [0, 2] and stage_ids(1, 2, 2) == [1, 3]
    assert stage_ids(1, 4, 3) == [1, 5, 9] and stage_ids(3, 4, 1) == [3]


def test_mesh_check_prints_every_factor():
    ParallelDims(dp=2, tp=2, pp=2).check(8)
    with pytest.raises(MeshError) as err:
        ParallelDims(dp=2, tp=4, pp=1).check(16)
    assert str(err.value) == "dp x tp x pp = 2 x 4 x 1 = 8 does not equal the world size 16"


def fp16_case(scaling: str | None) -> Case:
    return resolve(from_plain(Case, {"model": "gpt", "precision": "amp_fp16",
                                     "loss_scaling": scaling, "static_loss_scale": 8.0}, ""))


def params_with_grads(*grads):
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g)))
        p.grad = torch.tensor(g)
        out.append(p)
    return out


def test_dynamic_loss_scale_skips_and_halves_on_overflow_and_unscales_otherwise():
    scaler = LossScaler(fp16_case(None), distributed=False)
    assert scaler.scale == 2.0**16
    ok = params_with_grads([2.0**16, 2.0**17], [0.0])
    assert scaler.unscale(ok)
    assert ok[0].grad.tolist() == [1.0, 2.0]
    bad = params_with_grads([1.0, float("inf")], [float("nan")])
    assert not scaler.unscale(bad)
    assert scaler.scale == 2.0**15 and scaler.skipped_steps == 1


def test_static_loss_scale_divides_and_no_scaling_leaves_grads():
    scaler = LossScaler(fp16_case("static"), distributed=False)
    assert scaler.scale == 8.0
    ps = params_with_grads([8.0, 16.0])
    assert scaler.unscale(ps) and ps[0].grad.tolist() == [1.0, 2.0]
    bf16 = resolve(from_plain(Case, {"model": "gpt", "precision": "amp_bf16"}, ""))
    none = LossScaler(bf16, distributed=False)
    ps = params_with_grads([3.0])
    assert none.scale == 1.0 and none.unscale(ps) and ps[0].grad.tolist() == [3.0]


def test_each_dp_rank_gets_its_slice_of_one_global_batch():
    def case(gpus: int) -> Case:
        return resolve(from_plain(Case, {"model": "gpt", "gpus_per_node": gpus,
                                         "batch_size_per_device": 8 // gpus,
                                         "model_config": {"vocab_size": 64, "seq_len": 8}}, ""))
    whole_x, whole_y = synthetic_tokens(case(1), TINY, 0)
    assert whole_x.shape == (8, 8) and torch.equal(whole_x[:, 1:], whole_y[:, :-1])
    parts = [synthetic_tokens(case(2), TINY, r)[0] for r in range(2)]
    assert torch.equal(torch.cat(parts), whole_x)


def _gpt_case(**fields):
    return resolve(from_plain(Case, {"model": "gpt", "batch_size_per_device": 2, **fields,
                                     "model_config": {"vocab_size": 64, "seq_len": 8,
                                                      "hidden_size": 16, "num_layers": 2,
                                                      "num_heads": 2}}, ""))


def _build(case, options_device: str):
    """Build on the CPU with the run options resolved for `options_device` (what `setup`
    gives a rank on that device)."""
    from toolkit.workloads.pytorch.common import TorchRuntime, resolve_options
    from toolkit.workloads.pytorch.gpt import build

    rt = TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                      backend=None, options=resolve_options(case, options_device))
    return build(case, rt, world_size=1)


@pytest.mark.parametrize("fields,device,compiled,mode", [
    ({}, "cpu", False, None),  # the default of every torch workload: eager on CPU ...
    ({}, "cuda", True, None),  # ... compiled on CUDA
    ({"compile": False}, "cuda", False, None),
    ({"compile": True}, "cpu", True, None),
    ({"compile_mode": "max_autotune"}, "cpu", True, "max-autotune-no-cudagraphs"),
    ({"compile": True, "compile_mode": "max_autotune"}, "cuda", True,
     "max-autotune-no-cudagraphs"),
])
def test_compile_follows_the_torch_default_and_reaches_the_layers(fields, device, compiled, mode,
                                                                 monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw.get("mode")) or fn)
    run = _build(_gpt_case(**fields), device)
    assert (run.info["compile"], run.info["torch_compile_mode"]) == (compiled, mode)
    # the summary (and so meta.json's ranks) says what ran, as the other torch workloads do
    assert run.info["run_options"]["compile"] is compiled
    assert run.info["run_options"]["torch_compile_mode"] == mode
    # one rank with the whole model: the model and its loss as one compiled function
    assert calls == ([mode] if compiled else [])
    assert (run.forward_loss is not None) is compiled
    assert run.info["compile_scope"] == ("model and loss, one graph" if compiled else None)


def test_the_compiled_model_and_loss_give_the_eager_loss():
    from toolkit.workloads.pytorch.gpt_model import cross_entropy

    run = _build(_gpt_case(compile=True), "cpu")
    x, y = run.inputs[:1], run.targets[:1]
    torch.testing.assert_close(run.loss_of(x, y), cross_entropy(run.model(x), y))


@pytest.mark.parametrize("fields,whole", [
    ({"gpus_per_node": 2}, True),  # DDP: model and loss in one function around DDP
    ({"gpus_per_node": 2, "data_parallel": "fsdp"}, False),
    ({"gpus_per_node": 2, "parallel": {"tp": 2}}, False),
    ({"gpus_per_node": 2, "batch_size_per_device": 4, "parallel": {"pp": 2,
                                                                   "micro_batch_size": 2}},
     False),
])
def test_what_is_compiled_under_parallelism(monkeypatch, fields, whole):
    """A rank that holds the whole model (one DDP replica) compiles the model and its loss as
    one function, as one rank does; with FSDP, tp or pp the layers are compiled one by one (the
    shards, stages and wrappers stay outside the graphs), and the loss on its own; checked here
    at the build's decision."""
    from toolkit.workloads.pytorch import gpt as gpt_mod
    from toolkit.workloads.pytorch.gpt_parallel import GPTMesh, ParallelDims

    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw.get("mode")) or fn)
    case = _gpt_case(compile=True, **fields)
    dims = ParallelDims.from_case(case)
    mesh = GPTMesh(dims=dims, mesh=None, dp_rank=0, tp_rank=0, pp_rank=0)
    monkeypatch.setattr(gpt_mod, "build_mesh", lambda *a: mesh)
    monkeypatch.setattr(gpt_mod, "apply_data_parallel", lambda model, *a, **k: model)
    monkeypatch.setattr(gpt_mod, "apply_tensor_parallel", lambda *a, **k: None)
    monkeypatch.setattr(gpt_mod.TiedEmbedding, "build", staticmethod(lambda *a: None))
    monkeypatch.setattr(gpt_mod, "make_loss_fn", lambda tp_mesh, compile_loss: (
        calls.append("loss") if compile_loss else None) or gpt_mod.cross_entropy)
    from toolkit.workloads.pytorch.common import TorchRuntime, resolve_options
    rt = TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                      backend=None, options=resolve_options(case, "cpu"))
    run = gpt_mod.build(case, rt, world_size=2)
    if whole:
        assert calls == [None]  # one function: model and loss
        assert run.forward_loss is not None
        assert run.info["compile_scope"] == "model and loss, one function around DDP"
        assert run.info["run_options"]["compiled_ddp"] == "bucket_graphs"
        return
    assert calls == [None] * len(run.model.layers) + ["loss"]  # each layer, then the loss
    assert run.forward_loss is None and run.info["compile_scope"] == "each layer, and the loss"


@pytest.mark.parametrize("pp_rank, stages, layers", [(0, [0, 2], [[0], [2]]),
                                                     (1, [1, 3], [[1], [3]])])
def test_an_interleaved_rank_builds_its_stages_and_steps_them_all(monkeypatch, pp_rank, stages,
                                                                  layers):
    """With interleaved 1F1B a pipeline rank holds v non-adjacent stages (r, r + pp, ...) of the
    pp x v the layers are balanced over: the embedding on pp rank 0, the head on pp rank
    pp - 1; each stage's layers compiled, one optimizer over every stage's parameters, and the
    summary names the stages and the bubble (pp - 1) / (v x m + pp - 1)."""
    from toolkit.workloads.pytorch import gpt as gpt_mod
    from toolkit.workloads.pytorch.common import TorchRuntime, resolve_options
    from toolkit.workloads.pytorch.gpt_parallel import GPTMesh, ParallelDims

    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw.get("mode")) or fn)
    case = resolve(from_plain(Case, {
        "model": "gpt", "gpus_per_node": 2, "batch_size_per_device": 4, "compile": True,
        "parallel": {"pp": 2, "micro_batch_size": 2}, "pipeline_schedule": "interleaved_1f1b",
        "model_config": {"vocab_size": 64, "seq_len": 8, "hidden_size": 16, "num_layers": 4,
                         "num_heads": 2}}, ""))
    mesh = GPTMesh(dims=ParallelDims.from_case(case), mesh=None, pp_rank=pp_rank)
    monkeypatch.setattr(gpt_mod, "build_mesh", lambda *a: mesh)
    rt = TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                      backend=None, options=resolve_options(case, "cpu"))
    run = gpt_mod.build(case, rt, world_size=2)
    assert [sorted(int(k) for k in m.layers) for m in run.models] == layers
    assert [m.first for m in run.models] == [pp_rank == 0, False]
    assert [m.last for m in run.models] == [False, pp_rank == 1]
    assert (run.first, run.last) == (pp_rank == 0, pp_rank == 1)
    assert calls == [None, None, None]  # each stage's one layer, then the loss
    params = {id(p) for m in run.models for p in m.parameters()}
    assert {id(p) for p in run.optimizer.params} == params
    assert run.info["parameters_on_rank"] == sum(p.numel() for m in run.models
                                                 for p in m.parameters())
    parallel = run.info["parallel"]
    assert parallel["pipeline_schedule"] == "interleaved_1f1b"
    assert parallel["pipeline_stages_per_rank"] == 2
    assert parallel["stages"] == [{"stage": s, "layers": ls}
                                  for s, ls in zip(stages, layers, strict=True)]
    assert parallel["stage_layers"] == [i for ls in layers for i in ls]
    assert parallel["pipeline_bubble"] == pytest.approx(1 / (2 * 2 + 1))
    with pytest.raises(ValueError, match="holds 2 pipeline stages"):
        run.model  # noqa: B018 - a rank of several stages has no single model
