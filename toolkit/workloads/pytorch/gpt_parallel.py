"""Data, tensor and pipeline parallelism for the GPT, with PyTorch's own APIs.

- Device mesh: `init_device_mesh` over (pp, dp, tp), tp varying fastest so tensor-parallel
  partners are neighbouring ranks (same node, NVLink), then data parallel, then pipeline stages
  (Megatron's order). `dp x tp x pp` must equal the world size; the error prints every factor.
- Tensor parallel: DTensor `parallelize_module`. Column-parallel fused QKV and MLP input,
  row-parallel attention output and MLP output (one all-reduce each, forward and backward), a
  vocabulary-parallel embedding (row-wise) and output layer (column-wise, logits left sharded on
  the vocabulary), and the loss over sharded logits with `loss_parallel`.
- Pipeline parallel: each stage builds only its layers (`GPT(layer_ids=...)`), split to balance
  compute (the output layer counts as the layers it costs); `torch.distributed.pipelining`
  `PipelineStage` with `ScheduleGPipe` or `Schedule1F1B`, one stage per rank, or
  `ScheduleInterleaved1F1B` over v stages per rank (rank r holds stages r, r + pp, ...; the
  layers balanced over pp x v stages). The tied embedding has one copy on the first stage (pp
  rank 0) and one on the last (pp rank pp - 1); their gradients are summed after backward
  (`TiedEmbedding`), as Megatron does, so both copies stay equal.
- Data parallel: DDP over the dp process group, or FSDP2 (`fully_shard`) over the dp mesh
  dimension, which also composes with tensor parallelism.

What lives elsewhere: the model and its initialisation (`torch_gpt`), the training step, loss
scaling and the workload entry point (`torch_gpt_train`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from toolkit.analysis.scaling import stage_ids
from toolkit.spec import Case, DataParallelKind, GradReduce, PipelineSchedule
from toolkit.workloads.pytorch.common import reduce_in
from toolkit.workloads.pytorch.gpt_model import GPT, GPTConfig, cross_entropy


class MeshError(ValueError):
    """The parallel degrees do not fit the world."""


@dataclass(frozen=True)
class ParallelDims:
    dp: int
    tp: int
    pp: int

    @classmethod
    def from_case(cls, case: Case) -> ParallelDims:
        return cls(dp=case.dp, tp=case.parallel.tp, pp=case.parallel.pp)

    def check(self, world_size: int) -> None:
        product = self.dp * self.tp * self.pp
        if min(self.dp, self.tp, self.pp) < 1 or product != world_size:
            raise MeshError(f"dp x tp x pp = {self.dp} x {self.tp} x {self.pp} = {product} "
                            f"does not equal the world size {world_size}")


@dataclass
class GPTMesh:
    """Where this rank sits: its coordinates and the (sub)meshes; `mesh` is None on one rank."""

    dims: ParallelDims
    mesh: Any
    """torch DeviceMesh of shape (pp, dp, tp), names ("pp", "dp", "tp")."""
    pp_rank: int = 0
    dp_rank: int = 0
    tp_rank: int = 0

    def sub(self, name: str) -> Any:
        return None if self.mesh is None else self.mesh[name]

    def group(self, name: str) -> Any:
        return None if self.mesh is None else self.mesh[name].get_group()


def build_mesh(dims: ParallelDims, device_type: str, world_size: int) -> GPTMesh:
    dims.check(world_size)
    if world_size == 1:
        return GPTMesh(dims, None)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (dims.pp, dims.dp, dims.tp),
                            mesh_dim_names=("pp", "dp", "tp"))
    return GPTMesh(dims, mesh, pp_rank=mesh.get_local_rank("pp"),
                   dp_rank=mesh.get_local_rank("dp"), tp_rank=mesh.get_local_rank("tp"))


# -- pipeline split --------------------------------------------------------------------------
def split_layers(cfg: GPTConfig, pp: int) -> list[list[int]]:
    """Contiguous layer ranges for `pp` stages (pp x v with v stages per rank), minimising the
    costliest stage.

    Cost in units of one layer's FLOPs (Megatron's terms per token: 72h^2(1 + s/6h) per layer,
    6Vh for the output layer): the last stage also carries the output layer, worth
    (V/12h) / (1 + s/6h) layers (2.2 at h 1536, s 2048, V 50304). Every stage gets a layer.
    """
    n = cfg.num_layers
    if not 1 <= pp <= n:
        raise MeshError(f"{n} layers cannot fill {pp} pipeline stages")
    layer = 1.0 + cfg.seq_len / (6 * cfg.hidden_size)
    head = (cfg.vocab_size / (12 * cfg.hidden_size)) / layer
    limit = _split(n, pp, head, None)[0]
    return _split(n, pp, head, limit + 1e-9)[1]


def _split(n: int, pp: int, head: float, limit: float | None) -> tuple[float, list[list[int]]]:
    """Without `limit`: the split of n layers over pp stages (the last also costing `head`)
    with the smallest costliest stage, and that cost. With it: among the splits whose every
    stage costs at most `limit`, the one with the smallest sum of squared stage costs, so that
    layers the costliest stage leaves over are spread evenly (1 1 1 3 3 3 3 1 becomes
    2 2 2 2 2 2 3 1 for 16 layers over 8 stages), which also evens out the layers per rank of
    an interleaved pipeline."""
    inf = float("inf")

    def score(cost: float, rest: float) -> float:
        if limit is None:
            return max(cost, rest)
        return cost * cost + rest if cost <= limit else inf

    # best[k][i]: the best score splitting layers i.. over stages k.. (k < pp)
    best = [[inf] * (n + 1) for _ in range(pp + 1)]
    cut = [[0] * (n + 1) for _ in range(pp + 1)]
    for i in range(n):
        best[pp - 1][i] = score((n - i) + head, 0.0)
        cut[pp - 1][i] = n
    for k in range(pp - 2, -1, -1):
        for i in range(n):
            for j in range(i + 1, n - (pp - 1 - k) + 1):  # stage k takes i..j-1
                value = score(float(j - i), best[k + 1][j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    out, start = [], 0
    for k in range(pp):
        end = cut[k][start]
        out.append(list(range(start, end)))
        start = end
    return best[0][0], out


# -- tensor parallel -------------------------------------------------------------------------
def apply_tensor_parallel(model: GPT, tp_mesh: Any, sequence_parallel: bool = False) -> None:
    """Shard the model over the tp mesh in place (DTensor parameters).

    With `sequence_parallel` (Megatron's, in torchtitan's plan): the LayerNorms run on sequence
    shards (`SequenceParallel`), each attention and MLP block all-gathers its input over the
    sequence and its row-parallel output layer reduce-scatters back to sequence shards instead
    of all-reducing, the embedding's output is reduce-scattered to sequence shards (each rank
    adds the position embeddings of its own positions, `GPT.seq_shard`), and the output layer
    all-gathers the sequence before computing its vocabulary shard of the logits."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    layer_plan: dict[str, Any] = {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
                                  "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    if sequence_parallel:
        gather = PrepareModuleInput(input_layouts=(Shard(1),),
                                    desired_input_layouts=(Replicate(),))
        layer_plan.update({"ln_1": SequenceParallel(), "attn": gather,
                           "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
                           "ln_2": SequenceParallel(), "mlp": gather,
                           "mlp.proj": RowwiseParallel(output_layouts=Shard(1))})
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, layer_plan)
    top: dict[str, Any] = {}
    if model.tok_emb is not None:
        top["tok_emb"] = RowwiseParallel(input_layouts=Replicate(),
                                         output_layouts=Shard(1) if sequence_parallel
                                         else Replicate())
    if model.lm_head is not None:
        if sequence_parallel:
            top["ln_f"] = SequenceParallel()
        top["lm_head"] = ColwiseParallel(input_layouts=Shard(1) if sequence_parallel
                                         else Replicate(),
                                         output_layouts=Shard(-1), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)
    if sequence_parallel:
        model.seq_shard = (tp_mesh.get_local_rank(), tp_mesh.size())
    model.tie_weights()  # both now Shard(0) over the vocabulary: one DTensor parameter


def sum_position_grads(model: GPT, tp_group: Any) -> None:
    """Under sequence parallelism each tensor-parallel rank's position embedding gets gradients
    from its own positions only; summed over the tp ranks, every copy gets the whole gradient
    (call after backward, before the optimizer)."""
    if model.seq_shard is None or model.pos_emb is None or model.pos_emb.weight.grad is None:
        return
    grad = model.pos_emb.weight.grad
    # under FSDP2 the gradient is this dp rank's shard, the same rows on every tp rank
    dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad, group=tp_group)


def align_grad_placements(params: list[Any]) -> None:
    """Give each DTensor gradient its parameter's placements.

    DTensor's embedding backward yields a replicated gradient for the vocabulary-sharded
    embedding (every rank computes all rows); keeping this rank's rows is a local slice, and
    the optimizer and the tied-embedding sum then see matching shards.
    """
    for p in params:
        grad = p.grad
        if grad is not None and tuple(grad.placements) != tuple(p.placements):
            p.grad = grad.redistribute(p.device_mesh, p.placements)


# -- loss ------------------------------------------------------------------------------------
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_loss_fn(tp_mesh: Any, compile_loss: bool) -> LossFn:
    """Mean next-token cross entropy of (local) logits.

    With tensor parallelism the logits are this rank's vocabulary shard: they are viewed as a
    DTensor sharded on the last dimension and the loss runs under `loss_parallel` (enter
    `loss_context` around forward AND backward), so the full logits never exist on one rank.
    """
    if tp_mesh is None:
        return torch.compile(cross_entropy) if compile_loss else cross_entropy
    from torch.distributed.tensor import DTensor, Shard

    def tp_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        sharded = DTensor.from_local(logits, tp_mesh, [Shard(logits.dim() - 1)], run_check=False)
        loss = cross_entropy(sharded, targets)
        return loss.to_local() if isinstance(loss, DTensor) else loss

    return tp_loss


def loss_context(tp_mesh: Any) -> contextlib.AbstractContextManager[Any]:
    if tp_mesh is None:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


# -- tied embedding across stages ------------------------------------------------------------
class TiedEmbedding:
    """Sums the gradients of the embedding copy (first stage) and the output-layer copy (last
    stage) of one weight, between the two ranks that hold them (same dp and tp coordinates).

    Build it after data-parallel wrapping: FSDP2 replaces parameters, so the weight is looked
    up on its module at every sync, never cached. With several stages per rank the first
    stage's embedding is on pp rank 0 and the last stage's output layer on pp rank pp - 1, as
    with one.
    """

    def __init__(self, owner: nn.Module, group: Any) -> None:
        self.owner = owner
        self.group = group

    @classmethod
    def build(cls, gmesh: GPTMesh, models: GPT | list[GPT]) -> TiedEmbedding | None:
        """Every rank must call this (it creates process groups collectively); `models`: this
        rank's stage or stages."""
        if gmesh.mesh is None or gmesh.dims.pp == 1:
            return None
        ranks = gmesh.mesh.mesh  # tensor (pp, dp, tp) of global ranks
        mine = None
        for d in range(gmesh.dims.dp):
            for t in range(gmesh.dims.tp):
                pair = [int(ranks[0, d, t]), int(ranks[-1, d, t])]
                group = dist.new_group(pair)
                if dist.get_rank() in pair:
                    mine = group
        stages = models if isinstance(models, list) else [models]
        owners = [m.tok_emb if m.tok_emb is not None else m.lm_head for m in stages]
        found = [o for o in owners if o is not None]
        if len(found) > 1:
            raise MeshError("one pipeline rank holds both copies of the tied embedding")
        return cls(found[0], mine) if found else None

    def sync_grads(self) -> None:
        """Call after backward (and after data-parallel reduction), before the optimizer."""
        grad = self.owner.weight.grad
        if grad is None:
            raise RuntimeError("tied embedding has no gradient after backward")
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        dist.all_reduce(local, group=self.group)


# -- data parallel ---------------------------------------------------------------------------
def data_parallel_kind(case: Case) -> DataParallelKind:
    if case.data_parallel is not DataParallelKind.AUTO:
        return case.data_parallel
    return DataParallelKind.FSDP if case.parallel.tp > 1 else DataParallelKind.DDP


def apply_data_parallel(model: GPT, kind: DataParallelKind, gmesh: GPTMesh,
                        device: torch.device, pipelined: bool,
                        grad_reduce: GradReduce | None = None) -> nn.Module:
    """Wrap (DDP) or shard in place (FSDP2) over the dp dimension; the model itself on dp = 1.

    FSDP2 shards each layer, then the rest; with pipelining the parameters stay gathered
    between a stage's micro-batches (reshard_after_forward=False), as torchtitan does, so each
    micro-batch does not all-gather them again. `grad_reduce` bf16 all-reduces DDP's buckets
    in bfloat16 (`reduce_in`) and makes bfloat16 FSDP2's reduce-scatter dtype.
    """
    if gmesh.mesh is None or gmesh.dims.dp == 1:
        return model
    if kind is DataParallelKind.DDP:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids, process_group=gmesh.group("dp"),
                                      gradient_as_bucket_view=True)
        reduce_in(ddp, grad_reduce, gmesh.group("dp"))
        return ddp
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16
                                  if grad_reduce is GradReduce.BF16 else None)
    dp_mesh = gmesh.sub("dp")
    for layer in model.layers.values():
        fully_shard(layer, mesh=dp_mesh, reshard_after_forward=not pipelined, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=not pipelined, mp_policy=policy)
    return model


# -- pipeline --------------------------------------------------------------------------------
def build_schedule(modules: list[nn.Module], models: list[GPT], gmesh: GPTMesh,
                   device: torch.device, case: Case, loss_fn: LossFn, act_dtype: torch.dtype,
                   logits_dtype: torch.dtype) -> Any:
    """The stages of this rank (`models`, in stage order, with `modules` what runs each one's
    forward) and their schedule (`case.pipeline_schedule`), micro-batches =
    `case.accumulation_steps`.

    Input and output shapes are given up front (on the meta device) instead of being inferred
    by a first exchange between stages: hidden states (mbs, seq, h) in `act_dtype` (the residual
    stream, fp32 under autocast), tokens into the first stage, logits (a vocabulary shard under
    tensor parallelism) out of the last.
    """
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    cfg, mbs = models[0].cfg, case.micro_batch_size
    meta = torch.device("meta")
    # requires_grad marks what gradients flow through: the stage derives its backward
    # exchange (which gradients to send and receive) from these examples.
    hidden = torch.empty(mbs, cfg.seq_len, cfg.hidden_size, dtype=act_dtype, device=meta,
                         requires_grad=True)
    v = len(models)
    indices = stage_ids(gmesh.pp_rank, gmesh.dims.pp, v)
    stages = []
    for index, module, model in zip(indices, modules, models, strict=True):
        inputs = (torch.empty(mbs, cfg.seq_len, dtype=torch.long, device=meta) if model.first
                  else hidden)
        outputs = (torch.empty(mbs, cfg.seq_len, cfg.vocab_size // gmesh.dims.tp,
                               dtype=logits_dtype, device=meta, requires_grad=True)
                   if model.last else hidden)
        stages.append(PipelineStage(module, stage_index=index, num_stages=gmesh.dims.pp * v,
                                    device=device, input_args=(inputs,), output_args=(outputs,),
                                    group=gmesh.group("pp")))
    cls: Any = {PipelineSchedule.GPIPE: ScheduleGPipe,
                PipelineSchedule.ONE_F_ONE_B: Schedule1F1B,
                PipelineSchedule.INTERLEAVED_1F1B: ScheduleInterleaved1F1B
                }[case.pipeline_schedule]
    if (cls is ScheduleInterleaved1F1B) != (v > 1):
        raise MeshError(f"pipeline_schedule {case.pipeline_schedule.value} with {v} stages "
                        f"per rank")
    kwargs: dict[str, Any] = {"n_microbatches": case.accumulation_steps, "loss_fn": loss_fn}
    if "scale_grads" in inspect.signature(cls.__init__).parameters:
        kwargs["scale_grads"] = True  # loss_fn is a mean: gradients / micro-batches
    else:  # pragma: no cover - older torch: scale the loss instead
        n = case.accumulation_steps
        kwargs["loss_fn"] = lambda out, tgt: loss_fn(out, tgt) / n
    return cls(stages if v > 1 else stages[0], **kwargs)


def step_keywords(schedule: Any) -> dict[str, Any]:
    """`return_outputs=False` where the schedule has it: the last stage then keeps no logits of
    earlier micro-batches for a merged output nobody reads."""
    if "return_outputs" in inspect.signature(schedule.step).parameters:
        return {"return_outputs": False}
    return {}  # pragma: no cover - older torch
