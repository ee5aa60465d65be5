"""The node topology data model: GPUs, NICs, the links between them, and CPU-list helpers.

What belongs here: the frozen dataclasses every source produces (`NodeTopology`, `Gpu`, `Nic`,
`Link`), the closed vocabulary of link types, and the CPU-list text format (`0-11,24-35`).
What lives elsewhere: reading the facts (`topology.smi` parses `nvidia-smi topo -m`,
`topology.sources` reads NVML and sysfs) and deciding what each rank gets (`topology.plan`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class LinkType(Enum):
    """How two devices are connected, as `nvidia-smi topo -m` names it."""

    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


# Lower is closer. NVLink only joins GPUs; for a GPU-NIC pair the PCIe levels decide.
_DISTANCE: dict[LinkType, int] = {
    LinkType.SELF: 0,
    LinkType.NVLINK: 1,
    LinkType.PIX: 2,
    LinkType.PXB: 3,
    LinkType.PHB: 4,
    LinkType.NODE: 5,
    LinkType.SYS: 6,
}

_NVLINK_RE = re.compile(r"NV(\d+)")


@dataclass(frozen=True)
class Link:
    """One cell of the topology matrix: the connection between two devices."""

    type: LinkType
    """The kind of connection."""
    nvlink_count: int = 0
    """Number of bonded NVLinks (the `18` of `NV18`); 0 unless `type` is NVLINK, and 0 when an
    NVLink is known to exist but not how many (NVML P2P status)."""

    @classmethod
    def parse(cls, code: str) -> Link:
        """`"NV18"` -> Link(NVLINK, 18); `"PIX"` -> Link(PIX). ValueError for anything else."""
        match = _NVLINK_RE.fullmatch(code)
        if match:
            return cls(LinkType.NVLINK, int(match.group(1)))
        if code == "SOC":
            # Drivers before the NODE level existed printed SOC ("the SMP link between CPU
            # sockets") for what later drivers print as SYS.
            return cls(LinkType.SYS)
        try:
            return cls(LinkType(code))
        except ValueError:
            valid = ", ".join(t.value for t in LinkType if t is not LinkType.NVLINK)
            raise ValueError(f"unknown link code {code!r} (valid: {valid}, NV<n>)") from None

    @property
    def distance(self) -> int:
        """Sort key: lower is closer (X < NV# < PIX < PXB < PHB < NODE < SYS)."""
        return _DISTANCE[self.type]

    def __str__(self) -> str:
        if self.type is LinkType.NVLINK:
            return f"NV{self.nvlink_count}" if self.nvlink_count else "NV"
        return self.type.value


@dataclass(frozen=True)
class Nic:
    """A network adapter (InfiniBand / RoCE HCA) that NCCL can use."""

    name: str
    """The name the topology matrix uses for it: `NIC0` on newer drivers, `mlx5_0` on older."""
    device: str
    """The RDMA device name (`mlx5_0`), what `NCCL_IB_HCA` and `UCX_NET_DEVICES` take."""
    port: int = 1
    """The HCA port to use (the `:1` of `mlx5_0:1`)."""
    bus_id: str | None = None
    """PCI bus id (`0000:5e:00.0`) when known (sysfs)."""
    numa_node: int | None = None
    """NUMA node of the adapter when known (sysfs)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "name": self.name,
            "device": self.device,
            "port": self.port,
            "bus_id": self.bus_id,
            "numa_node": self.numa_node,
        }


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML enumerates it (NVML ignores CUDA_VISIBLE_DEVICES)."""

    index: int
    """NVML / nvidia-smi index (`GPU3` -> 3)."""
    cpus: frozenset[int]
    """CPUs close to the GPU (`CPU Affinity`, `nvmlDeviceGetCpuAffinity`); empty when unknown."""
    numa_node: int | None
    """The NUMA node of those CPUs (`NUMA Affinity`, sysfs `numa_node`); None when unknown."""
    gpu_links: Mapping[int, Link] = field(default_factory=dict)
    """Link to every other GPU, by GPU index (the GPU itself is left out)."""
    nic_links: Mapping[str, Link] = field(default_factory=dict)
    """Link to every NIC, by NIC device name (`mlx5_0`)."""
    bus_id: str | None = None
    """PCI bus id in sysfs form (`0000:18:00.0`) when known (NVML)."""
    uuid: str | None = None
    """`GPU-...` UUID when known (NVML)."""
    name: str | None = None
    """Product name (`NVIDIA H100 80GB HBM3`) when known (NVML)."""
    memory_mib: int | None = None
    """Total device memory in MiB when known (NVML)."""

    @property
    def nvlink_peers(self) -> tuple[int, ...]:
        """Indices of the GPUs joined to this one by NVLink, ascending."""
        return tuple(
            sorted(i for i, link in self.gpu_links.items() if link.type is LinkType.NVLINK)
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON; links as their matrix codes (`NV2`, `PIX`)."""
        return {
            "index": self.index,
            "bus_id": self.bus_id,
            "uuid": self.uuid,
            "name": self.name,
            "memory_mib": self.memory_mib,
            "cpus": format_cpu_list(self.cpus),
            "numa_node": self.numa_node,
            "gpu_links": {str(i): str(link) for i, link in sorted(self.gpu_links.items())},
            "nic_links": {nic: str(link) for nic, link in self.nic_links.items()},
            "nvlink_peers": list(self.nvlink_peers),
        }


@dataclass(frozen=True)
class NodeTopology:
    """What one node has: its GPUs, its NICs, and where those facts came from."""

    gpus: tuple[Gpu, ...]
    """All GPUs, by ascending index; those CUDA_VISIBLE_DEVICES leaves, in its order, where
    `topology.sources.visible_gpus` narrowed them."""
    nics: tuple[Nic, ...]
    """All RDMA NICs, in matrix (or sysfs) order."""
    source: str
    """Where the facts came from, e.g. `nvidia-smi topo -m + NVML` or `file:saved.txt`."""

    def gpu(self, index: int) -> Gpu:
        """The GPU with this NVML index; KeyError listing the indices that exist."""
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        have = ", ".join(str(g.index) for g in self.gpus)
        raise KeyError(f"no GPU {index} on this node (GPUs: {have})")

    def nic(self, device: str) -> Nic:
        """The NIC with this device name (`mlx5_0`)."""
        for nic in self.nics:
            if nic.device == device:
                return nic
        raise KeyError(f"no NIC {device!r} on this node")

    def nearest_nics(self, gpu_index: int) -> tuple[tuple[Nic, Link], ...]:
        """The NICs at the smallest distance from this GPU (several when tied), matrix order."""
        links = self.gpu(gpu_index).nic_links
        known = [(nic, links[nic.device]) for nic in self.nics if nic.device in links]
        if not known:
            return ()
        best = min(link.distance for _, link in known)
        return tuple((nic, link) for nic, link in known if link.distance == best)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "source": self.source,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "nics": [nic.to_dict() for nic in self.nics],
        }


_CPU_RANGE_RE = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpu_list(text: str) -> frozenset[int]:
    """`"0-11,24-35"` -> {0..11, 24..35}, the Linux cpulist format (also `"3"`, `"0,2,4"`).

    ValueError, naming the bad part, for anything else (`N/A` included: callers decide what an
    unknown affinity means).
    """
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        raise ValueError("empty CPU list")
    for part in stripped.split(","):
        match = _CPU_RANGE_RE.fullmatch(part.strip())
        if not match:
            raise ValueError(f"bad CPU list {text!r}: {part!r} is not N or N-M")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"bad CPU list {text!r}: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def cpu_runs(cpus: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive CPUs as (first, last) pairs, ascending."""
    runs: list[tuple[int, int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], cpu)
        else:
            runs.append((cpu, cpu))
    return runs


def format_cpu_list(cpus: Iterable[int]) -> str:
    """{0..11, 24..35} -> `"0-11,24-35"`; the empty set -> `""`."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in cpu_runs(cpus))


_BUS_ID_RE = re.compile(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")


def normalize_bus_id(bus_id: str) -> str:
    """PCI bus id in sysfs form: `00000000:18:00.0` (NVML, torch) -> `0000:18:00.0`.

    ValueError for text that is not `[domain:]bus:device.function`.
    """
    match = _BUS_ID_RE.fullmatch(bus_id.strip())
    if not match:
        raise ValueError(f"not a PCI bus id: {bus_id!r} (expected e.g. 0000:18:00.0)")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"
