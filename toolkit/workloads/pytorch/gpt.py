"""The GPT workload on one rank: build (mesh, stage, shards, wrappers, optimizer, data), the
training step, and `train`, which `toolkit.workloads.run` calls.

Build order matters and follows torchtitan: the stage's layers are built on the meta device,
tensor parallelism shards them, `to_empty` + `init_parameters` give every shard its
whole-model values, layers are compiled (a rank that holds the whole model alone compiles the
model and its loss as one graph instead), data parallelism wraps or shards them, and the
optimizer is made from the parameters that result. Only then does the pipeline get its stage.
A rank of an interleaved pipeline does all of this for each of its stages, and one optimizer
steps them all.

The step: without pipelining, micro-batches with gradient accumulation (DDP `no_sync` /
FSDP2 `set_requires_gradient_sync` on all but the last); with pipelining, one
`schedule.step` over the micro-batches. Then the tied embedding's gradient copies are summed
across stages, fp16 loss scaling unscales and checks for overflow on every rank together, and
AdamW steps. The step returns the step's mean loss as a device tensor on every rank (pipeline
stages other than the last receive it from the last), so the shared timed loop never waits.

The loop, the device and process group and the precision flags are shared
(`torch_common`); the model is `torch_gpt`, the parallel machinery `torch_gpt_parallel`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from toolkit.analysis.scaling import pipeline_bubble, stage_ids
from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case, DataParallelKind, LossScaling, Precision
from toolkit.workloads.pytorch import common as torch_common
from toolkit.workloads.pytorch.common import (
    IterCallback,
    TorchRuntime,
    apply_compiler_settings,
    ddp_comm_hook,
)
from toolkit.workloads.pytorch.gpt_model import GPT, GPTConfig, cross_entropy, init_parameters
from toolkit.workloads.pytorch.gpt_parallel import (
    GPTMesh,
    LossFn,
    ParallelDims,
    TiedEmbedding,
    align_grad_placements,
    apply_data_parallel,
    apply_tensor_parallel,
    build_mesh,
    build_schedule,
    data_parallel_kind,
    loss_context,
    make_loss_fn,
    split_layers,
    step_keywords,
    sum_position_grads,
)

LossOfBatch = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(tokens, targets) -> mean loss."""

LEARNING_RATE = 1e-4
WEIGHT_DECAY = 0.1
"""AdamW on matrices and embeddings; biases and LayerNorm parameters are not decayed."""


@dataclass
class GPTRun:
    """Everything one rank built for a GPT case."""

    case: Case
    cfg: GPTConfig
    gmesh: GPTMesh
    models: list[GPT]
    """This rank's stages in stage order, unwrapped (their layers may be compiled): one, or
    `case.stages_per_rank` under the interleaved schedule."""
    modules: list[nn.Module]
    """What runs each stage's forward: the DDP wrapper, or the model (FSDP2 shards it in
    place)."""
    dp_kind: DataParallelKind | None
    """None when dp = 1."""
    optimizer: ShardAdamW
    loss_fn: LossFn
    tied: TiedEmbedding | None
    inputs: torch.Tensor
    """This data-parallel rank's tokens (batch_size_per_device, seq), on the device."""
    targets: torch.Tensor
    info: dict[str, Any] = field(default_factory=dict)
    forward_loss: LossOfBatch | None = None
    """The model's forward and loss as one compiled function (a rank with the whole model);
    None: `loss_fn(module(x), y)`."""

    @property
    def model(self) -> GPT:
        """This rank's model or only stage."""
        if len(self.models) != 1:
            raise ValueError(f"this rank holds {len(self.models)} pipeline stages: use models")
        return self.models[0]

    @property
    def module(self) -> nn.Module:
        """What runs the forward of this rank's model or only stage."""
        if len(self.modules) != 1:
            raise ValueError(f"this rank holds {len(self.modules)} pipeline stages: use "
                             "modules")
        return self.modules[0]

    @property
    def first(self) -> bool:
        """Whether this rank holds the first stage (it reads the tokens)."""
        return self.models[0].first

    @property
    def last(self) -> bool:
        """Whether this rank holds the last stage (it computes the loss)."""
        return self.models[-1].last

    def loss_of(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The mean loss of one micro-batch (forward only; no pipeline)."""
        if self.forward_loss is not None:
            return self.forward_loss(x, y)
        return self.loss_fn(self.module(x), y)


def synthetic_tokens(case: Case, cfg: GPTConfig, dp_rank: int) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """This dp rank's slice of one global batch of random tokens (inputs, next-token targets).

    The global batch depends only on the seed, so runs with any layout see the same data.
    """
    gen = torch.Generator(device="cpu").manual_seed(case.seed)
    tokens = torch.randint(0, cfg.vocab_size, (case.global_batch_size, cfg.seq_len + 1),
                           generator=gen)
    bs = case.batch_size_per_device
    mine = tokens[dp_rank * bs:(dp_rank + 1) * bs]
    return mine[:, :-1].contiguous(), mine[:, 1:].contiguous()


class ShardAdamW:
    """AdamW, fused on CUDA (foreach on CPU), over the plain tensors that hold this rank's
    elements: a DTensor parameter is stepped through its local shard, every other parameter
    as itself.

    On DTensor parameters a multi-tensor kernel would go through DTensor's dispatch, which
    propagates placements for every tensor of the list and splits the call by placement; on the
    local shards the step is the one-GPU kernel over this rank's elements. Each DTensor gradient
    must carry its parameter's placements first (`align_grad_placements`, which also reduces a
    Partial gradient), so its local tensor is this rank's part of the whole gradient.

    Several modules (the stages of an interleaved pipeline rank) are one optimizer over all
    their parameters. The inner optimizer is built at the first step: FSDP2 gives a parameter a
    new local tensor when it initialises, at the first forward. A local tensor moved to other
    storage later is an error (the step would update memory the model no longer reads).
    """

    def __init__(self, modules: nn.Module | list[nn.Module], device: torch.device,
                 lr: float = LEARNING_RATE) -> None:
        self.params = [p for m in (modules if isinstance(modules, list) else [modules])
                       for p in m.parameters() if p.requires_grad]
        self.lr = lr
        self.impl = "fused" if device.type == "cuda" else "foreach"
        self.inner: torch.optim.Optimizer | None = None
        self.shards: list[torch.Tensor] = []

    @property
    def label(self) -> str:
        """The optimizer as the run records it."""
        return f"AdamW({self.impl})"

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def _build(self) -> torch.optim.Optimizer:
        self.shards = [_local(p) for p in self.params]
        decay = [t for p, t in zip(self.params, self.shards, strict=True) if p.dim() >= 2]
        exempt = [t for p, t in zip(self.params, self.shards, strict=True) if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
                  {"params": exempt, "weight_decay": 0.0}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=self.lr,
                                 betas=(0.9, 0.95), eps=1e-8, **{self.impl: True})

    @torch.no_grad()
    def step(self) -> None:
        if self.inner is None:
            self.inner = self._build()
        for p, shard in zip(self.params, self.shards, strict=True):
            if _local(p).data_ptr() != shard.data_ptr():
                raise RuntimeError("a parameter's local tensor changed after the optimizer's "
                                   "first step")
            grad = p.grad
            shard.grad = None if grad is None else _local(grad)
        self.inner.step()


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding this rank's elements of `t`: `t` itself, or a DTensor's local tensor
    (the object DTensor keeps, not the new view `to_local()` makes at every call: this runs for
    every parameter and gradient at every step)."""
    return t._local_tensor if isinstance(t, DTensor) else t


def enable_async_tp(case: Case, device: torch.device, gmesh: GPTMesh, compiled: bool) -> str:
    """Turn on Inductor's micro-pipelined tensor parallelism for the tp group when the case asks
    for `async_tp` and it can run here (CUDA, compiled), before anything is compiled; what
    happened, for the run's summary: `on`, `off`, or why it was not applied."""
    if not case.async_tp:
        return "off"
    if device.type != "cuda" or not compiled:
        return ("not applied: " + ("a CPU rank has no symmetric memory" if device.type != "cuda"
                                   else "the layers are not compiled"))
    import torch._inductor.config as inductor_config
    from torch.distributed import _symmetric_memory

    inductor_config._micro_pipeline_tp = True
    enable = getattr(_symmetric_memory, "enable_symm_mem_for_group", None)
    if enable is not None:  # newer torch enables symmetric memory for every group itself
        enable(gmesh.group("tp").group_name)
    return "on"


def build(case: Case, rt: TorchRuntime, world_size: int, lr: float = LEARNING_RATE) -> GPTRun:
    """Build this rank's part of the case (the process group is already up when world > 1)."""
    dims = ParallelDims.from_case(case)
    gmesh = build_mesh(dims, rt.device.type, world_size)
    cfg = GPTConfig.from_case(case)
    v = case.stages_per_rank
    split = split_layers(cfg, dims.pp * v)
    mine = stage_ids(gmesh.pp_rank, dims.pp, v)
    models = []
    for index in mine:
        with torch.device("meta"):
            model = GPT(cfg, split[index], first=index == 0, last=index == dims.pp * v - 1)
        if dims.tp > 1:
            apply_tensor_parallel(model, gmesh.sub("tp"), case.sequence_parallel)
        model.to_empty(device=rt.device)
        model.tie_weights()
        init_parameters(model, case.seed)
        model.amp_dtype = torch_common.autocast_dtype(case.precision)
        models.append(model)
    # The run options as every torch workload resolves them (`torch_common.resolve_options`):
    # compiled on CUDA unless `compile: false`, eager on CPU unless asked. max_autotune: Inductor
    # picks each GEMM's kernel by timing (the layers share shapes, so one layer's tuning serves
    # all); CUDA graphs are refused for the GPT (unsupported_reason), so the mode never captures.
    # A rank that holds the whole model (no tp or pp; alone, or one DDP replica) compiles the
    # model and its loss as one function, as a plain script does, around the DDP module when
    # there is one (`compiled_ddp` says how Dynamo meets DDP's buckets): Inductor then fuses the
    # embeddings, the last LayerNorm, the head and the loss too, on one rank and on N alike.
    # Otherwise each layer is compiled (DTensor shards, pipeline stages and FSDP stay outside
    # the graphs), and the loss; every stage of an interleaved rank alike.
    options = rt.options
    compiled, mode = options.compile, options.torch_compile_mode
    dp_kind = data_parallel_kind(case) if dims.dp > 1 else None
    whole = compiled and dims.tp == 1 and dims.pp == 1 and dp_kind in (None,
                                                                      DataParallelKind.DDP)
    if compiled:
        apply_compiler_settings(options)
    async_tp = enable_async_tp(case, rt.device, gmesh, compiled)
    if compiled and not whole:
        for model in models:
            for key in list(model.layers):
                model.layers[key] = torch.compile(model.layers[key], mode=mode)
    modules = [apply_data_parallel(model, dp_kind, gmesh, rt.device, pipelined=dims.pp > 1,
                                   grad_reduce=options.grad_reduce)
               if dp_kind is not None else model for model in models]
    tied = TiedEmbedding.build(gmesh, models)
    optimizer = ShardAdamW(modules, rt.device, lr)
    loss_fn = make_loss_fn(gmesh.sub("tp") if dims.tp > 1 else None,
                           compile_loss=compiled and not whole)
    forward_loss: LossOfBatch | None = None
    if whole:
        module = modules[0]

        def model_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return cross_entropy(module(x), y)

        forward_loss = torch.compile(model_loss, mode=mode)
    inputs, targets = synthetic_tokens(case, cfg, gmesh.dp_rank)
    pipelined = dims.pp > 1
    info = {
        "parameters": cfg.parameter_count(),
        "parameters_on_rank": sum(_local_numel(m) for m in modules),
        "attention": "sdpa causal",
        "optimizer": optimizer.label,
        "tied_embeddings": True,
        "activation_checkpointing": case.activation_checkpointing,
        "compile": compiled,
        "torch_compile_mode": mode if compiled else None,
        "compile_scope": None if not compiled else (
            ("model and loss, one function around DDP" if dp_kind else
             "model and loss, one graph") if whole else "each layer, and the loss"),
        "run_options": options.to_dict(),
        "ddp_comm_hook": ddp_comm_hook(modules[0]),
        "parallel": {
            "dp": dims.dp, "tp": dims.tp, "pp": dims.pp,
            "sequence_parallel": case.sequence_parallel,
            "async_tp": async_tp,
            "data_parallel": dp_kind.value if dp_kind else None,
            "pipeline_schedule": case.pipeline_schedule.value if pipelined else None,
            "pipeline_stages_per_rank": v if pipelined else None,
            "pipeline_bubble": (pipeline_bubble(dims.pp, case.accumulation_steps, v)
                                if pipelined else None),
            "micro_batch_size": case.micro_batch_size,
            "micro_batches": case.accumulation_steps,
            "stage": gmesh.pp_rank,
            "stage_layers": [int(k) for m in models for k in m.layers],
            "stages": ([{"stage": index, "layers": [int(k) for k in m.layers]}
                        for index, m in zip(mine, models, strict=True)]
                       if pipelined else None),
            "dp_rank": gmesh.dp_rank, "tp_rank": gmesh.tp_rank,
        },
        "tokens_per_step": case.global_batch_size * cfg.seq_len,
    }
    return GPTRun(case=case, cfg=cfg, gmesh=gmesh, models=models, modules=modules,
                  dp_kind=dp_kind, optimizer=optimizer, loss_fn=loss_fn, tied=tied,
                  forward_loss=forward_loss, inputs=inputs.to(rt.device),
                  targets=targets.to(rt.device), info=info)


def _local_numel(module: nn.Module) -> int:
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
               for p in module.parameters())


class LossScaler:
    """fp16 loss scaling that every rank applies alike.

    Dynamic scaling as torch's GradScaler (start 2^16, halve on overflow and skip the step,
    double after 2000 clean steps), except that the overflow flag is a MAX over all ranks:
    tensor-parallel shards and pipeline stages hold different gradients, and a step skipped on
    one rank only would leave the model inconsistent. That check costs one host sync per step.
    Static scaling divides the gradients by the fixed scale; other precisions scale by 1.
    """

    def __init__(self, case: Case, distributed: bool) -> None:
        self.kind = case.effective_loss_scaling
        self.scale = {LossScaling.DYNAMIC: 2.0**16,
                      LossScaling.STATIC: case.static_loss_scale}.get(self.kind, 1.0) \
            if self.kind is not None else 1.0
        self.distributed = distributed
        self.clean_steps = 0
        self.skipped_steps = 0

    def unscale(self, params: list[nn.Parameter]) -> bool:
        """Unscale gradients in place; False when the step must be skipped (overflow)."""
        if self.kind is None:
            return True
        grads = [g.to_local() if hasattr(g, "to_local") else g
                 for p in params if (g := p.grad) is not None]
        if self.kind is LossScaling.STATIC:
            torch._foreach_mul_(grads, 1.0 / self.scale)
            return True
        device = grads[0].device if grads else torch.device("cpu")
        found = torch.zeros(1, device=device)
        inv = torch.full((1,), 1.0 / self.scale, device=device)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for g in grads:
            by_dtype.setdefault(g.dtype, []).append(g)
        for same in by_dtype.values():
            torch._amp_foreach_non_finite_check_and_unscale_(same, found, inv)
        if self.distributed:
            dist.all_reduce(found, op=dist.ReduceOp.MAX)
        if found.item() > 0:
            self.scale /= 2.0
            self.clean_steps = 0
            self.skipped_steps += 1
            return False
        self.clean_steps += 1
        if self.clean_steps == 2000:
            self.scale *= 2.0
            self.clean_steps = 0
        return True


class GPTTrainer:
    """One optimizer step of a built GPT run (see the module docstring)."""

    def __init__(self, run: GPTRun, rt: TorchRuntime) -> None:
        self.run = run
        self.device = rt.device
        self.scaler = LossScaler(run.case, distributed=rt.distributed)
        self.params = [p for m in run.modules for p in m.parameters() if p.requires_grad]
        self.dtensor_params = ([p for p in self.params if isinstance(p, DTensor)]
                               if run.gmesh.dims.tp > 1 else [])
        self.tp_mesh = run.gmesh.sub("tp") if run.gmesh.dims.tp > 1 else None
        self.schedule = None
        if run.gmesh.dims.pp > 1:
            act = torch.float32  # the residual stream stays fp32 under autocast
            logits = run.models[-1].amp_dtype or torch.float32
            self.schedule = build_schedule(run.modules, run.models, run.gmesh, rt.device,
                                           run.case, self._scaled_loss, act, logits)

    def _scaled_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.run.loss_fn(logits, targets) * self.scaler.scale

    def step(self) -> torch.Tensor:
        self.run.optimizer.zero_grad(set_to_none=True)
        loss = self._pipelined() if self.schedule is not None else self._accumulated()
        align_grad_placements(self.dtensor_params)
        for model in self.run.models:
            if model.seq_shard is not None:
                sum_position_grads(model, self.run.gmesh.group("tp"))
        if self.run.tied is not None:
            self.run.tied.sync_grads()
        if self.scaler.unscale(self.params):
            self.run.optimizer.step()
        return loss

    def _sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """Reduce gradients over dp on the last micro-batch only."""
        module, kind = self.run.module, self.run.dp_kind
        if kind is DataParallelKind.FSDP:
            module.set_requires_gradient_sync(last)
        elif kind is DataParallelKind.DDP and not last:
            return module.no_sync()
        return contextlib.nullcontext()

    def _accumulated(self) -> torch.Tensor:
        run, n = self.run, self.run.case.accumulation_steps
        mbs = run.case.micro_batch_size
        total = torch.zeros((), device=self.device)
        for i in range(n):
            x, y = run.inputs[i * mbs:(i + 1) * mbs], run.targets[i * mbs:(i + 1) * mbs]
            with self._sync(i == n - 1), loss_context(self.tp_mesh):
                loss = run.loss_of(x, y)
                (loss * (self.scaler.scale / n)).backward()
            total += loss.detach()
        return total / n

    def _pipelined(self) -> torch.Tensor:
        run, schedule = self.run, self.schedule
        assert schedule is not None
        kwargs = step_keywords(schedule)
        losses: list[torch.Tensor] = []
        if run.last:
            kwargs.update(target=run.targets, losses=losses)
        args = (run.inputs,) if run.first else ()
        with loss_context(self.tp_mesh):
            schedule.step(*args, **kwargs)
        if run.last:
            loss = torch.stack([v.detach() for v in losses]).mean() / self.scaler.scale
        else:
            loss = torch.zeros((), device=self.device)
        dist.all_reduce(loss, group=run.gmesh.group("pp"))  # every stage reports the loss
        return loss


def train(case: Case, rt: TorchRuntime, info: RankInfo, on_iter: IterCallback,
          profile: int = 0, record_profile: bool = True) -> dict[str, Any]:
    """The workload: build, run the timed loop (then `profile` steps under the profiler), return
    the summary for the rank's events."""
    run = build(case, rt, info.world_size)
    trainer = GPTTrainer(run, rt)
    timing = torch_common.timed_loop(trainer.step, case.total_iterations, rt.device, on_iter)
    out = {**torch_common.runtime_summary(rt), **run.info, **timing}
    if profile > 0:
        summary, trace = torch_common.profile_steps(trainer.step, profile, rt.device,
                                                    record_profile)
        if summary is not None:
            out["profile"], out["profile_trace"] = summary, trace
    if case.precision is Precision.AMP_FP16:
        out["loss_scale_final"] = trainer.scaler.scale
        out["skipped_steps"] = trainer.scaler.skipped_steps
    return out
