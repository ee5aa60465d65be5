"""A local Slurm cluster on this one machine, booted by the project itself.

For tests, CI and laptops: ``python -m toolkit.localslurm up`` writes a ``slurm.conf`` of its own,
starts ``munged`` (unless one already answers), ``slurmctld`` and one ``slurmd -N nodeK`` per
"node", and waits until ``sinfo`` shows every node idle. All nodes are this machine: they share
its hostname and address (127.0.0.1) and differ by name and slurmd port, which Debian's Slurm
allows. Everything the cluster writes (config, controller state, slurmd spool, logs, the record of
the pids it started) lives in one state directory, so it never touches a system Slurm and ``down``
stops exactly the daemons that ``up`` started, never others.

Commands: ``up [--nodes 2] [--state-dir DIR] [--cpus-per-node N] [--accounting]``, ``status``,
``down``, ``env``, ``limit --max-submit-jobs N`` (with ``--accounting``: MariaDB + slurmdbd, see
toolkit.localslurm_accounting).
In Python: :func:`start_cluster` returns a :class:`LocalCluster` with ``.env`` and ``.stop()``.

Two things make "several nodes on one host" behave like real nodes for MPI (both in the files
written here, both covered by tests/integration/test_localslurm.py):
- ``TmpFS`` is per node: with one shared /tmp, both slurmstepd of a step made the same PMIx
  directory and ``srun --mpi=pmix`` failed across nodes ("File exists"). With it, both
  ``srun --mpi=pmix`` and ``mpirun`` inside an allocation give one world over all nodes.
- A TaskProlog sets ``OMPI_MCA_btl=self,tcp`` (unless the job set it): Open MPI names its
  shared-memory segments by hostname, which all nodes share, and 2 nodes x 2 ranks crashed.

What lives elsewhere: building and submitting the benchmark jobs (``toolkit.submit``); this module
only provides the scheduler they are submitted to. Needs root to install packages and to run the
daemons (``SlurmUser=root``); ``status`` and ``env`` do not.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

DEFAULT_STATE_DIR = "/tmp/trainbench-slurm"
STATE_DIR_ENV = "TRAINBENCH_SLURM_DIR"
DEFAULT_NODES = 2
#: Away from Slurm's defaults (6817/6818) so a system Slurm on the same machine is never hit.
DEFAULT_PORT_BASE = 17817
DEFAULT_REAL_MEMORY_MIB = 1024
DEFAULT_UP_TIMEOUT_S = 60.0
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
EXIT_NOT_ROOT = 2


class ClusterError(RuntimeError):
    """The local cluster could not be started, queried or stopped; the message says why."""


@dataclasses.dataclass(frozen=True)
class Daemon:
    """One process this module started, identified beyond its pid."""

    name: str
    """``munged``, ``slurmctld`` or ``slurmd-<node>``."""
    pid: int
    start_ticks: int
    """Field 22 of ``/proc/<pid>/stat``: a reused pid has another value, so it is never killed."""
    log_path: str
    """Where its own log (or, for munged, its stdout and stderr) goes."""

    def alive(self) -> bool:
        """True while this very process (not a later one with that pid) runs; zombies are dead."""
        stat = _proc_stat(self.pid)
        return stat is not None and stat[0] != "Z" and stat[1] == self.start_ticks


@dataclasses.dataclass
class LocalCluster:
    """A running (or recorded) local cluster; :meth:`stop` ends it."""

    state_dir: Path
    nodes: list[str]
    cpus_per_node: int
    port_base: int
    daemons: list[Daemon]
    started_at: float
    up_s: float = 0.0
    """Seconds from the first daemon start to all nodes idle."""
    accounting: bool = False
    """MariaDB + slurmdbd run beside it (toolkit.localslurm_accounting)."""
    _children: dict[int, subprocess.Popen[bytes]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The variables a Slurm client needs for this cluster; merge into ``os.environ``."""
        return {"SLURM_CONF": str(self.conf_path)}

    def client_env(self) -> dict[str, str]:
        """A full environment for ``srun``/``sbatch``/``sinfo``: this process's, with no job
        variables of an enclosing allocation, plus :attr:`env`."""
        return client_env(self.conf_path)

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as sinfo reports it (``idle``, ``alloc``, ``down*`` ...)."""
        return node_states(self.conf_path)

    def alive(self) -> list[Daemon]:
        return [d for d in self.daemons if d.alive()]

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        """Cancel the jobs, then stop the recorded daemons: SIGTERM, SIGKILL after timeout_s."""
        stop_cluster(self, timeout_s=timeout_s)

    # -- faults, for reliability tests ----------------------------------------------------------
    def kill_node(self, node: str) -> None:
        """A node goes away: SIGKILL its slurmd (its running job steps stay, as on a node that
        lost its network; the controller marks it DOWN after SlurmdTimeout)."""
        daemon = self._daemon(f"slurmd-{node}")
        _terminate_now(daemon, self._children.get(daemon.pid))

    def start_node(self, node: str, timeout_s: float = DEFAULT_UP_TIMEOUT_S) -> None:
        """Start the slurmd of `node` again and wait until the node is back in service and
        the job steps it ran before it went away have ended (the controller has them killed;
        a step left over would make a requeued job's step of the same id fail to launch)."""
        spool = self.state_dir / "spool" / node
        stale = [p for p in spool.glob(f"{node}_*") if p.is_socket()]
        log_dir = self.state_dir / "log"
        proc = _popen([_exe("slurmd"), "-D", "-N", node, "-f", str(self.conf_path)],
                      log_dir / f"slurmd-{node}.out")
        self.daemons = [d for d in self.daemons if d.name != f"slurmd-{node}"]
        _add(self, f"slurmd-{node}", proc, log_dir / f"slurmd-{node}.log")
        _wait_for(lambda: not self.node_states().get(node, "down").startswith(("down", "unk")),
                  timeout_s, self, f"{node} back in service")
        _wait_for(lambda: not any(p.exists() for p in stale), timeout_s, self,
                  f"the steps {node} ran before it went away to end "
                  f"({', '.join(p.name for p in stale)})")

    def restart_controller(self, down_s: float = 0.0, timeout_s: float = 30.0) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), stay down `down_s` seconds, and start
        it again recovering the saved jobs (no `-c`); returns once it answers and every node
        has registered with it again (until then sbatch refuses: "Requested node configuration
        is not available")."""
        daemon = self._daemon("slurmctld")
        _terminate(daemon, DEFAULT_STOP_TIMEOUT_S, self._children.get(daemon.pid))
        time.sleep(down_s)
        log_dir = self.state_dir / "log"
        proc = _popen([_exe("slurmctld"), "-D", "-f", str(self.conf_path)],
                      log_dir / "slurmctld.out")
        self.daemons = [d for d in self.daemons if d.name != "slurmctld"]
        _add(self, "slurmctld", proc, log_dir / "slurmctld.log")
        _wait_for(lambda: _ctld_answers(self.conf_path), timeout_s, self, "slurmctld to answer")
        _wait_for(lambda: _all_responding(self.node_states(), self.nodes), timeout_s, self,
                  "the nodes to register with the restarted slurmctld")

    def _daemon(self, name: str) -> Daemon:
        found = [d for d in self.daemons if d.name == name and d.alive()]
        if not found:
            raise ClusterError(f"no running {name} in the cluster of {self.state_dir}")
        return found[0]

    def to_json(self) -> dict[str, object]:
        return {
            "state_dir": str(self.state_dir),
            "conf": str(self.conf_path),
            "nodes": self.nodes,
            "cpus_per_node": self.cpus_per_node,
            "port_base": self.port_base,
            "started_at": self.started_at,
            "up_s": self.up_s,
            "accounting": self.accounting,
            "daemons": [dataclasses.asdict(d) for d in self.daemons],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LocalCluster:
        daemons = data["daemons"]
        assert isinstance(daemons, list)
        nodes = data["nodes"]
        assert isinstance(nodes, list)
        return cls(
            state_dir=Path(str(data["state_dir"])),
            nodes=[str(n) for n in nodes],
            cpus_per_node=int(str(data["cpus_per_node"])),
            port_base=int(str(data["port_base"])),
            daemons=[Daemon(**d) for d in daemons],
            started_at=float(str(data["started_at"])),
            up_s=float(str(data.get("up_s", 0.0))),
            accounting=bool(data.get("accounting", False)),
        )


# ---------------------------------------------------------------------------------------------
# Pure builders


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
) -> str:
    """The whole slurm.conf of a local cluster (pure; no file is touched). `slurmd_timeout_s`:
    how long a silent slurmd takes to be marked DOWN (node-failure tests shorten it).
    ``accounting``: lines that replace ``AccountingStorageType=accounting_storage/none``."""
    names = node_names(nodes)
    node_lines = [
        f"NodeName={name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port_base + k} "
        f"CPUs={cpus_per_node} RealMemory={real_memory_mib} State=UNKNOWN"
        for k, name in enumerate(names, start=1)
    ]
    nodelist = f"node[1-{nodes}]" if nodes > 1 else "node1"
    lines = [
        f"# Written by toolkit.localslurm for the cluster in {state_dir}; rewritten on every up.",
        f"ClusterName={CLUSTER_NAME}",
        # The controller checks that its own short hostname is named here.
        f"SlurmctldHost={hostname}(127.0.0.1)",
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
        "PriorityTier=1",
        f"PartitionName={URGENT_PARTITION} Nodes={nodelist} MaxTime=INFINITE State=UP "
        "PriorityTier=2",
        "",
    ]
    return "\n".join(lines)


def render_cgroup_conf() -> str:
    """Kept next to slurm.conf so no daemon falls back to a system cgroup.conf."""
    return "# Written by toolkit.localslurm: no cgroup plugin is in use.\nCgroupPlugin=autodetect\n"


def render_task_prolog(state_dir: Path) -> str:
    """Run before every task; each ``export NAME=value`` line it prints is set for the task.

    All nodes share one hostname, so Open MPI's shared-memory BTL (vader) names its segments
    alike on both nodes and ranks with a same-numbered local peer on the other node crash
    (seen: segfault in mca_btl_vader with 2 nodes x 2 ranks, under srun --mpi=pmix and mpirun).
    TCP between all ranks avoids it. A user's own settings win.
    """
    return "\n".join(
        [
            "#!/bin/sh",
            "# Written by toolkit.localslurm: per-task environment for the local cluster.",
            '[ -n "$OMPI_MCA_btl" ] || echo "export OMPI_MCA_btl=self,tcp"',
            f'[ -n "$TMPDIR" ] || echo "export TMPDIR={state_dir / "tmp"}/$SLURMD_NODENAME"',
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


# ---------------------------------------------------------------------------------------------
# Processes and the machine


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, or None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields resume after the last ")".
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def _which(name: str) -> str | None:
    """Like shutil.which, but also looks in the sbin directories a non-login PATH may lack."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    return shutil.which(name, path=path)


def _exe(name: str) -> str:
    found = _which(name)
    if found is None:
        raise ClusterError(f"{name} not found; install: apt-get install -y {' '.join(PACKAGES)}")
    return found


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def client_env(conf_path: Path) -> dict[str, str]:
    """This process's environment without an enclosing job's SLURM_* variables, plus SLURM_CONF."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf_path)
    return env


def ensure_packages() -> None:
    """Install Slurm, munge and Open MPI with apt-get when any of their programs is missing."""
    missing = [name for name in REQUIRED_EXECUTABLES if _which(name) is None]
    if not missing:
        return
    print(f"localslurm: missing {', '.join(missing)}; installing {' '.join(PACKAGES)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = shutil.which("apt-get")
    if apt is None:
        raise ClusterError(f"missing {', '.join(missing)} and no apt-get to install them")
    subprocess.run([apt, "update"], check=True, env=env)
    subprocess.run([apt, "install", "-y", *PACKAGES], check=True, env=env)
    still = [name for name in REQUIRED_EXECUTABLES if _which(name) is None]
    if still:
        raise ClusterError(f"still missing after apt-get install: {', '.join(still)}")


def munge_answers() -> bool:
    """True when a munged answers on the default socket (``munge -n | unmunge``)."""
    munge, unmunge = _which("munge"), _which("unmunge")
    if munge is None or unmunge is None:
        return False
    cred = subprocess.run([munge, "-n"], capture_output=True, check=False, timeout=10)
    if cred.returncode != 0:
        return False
    check = subprocess.run(
        [unmunge], input=cred.stdout, capture_output=True, check=False, timeout=10
    )
    return check.returncode == 0


def ensure_munge_key() -> None:
    if MUNGE_KEY.exists():
        return
    mungekey, legacy = _which("mungekey"), _which("create-munge-key")
    if mungekey is not None:
        subprocess.run([mungekey, "--create", f"--keyfile={MUNGE_KEY}"], check=True)
    elif legacy is not None:
        subprocess.run([legacy], check=True)
    else:
        raise ClusterError(f"{MUNGE_KEY} is missing; found neither mungekey nor create-munge-key")
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)


def _popen(argv: list[str], log_path: Path, user: str | None = None) -> subprocess.Popen[bytes]:
    """Start a foreground daemon in its own session, so it outlives us and our signals."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
        )


def _record(name: str, proc: subprocess.Popen[bytes], log_path: Path) -> Daemon:
    stat = _proc_stat(proc.pid)
    if stat is None:
        raise ClusterError(f"{name} exited at once (status {proc.poll()}); see {log_path}")
    return Daemon(name=name, pid=proc.pid, start_ticks=stat[1], log_path=str(log_path))


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"  ({path}: no log)"
    return "\n".join("  " + line for line in text.splitlines()[-lines:]) or f"  ({path}: empty)"


def _ports_in_use(ports: Sequence[int]) -> list[int]:
    busy = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    return busy


def free_port_base(nodes: int, start: int = DEFAULT_PORT_BASE, tries: int = 50) -> int:
    """The first of start, start+100, ... whose nodes+1 ports are all free (for test sessions
    that must not collide with a cluster already up on the default ports)."""
    for k in range(tries):
        base = start + 100 * k
        if not _ports_in_use([base + i for i in range(nodes + 1)]):
            return base
    raise ClusterError(f"no free port range for {nodes} nodes from {start} in {tries} tries")


def node_states(conf_path: Path) -> dict[str, str]:
    """``{node: state}`` from sinfo; raises ClusterError when the controller does not answer."""
    sinfo = _exe("sinfo")
    result = subprocess.run(
        [sinfo, "-h", "-N", "-o", "%N %T"],
        capture_output=True,
        text=True,
        env=client_env(conf_path),
        check=False,
        timeout=30,
    )
    if result.returncode != 0:
        raise ClusterError(f"sinfo failed: {result.stderr.strip() or result.stdout.strip()}")
    return parse_sinfo_nodes(result.stdout)


# ---------------------------------------------------------------------------------------------
# Up and down


def state_file(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load_cluster(state_dir: Path) -> LocalCluster | None:
    """The cluster recorded in state_dir, running or not; None when none was ever started."""
    path = state_file(state_dir)
    if not path.exists():
        return None
    return LocalCluster.from_json(json.loads(path.read_text()))


def _save(cluster: LocalCluster) -> None:
    path = state_file(cluster.state_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cluster.to_json(), indent=2) + "\n")
    tmp.replace(path)


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def start_cluster(
    state_dir: Path | str | None = None,
    nodes: int = DEFAULT_NODES,
    cpus_per_node: int | None = None,
    port_base: int = DEFAULT_PORT_BASE,
    timeout_s: float = DEFAULT_UP_TIMEOUT_S,
    install: bool = True,
    slurmd_timeout_s: int = 30,
    accounting: bool = False,
) -> LocalCluster:
    """Boot (or find already running) a local cluster and return it once every node is idle.

    Idempotent: when the daemons recorded in state_dir still run, that cluster is returned
    (a different ``nodes`` is an error: stop it first). Raises ClusterError with the tail of the
    daemon logs when the nodes do not come up within timeout_s. ``accounting``: also MariaDB
    and slurmdbd, limits enforced (toolkit.localslurm_accounting).
    """
    if os.geteuid() != 0:
        raise ClusterError("the local Slurm cluster needs root (SlurmUser=root, apt-get, munged)")
    if nodes < 1:
        raise ClusterError(f"nodes must be >= 1, got {nodes}")
    state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
    state_dir = state_dir.absolute()
    if len(str(state_dir)) > MAX_STATE_DIR_CHARS:
        raise ClusterError(
            f"state dir {state_dir} is longer than {MAX_STATE_DIR_CHARS} characters: slurmd's "
            "step sockets under it would exceed the unix socket path limit"
        )
    existing = load_cluster(state_dir)
    if existing is not None:
        alive = existing.alive()
        if alive and len(alive) == len(existing.daemons):
            if len(existing.nodes) != nodes or existing.accounting != accounting:
                raise ClusterError(
                    f"a cluster of {len(existing.nodes)} nodes (accounting "
                    f"{'on' if existing.accounting else 'off'}) is already up in {state_dir}; "
                    f"run down first to get {nodes} (accounting {'on' if accounting else 'off'})"
                )
            return existing
        if alive:  # half dead: clear it out before starting afresh
            stop_cluster(existing)
    acct_lines: list[str] = []
    if accounting:
        from toolkit import localslurm_accounting as acct
    if install:
        ensure_packages()
        if accounting:
            acct.ensure_packages()
    cpus = cpus_per_node or os.cpu_count() or 1
    names = node_names(nodes)
    ports = [port_base + k for k in range(nodes + 1)]
    if accounting:
        ports += acct.ports(port_base, nodes)
        acct_lines = acct.slurm_conf_lines(acct.ports(port_base, nodes)[0])
    busy = _ports_in_use(ports)
    if busy:
        raise ClusterError(
            f"port(s) {busy} already in use: another Slurm (or another local cluster) is "
            "running; stop it or pass another --port-base"
        )

    for sub in ("ctld", "run", "log", *(f"spool/{n}" for n in names), *(f"tmp/{n}" for n in names)):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    prolog = state_dir / "taskprolog.sh"
    prolog.write_text(render_task_prolog(state_dir))
    prolog.chmod(0o755)
    conf = state_dir / "slurm.conf"
    conf.write_text(render_slurm_conf(state_dir, short_hostname(), nodes, cpus, port_base,
                                      slurmd_timeout_s=slurmd_timeout_s, accounting=acct_lines))
    (state_dir / "cgroup.conf").write_text(render_cgroup_conf())

    cluster = LocalCluster(
        state_dir=state_dir,
        nodes=names,
        cpus_per_node=cpus,
        port_base=port_base,
        daemons=[],
        started_at=time.time(),
        accounting=accounting,
    )
    t0 = time.monotonic()
    try:
        _start_munged(cluster)
        if accounting:
            acct.start(cluster)
        log_dir = state_dir / "log"
        ctld_log = log_dir / "slurmctld.log"
        # -c: start from an empty job/node state, not the previous run's.
        proc = _popen([_exe("slurmctld"), "-D", "-c", "-f", str(conf)], log_dir / "slurmctld.out")
        _add(cluster, "slurmctld", proc, ctld_log)
        _wait_for(lambda: _ctld_answers(conf), 20.0, cluster, "slurmctld to answer")
        for name in names:
            proc = _popen(
                [_exe("slurmd"), "-D", "-N", name, "-f", str(conf)],
                log_dir / f"slurmd-{name}.out",
            )
            _add(cluster, f"slurmd-{name}", proc, log_dir / f"slurmd-{name}.log")
        _wait_for(lambda: _all_idle(conf, names), timeout_s, cluster, f"{nodes} nodes idle")
    except BaseException:
        stop_cluster(cluster)
        raise
    cluster.up_s = time.monotonic() - t0
    _save(cluster)
    return cluster


def _add(cluster: LocalCluster, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    cluster._children[proc.pid] = proc
    cluster.daemons.append(_record(name, proc, log))
    # Saved after every start so a crash half way still leaves the pids for down.
    _save(cluster)


def _start_munged(cluster: LocalCluster) -> None:
    if munge_answers():
        return
    ensure_munge_key()
    MUNGE_RUN_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN_DIR, "munge", "munge")
    log = cluster.state_dir / "log" / "munged.out"
    # -F: foreground, so the pid we record is munged's own.
    proc = _popen([_exe("munged"), "-F"], log, user="munge")
    _add(cluster, "munged", proc, log)
    _wait_for(munge_answers, 15.0, cluster, "munged to answer")


def _ctld_answers(conf: Path) -> bool:
    try:
        node_states(conf)
    except (ClusterError, subprocess.TimeoutExpired):
        return False
    return True


def _all_responding(states: dict[str, str], names: list[str]) -> bool:
    """Every node known, in service and responding (sinfo marks the others `*`, `~`, ...)."""
    return all(states.get(n, "").isalpha()  # no flag: "idle*" is not responding
               and not states[n].startswith(("down", "unk", "drain", "fail")) for n in names)


def _all_idle(conf: Path, names: list[str]) -> bool:
    try:
        states = node_states(conf)
    except (ClusterError, subprocess.TimeoutExpired):
        return False
    return all(states.get(n) == "idle" for n in names)


def _wait_for(
    ready: Callable[[], bool],
    timeout_s: float,
    cluster: LocalCluster,
    what: str,
    poll_s: float = 0.5,
) -> None:
    """Poll ready() until true; fail early if a daemon died, else after timeout_s, with logs."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return
        dead = [d for d in cluster.daemons if not d.alive()]
        if dead or time.monotonic() > deadline:
            reason = (
                f"{', '.join(d.name for d in dead)} exited"
                if dead
                else f"timed out after {timeout_s:.0f} s"
            )
            raise ClusterError(f"waiting for {what}: {reason}\n{_log_tails(cluster)}")
        time.sleep(poll_s)


def _log_tails(cluster: LocalCluster) -> str:
    parts = []
    try:
        parts.append(f"sinfo: {node_states(cluster.conf_path)}")
    except (ClusterError, subprocess.TimeoutExpired) as err:
        parts.append(f"sinfo: {err}")
    for d in cluster.daemons:
        log = Path(d.log_path)
        parts.append(f"--- {d.name} (pid {d.pid}): {log}\n{_tail(log)}")
        out = log.with_suffix(".out")
        if out != log and out.exists() and out.stat().st_size:
            parts.append(f"--- {d.name} stdout/stderr: {out}\n{_tail(out)}")
    return "\n".join(parts)


def _cancel_jobs(cluster: LocalCluster, timeout_s: float) -> None:
    """scancel everything and wait (bounded) for the queue to drain, so no slurmstepd is left."""
    scancel, squeue = _which("scancel"), _which("squeue")
    if scancel is None or squeue is None:
        return
    env = client_env(cluster.conf_path)
    deadline = time.monotonic() + timeout_s
    cancelled = False
    with contextlib.suppress(subprocess.TimeoutExpired):
        while time.monotonic() < deadline:
            # Every user's jobs: scancel --user would miss those of users other than us.
            queue = subprocess.run(
                [squeue, "-h", "-o", "%i"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=10,
            )
            jobs = queue.stdout.split()
            if queue.returncode != 0 or not jobs:
                return
            if not cancelled:
                subprocess.run(
                    [scancel, "--full", *jobs],
                    env=env,
                    capture_output=True,
                    check=False,
                    timeout=10,
                )
                cancelled = True
            time.sleep(0.5)


def stop_cluster(cluster: LocalCluster, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> list[str]:
    """Stop exactly the daemons recorded for cluster; returns the names of those it stopped.

    slurmd first (after cancelling jobs while the controller still answers), then slurmctld,
    then munged if we started it. SIGTERM, then SIGKILL after timeout_s.
    """
    alive = cluster.alive()
    if any(d.name == "slurmctld" for d in alive):
        _cancel_jobs(cluster, timeout_s)
    # slurmdbd after slurmctld (which sends it the last job records), MariaDB after slurmdbd.
    order = {"munged": 4, "mariadb": 3, "slurmdbd": 2, "slurmctld": 1}
    stopped = []
    for daemon in sorted(alive, key=lambda d: order.get(d.name, 0)):
        if daemon.name == "munged":
            others = _other_slurm_daemons({d.pid for d in cluster.daemons})
            if others:
                # Another cluster (started while ours ran) authenticates through this munged.
                print(
                    f"localslurm: leaving munged (pid {daemon.pid}) running for other Slurm "
                    f"daemons (pids {', '.join(map(str, others))})",
                    file=sys.stderr,
                )
                continue
        _terminate(daemon, timeout_s, cluster._children.get(daemon.pid))
        stopped.append(daemon.name)
    for proc in cluster._children.values():  # reap our own children so no zombie is left
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    return stopped


def _other_slurm_daemons(ours: set[int]) -> list[int]:
    """Pids of live slurmctld/slurmd processes that are not in ours."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        stat = _proc_stat(int(entry.name))
        if comm in ("slurmctld", "slurmd", "slurmdbd") and stat is not None and stat[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def _terminate_now(daemon: Daemon, proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL, no chance to save state or say goodbye (a node failing)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(daemon.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while daemon.alive() and time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        time.sleep(0.05)


def _terminate(daemon: Daemon, timeout_s: float, proc: subprocess.Popen[bytes] | None) -> None:
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if not daemon.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon.pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()
            if not daemon.alive():
                return
            time.sleep(0.1)
    if daemon.alive():
        raise ClusterError(f"{daemon.name} (pid {daemon.pid}) survived SIGKILL")


# ---------------------------------------------------------------------------------------------
# CLI


def _cmd_up(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir()).absolute()
    before = load_cluster(state_dir)
    was_up = (
        before is not None and bool(before.daemons) and len(before.alive()) == len(before.daemons)
    )
    # The daemons outlive this process on purpose; Popen would warn when it is collected.
    warnings.filterwarnings(
        "ignore", message=r"subprocess \d+ is still running", category=ResourceWarning
    )
    cluster = start_cluster(
        state_dir,
        nodes=args.nodes,
        cpus_per_node=args.cpus_per_node,
        port_base=args.port_base,
        timeout_s=args.timeout_s,
        accounting=args.accounting,
    )
    if was_up:
        print(f"localslurm: already up in {state_dir} ({', '.join(cluster.nodes)})")
    else:
        print(
            f"localslurm: up in {cluster.up_s:.1f} s: {len(cluster.nodes)} nodes x "
            f"{cluster.cpus_per_node} CPUs, partition {PARTITION}, state in {state_dir}"
            + (", accounting (slurmdbd + MariaDB)" if cluster.accounting else "")
        )
    print(export_line(cluster.conf_path))
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir()).absolute()
    cluster = load_cluster(state_dir)
    if cluster is None:
        print(f"localslurm: down (no cluster recorded in {state_dir})")
        return 1
    alive = cluster.alive()
    for d in cluster.daemons:
        print(f"{d.name:<16} pid {d.pid:<8} {'running' if d in alive else 'stopped'}")
    print(f"SLURM_CONF={cluster.conf_path}")
    if not any(d.name == "slurmctld" for d in alive):
        # sinfo would spend seconds retrying a controller that is not there.
        print("localslurm: down (slurmctld is not running)")
        return 1
    try:
        states = cluster.node_states()
    except (ClusterError, subprocess.TimeoutExpired) as err:
        print(f"localslurm: down ({err})")
        return 1
    for node in cluster.nodes:
        print(f"{node:<16} {states.get(node, 'missing')}")
    if len(alive) != len(cluster.daemons):
        print("localslurm: degraded (some daemons stopped); run down, then up")
        return 1
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir()).absolute()
    cluster = load_cluster(state_dir)
    if cluster is None:
        print(f"localslurm: nothing recorded in {state_dir}; nothing to stop")
        return 0
    stopped = stop_cluster(cluster, timeout_s=args.timeout_s)
    print(f"localslurm: stopped {', '.join(stopped) or 'nothing (already down)'}")
    return 0


def _cmd_limit(args: argparse.Namespace) -> int:
    from toolkit.localslurm_accounting import set_max_submit_jobs

    state_dir = (args.state_dir or default_state_dir()).absolute()
    cluster = load_cluster(state_dir)
    if cluster is None or not cluster.alive():
        print(f"localslurm: no cluster is up in {state_dir}", file=sys.stderr)
        return 1
    limit = None if args.max_submit_jobs < 0 else args.max_submit_jobs
    set_max_submit_jobs(cluster, limit)
    print(f"localslurm: MaxSubmitJobs={'none' if limit is None else limit} for root, enforced")
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    state_dir = (args.state_dir or default_state_dir()).absolute()
    print(export_line(state_dir / "slurm.conf"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m toolkit.localslurm",
        description="A local Slurm cluster (slurmctld + N slurmd) on this machine.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"config, state, logs and pids (default: ${STATE_DIR_ENV} or {DEFAULT_STATE_DIR})",
    )
    up = sub.add_parser("up", parents=[state], help="start the cluster (idempotent)")
    up.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="slurmd nodes (default 2)")
    up.add_argument(
        "--cpus-per-node", type=int, default=None, help="CPUs per node (default: this machine's)"
    )
    up.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"slurmctld port; node K gets port-base+K (default {DEFAULT_PORT_BASE})",
    )
    up.add_argument("--timeout-s", type=float, default=DEFAULT_UP_TIMEOUT_S)
    up.add_argument(
        "--accounting",
        action="store_true",
        help="also MariaDB + slurmdbd, limits enforced (sacct works; set limits with `limit`)",
    )
    limit = sub.add_parser(
        "limit", parents=[state], help="set root's MaxSubmitJobs (a cluster up --accounting)"
    )
    limit.add_argument(
        "--max-submit-jobs", type=int, required=True, help="jobs (array tasks) at once; -1: none"
    )
    sub.add_parser("status", parents=[state], help="daemons and node states; exit 1 if down")
    down = sub.add_parser("down", parents=[state], help="stop the daemons that up started")
    down.add_argument("--timeout-s", type=float, default=DEFAULT_STOP_TIMEOUT_S)
    sub.add_parser("env", parents=[state], help="print the export SLURM_CONF=... line")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("up", "down", "limit") and os.geteuid() != 0:
        print(
            f"localslurm: {args.command} needs root (it installs packages and runs slurmctld, "
            "slurmd and munged as root); run it with sudo",
            file=sys.stderr,
        )
        return EXIT_NOT_ROOT
    commands = {
        "up": _cmd_up,
        "status": _cmd_status,
        "down": _cmd_down,
        "env": _cmd_env,
        "limit": _cmd_limit,
    }
    try:
        return commands[args.command](args)
    except (ClusterError, subprocess.CalledProcessError) as err:
        print(f"localslurm: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    # Run as toolkit.localslurm, not __main__: toolkit.localslurm_accounting imports that module,
    # and a second copy would have its own ClusterError, which main() would not catch.
    from toolkit.localslurm import main as _main

    sys.exit(_main())
