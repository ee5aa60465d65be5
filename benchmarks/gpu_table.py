"""The one-GPU table: the toolkit's default (through `toolkit.submit`, as a user runs it) beside
the plain compiled scripts, in the same call, with the ratios and the time to a table.

    OUT=/tmp/t bash benchmarks/gpu.sh table --part cnn     # ResNet50 bf16 + tf32, BERT: ~11 min
    OUT=/tmp/t bash benchmarks/gpu.sh table --part gpt     # GPT default and best: ~6 min

Part `cnn`: one grid of ResNet50 `amp_bf16` and `tf32` bs 256 and BERT-base seq 128 `amp_bf16`
bs 256, 2 repeats each of 20 warm-up + 60 measured iterations, all defaults (compiled on CUDA;
torch.compile's caches in the results directory, so the second repeat of each case starts
warm); then `bare_resnet50.py --compile` (bf16, tf32) and `bare_bert.py --compile` with their
own empty cache. Part `gpt`: GPT h 1536, 16 layers, seq 2048, micro-batch 16 with every option at
its default (2 repeats: cold and warm cache), the best setting (`compile_mode: max_autotune`),
and `bare_gpt.py --compile`. Every toolkit run's start-to-first-iteration and compile seconds
come from runs.csv; each repeat's throughput is shown, so cold and warm caches sit side by side.
`--with KEY=VALUE[,...]` adds after each row the same case with those settings, compared with
the same plain run (one option's effect, side by side in one call).

Writes under OUT: `table-<part>.md` (printed at the end), `table-<part>.json`,
`results-<part>/` (the toolkit's results: runs.csv, report.md, rank events), `logs/`.
`--smoke` runs the same flow on CPU ranks with tiny models (checks this script, measures
nothing; the plain scripts need a GPU and are skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from gpu_common import (  # noqa: E402
    ENV,
    GPT_SIZE,
    SMOKE_SIZES,
    START_UP_PHASES,
    fmt,
    last_json,
    num,
    plain_profile,
    read_runs,
    run,
    zip_of,
)

from toolkit.analysis.kernels import CATEGORIES, IDLE, kind_key  # noqa: E402
from toolkit.spec import Case  # noqa: E402

REPEATS = 2
"""Every case twice: repeat 0 fills the grid's compile cache, repeat 1 starts from it."""
PROFILE_STEPS = 3
"""Steps profiled after the last repeat's timed window (the report's kernel time by kind)."""
KINDS = tuple(kind_key(kind) for kind in (*CATEGORIES, IDLE))
"""The profile's kinds of GPU time as runs.csv names them (`profile_<kind>_ms`)."""


@dataclass
class Row:
    name: str
    """The case id in the toolkit's grid."""
    label: str
    fields: dict[str, Any]
    plain: list[str]
    """The plain script's arguments (benchmarks/...), [] for none."""
    target: float | None
    """Toolkit / plain ratio to reach; None: no ratio target."""
    mfu_target: float | None = None
    """MFU (0..1) to reach, for the best GPT setting."""
    plain_of: str | None = None
    """A variant row (`--with`): the row whose plain run it is compared with."""
    result: dict[str, Any] = field(default_factory=dict)


def rows(part: str) -> list[Row]:
    rn50 = {"model": "resnet50", "batch_size_per_device": 256, "warmup_iterations": 20,
            "measured_iterations": 60}
    if part == "cnn":
        return [
            Row("rn50-bf16-bs256", "ResNet50 amp_bf16 bs 256",
                {**rn50, "precision": "amp_bf16"},
                ["bare_resnet50.py", "--compile", "--precision", "amp_bf16", "--batch-size",
                 "256", "--warmup", "20", "--iters", "60"], 1.05),
            Row("rn50-tf32-bs256", "ResNet50 tf32 bs 256", {**rn50, "precision": "tf32"},
                ["bare_resnet50.py", "--compile", "--precision", "tf32", "--batch-size", "256",
                 "--warmup", "20", "--iters", "60"], 1.05),
            Row("bert128-bf16-bs256", "BERT-base seq 128 amp_bf16 bs 256",
                {"model": "bert_base", "precision": "amp_bf16", "batch_size_per_device": 256,
                 "model_config": {"seq_len": 128, "masked_positions": 20},
                 "warmup_iterations": 20, "measured_iterations": 60},
                ["bare_bert.py", "--compile", "--precision", "amp_bf16", "--batch-size", "256",
                 "--seq-len", "128", "--warmup", "20", "--iters", "60"], 1.15),
        ]
    gpt = {"model": "gpt", "precision": "amp_bf16", "batch_size_per_device": 16,
           "parallel": {"micro_batch_size": 16}, "model_config": dict(GPT_SIZE),
           "warmup_iterations": 10, "measured_iterations": 20}
    return [
        Row("gpt-mb16-default", "GPT h1536 L16 s2048 mb 16, defaults", gpt,
            ["bare_gpt.py", "--compile", "--micro-batch", "16", "--warmup", "10", "--iters",
             "20"], 1.0),
        Row("gpt-mb16-autotune", "GPT h1536 L16 s2048 mb 16, max_autotune",
            {**gpt, "compile_mode": "max_autotune"}, [], None, mfu_target=0.58),
    ]


def with_variants(items: list[Row], variants: list[str]) -> tuple[list[Row], list[str]]:
    """Each row followed by one row per variant: the same case with the variant's settings
    (`KEY=VALUE[,KEY=VALUE]`, each value read as YAML), compared with the same plain run; and
    the variants left out because they are their row's case already (the same config hash:
    the settings are what the row runs by default). Raises ValueError naming a setting that
    is not KEY=VALUE."""
    parsed = []
    for text in variants:
        settings: dict[str, Any] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or not re.fullmatch(r"[a-z_]+", key.strip()):
                raise ValueError(f"{part!r}: expected KEY=VALUE, e.g. cuda_graphs=true")
            settings[key.strip()] = yaml.safe_load(value)
        parsed.append(settings)
    out, same = [], []
    for r in items:
        out.append(r)
        for settings in parsed:
            suffix = "-".join(k.replace("_", "-") for k in settings)
            variant = Row(f"{r.name}-{suffix}", r.label + ", " + ", ".join(
                f"{k}: {json.dumps(v)}" for k, v in settings.items()),
                {**r.fields, **settings}, [], r.target, r.mfu_target, plain_of=r.name)
            if (Case.from_dict(variant.fields).config_hash()
                    == Case.from_dict(r.fields).config_hash()):
                same.append(variant.name)
            else:
                out.append(variant)
    return out, same


def grid_text(part: str, items: list[Row], smoke: bool) -> str:
    cases = []
    for r in items:
        case: dict[str, Any] = {"name": r.name, **r.fields}
        if smoke:
            case.update(device="cpu", batch_size_per_device=4, warmup_iterations=2,
                        measured_iterations=3, model_config=SMOKE_SIZES[r.fields["model"]])
            if r.fields["model"] == "gpt":
                case["parallel"] = {"micro_batch_size": 4}
        cases.append(case)
    base = {"framework": "torch", "gpus_per_node": 1, "env": dict(ENV),
            "slurm": {"time_min": 8}, "profile": {"ranks": [0], "steps": PROFILE_STEPS}}
    return yaml.safe_dump({"name": f"gpu_table_{part}", "repeats": REPEATS, "base": base,
                           "zip": [zip_of(cases)]},
                          sort_keys=False)


def summarize(item: Row, runs: list[dict[str, str]]) -> None:
    ok = [r for r in runs if r.get("status") == "ok"]
    tputs = [v for r in ok if (v := num(r.get("throughput_sps"))) is not None]
    mfus = [v for r in ok if (v := num(r.get("mfu"))) is not None]
    item.result.update(
        throughput_sps=statistics.median(tputs) if tputs else None,
        mfu=statistics.median(mfus) if mfus else None,
        compile=sorted({r.get("compile") or "" for r in runs}),
        errors=[r.get("error") for r in runs if r.get("status") != "ok"],
        profile={k: num(r.get(f"profile_{k}_ms")) for r in runs[-1:]
                 for k in ("step", *KINDS)},
        repeats=[{"repeat": int(r["repeat"]), "status": r.get("status"),
                  "throughput_sps": num(r.get("throughput_sps")), "mfu": num(r.get("mfu")),
                  "start_to_first_iteration_s": num(r.get("start_to_first_iteration_s")),
                  "phases": [num(r.get(k)) for k in START_UP_PHASES],
                  "compile_s": num(r.get("compile_s")),
                  "compile_cache": r.get("compile_cache") or None,
                  "exit_s": num(r.get("exit_s"))} for r in runs])


def table(items: list[Row], device: str, submit_s: float, plain_s: float) -> str:
    lines = [f"Device: {device}. Toolkit: median of its repeats through `toolkit.submit`, "
             "every option at its default unless the row says; plain: the compiled plain "
             "script in the same call, one run. GPT MFU by Megatron's 72-formula against "
             "989 TFLOP/s.", "",
             "| workload | toolkit | compile | plain compiled script | ratio | target | met |",
             "|---|---|---|---|---|---|---|"]
    for r in items:
        res = r.result
        tput, plain = res.get("throughput_sps"), res.get("plain", {}).get("bare_throughput_sps")
        ratio = tput / plain if tput and plain else None
        gpt = r.fields.get("model") == "gpt"
        mine = (f"{fmt(tput, ',.2f')} samples/s, {fmt(res.get('mfu'), '.1%')} MFU" if gpt
                else f"{fmt(tput)} samples/s")
        other = (f"{fmt(plain, ',.2f')} samples/s, "
                 f"{fmt(res.get('plain', {}).get('mfu'), '.1%')} MFU" if gpt and plain
                 else fmt(plain))
        if r.mfu_target is not None:
            target = f">= {r.mfu_target:.0%} MFU"
            mfu = res.get("mfu")
            met = "-" if mfu is None else ("yes" if mfu >= r.mfu_target else "**no**")
        else:
            target = f">= {r.target:.2f}x" if r.target else ""
            met = "-" if ratio is None or r.target is None else (
                "yes" if ratio >= r.target else "**no**")
        errors = "; ".join(str(e)[:80] for e in res.get("errors") or [])
        lines.append(f"| {r.label} | {mine}{' (' + errors + ')' if errors else ''} | "
                     f"{', '.join(res.get('compile') or []) or '-'} | {other} | "
                     f"{fmt(ratio, '.3f')} | {target} | {met} |")
    lines += ["", "Time to a table: each toolkit run's seconds from launch to the end of its "
              "first iteration, that time in its phases (launch: the launcher and the worker's "
              "start; setup: binding, telemetry, importing torch, the device and the process "
              "group; build: model, optimizer and data; 1st: compiling or loading the compiled "
              "model, and the first step), its seconds in torch.compile, what it found in the "
              "compile cache, its exit (from rank 0's last record to the run's end), and its "
              "throughput; repeat 0 starts with an empty compile cache, repeat 1 with the one "
              "repeat 0 filled.", "",
              "| case | repeat | launch to 1st iteration s | launch / setup / build / 1st s "
              "| compile s | compile cache | exit s | samples/s | MFU |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in items:
        for rep in r.result.get("repeats", []):
            phases = " / ".join(fmt(v, ".1f") for v in rep.get("phases") or [])
            lines.append(f"| {r.name} | {rep['repeat']} | "
                         f"{fmt(rep['start_to_first_iteration_s'], '.1f')} | {phases or '-'} | "
                         f"{fmt(rep['compile_s'], '.1f')} | {rep.get('compile_cache') or '-'} | "
                         f"{fmt(rep.get('exit_s'), '.1f')} | "
                         f"{fmt(rep['throughput_sps'], ',.1f')} | {fmt(rep['mfu'], '.1%')} |")
        plain = r.result.get("plain") or {}
        if plain and r.plain:  # its own plain run (a `--with` row shares its row's)
            lines.append(f"| plain `{' '.join(r.plain[:2])}` | - | "
                         f"{fmt(plain.get('wall_s'), '.1f')} (whole run) | - | - | - | - | "
                         f"{fmt(plain.get('bare_throughput_sps'), ',.1f')} | "
                         f"{fmt(plain.get('mfu'), '.1%')} |")
    lines += ["", "Where the GPU time goes (the last repeat's rank 0, and the plain script, "
              f"each {PROFILE_STEPS} steps after its timed window; % of the step):", "",
              "| case | step ms | " + " | ".join(KINDS) + " |",
              "|---|---|" + "---|" * len(KINDS)]
    for r in items:
        for name, prof in ((r.name, r.result.get("profile") or {}),
                           (f"plain `{r.plain[0]}`" if r.plain else "",
                            (r.result.get("plain") or {}).get("profile") or {} if r.plain
                            else {})):
            step = prof.get("step")
            if step:
                lines.append(f"| {name} | {step:.1f} | " + " | ".join(
                    fmt(100 * (prof.get(k) or 0.0) / step, ".1f") for k in KINDS) + " |")
    lines += ["", f"toolkit.submit of the whole grid: {submit_s:.0f} s; the plain scripts: "
              f"{plain_s:.0f} s."]
    return "\n".join(lines)


def device_name(smoke: bool) -> str:
    if smoke:
        return "cpu (smoke: nothing measured)"
    import torch

    return f"1 x {torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_table_out")))
    p.add_argument("--part", choices=["cnn", "gpt"], required=True)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--no-plain", action="store_true", help="skip the plain scripts")
    p.add_argument("--only", default="", metavar="NAME,...",
                   help="these rows of the part only (their case names), to split a part "
                        "over calls")
    p.add_argument("--with", dest="variants", action="append", default=[],
                   metavar="KEY=VALUE[,...]",
                   help="after each row, the same case with these settings beside it, "
                        "compared with the same plain run (repeatable: one row each)")
    args = p.parse_args(argv)
    out = args.out.absolute()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    items = rows(args.part)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {r.name for r in items})
        if unknown:
            p.error(f"--only: no row {', '.join(unknown)} in part {args.part} "
                    f"(rows: {', '.join(r.name for r in items)})")
        items = [r for r in items if r.name in wanted]
    try:
        items, same = with_variants(items, args.variants)
    except ValueError as err:
        p.error(f"--with: {err}")
    for name in same:
        print(f"--with: {name} left out: it is its row's case already", flush=True)
    grid = out / f"grid-{args.part}.yaml"
    grid.write_text(grid_text(args.part, items, args.smoke))
    results = out / f"results-{args.part}"
    print(f"toolkit.submit {grid} -> {results}", flush=True)
    rc, submit_s = run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid),
                        "--results", str(results)], logs / f"submit-{args.part}.log")
    print(f"  exit {rc} in {submit_s:.0f} s", flush=True)
    run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet"],
        logs / f"collect-{args.part}.log")
    by_case = read_runs(results)
    for item in items:
        summarize(item, by_case.get(item.name, []))
    plain_s = 0.0
    if not args.smoke and not args.no_plain:
        cache = out / "plain-compile-cache"  # empty: the plain scripts compile from scratch
        for item in items:
            if not item.plain:
                continue
            log = logs / f"plain-{item.name}.log"
            print(f"plain {' '.join(item.plain)}", flush=True)
            rc, secs = run([sys.executable, str(ROOT / "benchmarks" / item.plain[0]),
                            *item.plain[1:], "--profile", str(PROFILE_STEPS)], log,
                           {**ENV, "TORCHINDUCTOR_CACHE_DIR": str(cache)})
            plain_s += secs
            item.result["plain"] = {**last_json(log), "wall_s": secs, "exit": rc,
                                    "profile": plain_profile(log)}
            print(f"  exit {rc} in {secs:.0f} s: {item.result['plain']}", flush=True)
        by_name = {r.name: r for r in items}
        for item in items:
            if item.plain_of and "plain" in by_name[item.plain_of].result:
                item.result["plain"] = by_name[item.plain_of].result["plain"]
    text = table(items, device_name(args.smoke), submit_s, plain_s)
    (out / f"table-{args.part}.md").write_text(text + "\n")
    (out / f"table-{args.part}.json").write_text(json.dumps(
        {"device": device_name(args.smoke), "submit_s": submit_s, "plain_s": plain_s,
         "rows": [{"name": r.name, "label": r.label, "fields": r.fields, "plain": r.plain,
                   "target": r.target, "mfu_target": r.mfu_target, **r.result}
                  for r in items]}, indent=2, default=str))
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
