"""A user's script that starts its own workers, as one that calls torchrun or mp.spawn does:
it reads NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR and MASTER_PORT, starts NPROC_PER_NODE
worker processes that train with DDP over gloo, and worker 0 prints Megatron-style lines."""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank: int, nproc: int, node_rank: int, nnodes: int, iters: int,
           batch: int) -> None:
    rank, world = node_rank * nproc + local_rank, nnodes * nproc
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(batch, 16)
    last = time.time()
    for i in range(iters):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.002)
        now = time.time()
        if rank == 0:
            print(f" iteration {i + 1:8d}/{iters:8d} | elapsed time per iteration (ms): "
                  f"{(now - last) * 1000:.1f} | global batch size: {batch * world:5d} | "
                  f"lm loss: {loss.item():E} |", flush=True)
        last = now
    dist.destroy_process_group()


def main() -> int:
    iters, batch = int(sys.argv[1]), int(sys.argv[2])
    nproc = int(os.environ["NPROC_PER_NODE"])
    node_rank, nnodes = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
    assert "RANK" not in os.environ, "a per-node launcher gets no rank of its own"
    print(f"node {node_rank}/{nnodes}: starting {nproc} workers", flush=True)
    mp.start_processes(worker, args=(nproc, node_rank, nnodes, iters, batch), nprocs=nproc,
                       start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
