"""`collect` and `status` at the shape of 512 nodes x 8 GPUs, from synthetic results trees.

`collect`: writes one case of 512 nodes x 8 GPUs (4,096 ranks) run 10 times: 40,960 rank files
as the worker writes them (`start`, an `iter` record per iteration, a `telemetry` record every
100 ms from the model build to the end, `summary`, `end`; the records of
`collect_speed._rank_text`), rank 0's meta.json with every rank's summary as the worker gathers
it, and the executor's status.json. Then runs `python -m toolkit.collect <tree> --out <dir>
--quiet --no-store` as a user would (a new process) and prints its wall time, its CPU time and
its peak memory: the largest sum of the proportional set sizes (PSS: pages shared by forked
workers counted once) of collect and its pool's processes, sampled every 50 ms, and the largest
single process's peak RSS (getrusage of the children). Targets: <= 60 s, <= 2 GB.

`status`: writes a grid of 512 cases of 10 repeats, each case submitted as one Slurm array job
of 10 tasks (the job ledger as `toolkit.submit` writes it), most runs finished, some failed and
some started without a status yet (job.json only), then times `python -m toolkit.status
<tree>` as a user runs it. Without a Slurm client on the machine (no squeue on PATH) runs with
no status are `unknown`: the time is the files', not the scheduler's (squeue and sacct are asked
once each for every job). Target: <= 5 s.

    python benchmarks/scale_speed.py collect [--dir DIR] [--nodes 512] [--repeats 10]
    python benchmarks/scale_speed.py status [--dir DIR] [--jobs 512]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from collect_speed import WARMUP, _rank_text  # noqa: E402

from toolkit.launch import job_ledger  # noqa: E402
from toolkit.results.layout import CaseDir, rank_file  # noqa: E402
from toolkit.results.safe_write import atomic_write_json  # noqa: E402
from toolkit.spec import Case, resolve  # noqa: E402

TELEMETRY_INTERVAL_S = 0.1
"""The worker's default sampling interval (`telemetry_interval_ms: 100`)."""
START_UP_S = 10.0
"""Seconds the sampler runs before the first iteration (model build, process group)."""
T0 = 1_780_000_000.0


def run_start_s(repeat: int) -> float:
    """When repeat `repeat` started: the repeats run one after another, an hour apart."""
    return T0 + 3600.0 * repeat


def scale_case(nodes: int, gpus_per_node: int, repeats: int, iterations: int) -> Case:
    """The case of the tree: ResNet50 on nodes x gpus_per_node ranks, `repeats` repeats of
    `iterations` iterations (WARMUP of them warm-up)."""
    return resolve(Case.from_dict({
        "model": "resnet50", "precision": "amp_bf16", "num_nodes": nodes,
        "gpus_per_node": gpus_per_node, "batch_size_per_device": 256, "repeats": repeats,
        "warmup_iterations": WARMUP, "measured_iterations": iterations - WARMUP,
        "slurm": {"launcher": "srun", "mpi": "pmix"}}))


def _write_ranks(job: tuple[Path, int, int, int, int, int, int]) -> int:
    """Rank files [first, last) of run directory `run` (repeat `repeat`); returns their bytes."""
    run, repeat, first, last, world, gpus_per_node, iterations = job
    written = 0
    samples = world * 256
    for rank in range(first, last):
        text = _rank_text(rank, world, iterations, samples, seed=repeat * world + rank,
                          gpus_per_node=gpus_per_node,
                          telemetry_interval_s=TELEMETRY_INTERVAL_S, start_up_s=START_UP_S,
                          t0_s=run_start_s(repeat) + 1e-4 * rank)
        rank_file(run, rank).write_text(text)
        written += len(text)
    return written


def run_meta(case: Case, repeat: int) -> dict[str, Any]:
    """meta.json as rank 0 writes it at the end: the run's identity, hosts, and every rank's
    summary (`ranks`, gathered from all ranks)."""
    gpn = case.gpus_per_node
    hosts = [f"node{n:03d}" for n in range(case.num_nodes)]
    ranks = [{"rank": r, "host": hosts[r // gpn], "device": "NVIDIA H200",
              "pci_bus_id": f"00000000:{0x18 + 16 * (r % gpn):02X}:00.0",
              "device_type": "cuda", "backend": "nccl", "framework_peak_memory_mib": 11455.0,
              "binding": {"applied": True, "mode": "auto", "gpu_mismatch": None},
              "cpus": list(range(12 * (r % gpn), 12 * (r % gpn + 1))), "host_cpus": 96,
              "telemetry": {"samples": 400, "peak_memory_mib": 14100.0, "source": "nvml"}}
             for r in range(case.world_size)]
    return {"case_id": case.base_id(), "config_hash": case.config_hash(), "repeat": repeat,
            "case": case.to_dict(), "started_s": run_start_s(repeat) - 1.0, "hosts": hosts,
            "versions": {"torch": "2.14.1", "cuda": "13.0", "nccl": "2.28.9",
                         "driver": "580.159.04"},
            "telemetry": {"source": "nvml", "reason": None}, "ranks": ranks}


def write_collect_tree(root: Path, nodes: int, gpus_per_node: int, repeats: int,
                       iterations: int, processes: int = 0) -> tuple[Case, int]:
    """The tree of one case of nodes x gpus_per_node ranks run `repeats` times (see the
    module); returns the case and the bytes of rank files written."""
    case = scale_case(nodes, gpus_per_node, repeats, iterations)
    cdir = CaseDir(root, case.base_id())
    cdir.write_case(case)
    world = case.world_size
    chunk = max(1, min(256, world // 4))
    jobs = []
    for repeat in range(repeats):
        run = cdir.run_dir(repeat)
        run.mkdir(parents=True)
        atomic_write_json(run / "meta.json", run_meta(case, repeat), root=run)
        atomic_write_json(run / "status.json", {
            "executor": "slurm", "status": "ok", "log": "output.log", "returncode": 0,
            "started_s": run_start_s(repeat) - 5.0, "finished_s": run_start_s(repeat) + 55.0},
            root=run)
        jobs += [(run, repeat, first, min(world, first + chunk), world, gpus_per_node,
                  iterations) for first in range(0, world, chunk)]
    if processes == 1 or len(jobs) == 1:
        return case, sum(map(_write_ranks, jobs))
    with multiprocessing.Pool(processes or None) as pool:
        return case, sum(pool.imap_unordered(_write_ranks, jobs))


def write_status_tree(root: Path, jobs: int, repeats: int) -> dict[str, int]:
    """A grid of `jobs` cases of `repeats` repeats, each case one array job of `repeats` tasks
    in the ledger; of each case's runs, the last is still going (job.json, no status), the one
    before it failed, the rest finished. Returns the runs written in each state."""
    counts = {"finished": 0, "failed": 0, "started": 0}
    for index in range(jobs):
        case = resolve(Case.from_dict({
            "model": "resnet50", "precision": "amp_bf16", "num_nodes": 512,
            "gpus_per_node": 8, "batch_size_per_device": 1 + index, "repeats": repeats}))
        cdir = CaseDir(root, case.base_id())
        cdir.write_case(case)
        script = cdir.path / "submission.sh"
        job_id = str(100_000 + index)
        entries = [job_ledger.Entry(job_id, r, case.base_id(), (r,)) for r in range(repeats)]
        job_ledger.record_submit(root, job_id, script, entries, [f"--array=0-{repeats - 1}"])
        for r in range(repeats):
            run = cdir.run_dir(r)
            run.mkdir(parents=True)
            owner = {"host": "login01", "pid": 4242, "started_s": T0 + r,
                     "slurm_job_id": f"{job_id}_{r}"}
            atomic_write_json(run / "job.json", owner, root=run)
            if r == repeats - 1:
                counts["started"] += 1
                continue
            failed = r == repeats - 2
            atomic_write_json(run / "status.json", {
                "executor": "slurm", "status": "failed" if failed else "ok",
                "reason": "rank 17: RuntimeError: NCCL error" if failed else None,
                "log": "output.log", "started_s": T0 + r, "finished_s": T0 + r + 120.0},
                root=run)
            counts["failed" if failed else "finished"] += 1
    return counts


def _tree_pss_kib(pid: int) -> int:
    """PSS of `pid` and its descendants, KiB (0 for what has exited)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


def measured(argv: list[str]) -> dict[str, float]:
    """Run `python -m argv` in a new process: wall s, CPU s (its processes'), the peak of its
    process tree's summed PSS (MiB, sampled every 50 ms) and its largest process's peak RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL,
                            env={**os.environ, "PATH": str(Path(sys.executable).parent)})
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], _tree_pss_kib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)}: exit status {code}")
    return {"wall_s": round(wall, 2),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                           2),
            "peak_pss_mib": round(peak[0] / 1024),
            "max_process_rss_mib": round(after.ru_maxrss / 1024)}


def bench_collect(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root, out = work / "results", work / "collected"
    if not (root / "cases").is_dir():
        t = time.perf_counter()
        case, size = write_collect_tree(root, args.nodes, args.gpus_per_node, args.repeats,
                                        args.iterations)
        print(f"wrote {case.world_size * args.repeats} rank files ({size / 2**30:.2f} GiB) in "
              f"{time.perf_counter() - t:.0f} s under {root}", flush=True)
    files = sorted(root.glob("cases/*/r*/rank*.jsonl"))
    for f in files:  # the page cache holds the tree, as after the runs wrote it
        f.read_bytes()
    result: dict[str, Any] = {"rank_files": len(files),
                              "tree_gib": round(sum(f.stat().st_size for f in files) / 2**30, 2),
                              "iterations": args.iterations, "cpus": len(os.sched_getaffinity(0))}
    for k in range(args.rounds):
        shutil.rmtree(out, ignore_errors=True)
        figures = measured(["toolkit.collect", str(root), "--out", str(out), "--quiet",
                            "--no-store"])
        print(f"round {k + 1}: collect {figures}; load average {os.getloadavg()[0]:.1f}",
              flush=True)
        result.setdefault("rounds", []).append(figures)
    with (out / "runs.csv").open() as fh:
        result["runs_csv_rows"] = sum(1 for _ in fh) - 1
    best = min(result["rounds"], key=lambda r: r["wall_s"])
    result["collect_s"] = best["wall_s"]
    result["peak_pss_mib"] = max(r["peak_pss_mib"] for r in result["rounds"])
    return result


def bench_status(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "status-grid"
    result: dict[str, Any] = {"jobs": args.jobs, "repeats": args.repeats}
    if not (root / "cases").is_dir():
        t = time.perf_counter()
        result.update(write_status_tree(root, args.jobs, args.repeats))
        print(f"wrote the {args.jobs}-job grid in {time.perf_counter() - t:.0f} s", flush=True)
    rounds = [measured(["toolkit.status", str(root)]) for _ in range(args.rounds)]
    for k, figures in enumerate(rounds):
        print(f"round {k + 1}: status {figures}", flush=True)
    result["rounds"] = rounds
    result["status_s"] = min(r["wall_s"] for r in rounds)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("collect", "status"))
    p.add_argument("--dir", type=Path, default=None, help="where to build the trees (kept)")
    p.add_argument("--nodes", type=int, default=512)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--iterations", type=int, default=WARMUP + 100,
                   help="iterations per rank (the case's default: 20 warm-up + 100 measured)")
    p.add_argument("--jobs", type=int, default=512, help="status: the grid's cases (jobs)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="scale_speed_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.what == "collect":
            result = bench_collect(args, work)
            ok = result["collect_s"] <= 60 and result["peak_pss_mib"] <= 2048
        else:
            result = bench_status(args, work)
            ok = result["status_s"] <= 5
        print(json.dumps(result))
        return 0 if ok else 1
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
