"""An ssh for the local cluster's nodes: `python -m toolkit.localslurm.agent --state-dir DIR
HOST WORDS...` runs WORDS, joined by spaces as ssh joins them, with `sh -c` as node HOST: in its
network namespace, under its hostname and with its /etc/hosts (`network.in_namespace`). Open
MPI's ssh launcher (`OMPI_MCA_plm_rsh_agent`, which `localslurm env` sets to this) starts its
daemons on the nodes through it, so `submit --hosts node1,node2` runs on the namespaced nodes as
it would across machines over ssh.

On a cluster whose nodes own GPUs (`up --gpus-per-node`), WORDS run with the node's GPUs only
(`gpus.node_env`: CUDA_VISIBLE_DEVICES from the cluster's record, and whether other nodes share
them); a CUDA_VISIBLE_DEVICES set where mpirun runs that names other GPUs is refused, not
overridden.

A host that is no node of the cluster, or a cluster without a network of its own, exits 255 as
ssh does when it cannot connect, saying why on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from toolkit.launch.hosts import RSH_AGENT_VARIABLE
from toolkit.localslurm import gpus as gpu
from toolkit.localslurm import network as net
from toolkit.localslurm.config import HOSTS_FILE, RESOLV_FILE
from toolkit.localslurm.daemons import default_state_dir, load_cluster

UNREACHABLE = 255
"""ssh's exit status when it cannot reach the host."""


__all__ = ["RSH_AGENT_VARIABLE", "agent_words", "main", "node_argv"]


def agent_words(state_dir: Path, python: str = sys.executable) -> list[str] | None:
    """The agent's command for `OMPI_MCA_plm_rsh_agent`; None where a word holds a space (Open
    MPI splits the setting on white space)."""
    words = [python, "-m", "toolkit.localslurm.agent", "--state-dir", str(state_dir)]
    return None if any(not w or any(c.isspace() for c in w) for w in words) else words


def node_argv(state_dir: Path, host: str, words: list[str],
              environ: dict[str, str] | None = None) -> list[str]:
    """What runs `words` as node `host`; ValueError saying why it cannot. `environ`: the
    caller's environment (default this process's), checked against the node's GPUs."""
    cluster = load_cluster(state_dir)
    if cluster is None:
        raise ValueError(f"no local cluster is recorded in {state_dir}")
    if cluster.network is None:
        raise ValueError(f"the local cluster in {state_dir} has no network of its own: its nodes "
                         "are this host (up --network namespaces)")
    if host not in cluster.nodes:
        raise ValueError(f"{host}: no such node in the local cluster in {state_dir} (its nodes: "
                         f"{', '.join(cluster.nodes)})")
    command = ["sh", "-c", " ".join(words)]
    if cluster.gpus is not None:
        env = gpu.node_env(cluster.gpus.node(host), dict(os.environ if environ is None
                                                          else environ))
        command = ["env", *(f"{k}={v}" for k, v in env.items()), *command]
    return net.in_namespace(cluster.network.node(host), state_dir / HOSTS_FILE, command,
                            state_dir / RESOLV_FILE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolkit.localslurm.agent",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--state-dir", type=Path, default=None)
    p.add_argument("host")
    p.add_argument("words", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    state_dir = (args.state_dir or default_state_dir()).absolute()
    try:
        command = node_argv(state_dir, args.host, args.words)
    except ValueError as err:
        print(f"localslurm agent: {err}", file=sys.stderr)
        return UNREACHABLE
    os.execvp(command[0], command)
    return UNREACHABLE  # not reached: exec replaces this process


if __name__ == "__main__":
    sys.exit(main())
