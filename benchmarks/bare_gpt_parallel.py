"""The GPT of `bare_gpt.py` under tensor and pipeline parallelism, written the plain way with
torch's own APIs as torchtitan's `parallelize_llama` does it: the script the toolkit's tp and pp
rows are compared with (`gpu_scaling.py`). It imports nothing from the toolkit (only the FLOPs
formula, the shared options, rank discovery and the port helper of `bare_gpt.py`, beside it).
Under `mpirun -np N` (mpi4py finds the ranks) it builds a (pp, dp, tp) `init_device_mesh`,
N = dp x tp x pp:

- tp: `parallelize_module` on each block: `ColwiseParallel` for the fused QKV and the MLP's
  input layer, `RowwiseParallel` for the attention and MLP outputs; a vocabulary-parallel
  token embedding (row-wise) and output layer (column-wise, logits left sharded) with the loss
  under `loss_parallel()`. `--sequence-parallel`: `SequenceParallel` LayerNorms, the block
  inputs all-gathered over the sequence and the outputs reduce-scattered back (torchtitan's
  plan); each rank adds the position embeddings of its own positions, whose gradients are then
  summed over the tp ranks.
- pp: `torch.distributed.pipelining`: each rank builds only its stage's layers (a contiguous
  split, the last stage's output layer counted as the layers its FLOPs are worth), the first
  stage holds the embeddings, the last the final LayerNorm and the output layer; a
  `PipelineStage` per rank and `Schedule1F1B` over `--micro-batches M`. The output layer stays
  tied to the embedding as in the one-rank model: the last stage holds a copy initialised as
  the embedding, and the two copies' gradients are summed after each backward.
- dp: DDP over the dp ranks (with pp, each stage is wrapped); with tp, FSDP2 (`fully_shard`
  of each block, then of the stage) over the mesh's dp dimension, torchtitan's 2-D layout
  (DDP does not take DTensor parameters). Not dp x tp x pp together.
- `--compile`: each block compiled after it is parallelised (torchtitan's way), the loss too
  without tp; with tp = pp = 1 the model and its loss are compiled as one function, as
  `bare_gpt.py` does.

Without `--pp`, `--micro-batches M` accumulates gradients over M micro-batches (DDP and FSDP2
reduce on the last). Parameters are initialised by name from one seed, so every layout starts
from the one-rank model's weights; the global batch (dp x M x micro-batch rows) is drawn from one
seed and each replica takes its own rows; `--print-loss` adds every step's loss, averaged over
the replicas, to the output (the same global batch on any layout gives the same losses). bf16
autocast on CUDA (NCCL), fp32 on `--device cpu` (gloo), for tests with tiny sizes.

    mpirun -np 2 python benchmarks/bare_gpt_parallel.py --tp 2 --compile
    mpirun -np 2 python benchmarks/bare_gpt_parallel.py --tp 2 --sequence-parallel --compile
    mpirun -np 2 python benchmarks/bare_gpt_parallel.py --pp 2 --micro-batch 8 \
        --micro-batches 16 --compile
    mpirun -np 4 python benchmarks/bare_gpt_parallel.py --tp 2 --micro-batch 8 --compile  # 2x2x1
    mpirun -np 2 python benchmarks/bare_gpt_parallel.py --device cpu --tp 2 --hidden 64 \
        --layers 4 --seq-len 32 --vocab 512 --heads 4

Prints one JSON line (rank 0): global samples/s, ms per step, TFLOP/s per GPU and MFU (the
FLOPs of `bare_gpt.py`), the layout (dp, tp, pp, micro_batches) and the losses of the last
stage.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import time
import zlib
from typing import Any

from bare_gpt import (  # beside this script
    PEAK_BF16_TFLOPS,
    _free_port,
    add_model_arguments,
    flops_per_step,
    mpi_ranks,
)


def stage_layers(layers: int, pp: int, head_layers: float) -> list[range]:
    """Contiguous layers per stage; the last stage's output layer counts as `head_layers`."""
    per_stage = (layers + head_layers) / pp
    cuts = [0]
    for k in range(1, pp):
        cuts.append(min(max(round(k * per_stage), cuts[-1] + 1), layers - (pp - k)))
    cuts.append(layers)
    return [range(a, b) for a, b in itertools.pairwise(cuts)]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1, metavar="M",
                   help="per step: the pipeline's with --pp, gradient accumulation without")
    p.add_argument("--sequence-parallel", action="store_true")
    add_model_arguments(p)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--print-loss", action="store_true", help="every step's loss in the output")
    args = p.parse_args(argv)
    if args.sequence_parallel and (args.tp == 1 or args.pp > 1):
        p.error("--sequence-parallel needs --tp > 1 and no --pp (stages pass whole sequences)")
    for name in ("heads", "vocab", "seq_len"):
        if getattr(args, name) % args.tp:
            p.error(f"--{name.replace('_', '-')} must be a multiple of --tp {args.tp}")
    if args.pp > 1 and args.micro_batches < args.pp:
        p.error(f"Schedule1F1B needs --micro-batches >= --pp ({args.pp})")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    rank, world, local, comm = mpi_ranks()
    tp, pp = args.tp, args.pp
    if world % (tp * pp):
        raise SystemExit(f"world {world} is not a multiple of tp {tp} x pp {pp}")
    dp = world // (tp * pp)
    if dp > 1 and tp > 1 and pp > 1:
        raise SystemExit("dp x tp x pp all above 1: this plain script leaves that layout out")
    fsdp = dp > 1 and tp > 1

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    cuda = args.device == "cuda"
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    h, s, n_heads, vocab = args.hidden, args.seq_len, args.heads, args.vocab
    mesh = None
    if world > 1:
        assert comm is not None
        port = comm.bcast(_free_port() if rank == 0 else None, root=0)
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}",
                                device_id=dev if cuda else None)
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(dev.type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    coord = ([mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank(),
              mesh["tp"].get_local_rank()] if mesh is not None else [0, 0, 0])
    stage, dp_rank, tp_rank = coord
    first, last = stage == 0, stage == pp - 1
    head_layers = vocab / (12 * h) / (1 + s / (6 * h))  # Megatron's FLOPs: output / one layer
    mine = stage_layers(args.layers, pp, head_layers)[stage]
    seq_shard = s // tp if args.sequence_parallel else s

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.attn_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.mlp_proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            qkv = self.qkv(self.ln_1(x))  # (b, s, 3h / tp): this rank's heads under tp
            b, t = qkv.shape[:2]
            q, k, v = qkv.view(b, t, -1, 3, h // n_heads).permute(3, 0, 2, 1, 4).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, -1))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x))))

    class Stage(nn.Module):
        """This rank's part of the GPT: embeddings on the first stage, blocks `mine`, the final
        LayerNorm and the output layer on the last; all of it on one rank."""

        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, h) if first else None
            self.pos = nn.Embedding(s, h) if first else None
            self.layers = nn.ModuleDict({str(i): Block() for i in mine})
            self.ln_f = nn.LayerNorm(h) if last else None
            self.head = nn.Linear(h, vocab, bias=False) if last else None
            if self.tok is not None and self.head is not None:
                self.head.weight = self.tok.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
                if self.tok is not None and self.pos is not None:
                    start = tp_rank * seq_shard if args.sequence_parallel else 0
                    x = self.tok(x) + self.pos(torch.arange(start, start + seq_shard,
                                                            device=x.device))
                for block in self.layers.values():
                    x = block(x)
                if self.head is not None and self.ln_f is not None:
                    x = self.head(self.ln_f(x))
            return x

    model = Stage().to(dev)
    with torch.no_grad():  # by name and seed: every layout starts from the same weights
        for name, q in model.named_parameters():
            gen = torch.Generator(device=dev)
            gen.manual_seed(1234 + zlib.crc32(name.replace("head.", "tok.").encode()))
            if name.endswith("bias"):
                q.zero_()
            elif q.ndim >= 2:
                std = 0.02 / (math.sqrt(2 * args.layers) if name.endswith("proj.weight")
                              else 1.0)
                q.normal_(0.0, std, generator=gen)

    tp_mesh = mesh["tp"] if mesh is not None and tp > 1 else None
    if tp_mesh is not None:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            SequenceParallel,
            parallelize_module,
        )

        sp = args.sequence_parallel
        seq = Shard(1) if sp else Replicate()
        plan: dict[str, Any] = {"qkv": ColwiseParallel(input_layouts=seq),
                                "attn_proj": RowwiseParallel(output_layouts=seq),
                                "fc": ColwiseParallel(input_layouts=seq),
                                "mlp_proj": RowwiseParallel(output_layouts=seq)}
        if sp:
            plan.update(ln_1=SequenceParallel(), ln_2=SequenceParallel())
        for block in model.layers.values():
            parallelize_module(block, tp_mesh, plan)
        top: dict[str, Any] = {}
        if first:
            top["tok"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
        if last:
            top["head"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1))
            if sp:
                top["ln_f"] = SequenceParallel()
        parallelize_module(model, tp_mesh, top)
        if first and last:  # both vocabulary shards now: tie them again
            assert model.head is not None and model.tok is not None
            model.head.weight = model.tok.weight

    def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if tp_mesh is not None:  # this rank's vocabulary shard of the logits
            from torch.distributed.tensor import DTensor, Shard

            logits = DTensor.from_local(logits, tp_mesh, [Shard(2)], run_check=False)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
        return loss.to_local() if hasattr(loss, "to_local") else loss

    whole = args.compile and tp == 1 and pp == 1
    if args.compile and not whole:
        for key in list(model.layers):
            model.layers[key] = torch.compile(model.layers[key], mode=args.mode)
    run: Any = model
    if fsdp:  # torchtitan's 2-D layout: each block, then the rest, sharded over dp
        assert mesh is not None
        from torch.distributed.fsdp import fully_shard

        for block in model.layers.values():
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    elif dp > 1:
        assert mesh is not None
        run = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local] if cuda else None, process_group=mesh["dp"].get_group(),
            gradient_as_bucket_view=True)
    loss_fn: Any = loss_of
    if args.compile and tp == 1 and not whole:
        loss_fn = torch.compile(loss_of, mode=args.mode)

    def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(run(x), y)

    if whole:
        forward_loss = torch.compile(forward_loss, mode=args.mode)
    tie_group = None
    if pp > 1:  # the embedding's two copies: one group per (dp, tp) of first and last stage
        assert mesh is not None
        for d in range(dp):
            for t in range(tp):
                pair = [int(mesh.mesh[0, d, t]), int(mesh.mesh[-1, d, t])]
                group = dist.new_group(pair)
                if rank in pair:
                    tie_group = group
    groups = []  # the fused step takes DTensors and plain tensors in separate groups
    for decay in (True, False):
        for sharded in (True, False):
            params = [q for q in model.parameters()
                      if (q.ndim >= 2) == decay and hasattr(q, "placements") == sharded]
            if params:
                groups.append({"params": params, "weight_decay": 0.1 if decay else 0.0})
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)

    m, mb = args.micro_batches, args.micro_batch
    gen = torch.Generator().manual_seed(1234)  # the global batch; this replica's rows
    rows = mb * m
    tokens = torch.randint(0, vocab, (rows * dp, s + 1), generator=gen)
    tokens = tokens[dp_rank * rows:(dp_rank + 1) * rows].to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    loss_context = contextlib.nullcontext
    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import loss_parallel

        loss_context = loss_parallel
    schedule = None
    if pp > 1:
        assert mesh is not None
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        meta = torch.device("meta")
        hidden = torch.empty(mb, s, h, device=meta, requires_grad=True)  # fp32 residual
        logits = torch.empty(mb, s, vocab // tp, device=meta, requires_grad=True,
                             dtype=torch.bfloat16 if cuda else torch.float32)
        pstage = PipelineStage(run, stage, pp, dev, group=mesh["pp"].get_group(),
                               input_args=(torch.empty(mb, s, dtype=torch.long, device=meta)
                                           if first else hidden,),
                               output_args=(logits if last else hidden,))
        schedule = Schedule1F1B(pstage, n_microbatches=m, loss_fn=loss_fn, scale_grads=True)

    def step() -> torch.Tensor | None:
        opt.zero_grad(set_to_none=True)
        loss: torch.Tensor | None = None
        with loss_context():
            if schedule is not None:
                losses: list[torch.Tensor] = []
                targets: dict[str, Any] = {"target": y, "losses": losses} if last else {}
                schedule.step(*((x,) if first else ()), **targets, return_outputs=False)
                if last:
                    loss = torch.stack([v.detach() for v in losses]).mean()
            else:
                total = torch.zeros((), device=dev)
                for i in range(m):
                    reduce = dp == 1 or i == m - 1  # DDP, FSDP2: reduce on the last only
                    if fsdp:
                        model.set_requires_gradient_sync(reduce)
                    with contextlib.nullcontext() if reduce or fsdp else run.no_sync():
                        part = forward_loss(x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb])
                        (part / m).backward()
                    total += part.detach()
                loss = total / m
        grads = [q for q in model.parameters() if q.grad is not None]
        for q in grads:  # a DTensor gradient in another layout than its parameter's
            placements = getattr(q, "placements", None)
            if placements is not None and tuple(q.grad.placements) != tuple(placements):
                q.grad = q.grad.redistribute(q.device_mesh, placements)
        if args.sequence_parallel and model.pos is not None and model.pos.weight.grad is not None:
            assert tp_mesh is not None
            grad = model.pos.weight.grad  # under FSDP2: this replica's rows, alike over tp
            dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad,
                            group=tp_mesh.get_group())
        if tie_group is not None:
            owner = model.tok if model.tok is not None else model.head
            assert owner is not None and owner.weight.grad is not None
            grad = owner.weight.grad
            dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad,
                            group=tie_group)
        opt.step()
        return loss

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    losses_seen: list[torch.Tensor] = []
    t_start = time.perf_counter()
    out = step()
    sync()
    first_s = time.perf_counter() - t_start
    if out is not None:
        losses_seen.append(out)
    for _ in range(args.warmup - 1):
        if (out := step()) is not None:
            losses_seen.append(out)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        if (out := step()) is not None:
            losses_seen.append(out)
    sync()
    span = time.perf_counter() - t0
    if dp > 1 and losses_seen:  # the global batch's loss: the replicas' mean, once at the end
        assert mesh is not None
        stacked = torch.stack(losses_seen)
        dist.all_reduce(stacked, group=mesh["dp"].get_group())
        losses_seen = list(stacked / dp)
    values = [float(v) for v in losses_seen]
    if comm is not None:
        span = max(comm.allgather(span))  # the slowest rank's window
        reporter = (pp - 1) * dp * tp  # the last stage of replica 0, tp rank 0
        values = comm.bcast(values, root=reporter)
    step_s = span / args.iters
    samples = mb * m * dp
    tflops = flops_per_step(samples, s, args.layers, h, vocab) / world / step_s / 1e12
    if rank == 0:
        result = {"bare_throughput_sps": samples / step_s, "world": world,
                  "step_ms": step_s * 1e3, "tflops": tflops, "mfu": tflops / PEAK_BF16_TFLOPS,
                  "dp": dp, "tp": tp, "pp": pp, "micro_batch": mb, "micro_batches": m,
                  "sequence_parallel": args.sequence_parallel,
                  "stage_layers": [len(r) for r in stage_layers(args.layers, pp, head_layers)],
                  "first_step_s": first_s, "loss_first": values[0], "loss_last": values[-1],
                  "compile": args.compile, "mode": args.mode, "device": args.device,
                  "pid": os.getpid()}
        if args.print_loss:
            result["losses"] = values
        print(json.dumps(result), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
