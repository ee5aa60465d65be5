"""A cluster's shape on this machine, end to end: a local Slurm cluster of N namespaced nodes
(`toolkit.localslurm`, each node on its own address and hostname behind a link tc can throttle),
then, through the toolkit's own commands as a user runs them:

1. a grid across 1, 2, 4, ... N nodes, one rank a node, with srun (PMIx) and with mpirun in the
   allocation, submitted, waited for and collected (the scaling table over nodes; on a 2-core
   machine every multi-node figure is flagged oversubscribed, as it must be);
2. the preflight over 8 and N nodes with one node throttled (timed; the verdict must name that
   node and only it), then with one link throttled (the verdict must name the link and no node);
3. `down`, and a check that no namespace, link or bridge of the cluster is left.

    python benchmarks/cluster_shape.py --nodes 16 [--rate 100mbit] [--out cluster_shape_out]

Writes `summary.json` and the collected results under --out; prints the figures that
docs/BENCHMARKS.md quotes. Needs root (the cluster); takes about 15 minutes at 16 nodes on
2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

GRID = """name: nodes
repeats: {repeats}
base:
  model: resnet50
  device: cpu
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 3
  cpu_threads: 1
  telemetry_interval_ms: 0
  model_config: {{image_size: 32, num_classes: 10, resnet_layers: [1, 1, 1, 1]}}
  slurm: {{time_min: 15}}
sweep:
  num_nodes: {nodes}
  slurm.launcher: [srun, mpirun]
"""


def node_counts(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return [*out, n]


def _tb(env: dict[str, str], *args: str, cwd: Path, timeout: float = 3600,
        ) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout, check=False)
    return p, time.perf_counter() - t0


def preflight(cluster: Any, env: dict[str, str], nodes: int, throttle: str,
              out: Path) -> dict[str, Any]:
    from toolkit.localslurm import network as net

    assert cluster.network is not None
    cluster.set_throttles([net.parse_throttle(throttle, cluster.nodes)])
    res = out / f"preflight-{nodes}-{throttle.split('=')[0]}"
    try:
        p, seconds = _tb(env, "toolkit.preflight", "--executor", "slurm", "--nodes", str(nodes),
                         "--device", "cpu", "--results", str(res), "--time-min", "30",
                         "--nodelist", f"node[1-{nodes}]", cwd=out)
    finally:
        cluster.set_throttles([])
    verdicts = list((res / "preflight").glob("*/verdict.json"))
    verdict = json.loads(verdicts[0].read_text()) if verdicts else {}
    pairs = {f["group"]: f["value"] for f in verdict.get("figures", [])
             if f.get("scope") == "pair"}
    return {"nodes": nodes, "throttle": throttle, "exit": p.returncode,
            "seconds": round(seconds, 1), "exclude": verdict.get("exclude"),
            "links": [x.split(":")[0] for x in verdict.get("links", [])],
            "pair_gbps": pairs, "tail": p.stdout[-600:] + p.stderr[-600:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--rate", default="100mbit", help="the throttled node's or link's rate")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "cluster_shape_out")))
    p.add_argument("--skip-grid", action="store_true")
    args = p.parse_args(argv)
    from toolkit.localslurm import free_port_base, start_cluster
    from toolkit.localslurm import network as net

    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"nodes": args.nodes, "rate": args.rate,
                               "machine": f"{os.cpu_count()} CPUs"}
    t0 = time.perf_counter()
    state = Path(f"/tmp/tb-shape-{os.getpid()}")
    cluster = start_cluster(state, nodes=args.nodes, network="namespaces",
                            port_base=free_port_base(args.nodes, start=20817))
    summary["up_s"] = round(cluster.up_s, 1)
    # the runs go into a store of the benchmark's own, never the user's
    env = {**os.environ, **cluster.client_env(), "COLUMNS": "200",
           "TRAINBENCH_STORE": str(out / "store.sqlite")}
    try:
        if not args.skip_grid:
            grid = out / "nodes.yaml"
            grid.write_text(GRID.format(repeats=args.repeats, nodes=node_counts(args.nodes)))
            res = out / "grid"
            sub, seconds = _tb(env, "toolkit.submit", "--grid", str(grid), "--results", str(res),
                               "--executor", "slurm", "--wait", cwd=out)
            col, _ = _tb(env, "toolkit.collect", str(res), cwd=out)
            summary["grid"] = {"submit_exit": sub.returncode, "seconds": round(seconds, 1),
                               "collect_exit": col.returncode,
                               "submit_tail": sub.stdout[-1500:] + sub.stderr[-800:]}
            print(col.stdout[-4000:])
        checks = []
        for n in sorted({min(8, args.nodes), args.nodes}):
            checks.append(preflight(cluster, env, n, f"node3={args.rate}", out))
            print(json.dumps(checks[-1], indent=1))
        checks.append(preflight(cluster, env, args.nodes, f"node1-node2={args.rate}", out))
        print(json.dumps(checks[-1], indent=1))
        summary["preflights"] = checks
    finally:
        network = cluster.network
        cluster.stop()
        summary["left_after_down"] = net.existing(network) if network is not None else []
    summary["total_s"] = round(time.perf_counter() - t0, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "preflights"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
