"""How often a rank dies at MPI start under `srun --mpi=pmix`, per PMIx fence collective.

Boots a local Slurm cluster (`toolkit.localslurm`, namespaced nodes) and runs many short steps
of a probe that imports mpi4py's MPI (MPI_Init) and does one allreduce, `srun --mpi=pmix
-N<nodes> -n<2 x nodes>`, the fences taking turns step by step (`SLURM_PMIX_FENCE`, which wins
over the cluster's mpi.conf). A step that lost a rank to a signal counts as a crash. With
`--load`, a busy loop and a loop of `python -c 'import torch, numpy'` run beside the steps for
the whole measurement (a busy login node or CI runner); with `--late S`, the second rank of
the first node starts S seconds after the others (the crash on demand).

    python benchmarks/pmix_start.py --nodes 2 4 --steps 500 --steps-other 100 \
        --fences ring tree mixed --load

Prints one line per node count and fence, and writes them to --out as JSON. Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent(
    """
    import os, sys, time
    late = float(sys.argv[1])
    if late and os.environ["SLURM_NODEID"] == "0" and os.environ["SLURM_LOCALID"] == "1":
        time.sleep(late)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    assert comm.allreduce(1) == comm.size
    """
)


@contextlib.contextmanager
def load_beside(python: str) -> Iterator[None]:
    """A busy loop and a loop of torch imports, for as long as the block runs."""
    procs = [subprocess.Popen(["bash", "-c", "while :; do :; done"]),
             subprocess.Popen(["bash", "-c", f"while :; do {python} -c 'import torch, numpy';"
                               " done"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def step(env: dict[str, str], nodes: int, probe: Path, late: float,
         timeout_s: float) -> tuple[str, str]:
    """One `srun --mpi=pmix` step: ("ok" | "crash" | "other", srun's last lines)."""
    argv = ["srun", "--mpi=pmix", f"-N{nodes}", f"-n{2 * nodes}", "--kill-on-bad-exit=1",
            sys.executable, str(probe), str(late)]
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s,
                           check=False)
    except subprocess.TimeoutExpired:
        return "other", "timed out"
    text = p.stdout + p.stderr
    if p.returncode == 0:
        return "ok", ""
    died = "Segmentation fault" in text or "signal 11" in text
    return ("crash" if died else "other"), "\n".join(text.splitlines()[-6:])


def measure(nodes: int, steps: int, fences: list[str], late: float, state: Path,
            timeout_s: float, steps_other: int | None = None) -> list[dict[str, object]]:
    from toolkit.localslurm import free_port_base, start_cluster

    cluster = start_cluster(state / f"slurm-{nodes}", nodes=nodes, network="namespaces",
                            port_base=free_port_base(nodes, start=21817),
                            cpus_per_node=max(2, os.cpu_count() or 1))
    probe = state / "probe.py"
    probe.write_text(PROBE)
    counts = {f: {"ok": 0, "crash": 0, "other": 0} for f in fences}
    examples: dict[str, str] = {}
    t0 = time.perf_counter()
    try:
        other = steps if steps_other is None else steps_other
        for i in range(steps):
            # the fences take turns, the others only in the first `other` steps
            for fence in fences if i < other else fences[:1]:
                env = {**cluster.client_env(), "SLURM_PMIX_FENCE": fence}
                outcome, tail = step(env, nodes, probe, late, timeout_s)
                counts[fence][outcome] += 1
                if outcome != "ok":
                    examples.setdefault(f"{fence}:{outcome}", tail)
    finally:
        cluster.stop()
    seconds = time.perf_counter() - t0
    return [{"nodes": nodes, "fence": f, "steps": sum(counts[f].values()), **counts[f],
             "late_s": late,
             "seconds": round(seconds, 1), "example": {k: v for k, v in examples.items()
                                                       if k.startswith(f + ":")}}
            for f in fences]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=100,
                    help="steps of the first fence per node count")
    ap.add_argument("--steps-other", type=int, default=None,
                    help="steps of each other fence per node count, taking turns with the "
                         "first in its first steps (default: --steps)")
    ap.add_argument("--fences", nargs="+", default=["ring", "tree", "mixed"],
                    choices=["ring", "tree", "mixed"])
    ap.add_argument("--late", type=float, default=0.0,
                    help="seconds the first node's second rank starts late")
    ap.add_argument("--load", action="store_true",
                    help="a busy loop and a loop of torch imports beside the steps")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=Path("pmix_start.json"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (the local Slurm cluster)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    rows: list[dict[str, object]] = []
    load = load_beside(sys.executable) if args.load else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="pmix-start-") as tmp, load:
        for nodes in args.nodes:
            for row in measure(nodes, args.steps, args.fences, args.late, Path(tmp),
                               args.timeout_s, args.steps_other):
                rows.append(row)
                print(f"{row['nodes']} nodes, fence {row['fence']}: {row['crash']} of "
                      f"{row['steps']} steps lost a rank to SIGSEGV ({row['other']} failed"
                      f" otherwise; {row['seconds']} s for this node count)", flush=True)
    args.out.write_text(json.dumps({"rows": rows, "load": args.load,
                                    "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
