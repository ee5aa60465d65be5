"""The case's binding choice (`binding: auto | none | explicit`) turned into this local rank's
plan and applied. Glue between the Case and the `topology` package, which knows nothing of
cases; the worker calls `bind_rank` before the framework starts its communicator.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from toolkit.rank.discovery import RankInfo
from toolkit.spec import BindingMode, Case


def resolve_binding(topo: Any, case: Case, local_rank: int, local_size: int) -> Any:
    """This local rank's `topology.plan.Binding` under the case's binding mode (pure)."""
    from topology.model import parse_cpu_list
    from topology.plan import nic_env, plan_node

    if case.binding is not BindingMode.EXPLICIT:
        return plan_node(topo, local_size)[local_rank]
    entries = sorted(case.binding_map, key=lambda b: b.local_rank)
    planned = plan_node(topo, local_size)
    gpu_indices = [e.gpu if e.gpu is not None else planned[e.local_rank].gpu_index
                   for e in entries]
    plan = plan_node(topo, local_size, gpu_indices=gpu_indices)[local_rank]
    entry = entries[local_rank]
    changes: dict[str, Any] = {}
    if entry.cpus is not None:
        changes["cpus"] = parse_cpu_list(entry.cpus)
    if entry.nic is not None:
        nic = next((n for n in topo.nics if entry.nic in (n.device, n.name)), None)
        if nic is None:
            known = ", ".join(n.device for n in topo.nics) or "none"
            raise ValueError(f"binding_map[{local_rank}].nic: no NIC {entry.nic!r} on this "
                             f"node (NICs: {known})")
        changes.update(nic=nic, nic_link=None, env=nic_env(nic))
    return dataclasses.replace(plan, **changes)


def bind_rank(case: Case, info: RankInfo) -> dict[str, Any]:
    """Plan and apply this rank's binding; the record goes into meta.json.

    Without NVIDIA GPUs (or if the topology cannot be read under `auto`) nothing is bound and
    the record says why; a broken topology source must not stop a benchmark.
    """
    user_env = dict(case.env)
    try:
        from topology import apply, discover, socket_ifname_for

        topo = discover()
        if topo is None:
            return {"applied": False, "mode": case.binding.value,
                    "reason": "no NVIDIA GPU topology on this node"}
        plan = resolve_binding(topo, case, info.local_rank, info.local_size)
        if case.binding is BindingMode.NONE:
            return {"applied": False, "mode": "none", "reason": "binding: none in the grid",
                    "planned": plan.to_dict()}
        record = apply(plan, user_env)
        # NVML numbers GPUs in PCI order; make CUDA agree so the planned index is the used one.
        if "CUDA_DEVICE_ORDER" not in user_env:
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        # Usually set already, with Gloo's and Open MPI's, before MPI started
        # (toolkit.rank.network, recorded there): only a rank it left without one asks here.
        ifname = socket_ifname_for(info.master_addr) if info.num_nodes > 1 and \
            "NCCL_SOCKET_IFNAME" not in os.environ else None
        if ifname and "NCCL_SOCKET_IFNAME" not in user_env:
            os.environ["NCCL_SOCKET_IFNAME"] = ifname
            record.setdefault("env_applied", {})["NCCL_SOCKET_IFNAME"] = ifname
        record.update(applied=True, mode=case.binding.value, source=getattr(topo, "source", None))
        return record
    except Exception as err:
        if case.binding is BindingMode.EXPLICIT:
            raise  # the user asked for this binding: not getting it must stop the run
        return {"applied": False, "mode": case.binding.value,
                "reason": f"binding failed: {type(err).__name__}: {err}"}


def node_gpu_bus_ids(case: Case) -> tuple[list[str], str | None]:
    """(PCI bus ids, None) of the GPUs this node's ranks would be bound to, one per GPU of the
    node as the case's binding plans them, for a process that stands for its whole node (a
    command case with `launch: per_node`); ([], why) where there is none to name."""
    try:
        from topology import discover

        topo = discover()
        if topo is None:
            return [], "no NVIDIA GPU topology on this node"
        plans = [resolve_binding(topo, case, local_rank, case.gpus_per_node)
                 for local_rank in range(case.gpus_per_node)]
    except Exception as err:  # a broken topology source must not stop a benchmark
        return [], f"the node's GPUs could not be read: {type(err).__name__}: {err}"
    bus_ids = list(dict.fromkeys(p.gpu_bus_id for p in plans if p.gpu_bus_id))
    return bus_ids, None if bus_ids else "no GPU bus id in this node's topology"


def applied_gpu(binding: dict[str, Any]) -> int | None:
    """The NVML index of the GPU a `bind_rank` record bound this rank to; None when nothing
    was bound."""
    if not binding.get("applied"):
        return None
    index = (binding.get("planned") or {}).get("gpu_index")
    return index if isinstance(index, int) else None


def cuda_index(gpu_index: int | None, local_rank: int, count: int) -> int:
    """The CUDA device a rank uses: the binding's GPU (an NVML index, equal to the CUDA index
    when CUDA_VISIBLE_DEVICES is unset, as the local executor leaves it; where it is set and
    lists indices, as Slurm and the local cluster's nodes set it, the GPU's place in that list),
    else the one visible GPU or the local rank's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpu_index is not None and visible is None:
        return gpu_index
    if gpu_index is not None and visible is not None:
        entries = [e.strip() for e in visible.split(",")]
        if str(gpu_index) in entries:
            return entries.index(str(gpu_index))
    return 0 if count == 1 else local_rank


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def cpu_record() -> dict[str, Any]:
    """The CPUs this process may run on (`cpus`, its affinity after binding), the CPUs online
    on its host (`host_cpus`) and the machine (`machine`: its kernel's boot id, which host names
    in network namespaces or containers of one machine share), for the rank's summary: they
    tell runs that shared their CPUs (`toolkit.analysis.sharing`). `cpus` is None where the
    platform has no affinity call, `machine` where the kernel gives no boot id."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    try:
        machine: str | None = Path(BOOT_ID).read_text().strip() or None
    except OSError:
        machine = None
    return {"cpus": cpus, "host_cpus": os.cpu_count(), "machine": machine}
