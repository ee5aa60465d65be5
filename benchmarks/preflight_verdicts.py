"""How often the preflight's verdict is right on the namespaced local cluster, beside a CPU load
that comes and goes (as another user's work on a shared host does):

- healthy nodes: how many preflights name a node slow (the target: none; `inconclusive` is
  allowed and counted);
- one node throttled (tc, `--rate`): how many name it, and only it (two nodes: the link
  between them, which cannot be told from either node);
- one link throttled: how many name that link and no node;

each scenario `--count` times at each of `--nodes`, and the time of each preflight.
`--rejudge` judges the runs of an earlier `--out` again by the rules of this tree (their
times stay theirs), so that runs of several sessions are counted by one rule.

    flock /tmp/trainbench-cluster.lock python benchmarks/preflight_verdicts.py \
        --nodes 4 --count 3 --rate 100mbit --out /tmp/pv

The load: `--load-procs` busy loops, each busy for a random 0.5-4 s then idle for a random
0.5-4 s, for as long as the preflights run. Writes `summary.json` under --out and prints one
line per scenario (summary.json is written after every preflight, so a stopped benchmark keeps
the runs it finished). Needs root (the cluster).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _come_and_go(seed: int, stop_at: float) -> None:
    rng = random.Random(seed)
    while time.time() < stop_at:
        busy_until = time.time() + rng.uniform(0.5, 4.0)
        while time.time() < busy_until:
            pass
        time.sleep(rng.uniform(0.5, 4.0))


@contextmanager
def load(procs: int, seconds: float) -> Iterator[None]:
    """`procs` processes that are busy and idle in turns, stopped on leaving."""
    stop_at = time.time() + seconds
    workers = [multiprocessing.Process(target=_come_and_go, args=(k, stop_at), daemon=True)
               for k in range(procs)]
    for w in workers:
        w.start()
    try:
        yield
    finally:
        for w in workers:
            w.terminate()
            w.join()


def preflight(env: dict[str, str], nodes: int, res: Path) -> dict[str, Any]:
    """One standalone preflight over node1..node<nodes>: its exit, time and verdict."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "toolkit.preflight", "--executor", "slurm",
                        "--nodes", str(nodes), "--device", "cpu", "--results", str(res),
                        "--time-min", "30", "--nodelist", f"node[1-{nodes}]"],
                       env=env, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.perf_counter() - t0
    found = sorted((res / "preflight").glob("*/verdict.json"))
    verdict = json.loads(found[-1].read_text()) if found else {}
    return {"exit": p.returncode, "seconds": round(seconds, 1), "dir": res.name,
            **outcome(verdict), "tail": "" if found else p.stdout[-800:] + p.stderr[-800:]}


def outcome(verdict: dict[str, Any]) -> dict[str, Any]:
    """What a verdict named: nodes slow or inconclusive, links, figures not judged."""
    nodes_by = {n["node"]: n["verdict"] for n in verdict.get("nodes", [])}
    return {"slow": sorted(n for n, v in nodes_by.items() if v in ("slow", "fault")),
            "inconclusive": sorted(n for n, v in nodes_by.items() if v == "inconclusive"),
            "inconclusive_figures": sum(u.get("verdict") == "inconclusive"
                                        for u in verdict.get("not_judged", [])),
            "links": [x.split(":")[0] for x in verdict.get("links", [])],
            "not_judged": len(verdict.get("not_judged", []))}


def judged_again(out: Path, run: dict[str, Any]) -> dict[str, Any]:
    """`run` with its preflight judged again by this tree's rules (`preflight verdict`)."""
    from toolkit.analysis.preflight import judge
    from toolkit.launch.preflight import exit_status
    from toolkit.results.preflight import read_preflight

    found = sorted((out / run["dir"] / "preflight").glob("*/verdict.json"))
    if not found:
        return run
    verdict = judge(read_preflight(found[-1].parent))
    return {**run, **outcome(verdict.to_dict()), "exit": exit_status(verdict)}


def run_dir(nodes: int, throttle: str | None, k: int) -> str:
    """The directory of a scenario's `k`th preflight under --out: `n8-node2-0`."""
    return f"n{nodes}-{(throttle or 'healthy').split('=')[0]}-{k}"


def scenario(cluster: Any, env: dict[str, str], nodes: int, throttle: str | None, count: int,
             out: Path, done: Callable[[dict[str, Any]], None] = lambda s: None
             ) -> dict[str, Any]:
    """`count` preflights of one scenario, scored; `done` gets the scenario so far after each."""
    from toolkit.localslurm import network as net

    cluster.set_throttles([net.parse_throttle(throttle, cluster.nodes)] if throttle else [])
    runs = []
    try:
        for k in range(count):
            res = out / run_dir(nodes, throttle, k)
            runs.append(preflight(env, nodes, res))
            done(scored(nodes, throttle, runs))
    finally:
        cluster.set_throttles([])
    return scored(nodes, throttle, runs)


def scored(nodes: int, throttle: str | None, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A scenario's runs and how many verdicts were right: healthy, no node slow and no link;
    a throttled node, that node alone (two nodes: or their link); a throttled link, that link
    and no node."""
    target = (throttle or "").split("=")[0]
    if not throttle:
        right = sum(not r["slow"] and not r["links"] for r in runs)
    elif "-" in target:
        right = sum(r["links"] == ["+".join(target.split("-"))] and not r["slow"] for r in runs)
    elif nodes == 2:  # two nodes: the link, which cannot be told from either node
        right = sum(r["links"] == ["node1+node2"] or r["slow"] == [target] for r in runs)
    else:
        right = sum(r["slow"] == [target] for r in runs)
    return {"nodes": nodes, "throttle": throttle, "count": len(runs), "right": right,
            "named_slow_when_healthy": sum(bool(r["slow"]) for r in runs) if not throttle
            else None,
            "links_named_when_healthy": sum(bool(r["links"]) for r in runs) if not throttle
            else None,
            "inconclusive_runs": sum(bool(r["inconclusive"]) for r in runs),
            "runs_with_inconclusive_figures": sum(bool(r["inconclusive_figures"]) for r in runs),
            "seconds": [r["seconds"] for r in runs], "runs": runs}


def rejudge(out: Path) -> int:
    """Judge every run of `out/summary.json` again by this tree's rules; the times stay the
    runs' own. Writes `summary-rejudged.json`."""
    summary = json.loads((out / "summary.json").read_text())
    for k, s in enumerate(summary["scenarios"]):
        runs = [judged_again(out, {"dir": run_dir(s["nodes"], s["throttle"], i), **r})
                for i, r in enumerate(s["runs"])]
        summary["scenarios"][k] = scored(s["nodes"], s["throttle"], runs)
        print(json.dumps({k: v for k, v in summary["scenarios"][k].items() if k != "runs"}),
              flush=True)
    (out / "summary-rejudged.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[4, 8])
    p.add_argument("--count", type=int, default=20, help="preflights per scenario")
    p.add_argument("--rate", default="100mbit", help="the throttled node's or link's rate")
    p.add_argument("--load-procs", type=int, default=1)
    p.add_argument("--scenarios", nargs="+", default=["healthy", "node", "link"],
                   choices=["healthy", "node", "link"])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "preflight_out")))
    p.add_argument("--rejudge", action="store_true",
                   help="judge the runs under --out again by this tree's rules (no cluster)")
    args = p.parse_args(argv)
    if args.rejudge:
        return rejudge(args.out.absolute())
    from toolkit.localslurm import free_port_base, start_cluster

    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    top = max(args.nodes)
    cluster = start_cluster(Path(f"/tmp/tb-pv-{os.getpid()}"), nodes=top, network="namespaces",
                            port_base=free_port_base(top, start=21817))
    env = {**os.environ, **cluster.client_env(), "COLUMNS": "200",
           "TRAINBENCH_STORE": str(out / "store.sqlite")}
    summary: dict[str, Any] = {"machine": f"{os.cpu_count()} CPUs", "count": args.count,
                               "rate": args.rate, "load_procs": args.load_procs,
                               "scenarios": []}

    def save(partial: dict[str, Any] | None = None) -> None:
        """summary.json with every finished run: a benchmark stopped midway keeps them."""
        done = summary["scenarios"] + ([partial] if partial else [])
        (out / "summary.json").write_text(json.dumps({**summary, "scenarios": done},
                                                     indent=1) + "\n")

    try:
        with load(args.load_procs, 6 * 3600):
            for n in args.nodes:
                wanted = {"healthy": None, "node": f"node2={args.rate}",
                          "link": f"node1-node{n}={args.rate}"}
                for name in args.scenarios:
                    s = scenario(cluster, env, n, wanted[name], args.count, out, save)
                    summary["scenarios"].append(s)
                    print(json.dumps({k: v for k, v in s.items() if k != "runs"}), flush=True)
    finally:
        cluster.stop()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
