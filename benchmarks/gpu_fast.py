"""The torch run options' GPU measurements in one go (about 8 minutes on one H200 or on
2 x H200):
the toolkit's ResNet50 and BERT workloads at the settings expected to be fastest, through
`toolkit.submit` as a user runs them, with TFLOP/s, MFU and the loss sanity check, beside the
plain-script figures and the targets of `shared/reference/performance.md`.

    OUT=/tmp/out bash benchmarks/gpu_fast.sh          # or: python benchmarks/gpu_fast.py --out DIR

Cases (1 GPU unless said; compiled, as the toolkit defaults to on CUDA):
  required  ResNet50 amp_bf16 bs 256, 2 GPUs of the same (when two are visible), ResNet50 tf32
            bs 256, ResNet50 amp_fp16 bs 256 with dynamic and with static loss scaling, BERT-base
            seq 128 amp_bf16 bs 256
  extra     BERT bs 128 (the plain script's batch), BERT bs 256 with CUDA graphs, ResNet50
            amp_bf16 bs 384
Extras run only while the time budget lasts.

Phase 1 compiles every case at once (a few warm-up steps each, `binding: none`, as many at a time
as GPU memory allows) so that Inductor's on-disk caches hold their graphs; phase 2 measures the
cases one after another, each reusing its compiled graphs, so compile time is paid once and in
parallel. While phase 1 runs, the bare ResNet50 script profiles where the GPU time goes; kernel
durations are per kernel, so sharing the GPU with compiling processes does not change its shares
much (it is labelled as such).

Writes under OUT: `results/` (the toolkit's results directory: runs.csv, summary.csv, report.md,
every rank's events), `table.md` (the table printed at the end), `gpu_fast.json`, `logs/`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
       "NVSHMEM_DISABLE_NVLS": "1", "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
       "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
RN50 = {"model": "resnet50"}
BERT128 = {"model": "bert_base", "model_config": {"seq_len": 128, "masked_positions": 20}}


@dataclass
class Bench:
    name: str
    """The case id (the grid's `name`), also the row label."""
    fields: dict[str, Any]
    required: bool
    plain: str = ""
    """The plain script's figure from performance.md, for the table."""
    target: float | None = None
    """Throughput to reach (samples/s per GPU); None: no target."""
    gpus: int = 1
    vs: str = ""
    """Several GPUs: the 1-GPU bench its speedup is taken against (default: same fields)."""
    result: dict[str, Any] = field(default_factory=dict)


def benches(two_gpus: bool) -> list[Bench]:
    out = [
        Bench("rn50-bf16-bs256", {**RN50, "precision": "amp_bf16", "batch_size_per_device": 256},
              True, "4,736 eager / 6,860 compiled", 7300.0),
        Bench("rn50-tf32-bs256", {**RN50, "precision": "tf32", "batch_size_per_device": 256},
              True, "3,030 eager (bs128) / 3,890 compiled", 4000.0),
        Bench("rn50-fp16dyn-bs256", {**RN50, "precision": "amp_fp16",
                                     "loss_scaling": "dynamic", "batch_size_per_device": 256},
              True, "seed: static 0.8-4.7% faster"),
        Bench("rn50-fp16static-bs256", {**RN50, "precision": "amp_fp16",
                                        "loss_scaling": "static", "batch_size_per_device": 256},
              True, "seed: static 0.8-4.7% faster"),
        Bench("bert128-bf16-bs256", {**BERT128, "precision": "amp_bf16",
                                     "batch_size_per_device": 256},
              True, "3,627 eager (bs256)", 4500.0),
        Bench("bert128-bf16-bs128", {**BERT128, "precision": "amp_bf16",
                                     "batch_size_per_device": 128},
              False, "3,066 eager / 4,002 compiled", 4500.0),
        Bench("bert128-bf16-bs256-graphs", {**BERT128, "precision": "amp_bf16",
                                            "batch_size_per_device": 256, "cuda_graphs": True},
              False, "3,627 eager (bs256)", 4500.0),
        Bench("rn50-bf16-bs384", {**RN50, "precision": "amp_bf16", "batch_size_per_device": 384},
              False, "6,860 compiled (bs256)", 7300.0),
    ]
    if two_gpus:
        bf16 = {**RN50, "precision": "amp_bf16", "batch_size_per_device": 256}
        out.insert(1, Bench("rn50-bf16-bs256-2gpu", bf16,
                            True, "speedup 1.953 eager / 1.905 compiled", None, gpus=2))
        # Extras: one DDP bucket for all gradients (one compiled graph, one all-reduce after
        # the backward) against the 1-GPU compiled case; and the eager pair.
        out += [Bench("rn50-bf16-bs256-2gpu-b200", {**bf16, "ddp_bucket_mb": 200}, False,
                      "speedup 1.905 compiled", None, gpus=2, vs="rn50-bf16-bs256"),
                # Fewer NCCL channels (CTAs) for the all-reduce that overlaps the backward:
                # fewer SMs taken from the compute kernels; 100 MB per 37 ms step needs little
                # bandwidth.
                *(Bench(f"rn50-bf16-bs256-2gpu-nch{n}",
                        {**bf16, "env": {**ENV, "NCCL_MAX_NCHANNELS": str(n)}}, False,
                        "speedup 1.905 compiled", None, gpus=2, vs="rn50-bf16-bs256")
                  for n in (2, 4, 8)),
                Bench("rn50-bf16-bs256-eager", {**bf16, "compile": False}, False,
                      "4,736 eager", 7300.0),
                Bench("rn50-bf16-bs256-2gpu-eager", {**bf16, "compile": False}, False,
                      "speedup 1.953 eager", None, gpus=2)]
    return out


SMOKE_SIZES = {
    "resnet50": {"image_size": 32, "resnet_layers": [1, 1, 1, 1], "num_classes": 10},
    "bert_base": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                  "seq_len": 32, "vocab_size": 500, "masked_positions": 5},
}


def grid_for(b: Bench, *, warmup: int, measured: int, prewarm: bool, eager: bool,
             smoke: bool = False) -> str:
    base: dict[str, Any] = {
        "framework": "torch", "device": "cuda", "gpus_per_node": b.gpus,
        "warmup_iterations": warmup, "measured_iterations": measured,
        "name": b.name + ("-prewarm" if prewarm else ""), "env": dict(ENV),
        "slurm": {"time_min": 15}, **b.fields}
    if prewarm:
        base.update(binding="none", telemetry_interval_ms=0)
    if eager:
        base["compile"] = False
        base.pop("cuda_graphs", None)
    if smoke:  # the same flow on CPU ranks at a tiny size: checks this script, measures nothing
        base.update(device="cpu", batch_size_per_device=4,
                    model_config=SMOKE_SIZES[base["model"]])
    return yaml.safe_dump({"name": "gpu_fast", "repeats": 1, "base": base}, sort_keys=False)


def run_until(cmd: list[str], log: Path, deadline: float) -> tuple[int, float]:
    """Run `cmd` with output to `log`; (exit code, seconds). At `deadline` (time.time()) it is
    killed with everything it started (its own session: mpirun and the ranks), exit code -9."""
    t0 = time.time()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -9
    return rc, time.time() - t0


def submit(grid: Path, results: Path, log: Path, deadline: float) -> tuple[int, float]:
    """One grid through the toolkit, as a user runs it."""
    return run_until([sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results",
                      str(results)], log, deadline)


def profile_bare(log: Path, deadline: float) -> tuple[int, float]:
    """The bare ResNet50 bf16 script, compiled, with `--profile 10` (prints the table)."""
    return run_until([sys.executable, str(ROOT / "benchmarks" / "bare_resnet50.py"), "--compile",
                      "--precision", "amp_bf16", "--batch-size", "256", "--warmup", "15",
                      "--iters", "20", "--profile", "10"], log, deadline)


def gpu_info() -> tuple[int, float, str]:
    import torch

    n = torch.cuda.device_count()
    if n == 0:
        raise SystemExit("gpu_fast: no CUDA device visible")
    props = torch.cuda.get_device_properties(0)
    return n, props.total_memory / 2**30, props.name


def read_results(results: Path, items: list[Bench]) -> None:
    """Fill each bench's result from runs.csv (one run per case) and its rank-0 summary event;
    the 2-GPU case's speedup is against the 1-GPU case of the same settings."""
    with (results / "runs.csv").open() as fh:
        runs = {r["case_id"]: r for r in csv.DictReader(fh)}
    for b in items:
        run = runs.get(b.name)
        if run is None:
            continue
        b.result.update(status=run.get("status"), error=run.get("error") or None)
        for key in ("throughput_sps", "tflops_per_gpu", "mfu", "peak_memory_mib",
                    "framework_peak_memory_mib"):
            b.result[key] = float(run[key]) if run.get(key) else None
        events = results / "cases" / b.name / "r0" / "rank000.jsonl"
        if events.exists():
            for line in events.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("type") == "summary":
                    b.result["loss_check"] = rec.get("loss_check", {}).get("passed")
                    b.result["run_options"] = rec.get("run_options")
                    b.result["optimizer"] = rec.get("optimizer")
    for b in items:
        one = next((o for o in items if o.gpus == 1 and (
            o.name == b.vs if b.vs else o.fields == b.fields)), None)
        if b.gpus > 1 and one and b.result.get("throughput_sps") and \
                one.result.get("throughput_sps"):
            b.result["speedup"] = b.result["throughput_sps"] / one.result["throughput_sps"]


def fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def table(items: list[Bench], device: str) -> str:
    lines = [f"Device: {device}. Throughput per GPU (samples/s) of one run; TFLOP/s and MFU "
             "by toolkit.analysis.flops (dense bf16/tf32 peak); peak memory by NVML.", "",
             "| case | status | samples/s per GPU | TFLOP/s | MFU | plain script | target | met |"
             " loss falls | peak MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for b in items:
        r = b.result
        if not r:
            lines.append(f"| {b.name} | skipped (time budget) | | | | {b.plain} | | | | |")
            continue
        tput = r.get("throughput_sps")
        per_gpu = tput / b.gpus if tput else None
        met = "" if b.target is None or per_gpu is None else (
            "yes" if per_gpu >= b.target else "no")
        target = fmt(b.target) if b.target else ""
        if b.gpus > 1:
            speedup = r.get("speedup")
            target, met = ">= 1.97 speedup", ("" if speedup is None else
                                                ("yes" if speedup >= 1.97 else "no"))
            tput_text = f"{fmt(per_gpu)} (speedup {fmt(speedup, '.3f')})"
        else:
            tput_text = fmt(per_gpu)
        status = r.get("status") or "?"
        if r.get("error"):
            status += f": {str(r['error'])[:60]}"
        lines.append(f"| {b.name} | {status} | {tput_text} | {fmt(r.get('tflops_per_gpu'), '.1f')}"
                     f" | {fmt(r.get('mfu'), '.1%')} | {b.plain} | {target} | {met} | "
                     f"{r.get('loss_check')} | {fmt(r.get('peak_memory_mib'))} |")
    dyn = next((b for b in items if b.name == "rn50-fp16dyn-bs256"), None)
    sta = next((b for b in items if b.name == "rn50-fp16static-bs256"), None)
    if dyn and sta and dyn.result.get("throughput_sps") and sta.result.get("throughput_sps"):
        d, s = dyn.result["throughput_sps"], sta.result["throughput_sps"]
        lines += ["", f"amp_fp16 ResNet50 bs 256: static loss scaling {s:,.0f} vs dynamic "
                  f"{d:,.0f} img/s: static is {100 * (s / d - 1):+.2f}% (seed: +0.8 to +4.7%)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_fast_out")))
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="stop starting new cases after this many seconds (default 480)")
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--measured", type=int, default=60)
    p.add_argument("--eager", action="store_true", help="compile nothing (eager baselines)")
    p.add_argument("--no-prewarm", action="store_true")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--smoke", action="store_true",
                   help="check this script without a GPU: tiny models on CPU ranks, no profile")
    p.add_argument("--only", default="",
                   help="comma-separated case names: run these (all as required), no others")
    args = p.parse_args(argv)
    t0 = time.time()
    os.environ.update(ENV)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/trainbench_inductor_cache")
    out = args.out.resolve()
    logs, results, grids = out / "logs", out / "results", out / "grids"
    for d in (logs, grids):
        d.mkdir(parents=True, exist_ok=True)
    if results.exists():
        shutil.rmtree(results)
    n_gpus, mem_gib, device = (2, 64.0, "cpu (smoke)") if args.smoke else gpu_info()
    items = benches(n_gpus >= 2)
    if args.only:
        wanted = [x.strip() for x in args.only.split(",") if x.strip()]
        unknown = sorted(set(wanted) - {b.name for b in items})
        if unknown:
            p.error(f"--only: no such case here: {', '.join(unknown)} (cases: "
                    f"{', '.join(b.name for b in items)})")
        items = [dataclasses.replace(b, required=True) for b in items if b.name in wanted]
    print(f"gpu_fast: {n_gpus} x {device} ({mem_gib:.0f} GiB); {len(items)} cases; budget "
          f"{args.budget_s:.0f} s; out {out}", flush=True)

    # phase 1 ends by this time, whatever is still compiling (phase 2 then compiles it itself)
    phase1_end = t0 + 0.55 * args.budget_s
    profile: concurrent.futures.Future[tuple[int, float]] | None = None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    if not args.no_profile and not args.eager and not args.smoke:
        profile = pool.submit(profile_bare, logs / "profile_bare_resnet50.log", phase1_end)
    if not args.no_prewarm and not args.eager:
        slots = max(1, int(mem_gib // 32))  # ~11-30 GiB per case at these batch sizes
        print(f"phase 1: compiling {len(items)} cases, {slots} at a time (until "
              f"{phase1_end - t0:.0f} s)", flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=slots) as warm:
            futures = {}
            for b in items:
                grid = grids / f"{b.name}-prewarm.yaml"
                grid.write_text(grid_for(b, warmup=3, measured=1, prewarm=True, eager=False,
                                         smoke=args.smoke))
                futures[warm.submit(submit, grid, out / "prewarm" / b.name,
                                    logs / f"{b.name}-prewarm.log", phase1_end)] = b
            for fut in concurrent.futures.as_completed(futures):
                rc, secs = fut.result()
                print(f"  compiled {futures[fut].name}: exit {rc} in {secs:.0f} s", flush=True)
        shutil.rmtree(out / "prewarm", ignore_errors=True)
    if profile is not None:
        rc, secs = profile.result()
        print(f"  profile (bare ResNet50): exit {rc} in {secs:.0f} s", flush=True)
    pool.shutdown()

    print(f"phase 2: measuring ({time.time() - t0:.0f} s so far)", flush=True)
    last = 45.0
    for b in items:
        left = args.budget_s - (time.time() - t0)
        if not b.required and left < 1.2 * last:
            print(f"  skip {b.name}: {left:.0f} s left", flush=True)
            continue
        grid = grids / f"{b.name}.yaml"
        grid.write_text(grid_for(b, warmup=args.warmup, measured=args.measured, prewarm=False,
                                 eager=args.eager, smoke=args.smoke))
        rc, last = submit(grid, results, logs / f"{b.name}.log",
                          time.time() + max(120.0, left + 60))
        print(f"  {b.name}: exit {rc} in {last:.0f} s", flush=True)
    subprocess.run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"], cwd=ROOT,
                   check=False)
    if (results / "summary.csv").exists():
        read_results(results, items)
    text = table(items, f"{n_gpus} x {device}")
    prof_log = logs / "profile_bare_resnet50.log"
    if prof_log.exists():
        prof = [x for x in prof_log.read_text().splitlines()
                if not x.startswith(("{", "W", "I", "["))]
        start = next((i for i, x in enumerate(prof) if x.startswith("profile:")), None)
        if start is not None:
            text += ("\n\nWhere the GPU time of ResNet50 bf16 bs 256 goes (bare script, compiled; "
                     "profiled while other cases compiled):\n\n```\n"
                     + "\n".join(prof[start:]) + "\n```")
    text += f"\n\nTotal wall time: {time.time() - t0:.0f} s."
    (out / "table.md").write_text(text + "\n")
    (out / "gpu_fast.json").write_text(json.dumps(
        {"device": device, "gpus": n_gpus, "wall_s": time.time() - t0,
         "cases": [{"name": b.name, "fields": b.fields, "gpus": b.gpus, **b.result}
                   for b in items]}, indent=2, default=str))
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
