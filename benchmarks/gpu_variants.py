"""One change at a time to a plain compiled script, each alone on the GPU, side by side in one
call: what each candidate default is worth before the toolkit adopts it.

    OUT=/tmp/v bash benchmarks/gpu.sh variants --part resnet   # ResNet50: CUDA graphs, compiled
                                                               # optimizer step, Inductor tuning
    OUT=/tmp/v bash benchmarks/gpu.sh variants --part gpt      # GPT: attention backend, GELU,
                                                               # max-autotune

Every variant runs in its own process with its own Inductor cache directory. Part `resnet` first
compiles every variant at once (a few steps each; the GPU has room for all of them) so that the
measuring runs start from a warm cache, then measures them one at a time; the first variant (the
plain script as `gpu_table.py` runs it) is measured again at the end, so the drift of the machine
over the call is on the table. Part `gpt` measures one variant after another (each GPT run fills
most of the GPU). Variants that would not finish inside `--budget-s` are skipped and listed.

Writes `variants-<part>.md` (printed at the end), `variants-<part>.json` and `logs/` under OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_common import last_json  # noqa: E402
from gpu_common import run as run_logged  # noqa: E402

CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / f"gpu_variants_cache.{os.getpid()}"
"""Each variant's Inductor caches (not under OUT: they are large and not results)."""


@dataclass
class Variant:
    name: str
    args: list[str]
    """The script and its arguments, under benchmarks/."""
    profile: int = 0
    """Steps to profile after the timed window (kernel time by kind)."""
    result: dict[str, Any] = field(default_factory=dict)


def variants(part: str) -> list[Variant]:
    if part == "resnet":
        rn = ["bare_resnet50.py", "--compile", "--batch-size", "256", "--warmup", "20",
              "--iters", "100"]
        bf16, tf32 = [*rn, "--precision", "amp_bf16"], [*rn, "--precision", "tf32"]
        return [
            Variant("bf16 plain compiled", bf16, profile=5),
            Variant("bf16 + CUDA graphs (reduce-overhead)", [*bf16, "--mode", "reduce-overhead"],
                    profile=5),
            Variant("bf16 + compiled optimizer step", [*bf16, "--compile-optimizer"]),
            Variant("bf16 + coordinate-descent tuning", [*bf16, "--coordinate-descent"]),
            Variant("bf16 + CUDA graphs + compiled optimizer step",
                    [*bf16, "--mode", "reduce-overhead", "--compile-optimizer"]),
            Variant("tf32 plain compiled", tf32),
            Variant("tf32 + CUDA graphs (reduce-overhead)", [*tf32, "--mode", "reduce-overhead"]),
            Variant("tf32 + coordinate-descent tuning", [*tf32, "--coordinate-descent"]),
            Variant("bf16 + coordinate-descent tuning + CUDA graphs",
                    [*bf16, "--coordinate-descent", "--mode", "reduce-overhead"]),
        ]
    gpt = ["bare_gpt.py", "--compile", "--micro-batch", "16", "--warmup", "10", "--iters", "20"]
    return [
        Variant("GPT plain compiled", gpt, profile=3),
        Variant("GPT + cuDNN attention only", [*gpt, "--sdpa", "cudnn"], profile=3),
        Variant("GPT + flash attention only", [*gpt, "--sdpa", "flash"]),
        Variant("GPT + tanh GELU", [*gpt, "--gelu", "tanh"]),
        Variant("GPT + cuDNN attention + tanh GELU", [*gpt, "--sdpa", "cudnn", "--gelu", "tanh"]),
        Variant("GPT + coordinate-descent tuning", [*gpt, "--coordinate-descent"]),
        Variant("GPT + cuDNN attention + coordinate-descent tuning",
                [*gpt, "--sdpa", "cudnn", "--coordinate-descent"]),
        Variant("GPT + cuDNN attention + tanh GELU + max-autotune",
                [*gpt, "--sdpa", "cudnn", "--gelu", "tanh", "--mode",
                 "max-autotune-no-cudagraphs"]),
    ]


def run(v: Variant, out: Path, index: int, phase: str, extra: list[str],
        timeout: float) -> dict[str, Any]:
    """One process of the variant; its JSON line, wall time and (profile) output."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(CACHE / f"v{index}"),
           "PYTHONPATH": f"{ROOT}:{ROOT / 'benchmarks'}"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / v.args[0]), *v.args[1:], *extra]
    log = out / "logs" / f"{phase}-v{index}.log"
    rc, wall = run_logged(cmd, log, env, timeout)
    found: dict[str, Any] = {"rc": rc, "wall_s": round(wall, 1), "log": str(log)}
    said = last_json(log)
    if "bare_throughput_sps" in said:
        found.update(said)
    text = log.read_text(errors="replace")
    prof = text.split("profile: ", 1)
    if len(prof) == 2:
        found["profile"] = "profile: " + prof[1].strip()
    return found


def table(part: str, vs: list[Variant], again: dict[str, Any] | None) -> str:
    """Each row against the last `... plain compiled` row above it (same precision)."""
    base = None
    unit = "samples/s" if part == "gpt" else "img/s"
    lines = [f"| variant | {unit} | vs first row | "
             + ("MFU | step ms |" if part == "gpt" else "") + " run wall s |",
             "|---|---|---|" + ("---|---|" if part == "gpt" else "") + "---|"]

    def line(name: str, r: dict[str, Any]) -> str:
        nonlocal base
        t = r.get("bare_throughput_sps")
        if name.endswith("plain compiled"):
            base = t
        if t is None:
            return f"| {name} | failed (rc {r.get('rc')}, {r.get('log')}) | |" + (
                " | |" if part == "gpt" else "") + f" {r.get('wall_s', '')} |"
        ratio = f"{t / base:.3f}" if base else ""
        gpt = f" {r['mfu']:.1%} | {r['step_ms']:.1f} |" if part == "gpt" else ""
        return f"| {name} | {t:,.1f} | {ratio} |{gpt} {r['wall_s']} |"

    for v in vs:
        lines.append(line(v.name, v.result) if v.result else f"| {v.name} | skipped (budget) | |"
                     + (" | |" if part == "gpt" else "") + " |")
    if again:
        base = vs[0].result.get("bare_throughput_sps")
        lines.append(line(f"{vs[0].name}, again at the end", again))
    for v in vs:
        if "profile" in v.result:
            lines += ["", f"{v.name}:", "```", v.result["profile"], "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["resnet", "gpt"], required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--only", default="", help="comma-separated variant numbers (0-based)")
    args = p.parse_args(argv)
    start = time.monotonic()
    out: Path = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    vs = variants(args.part)
    if args.only:
        vs = [vs[int(i)] for i in args.only.split(",")]
    left = lambda: args.budget_s - (time.monotonic() - start)  # noqa: E731
    if args.part == "resnet":
        print(f"compiling {len(vs)} variants at once", flush=True)
        with ThreadPoolExecutor(len(vs)) as pool:
            warm = list(pool.map(lambda iv: run(iv[1], out, iv[0], "warm",
                                                ["--warmup", "3", "--iters", "2"], left()),
                                 enumerate(vs)))
        for v, w in zip(vs, warm, strict=True):
            print(f"  {v.name}: compiled in {w['wall_s']} s (rc {w['rc']})", flush=True)
    slowest = 0.0
    for i, v in enumerate(vs):
        if left() < max(slowest, 30.0) * 1.2:
            print(f"skipped (budget): {v.name}", flush=True)
            continue
        extra = ["--profile", str(v.profile)] if v.profile else []
        v.result = run(v, out, i, "measure", extra, left())
        slowest = max(slowest, v.result["wall_s"])
        print(f"{v.name}: {v.result.get('bare_throughput_sps', 'failed')} "
              f"({v.result['wall_s']} s)", flush=True)
    again = None
    if args.part == "resnet" and left() > vs[0].result.get("wall_s", 1e9) * 1.2:
        again = run(vs[0], out, 0, "again", [], left())
    text = table(args.part, vs, again)
    (out / f"variants-{args.part}.md").write_text(text + "\n")
    (out / f"variants-{args.part}.json").write_text(json.dumps(
        {"variants": [{"name": v.name, "args": v.args, **v.result} for v in vs],
         "again": again}, indent=1))
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
