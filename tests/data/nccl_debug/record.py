"""Records NCCL's own report of the transports it chose (NCCL_DEBUG=INFO into a file a rank).

    mpirun -np 2 python record.py OUT MODE

MODE `two_hosts`: each rank gives NCCL a host id of its own (NCCL_HOSTID), so NCCL takes the
two ranks, both on GPU 0, for two hosts and connects them over its socket transport (`lo`);
`two_hosts_net`: the same with NCCL_DEBUG_SUBSYS=INIT,NET. One all-reduce of 64 MiB, 3 times.
"""

import os
import sys

from mpi4py import MPI

out, mode = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
os.environ["NCCL_HOSTID"] = f"host{rank}"
os.environ["NCCL_DEBUG"] = "INFO"
os.environ["NCCL_DEBUG_FILE"] = os.path.join(out, f"{mode}.rank{rank}.log")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
if mode == "two_hosts_net":
    os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = "29511"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=rank, world_size=size, device_id=dev)
x = torch.ones(16 << 20, device=dev)
for _ in range(3):
    dist.all_reduce(x)
torch.cuda.synchronize()
assert x[0].item() == size ** 3
dist.destroy_process_group()
if rank == 0:
    print(mode, "ok", torch.__version__, torch.cuda.nccl.version())
