"""`python -m topology`: this node's GPU/CPU/NIC map and the binding each local rank would get.

What belongs here: argument parsing and printing (a `rich` table, or JSON). Reading the
topology is `topology.sources`, the plan is `topology.plan`.

With `--json` the output is always one JSON object: `topology` (source, GPUs, NICs),
`problems` (each GPU source that gave nothing, and why) and, unless it reads a --file, `host`
(the CPUs this process may use and each NUMA node's CPUs, from sysfs). A machine without an
NVIDIA GPU is described too: no GPUs, its NICs and CPUs, source `none`, and the reasons under
`problems`.

Only the GPUs CUDA_VISIBLE_DEVICES leaves are shown and planned for (`sources.visible_gpus`):
on a node of the local cluster, the GPUs it owns; in a Slurm job, the GPUs it was given.

Without an NVIDIA GPU the tables describe the machine instead (its CPUs, NUMA nodes and NICs,
after the reason on stderr), as `--json` does.

Exit status: 0 on success (also on a machine without GPUs); 1 when the machine has no NVIDIA
GPU (and no --file) for a --plan; 2 for bad arguments or an unreadable /
unparseable --file; 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from topology.model import Nic, NodeTopology, format_cpu_list
from topology.plan import Binding, plan_node
from topology.sources import (
    VISIBLE_VARIABLE,
    load_matrix_file,
    probe,
    read_numa_nodes,
    usable_cpus,
    visible_gpus,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainbench topology",
        description="Show this node's GPU / CPU / NIC topology and the per-rank binding plan.",
    )
    parser.add_argument(
        "--file", metavar="SAVED.txt", help="parse a saved `nvidia-smi topo -m` output instead"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--plan", action="store_true", help="print the binding each local rank would get"
    )
    parser.add_argument(
        "--ranks-per-node",
        type=int,
        metavar="N",
        help="local ranks for --plan (default: one per GPU)",
    )
    return parser


EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Exit status after Ctrl-C (130); the same rule as `toolkit.interruptible`, which this package
may not import."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m topology` and `trainbench-topology`. Ctrl-C ends it with one
    line on stderr and exit status 130, no traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.__stderr__ or sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.ranks_per_node is not None and not args.plan:
        print("error: --ranks-per-node needs --plan", file=sys.stderr)
        return 2

    topo: NodeTopology | None
    problems: dict[str, str] = {}
    if args.file:
        try:
            topo = load_matrix_file(args.file)
        except (OSError, ValueError) as err:
            print(f"error: cannot read topology from --file: {err}", file=sys.stderr)
            return 2
    else:
        found = probe()
        # On a node that owns some of the machine's GPUs (or a job given some), only those.
        topo = visible_gpus(found.topology, os.environ.get(VISIBLE_VARIABLE))
        problems = found.problems
        if topo is None and args.json and not args.plan:
            # what the machine has is an answer too: no GPUs, and why
            print(json.dumps(_json(NodeTopology(gpus=(), nics=found.nics, source="none"),
                                   None, problems, host=True), indent=2))
            return 0
        if topo is None:
            reasons = ", ".join(f"{name}: {why}" for name, why in problems.items())
            print(f"no NVIDIA GPU found ({reasons})", file=sys.stderr)
            if args.plan:
                return 1
            _print_host(found.nics)
            return 0

    bindings: list[Binding] | None = None
    if args.plan:
        ranks = args.ranks_per_node if args.ranks_per_node is not None else len(topo.gpus)
        try:
            bindings = plan_node(topo, ranks)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2

    if args.json:
        print(json.dumps(_json(topo, bindings, problems, host=not args.file), indent=2))
    else:
        _print_tables(topo, bindings)
    return 0


def _json(topo: NodeTopology, bindings: list[Binding] | None, problems: dict[str, str], *,
          host: bool) -> dict[str, Any]:
    """The JSON object; `host` (this machine's CPUs and NUMA nodes) only when `topo` describes
    this machine, not a --file."""
    out: dict[str, Any] = {"topology": topo.to_dict(), "problems": problems}
    if host:
        out["host"] = {
            "cpus": format_cpu_list(usable_cpus()),
            "numa_nodes": {str(n): format_cpu_list(c) for n, c in read_numa_nodes().items()},
        }
    if bindings is not None:
        out["plan"] = [b.to_dict() for b in bindings]
    return out


def _print_tables(topo: NodeTopology, bindings: list[Binding] | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(100, Console().width))
    table = Table(title=f"GPUs (source: {topo.source})")
    for column in ("GPU", "bus id", "CPUs", "NUMA", "nearest NIC", "link", "NVLink peers"):
        table.add_column(column)
    for gpu in topo.gpus:
        nearest = topo.nearest_nics(gpu.index)
        table.add_row(
            str(gpu.index),
            gpu.bus_id or "-",
            format_cpu_list(gpu.cpus) or "-",
            _or_dash(gpu.numa_node),
            ",".join(nic.device for nic, _ in nearest) or "-",
            str(nearest[0][1]) if nearest else "-",
            ",".join(map(str, gpu.nvlink_peers)) or "-",
        )
    console.print(table)
    if bindings is None:
        return
    plan = Table(title=f"Binding plan ({len(bindings)} local ranks)")
    for column in ("local rank", "GPU", "CPUs", "NUMA", "NIC", "link", "environment"):
        plan.add_column(column)
    for b in bindings:
        plan.add_row(
            str(b.local_rank),
            str(b.gpu_index),
            format_cpu_list(b.cpus) or "-",
            _or_dash(b.numa_node),
            b.nic.device if b.nic else "-",
            str(b.nic_link) if b.nic_link else "-",
            "\n".join(f"{k}={v}" for k, v in b.env.items()) or "-",
        )
    console.print(plan)


def _print_host(nics: Sequence[Nic]) -> None:
    """What a machine without an NVIDIA GPU has: the CPUs this process may use, each NUMA
    node's CPUs, and the network adapters."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(100, Console().width))
    cpus = usable_cpus()
    numa = read_numa_nodes()
    print(f"This machine: no NVIDIA GPU; {len(cpus)} usable CPUs ({format_cpu_list(cpus)}), "
          f"{len(numa)} NUMA node(s)")
    table = Table()
    for column in ("NUMA", "CPUs", "usable here", "NICs"):
        table.add_column(column)
    for node, node_cpus in numa.items():
        table.add_row(str(node), format_cpu_list(node_cpus),
                      format_cpu_list(node_cpus & cpus) or "-",
                      ",".join(n.device for n in nics if n.numa_node == node) or "-")
    unplaced = [n.device for n in nics if n.numa_node not in numa]
    if not numa or unplaced:
        table.add_row("-", "-" if numa else format_cpu_list(cpus), "-",
                      ",".join(unplaced) or "-")
    console.print(table)


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
