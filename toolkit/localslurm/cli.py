"""`python -m toolkit.localslurm up|status|down|env|limit`: the command line of the local cluster.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

from toolkit import interruptible
from toolkit.localslurm.config import (
    DEFAULT_NODES,
    DEFAULT_PORT_BASE,
    DEFAULT_STATE_DIR,
    DEFAULT_STOP_TIMEOUT_S,
    DEFAULT_UP_TIMEOUT_S,
    EXIT_NOT_ROOT,
    NETWORK_MODES,
    PARTITION,
    STATE_DIR_ENV,
    ClusterError,
    export_line,
)
from toolkit.localslurm.daemons import default_state_dir, load_cluster, start_cluster, stop_cluster
from toolkit.localslurm.gpus import describe


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
        shared_nodes=args.shared_nodes,
        network=args.network,
        throttles=args.throttle,
        gpus_per_node=args.gpus_per_node,
        share_gpus=args.share_gpus,
    )
    if was_up:
        print(f"localslurm: already up in {state_dir} ({', '.join(cluster.nodes)})")
    else:
        print(
            f"localslurm: up in {cluster.up_s:.1f} s: {len(cluster.nodes)} nodes x "
            f"{cluster.cpus_per_node} CPUs, partition {PARTITION}, "
            + ("jobs share nodes" if cluster.shared_nodes else "one job per node at a time")
            + f", state in {state_dir}"
            + (", accounting (slurmdbd + MariaDB)" if cluster.accounting else "")
        )
    if cluster.network is not None:
        print(f"localslurm: network {cluster.network.subnet} on bridge {cluster.network.bridge}"
              + "".join(f", {t.label} limited to {t.rate}" for t in cluster.network.throttles))
    if cluster.gpus is not None:
        print("localslurm: GPUs as GRES: " + "; ".join(
            f"{n.node} {describe(n)}" for n in cluster.gpus.nodes)
            + (" (figures of runs on shared GPUs are marked)" if cluster.gpus.shared else ""))
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
        line = f"{node:<16} {states.get(node, 'missing'):<12}"
        if cluster.network is not None:
            limits = cluster.network.limits(node)
            line += (f" {cluster.network.address(node):<15} "
                     f"{', '.join(limits) if limits else 'no limit'}")
        else:
            line += " 127.0.0.1       (shared by every node)"
        if cluster.gpus is not None:
            line += f"  {describe(cluster.gpus.node(node))}"
        print(line.rstrip())
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
    from toolkit.localslurm.accounting import set_max_submit_jobs

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
    from toolkit.localslurm.agent import RSH_AGENT_VARIABLE, agent_words

    state_dir = (args.state_dir or default_state_dir()).absolute()
    print(export_line(state_dir / "slurm.conf"))
    agent = agent_words(state_dir)
    if agent is not None:  # Open MPI's ssh launcher reaches the nodes (submit --hosts)
        print(f"export {RSH_AGENT_VARIABLE}={shlex.quote(' '.join(agent))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainbench localslurm",
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
        "--shared-nodes",
        action="store_true",
        help="let jobs share a node (default: one job per node at a time, OverSubscribe="
        "EXCLUSIVE: the nodes are this machine's CPUs, and benchmarks sharing them measure "
        "each other)",
    )
    up.add_argument(
        "--cpus-per-node", type=int, default=None, help="CPUs per node (default: this machine's)"
    )
    up.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"slurmctld port; node K gets port-base+K (default {DEFAULT_PORT_BASE})",
    )
    up.add_argument(
        "--network",
        choices=NETWORK_MODES,
        default="auto",
        help="namespaces: each node in a network namespace of its own, with its own address "
        "and host name, so node-to-node traffic crosses a link; loopback: every node at "
        "127.0.0.1; auto (default): namespaces where the kernel allows them",
    )
    up.add_argument(
        "--throttle",
        action="append",
        default=[],
        metavar="NODE=RATE|NODE-NODE=RATE",
        help="limit one node's link (node3=20mbit) or only the link between two nodes "
        "(node1-node2=50mbit); RATE as tc writes it; repeatable; up again with other "
        "throttles re-shapes a running cluster",
    )
    up.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        metavar="G",
        help="each node owns G of this machine's GPUs (node k: GPUs (k-1)*G .. k*G-1), as "
        "Slurm GRES (gres.conf), so a job asking for GPUs gets its node's in "
        "CUDA_VISIBLE_DEVICES (default 0: no GPUs)",
    )
    up.add_argument(
        "--share-gpus",
        action="store_true",
        help="with --gpus-per-node: more nodes than the machine has GPUs for take turns on the "
        "same GPUs (the multi-node path on one GPU); every figure of such a run is marked "
        "shared",
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
    sub.add_parser("status", parents=[state],
                   help="daemons, node states, addresses and limits; exit 1 if down")
    down = sub.add_parser("down", parents=[state], help="stop the daemons that up started")
    down.add_argument("--timeout-s", type=float, default=DEFAULT_STOP_TIMEOUT_S)
    sub.add_parser("env", parents=[state],
                   help="print the export lines of SLURM_CONF and of Open MPI's ssh launcher "
                        "(submit --hosts reaches the nodes through it)")
    return parser


@interruptible
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
    except OSError as err:  # a state directory this user cannot read, a full disk
        print(f"localslurm: {err.strerror or err}"
              + (f": {err.filename}" if err.filename else ""), file=sys.stderr)
        return 1

