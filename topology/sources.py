"""Where the node's topology facts come from: NVML, sysfs and the `nvidia-smi topo -m` command.

What belongs here: reading GPUs through NVML (count, name, PCI bus id, UUID, CPU affinity,
memory), NUMA nodes (of a device, and each node's CPUs) and RDMA NICs through sysfs, running
`nvidia-smi topo -m` (one thin function, so tests pass recorded text instead), and
`discover()`, which combines what works into the best `NodeTopology` and says which source it
used, narrowed to the GPUs CUDA_VISIBLE_DEVICES leaves the process (`visible_gpus`: a node of
the local cluster that owns some of the machine's GPUs, a Slurm job given some of a node's).
What lives elsewhere: the text parser (`topology.smi`), the data model (`topology.model`), the
per-rank plan (`topology.plan`). NVML sampling during training is `toolkit.rank.telemetry`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from topology.model import (
    Gpu,
    Link,
    LinkType,
    Nic,
    NodeTopology,
    normalize_bus_id,
    parse_cpu_list,
)
from topology.smi import parse_topo_matrix

SYSFS_ROOT = "/sys"


class SourceUnavailable(RuntimeError):
    """A source cannot answer on this machine; the message says why."""


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML reports it."""

    index: int
    """NVML index (all GPUs; NVML ignores CUDA_VISIBLE_DEVICES)."""
    name: str
    """Product name."""
    bus_id: str
    """PCI bus id, sysfs form (`0000:18:00.0`)."""
    uuid: str
    """`GPU-...` UUID."""
    cpus: frozenset[int]
    """CPUs from `nvmlDeviceGetCpuAffinity`."""
    memory_mib: int
    """Total memory in MiB."""
    gpu_links: dict[int, Link] = field(default_factory=dict)
    """Links to the other GPUs (NVLink from P2P status, else the PCIe common ancestor)."""


@dataclass(frozen=True)
class Discovery:
    """The result of `probe()`: the best topology found and why the other sources failed."""

    topology: NodeTopology | None
    """The best topology, None when no source found an NVIDIA GPU."""
    problems: dict[str, str]
    """Source name (`NVML`, `nvidia-smi`) -> why it gave nothing."""
    nics: tuple[Nic, ...] = ()
    """The RDMA NICs sysfs lists, also when no GPU was found."""


def run_nvidia_smi_topo(timeout_s: float = 30.0) -> str:
    """Run `nvidia-smi topo -m` and return its stdout; SourceUnavailable when it can't."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "topo", "-m"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise SourceUnavailable("nvidia-smi not found on PATH") from None
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SourceUnavailable(f"nvidia-smi topo -m failed: {err}") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise SourceUnavailable(
            f"nvidia-smi topo -m exited {done.returncode}: {message[0] if message else ''}"
        )
    return done.stdout


def _text(value: Any) -> str:
    # pynvml returns bytes in older releases, str in newer ones.
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_init() -> Any:
    """pynvml, initialised; SourceUnavailable (saying why) without the library or a driver."""
    try:
        import pynvml
    except ImportError:
        raise SourceUnavailable("pynvml (nvidia-ml-py) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise SourceUnavailable(f"{type(err).__name__}: {err}") from None
    return pynvml


def read_nvml() -> list[NvmlGpu]:
    """All GPUs NVML sees, with their links to each other; SourceUnavailable without NVML."""
    pynvml = nvml_init()
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            raise SourceUnavailable("NVML found no GPU")
        words = max(1, ((os.cpu_count() or 1) + 63) // 64)
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus_ids = [normalize_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
        gpus = []
        for i, h in enumerate(handles):
            affinity = pynvml.nvmlDeviceGetCpuAffinity(h, words)
            cpus = frozenset(
                w * 64 + b for w, word in enumerate(affinity) for b in range(64) if word >> b & 1
            )
            gpus.append(
                NvmlGpu(
                    index=i,
                    name=_text(pynvml.nvmlDeviceGetName(h)),
                    bus_id=bus_ids[i],
                    uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                    cpus=cpus,
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total) // 2**20,
                    gpu_links={
                        j: _nvml_link(pynvml, h, other, bus_ids[j])
                        for j, other in enumerate(handles)
                        if j != i
                    },
                )
            )
        return gpus
    except pynvml.NVMLError as err:
        raise SourceUnavailable(f"{type(err).__name__}: {err}") from None
    finally:
        pynvml.nvmlShutdown()


# nvmlGpuTopologyLevel_t -> the matrix code nvidia-smi prints for it.
_NVML_LEVELS = {
    0: LinkType.PIX,
    10: LinkType.PIX,
    20: LinkType.PXB,
    30: LinkType.PHB,
    40: LinkType.NODE,
    50: LinkType.SYS,
}


def _nvml_link(pynvml: Any, a: Any, b: Any, b_bus_id: str) -> Link:
    try:
        nvlink_ok = (
            pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
            == pynvml.NVML_P2P_STATUS_OK
        )
    except pynvml.NVMLError:
        nvlink_ok = False
    if nvlink_ok:
        direct = active = 0
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(a, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                active += 1
                remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(a, link)
                if normalize_bus_id(_text(remote.busId)) == b_bus_id:
                    direct += 1
            except (pynvml.NVMLError, ValueError):
                continue
        # Through NVSwitch the remote end is the switch; nvidia-smi then counts all links.
        return Link(LinkType.NVLINK, direct or active)
    try:
        level = int(pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    except pynvml.NVMLError:
        return Link(LinkType.SYS)
    return Link(_NVML_LEVELS.get(level, LinkType.SYS))


def read_numa_node(bus_id: str, sysfs_root: str = SYSFS_ROOT) -> int | None:
    """NUMA node of a PCI device from sysfs; None when unknown (-1, or no such file)."""
    path = os.path.join(sysfs_root, "bus/pci/devices", normalize_bus_id(bus_id), "numa_node")
    try:
        with open(path, encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def read_infiniband_nics(sysfs_root: str = SYSFS_ROOT) -> list[Nic]:
    """RDMA devices under `/sys/class/infiniband`, with PCI bus id, NUMA node, first port."""
    base = os.path.join(sysfs_root, "class/infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    nics = []
    for name in names:
        device = os.path.realpath(os.path.join(base, name, "device"))
        bus_id: str | None
        try:
            bus_id = normalize_bus_id(os.path.basename(device))
        except ValueError:
            bus_id = None
        try:
            ports = sorted(int(p) for p in os.listdir(os.path.join(base, name, "ports")))
        except (OSError, ValueError):
            ports = []
        nics.append(
            Nic(
                name=name,
                device=name,
                port=ports[0] if ports else 1,
                bus_id=bus_id,
                numa_node=read_numa_node(bus_id, sysfs_root) if bus_id else None,
            )
        )
    return nics


def pcie_link(path_a: str, path_b: str, numa_a: int | None, numa_b: int | None) -> Link:
    """The matrix code for two PCI devices from their sysfs paths (`realpath` of the device).

    Paths look like `/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0`: the
    `pci0000:17` root is a host bridge, every component below it a bridge or the device.
    Same switch -> PIX, a deeper common switch tree -> PXB, same host bridge -> PHB, different
    host bridges on one NUMA node -> NODE, otherwise SYS.
    """
    a = [p for p in path_a.split("/") if p]
    b = [p for p in path_b.split("/") if p]
    root_a = next((i for i, p in enumerate(a) if p.startswith("pci")), None)
    root_b = next((i for i, p in enumerate(b) if p.startswith("pci")), None)
    if root_a is None or root_b is None or a[root_a] != b[root_b]:
        same_node = numa_a is not None and numa_a == numa_b
        return Link(LinkType.NODE if same_node else LinkType.SYS)
    a, b = a[root_a + 1 :], b[root_b + 1 :]
    common = 0
    while common < min(len(a), len(b)) - 1 and a[common] == b[common]:
        common += 1
    if common == 0:
        return Link(LinkType.PHB)
    # Below the shared switch port each side has its downstream port and then the device.
    if len(a) - common <= 2 and len(b) - common <= 2:
        return Link(LinkType.PIX)
    return Link(LinkType.PXB)


def _pci_path(bus_id: str, sysfs_root: str) -> str:
    return os.path.realpath(os.path.join(sysfs_root, "bus/pci/devices", bus_id))


def topology_from_nvml(
    nvml_gpus: list[NvmlGpu], nics: list[Nic], sysfs_root: str = SYSFS_ROOT
) -> NodeTopology:
    """A topology from NVML and sysfs alone (no `nvidia-smi`)."""
    gpus = []
    for g in nvml_gpus:
        numa = read_numa_node(g.bus_id, sysfs_root)
        gpu_path = _pci_path(g.bus_id, sysfs_root)
        nic_links = {
            nic.device: pcie_link(gpu_path, _pci_path(nic.bus_id, sysfs_root), numa, nic.numa_node)
            for nic in nics
            if nic.bus_id
        }
        gpus.append(
            Gpu(
                index=g.index,
                cpus=g.cpus,
                numa_node=numa,
                gpu_links=g.gpu_links,
                nic_links=nic_links,
                bus_id=g.bus_id,
                uuid=g.uuid,
                name=g.name,
                memory_mib=g.memory_mib,
            )
        )
    return NodeTopology(gpus=tuple(gpus), nics=tuple(nics), source="NVML + sysfs")


def enrich(
    topo: NodeTopology,
    nvml_gpus: list[NvmlGpu] | None,
    nics: list[Nic],
    sysfs_root: str = SYSFS_ROOT,
) -> NodeTopology:
    """Add what the matrix lacks: bus ids, UUIDs, names, memory (NVML); NUMA, NIC PCI (sysfs).

    GPUs are matched by index (nvidia-smi and NVML enumerate alike), NICs by device name.
    """
    by_index = {g.index: g for g in nvml_gpus or []}
    gpus = []
    for gpu in topo.gpus:
        n = by_index.get(gpu.index)
        if n is None:
            gpus.append(gpu)
            continue
        numa = gpu.numa_node if gpu.numa_node is not None else read_numa_node(n.bus_id, sysfs_root)
        gpus.append(
            replace(
                gpu,
                bus_id=n.bus_id,
                uuid=n.uuid,
                name=n.name,
                memory_mib=n.memory_mib,
                numa_node=numa,
                cpus=gpu.cpus or n.cpus,
            )
        )
    sys_nics = {nic.device: nic for nic in nics}
    merged_nics = tuple(
        replace(nic, port=s.port, bus_id=s.bus_id, numa_node=s.numa_node)
        if (s := sys_nics.get(nic.device))
        else nic
        for nic in topo.nics
    )
    source = topo.source + (" + NVML" if by_index else "")
    return NodeTopology(gpus=tuple(gpus), nics=merged_nics, source=source)


def probe(
    *,
    run_smi: Callable[[], str] = run_nvidia_smi_topo,
    nvml: Callable[[], list[NvmlGpu]] = read_nvml,
    sysfs_root: str = SYSFS_ROOT,
) -> Discovery:
    """Try every source; keep the best topology and each failed source's reason.

    Best: the `nvidia-smi topo -m` matrix (what users recognise) enriched with NVML and sysfs;
    then NVML + sysfs alone. Never raises for a machine without GPUs.
    """
    problems: dict[str, str] = {}
    nvml_gpus: list[NvmlGpu] | None = None
    try:
        nvml_gpus = nvml()
    except SourceUnavailable as err:
        problems["NVML"] = str(err)
    nics = read_infiniband_nics(sysfs_root)
    try:
        matrix = parse_topo_matrix(run_smi())
    except SourceUnavailable as err:
        problems["nvidia-smi"] = str(err)
    except ValueError as err:
        problems["nvidia-smi"] = f"could not parse `nvidia-smi topo -m`: {err}"
    else:
        return Discovery(enrich(matrix, nvml_gpus, nics, sysfs_root), problems, tuple(nics))
    if nvml_gpus:
        return Discovery(topology_from_nvml(nvml_gpus, nics, sysfs_root), problems, tuple(nics))
    return Discovery(None, problems, tuple(nics))


def read_numa_nodes(sysfs_root: str = SYSFS_ROOT) -> dict[int, frozenset[int]]:
    """NUMA node -> its CPUs, from `devices/system/node/node<N>/cpulist`; {} when sysfs has
    no NUMA information (a container without /sys, a non-NUMA kernel)."""
    base = os.path.join(sysfs_root, "devices/system/node")
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    nodes = {}
    for name in names:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        try:
            with open(os.path.join(base, name, "cpulist"), encoding="ascii") as f:
                nodes[int(name[4:])] = parse_cpu_list(f.read().strip())
        except (OSError, ValueError):
            continue
    return dict(sorted(nodes.items()))


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity, else all `os.cpu_count()`)."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"


def visible_gpus(topo: NodeTopology | None, visible: str | None) -> NodeTopology | None:
    """`topo` with only the GPUs `visible` (a CUDA_VISIBLE_DEVICES value) names, in its order,
    each keeping NVML's index; None where it names none. `visible` None: every GPU.

    An entry is an index (NVML's, PCI order: CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID, and the
    number Slurm writes for a GPU's /dev/nvidiaN on the usual machine where minor numbers follow
    that order) or a UUID or a unique start of one (`GPU-9b3e`). As CUDA does, the list ends at
    the first entry that names no GPU (`-1`, an index past the last, an unknown UUID); a GPU
    named twice counts once."""
    if topo is None or visible is None:
        return topo
    by_index = {g.index: g for g in topo.gpus}
    kept: list[Gpu] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit():
            gpu = by_index.get(int(entry))
        else:
            found = [g for g in topo.gpus if g.uuid and entry and g.uuid.startswith(entry)]
            gpu = found[0] if len(found) == 1 else None
        if gpu is None:
            break
        if gpu not in kept:
            kept.append(gpu)
    if not kept:
        return None
    if len(kept) == len(topo.gpus) and kept == list(topo.gpus):
        return topo
    return NodeTopology(gpus=tuple(kept), nics=topo.nics,
                        source=f"{topo.source}, {VISIBLE_VARIABLE}={visible}")


def discover() -> NodeTopology | None:
    """This node's topology from the best source (named in `.source`), only the GPUs
    CUDA_VISIBLE_DEVICES leaves this process (`visible_gpus`); None without GPUs."""
    return visible_gpus(probe().topology, os.environ.get(VISIBLE_VARIABLE))


def load_matrix_file(path: str) -> NodeTopology:
    """Parse a saved `nvidia-smi topo -m` output; OSError / ValueError name the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        return parse_topo_matrix(text, source=f"file:{path}")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
