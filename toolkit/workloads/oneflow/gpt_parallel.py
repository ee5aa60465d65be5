"""GPT tensor and pipeline parallelism with OneFlow global tensors (SBP), in eager mode.

The world is laid out as `pp` stages, each a 2-D mesh of `dp x tp` ranks (tp innermost, so
tensor-parallel peers are neighbours on one node, as Megatron places them):
`rank = stage * dp * tp + d * tp + t`. Every parameter becomes a global tensor on its stage's
mesh with an SBP signature per mesh dimension (data-parallel, tensor-parallel):

- column-parallel (QKV and MLP-in weights and biases): `(broadcast, split(0))`;
- row-parallel (attention and MLP-out weights): `(broadcast, split(1))`, biases broadcast;
- everything else (embeddings, LayerNorms): `(broadcast, broadcast)`.

The batch is `(split(0), broadcast)`: each data-parallel row of the mesh gets its own samples.
OneFlow derives the rest: the activations' SBP, the all-reduce of row-parallel outputs, the
gradients' reduction over the data-parallel dimension (no DDP wrapper), and the transfer of
activations between stages (`oneflow_gpt._follow`). Embeddings sit on the first stage, the
blocks are spread evenly over the stages, the final LayerNorm on the last; the tied output layer
uses the embedding weight moved to the last stage each step, and its gradient flows back.

Pipeline schedule: GPipe. With `pp > 1` the trainer queues the forward of every micro-batch,
then one backward of their summed loss (`Trainer(gpipe=True)`); OneFlow's asynchronous eager
runtime then runs stage s on micro-batch m+1 while stage s+1 runs micro-batch m. All
micro-batches' activations are alive at once (GPipe's memory cost; no 1F1B here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.spec import Case, LossScaling


def stage_meshes(case: Case, device_type: str) -> list[Any]:
    """One `oneflow.placement` per pipeline stage: a dp x tp mesh of its ranks."""
    import oneflow as flow

    dp, tp = case.dp, case.parallel.tp
    per_stage = dp * tp
    return [flow.placement(device_type, ranks=[[s * per_stage + d * tp + t for t in range(tp)]
                                               for d in range(dp)])
            for s in range(case.parallel.pp)]


def world_placement(device_type: str, world_size: int) -> Any:
    import oneflow as flow

    return flow.placement(device_type, ranks=list(range(world_size)))


def world_marker(device_type: str, world_size: int) -> Callable[[Any], Any]:
    """The step's end marker for global tensors: the loss (on the last stage) broadcast to all
    ranks, as a local scalar every rank can read."""
    import oneflow as flow

    world = world_placement(device_type, world_size)

    def marker(total: Any) -> Any:
        return (total.to_global(placement=world, sbp=flow.sbp.broadcast) * 1.0).to_local()

    return marker


def dp_index(case: Case, rank: int) -> int:
    """This rank's row in its stage's mesh: ranks of one row train on the same samples."""
    return (rank % (case.dp * case.parallel.tp)) // case.parallel.tp


def layer_stages(num_layers: int, pp: int) -> list[int]:
    """Stage of each block: as even as possible, earlier stages take the remainder."""
    base, extra = divmod(num_layers, pp)
    out: list[int] = []
    for s in range(pp):
        out += [s] * (base + (1 if s < extra else 0))
    return out


def shard(model: Any, case: Case, meshes: list[Any]) -> dict[str, Any]:
    """Turn the (identically initialised) local model into global tensors on the meshes."""
    import oneflow as flow

    B, S = flow.sbp.broadcast, flow.sbp.split
    replicated = (B, B)

    def place(module: Any, mesh: Any) -> None:
        module.to_global(placement=mesh, sbp=replicated)

    def split(linear: Any, dim: int, bias_too: bool) -> None:
        linear.weight = flow.nn.Parameter(linear.weight.to_global(sbp=(B, S(dim))))
        if bias_too and linear.bias is not None:
            linear.bias = flow.nn.Parameter(linear.bias.to_global(sbp=(B, S(0))))

    first, last = meshes[0], meshes[-1]
    place(model.wte, first)
    place(model.wpe, first)
    stages = layer_stages(len(model.blocks), len(meshes))
    for block, stage in zip(model.blocks, stages, strict=True):
        place(block, meshes[stage])
        if case.parallel.tp > 1:
            split(block.attn.qkv, 0, bias_too=True)   # column-parallel
            split(block.fc, 0, bias_too=True)
            split(block.attn.proj, 1, bias_too=False)  # row-parallel
            split(block.proj, 1, bias_too=False)
    place(model.ln_f, last)
    return {"parallel": f"dp{case.dp} x tp{case.parallel.tp} x pp{case.parallel.pp} "
                        "(OneFlow global tensors, eager)",
            "layers_per_stage": [stages.count(s) for s in range(len(meshes))],
            "pipeline_schedule": "gpipe" if len(meshes) > 1 else None}


def global_batch(local: Any, mesh: Any) -> Any:
    """This row's samples as the mesh's `(split(0), broadcast)` batch."""
    import oneflow as flow

    return local.to_global(placement=mesh, sbp=(flow.sbp.split(0), flow.sbp.broadcast))


def unsupported(case: Case) -> str | None:
    """Why this tensor/pipeline-parallel OneFlow GPT case cannot run (checked at submit)."""
    mc, p = case.model_config, case.parallel
    if p.tp > 1:
        for key, value in (("num_heads", mc.num_heads), ("intermediate_size",
                                                         mc.intermediate_size)):
            if value is not None and value % p.tp:
                return f"model_config.{key} {value} is not divisible by parallel.tp {p.tp}"
    if p.pp > 1 and mc.num_layers is not None and mc.num_layers < p.pp:
        return (f"parallel.pp {p.pp} stages but only {mc.num_layers} layers "
                "(model_config.num_layers)")
    if case.effective_loss_scaling is LossScaling.DYNAMIC:
        return ("dynamic loss scaling is not implemented for OneFlow global tensors (tp/pp); "
                "use loss_scaling: static or amp_bf16")
    return None
