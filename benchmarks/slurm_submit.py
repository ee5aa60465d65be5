"""Submission speed on a real Slurm: `toolkit.submit` of an N-case grid against N plain `sbatch`
calls of pre-written scripts, in one run, alternating, on the local cluster (or the one
`SLURM_CONF` names). Every job is submitted held (`--hold`) and cancelled right after, so the
figure is submission alone, not the scheduler running jobs.

Modes: `grid` (array_scope: grid, cases with the same directives share one job array: one sbatch
call) and `case` (one job array per case: N sbatch calls, plus the toolkit's own bookkeeping).

    python benchmarks/slurm_submit.py --cases 200 --rounds 3 [--out slurm_submit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GRID = """name: subbench
repeats: 1
base:
  model: resnet50
  device: cpu
  warmup_iterations: 1
  measured_iterations: 1
  model_config: {{image_size: 32, num_classes: 10, resnet_layers: [1, 1, 1, 1]}}
  slurm: {{array_scope: {scope}, extra_sbatch: ["--hold"], time_min: 5}}
sweep:
  batch_size_per_device: {sizes}
"""


def _cancel_all(env: dict[str, str]) -> None:
    subprocess.run(["scancel", "--user", str(os.getuid()) if os.getuid() else "root"],
                   env=env, check=False, capture_output=True)
    time.sleep(1.0)


def time_toolkit(n: int, scope: str, work: Path, env: dict[str, str]) -> float:
    grid = work / f"grid-{scope}.yaml"
    grid.write_text(GRID.format(scope=scope, sizes=list(range(1, n + 1))))
    res = work / f"res-{scope}-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid),
                        "--results", str(res), "--executor", "slurm"], env=env, cwd=ROOT,
                       capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"toolkit.submit failed:\n{p.stdout}\n{p.stderr}")
    return elapsed


def prewrite(n: int, work: Path, env: dict[str, str]) -> list[Path]:
    """The plain side's scripts: the toolkit's own per-case scripts, from a dry run."""
    grid = work / "grid-plain.yaml"
    grid.write_text(GRID.format(scope="case", sizes=list(range(1, n + 1))))
    res = work / "res-plain"
    subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results",
                    str(res), "--executor", "slurm", "--dry-run"], env=env, cwd=ROOT,
                   check=True, capture_output=True)
    scripts = sorted(res.glob("cases/*/submission.sh"))
    assert len(scripts) == n, len(scripts)
    return scripts


def time_plain(scripts: list[Path], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    for s in scripts:
        subprocess.run(["sbatch", "--parsable", str(s)], env=env, check=True,
                       capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    env = dict(os.environ)
    cluster = None
    if "SLURM_CONF" not in env:
        from toolkit.localslurm import free_port_base, start_cluster

        state = Path(tempfile.mkdtemp(prefix="tb-sbench-", dir="/tmp"))
        cluster = start_cluster(state, nodes=2, port_base=free_port_base(2, start=19817))
        env.update(cluster.client_env())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            scripts = prewrite(args.cases, work, env)
            figures: dict[str, list[float]] = {"plain": [], "grid": [], "case": []}
            for _ in range(args.rounds):
                for mode in ("plain", "grid", "case"):
                    if mode == "plain":
                        figures[mode].append(time_plain(scripts, env))
                    else:
                        figures[mode].append(time_toolkit(args.cases, mode, work, env))
                    _cancel_all(env)
    finally:
        if cluster is not None:
            cluster.stop()
    med = {k: statistics.median(v) for k, v in figures.items()}
    # Each round times the three side by side: the per-round ratio is the robust figure.
    ratio = {m: statistics.median(t / p for t, p in zip(figures[m], figures["plain"],
                                                          strict=True))
             for m in ("grid", "case")}
    print(f"{args.cases} cases, {args.rounds} rounds (median wall seconds; ratio = median of "
          "per-round toolkit / plain):")
    print(f"  plain sbatch x{args.cases}:             {med['plain']:.2f} s")
    print(f"  toolkit.submit, array_scope grid: {med['grid']:.2f} s  ratio {ratio['grid']:.3f}")
    print(f"  toolkit.submit, array_scope case: {med['case']:.2f} s  ratio {ratio['case']:.3f}")
    if args.out:
        args.out.write_text(json.dumps({"cases": args.cases, "rounds": figures,
                                        "median_s": med, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
