"""Where a toolkit run's start-up goes, on one GPU: one case run in-process by the toolkit's own
rank code (`toolkit.workloads.run`, as the worker calls it), three times over one Inductor
cache, each a new process:

1. cold: fills the cache (not profiled);
2. warm under cProfile: the functions that take the time from interpreter start to the end of
   the first iteration (cProfile slows Python-heavy parts such as Dynamo's tracing, so read its
   shares, not its seconds);
3. warm under `python -X importtime`: true seconds, and which imports take them.

Each run prints its phases as runs.csv cuts them (setup: to the end of the framework's set-up;
build: to the start of the timed loop; 1st: to the end of the first iteration), from the
interpreter's start. Writes under OUT: `startup-<case>.md` (the phases of the three runs, the
slowest imports, and the profile's top functions by cumulative time) and `logs/`.

    OUT=/tmp/s python benchmarks/startup_profile.py --model resnet50 --precision amp_bf16
    OUT=/tmp/s python benchmarks/startup_profile.py --model bert_base --set kernel_tuning=false

`--set KEY=VALUE` sets a case field (YAML value). Without a GPU it runs on CPU ranks at a tiny
size (`--smoke`), to check this script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.time()
ROOT = Path(__file__).resolve().parents[1]
TOP = 40
"""Functions listed from the profile, by cumulative time."""
MODELS = ("bert_base", "resnet50")


def case_fields(model: str, precision: str, batch: int, sets: list[str],
                smoke: bool) -> dict[str, Any]:
    import yaml
    from gpu_common import SMOKE_SIZES  # beside this script; imported here, not in the runs

    fields: dict[str, Any] = {"framework": "torch", "model": model,
                              "precision": precision, "batch_size_per_device": batch,
                              "warmup_iterations": 1, "measured_iterations": 2,
                              "telemetry_interval_ms": 0}
    if model == "bert_base":
        fields["model_config"] = {"seq_len": 128, "masked_positions": 20}
    if smoke:
        fields.update(device="cpu", batch_size_per_device=4, model_config=SMOKE_SIZES[model])
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        fields[key] = yaml.safe_load(value)
    return fields


def one_run(fields: dict[str, Any]) -> dict[str, Any]:
    """Build and train the case on this process as one rank; the phases' ends, in seconds from
    the interpreter's start."""
    import yaml

    from toolkit import workloads
    from toolkit.rank.discovery import RankInfo
    from toolkit.spec.grid import parse_grid

    (case,) = dict(parse_grid(yaml.safe_dump({"name": "startup", "base": fields}),
                              source="startup_profile").items()).values()
    info = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0,
                    num_nodes=1, host="localhost", hosts=("localhost",),
                    master_addr="127.0.0.1", master_port=29555)
    first: list[float] = []

    def on_iter(i: int, elapsed_s: float, step_s: float, loss: float | None,
                wall_s: float) -> None:
        if not first:
            first.append(time.time())

    summary = workloads.run(case, info, on_iter)
    marks = {"setup": summary.get("ready_time_s"), "build": summary.get("loop_start_time_s"),
             "1st": first[0] if first else None}
    return {k: None if v is None else round(v - STARTED, 2) for k, v in marks.items()}


def child(args: argparse.Namespace) -> int:
    fields = json.loads(args.child)
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        marks = one_run(fields)
        prof.disable()
        stats = pstats.Stats(prof, stream=sys.stdout)
        print(json.dumps({"marks": marks}), flush=True)
        stats.sort_stats("cumulative").print_stats(TOP)
    else:
        print(json.dumps({"marks": one_run(fields)}), flush=True)
    return 0


def run(cmd: list[str], log: Path, env: dict[str, str]) -> tuple[int, str]:
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, **env}, check=False).returncode
    return rc, log.read_text(errors="replace")


def marks_of(text: str) -> dict[str, Any]:
    for line in text.splitlines():
        if line.startswith('{"marks"'):
            return dict(json.loads(line)["marks"])
    return {}


def slowest_imports(text: str, n: int = 15) -> list[tuple[float, str]]:
    """`-X importtime`'s top-level imports (those the program itself made), by cumulative
    seconds."""
    out = []
    for line in text.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", line)
        if m and not m[2].startswith(" "):
            out.append((int(m[1]) / 1e6, m[2].strip()))
    return sorted(out, reverse=True)[:n]


def profile_top(text: str) -> list[str]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("ncalls"):
            return [ln for ln in lines[i:i + TOP + 1] if ln.strip()]
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="resnet50")
    p.add_argument("--precision", default="amp_bf16")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "startup_out")))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    fields = case_fields(args.model, args.precision, args.batch_size, args.set, args.smoke)
    name = f"{args.model}-{args.precision}"
    out = args.out.absolute()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(out / f"cache-{name}"), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]), "NCCL_NVLS_ENABLE": "0"}
    me = [sys.executable, str(Path(__file__).resolve())]
    spec = ["--child", json.dumps(fields)]
    runs: dict[str, dict[str, Any]] = {}
    for label, cmd in (("cold", [*me, *spec]),
                       ("warm, cProfile", [*me, *spec, "--profile"]),
                       ("warm, -X importtime", [sys.executable, "-X", "importtime", *me[1:],
                                                *spec])):
        t0 = time.time()
        rc, text = run(cmd, out / "logs" / f"{name}-{label.split(',')[0]}-{len(runs)}.log", env)
        runs[label] = {"rc": rc, "wall_s": time.time() - t0, "marks": marks_of(text),
                       "text": text}
        print(f"{label}: exit {rc} in {runs[label]['wall_s']:.0f} s, {runs[label]['marks']}",
              flush=True)
    lines = [f"# Start-up of `{json.dumps(fields)}`", "",
             "Seconds from the interpreter's start to the end of each phase (setup: framework "
             "set-up; build: model, optimizer, data, to the timed loop; 1st: first iteration).",
             "", "| run | exit | setup | build | 1st | process wall s |",
             "|---|---|---|---|---|---|"]
    for label, r in runs.items():
        m = r["marks"]
        lines.append(f"| {label} | {r['rc']} | {m.get('setup')} | {m.get('build')} | "
                     f"{m.get('1st')} | {r['wall_s']:.1f} |")
    lines += ["", "Slowest top-level imports of the warm run (`-X importtime`, cumulative s):", ""]
    lines += [f"- {s:.2f} s `{mod}`" for s, mod in slowest_imports(
        runs["warm, -X importtime"]["text"])]
    lines += ["", f"Warm run under cProfile, top {TOP} by cumulative time:", "", "```"]
    lines += [*profile_top(runs["warm, cProfile"]["text"]), "```"]
    text = "\n".join(lines) + "\n"
    (out / f"startup-{name}.md").write_text(text)
    print(text)
    return 0 if all(r["rc"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
