"""The local cluster's fixed names, ports and limits, and the pure builders of its files
(slurm.conf, cgroup.conf, the TaskProlog) and parsers of sinfo's answers. Starts no process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

ROOT_STATE_DIR = "/run/trainbench-slurm"
"""Root's: /run is root's own, where no other user can make the directory first."""

DEFAULT_STATE_DIR = ROOT_STATE_DIR if os.geteuid() == 0 else f"/tmp/trainbench-slurm-{os.geteuid()}"
"""Root's under /run; one per other user under /tmp (by uid), for status and env."""


STATE_DIR_ENV = "TRAINBENCH_SLURM_DIR"

NODE_ENV_DIR = "node-env"
"""Under the state directory: `<node>` files of `export NAME=value` lines for that node's tasks
(the TaskProlog prints them)."""

NODE_GPUS_DIR = "node-gpus"
"""Under the state directory: `<node>` files of `export NAME=value` lines about the GPUs the
node owns (`toolkit.localslurm.gpus`; the TaskProlog prints them)."""


DEFAULT_NODES = 2

#: As many as one /24 network has addresses for (the bridge takes one).
MAX_NODES = 253

#: Below it the ports are the system's (and need privileges other services hold).
MIN_PORT_BASE = 1024


#: `up --network`: each node in a network namespace of its own, every node at 127.0.0.1, or
#: namespaces where the kernel allows them.
NETWORK_MODES = ("auto", "namespaces", "loopback")


#: Away from Slurm's defaults (6817/6818) so a system Slurm on the same machine is never hit.
DEFAULT_PORT_BASE = 17817


DEFAULT_REAL_MEMORY_MIB = 1024


DEFAULT_UP_TIMEOUT_S = 60.0
STALE_STEPS_GRACE_S = 30.0
"""How long `start_node` lets the steps a node ran before it went away end before its slurmd
registers again."""


DEFAULT_STOP_TIMEOUT_S = 10.0


CLUSTER_NAME = "trainbench"


PARTITION = "debug"


#: Same nodes, higher PriorityTier: a job here preempts (requeues) jobs of PARTITION.
URGENT_PARTITION = "urgent"


PACKAGES = ("slurm-wlm", "munge", "openmpi-bin", "libopenmpi-dev")


#: Executables whose absence means the packages above must be installed.
REQUIRED_EXECUTABLES = ("slurmctld", "slurmd", "sinfo", "srun", "munged", "munge", "mpirun")


MUNGE_KEY = Path("/etc/munge/munge.key")


MUNGE_RUN_DIR = Path("/run/munge")


#: slurmd puts one unix socket per step in its spool dir; sun_path holds 107 bytes, and the
#: socket name adds about 45 to the state dir ("spool/node12/node12_4294967294.4294967294").
MAX_STATE_DIR_CHARS = 60


STATE_FILE = "cluster.json"


#: Under the state directory: /etc/hosts as the namespaced nodes see it.
HOSTS_FILE = "hosts"

#: Under the state directory: /etc/resolv.conf as the namespaced nodes see it.
RESOLV_FILE = "resolv.conf"


EXIT_NOT_ROOT = 2


class ClusterError(RuntimeError):
    """The local cluster could not be started, queried or stopped; the message says why."""


def node_names(nodes: int) -> list[str]:
    return [f"node{k}" for k in range(1, nodes + 1)]


def render_slurm_conf(
    state_dir: Path,
    hostname: str,
    nodes: int,
    cpus_per_node: int,
    port_base: int = DEFAULT_PORT_BASE,
    real_memory_mib: int = DEFAULT_REAL_MEMORY_MIB,
    slurmd_timeout_s: int = 30,
    accounting: Sequence[str] = (),
    shared_nodes: bool = False,
    node_addrs: Sequence[str] | None = None,
    controller_addr: str = "127.0.0.1",
    plugin_dir: str | None = None,
    gres_per_node: int = 0,
) -> str:
    """The whole slurm.conf of a local cluster (pure; no file is touched). `slurmd_timeout_s`:
    how long a silent slurmd takes to be marked DOWN (node-failure tests shorten it).
    ``accounting``: lines that replace ``AccountingStorageType=accounting_storage/none``.
    ``shared_nodes``: let jobs share a node; by default every job gets its nodes to itself
    (``OverSubscribe=EXCLUSIVE``), one job per node at a time: the nodes are CPUs of this one
    machine, and two benchmarks on the same CPUs measure each other. ``node_addrs``: each
    node's own address (nodes in network namespaces, each its own host name); without them
    every node is this host at 127.0.0.1. ``controller_addr``: where the nodes reach
    slurmctld. ``plugin_dir``: where Slurm's plugins are, for a Slurm unpacked under a prefix
    (its compiled-in PluginDir holds nothing); None keeps the compiled-in one.
    ``gres_per_node``: GPUs each node owns, as GRES (`Gres=gpu:N`; gres.conf beside this file
    names their devices, `toolkit.localslurm.gpus`); 0: none."""
    names = node_names(nodes)
    if node_addrs is not None and len(node_addrs) != nodes:
        raise ValueError(f"{len(node_addrs)} node addresses for {nodes} nodes")
    node_lines = [
        f"NodeName={name} "
        + (f"NodeHostname={hostname} NodeAddr=127.0.0.1" if node_addrs is None
           else f"NodeHostname={name} NodeAddr={node_addrs[k - 1]}")
        + f" Port={port_base + k} CPUs={cpus_per_node} RealMemory={real_memory_mib} "
        + (f"Gres=gpu:{gres_per_node} " if gres_per_node else "")
        + "State=UNKNOWN"
        for k, name in enumerate(names, start=1)
    ]
    nodelist = f"node[1-{nodes}]" if nodes > 1 else "node1"
    sharing = "" if shared_nodes else " OverSubscribe=EXCLUSIVE"
    lines = [
        f"# Written by toolkit.localslurm for the cluster in {state_dir}; rewritten on every up.",
        f"ClusterName={CLUSTER_NAME}",
        # The controller checks that its own short hostname is named here.
        f"SlurmctldHost={hostname}({controller_addr})",
        f"SlurmctldPort={port_base}",
        # Fallback only: every node has its own Port below.
        f"SlurmdPort={port_base + 1}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # No cgroups: containers and laptops rarely have a delegated cgroup tree.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        *([f"PluginDir={plugin_dir}"] if plugin_dir else []),
        *(["GresTypes=gpu"] if gres_per_node else []),
        # Per node: slurmstepd's PMIx client dir lives under TmpFS, and one shared /tmp made
        # both nodes' steps create the same directory, failing srun --mpi=pmix across nodes.
        f"TmpFS={state_dir / 'tmp' / '%n'}",
        # Adds per-task environment that keeps the nodes' Open MPI apart (see the script).
        f"TaskProlog={state_dir / 'taskprolog.sh'}",
        # Trust the CPUs written here rather than draining a node that has fewer real ones.
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"StateSaveLocation={state_dir / 'ctld'}",
        f"SlurmdSpoolDir={state_dir / 'spool' / '%n'}",
        f"SlurmctldPidFile={state_dir / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={state_dir / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={state_dir / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={state_dir / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        *(accounting or ["AccountingStorageType=accounting_storage/none"]),
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MailProg=/bin/true",
        # Short timeouts so tests see failures and finished jobs quickly.
        "MessageTimeout=10",
        "SlurmctldTimeout=30",
        f"SlurmdTimeout={slurmd_timeout_s}",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=60",
        "UnkillableStepTimeout=30",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=5,sched_interval=5",
        *node_lines,
        # Preemption as shared clusters configure it: a job in the urgent partition requeues
        # the jobs of the default one that stand in its way (tests of requeue-on-preemption).
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        f"PartitionName={PARTITION} Nodes={nodelist} Default=YES MaxTime=INFINITE State=UP "
        f"PriorityTier=1{sharing}",
        f"PartitionName={URGENT_PARTITION} Nodes={nodelist} MaxTime=INFINITE State=UP "
        f"PriorityTier=2{sharing}",
        "",
    ]
    return "\n".join(lines)


def render_mpi_conf() -> str:
    """mpi.conf, read from beside slurm.conf by the PMIx plugin of `srun --mpi=pmix`.

    `PMIxCollFence=ring`: the plugin's tree fence (`tree`, and the last fence of `mixed`,
    Slurm's default) takes its tree from `reverse_tree_info` with `TreeWidth` (50 in Slurm
    22.05), which gives a node no parent and no child on a step of fewer nodes than that; so
    on every step of this cluster each node completes the fence alone. A rank then leaves
    MPI_Init while a peer on another node is still in its first fence, before Open MPI has
    registered its message handlers, and the peer dies of SIGSEGV (a call through the empty
    handler of tag 0x41, the PML's match header, in mca_btl_tcp) when the first message
    arrives. The ring passes through every node. Jobs the toolkit submits set it themselves
    too (`SLURM_PMIX_FENCE`, from `slurm.pmix_fence`)."""
    return ("# Written by toolkit.localslurm: the PMIx plugin's settings for this cluster.\n"
            "PMIxCollFence=ring\n")


def render_cgroup_conf() -> str:
    """Kept next to slurm.conf so no daemon falls back to a system cgroup.conf. slurmd loads
    the cgroup plugin even though no cgroup is used (proctrack/linuxproc, task/none); under
    cgroup v2 it asks systemd over D-Bus for its slurmstepd scope, which a container or a VM
    without systemd cannot answer: ``IgnoreSystemdOnFailure`` then makes the scope in the
    cgroup tree itself rather than failing slurmd's start."""
    return ("# Written by toolkit.localslurm: no cgroup plugin is in use.\n"
            "CgroupPlugin=autodetect\nIgnoreSystemdOnFailure=yes\n")


def render_task_prolog(state_dir: Path) -> str:
    """Run before every task; each ``export NAME=value`` line it prints is set for the task.

    All nodes share one hostname, so Open MPI's shared-memory BTL (vader) names its segments
    alike on both nodes and ranks with a same-numbered local peer on the other node crash
    (seen: segfault in mca_btl_vader with 2 nodes x 2 ranks, under srun --mpi=pmix and mpirun).
    TCP between all ranks avoids it. A user's own settings win.

    `node-env/<node>` in the state directory, when it exists, is printed too: `export` lines
    for that node's tasks only, to make one node of the local cluster differ from the other
    (a node whose tasks get one CPU thread is a slow node for the preflight to find); and
    `node-gpus/<node>`, which `up` writes about the GPUs the node owns, is run, printing the
    task's GPUs (`toolkit.localslurm.gpus.node_gpus_file`).
    """
    return "\n".join(
        [
            "#!/bin/sh",
            "# Written by toolkit.localslurm: per-task environment for the local cluster.",
            '[ -n "$OMPI_MCA_btl" ] || echo "export OMPI_MCA_btl=self,tcp"',
            f'[ -n "$TMPDIR" ] || echo "export TMPDIR={state_dir / "tmp"}/$SLURMD_NODENAME"',
            f'[ ! -r "{state_dir / NODE_ENV_DIR}/$SLURMD_NODENAME" ] || '
            f'cat "{state_dir / NODE_ENV_DIR}/$SLURMD_NODENAME"',
            f'[ ! -r "{state_dir / NODE_GPUS_DIR}/$SLURMD_NODENAME" ] || '
            f'sh "{state_dir / NODE_GPUS_DIR}/$SLURMD_NODENAME"',
            "",
        ]
    )


def parse_sinfo_nodes(text: str) -> dict[str, str]:
    """``sinfo -h -N -o '%N %T'`` output -> ``{node: state}`` (a node in two partitions once)."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1].lower()
    return states


def export_line(conf_path: Path) -> str:
    return f"export SLURM_CONF={conf_path}"
