"""ResNet50 v1.5 training with nothing around it: the baseline the toolkit's overhead is measured
against (`overhead.py`). Same model, recipe, loss, data and precision as
`toolkit/workloads/torch_resnet50.py` (SGD momentum 0.875 fused, no weight decay on batch-norm
parameters and biases, label smoothing 0.1 computed inside the compiled module, channels_last),
same launcher (mpirun, mpi4py for rank discovery), but no binding, no NVML sampler, no
per-iteration events: the clock is read twice, after a device synchronisation at the start and at
the end of the measured window. Deliberately one file that imports nothing from the toolkit.

    mpirun -np 2 python benchmarks/bare_resnet50.py --batch-size 256 --precision amp_bf16 --compile
    python benchmarks/bare_resnet50.py --precision amp_fp16 --loss-scaling static --compile

`--profile N` then profiles N more iterations on every rank and prints where the GPU time goes
(`_profile.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from typing import Any

STARTED = time.perf_counter()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "tf32", "amp_bf16", "amp_fp16"],
                   default="amp_bf16")
    p.add_argument("--loss-scaling", choices=["dynamic", "static"], default="dynamic")
    p.add_argument("--static-loss-scale", type=float, default=128.0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--mode", default=None,
                   help="torch.compile mode (reduce-overhead: CUDA graphs; default: its default)")
    p.add_argument("--compile-optimizer", action="store_true",
                   help="compile the optimizer step too (foreach SGD under torch.compile)")
    p.add_argument("--coordinate-descent", action="store_true",
                   help="Inductor's coordinate-descent tuning of its Triton kernels")
    p.add_argument("--no-cudnn-benchmark", action="store_true",
                   help="let cuDNN's heuristics pick each convolution's algorithm instead of "
                        "timing them all at the first step")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--profile", type=int, default=0, metavar="N")
    args = p.parse_args()

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)

    import torch
    import torch.distributed as dist
    from torchvision.models import resnet50

    imported_s = time.perf_counter() - STARTED

    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = not args.no_cudnn_benchmark
    torch.manual_seed(1234)

    class WithLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = resnet50()
            self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.criterion(self.net(x), y)

    module = WithLoss().to(dev, memory_format=torch.channels_last)
    decay = [q for q in module.parameters() if q.ndim > 1]
    no_decay = [q for q in module.parameters() if q.ndim <= 1]
    model: Any = module
    if world > 1:
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}", device_id=dev)
        model = torch.nn.parallel.DistributedDataParallel(module, device_ids=[local],
                                                          gradient_as_bucket_view=True)
    if args.coordinate_descent:
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = True
    if args.compile:
        model = torch.compile(model, mode=args.mode, dynamic=False)
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 3.0517578125e-05},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.256 * args.batch_size * world / 256, momentum=0.875,
                          fused=not args.compile_optimizer,
                          foreach=True if args.compile_optimizer else None)
    opt_step = torch.compile(opt.step) if args.compile_optimizer else opt.step
    gen = torch.Generator().manual_seed(1234000 + rank)
    x = torch.randn(args.batch_size, 3, 224, 224, generator=gen).to(
        dev, memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch_size,), generator=gen).to(dev)
    amp = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(args.precision)
    fp16 = args.precision == "amp_fp16"
    scaler = torch.amp.GradScaler("cuda") if fp16 and args.loss_scaling == "dynamic" else None
    static = args.static_loss_scale if fp16 and args.loss_scaling == "static" else None
    params = decay + no_decay

    graphs = args.compile and args.mode in ("reduce-overhead", "max-autotune")

    def step() -> None:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = model(x, y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return
        if static is not None:
            (loss * static).backward()
            torch._foreach_mul_([q.grad for q in params], 1.0 / static)
        else:
            loss.backward()
        opt_step()

    t_first = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first_step_s = time.perf_counter() - t_first
    to_first_step_s = time.perf_counter() - STARTED
    for _ in range(args.warmup - 1):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        step()
    torch.cuda.synchronize()
    span = time.perf_counter() - t0
    spans = comm.gather(span, root=0)
    if rank == 0:
        assert spans is not None
        tput = args.batch_size * world * args.iters / max(spans)
        print(json.dumps({"bare_throughput_sps": tput, "world": world, "pid": os.getpid(),
                          "compile": args.compile, "precision": args.precision,
                          "mode": args.mode, "compile_optimizer": args.compile_optimizer,
                          "coordinate_descent": args.coordinate_descent,
                          "cudnn_benchmark": not args.no_cudnn_benchmark,
                          "import_s": round(imported_s, 2),
                          "to_first_step_s": round(to_first_step_s, 2),
                          "first_step_s": round(first_step_s, 2),
                          "compile_counters": compile_counters()}), flush=True)
    if args.profile:
        from _profile import print_profiles  # benchmarks/_profile.py, beside this script

        print_profiles(comm, step, args.profile)
    if world > 1:
        comm.barrier()
        dist.destroy_process_group()


def compile_counters() -> dict[str, int]:
    """What torch.compile found in its caches and tuned in this process (Dynamo's counters)."""
    from torch._dynamo.utils import counters

    keep = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass",
            "autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass",
            "coordesc_tuning_bench")
    return {f"{group}.{name}": int(n) for group in ("inductor", "aot_autograd")
            for name, n in counters[group].items() if name in keep}


if __name__ == "__main__":
    main()
