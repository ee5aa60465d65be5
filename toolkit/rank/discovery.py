"""Rank discovery on the compute nodes, through mpi4py.

Every rank learns its global rank, the world size, its local rank and node index (ranks that share
a node: Slurm's node name, else the host), the host list, and MASTER_ADDR/MASTER_PORT broadcast
from rank 0 (a free port found there). The result is cross-checked against what the case expects
and, under Slurm, against SLURM_NTASKS / SLURM_PROCID / SLURM_NODEID: Open MPI started without PMI
wiring can start N separate worlds of size 1 without an error, and that must stop the run.

`from mpi4py import MPI` initialises MPI; it is imported only inside `discover()`, never on the
submit host. Binding to GPUs/CPUs lives in `topology`; the framework's process group in the
workloads.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RankMismatch(RuntimeError):
    """MPI's view of the job disagrees with the case or with Slurm."""


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_size: int
    """Ranks on this rank's node."""
    node_index: int
    """0-based index of this rank's node, in order of the node's lowest rank."""
    num_nodes: int
    host: str
    hosts: tuple[str, ...]
    """Host of every rank, by rank."""
    master_addr: str
    master_port: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class Comm:
    """The few collectives the worker needs; wraps mpi4py so callers never import it."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm

    def allgather(self, obj: Any) -> list[Any]:
        return list(self._comm.allgather(obj))

    def barrier(self) -> None:
        self._comm.Barrier()

    def quiet_barrier(self, poll_s: float = 0.005) -> None:
        """A barrier that sleeps while it waits: MPI's own spins on a core, which a peer
        measuring the CPU on the same host would lose."""
        request = self._comm.Ibarrier()
        while not request.Test():
            time.sleep(poll_s)

    def abort(self, code: int = 1) -> None:
        self._comm.Abort(code)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def master_address(env: Mapping[str, str]) -> str:
    """The address other ranks use to reach rank 0.

    The MASTER_ADDR the user set wins; under Slurm the first host of the allocation; otherwise
    this host's name when it resolves, else loopback (single-node runs).
    """
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        first = first_host(nodelist)
        # Slurm node names usually resolve; where they do not (several named nodes on one
        # host, or names that are not host names), rank 0's own host is the same machine.
        if first and _resolves(first):
            return first
    host = socket.gethostname()
    return host if _resolves(host) else "127.0.0.1"


def _resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
        return True
    except OSError:
        return False


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: `node[1-2,5]` -> `node1`, `a,b` -> `a`."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
    if "[" not in head:
        return head.strip()
    prefix, _, rest = head.partition("[")
    first = rest.split(",")[0].split("]")[0].split("-")[0]
    return prefix + first


def discover(expected_world: int | None = None, expected_nodes: int | None = None,
             env: Mapping[str, str] | None = None) -> tuple[RankInfo, Comm]:
    """Find this rank's place in the job. Raises RankMismatch on any inconsistency."""
    from mpi4py import MPI

    env = os.environ if env is None else env
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    host = socket.gethostname()
    # A node is what Slurm calls a node (SLURMD_NODENAME, set for every task it starts, also
    # under mpirun's daemons) or else the host. Several Slurm nodes may share one host (the local
    # test cluster), so shared-memory splitting alone would merge them.
    node_key = f"{env.get('SLURMD_NODENAME', '')}@{host}"
    keys = world.allgather(node_key)
    firsts = {k: keys.index(k) for k in keys}  # node -> its lowest rank
    node_order = sorted(set(firsts.values()))
    node_index = node_order.index(firsts[node_key])
    local = world.Split(node_index, key=rank)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    hosts = tuple(world.allgather(host))
    if rank == 0:
        addr = master_address(env)
        port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else free_port()
        master: tuple[str, int] | None = (addr, port)
    else:
        master = None
    addr, port = world.bcast(master, root=0)
    info = RankInfo(rank=rank, world_size=size, local_rank=local_rank, local_size=local_size,
                    node_index=node_index, num_nodes=len(node_order), host=host, hosts=hosts,
                    master_addr=addr, master_port=port)
    problems = check_consistency(info, expected_world, expected_nodes, env)
    # Every rank must agree on whether to stop: gather the problems.
    all_problems = [p for ps in world.allgather(problems) for p in ps]
    if all_problems:
        raise RankMismatch("; ".join(dict.fromkeys(all_problems)))
    return info, Comm(world)


def check_consistency(info: RankInfo, expected_world: int | None, expected_nodes: int | None,
                      env: Mapping[str, str]) -> list[str]:
    """Pure: what is wrong with this rank's view of the job (empty when all agree)."""
    problems = []
    if expected_world is not None and info.world_size != expected_world:
        problems.append(
            f"MPI world size is {info.world_size} but the case needs {expected_world} ranks "
            "(was the launcher started without PMI wiring, giving separate worlds?)")
    if expected_nodes is not None and info.num_nodes != expected_nodes:
        problems.append(f"ranks span {info.num_nodes} node(s) but the case asks for "
                        f"{expected_nodes}")
    ntasks = env.get("SLURM_NTASKS")
    # Under mpirun (which sets OMPI_COMM_WORLD_SIZE for the ranks its daemons start) the
    # SLURM_* variables are those of the daemons' own srun step, one task per node.
    by_mpirun = "OMPI_COMM_WORLD_SIZE" in env
    if ntasks and ntasks.isdigit() and int(ntasks) != info.world_size and not by_mpirun:
        problems.append(f"MPI world size {info.world_size} != SLURM_NTASKS {ntasks}")
    procid = env.get("SLURM_PROCID")
    # SLURM_PROCID is only meaningful when srun started this process (not under mpirun).
    if procid and procid.isdigit() and env.get("SLURM_STEP_NUM_TASKS") == str(info.world_size) \
            and int(procid) != info.rank:
        problems.append(f"rank {info.rank}: MPI rank != SLURM_PROCID {procid}")
    nodeid = env.get("SLURM_NODEID")
    if nodeid and nodeid.isdigit() and env.get("SLURM_STEP_NUM_TASKS") == str(info.world_size) \
            and int(nodeid) != info.node_index:
        problems.append(f"rank {info.rank}: node index {info.node_index} != SLURM_NODEID {nodeid}")
    return problems
