"""A local Slurm cluster on this one machine, booted by the project itself.

For tests, CI and laptops: ``python -m toolkit.localslurm up`` writes a ``slurm.conf`` of its own,
starts ``munged`` (unless one already answers), ``slurmctld`` and one ``slurmd -N nodeK`` per
"node", and waits until ``sinfo`` shows every node idle. Where the kernel allows network
namespaces, each node's slurmd (and so every task it starts) runs in a namespace of its own,
with its own address on a bridge and its own hostname, so what one node sends another crosses a
link that ``--throttle`` can slow (toolkit.localslurm.network); elsewhere all nodes share this
machine's hostname and 127.0.0.1 and differ by name and slurmd port, which Debian's Slurm
allows. Everything the cluster writes (config, controller state, slurmd spool, logs, the record of
the pids it started) lives in one state directory, so it never touches a system Slurm and ``down``
stops exactly the daemons that ``up`` started, never others.

Commands: ``up [--nodes 2] [--state-dir DIR] [--cpus-per-node N] [--accounting]
[--network auto|namespaces|loopback] [--throttle NODE=RATE|NODE-NODE=RATE ...]
[--gpus-per-node G [--share-gpus]]`` (toolkit.localslurm.gpus), ``status``,
``down``, ``env``, ``limit --max-submit-jobs N`` (with ``--accounting``: MariaDB + slurmdbd, see
toolkit.localslurm.accounting).
In Python: :func:`start_cluster` returns a :class:`LocalCluster` with ``.env`` and ``.stop()``.

Two things make "several nodes on one host" behave like real nodes for MPI (both in the files
written here, both covered by tests/integration/test_localslurm.py):
- ``TmpFS`` is per node: with one shared /tmp, both slurmstepd of a step made the same PMIx
  directory and ``srun --mpi=pmix`` failed across nodes ("File exists"). With it, both
  ``srun --mpi=pmix`` and ``mpirun`` inside an allocation give one world over all nodes.
- A TaskProlog sets ``OMPI_MCA_btl=self,tcp`` (unless the job set it): Open MPI names its
  shared-memory segments by hostname, which loopback nodes share, and 2 nodes x 2 ranks
  crashed. Namespaced nodes have hostnames of their own but still share /dev/shm.

What lives elsewhere: building and submitting the benchmark jobs (``toolkit.submit``); this module
only provides the scheduler they are submitted to. Needs root to install packages and to run the
daemons (``SlurmUser=root``); ``status`` and ``env`` do not.
"""


from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from toolkit.localslurm import gpus as gpu
from toolkit.localslurm import network as net
from toolkit.localslurm import statedir
from toolkit.localslurm.config import (
    DEFAULT_NODES,
    DEFAULT_PORT_BASE,
    DEFAULT_STOP_TIMEOUT_S,
    DEFAULT_UP_TIMEOUT_S,
    HOSTS_FILE,
    MAX_NODES,
    MAX_STATE_DIR_CHARS,
    MIN_PORT_BASE,
    MUNGE_RUN_DIR,
    NETWORK_MODES,
    NODE_GPUS_DIR,
    RESOLV_FILE,
    STALE_STEPS_GRACE_S,
    STATE_FILE,
    ClusterError,
    node_names,
    render_cgroup_conf,
    render_mpi_conf,
    render_slurm_conf,
    render_task_prolog,
)
from toolkit.localslurm.processes import (
    Daemon,
    add_daemon,
    all_idle,
    all_responding,
    client_env,
    controller_answers,
    ensure_munge_key,
    ensure_packages,
    ensure_stepd_slice,
    exe,
    munge_answers,
    node_states,
    other_slurm_daemons,
    popen,
    ports_in_use,
    short_hostname,
    slurm_install,
    terminate,
    terminate_now,
    wait_for,
    which,
)


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
    """MariaDB + slurmdbd run beside it (toolkit.localslurm.accounting)."""
    shared_nodes: bool = False
    """Jobs may share a node; by default one job per node at a time (`render_slurm_conf`)."""
    network: net.Network | None = None
    """Each node in a network namespace of its own (`toolkit.localslurm.network`); None: every
    node is this host at 127.0.0.1."""
    gpus: gpu.GpuPlan | None = None
    """The GPUs each node owns (`toolkit.localslurm.gpus`); None: the nodes own none."""
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
        terminate_now(daemon, self._children.get(daemon.pid))

    def start_node(self, node: str, timeout_s: float = DEFAULT_UP_TIMEOUT_S) -> None:
        """Start the slurmd of `node` again and wait until the node is back in service and
        the job steps it ran before it went away have ended (the controller has them killed;
        a step left over would make a requeued job's step of the same id fail to launch)."""
        spool = self.state_dir / "spool" / node
        stale = [p for p in spool.glob(f"{node}_*") if p.is_socket()]
        # Steps the node ran before it went away may still be ending (their processes outlive a
        # killed slurmd). A slurmd that registers while one runs leaves the controller a record
        # of that step under the requeued job, whose new steps then wait for ever ("Requested
        # nodes are busy"): give them a while to end first.
        deadline = time.monotonic() + STALE_STEPS_GRACE_S
        while any(p.exists() for p in stale) and time.monotonic() < deadline:
            time.sleep(0.2)
        log_dir = self.state_dir / "log"
        proc = popen(self.slurmd_argv(node), log_dir / f"slurmd-{node}.out")
        self.daemons = [d for d in self.daemons if d.name != f"slurmd-{node}"]
        add_daemon(self, f"slurmd-{node}", proc, log_dir / f"slurmd-{node}.log")
        wait_for(lambda: not self.node_states().get(node, "down").startswith(("down", "unk")),
                  timeout_s, self, f"{node} back in service")
        wait_for(lambda: not any(p.exists() for p in stale), timeout_s, self,
                  f"the steps {node} ran before it went away to end "
                  f"({', '.join(p.name for p in stale)})")

    def restart_controller(self, down_s: float = 0.0, timeout_s: float = 30.0) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), stay down `down_s` seconds, and start
        it again recovering the saved jobs (no `-c`); returns once it answers and every node
        has registered with it again (until then sbatch refuses: "Requested node configuration
        is not available")."""
        daemon = self._daemon("slurmctld")
        terminate(daemon, DEFAULT_STOP_TIMEOUT_S, self._children.get(daemon.pid))
        time.sleep(down_s)
        log_dir = self.state_dir / "log"
        proc = popen([exe("slurmctld"), "-D", "-f", str(self.conf_path)],
                      log_dir / "slurmctld.out")
        self.daemons = [d for d in self.daemons if d.name != "slurmctld"]
        add_daemon(self, "slurmctld", proc, log_dir / "slurmctld.log")
        wait_for(lambda: controller_answers(self.conf_path), timeout_s, self, "slurmctld to answer")
        wait_for(lambda: all_responding(self.node_states(), self.nodes), timeout_s, self,
                  "the nodes to register with the restarted slurmctld")

    def slurmd_argv(self, node: str) -> list[str]:
        """How `node`'s slurmd starts: in the node's namespace and under its hostname when the
        cluster has a network of its own."""
        slurmd = exe("slurmd")
        argv = [slurmd, "-D", "-N", node, "-f", str(self.conf_path)]
        stepd = slurm_install(slurmd).stepd
        if stepd is not None:
            argv += ["-d", stepd]
        if self.network is None:
            return argv
        return net.in_namespace(self.network.node(node), self.state_dir / HOSTS_FILE, argv,
                                self.state_dir / RESOLV_FILE)

    def set_throttles(self, throttles: list[net.Throttle]) -> None:
        """Replace the network's throttles on the running cluster (none: every link at full
        speed) and record them. When tc refuses the new rules, the old ones are put back and
        ClusterError says so; the record is always what is in place."""
        if self.network is None:
            if throttles:
                raise ClusterError("throttles need nodes on their own network; this cluster's "
                                   "nodes share 127.0.0.1")
            return
        old = self.network
        new = dataclasses.replace(old, throttles=tuple(throttles))
        for argv in net.clear_throttle_commands(old):
            net.run(argv, check=False)
        try:
            net.apply_throttles(new)
        except ClusterError as refused:
            for argv in net.clear_throttle_commands(new):
                net.run(argv, check=False)
            try:
                net.apply_throttles(old)
            except ClusterError as err:
                for argv in net.clear_throttle_commands(old):
                    net.run(argv, check=False)
                self.network = dataclasses.replace(old, throttles=())
                self.save()
                raise ClusterError(f"the new throttles were refused ({refused}), and so were "
                                   f"the old ones put back ({err}): every link now runs at "
                                   "full speed") from None
            raise ClusterError(f"the new throttles were refused, the old ones are in place "
                               f"again: {refused}") from None
        self.network = new
        self.save()

    def _daemon(self, name: str) -> Daemon:
        found = [d for d in self.daemons if d.name == name and d.alive()]
        if not found:
            raise ClusterError(f"no running {name} in the cluster of {self.state_dir}")
        return found[0]

    def save(self) -> None:
        """Record the cluster in its state directory (what `status` and `down` read)."""
        statedir.write_file(self.state_dir, STATE_FILE,
                            json.dumps(self.to_json(), indent=2) + "\n")

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
            "shared_nodes": self.shared_nodes,
            "daemons": [dataclasses.asdict(d) for d in self.daemons],
            "network": None if self.network is None else self.network.to_json(),
            "gpus": None if self.gpus is None else self.gpus.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LocalCluster:
        daemons = data["daemons"]
        assert isinstance(daemons, list)
        nodes = data["nodes"]
        assert isinstance(nodes, list)
        network = data.get("network")
        gpus = data.get("gpus")
        return cls(
            state_dir=Path(str(data["state_dir"])),
            nodes=[str(n) for n in nodes],
            cpus_per_node=int(str(data["cpus_per_node"])),
            port_base=int(str(data["port_base"])),
            daemons=[Daemon(**d) for d in daemons],
            started_at=float(str(data["started_at"])),
            up_s=float(str(data.get("up_s", 0.0))),
            accounting=bool(data.get("accounting", False)),
            # a cluster recorded before nodes were exclusive let jobs share them
            shared_nodes=bool(data.get("shared_nodes", True)),
            network=net.Network.from_json(network) if isinstance(network, dict) else None,
            gpus=gpu.GpuPlan.from_json(gpus) if isinstance(gpus, dict) else None,
        )


def state_file(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def load_cluster(state_dir: Path) -> LocalCluster | None:
    """The cluster recorded in state_dir, running or not; None when none was ever started.
    statedir.UnsafeStateDir when the directory or the record could have been written by
    someone other than this process's user or root (`toolkit.localslurm.statedir`)."""
    if not os.path.lexists(state_dir):
        return None
    statedir.check_state_dir(state_dir)
    text = statedir.read_record(state_file(state_dir))
    if text is None:
        return None
    try:
        cluster = LocalCluster.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AssertionError) as err:
        raise ClusterError(f"{state_file(state_dir)} is not a cluster record: {err}") from None
    if os.path.abspath(cluster.state_dir) != os.path.abspath(state_dir):
        raise ClusterError(f"{state_file(state_dir)} records the cluster of "
                           f"{cluster.state_dir}, not of {state_dir}")
    return cluster


default_state_dir = statedir.default_state_dir


def start_cluster(
    state_dir: Path | str | None = None,
    nodes: int = DEFAULT_NODES,
    cpus_per_node: int | None = None,
    port_base: int = DEFAULT_PORT_BASE,
    timeout_s: float = DEFAULT_UP_TIMEOUT_S,
    install: bool = True,
    slurmd_timeout_s: int = 30,
    accounting: bool = False,
    shared_nodes: bool = False,
    network: str = "auto",
    throttles: Sequence[str] = (),
    gpus_per_node: int = 0,
    share_gpus: bool = False,
    machine_gpus: Sequence[gpu.MachineGpu] | None = None,
) -> LocalCluster:
    """Boot (or find already running) a local cluster and return it once every node is idle.

    Idempotent: when the daemons recorded in state_dir still run, that cluster is returned
    (a different ``nodes`` is an error: stop it first; other ``throttles`` re-shape its links
    in place). Raises ClusterError with the tail of the daemon logs when the nodes do not come
    up within timeout_s. ``accounting``: also MariaDB and slurmdbd, limits enforced
    (toolkit.localslurm.accounting). ``shared_nodes``: let jobs share a node (default: one job
    per node at a time). ``network``: ``namespaces`` puts every node in a network namespace of
    its own (`toolkit.localslurm.network`), ``loopback`` keeps every node at 127.0.0.1,
    ``auto`` (default) takes namespaces where the kernel allows them and says in one line on
    stderr when it does not. ``throttles``: ``NODE=RATE`` or ``NODE-NODE=RATE`` (tc's rates).
    ``gpus_per_node``: the GPUs each node owns, as Slurm GRES (`toolkit.localslurm.gpus`),
    more than the machine has only with ``share_gpus``; ``machine_gpus``: the machine's GPUs
    (default: asked of NVML or nvidia-smi).
    """
    if os.geteuid() != 0:
        raise ClusterError("the local Slurm cluster needs root (SlurmUser=root, apt-get, munged)")
    if not 1 <= nodes <= MAX_NODES:
        raise ClusterError(f"nodes must be 1 to {MAX_NODES} (the addresses of one /24 "
                           f"network), got {nodes}")
    last_port = port_base + nodes + (2 if accounting else 0)  # slurmdbd, MariaDB
    if port_base < MIN_PORT_BASE or last_port > 65535:
        raise ClusterError(f"port base {port_base}: the cluster takes ports {port_base} to "
                           f"{last_port}, which must lie within {MIN_PORT_BASE}..65535")
    if network not in NETWORK_MODES:
        raise ClusterError(f"network must be one of {', '.join(NETWORK_MODES)}, got {network!r}")
    names = node_names(nodes)
    try:
        wanted = net.parse_throttles(throttles, names)
    except ValueError as err:
        raise ClusterError(str(err)) from None
    if wanted and network == "loopback":
        raise ClusterError("--throttle needs nodes on their own network (not --network loopback)")
    gpu_plan = _plan_gpus(names, gpus_per_node, share_gpus, machine_gpus)
    if gpu_plan is not None and gpu_plan.shared and network == "loopback":
        raise ClusterError(f"--share-gpus needs nodes on their own network (not --network "
                           f"loopback): {SHARED_GPUS_NEED}")
    state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
    state_dir = state_dir.absolute()
    if len(str(state_dir)) > MAX_STATE_DIR_CHARS:
        raise ClusterError(
            f"state dir {state_dir} is longer than {MAX_STATE_DIR_CHARS} characters: slurmd's "
            "step sockets under it would exceed the unix socket path limit"
        )
    statedir.make_state_dir(state_dir)
    with statedir.up_lock(state_dir):
        return _start_cluster(state_dir, names, cpus_per_node, port_base, timeout_s, install,
                              slurmd_timeout_s, accounting, shared_nodes, network, wanted,
                              gpu_plan)


def _start_cluster(state_dir: Path, names: list[str], cpus_per_node: int | None,
                   port_base: int, timeout_s: float, install: bool, slurmd_timeout_s: int,
                   accounting: bool, shared_nodes: bool, network: str,
                   wanted: list[net.Throttle], gpu_plan: gpu.GpuPlan | None) -> LocalCluster:
    nodes = len(names)
    existing = load_cluster(state_dir)
    if existing is not None:
        alive = existing.alive()
        if alive and len(alive) == len(existing.daemons):
            if len(existing.nodes) != nodes or existing.accounting != accounting or \
                    existing.shared_nodes != shared_nodes:
                raise ClusterError(
                    f"a cluster of {len(existing.nodes)} nodes (accounting "
                    f"{'on' if existing.accounting else 'off'}, "
                    f"{_sharing(existing.shared_nodes)}) is already up in {state_dir}; run down "
                    f"first to get {nodes} (accounting {'on' if accounting else 'off'}, "
                    f"{_sharing(shared_nodes)})"
                )
            if existing.gpus != gpu_plan:
                raise ClusterError(f"the cluster up in {state_dir} has other GPUs "
                                   f"({_gpu_words(existing.gpus)}); run down first to get "
                                   f"{_gpu_words(gpu_plan)}")
            if network == "namespaces" and existing.network is None:
                raise ClusterError(f"the cluster up in {state_dir} has its nodes at 127.0.0.1; "
                                   "run down first to get nodes on their own network")
            if existing.network is not None and \
                    list(existing.network.throttles) != wanted:
                existing.set_throttles(wanted)
            elif existing.network is None and wanted:
                raise ClusterError(f"the cluster up in {state_dir} has its nodes at 127.0.0.1, "
                                   "where no link can be throttled; run down, then up")
            return existing
        if alive:  # half dead: clear it out before starting afresh
            stop_cluster(existing)
        elif existing.network is not None:  # its daemons are gone; its network may not be
            _remove_network(existing, DEFAULT_STOP_TIMEOUT_S)
    acct_lines: list[str] = []
    if accounting:
        from toolkit.localslurm import accounting as acct
    if install:
        ensure_packages()
        if accounting:
            acct.ensure_packages()
    cpus = cpus_per_node or os.cpu_count() or 1
    network_plan: net.Network | None = None
    refused = None if network == "loopback" else net.namespaces_work(f"tb{port_base}-probe")
    if gpu_plan is not None and gpu_plan.shared and refused is not None:
        raise ClusterError(f"--share-gpus needs nodes on their own network, and this machine "
                           f"makes no network namespace ({refused}): {SHARED_GPUS_NEED}")
    if net.use_namespaces(network, refused, bool(wanted)):
        network_plan = net.plan_network(port_base, names, net.free_subnet(net.used_networks()),
                                        wanted, mark=net.new_mark(state_dir))
    elif refused is not None:
        print(f"localslurm: no network namespaces here ({refused}); the nodes share 127.0.0.1",
              file=sys.stderr)
    ports = [port_base + k for k in range(nodes + 1)]
    if accounting:
        ports += acct.ports(port_base, nodes)
        acct_lines = acct.slurm_conf_lines(acct.ports(port_base, nodes)[0])
    busy = ports_in_use(ports)
    if busy:
        raise ClusterError(
            f"port(s) {busy} already in use: another Slurm (or another local cluster) is "
            "running; stop it or pass another --port-base"
        )

    for sub in ("ctld", "run", "log", *(f"spool/{n}" for n in names), *(f"tmp/{n}" for n in names)):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    _write_gpu_files(state_dir, gpu_plan)
    statedir.write_file(state_dir, "taskprolog.sh", render_task_prolog(state_dir), mode=0o755)
    conf = statedir.write_file(state_dir, "slurm.conf", render_slurm_conf(
        state_dir, short_hostname(), nodes, cpus, port_base,
        slurmd_timeout_s=slurmd_timeout_s, accounting=acct_lines, shared_nodes=shared_nodes,
        node_addrs=None if network_plan is None else [n.address for n in network_plan.nodes],
        controller_addr="127.0.0.1" if network_plan is None else network_plan.gateway,
        plugin_dir=slurm_install().plugin_dir,
        gres_per_node=0 if gpu_plan is None else gpu_plan.gpus_per_node))
    statedir.write_file(state_dir, "cgroup.conf", render_cgroup_conf())
    statedir.write_file(state_dir, "mpi.conf", render_mpi_conf())

    cluster = LocalCluster(
        state_dir=state_dir,
        nodes=names,
        cpus_per_node=cpus,
        port_base=port_base,
        daemons=[],
        started_at=time.time(),
        accounting=accounting,
        shared_nodes=shared_nodes,
        network=network_plan,
        gpus=gpu_plan,
    )
    t0 = time.monotonic()
    try:
        if network_plan is not None:
            cluster.save()  # recorded before it is made, so down can always remove it
            statedir.write_file(state_dir, HOSTS_FILE,
                                net.hosts_file(network_plan, short_hostname()))
            statedir.write_file(state_dir, RESOLV_FILE, net.RESOLV_CONF)
            net.create(network_plan)
        _start_munged(cluster)
        made = ensure_stepd_slice()
        if made is not None:
            print(f"localslurm: cgroup v2 without systemd: made {made} for slurmd's scopes",
                  flush=True)
        if accounting:
            acct.start(cluster)
        log_dir = state_dir / "log"
        ctld_log = log_dir / "slurmctld.log"
        # -c: start from an empty job/node state, not the previous run's.
        proc = popen([exe("slurmctld"), "-D", "-c", "-f", str(conf)], log_dir / "slurmctld.out")
        add_daemon(cluster, "slurmctld", proc, ctld_log)
        wait_for(lambda: controller_answers(conf), 20.0, cluster, "slurmctld to answer")
        for name in names:
            proc = popen(cluster.slurmd_argv(name), log_dir / f"slurmd-{name}.out")
            add_daemon(cluster, f"slurmd-{name}", proc, log_dir / f"slurmd-{name}.log")
        wait_for(lambda: all_idle(conf, names), timeout_s, cluster, f"{nodes} nodes idle")
    except BaseException:
        stop_cluster(cluster)
        raise
    cluster.up_s = time.monotonic() - t0
    cluster.save()
    return cluster


SHARED_GPUS_NEED = ("NCCL refuses two ranks of one host name on one GPU ('Duplicate GPU "
                    "detected'), and loopback nodes all have this machine's name")


def _plan_gpus(names: list[str], gpus_per_node: int, share: bool,
               machine: Sequence[gpu.MachineGpu] | None) -> gpu.GpuPlan | None:
    """The GPUs each node owns; the machine is asked only when GPUs are."""
    why = ""
    if machine is None:
        machine = []
        if gpus_per_node > 0:
            try:
                machine = gpu.read_machine_gpus()
            except (gpu.NoGpus, ValueError) as err:
                why = str(err)
    return gpu.plan_gpus(names, gpus_per_node, machine, share, why_none=why)


def _write_gpu_files(state_dir: Path, plan: gpu.GpuPlan | None) -> None:
    """gres.conf beside slurm.conf, and each node's `node-gpus/<node>` for its TaskProlog (a
    node's file of an earlier cluster emptied)."""
    statedir.write_file(state_dir, gpu.GRES_CONF, gpu.render_gres_conf(plan))
    folder = state_dir / NODE_GPUS_DIR
    if folder.is_symlink():  # its files are removed below: never through a link
        raise ClusterError(f"{folder} is a symbolic link; remove it, then up again")
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for node in plan.nodes if plan is not None else ():
        text = gpu.node_gpus_file(node)
        if text:
            statedir.write_file(state_dir, f"{NODE_GPUS_DIR}/{node.node}", text)


def _gpu_words(plan: gpu.GpuPlan | None) -> str:
    if plan is None:
        return "no GPUs"
    return (f"{plan.gpus_per_node} GPU(s) a node"
            + (", shared" if plan.shared else ""))


def _sharing(shared_nodes: bool) -> str:
    return "jobs share nodes" if shared_nodes else "one job per node"


def _start_munged(cluster: LocalCluster) -> None:
    if munge_answers():
        return
    ensure_munge_key()
    MUNGE_RUN_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN_DIR, "munge", "munge")
    log = cluster.state_dir / "log" / "munged.out"
    # -F: foreground, so the pid we record is munged's own.
    proc = popen([exe("munged"), "-F"], log, user="munge")
    add_daemon(cluster, "munged", proc, log)
    wait_for(munge_answers, 15.0, cluster, "munged to answer")


def _cancel_jobs(cluster: LocalCluster, timeout_s: float) -> None:
    """scancel everything and wait (bounded) for the queue to drain, so no slurmstepd is left."""
    scancel, squeue = which("scancel"), which("squeue")
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
            others = other_slurm_daemons({d.pid for d in cluster.daemons})
            if others:
                # Another cluster (started while ours ran) authenticates through this munged.
                print(
                    f"localslurm: leaving munged (pid {daemon.pid}) running for other Slurm "
                    f"daemons (pids {', '.join(map(str, others))})",
                    file=sys.stderr,
                )
                continue
        terminate(daemon, timeout_s, cluster._children.get(daemon.pid))
        stopped.append(daemon.name)
    for proc in cluster._children.values():  # reap our own children so no zombie is left
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    if cluster.network is not None:
        network = cluster.network
        gone = _remove_network(cluster, timeout_s)
        if gone:
            stopped.append(f"the network it made ({network_words(network, gone)})")
    return stopped


def network_words(network: net.Network, gone: Sequence[str]) -> str:
    """`2 namespaces, 2 links, the bridge`: what of `network` the names `gone` are."""
    spaces = {n.namespace for n in network.nodes}
    links = {n.host_interface for n in network.nodes}
    counts = [(sum(g in spaces for g in gone), "namespace"), (sum(g in links for g in gone),
                                                              "link")]
    words = [f"{k} {what}{'s' if k != 1 else ''}" for k, what in counts if k]
    return ", ".join(words + (["the bridge"] if network.bridge in gone else []))


def _remove_network(cluster: LocalCluster, timeout_s: float) -> list[str]:
    """End what runs in the cluster's namespaces and remove its network: only the pieces that
    carry the record's mark (another cluster on the same port base has the same names). Once
    none is left, the record no longer names a network."""
    network = cluster.network
    assert network is not None
    if not network.mark:
        print(f"localslurm: leaving the network the record names ({network.bridge} and its "
              "namespaces) alone: it was recorded without a mark that tells this cluster's "
              "from another's; remove it with ip if it is this cluster's", file=sys.stderr)
        return []
    _end_node_processes(network, timeout_s)
    gone = net.remove(network)
    if not net.marked(network):
        cluster.network = None
        if os.path.lexists(state_file(cluster.state_dir)):
            cluster.save()
    return gone


def _end_node_processes(network: net.Network, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL, what still runs in the nodes' namespaces that carry the record's
    mark: only job steps that this cluster's slurmd started can be there."""
    ours = [n for n in network.nodes if n.namespace in net.marked(network)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p for n in ours for p in net.node_pids(n)]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(net.node_pids(n) for n in ours):
            time.sleep(0.1)
