"""The local cluster's GPUs: which GPUs this machine has, which node owns which, and how Slurm
and a node's processes are told.

`up --nodes N --gpus-per-node G`: node k (from 1) owns the machine's GPUs (k-1)*G .. k*G-1, in
the order NVML numbers them (PCI order, as `nvidia-smi` does). Slurm knows them as each node's
GRES: `GresTypes=gpu` and `Gres=gpu:G` on every NodeName line of slurm.conf
(`render_slurm_conf`'s `gres_per_node`), and a gres.conf beside it that names each node's
device files (`render_gres_conf`), so Slurm sets CUDA_VISIBLE_DEVICES for the tasks of a job
that asks for GPUs. Without cgroups (this cluster has none) Slurm writes there each GPU's place
among the node's own (node2's GPUs 2 and 3 come as `0,1`); the TaskProlog runs the node's
`node-gpus` file, which puts the machine's numbers in their place (`node_gpus_file`).
`--share-gpus` lets more nodes than the machine has GPUs for
take turns on them (node k gets GPUs ((k-1)*G .. k*G-1) mod count): a test of the multi-node
path on a machine of one GPU, whose figures are marked shared (`shared_reason`).

A node's processes started outside Slurm (Open MPI's ssh agent, `toolkit.localslurm.agent`) get
the node's GPUs from `node_env`, and the TaskProlog tells a Slurm task whether its node's GPUs
are shared (`node_gpus_file`).

`read_machine_gpus` is the one place the machine is asked (NVML, else `nvidia-smi -q`); the
rest is pure. What lives elsewhere: what a rank does with the GPUs it sees
(`topology.sources.visible_gpus`, `toolkit.rank.binding`).
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
from collections.abc import Sequence
from typing import Any

from toolkit.analysis.sharing import GPUS_SHARED_VARIABLE
from toolkit.localslurm.config import NODE_GPUS_DIR, ClusterError

GRES_CONF = "gres.conf"

__all__ = ["GPUS_SHARED_VARIABLE", "GRES_CONF", "NODE_GPUS_DIR", "GpuPlan", "MachineGpu",
           "NoGpus", "NodeGpus", "describe", "gpus_from_nvidia_smi", "node_env",
           "node_gpus_file", "plan_gpus", "read_machine_gpus", "render_gres_conf",
           "shared_reason"]


@dataclasses.dataclass(frozen=True)
class MachineGpu:
    """One GPU of this machine."""

    index: int
    """NVML's index (PCI order, as nvidia-smi numbers them)."""
    minor: int
    """The N of its device file /dev/nvidiaN, which gres.conf names."""
    uuid: str | None = None
    name: str | None = None
    device: str = ""
    """The device file gres.conf names; /dev/nvidia<minor> unless given."""

    def __post_init__(self) -> None:
        if not self.device:
            object.__setattr__(self, "device", f"/dev/nvidia{self.minor}")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MachineGpu:
        return cls(index=int(data["index"]), minor=int(data["minor"]),
                   uuid=None if data.get("uuid") is None else str(data["uuid"]),
                   name=None if data.get("name") is None else str(data["name"]),
                   device=str(data.get("device") or ""))


@dataclasses.dataclass(frozen=True)
class NodeGpus:
    """The GPUs one node owns."""

    node: str
    gpus: tuple[MachineGpu, ...]
    shared_with: tuple[str, ...] = ()
    """The other nodes that own one of these GPUs too (`--share-gpus`)."""

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "gpus": [g.to_json() for g in self.gpus],
                "shared_with": list(self.shared_with)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeGpus:
        return cls(node=str(data["node"]),
                   gpus=tuple(MachineGpu.from_json(g) for g in data["gpus"]),
                   shared_with=tuple(str(n) for n in data.get("shared_with", ())))


@dataclasses.dataclass(frozen=True)
class GpuPlan:
    """Which node owns which of the machine's GPUs (in the cluster's record)."""

    gpus_per_node: int
    share: bool
    """`--share-gpus` was given (nodes may take turns on the same GPUs)."""
    nodes: tuple[NodeGpus, ...]
    machine_gpus: int
    """How many GPUs the machine has."""

    def node(self, name: str) -> NodeGpus:
        for n in self.nodes:
            if n.node == name:
                return n
        raise KeyError(name)

    @property
    def shared(self) -> bool:
        """Some GPU is owned by more than one node."""
        return any(n.shared_with for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"gpus_per_node": self.gpus_per_node, "share": self.share,
                "machine_gpus": self.machine_gpus, "nodes": [n.to_json() for n in self.nodes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuPlan:
        return cls(gpus_per_node=int(data["gpus_per_node"]), share=bool(data["share"]),
                   machine_gpus=int(data["machine_gpus"]),
                   nodes=tuple(NodeGpus.from_json(n) for n in data["nodes"]))


class NoGpus(RuntimeError):
    """The machine's GPUs could not be read; the message says why for every source."""


def read_machine_gpus() -> list[MachineGpu]:
    """This machine's NVIDIA GPUs from NVML, else from `nvidia-smi -q`; [] where neither
    finds one. NoGpus with both reasons where neither could be asked."""
    problems = []
    try:
        return _nvml_gpus()
    except Exception as err:  # no library, no driver: NVML raises its own errors
        problems.append(f"NVML: {type(err).__name__}: {err}")
    try:
        done = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        problems.append(f"nvidia-smi -q: {err}")
    else:
        if done.returncode == 0:
            return gpus_from_nvidia_smi(done.stdout)
        problems.append(f"nvidia-smi -q exited {done.returncode}: "
                        f"{(done.stderr or done.stdout).strip()[:300]}")
    raise NoGpus("; ".join(problems))


def _nvml_gpus() -> list[MachineGpu]:
    import pynvml

    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid, name = pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h)
            out.append(MachineGpu(
                index=i, minor=int(pynvml.nvmlDeviceGetMinorNumber(h)),
                uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                name=name.decode() if isinstance(name, bytes) else str(name)))
        return out
    finally:
        pynvml.nvmlShutdown()


def gpus_from_nvidia_smi(text: str) -> list[MachineGpu]:
    """The GPUs of an `nvidia-smi -q` dump (text or XML), in its order; ValueError where a GPU
    has no minor number (the device file Slurm needs)."""
    from parsers import nvidia_smi

    out = []
    for i, g in enumerate(nvidia_smi.parse(text)):
        if g.minor_number is None:
            raise ValueError(f"nvidia-smi -q: GPU {g.bus_id} has no Minor Number (its device "
                             "file /dev/nvidiaN)")
        out.append(MachineGpu(index=i, minor=g.minor_number, uuid=g.uuid, name=g.name))
    return out


def plan_gpus(nodes: Sequence[str], gpus_per_node: int, machine: Sequence[MachineGpu],
              share: bool = False, why_none: str = "") -> GpuPlan | None:
    """Which node owns which GPU (see the module's text); None without `--gpus-per-node`.
    ClusterError naming the option where the machine cannot give what is asked. `why_none`:
    why no GPU was found, for the message."""
    if gpus_per_node < 0:
        raise ClusterError(f"--gpus-per-node must be 0 or more, got {gpus_per_node}")
    if gpus_per_node == 0:
        if share:
            raise ClusterError("--share-gpus needs --gpus-per-node (the GPUs each node owns)")
        return None
    count = len(machine)
    if count == 0:
        raise ClusterError(f"--gpus-per-node {gpus_per_node}: this machine has no NVIDIA GPU"
                           + (f" ({why_none})" if why_none else ""))
    wanted = len(nodes) * gpus_per_node
    have = ", ".join(f"{g.index}: {g.name or 'GPU'}" for g in machine)
    if gpus_per_node > count:
        raise ClusterError(f"--gpus-per-node {gpus_per_node}: this machine has {count} GPU(s) "
                           f"({have}); a node cannot own more than that"
                           + (", even with --share-gpus" if share else ""))
    if wanted > count and not share:
        raise ClusterError(
            f"--nodes {len(nodes)} x --gpus-per-node {gpus_per_node} = {wanted} GPUs, but this "
            f"machine has {count} ({have}): ask for fewer, or add --share-gpus to let the nodes "
            "take turns on the same GPUs (a test of the multi-node path; every figure of such "
            "a run is marked shared)")
    owned = [tuple(machine[(k * gpus_per_node + i) % count] for i in range(gpus_per_node))
             for k in range(len(nodes))]
    planned = []
    for k, name in enumerate(nodes):
        mine = {g.index for g in owned[k]}
        others = tuple(n for j, n in enumerate(nodes)
                       if j != k and mine & {g.index for g in owned[j]})
        planned.append(NodeGpus(name, owned[k], others))
    return GpuPlan(gpus_per_node=gpus_per_node, share=share, nodes=tuple(planned),
                   machine_gpus=count)


def render_gres_conf(plan: GpuPlan | None) -> str:
    """gres.conf, read by every slurmd from beside slurm.conf: one line per GPU a node owns,
    naming its device file (Slurm sets CUDA_VISIBLE_DEVICES from the GPU's place among the
    node's; the TaskProlog puts the machine's numbers back, `node_gpus_file`).
    AutoDetect stays off: it would give every node all of the machine's GPUs."""
    lines = ["# Written by toolkit.localslurm: the GPUs each node owns."]
    if plan is None:
        lines.append("# This cluster's nodes own no GPU.")
    else:
        for n in plan.nodes:
            if n.shared_with:
                lines.append(f"# {n.node} shares its GPUs with {', '.join(n.shared_with)} "
                             "(--share-gpus)")
            lines += [f"NodeName={n.node} Name=gpu File={g.device}" for g in n.gpus]
    return "\n".join(lines) + "\n"


def shared_reason(node: NodeGpus) -> str | None:
    """Why a node's figures measure GPUs other nodes used too; None when they do not."""
    if not node.shared_with:
        return None
    gpus = ",".join(str(i) for i in node.indices)
    return (f"{node.node} takes turns on GPU(s) {gpus} with {', '.join(node.shared_with)} "
            "(localslurm up --share-gpus)")


def node_gpus_file(node: NodeGpus) -> str:
    """`node-gpus/<node>`: a shell script the TaskProlog runs for the node's Slurm tasks, whose
    output is `export` lines. Without cgroups Slurm sets CUDA_VISIBLE_DEVICES to each GPU's
    place among the node's own (node2's GPUs 2 and 3 come as `0,1`): the script puts the
    machine's numbers in their place, with CUDA_DEVICE_ORDER=PCI_BUS_ID (as NVML numbers them)
    unless the task has an order, and says why the GPUs are shared where they are."""
    places = " ".join(f"{k}) echo {g.index};;" for k, g in enumerate(node.gpus))
    lines = ["# Written by toolkit.localslurm: run by the TaskProlog, prints export lines.",
             f'gpu() {{ case "$1" in {places} *) echo "$1";; esac; }}',
             "v=",
             'for p in $(echo "${CUDA_VISIBLE_DEVICES-}" | tr , " "); do '
             'v="$v${v:+,}$(gpu "$p")"; done',
             '[ -z "$v" ] || echo "export CUDA_VISIBLE_DEVICES=$v"',
             '[ -n "${CUDA_DEVICE_ORDER-}" ] || echo "export CUDA_DEVICE_ORDER=PCI_BUS_ID"']
    why = shared_reason(node)
    if why is not None:
        lines.append(f"echo {shlex.quote(f'export {GPUS_SHARED_VARIABLE}={why}')}")
    return "\n".join(lines) + "\n"


def node_env(node: NodeGpus, inherited: dict[str, str]) -> dict[str, str]:
    """The variables a process the agent starts as `node` gets: the node's GPUs as
    CUDA_VISIBLE_DEVICES (NVML's indices, with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers
    them alike unless the caller chose an order), and why they are shared where they are.
    ValueError where `inherited` (what the caller of mpirun set) names other GPUs: the ranks
    would take GPUs the node does not own, or lose the caller's choice without a word."""
    visible = ",".join(str(i) for i in node.indices)
    given = inherited.get("CUDA_VISIBLE_DEVICES")
    if given is not None and given.replace(" ", "") != visible:
        raise ValueError(f"CUDA_VISIBLE_DEVICES={given} is set where mpirun runs, but "
                         f"{node.node} owns GPU(s) {visible} of this machine (localslurm up "
                         "--gpus-per-node): unset it; each node's ranks get its own GPUs")
    env = {"CUDA_VISIBLE_DEVICES": visible}
    if "CUDA_DEVICE_ORDER" not in inherited:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    why = shared_reason(node)
    if why is not None:
        env[GPUS_SHARED_VARIABLE] = why
    return env


def describe(node: NodeGpus) -> str:
    """`GPUs 0,1` / `GPU 0 (shared with node2)`, for `status`."""
    text = f"GPU{'s' if len(node.gpus) > 1 else ''} {','.join(map(str, node.indices))}"
    return text + (f" (shared with {', '.join(node.shared_with)})" if node.shared_with else "")
