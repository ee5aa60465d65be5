"""What validating, expanding and writing a large grid costs: `toolkit.submit --dry-run` (local
executor) of an N-case grid, this checkout against another one (`--baseline DIR`, e.g. a
`git worktree` of an earlier commit), alternating in one run, so the ratio is fair on a shared
machine. Each call is the whole CLI: start-up, reading and checking the grid, expanding it,
writing case.json and run_local.sh per case through the no-follow writer, and dry-run.json.

    git worktree add /tmp/base <commit>
    python benchmarks/dry_run_cost.py --baseline /tmp/base --cases 1000 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def grid_text(cases: int) -> str:
    """A grid of `cases` cases: batch sizes x seeds, a product of two axes."""
    sizes = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    seeds = list(range(max(1, math.ceil(cases / len(sizes)))))
    return ("name: cost\nrepeats: 1\nbase: {model: resnet50, device: cpu, "
            "warmup_iterations: 1, measured_iterations: 2}\n"
            f"sweep: {{batch_size_per_device: {sizes}, seed: {seeds}}}\n")


def one(tree: Path, grid: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "TRAINBENCH_MAX_CASES": "10000000"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results",
                    str(out), "--dry-run", "--executor", "local"], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", type=Path, required=True, help="another checkout")
    p.add_argument("--cases", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = p.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.cases:
            grid = Path(tmp) / f"cost{n}.yaml"
            grid.write_text(grid_text(n))
            times: dict[str, list[float]] = {k: [] for k in trees}
            for r in range(args.rounds):
                order = list(trees) if r % 2 == 0 else list(reversed(trees))
                for name in order:
                    times[name].append(one(trees[name], grid, Path(tmp) / "res"))
            med = {k: statistics.median(v) for k, v in times.items()}
            ratio = statistics.median(t / b for t, b in zip(times["this"], times["baseline"],
                                                            strict=True))
            figures.append({"cases": n, "median_s": med, "rounds": times,
                            "ratio_this_to_baseline": ratio})
            print(f"{n:>7,} cases: this {med['this']:.2f} s, baseline {med['baseline']:.2f} s, "
                  f"ratio {ratio:.2f} (median of {args.rounds} per-round ratios)", flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
