"""How fast the results store takes runs in, and answers over a large store.

`ingest`: writes a native results tree of N runs (default 100,000: 20,000 cases x 5 repeats,
one rank file of 25 iterations each, with rank 0's meta.json and the executor's status.json),
then measures, in one process:

  (a) reading every rank file and JSON-decoding every line, nothing else;
  (b) `toolkit.results.scan.collect_runs` (what collect reads: every run's files -> rows);
  (c) `toolkit.store.ingest.ingest` of those rows into a fresh SQLite store (and, with
      `--postgres`, a fresh database on a throw-away PostgreSQL server);
  (d) `ingest` again (every run already there: the idempotent path);

and prints the times and the ratios c / a and (b + c) / a (target: ingest <= 2 x reading).

`query`: bulk-inserts a store of N runs (default 1,000,000: 1,000 cases x 100 results
directories x 10 repeats, two GPU models, four drivers over time) with the rows as ingest would
write them, then times, each as a user runs it (a new process: interpreter start and imports
included):

  compare of two results directories (1,000 cases x 10 repeats a side),
  compare of two drivers on one GPU model (1,000 cases x 100-130 repeats a side),
  history of one case (1,000 runs), and of every case (all N runs, 100,000 points).

    python benchmarks/store_speed.py ingest [--runs 100000] [--postgres]
    python benchmarks/store_speed.py query [--runs 1000000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from collect_speed import REPEATS, WARMUP, read_and_decode, write_case  # noqa: E402

from toolkit.spec import Case  # noqa: E402

ITERATIONS = WARMUP + 5
T0 = 1_780_000_000.0


def _provenance(case: Case, index: int, repeat: int) -> dict[str, object]:
    """What a run's meta.json adds for the store: when, where, which software."""
    return {"config_hash": case.config_hash(), "started_s": T0 + index * 60 + repeat,
            "hosts": ["node001"],
            "versions": {"torch": "2.14.1", "cuda": "13.0", "nccl": "2.28.9",
                         "driver": "580.159.04"},
            "case": {"framework": "torch", "slurm": {"partition": "gpu"}},
            "ranks": [{"rank": 0, "device": "NVIDIA H200"}]}


def _write_case(job: tuple[Path, int]) -> int:
    root, index = job
    return write_case(root, index, 1, ITERATIONS, _provenance)


def generate(root: Path, runs: int) -> int:
    jobs = [(root, i) for i in range(max(1, runs // REPEATS))]
    with multiprocessing.Pool(2) as pool:
        return sum(pool.imap_unordered(_write_case, jobs, chunksize=50))


def bench_ingest(args: argparse.Namespace) -> dict[str, object]:
    from toolkit.results.scan import collect_runs
    from toolkit.store.db import open_store
    from toolkit.store.ingest import ingest

    work = args.dir or Path(tempfile.mkdtemp(prefix="store_speed_"))
    root = work / "results"
    try:
        if not (root / "cases").is_dir():
            t = time.perf_counter()
            made = generate(root, args.runs)
            print(f"wrote {made} runs in {time.perf_counter() - t:.1f} s under {root}",
                  flush=True)
        read_and_decode(root)  # warm the page cache
        t = time.perf_counter()
        records = read_and_decode(root)
        read_s = time.perf_counter() - t
        t = time.perf_counter()
        rows, _ = collect_runs(root, args.jobs)
        scan_s = time.perf_counter() - t
        out: dict[str, object] = {"runs": len(rows), "records": records,
                                  "read_decode_s": round(read_s, 2),
                                  "collect_runs_s": round(scan_s, 2)}
        sqlite_store = work / "store.sqlite"
        sqlite_store.unlink(missing_ok=True)  # a fresh store each time
        targets = [("sqlite", str(sqlite_store))]
        server = None
        if args.postgres:
            from toolkit.store.pgserver import throwaway_server
            server = throwaway_server()
            targets.append(("postgresql", server.__enter__().create_database("bench")))
        try:
            for name, url in targets:
                engine = open_store(url)
                t = time.perf_counter()
                first = ingest(engine, rows, root)
                ingest_s = time.perf_counter() - t
                t = time.perf_counter()
                again = ingest(engine, rows, root)
                again_s = time.perf_counter() - t
                engine.dispose()
                assert first.added == len(rows) and again.added == 0
                out.update({f"{name}_ingest_s": round(ingest_s, 2),
                            f"{name}_ingest_again_s": round(again_s, 2),
                            f"{name}_ratio_ingest_to_read": round(ingest_s / read_s, 3),
                            f"{name}_ratio_scan_plus_ingest_to_read":
                                round((scan_s + ingest_s) / read_s, 3)})
                print(json.dumps(out), flush=True)
        finally:
            if server is not None:
                server.__exit__(None, None, None)
        return out
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


CASES, DIRS, PER = 1000, 100, 10
DRIVERS = ("550.54.15", "560.35.03", "570.86.10", "580.159.04")


def fill(url: str, runs: int) -> None:
    """A store of `runs` runs, bulk-inserted (results directory by results directory)."""
    import random

    from sqlalchemy import insert

    from toolkit.store.db import open_store, writing
    from toolkit.store.ingest import run_key
    from toolkit.store.schema import runs as table

    engine = open_store(url)
    rnd = random.Random(0)
    dirs = max(1, runs // (CASES * PER))
    for d in range(dirs):
        day = T0 + d * 86400 * 0.6  # 100 directories over two months
        driver = DRIVERS[d * len(DRIVERS) // dirs]
        gpu = "NVIDIA H200" if d % 2 == 0 else "NVIDIA H100 80GB HBM3"
        rows = []
        for c in range(CASES):
            level = 1000.0 + c * (1.03 if driver == DRIVERS[-1] else 1.0)
            for r in range(PER):
                started = day + c * 30 + r
                rows.append({
                    "run_key": run_key("h", f"case{c:04d}", f"r{r} at {started!r}"),
                    "origin": "trainbench", "config_hash": f"{c:012x}", "case_id": f"case{c:04d}",
                    "repeat": r, "status": "ok", "framework": "torch", "model": "gpt",
                    "precision": "amp_bf16", "variant": "", "num_nodes": 1, "gpus_per_node": 8,
                    "batch_size_per_device": 8,
                    "throughput_sps": level * (1 + 0.01 * rnd.gauss(0, 1)),
                    "step_time_median_s": 0.5, "peak_memory_mib": 60000.0,
                    "loss_first": 7.0, "loss_last": 6.0, "gpu_model": gpu, "driver": driver,
                    "cuda": "13.0", "nccl": "2.28.9", "framework_version": "2.14.1",
                    "container_image": None, "hosts": "node001", "clocks": None,
                    "git_commit": f"{d:07x}", "partition": "gpu", "started_s": started,
                    "results_dir": f"/results/nightly-{d:03d}",
                    "source": f"/results/nightly-{d:03d}/cases/case{c:04d}/r{r}",
                    "ingested_s": started})
        with writing(engine) as conn:
            conn.execute(insert(table), rows)
    engine.dispose()


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - t, 2)


def bench_query(args: argparse.Namespace) -> dict[str, object]:
    work = args.dir or Path(tempfile.mkdtemp(prefix="store_query_"))
    url = str(work / "store.sqlite")
    try:
        if not Path(url).exists():
            t = time.perf_counter()
            fill(url, args.runs)
            print(f"filled {args.runs} runs in {time.perf_counter() - t:.1f} s "
                  f"({Path(url).stat().st_size / 2**20:.0f} MiB)", flush=True)
        out: dict[str, object] = {"runs": args.runs, "store_mib": round(
            Path(url).stat().st_size / 2**20)}
        store = ["--store", url, "--quiet"]
        out["compare_two_dirs_s"] = timed([
            "toolkit.compare", "results_dir=/results/nightly-010",
            "results_dir=/results/nightly-012", "--out", str(work / "c1"), *store])
        out["compare_two_drivers_s"] = timed([
            "toolkit.compare", f"driver={DRIVERS[0]},until=2026-06-29",
            f"driver={DRIVERS[-1]},since=2026-07-15", "--where", "gpu=H200",
            "--out", str(work / "c2"), *store])
        out["history_one_case_s"] = timed(["toolkit.history", "--case", "case0007", "--by",
                                           "driver", "--out", str(work / "h1"), *store])
        out["history_every_case_s"] = timed(["toolkit.history", "--out", str(work / "h2"),
                                             "--max-plots", "20", *store])
        out["python_start_and_imports_s"] = timed(["toolkit.compare", "--help"])
        print(json.dumps(out), flush=True)
        return out
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("ingest", "query"))
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--dir", type=Path, default=None, help="where to build (kept)")
    p.add_argument("--jobs", type=int, default=0, help="collect_runs' processes (0: per CPU)")
    p.add_argument("--postgres", action="store_true",
                   help="ingest: also into a throw-away PostgreSQL")
    args = p.parse_args(argv)
    if args.what == "ingest":
        args.runs = args.runs or 100_000
        result = bench_ingest(args)
        return 0 if float(result["sqlite_ratio_ingest_to_read"]) <= 2 else 1  # type: ignore[arg-type]
    args.runs = args.runs or CASES * DIRS * PER
    bench_query(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
