"""ResNet50 v1.5 training with nothing around it: the baseline the toolkit's overhead is measured
against (`overhead.py`). Same model, optimizer, loss, data and precision as
`toolkit/workloads/torch_resnet50.py`, same launcher (mpirun, mpi4py for rank discovery), but no
binding, no NVML sampler, no per-iteration events: the clock is read twice, after a device
synchronisation at the start and at the end of the measured window.

    mpirun -np 2 python benchmarks/bare_resnet50.py --batch-size 256 --precision amp_bf16
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "tf32", "amp_bf16"], default="amp_bf16")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
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

    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    tf32 = args.precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1234)
    model = resnet50().to(dev, memory_format=torch.channels_last)
    if world > 1:
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}", device_id=dev)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local],
                                                          gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.256 * args.batch_size * world / 256,
                          momentum=0.875, weight_decay=3.0517578125e-05, fused=True)
    crit = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    gen = torch.Generator().manual_seed(1234000 + rank)
    x = torch.randn(args.batch_size, 3, 224, 224, generator=gen).to(
        dev, memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch_size,), generator=gen).to(dev)
    amp = args.precision == "amp_bf16"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = crit(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
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
        print(json.dumps({"bare_throughput_sps": tput, "world": world, "pid": os.getpid()}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
