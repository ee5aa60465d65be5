"""Node topology for trainbench: which GPU, CPUs, NUMA node and NIC each local rank gets.

Modules: `model` (the data classes), `smi` (parsing `nvidia-smi topo -m`), `sources` (NVML,
sysfs, running nvidia-smi, `discover()`), `plan` (per-rank binding, `apply`, the NCCL socket
interface), `cli` (`python -m topology`). The names below are the ones other packages use.
"""

from __future__ import annotations

from topology.model import Gpu, Link, LinkType, Nic, NodeTopology, format_cpu_list, parse_cpu_list
from topology.plan import Binding, apply, plan_node, socket_ifname_for
from topology.smi import parse_topo_matrix
from topology.sources import discover, probe

__all__ = [
    "Binding",
    "Gpu",
    "Link",
    "LinkType",
    "Nic",
    "NodeTopology",
    "apply",
    "discover",
    "format_cpu_list",
    "parse_cpu_list",
    "parse_topo_matrix",
    "plan_node",
    "probe",
    "socket_ifname_for",
]
