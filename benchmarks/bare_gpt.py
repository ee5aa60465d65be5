"""GPT training with nothing around it: the plain compiled script the toolkit's GPT is compared
with (`gpu_table.py`, `gpu_scaling.py`). Under `mpirun -np N` it trains with DDP over NCCL, one
rank per GPU (mpi4py finds the ranks), `torch.compile(DDP(model))` as a plain data-parallel
script does, and prints the global samples/s. The same model as
`toolkit/workloads/pytorch/gpt_model.py` (learned token and position embeddings, pre-LayerNorm
blocks with fused QKV, causal SDPA, GELU MLP of 4h, final LayerNorm, output layer tied to the
embedding, no dropout), bf16 autocast,
fused AdamW (lr 1e-4, betas 0.9/0.95, weight decay 0.1 on matrices and embeddings), random
tokens, the whole model and its loss compiled as one function, as a plain nanoGPT-style script
does. Deliberately one file that imports nothing from the toolkit.

    python benchmarks/bare_gpt.py --micro-batch 16 --compile
    python benchmarks/bare_gpt.py --micro-batch 16 --compile --mode max-autotune-no-cudagraphs
    mpirun -np 2 python benchmarks/bare_gpt.py --micro-batch 16 --compile

Prints one JSON line: samples/s, ms per step, TFLOP/s and MFU by Megatron's 72-formula against
989 TFLOP/s (H100 SXM and H200 dense bf16). `--profile N` then profiles N more steps and prints
where the GPU time goes (`_profile.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

PEAK_BF16_TFLOPS = 989.0


def flops_per_step(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Megatron-LM (Narayanan et al. 2021), no recomputation."""
    return 72.0 * batch * seq * layers * hidden**2 * (
        1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model, compile and timing options this script and `bare_gpt_parallel.py` share."""
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--mode", default=None, help="torch.compile mode (default: its default)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=20)


def mpi_ranks() -> tuple[int, int, int, Any]:
    """(rank, world size, local rank, MPI.COMM_WORLD) under mpirun or srun (mpi4py finds
    them); (0, 1, 0, None) when started alone."""
    if "OMPI_COMM_WORLD_SIZE" not in os.environ and "PMI_SIZE" not in os.environ:
        return 0, 1, 0, None
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    return comm.Get_rank(), comm.Get_size(), local, comm


def main() -> None:
    p = argparse.ArgumentParser()
    add_model_arguments(p)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    p.add_argument("--sdpa", choices=["default", "cudnn", "flash", "efficient"], default="default",
                   help="the only attention backend SDPA may use (default: SDPA's own choice)")
    p.add_argument("--coordinate-descent", action="store_true",
                   help="Inductor's coordinate-descent tuning of its Triton kernels")
    p.add_argument("--gelu", choices=["none", "tanh"], default="none",
                   help="GELU approximation (tanh: Megatron's fused bias-GELU)")
    args = p.parse_args()

    rank, world, local, comm = mpi_ranks()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(1234)
    if args.sdpa != "default":
        only = args.sdpa
        torch.backends.cuda.enable_cudnn_sdp(only == "cudnn")
        torch.backends.cuda.enable_flash_sdp(only == "flash")
        torch.backends.cuda.enable_mem_efficient_sdp(only == "efficient")
        torch.backends.cuda.enable_math_sdp(False)
    h, s, n_heads = args.hidden, args.seq_len, args.heads

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.attn_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.mlp_proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b = x.shape[0]
            qkv = self.qkv(self.ln_1(x)).view(b, s, n_heads, 3, h // n_heads)
            q, k, v = qkv.permute(3, 0, 2, 1, 4).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, s, h))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate=args.gelu))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(args.vocab, h), nn.Embedding(s, h)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(h)
            self.head = nn.Linear(h, args.vocab, bias=False)
            self.head.weight = self.tok.weight
            for name, q in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(q)
                elif q.ndim >= 2:
                    std = 0.02 / (math.sqrt(2 * args.layers) if name.endswith("proj.weight")
                                  else 1.0)
                    nn.init.normal_(q, 0.0, std)

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))

    model = GPT().to(dev)
    decay = [q for q in model.parameters() if q.ndim >= 2]
    no_decay = [q for q in model.parameters() if q.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    if args.coordinate_descent:
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = True
    run: Any = model
    if world > 1:
        assert comm is not None
        port = comm.bcast(_free_port() if rank == 0 else None, root=0)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}", device_id=dev)
        run = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local],
                                                        gradient_as_bucket_view=True)
    if args.compile:
        run = torch.compile(run, mode=args.mode)
    gen = torch.Generator().manual_seed(1234 + rank)
    tokens = torch.randint(0, args.vocab, (args.micro_batch, s + 1), generator=gen).to(dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    t_start = time.perf_counter()
    first = step()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t_start
    for _ in range(args.warmup - 1):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        last = step()
    torch.cuda.synchronize()
    span = time.perf_counter() - t0
    if comm is not None:
        span = max(comm.allgather(span))  # the slowest rank's window
    step_s = span / args.iters
    tflops = flops_per_step(args.micro_batch, s, args.layers, h, args.vocab) / step_s / 1e12
    if rank != 0:
        if world > 1:
            dist.destroy_process_group()
        return
    print(json.dumps({"bare_throughput_sps": args.micro_batch * world / step_s,
                      "world": world, "step_ms": step_s * 1e3,
                      "tflops": tflops, "mfu": tflops / PEAK_BF16_TFLOPS,
                      "first_step_s": first_s, "loss_first": float(first),
                      "loss_last": float(last), "compile": args.compile, "mode": args.mode,
                      "sdpa": args.sdpa, "gelu": args.gelu,
                      "coordinate_descent": args.coordinate_descent,
                      "micro_batch": args.micro_batch, "pid": os.getpid()}), flush=True)
    if args.profile and world == 1:
        from _profile import profile_table  # benchmarks/_profile.py, beside this script

        print(profile_table(step, args.profile), flush=True)
    if world > 1:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    main()
