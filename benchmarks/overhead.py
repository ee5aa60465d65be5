"""The toolkit's overhead: the same workload run bare (`bare_resnet50.py`, `bare_bert.py`) and
through `toolkit.submit` (rank discovery, binding, NVML sampling at 100 ms, one event per
iteration), alternating on one machine, same process count. Prints both figures per pair and the
median ratio toolkit / bare. Needs GPUs.

    python benchmarks/overhead.py --gpus 1 2 --alternations 4 --out overhead.json
    python benchmarks/overhead.py --model bert_base --batch-size 256 --compile --gpus 1
    python benchmarks/overhead.py --precision amp_fp16 --loss-scaling static --compile --gpus 1

Both sides compile or both run eager (`--compile`); compiled graphs are reused from Inductor's
cache after the first pair, so later pairs compare steady states.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GRID = """name: overhead
repeats: 1
base:
  framework: torch
  model: {model}
  precision: {precision}
  device: cuda
  compile: {compile}
  batch_size_per_device: {bs}
  gpus_per_node: {gpus}
  warmup_iterations: {warmup}
  measured_iterations: {iters}
  env: {{NCCL_NVLS_ENABLE: 0, TORCH_SYMM_MEM_DISABLE_MULTICAST: 1}}
"""


def grid_text(gpus: int, args: argparse.Namespace) -> str:
    text = GRID.format(model=args.model, precision=args.precision,
                       compile=str(args.compile).lower(), bs=args.batch_size, gpus=gpus,
                       warmup=args.warmup, iters=args.iters)
    if args.precision == "amp_fp16":
        text += f"  loss_scaling: {args.loss_scaling}\n"
    if args.model == "bert_base":
        text += (f"  model_config: {{seq_len: {args.seq_len}, "
                 f"masked_positions: {masked_positions(args.seq_len)}}}\n")
    return text


def masked_positions(seq_len: int) -> int:
    """NVIDIA's 20 masked positions per 128 tokens (what bare_bert.py uses by default)."""
    return max(1, round(seq_len * 20 / 128))


def bare_command(args: argparse.Namespace) -> list[str]:
    cmd = ["--batch-size", str(args.batch_size), "--precision", args.precision,
           "--warmup", str(args.warmup), "--iters", str(args.iters)]
    if args.compile:
        cmd.append("--compile")
    if args.model == "bert_base":
        return [str(ROOT / "benchmarks" / "bare_bert.py"), *cmd, "--seq-len", str(args.seq_len),
                "--masked", str(masked_positions(args.seq_len)),
                "--loss-scaling", args.loss_scaling]
    return [str(ROOT / "benchmarks" / "bare_resnet50.py"), *cmd,
            "--loss-scaling", args.loss_scaling]


def mpirun(n: int) -> list[str]:
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(n), "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def run_bare(gpus: int, args: argparse.Namespace) -> float:
    out = subprocess.run([*mpirun(gpus), sys.executable, *bare_command(args)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    line = next(x for x in out.splitlines() if x.startswith("{"))
    return float(json.loads(line)["bare_throughput_sps"])


def run_toolkit(gpus: int, args: argparse.Namespace, work: Path, k: int) -> float:
    grid = work / f"overhead_{gpus}g.yaml"
    grid.write_text(grid_text(gpus, args))
    results = work / f"results_{gpus}g_{k}"
    subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results",
                    str(results)], check=True, cwd=ROOT, capture_output=True, text=True)
    subprocess.run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"],
                   check=True, cwd=ROOT)
    with (results / "runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["status"] == "ok", rows
    return float(rows[0]["throughput_sps"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    p.add_argument("--alternations", type=int, default=4)
    p.add_argument("--model", choices=["resnet50", "bert_base"], default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=["fp32", "tf32", "amp_bf16", "amp_fp16"],
                   default="amp_bf16")
    p.add_argument("--loss-scaling", choices=["dynamic", "static"], default="dynamic")
    p.add_argument("--compile", action="store_true", help="compile on both sides")
    p.add_argument("--seq-len", type=int, default=128, help="bert_base only")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    report: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in args.gpus:
            pairs = []
            for k in range(args.alternations):
                # alternate which goes first, so drift over time does not favour one side
                if k % 2 == 0:
                    bare = run_bare(gpus, args)
                    tool = run_toolkit(gpus, args, Path(tmp), k)
                else:
                    tool = run_toolkit(gpus, args, Path(tmp), k)
                    bare = run_bare(gpus, args)
                pairs.append((bare, tool))
                print(f"{gpus} GPU(s) pair {k}: bare {bare:.1f}  toolkit {tool:.1f}  "
                      f"ratio {tool / bare:.4f}", flush=True)
            ratios = [t / b for b, t in pairs]
            summary = {"pairs": pairs, "ratios": ratios, "median_ratio": statistics.median(ratios),
                       "bare_median": statistics.median(b for b, _ in pairs),
                       "toolkit_median": statistics.median(t for _, t in pairs)}
            report[f"{gpus}gpu"] = summary
            print(f"{gpus} GPU(s): bare median {summary['bare_median']:.1f}, toolkit median "
                  f"{summary['toolkit_median']:.1f}, median ratio {summary['median_ratio']:.4f}",
                  flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
