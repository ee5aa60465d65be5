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

`--part cudnn` runs ResNet50 `amp_bf16` and `tf32`, 2 repeats each, with cuDNN's benchmark mode
off (the default: cuDNN's heuristics choose each convolution's algorithm) and on (every process
times the candidates): what the timing costs the first iteration and gives the throughput.

`--part table` runs the time-to-a-table grid: ResNet50 `amp_bf16` and `tf32` and BERT `amp_bf16`,
2 repeats each, every option at its default, and prints the whole grid's time;
`--part table-untuned` the same with `kernel_tuning: false`. `--rerun` then runs the grid
again into a new results directory over the first one's compile cache (its `env` names it).

`--part cold` runs ResNet50 and BERT `amp_bf16` once each from an empty compile cache
(`kernel_tuning: false`), each grid under py-spy, and sums up where the cold start went.

`--part worker` asks where a warm worker's first iteration goes: after a grid of ResNet50 alone
(repeat 0 compiles, repeat 1 starts warm) it starts more warm repeats of the case with the
case's own `run_local.sh`, as the grid ran them: as is, with Inductor compiling in-process
(`TORCHINDUCTOR_COMPILE_THREADS=1`), and under py-spy (Python stacks, idle ones included, of
the job's processes); then the same case in-process (`startup_profile.py`'s rank code, over the
grid's caches) under py-spy too. Each py-spy profile is summed up by function (inclusive
seconds of the rank's main thread) in `OUT/startup-grid.md`; the raw stacks stay in `OUT/`.

Prints (and writes to `OUT/startup-grid.md`) each run's launch to first iteration, its phases,
what torch.compile found in its cache, whether the bytecode cache was used, and its throughput
(which the cache must leave unchanged); and each grid's whole time.

    OUT=/tmp/s bash benchmarks/gpu.sh startup-grid        # ~7 min on one H100
    python benchmarks/startup_grid.py --smoke --out /tmp/s  # CPU ranks, tiny models: checks it
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from gpu_common import SMOKE_SIZES, START_UP_PHASES, fmt, num, read_runs
from startup_profile import marks_of

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from toolkit.results.layout import (  # noqa: E402
    CACHE_VARIABLE,
    bytecode_cache_dir,
    compile_cache_dir,
)


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


def cudnn_grid(smoke: bool) -> dict[str, Any]:
    out = grid("cudnn", {}, smoke)
    resnet = out["zip"][0]["model_config"][0]
    out["base"].update(model="resnet50", model_config=resnet)
    del out["zip"]
    out["sweep"] = {"precision": ["amp_bf16", "tf32"], "cudnn_benchmark": [False, True]}
    return out


def table_grid(smoke: bool, tuned: bool) -> dict[str, Any]:
    """The three cases of the time-to-a-table figure: ResNet50 `amp_bf16` and `tf32`, BERT
    `amp_bf16`; every option at its default (`kernel_tuning` unset) or kernel tuning off."""
    out = grid("table" if tuned else "table_untuned", {}, smoke)
    if tuned:
        del out["base"]["kernel_tuning"]
    resnet, bert = out["zip"][0]["model_config"]
    out["zip"] = [{"model": ["resnet50", "resnet50", "bert_base"],
                   "precision": ["amp_bf16", "tf32", "amp_bf16"],
                   "model_config": [resnet, resnet, bert]}]
    return out


GRIDS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "binding": binding_grid, "cudnn": cudnn_grid,
    "table": lambda smoke: table_grid(smoke, tuned=True),
    "table-untuned": lambda smoke: table_grid(smoke, tuned=False)}
"""The parts that run one grid and list its runs."""


def submit(grid_file: Path, results: Path, log: Path,
           wrap: list[str] | None = None) -> tuple[int, float]:
    """`toolkit.submit` the grid (under `wrap`, a profiler's command line), then collect."""
    t0 = time.time()
    with log.open("w") as fh:
        rc = subprocess.run([*(wrap or []), sys.executable, "-m", "toolkit.submit", "--grid",
                             str(grid_file),
                             "--results", str(results)], cwd=ROOT, stdout=fh,
                            stderr=subprocess.STDOUT, check=False).returncode
        subprocess.run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"],
                       cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False)
    return rc, time.time() - t0


def submit_grid(out: Path, name: str, spec: dict[str, Any],
                wrap: list[str] | None = None) -> tuple[Path, int, float]:
    """Write `grid-<name>.yaml` and submit it into `results-<name>` (log `logs/grid-<name>.log`);
    the results directory, submit's exit code and the seconds it all took."""
    grid_file = out / f"grid-{name}.yaml"
    grid_file.write_text(yaml.safe_dump(spec))
    results = out / f"results-{name}"
    rc, secs = submit(grid_file, results, out / "logs" / f"grid-{name}.log", wrap)
    return results, rc, secs


def labelled_grid(out: Path, name: str, spec: dict[str, Any], label: str,
                  extra: str) -> tuple[list[str], str]:
    """Submit one grid of a comparison: its runs as rows of a table whose first column is
    `label` and whose column before the throughput is each run's `extra` (`runs`), and the
    line with the grid's time (printed as soon as it is known)."""
    results, rc, secs = submit_grid(out, name, spec)
    total = f"{label}: submit exit {rc}, {secs:.0f} s for the grid"
    print(total, flush=True)
    return [f"| {label} | {r['case_id']} | {r['repeat']} | {start_up_cells(r)} | {r[extra]} | "
            f"{fmt(num(r.get('throughput_sps')), ',.1f')} |" for r in runs(results)], total


def labelled_header(extra: str) -> list[str]:
    return ["| grid | case | repeat | launch to 1st iteration s | launch / setup / build / 1st s"
            f" | compile cache | {extra} | samples/s |", "|---|---|---|---|---|---|---|---|"]


def write_report(out: Path, lines: list[str]) -> int:
    """`OUT/startup-grid.md`, printed too."""
    text = "\n".join(lines) + "\n"
    (out / "startup-grid.md").write_text(text)
    print(text)
    return 0


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
    p.add_argument("--part", choices=["bytecode", "worker", "cold", *GRIDS],
                   default="bytecode")
    p.add_argument("--rerun", action="store_true",
                   help="a part of one grid: run it again over the first one's compile cache")
    args = p.parse_args(argv)
    out = args.out.absolute()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.part in GRIDS:
        return one_grid_part(out, args.smoke, args.part, args.rerun)
    if args.part == "worker":
        return worker_part(out, args.smoke)
    if args.part == "cold":
        return cold_part(out, args.smoke)
    inductor = out / "inductor-cache"  # one torch.compile cache for both grids
    empty = out / "no-bytecode"
    empty.mkdir(exist_ok=True)
    variants = {
        "bytecode cache": {"TORCHINDUCTOR_CACHE_DIR": str(inductor)},
        "no bytecode cache": {"TORCHINDUCTOR_CACHE_DIR": str(inductor),
                              "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(empty)},
    }
    lines = labelled_header("bytecode cache")
    totals = []
    for k, (label, env) in enumerate(variants.items()):
        rows, total = labelled_grid(out, str(k), grid(f"startup{k}", env, args.smoke), label,
                                    "bytecode")
        lines += rows
        totals.append(total)
    return write_report(out, [*lines, "", *totals])


def one_grid_part(out: Path, smoke: bool, part: str, rerun: bool = False) -> int:
    """One grid of `GRIDS`, each run with the CPUs its rank 0 was bound to. With `rerun`, the
    same grid again into a new results directory whose `env` names the first one's compile
    cache, as a user re-runs a grid (docs/guide/torch-options.md: sharing the compile cache
    between grids)."""
    spec = GRIDS[part](smoke)
    lines = labelled_header("rank 0 CPUs")
    totals = []
    for label in ("first", "re-run")[:2 if rerun else 1]:
        name = part if label == "first" else f"{part}-rerun"
        if label == "re-run":
            spec["base"]["env"][CACHE_VARIABLE] = str(compile_cache_dir(
                next((out / f"results-{part}" / "cases").glob("*/case.json"))))
        rows, total = labelled_grid(out, name, spec, label, "cpus")
        lines += rows
        totals.append(total)
    return write_report(out, [*lines, "", *totals])


PYSPY_RATE = 50
"""py-spy's samples per second."""


def require_pyspy() -> None:
    """Before a part that profiles runs anything."""
    if shutil.which("py-spy") is None:
        raise SystemExit("this part needs py-spy on PATH (pip install py-spy)")


def pyspy(raw: Path) -> list[str]:
    """`py-spy record --idle` for the whole job, into `raw`; without pausing the processes it
    samples (paused, the job script's shell does not live to record the run's end)."""
    return ["py-spy", "record", "--nonblocking", "--idle", "--subprocesses", "--threads", "--rate",
            str(PYSPY_RATE), "--format", "raw", "-o", str(raw), "--"]


def stack_summary(raw: Path, top: int = 45) -> list[str]:
    """A py-spy raw profile summed up: for the rank's main thread (of the process that runs
    `toolkit.workloads`), each function's inclusive seconds, the largest first; then the other
    processes' and threads' seconds. Markdown lines."""
    if not raw.exists():
        return [f"(no profile: {raw.name} was not written)"]
    inclusive: dict[str, int] = {}
    leaves: dict[str, int] = {}
    main_total = 0
    others: dict[str, int] = {}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = next((i for i, f in enumerate(frames) if f.startswith("thread (")), None)
        if thread is None:
            continue
        process = frames[thread - 1] if thread else "?"
        if "MainThread" in frames[thread] and any("toolkit/workloads" in f or
                                                  "toolkit.workloads" in f
                                                  for f in frames[thread + 1:]):
            main_total += count
            for f in dict.fromkeys(re.sub(r":\d+\)$", ")", f) for f in frames[thread + 1:]):
                inclusive[f] = inclusive.get(f, 0) + count
            leaves[frames[-1]] = leaves.get(frames[-1], 0) + count
        else:
            key = re.sub(r"\s+", " ", f"{process[:90]} / {frames[thread][:60]}")
            others[key] = others.get(key, 0) + count
    lines = [f"Rank main thread: {main_total / PYSPY_RATE:.1f} s sampled; functions by "
             "inclusive seconds:", "", "| s | function |", "|---|---|"]
    lines += [f"| {n / PYSPY_RATE:.1f} | `{f[:150]}` |"
              for f, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]]
    lines += ["", "Innermost frames (where the main thread was), by seconds:", ""]
    lines += [f"- {n / PYSPY_RATE:.1f} s `{f[:150]}`"
              for f, n in sorted(leaves.items(), key=lambda kv: -kv[1])[:15]]
    lines += ["", "Other processes and threads (s sampled, idle included):", ""]
    lines += [f"- {n / PYSPY_RATE:.1f} s {k}"
              for k, n in sorted(others.items(), key=lambda kv: -kv[1])[:12]]
    return lines


def cold_part(out: Path, smoke: bool) -> int:
    """ResNet50 and BERT `amp_bf16`, one cold repeat each (an empty compile cache, kernel
    tuning off), each grid under py-spy: where a cold start's time goes."""
    require_pyspy()
    spec = grid("cold", {}, smoke)
    lines = ["| case | launch to 1st iteration s | launch / setup / build / 1st s | "
             "compile cache | samples/s |", "|---|---|---|---|---|"]
    profiles = {}
    for model, config in zip(spec["zip"][0]["model"], spec["zip"][0]["model_config"],
                             strict=True):
        one = {**spec, "name": f"cold_{model}", "repeats": 1,
               "base": {**spec["base"], "model": model, "model_config": config}}
        del one["zip"]
        raw = out / f"pyspy-cold-{model}.txt"
        results, rc, secs = submit_grid(out, f"cold-{model}", one, wrap=pyspy(raw))
        print(f"{model}: submit exit {rc}, {secs:.0f} s", flush=True)
        lines += [f"| {r['case_id']} | {start_up_cells(r)} | "
                  f"{fmt(num(r.get('throughput_sps')), ',.1f')} |" for r in runs(results)]
        profiles[model] = raw
    for model, raw in profiles.items():
        lines += ["", f"### py-spy: cold {model} ({raw.name})", "", *stack_summary(raw, 70)]
    return write_report(out, lines)


def worker_part(out: Path, smoke: bool) -> int:
    require_pyspy()
    spec = grid("worker", {}, smoke)
    spec["zip"] = [{"model": ["resnet50"], "model_config": [spec["zip"][0]["model_config"][0]]}]
    results, rc, secs = submit_grid(out, "worker", spec)
    (case_dir,) = sorted((results / "cases").iterdir())
    notes = [f"grid: submit exit {rc}, {secs:.0f} s"]
    profiles: dict[str, Path] = {}
    variants: list[tuple[str, dict[str, str], bool]] = [
        ("warm, as the grid runs it", {}, False),
        ("warm, TORCHINDUCTOR_COMPILE_THREADS=1", {"TORCHINDUCTOR_COMPILE_THREADS": "1"}, False),
        ("warm, under py-spy", {}, True)]
    for repeat, (label, env, spied) in enumerate(variants, start=2):
        raw = out / f"pyspy-worker-r{repeat}.txt"
        cmd = [*(pyspy(raw) if spied else []), "bash", str(case_dir / "run_local.sh"),
               str(repeat)]
        t0 = time.time()
        with (out / "logs" / f"worker-r{repeat}.log").open("w") as fh:
            code = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                  env={**os.environ, **env}, check=False).returncode
        notes.append(f"repeat {repeat} ({label}): exit {code}, {time.time() - t0:.0f} s")
        print(notes[-1], flush=True)
        if spied:
            profiles[f"worker, repeat {repeat}"] = raw
    # the same case in-process, over the grid's caches (compile and bytecode)
    case = json.loads((case_dir / "case.json").read_text())["case"]
    fields = {k: case[k] for k in ("framework", "model", "precision", "batch_size_per_device",
                                   "model_config", "kernel_tuning", "device")}
    fields.update(warmup_iterations=1, measured_iterations=2, telemetry_interval_ms=0)
    raw = out / "pyspy-in-process.txt"
    env = {CACHE_VARIABLE: str(compile_cache_dir(case_dir / "case.json")),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if bytecode_cache_dir(case_dir / "case.json").is_dir():  # the ranks kept their bytecode
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_cache_dir(case_dir / "case.json"))
    with (out / "logs" / "in-process.log").open("w") as fh:
        code = subprocess.run([*pyspy(raw), sys.executable, str(ROOT / "benchmarks" /
                              "startup_profile.py"), "--child", json.dumps(fields)], cwd=ROOT,
                              stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env},
                              check=False).returncode
    marks = marks_of((out / "logs" / "in-process.log").read_text(errors="replace"))
    notes.append(f"in-process (startup_profile, under py-spy): exit {code}; ends of setup, "
                 f"build, 1st from the interpreter's start: "
                 f"{json.dumps({'marks': marks}) if marks else 'none'}")
    profiles["in-process"] = raw
    subprocess.run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"], cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, check=False)
    lines = ["| case | repeat | launch to 1st iteration s | launch / setup / build / 1st s | "
             "compile cache | samples/s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['case_id']} | {r['repeat']} | {start_up_cells(r)} | "
              f"{fmt(num(r.get('throughput_sps')), ',.1f')} |" for r in runs(results)]
    lines += ["", *[f"- {n}" for n in notes]]
    for label, path in profiles.items():
        lines += ["", f"### py-spy: {label} ({path.name})", "", *stack_summary(path)]
    return write_report(out, lines)


if __name__ == "__main__":
    raise SystemExit(main())
