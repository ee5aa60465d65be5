"""How fast `toolkit.collect` reads a large results tree, against merely reading the JSON.

Writes a realistic native results tree (default: 250 cases x 5 repeats = 1,250 runs of 8 ranks,
10,000 rank files of 200 iterations each, with telemetry samples, summary and end records, the
executor's status.json and rank 0's meta.json), then, in one run and in alternation:

  (a) reads every rank file and JSON-decodes every line, nothing else (one process);
  (b) runs `python -m toolkit.collect <tree> --out <dir> --quiet` as a user would (a new
      process: interpreter start, imports, validation, CSVs, report, plots, HTML).

and prints both times and the ratio b / a (best of the rounds for each; the target is <= 2),
and the same for CPU time (user + system, collect's pool included), which a machine shared
with other work disturbs less than wall time.

    python benchmarks/collect_speed.py                       # the 10,000-file tree in a tmp dir
    python benchmarks/collect_speed.py --runs 100 --rounds 1  # quick look
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from toolkit.results.layout import CaseDir, rank_file  # noqa: E402
from toolkit.results.safe_write import atomic_write_json  # noqa: E402
from toolkit.results.schema import SCHEMA  # noqa: E402
from toolkit.spec import Case, resolve  # noqa: E402

REPEATS = 5
WARMUP = 20


def _rank_text(rank: int, world: int, iterations: int, samples: int, seed: int, *,
               gpus_per_node: int = 8, telemetry_interval_s: float | None = None,
               start_up_s: float = 5.0, t0_s: float | None = None) -> str:
    """One rank's event file, shaped like the worker's (toolkit.rank.event_writer).

    Telemetry: one sample every 10th iteration by default; with `telemetry_interval_s`, one
    every that many seconds as the worker's sampler writes them (from `start_up_s` before the
    first iteration, while the model is built, to the end), and the summary names the CPUs
    the rank was bound to as a bound rank's does. `t0_s`: the wall-clock time of its `start`
    record (default: a time of its own for each seed)."""
    rnd = random.Random(seed)
    t0 = 1_700_000_000.0 + seed if t0_s is None else t0_s
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    node = rank // gpus_per_node
    lines = [dumps({"schema": SCHEMA, "type": "start", "rank": rank, "time_s": t0,
                    "world_size": world, "local_rank": rank % gpus_per_node,
                    "node_index": node, "host": f"node{node:03d}", "case_id": "c",
                    "config_hash": "0" * 12, "repeat": 0, "pid": 1000 + rank})]

    def telemetry(at_s: float) -> str:
        return dumps({"schema": SCHEMA, "type": "telemetry", "rank": rank,
                      "time_s": t0 + at_s, "memory_used_mib": 14000.0 + rnd.uniform(0, 100),
                      "utilization_pct": rnd.uniform(90, 100),
                      "power_w": rnd.uniform(600, 700), "sm_clock_mhz": 1980.0,
                      "temperature_c": 60.0 + rnd.uniform(0, 5), "monotonic_s": 1e5 + at_s})

    start_s = t0 + start_up_s if telemetry_interval_s else t0 + 5.0  # first iteration's start
    sampled_s = 0.0  # telemetry written up to here, seconds after t0
    if telemetry_interval_s:
        while sampled_s < start_up_s:
            lines.append(telemetry(sampled_s))
            sampled_s += telemetry_interval_s
    elapsed = 0.0
    for i in range(1, iterations + 1):
        step = 0.3 * (3.0 if i == 1 else 1.0) * rnd.uniform(0.98, 1.02)
        elapsed += step
        lines.append(dumps({"schema": SCHEMA, "type": "iter", "rank": rank,
                            "time_s": start_s + elapsed, "iteration": i, "elapsed_s": elapsed,
                            "step_time_s": step, "samples": samples,
                            "loss": 7.0 - 0.01 * i + rnd.uniform(-0.05, 0.05),
                            "warmup": i <= WARMUP}))
        if telemetry_interval_s:
            while sampled_s <= start_s - t0 + elapsed:
                lines.append(telemetry(sampled_s))
                sampled_s += telemetry_interval_s
        elif i % 10 == 0:
            lines.append(dumps({"schema": SCHEMA, "type": "telemetry", "rank": rank,
                                "time_s": t0 + 5.0 + elapsed, "monotonic_s": elapsed,
                                "memory_used_mib": 14000.0 + rnd.uniform(0, 100),
                                "utilization_pct": rnd.uniform(90, 100),
                                "power_w": rnd.uniform(600, 700), "sm_clock_mhz": 1980}))
    summary: dict[str, Any] = {"schema": SCHEMA, "type": "summary", "rank": rank,
                               "time_s": start_s + 1.0 + elapsed, "device": "NVIDIA H200",
                               "framework_peak_memory_mib": 11455.0,
                               "telemetry": {"peak_memory_mib": 14100.0, "source": "nvml"}}
    if telemetry_interval_s:
        per_gpu = 12  # a 96-core node's CPUs shared out among its 8 GPUs
        local = rank % gpus_per_node
        summary.update(cpus=list(range(local * per_gpu, (local + 1) * per_gpu)),
                       host_cpus=per_gpu * gpus_per_node)
    lines.append(dumps(summary))
    lines.append(dumps({"schema": SCHEMA, "type": "end", "rank": rank,
                        "time_s": start_s + 2.0 + elapsed, "wall_s": 7.0 + elapsed}))
    return "\n".join(lines) + "\n"


def write_case(root: Path, index: int, ranks: int, iterations: int,
               meta: Callable[[Case, int, int], dict[str, Any]] | None = None) -> int:
    """Case `index` of a generated tree: ResNet50 on `ranks` ranks, REPEATS runs of
    `iterations` iterations each, finished (status ok); meta.json holds the case id, the
    repeat and `meta(case, index, repeat)`. Returns the rank files written."""
    case = resolve(Case.from_dict({
        "model": "resnet50", "precision": "amp_bf16", "gpus_per_node": ranks,
        "batch_size_per_device": 1 + index, "warmup_iterations": WARMUP,
        "measured_iterations": iterations - WARMUP}))
    cdir = CaseDir(root, case.base_id())
    cdir.write_case(case)
    for repeat in range(REPEATS):
        run = cdir.run_dir(repeat)
        run.mkdir(parents=True)
        for rank in range(ranks):
            text = _rank_text(rank, ranks, iterations, case.global_batch_size,
                              seed=(index * REPEATS + repeat) * ranks + rank)
            rank_file(run, rank).write_text(text)
        atomic_write_json(run / "meta.json", {"case_id": case.base_id(), "repeat": repeat,
                                              **(meta(case, index, repeat) if meta else {})},
                          root=run)
        atomic_write_json(run / "status.json", {"status": "ok", "log": "output.log"},
                          root=run)
    return REPEATS * ranks


def _write_case(job: tuple[Path, int, int, int]) -> int:
    return write_case(*job)


def generate(root: Path, runs: int, ranks: int, iterations: int) -> int:
    cases = max(1, runs // REPEATS)
    jobs = [(root, i, ranks, iterations) for i in range(cases)]
    with multiprocessing.Pool() as pool:
        return sum(pool.imap_unordered(_write_case, jobs, chunksize=4))


def read_and_decode(root: Path) -> int:
    """(a): every line of every rank file through json.loads; the count of records."""
    count = 0
    loads = json.loads
    for path in sorted(root.glob("cases/*/r*/rank*.jsonl")):
        for line in path.read_bytes().splitlines():
            loads(line)
            count += 1
    return count


def run_collect(root: Path, out: Path, jobs: int) -> None:
    """(b): the command a user runs."""
    subprocess.run([sys.executable, "-m", "toolkit.collect", str(root), "--out", str(out),
                    "--quiet", "--jobs", str(jobs)], check=True, cwd=ROOT)


def _children_cpu_s() -> float:
    """User + system CPU seconds of the finished child processes (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1250, help="runs (5 repeats per case)")
    p.add_argument("--ranks", type=int, default=8, help="rank files per run")
    p.add_argument("--iterations", type=int, default=200, help="iterations per rank file")
    p.add_argument("--rounds", type=int, default=2, help="alternations of (a) and (b)")
    p.add_argument("--dir", type=Path, default=None, help="where to build the tree (kept)")
    p.add_argument("--jobs", type=int, default=0,
                   help="collect's --jobs (default 0: one process per CPU; 1: serial)")
    args = p.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="collect_speed_"))
    root, out = work / "results", work / "collected"
    try:
        if not (root / "cases").is_dir():
            t = time.perf_counter()
            files = generate(root, args.runs, args.ranks, args.iterations)
            size = sum(f.stat().st_size for f in root.glob("cases/*/r*/rank*.jsonl"))
            print(f"wrote {files} rank files ({size / 2**20:.0f} MiB) in "
                  f"{time.perf_counter() - t:.1f} s under {root}")
        read_and_decode(root)  # warm the page cache for both
        times_a, times_b, cpu_a, cpu_b = [], [], [], []
        for k in range(args.rounds):
            t, c = time.perf_counter(), time.process_time()
            records = read_and_decode(root)
            times_a.append(time.perf_counter() - t)
            cpu_a.append(time.process_time() - c)
            t, c = time.perf_counter(), _children_cpu_s()
            run_collect(root, out, args.jobs)
            times_b.append(time.perf_counter() - t)
            cpu_b.append(_children_cpu_s() - c)  # collect and its pool's processes
            print(f"round {k + 1}: (a) read + decode {records} records {times_a[-1]:.2f} s "
                  f"(CPU {cpu_a[-1]:.2f} s), (b) toolkit.collect {times_b[-1]:.2f} s "
                  f"(CPU {cpu_b[-1]:.2f} s); load average {os.getloadavg()[0]:.1f}")
        with (out / "runs.csv").open() as fh:
            rows = sum(1 for _ in fh) - 1
        a, b = min(times_a), min(times_b)
        print(json.dumps({"rank_files": args.runs // REPEATS * REPEATS * args.ranks,
                          "iterations": args.iterations, "records": records, "runs_csv_rows": rows,
                          "jobs": args.jobs, "cpus": len(os.sched_getaffinity(0)),
                          "read_decode_s": round(a, 3), "collect_s": round(b, 3),
                          "ratio": round(b / a, 3),
                          "cpu_read_decode_s": round(min(cpu_a), 3),
                          "cpu_collect_s": round(min(cpu_b), 3),
                          "cpu_ratio": round(min(cpu_b) / min(cpu_a), 3)}))
        return 0 if b / a <= 2 else 1
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
