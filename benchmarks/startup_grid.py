"""Warm starts through `toolkit.submit`, with and without the grid's Python bytecode cache, in
one call on one GPU: the same grid (ResNet50 `amp_bf16` bs 256, BERT-base seq 128 `amp_bf16`
bs 256, 20 warm-up + 60 measured iterations, 2 repeats) run twice over one torch.compile cache:

- `bytecode cache`: as a user runs it; where the framework was installed without bytecode the
  ranks keep theirs in the grid's cache (`toolkit.rank.bytecode`); repeat 0 starts cold;
- `no bytecode cache`: the grid's `env` sets PYTHONDONTWRITEBYTECODE and a PYTHONPYCACHEPREFIX
  of an empty directory, so every rank compiles the Python source of all it imports, as it
  would without the cache; both repeats find torch.compile's graphs cached by the first grid.

`--part binding` instead runs ResNet50 alone, 2 repeats each of the default case, the case with
`binding: none` and the case without telemetry (`telemetry_interval_ms: 0`), over one compile
cache (only the first run compiles), with the CPUs each run's rank 0 was bound to.

Prints (and writes to `OUT/startup-grid.md`) each run's launch to first iteration, its phases,
what torch.compile found in its cache, whether the bytecode cache was used, and its throughput
(which the cache must leave unchanged); and each grid's whole time.

    OUT=/tmp/s bash benchmarks/startup_grid.sh            # ~7 min on one H100
    python benchmarks/startup_grid.py --smoke --out /tmp/s  # CPU ranks, tiny models: checks it
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

import yaml
from gpu_table import SMOKE_SIZES, START_UP_PHASES, fmt, num, read_runs

ROOT = Path(__file__).resolve().parents[1]


def grid(name: str, env: dict[str, str], smoke: bool) -> dict[str, Any]:
    base: dict[str, Any] = {"framework": "torch", "precision": "amp_bf16", "gpus_per_node": 1,
                            "batch_size_per_device": 256, "warmup_iterations": 20,
                            "measured_iterations": 60, "kernel_tuning": False,
                            "env": {"NCCL_NVLS_ENABLE": "0", **env}}
    configs: list[dict[str, Any]] = [{}, {"seq_len": 128, "masked_positions": 20}]
    if smoke:
        base.update(device="cpu", batch_size_per_device=4, warmup_iterations=2,
                    measured_iterations=3)
        configs = [SMOKE_SIZES["resnet50"], SMOKE_SIZES["bert_base"]]
    return {"name": name, "repeats": 2, "base": base,
            "zip": [{"model": ["resnet50", "bert_base"], "model_config": configs}]}


def binding_grid(smoke: bool) -> dict[str, Any]:
    out = grid("binding", {}, smoke)
    resnet = out["zip"][0]["model_config"][0]
    out["zip"] = [{"model": ["resnet50"] * 3, "model_config": [resnet] * 3,
                   "binding": ["auto", "none", "auto"],
                   "telemetry_interval_ms": [100, 100, 0]}]
    return out


def submit(grid_file: Path, results: Path, log: Path) -> tuple[int, float]:
    t0 = time.time()
    with log.open("w") as fh:
        rc = subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid_file),
                             "--results", str(results)], cwd=ROOT, stdout=fh,
                            stderr=subprocess.STDOUT, check=False).returncode
        subprocess.run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"],
                       cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False)
    return rc, time.time() - t0


def runs(results: Path) -> list[dict[str, str]]:
    """runs.csv's rows by case and repeat, each with what rank 0's meta.json says of the
    bytecode cache (`bytecode`) and the CPUs it was bound to (`cpus`)."""
    rows = [r for _, case_runs in sorted(read_runs(results).items()) for r in case_runs]
    for r in rows:
        meta_file = results / "cases" / r["case_id"] / f"r{r['repeat']}" / "meta.json"
        meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
        r["bytecode"] = "used" if (meta.get("bytecode_cache") or {}).get("directory") else "-"
        binding = (meta.get("ranks") or [{}])[0].get("binding") or {}
        cpus = (binding.get("actual") or {}).get("cpus")
        r["cpus"] = (f"{len(cpus)}: {cpus[0]}-{cpus[-1]}" if cpus
                     else str(binding.get("reason") or "-"))
    return rows


def start_up_cells(r: dict[str, str]) -> str:
    """A run's launch to first iteration, its phases and what torch.compile found, as cells."""
    phases = " / ".join(fmt(num(r.get(c)), ".1f") for c in START_UP_PHASES)
    return (f"{fmt(num(r.get('start_to_first_iteration_s')), '.1f')} | {phases} | "
            f"{r.get('compile_cache') or '-'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "startup_grid_out")))
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--part", choices=["bytecode", "binding"], default="bytecode")
    args = p.parse_args(argv)
    out = args.out.absolute()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.part == "binding":
        return binding_part(out, args.smoke)
    inductor = out / "inductor-cache"  # one torch.compile cache for both grids
    empty = out / "no-bytecode"
    empty.mkdir(exist_ok=True)
    variants = {
        "bytecode cache": {"TORCHINDUCTOR_CACHE_DIR": str(inductor)},
        "no bytecode cache": {"TORCHINDUCTOR_CACHE_DIR": str(inductor),
                              "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(empty)},
    }
    lines = ["| grid | case | repeat | launch to 1st iteration s | launch / setup / build / 1st s"
             " | compile cache | bytecode cache | samples/s |", "|---|---|---|---|---|---|---|---|"]
    totals = []
    for k, (label, env) in enumerate(variants.items()):
        grid_file = out / f"grid-{k}.yaml"
        grid_file.write_text(yaml.safe_dump(grid(f"startup{k}", env, args.smoke)))
        rc, secs = submit(grid_file, out / f"results-{k}", out / "logs" / f"grid-{k}.log")
        totals.append(f"{label}: submit exit {rc}, {secs:.0f} s for the grid")
        print(totals[-1], flush=True)
        lines += [f"| {label} | {r['case_id']} | {r['repeat']} | {start_up_cells(r)} | "
                  f"{r['bytecode']} | {fmt(num(r.get('throughput_sps')), ',.1f')} |"
                  for r in runs(out / f"results-{k}")]
    text = "\n".join([*lines, "", *totals]) + "\n"
    (out / "startup-grid.md").write_text(text)
    print(text)
    return 0


def binding_part(out: Path, smoke: bool) -> int:
    grid_file = out / "grid-binding.yaml"
    grid_file.write_text(yaml.safe_dump(binding_grid(smoke)))
    rc, secs = submit(grid_file, out / "results-binding", out / "logs" / "grid-binding.log")
    lines = ["| case | repeat | launch to 1st iteration s | launch / setup / build / 1st s | "
             "compile cache | rank 0 CPUs | samples/s |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['case_id']} | {r['repeat']} | {start_up_cells(r)} | {r['cpus']} | "
              f"{fmt(num(r.get('throughput_sps')), ',.1f')} |"
              for r in runs(out / "results-binding")]
    text = "\n".join([*lines, "", f"submit exit {rc}, {secs:.0f} s for the grid"]) + "\n"
    (out / "startup-grid.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
