"""The part `nodes` of the GPU runner: the machine's GPUs as nodes of a local Slurm cluster (each
node a network namespace of its own, so NCCL between nodes crosses a real socket link), and
ResNet50 DDP through `toolkit.submit` on one node and across nodes, through Slurm and over
`--hosts` (Open MPI's ssh launcher through the cluster's agent), each run's NCCL transport
between nodes read back from runs.csv; then the preflight over the nodes, with nothing
throttled, one node throttled and one link throttled.

What the machine lacks (Slurm, munge, iproute2, the toolkit's wheels) is brought first by
`benchmarks/bring.sh` from `.carry/` (`benchmarks/carry.sh` fills it where the registries are
reachable); `gpu.sh nodes` runs both:

    bash benchmarks/carry.sh                                   # here, once
    OUT=DIR bash benchmarks/gpu.sh nodes --nodes 2 --gpus-per-node 1 [--share-gpus]

The results directories and every step's output are under /tmp/gpu_nodes (packed, without
the large files, into OUT/nodes_logs.tar.gz), the table in OUT/nodes.md. `--plan` prints the
steps and runs nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml
from gpu_common import ENV, ROOT, fmt, num, read_runs, run

STATE_DIR = Path("/run/trainbench-gpu-nodes")
"""The GPU cluster's own state directory (not root's default, which a test cluster may hold)."""
WORK = Path("/tmp/gpu_nodes")
"""The results directories (many files, deep): OUT gets the table and a tarball of the logs."""


def grid(args: argparse.Namespace) -> dict[str, Any]:
    """ResNet50 DDP on one GPU, on one node's GPUs, and across 2, 4, ... up to every node,
    one rank a GPU."""
    g = args.gpus_per_node
    shapes = [(1, 1), *([(1, g)] if g > 1 else [])]
    n = 2
    while n < args.nodes:
        shapes.append((n, g))
        n *= 2
    if args.nodes > 1:
        shapes.append((args.nodes, g))
    return {
        "name": "gpu_nodes",
        "repeats": 1,
        "base": {"model": "resnet50", "framework": "torch", "precision": "amp_bf16",
                 "device": "cuda", "batch_size_per_device": 256, "compile": args.compile,
                 "warmup_iterations": 20, "measured_iterations": args.iterations,
                 "slurm": {"time_min": 15}, "env": dict(ENV)},
        "zip": [{"name": [f"rn50-{n}n{g}g" for n, g in shapes],
                 "num_nodes": [n for n, _ in shapes],
                 "gpus_per_node": [g for _, g in shapes]}],
    }


def cluster_env() -> dict[str, str]:
    """The variables `localslurm env` exports (SLURM_CONF, Open MPI's ssh agent)."""
    out = subprocess.run([sys.executable, "-m", "toolkit.localslurm", "env", "--state-dir",
                          str(STATE_DIR)], cwd=ROOT, capture_output=True, text=True, check=False)
    env: dict[str, str] = {}
    for line in out.stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


def up_options(args: argparse.Namespace) -> list[str]:
    """`localslurm up`'s GPU options, where this toolkit has them."""
    helptext = subprocess.run([sys.executable, "-m", "toolkit.localslurm", "up", "--help"],
                              cwd=ROOT, capture_output=True, text=True, check=False).stdout
    opts: list[str] = []
    if "--gpus-per-node" in helptext:
        opts += ["--gpus-per-node", str(args.gpus_per_node)]
        if args.share_gpus:
            opts.append("--share-gpus")
    return opts


def table(results: Path, label: str) -> list[str]:
    rows = []
    for case, runs in read_runs(results).items():
        for r in runs:
            rows.append(f"| {label} | {case} | {r.get('status', '')} | "
                        f"{fmt(num(r.get('throughput_sps')))} | "
                        f"{r.get('nccl_between_nodes') or '-'} | "
                        f"{(r.get('oversubscribed') or r.get('host_crowded') or '')[:80]} | "
                        f"{(r.get('error') or '')[:120]} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--gpus-per-node", type=int, default=1)
    p.add_argument("--share-gpus", action="store_true",
                   help="nodes take turns on the same GPUs (a machine with fewer GPUs)")
    p.add_argument("--steps", default="slurm,hosts,preflight",
                   help="which of slurm, hosts, preflight to run (comma-separated)")
    p.add_argument("--compile", action="store_true", help="compile the model (default eager)")
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--throttle-rate", default="2gbit")
    p.add_argument("--plan", action="store_true")
    args = p.parse_args(argv)
    steps = set(args.steps.split(","))
    out: Path = args.out
    logs = WORK / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    grid_file = WORK / "gpu_nodes.yaml"
    grid_file.write_text(yaml.safe_dump(grid(args), sort_keys=False))
    py = sys.executable
    up = [py, "-m", "toolkit.localslurm", "up", "--state-dir", str(STATE_DIR), "--nodes",
          str(args.nodes), "--network", "namespaces", *up_options(args)]
    if args.plan:
        print(" ".join(up))
        print(grid_file.read_text())
        return 0

    summary: list[str] = [f"# GPU nodes: {args.nodes} x {args.gpus_per_node}"
                          f"{' (shared GPUs)' if args.share_gpus else ''}", "",
                          "| step | rc | seconds |", "|---|---|---|"]

    def step(name: str, cmd: list[str], env: dict[str, str] | None = None,
             timeout: float = 900) -> int:
        rc, wall = run(cmd, logs / f"{name}.log", env=env, timeout=timeout)
        summary.append(f"| {name} | {rc} | {wall:.0f} |")
        print(f"{name}: rc {rc} in {wall:.0f} s", flush=True)
        pack(out, summary)  # a call cut short at its limit still brings back what ran
        return rc

    rows: list[str] = []
    try:
        if step("up", up, timeout=240) != 0:
            # Where the kernel refuses network namespaces, the nodes share this host's network:
            # the Slurm path still runs (NCCL then sees one host).
            summary.append("| (namespaces refused: loopback nodes) | | |")
            network = up.index("namespaces")
            up[network] = "loopback"
            if step("up-loopback", up, timeout=240) != 0:
                return 1
        env = cluster_env()
        step("status", [py, "-m", "toolkit.localslurm", "status", "--state-dir", str(STATE_DIR)],
             env=env, timeout=60)
        step("sinfo", ["scontrol", "show", "node"], env=env, timeout=30)
        if "slurm" in steps:
            res = WORK / "results-slurm"
            # One case at a time: Slurm runs jobs of different nodes at once, and nodes that
            # share GPUs would measure each other (their figures carry the shared mark).
            for case in grid(args)["zip"][0]["name"]:
                step(f"submit-slurm-{case}", [py, "-m", "toolkit.submit", "--grid",
                                              str(grid_file), "--results", str(res),
                                              "--executor", "slurm", "--only", case, "--wait"],
                     env=env, timeout=600)
            step("collect-slurm", [py, "-m", "toolkit.collect", str(res), "--no-store",
                                   "--no-plots", "--quiet"], env=env, timeout=300)
            rows += table(res, "slurm")
        if "hosts" in steps:
            res = WORK / "results-hosts"
            hosts = ",".join(f"node{k}:{args.gpus_per_node}" for k in range(1, args.nodes + 1))
            step("submit-hosts", [py, "-m", "toolkit.submit", "--grid", str(grid_file),
                                  "--results", str(res), "--hosts", hosts], env=env, timeout=900)
            step("collect-hosts", [py, "-m", "toolkit.collect", str(res), "--no-store",
                                   "--no-plots", "--quiet"], env=env, timeout=300)
            rows += table(res, "hosts")
        if "preflight" in steps:
            scenarios: list[tuple[str, list[str]]] = [("none", [])]
            if args.nodes >= 2:
                scenarios.append(("node", [f"node{args.nodes}={args.throttle_rate}"]))
            if args.nodes >= 3:
                scenarios.append(("link", [f"node1-node3={args.throttle_rate}"]))
            for name, throttles in scenarios:
                shape = [*up, *(w for t in throttles for w in ("--throttle", t))]
                step(f"throttle-{name}", shape, env=env, timeout=120)
                step(f"preflight-{name}", [py, "-m", "toolkit.preflight", "--executor", "slurm",
                                           "--nodes", str(args.nodes), "--gpus-per-node",
                                           str(args.gpus_per_node), "--results",
                                           str(WORK / f"preflight-{name}")],
                     env=env, timeout=600)
    finally:
        step("down", [py, "-m", "toolkit.localslurm", "down", "--state-dir", str(STATE_DIR)],
             timeout=120)
        summary += ["", "| launch | case | status | samples/s | NCCL between nodes | marked | "
                    "error |", "|---|---|---|---|---|---|---|", *rows]
        pack(out, summary)
        print("\n".join(summary), flush=True)
    return 0


def pack(out: Path, summary: list[str]) -> None:
    """OUT/nodes.md (the steps so far and the table) and OUT/nodes_logs.tar.gz (the logs,
    results and the cluster's own logs, each file under 4 MiB), written again after each step."""
    (out / "nodes.md").write_text("\n".join(summary) + "\n")
    with tarfile.open(out / "nodes_logs.tar.gz", "w:gz") as tar:
        for path in sorted(WORK.rglob("*")):
            if path.is_file() and path.suffix in {".log", ".out", ".md", ".json", ".csv",
                                                  ".txt", ".yaml", ".jsonl", ".sh", ".conf"} \
                    and path.stat().st_size < 4 << 20:
                tar.add(path, arcname=str(path.relative_to(WORK)))
        state = STATE_DIR / "log"
        if state.is_dir():
            for path in sorted(state.iterdir()):
                if path.is_file() and path.stat().st_size < 4 << 20:
                    tar.add(path, arcname=f"cluster-log/{path.name}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
