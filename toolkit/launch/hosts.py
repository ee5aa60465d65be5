"""The hosts executor: runs each (case, repeat) across named hosts, without Slurm, as
`mpirun --host h1:k,h2:k -np N ...` from this machine, Open MPI starting its daemons on the
other hosts through its ssh launcher (the user's `ssh`, or whatever `OMPI_MCA_plm_rsh_agent`
names: after `eval "$(python -m toolkit.localslurm env)"` the local cluster's agent, which
enters a namespaced node).

    python -m toolkit.submit --grid g.yaml --hosts node1:2,node2:2
    python -m toolkit.submit --grid g.yaml --hostfile hosts.txt

A case of `num_nodes` N runs on the first N hosts, `gpus_per_node` ranks on each. The results
directory must be the same path on every host (a shared file system, as on a cluster). Every
host a grid needs is asked first (`ssh HOST true`, `BatchMode`, a time limit): one that does not
answer stops the submit before anything is written, naming it. The rest is the local
executor's: runs one after another, waited for, recorded as they end.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.launch.launcher import mpirun_argv
from toolkit.launch.local import LocalExecutor
from toolkit.launch.python_env import python_env
from toolkit.spec import Case

RSH_AGENT_VARIABLE = "OMPI_MCA_plm_rsh_agent"
"""Open MPI's launcher for other hosts (`ssh : rsh` by default); this executor asks hosts with
it too. The local cluster's agent (`toolkit.localslurm.agent`) is named by the same
variable."""
REACH_TIMEOUT_S = 20.0
"""Longest wait for one host to answer `true`."""
MAX_HOSTS = 4096
_HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
_SLOTS_RE = re.compile(r"[1-9][0-9]{0,5}")


class HostsError(ValueError):
    """A host list or host file that cannot be used; the message names where and what."""


@dataclass(frozen=True)
class Host:
    name: str
    slots: int | None = None
    """Ranks the host may run; None: as many as a case asks."""

    def __str__(self) -> str:
        return self.name if self.slots is None else f"{self.name}:{self.slots}"


def _host(word: str, where: str) -> Host:
    name, sep, slots = word.partition(":")
    if not _HOST_RE.fullmatch(name):
        raise HostsError(f"{where}: {word!r}: expected a host name (letters, digits, '.' and "
                         "'-', not starting with '-'), optionally with :SLOTS")
    if sep and not _SLOTS_RE.fullmatch(slots):
        raise HostsError(f"{where}: {word!r}: expected HOST:SLOTS with SLOTS a whole number "
                         "from 1")
    return Host(name, int(slots) if sep else None)


def _checked(hosts: list[Host], where: str) -> list[Host]:
    if not hosts:
        raise HostsError(f"{where}: no host given")
    if len(hosts) > MAX_HOSTS:
        raise HostsError(f"{where}: {len(hosts)} hosts; at most {MAX_HOSTS}")
    seen: set[str] = set()
    for h in hosts:
        if h.name in seen:
            raise HostsError(f"{where}: host {h.name} is named twice")
        seen.add(h.name)
    return hosts


def parse_hosts(text: str) -> list[Host]:
    """`--hosts`: `HOST[:SLOTS],...`."""
    return _checked([_host(w.strip(), "--hosts") for w in text.split(",") if w.strip()],
                    "--hosts")


def read_hostfile(path: Path) -> list[Host]:
    """`--hostfile`: one host a line, as Open MPI's host files write it (`HOST slots=N`) or as
    `HOST:N`; `#` starts a comment."""
    try:
        with path.open(encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except (OSError, UnicodeDecodeError) as err:
        raise HostsError(f"--hostfile {path}: cannot read it: {err}") from None
    hosts = []
    for i, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{path}:{i}"
        if len(words) == 2 and words[1].startswith("slots="):
            if ":" in words[0]:
                raise HostsError(f"{where}: {line.strip()!r}: give the slots once")
            host = _host(f"{words[0]}:{words[1][len('slots='):]}", where)
        elif len(words) == 1:
            host = _host(words[0], where)
        else:
            raise HostsError(f"{where}: {line.strip()!r}: expected 'HOST', 'HOST:SLOTS' or "
                             "'HOST slots=SLOTS'")
        hosts.append(host)
    return _checked(hosts, f"--hostfile {path}")


def rsh_agent(environ: dict[str, str] | None = None) -> list[str]:
    """The command that reaches another host: Open MPI's own setting where one is made, else
    ssh that never asks for a password."""
    env = os.environ if environ is None else environ
    agent = env.get(RSH_AGENT_VARIABLE, "").split(":")[0].split()
    if agent:
        return agent
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(REACH_TIMEOUT_S)}"]


def unreachable(hosts: Sequence[Host], agent: Sequence[str]) -> list[str]:
    """`HOST: why` for every host that does not run `true` through `agent` in time."""
    out = []
    for h in hosts:
        try:
            p = subprocess.run([*agent, h.name, "true"], capture_output=True, text=True,
                               timeout=REACH_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            out.append(f"{h.name}: no answer within {REACH_TIMEOUT_S:.0f} s")
            continue
        except OSError as err:
            out.append(f"{h.name}: {shlex.join(agent)}: {err.strerror}")
            continue
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no message"])[-1][:300]
            out.append(f"{h.name}: {shlex.join([*agent, h.name, 'true'])} exited "
                       f"{p.returncode}: {last}")
    return out


@dataclass
class HostsExecutor(LocalExecutor):
    """mpirun across `hosts` (see the module's text)."""

    hosts: list[Host] = field(default_factory=list)
    agent: list[str] = field(default_factory=rsh_agent)
    reach: dict[str, str | None] = field(default_factory=dict)
    """Host -> why it cannot be reached (None: it answered), asked once a host."""

    name = "hosts"

    def problems(self, case: Case) -> list[tuple[str, str]]:
        out = []
        if case.num_nodes > len(self.hosts):
            out.append(("num_nodes", f"{case.num_nodes} nodes, but {len(self.hosts)} host(s) "
                                     f"were given ({', '.join(map(str, self.hosts))})"))
        for h in self.hosts[:case.num_nodes]:
            if h.slots is not None and case.ranks_per_node > h.slots:
                out.append(("gpus_per_node", f"{case.ranks_per_node} ranks a node, but host "
                                             f"{h.name} has {h.slots} slot(s)"))
        if self.mpirun is None:
            out.append(("executor", "mpirun not found: install Open MPI (Debian: openmpi-bin)"))
        if case.container.enabled:
            out.append(("container", "containers run with --executor local or slurm"))
        if case.preflight.enabled:
            out.append(("preflight", "the preflight runs with --executor local or slurm"))
        if case.site.modules:
            out.append(("site.modules", "modules are loaded by Slurm job scripts: load "
                                        f"{' '.join(case.site.modules)} on every host"))
        problem = python_env(case, self.python).problem
        if problem:
            out.append(("framework", problem))
        for h in self.hosts[:case.num_nodes]:
            if h.name not in self.reach:
                why = unreachable([h], self.agent)
                self.reach[h.name] = why[0] if why else None
            if self.reach[h.name]:
                out.append(("hosts", f"cannot reach {self.reach[h.name]}"))
        return out

    def prepare(self, cases: Sequence[Case]) -> None:
        """Nothing to learn: every host a case needs was asked by `problems`."""

    def _uses_gpus(self, case: Case) -> bool:
        """Every host is taken to have the GPUs the case asks for; each rank binds to its
        own node's."""
        return case.device.value != "cpu"

    def _added_env(self, case: Case, case_json: Path | None = None) -> dict[str, str]:
        """The local executor's, with rank 0's node as the rendezvous address: each rank
        finds its interface to it before MPI starts."""
        env = super()._added_env(case, case_json)
        env.setdefault("MASTER_ADDR", self.hosts[0].name)
        return env

    def _command(self, case: Case, python_argv: list[str], results_root: str, workdir: str,
                 case_json: Path, name: str | None = None) -> list[str]:
        """mpirun over the case's hosts, every variable the ranks get forwarded by name (the
        other hosts' daemons start them, not this process), then `python_argv`. The ssh
        launcher (`plm rsh`) is named: an environment that sets another (`OMPI_MCA_plm=isolated`,
        as some container images do, starts every rank on this machine) fails the mapping
        with "All nodes which are allocated for this job are already filled"."""
        assert self.mpirun is not None
        used = self.hosts[:case.num_nodes]
        forward = ["PYTHONPATH", *self._added_env(case, case_json)]
        return [*mpirun_argv(self.mpirun, case.launched_ranks, case.ranks_per_node),
                "--mca", "plm", "rsh",
                "--host", ",".join(f"{h.name}:{case.ranks_per_node}" for h in used),
                "--wdir", workdir, *[w for n in dict.fromkeys(forward) for w in ("-x", n)],
                *python_argv]
