"""The processes of the local cluster: finding executables, installing packages, starting a
daemon and recording it beyond its pid, waiting for a condition with the daemons' logs in the
error, and stopping a daemon (never one this cluster did not start).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from toolkit.localslurm.config import (
    DEFAULT_PORT_BASE,
    MUNGE_KEY,
    PACKAGES,
    REQUIRED_EXECUTABLES,
    ClusterError,
    parse_sinfo_nodes,
)


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
        stat = proc_stat(self.pid)
        return stat is not None and stat[0] != "Z" and stat[1] == self.start_ticks


class ClusterRecord(Protocol):
    """What the helpers here and in `toolkit.localslurm.accounting` need of a local cluster:
    `toolkit.localslurm.daemons.LocalCluster` is one. A protocol, so that those helpers need not
    import the module that imports them."""

    state_dir: Path
    nodes: list[str]
    port_base: int
    accounting: bool
    daemons: list[Daemon]
    _children: dict[int, subprocess.Popen[bytes]]

    @property
    def conf_path(self) -> Path: ...

    def client_env(self) -> dict[str, str]: ...

    def save(self) -> None: ...



def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a pid, or None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields resume after the last ")".
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def which(name: str) -> str | None:
    """Like shutil.which, but also looks in the sbin directories a non-login PATH may lack."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    return shutil.which(name, path=path)


def exe(name: str) -> str:
    found = which(name)
    if found is None:
        raise ClusterError(f"{name} not found; install: apt-get install -y {' '.join(PACKAGES)}")
    return found


SYSTEM_PREFIX = Path("/usr")
"""Where a packaged Slurm lives: its plugins and slurmstepd are where it was compiled to look."""


@dataclasses.dataclass(frozen=True)
class SlurmInstall:
    """Where the Slurm that `slurmd` on PATH belongs to keeps its plugins and slurmstepd, when
    it was unpacked under a prefix rather than installed (``dpkg -x`` of the packages on a
    machine without them): slurm.conf's PluginDir and slurmd's ``-d``. Both None for a
    Slurm under /usr, whose compiled-in paths hold."""

    plugin_dir: str | None = None
    stepd: str | None = None


def slurm_install(slurmd: str | None = None) -> SlurmInstall:
    """The SlurmInstall of `slurmd` (default: the one on PATH), found from the file it links
    to: PREFIX/sbin/slurmd(-wlm) has its plugins in PREFIX/lib/<triplet>/slurm-wlm (Debian's
    layout) or PREFIX/lib{,64}/slurm, and slurmstepd beside it."""
    sbin = Path(slurmd or exe("slurmd")).resolve().parent
    prefix = sbin.parent
    if prefix == SYSTEM_PREFIX:
        return SlurmInstall()
    candidates = [*sorted(prefix.glob("lib/*/slurm-wlm")), prefix / "lib" / "slurm-wlm",
                  prefix / "lib" / "slurm", prefix / "lib64" / "slurm"]
    plugins = next((d for d in candidates if (d / "select_cons_tres.so").is_file()), None)
    if plugins is None:
        raise ClusterError(f"{sbin / 'slurmd'} is under {prefix}, where no Slurm plugins were "
                           f"found (looked in {', '.join(str(c) for c in candidates)})")
    stepd = next((sbin / n for n in ("slurmstepd", "slurmstepd-wlm") if (sbin / n).is_file()),
                 None)
    if stepd is None:
        raise ClusterError(f"no slurmstepd beside {sbin / 'slurmd'}")
    return SlurmInstall(plugin_dir=str(plugins), stepd=str(stepd))


CGROUP_ROOT = Path("/sys/fs/cgroup")
SYSTEMD_BUS = Path("/run/dbus/system_bus_socket")


def ensure_stepd_slice(cgroup_root: Path = CGROUP_ROOT, bus: Path = SYSTEMD_BUS) -> Path | None:
    """Under cgroup v2 with no systemd to ask (a container or a VM without it), slurmd makes
    its slurmstepd scope in `system.slice` itself (cgroup.conf's IgnoreSystemdOnFailure) but
    not the slice: make it, empty, as systemd would have. The slice made, or None where
    nothing was needed (cgroup v1, systemd answers, the slice exists)."""
    if not (cgroup_root / "cgroup.controllers").is_file() or bus.exists():
        return None
    slice_dir = cgroup_root / "system.slice"
    if slice_dir.is_dir():
        return None
    slice_dir.mkdir()
    return slice_dir


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def client_env(conf_path: Path) -> dict[str, str]:
    """This process's environment without an enclosing job's SLURM_* variables, plus SLURM_CONF."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf_path)
    return env


def ensure_packages() -> None:
    """Install Slurm, munge and Open MPI with apt-get when any of their programs is missing."""
    missing = [name for name in REQUIRED_EXECUTABLES if which(name) is None]
    if not missing:
        return
    print(f"localslurm: missing {', '.join(missing)}; installing {' '.join(PACKAGES)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = shutil.which("apt-get")
    if apt is None:
        raise ClusterError(f"missing {', '.join(missing)} and no apt-get to install them")
    subprocess.run([apt, "update"], check=True, env=env)
    subprocess.run([apt, "install", "-y", *PACKAGES], check=True, env=env)
    still = [name for name in REQUIRED_EXECUTABLES if which(name) is None]
    if still:
        raise ClusterError(f"still missing after apt-get install: {', '.join(still)}")


def munge_answers() -> bool:
    """True when a munged answers on the default socket (``munge -n | unmunge``)."""
    munge, unmunge = which("munge"), which("unmunge")
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
    mungekey, legacy = which("mungekey"), which("create-munge-key")
    if mungekey is not None:
        subprocess.run([mungekey, "--create", f"--keyfile={MUNGE_KEY}"], check=True)
    elif legacy is not None:
        subprocess.run([legacy], check=True)
    else:
        raise ClusterError(f"{MUNGE_KEY} is missing; found neither mungekey nor create-munge-key")
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)


def popen(argv: list[str], log_path: Path, user: str | None = None) -> subprocess.Popen[bytes]:
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


def record(name: str, proc: subprocess.Popen[bytes], log_path: Path) -> Daemon:
    stat = proc_stat(proc.pid)
    if stat is None:
        raise ClusterError(f"{name} exited at once (status {proc.poll()}); see {log_path}")
    return Daemon(name=name, pid=proc.pid, start_ticks=stat[1], log_path=str(log_path))


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"  ({path}: no log)"
    return "\n".join("  " + line for line in text.splitlines()[-lines:]) or f"  ({path}: empty)"


def ports_in_use(ports: Sequence[int]) -> list[int]:
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
        if not ports_in_use([base + i for i in range(nodes + 1)]):
            return base
    raise ClusterError(f"no free port range for {nodes} nodes from {start} in {tries} tries")


def node_states(conf_path: Path) -> dict[str, str]:
    """``{node: state}`` from sinfo; raises ClusterError when the controller does not answer."""
    sinfo = exe("sinfo")
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


def add_daemon(cluster: ClusterRecord, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    cluster._children[proc.pid] = proc
    cluster.daemons.append(record(name, proc, log))
    # Saved after every start so a crash half way still leaves the pids for down.
    cluster.save()


def controller_answers(conf: Path) -> bool:
    try:
        node_states(conf)
    except (ClusterError, subprocess.TimeoutExpired):
        return False
    return True


def all_responding(states: dict[str, str], names: list[str]) -> bool:
    """Every node known, in service and responding (sinfo marks the others `*`, `~`, ...)."""
    return all(states.get(n, "").isalpha()  # no flag: "idle*" is not responding
               and not states[n].startswith(("down", "unk", "drain", "fail")) for n in names)


def all_idle(conf: Path, names: list[str]) -> bool:
    try:
        states = node_states(conf)
    except (ClusterError, subprocess.TimeoutExpired):
        return False
    return all(states.get(n) == "idle" for n in names)


def wait_for(
    ready: Callable[[], bool],
    timeout_s: float,
    cluster: ClusterRecord,
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
            raise ClusterError(f"waiting for {what}: {reason}\n{log_tails(cluster)}")
        time.sleep(poll_s)


def log_tails(cluster: ClusterRecord) -> str:
    parts = []
    try:
        parts.append(f"sinfo: {node_states(cluster.conf_path)}")
    except (ClusterError, subprocess.TimeoutExpired) as err:
        parts.append(f"sinfo: {err}")
    for d in cluster.daemons:
        log = Path(d.log_path)
        parts.append(f"--- {d.name} (pid {d.pid}): {log}\n{tail(log)}")
        out = log.with_suffix(".out")
        if out != log and out.exists() and out.stat().st_size:
            parts.append(f"--- {d.name} stdout/stderr: {out}\n{tail(out)}")
    return "\n".join(parts)


def terminate_now(daemon: Daemon, proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL, no chance to save state or say goodbye (a node failing)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(daemon.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while daemon.alive() and time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        time.sleep(0.05)


def terminate(daemon: Daemon, timeout_s: float, proc: subprocess.Popen[bytes] | None) -> None:
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


def other_slurm_daemons(ours: set[int]) -> list[int]:
    """Pids of live slurmctld/slurmd processes that are not in ours."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        stat = proc_stat(int(entry.name))
        if comm in ("slurmctld", "slurmd", "slurmdbd") and stat is not None and stat[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)
