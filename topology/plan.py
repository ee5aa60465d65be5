"""The per-local-rank binding plan, applying it, and the network interface for NCCL sockets.

What belongs here: deciding what each local rank gets from a `NodeTopology` (GPU, CPU set, NUMA
node, nearest NIC, the NCCL/UCX environment that follows), applying one rank's binding to the
running process and recording what it actually got, and finding the interface that reaches the
rendezvous address (`NCCL_SOCKET_IFNAME`).
What lives elsewhere: reading the topology (`topology.smi`, `topology.sources`); rank discovery
(`toolkit.rank.discovery`); choosing the CUDA device inside the framework (the worker).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import socket
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topology.model import (
    Link,
    Nic,
    NodeTopology,
    cpu_runs,
    format_cpu_list,
    normalize_bus_id,
    parse_cpu_list,
)


@dataclass(frozen=True)
class Binding:
    """What one local rank is bound to, and the environment that binding implies."""

    local_rank: int
    """Rank within the node, 0-based."""
    gpu_index: int
    """NVML index of the rank's GPU."""
    gpu_bus_id: str | None
    """PCI bus id of the GPU (`0000:18:00.0`) when known."""
    gpu_uuid: str | None
    """UUID of the GPU (`GPU-...`) when known."""
    cpus: frozenset[int]
    """CPUs the rank should run on: its share of the GPU's affinity set; empty when unknown."""
    numa_node: int | None
    """NUMA node of the GPU's CPUs when known."""
    nic: Nic | None
    """Nearest RDMA NIC, None when the node has none."""
    nic_link: Link | None
    """Link between the GPU and that NIC (`PIX`, `NODE`, ...)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment the binding implies (`NCCL_IB_HCA`, `UCX_NET_DEVICES`)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the rank's `meta.json` and `python -m topology --plan --json`)."""
        return {
            "local_rank": self.local_rank,
            "gpu_index": self.gpu_index,
            "gpu_bus_id": self.gpu_bus_id,
            "gpu_uuid": self.gpu_uuid,
            "cpus": format_cpu_list(self.cpus),
            "numa_node": self.numa_node,
            "nic": self.nic.device if self.nic else None,
            "nic_link": str(self.nic_link) if self.nic_link else None,
            "env": dict(self.env),
        }


def plan_node(
    topo: NodeTopology, ranks_per_node: int, *, gpu_indices: list[int] | None = None
) -> list[Binding]:
    """One `Binding` per local rank; local rank i gets `gpu_indices[i]` (default: GPU i).

    CPU sets: the ranks whose GPUs share one affinity set split it evenly. Each contiguous
    range of the set is divided among them (rank k gets the k-th slice of every range), so on
    a `0-11,24-35` socket, where 24-35 are the SMT siblings of 0-11, a rank keeps each core
    together with its sibling. When a range is shorter than the number of ranks, the whole
    sorted set is split contiguously instead.

    NIC: the best link among PIX < PXB < PHB < NODE < SYS; ties go to the NIC that has served
    the fewest ranks so far, so ranks spread over equally close NICs.
    """
    if ranks_per_node < 1:
        raise ValueError(f"ranks_per_node must be at least 1, got {ranks_per_node}")
    have = [gpu.index for gpu in topo.gpus]
    if ranks_per_node > len(have):
        raise ValueError(
            f"ranks_per_node={ranks_per_node} but this node has {len(have)} GPU(s) "
            f"({', '.join(map(str, have))}); one rank per GPU at most"
        )
    if gpu_indices is None:
        gpu_indices = have[:ranks_per_node]
    if len(gpu_indices) != ranks_per_node:
        raise ValueError(
            f"gpu_indices lists {len(gpu_indices)} GPU(s) ({gpu_indices}) "
            f"for ranks_per_node={ranks_per_node}"
        )
    unknown = [i for i in gpu_indices if i not in have]
    if unknown:
        raise ValueError(f"gpu_indices {unknown} do not exist on this node (GPUs: {have})")
    shared = {i: n for i, n in Counter(gpu_indices).items() if n > 1}
    if shared:
        detail = "; ".join(
            f"GPU {i} by local ranks {[r for r, g in enumerate(gpu_indices) if g == i]}"
            for i in shared
        )
        raise ValueError(f"two ranks would share one GPU: {detail}")

    gpus = [topo.gpu(i) for i in gpu_indices]
    cpu_share: dict[int, frozenset[int]] = {}
    for cpus in dict.fromkeys(g.cpus for g in gpus):  # distinct sets, first-seen order
        ranks = [r for r, g in enumerate(gpus) if g.cpus == cpus]
        for rank, part in zip(ranks, split_cpus(cpus, len(ranks)), strict=True):
            cpu_share[rank] = part

    nic_load: Counter[str] = Counter()
    bindings: list[Binding] = []
    for rank, gpu in enumerate(gpus):
        nic: Nic | None = None
        link: Link | None = None
        candidates = topo.nearest_nics(gpu.index)
        if candidates:
            # min() keeps the first of equals: the least-used NIC, then matrix order.
            nic, link = min(candidates, key=lambda c: nic_load[c[0].device])
            nic_load[nic.device] += 1
        bindings.append(
            Binding(
                local_rank=rank,
                gpu_index=gpu.index,
                gpu_bus_id=gpu.bus_id,
                gpu_uuid=gpu.uuid,
                cpus=cpu_share[rank],
                numa_node=gpu.numa_node,
                nic=nic,
                nic_link=link,
                env=nic_env(nic),
            )
        )
    return bindings


def split_cpus(cpus: frozenset[int], parts: int) -> list[frozenset[int]]:
    """Split a CPU set into `parts` even shares (see `plan_node` for the rule)."""
    if parts < 1:
        raise ValueError(f"cannot split CPUs into {parts} parts")
    runs = cpu_runs(cpus)
    if runs and all(last - first + 1 >= parts for first, last in runs):
        shares: list[set[int]] = [set() for _ in range(parts)]
        for first, last in runs:
            for k, chunk in enumerate(_even_chunks(list(range(first, last + 1)), parts)):
                shares[k].update(chunk)
        return [frozenset(s) for s in shares]
    return [frozenset(c) for c in _even_chunks(sorted(cpus), parts)]


def _even_chunks(items: list[int], parts: int) -> list[list[int]]:
    # The first len % parts chunks get one item more.
    size, extra = divmod(len(items), parts)
    chunks: list[list[int]] = []
    start = 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks


def nic_env(nic: Nic | None) -> dict[str, str]:
    """NCCL/UCX variables that pin a rank to one NIC port; empty without a NIC.

    `NCCL_IB_HCA` matches by prefix unless it starts with `=` (`mlx5_1` would also pick
    `mlx5_10`), hence the exact form `=mlx5_0:1`.
    """
    if nic is None:
        return {}
    port = f"{nic.device}:{nic.port}"
    return {"NCCL_IB_HCA": f"={port}", "UCX_NET_DEVICES": port}


def online_cpus() -> frozenset[int]:
    """CPUs that exist and are online on this machine."""
    try:
        with open("/sys/devices/system/cpu/online", encoding="ascii") as f:
            return parse_cpu_list(f.read())
    except (OSError, ValueError):
        return frozenset(range(os.cpu_count() or 1))


def apply(
    binding: Binding, user_env: Mapping[str, str], *, actual_gpu_bus_id: str | None = None
) -> dict[str, Any]:
    """Bind this process to `binding` and return what was planned next to what it got.

    CPU affinity: set to the planned CPUs that exist here (a plan made from another machine's
    matrix may name CPUs this one lacks); skipped, with the reason recorded, when none exist.
    Environment: the binding's variables go into `os.environ` except those in `user_env`,
    which the user set and which win. `actual_gpu_bus_id`, when the caller knows which device
    it opened, is checked against the plan.
    """
    mismatches: list[str] = []
    affinity_skipped: str | None = None
    if binding.cpus:
        exist = online_cpus()
        target = binding.cpus & exist
        missing = binding.cpus - exist
        if not hasattr(os, "sched_setaffinity"):
            affinity_skipped = "os.sched_setaffinity is not available on this platform"
        elif not target:
            affinity_skipped = (
                f"none of the planned CPUs {format_cpu_list(binding.cpus)} exist here "
                f"(online: {format_cpu_list(exist)})"
            )
        else:
            if missing:
                mismatches.append(
                    f"planned CPUs {format_cpu_list(missing)} do not exist here; "
                    f"bound to {format_cpu_list(target)}"
                )
            try:
                os.sched_setaffinity(0, target)
            except OSError as err:
                affinity_skipped = f"sched_setaffinity failed: {err}"
    else:
        affinity_skipped = "the plan has no CPU set (GPU affinity unknown)"

    actual_cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if binding.cpus and actual_cpus and set(actual_cpus) != set(binding.cpus):
        mismatches.append(
            f"CPU affinity is {format_cpu_list(actual_cpus)}, "
            f"planned {format_cpu_list(binding.cpus)}"
        )

    env_applied: dict[str, str] = {}
    env_user_overrides: dict[str, str] = {}
    for key, value in binding.env.items():
        if key in user_env:
            env_user_overrides[key] = user_env[key]
            if user_env[key] != value:
                mismatches.append(f"{key}={user_env[key]!r} set by the user, planned {value!r}")
        else:
            os.environ[key] = value
            env_applied[key] = value

    actual: dict[str, Any] = {"cpus": actual_cpus}
    if actual_gpu_bus_id is not None:
        actual["gpu_bus_id"] = actual_gpu_bus_id
        if binding.gpu_bus_id and normalize_bus_id(actual_gpu_bus_id) != normalize_bus_id(
            binding.gpu_bus_id
        ):
            mismatches.append(f"GPU bus id is {actual_gpu_bus_id}, planned {binding.gpu_bus_id}")
    return {
        "planned": binding.to_dict(),
        "actual": actual,
        "affinity_skipped": affinity_skipped,
        "env_applied": env_applied,
        "env_user_overrides": env_user_overrides,
        "mismatches": mismatches,
    }


def socket_ifname_for(addr: str) -> str | None:
    """The network interface this host uses to reach `addr` (for `NCCL_SOCKET_IFNAME`).

    Asks the kernel's routing table through a UDP connect() (which sends nothing), then finds
    the interface that holds the chosen local address. None when `addr` does not resolve or no
    interface matches.
    """
    try:
        infos = socket.getaddrinfo(addr, 9, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError):
        return None
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(sockaddr)
                local = sock.getsockname()[0]
        except OSError:
            continue
        name = interface_for_local_address(str(local))
        if name is not None:
            return name
    return None


_SIOCGIFADDR = 0x8915  # <linux/sockios.h>


def interface_for_local_address(local: str) -> str | None:
    """The interface holding this local IPv4/IPv6 address (Linux), or None."""
    try:
        ip = ipaddress.ip_address(local.split("%")[0])
    except ValueError:
        return None
    if ip.version == 6:
        return _ipv6_interface(ip)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            with contextlib.suppress(OSError):  # interfaces without an IPv4 address
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
                if socket.inet_ntoa(reply[20:24]) == str(ip):
                    return name
    return None


def _ipv6_interface(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    # /proc/net/if_inet6: address (32 hex digits), ifindex, prefix length, scope, flags, name.
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and ipaddress.IPv6Address(int(fields[0], 16)) == ip:
                    return fields[5]
    except OSError:
        return None
    return None
