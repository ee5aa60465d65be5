"""The multi-GPU table: each workload on one GPU and on N through `toolkit.submit` at its
defaults (as a user runs it), beside the plain scripts on 1 and N ranks under `mpirun` in the
same call, with speedups, per-GPU efficiency and the ratio of the toolkit's to the plain one.

    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part dp     # ResNet50 and BERT, DDP: ~9 min
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part dp --gpus 4 --only bert   # 1 -> 4 GPUs
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part gpt --gpus 4 --only gpt-dp  # the GPT, dp 4
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part gpt --only gpt-dp,gpt-tp   # GPT DDP, tp = 2
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part gpt --only gpt-pp          # GPT pp = 2
    python benchmarks/gpu_scaling.py --part gpt --plan      # the cases and plain commands only
    ... --part dp --with compiled_ddp=one_graph --no-plain  # an option on the N-GPU cases
    ... --part gpt --only gpt-tp --with sequence_parallel=true   # tp = 2 with and without SP
    ... --part dp --gpus 4 --only bert --with env.NCCL_MIN_NCHANNELS=32   # one NCCL variable
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part matrix --gpus 4 --only dp,tp,2d-2x2 \
        --repeats 1                          # the GPT layout matrix without a pipeline
    OUT=/tmp/s bash benchmarks/gpu.sh scaling --part matrix --gpus 4 \
        --only pp,pp-int,dp-pp,tp-pp --repeats 1                  # ... and with one

`--nodes N --plan` prints, for each data-parallel row, the cases at one GPU and at the `--gpus`
split over 1..N namespaced GPU nodes (4 GPUs, 4 nodes: 1 GPU, 1 x 4, 2 x 2, 4 x 1), each with
the NCCL settings and gradient reduction the toolkit chooses from the link, and writes their
grid to `OUT/grid-<part>-<N>nodes.yaml` for `toolkit.submit --executor slurm`; it runs nothing.

`--gpus N` (2, 4 or 8; default 2): every row is measured 1 -> N GPUs, its plain script on 1 and
N ranks, against the speedup targets for that size (`TARGETS`; none at 8); tp and pp rows split
the model N ways. On 4 H100s a call of one dp row with its plain runs took 5-6.5 minutes (the
GPT 5, ResNet50 6, BERT with two `--with` variants 6.5): one row a call.

Part `dp`: ResNet50 `amp_bf16` bs 256 (kernel tuning off, as the table it answers) and BERT-base
seq 128 `amp_bf16` bs 128, DDP; plain: `bare_resnet50.py` / `bare_bert.py --compile`. Part
`gpt`: GPT h 1536, 16 layers, seq 2048, micro-batch 16 on one GPU and under DDP, tp = 2 at the
same micro-batch, pp = 2 (1F1B, 16 micro-batches of 8) against one GPU at the same global batch
(micro-batch 16); plain: `bare_gpt.py --compile` (one GPU and DDP), `bare_gpt_parallel.py
--compile` with `--tp 2` (against `bare_gpt.py` on one GPU, as the toolkit's tp row is against
its DDP row's one-GPU case) and with `--pp 2` (1F1B, 16 micro-batches of 8, against one rank of
the same script at the same global batch: 8 micro-batches of 16, accumulated). The whole part is
estimated past ten minutes on 2 H100s (not measured): run it as the two calls above (`--only`
keeps a row's baseline only for its one-GPU case and one-rank plain run). Part `matrix`: the GPT
layouts of DLPerf's report on N GPUs (`matrix`), each against one GPU at the same global batch, with
its plain script and, below the table, each layout's samples/s over the dp row's beside DLPerf's
ratios. Every toolkit case runs twice (repeat 0 fills the grid's compile cache); the table shows
both repeats and their spread. Every rank of each case's last repeat is profiled for a few steps
after its timed window. `--with KEY=VALUE[,...]` adds, after each N-GPU row, the same cases with
those settings.

Writes under OUT: `scaling-<part>.md` (printed at the end), `scaling-<part>.json`,
`results-<part>/` (the toolkit's results), `logs/`. `--smoke` runs the same flow on CPU ranks
with tiny models (checks this script, measures nothing; the plain scripts need GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass, field, replace
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
    fmt,
    last_json,
    num,
    read_runs,
    run,
    zip_of,
)

from toolkit.analysis.layouts import kind, layout_text  # noqa: E402
from toolkit.spec import Case, CaseError  # noqa: E402

REPEATS = 2
GPU_COUNTS = (2, 4, 8)
"""The machine sizes `--gpus` takes (each row measured 1 -> N)."""
TARGETS = {
    2: {"rn50": 1.97, "bert": 1.90, "gpt-dp": 1.95},
    4: {"rn50": 3.92, "bert": 3.80, "gpt-dp": 3.85},
}
"""Speedup targets of the data-parallel rows, by GPU count (none at 8: not measured yet)."""
PLAIN_TIMEOUT_S = 300
"""A plain run still going after this is ended (exit 124) and the call goes on."""
PROFILE_STEPS = 3
"""Steps profiled on every rank after the last repeat's timed window (the report's "where the
efficiency went")."""


@dataclass
class Pair:
    """A multi-GPU case and the one-GPU case it is measured against."""

    name: str
    label: str
    one: dict[str, Any] | None
    """The one-GPU case's fields (None: another row's one-GPU case, `one_of`)."""
    many: dict[str, Any]
    """The N-GPU case's fields (gpus_per_node is set by the script)."""
    plain: list[str] = field(default_factory=list)
    """The plain script and its arguments (run on 1 and on N ranks, or on 1 only when `plain_n`
    is given); [] for none."""
    target_speedup: float | None = None
    target_per_gpu: float | None = None
    one_of: str | None = None
    plain_n: list[str] = field(default_factory=list)
    """The plain script for N ranks where it differs from the one-rank one; without `plain`,
    the one-rank plain figure is the `one_of` row's."""
    baseline_only: bool = False
    """Kept only as another row's baseline (`--only`): its one-GPU case and one-rank plain
    run, no N-GPU case and no row of its own."""
    gpus: int = 2
    """The GPUs of the N-GPU case (and the ranks of the N-rank plain run)."""
    layouts: bool = False
    """A row of the GPT layout matrix: `--smoke` keeps its batch and micro-batches (the
    pipeline's schedule needs them) and shrinks only the model."""
    result: dict[str, Any] = field(default_factory=dict)


def pairs(part: str, gpus: int = 2) -> list[Pair]:
    """The rows of a part on `gpus` GPUs (tp and pp rows split the model `gpus` ways)."""
    targets = TARGETS.get(gpus, {})
    if part == "dp":
        rn50 = {"model": "resnet50", "precision": "amp_bf16", "batch_size_per_device": 256,
                "kernel_tuning": False, "warmup_iterations": 15, "measured_iterations": 40}
        bert = {"model": "bert_base", "precision": "amp_bf16", "batch_size_per_device": 128,
                "model_config": {"seq_len": 128, "masked_positions": 20},
                "warmup_iterations": 15, "measured_iterations": 40}
        return [replace(x, gpus=gpus) for x in [
            Pair("rn50", "ResNet50 amp_bf16 bs 256, DDP", rn50, rn50,
                 ["bare_resnet50.py", "--compile", "--precision", "amp_bf16", "--batch-size",
                  "256", "--warmup", "15", "--iters", "40"], target_speedup=targets.get("rn50")),
            Pair("bert", "BERT-base seq 128 amp_bf16 bs 128, DDP", bert, bert,
                 ["bare_bert.py", "--compile", "--precision", "amp_bf16", "--batch-size", "128",
                  "--seq-len", "128", "--warmup", "15", "--iters", "40"],
                 target_speedup=targets.get("bert")),
        ]]
    gpt = {"model": "gpt", "precision": "amp_bf16", "batch_size_per_device": 16,
           "parallel": {"micro_batch_size": 16}, "model_config": dict(GPT_SIZE),
           "warmup_iterations": 8, "measured_iterations": 16}
    big = {**gpt, "batch_size_per_device": 128, "warmup_iterations": 2,
           "measured_iterations": 4}
    steps, big_steps = ["--warmup", "8", "--iters", "16"], ["--warmup", "2", "--iters", "4"]
    return [replace(x, gpus=gpus) for x in [
        Pair("gpt-dp", "GPT h1536 L16 s2048 mb 16, DDP", gpt, gpt,
             ["bare_gpt.py", "--compile", "--micro-batch", "16", *steps],
             target_speedup=targets.get("gpt-dp")),
        Pair("gpt-tp", f"GPT tp = {gpus} (dp 1), mb 16", None,
             {**gpt, "parallel": {"tp": gpus, "micro_batch_size": 16}}, target_per_gpu=0.80,
             one_of="gpt-dp",
             plain_n=["bare_gpt_parallel.py", "--compile", "--tp", str(gpus), "--micro-batch",
                      "16", *steps]),
        Pair("gpt-pp", f"GPT pp = {gpus}, 1F1B, 16 micro-batches of 8", big,
             {**big, "parallel": {"pp": gpus, "micro_batch_size": 8}}, target_per_gpu=0.88,
             plain=["bare_gpt_parallel.py", "--compile", "--micro-batch", "16",
                    "--micro-batches", "8", *big_steps],
             plain_n=["bare_gpt_parallel.py", "--compile", "--pp", str(gpus), "--micro-batch",
                      "8", "--micro-batches", "16", *big_steps]),
    ]]


MATRIX_TARGETS: dict[int, dict[str, float]] = {
    2: {"1x2x1": 0.80, "1x1x2": 0.88, "1x1x2-int": 0.92},
    4: {"4x1x1": 0.90, "1x4x1": 0.60, "2x2x1": 0.75, "1x1x4": 0.85, "1x1x4-int": 0.85,
        "2x1x2": 0.85, "1x2x2": 0.70},
}
"""Per-GPU efficiency targets of the GPT layout matrix, by GPU count (none at 8)."""
DLPERF_OVER_DP = {"tp": 0.65, "dp x tp": 0.77}
"""By layout kind (`toolkit.analysis.layouts.kind`), DLPerf's OneFlow GPT report (one node of
8 x V100, h1536 L16 seq 2048, global batch 16): MP 1x8x1 24.92 and 2D 2x4x1 29.65 samples/s
over DP 8x1x1's 38.28. A layout's samples/s over the data-parallel layout's at the same GPU
count is to be at least this."""


def layout_name(dp: int, tp: int, pp: int) -> str:
    return layout_text((dp, tp, pp))


def matrix(gpus: int) -> list[Pair]:
    """DLPerf's GPT layouts on `gpus` GPUs (h1536 L16 seq 2048, amp_bf16), every one at the
    same global work as its one-GPU case: global batch 16 (one GPU: micro-batch 16) without a
    pipeline, 256 with one (one GPU: 16 micro-batches of 16, accumulated). Rows: dp (micro-batch
    16 / gpus), tp (micro-batch 16), 2-D (dp 2 x tp gpus/2, micro-batch 8; at 8 GPUs also 4 x 2
    at 4), pp (32 micro-batches of 8, 1F1B and interleaved 1F1B), dp 2 x pp gpus/2 and
    tp 2 x pp gpus/2 (16 micro-batches each). Plain scripts: `bare_gpt.py` (one GPU, dp) and
    `bare_gpt_parallel.py` (tp, 2-D, pp, dp x pp) at the same shapes (tp x pp has none beside
    it: a device call of ten minutes holds the pipeline rows and three plain runs)."""
    targets = MATRIX_TARGETS.get(gpus, {})
    steps, big_steps = ["--warmup", "8", "--iters", "16"], ["--warmup", "2", "--iters", "4"]
    base = {"model": "gpt", "precision": "amp_bf16", "model_config": dict(GPT_SIZE),
            "warmup_iterations": 8, "measured_iterations": 16}
    one = {**base, "batch_size_per_device": 16, "parallel": {"micro_batch_size": 16}}
    big = {**base, "batch_size_per_device": 256, "parallel": {"micro_batch_size": 16},
           "warmup_iterations": 2, "measured_iterations": 4}

    def case(dp: int, tp: int, pp: int, mb: int, per_replica: int,
             **extra: Any) -> dict[str, Any]:
        fields = big if pp > 1 else base
        parallel = {"micro_batch_size": mb, **({"tp": tp} if tp > 1 else {}),
                    **({"pp": pp} if pp > 1 else {})}
        return {**fields, "batch_size_per_device": per_replica, "parallel": parallel, **extra}

    def plain(script: str, mb: int, *extra: str, big_run: bool = False) -> list[str]:
        return [script, "--compile", "--micro-batch", str(mb), *extra,
                *(big_steps if big_run else steps)]

    half = gpus // 2
    rows = [
        Pair("dp", f"GPT {layout_name(gpus, 1, 1)}, mb {16 // gpus} (global 16)", one,
             case(gpus, 1, 1, 16 // gpus, 16 // gpus),
             plain("bare_gpt.py", 16), target_per_gpu=targets.get(layout_name(gpus, 1, 1)),
             plain_n=plain("bare_gpt.py", 16 // gpus)),
        Pair("tp", f"GPT {layout_name(1, gpus, 1)}, mb 16", None, case(1, gpus, 1, 16, 16),
             target_per_gpu=targets.get(layout_name(1, gpus, 1)), one_of="dp",
             plain_n=plain("bare_gpt_parallel.py", 16, "--tp", str(gpus))),
    ]
    for dp, mb in ((2, 8), (4, 4)) if gpus == 8 else ((2, 8),) if gpus == 4 else ():
        tp = gpus // dp
        rows.append(Pair(
            f"2d-{dp}x{tp}", f"GPT {layout_name(dp, tp, 1)} (FSDP2 x tp), mb {mb}", None,
            case(dp, tp, 1, mb, mb), target_per_gpu=targets.get(layout_name(dp, tp, 1)),
            one_of="dp", plain_n=plain("bare_gpt_parallel.py", mb, "--tp", str(tp))))
    name = layout_name(1, 1, gpus)
    rows += [
        Pair("pp", f"GPT {name}, 1F1B, 32 micro-batches of 8 (global 256)", big,
             case(1, 1, gpus, 8, 256), target_per_gpu=targets.get(name),
             plain=plain("bare_gpt_parallel.py", 16, "--micro-batches", "16", big_run=True),
             plain_n=plain("bare_gpt_parallel.py", 8, "--pp", str(gpus), "--micro-batches",
                           "32", big_run=True)),
        Pair("pp-int", f"GPT {name}, interleaved 1F1B (v = 2), 32 micro-batches of 8", None,
             case(1, 1, gpus, 8, 256, pipeline_schedule="interleaved_1f1b"),
             target_per_gpu=targets.get(name + "-int"), one_of="pp"),
    ]
    if gpus >= 4:
        rows += [
            Pair("dp-pp", f"GPT {layout_name(2, 1, half)} (DDP x pp), 16 micro-batches of 8 "
                 "a replica", None, case(2, 1, half, 8, 128),
                 target_per_gpu=targets.get(layout_name(2, 1, half)), one_of="pp",
                 plain_n=plain("bare_gpt_parallel.py", 8, "--pp", str(half), "--micro-batches",
                               "16", big_run=True)),
            Pair("tp-pp", f"GPT {layout_name(1, 2, half)}, 16 micro-batches of 16", None,
                 case(1, 2, half, 16, 256),
                 target_per_gpu=targets.get(layout_name(1, 2, half)), one_of="pp"),
        ]
    return [replace(x, gpus=gpus, layouts=True) for x in rows]


def layout_of(p: Pair) -> tuple[int, int, int]:
    """(dp, tp, pp) of a row's N-GPU case."""
    par = p.many.get("parallel", {})
    tp, pp = par.get("tp", 1), par.get("pp", 1)
    return p.gpus // (tp * pp), tp, pp


def over_dp(items: list[Pair]) -> str:
    """Each layout's samples/s over the data-parallel layout's (same GPUs, same global batch:
    rows without a pipeline only), beside DLPerf's ratio for its kind."""
    by_name = {p.name: p for p in items}
    dp = by_name.get("dp")
    dp_tput = dp.result.get("many", {}).get("throughput_sps") if dp else None
    lines = ["", f"Over data parallelism at {items[0].gpus if items else '?'} GPUs (samples/s "
             "over the dp row's, global batch 16; rule: at least the seeds' ratio, DLPerf "
             "OneFlow GPT on 8 x V100: MP 1x8x1 / DP 8x1x1 = 0.65, 2D 2x4x1 / DP = 0.77):", "",
             "| layout | over dp | seeds (8 x V100) | target | met |", "|---|---|---|---|---|"]
    for p in items:
        dims = layout_of(p)
        reference = DLPERF_OVER_DP.get(kind(dims))
        if p.baseline_only or p.name == "dp" or dims[2] > 1 or reference is None:
            continue
        tput = p.result.get("many", {}).get("throughput_sps")
        ratio = tput / dp_tput if tput and dp_tput else None
        met = "-" if ratio is None else ("yes" if ratio >= reference else "**no**")
        lines.append(f"| {p.label} | {fmt(ratio, '.3f')} | {reference:.2f} | "
                     f">= {reference:.2f} | {met} |")
    return "\n".join(lines)


def select(items: list[Pair], only: str) -> list[Pair]:
    """The rows named in `only` (comma-separated; all for ""), with the rows they are measured
    against kept as baselines only."""
    if not only:
        return items
    wanted = set(only.split(","))
    unknown = wanted - {x.name for x in items}
    if unknown:
        raise SystemExit(f"--only: no row {', '.join(sorted(unknown))} "
                         f"(rows: {', '.join(x.name for x in items)})")
    baselines = {x.one_of for x in items if x.name in wanted}
    return [x if x.name in wanted else replace(x, baseline_only=True)
            for x in items if x.name in wanted or x.name in baselines]


def with_variants(items: list[Pair], variants: list[str]) -> list[Pair]:
    """After each pair, one per variant: its N-GPU case with the variant's settings
    (`KEY=VALUE[,KEY=VALUE]`, values read as YAML; `env.NAME=VALUE` sets one variable of the
    ranks' environment, NCCL's say, beside `ENV`, which no variant changes), against the same
    one-GPU case; a variant that is not a valid case of a pair (`sequence_parallel` without tp)
    is left out there."""
    out = []
    for p in items:
        out.append(p)
        for text in variants if not p.baseline_only else []:
            settings = {k.strip(): yaml.safe_load(v) for k, _, v in
                        (part.partition("=") for part in text.split(","))}
            suffix = "-".join(f"{k}-{v}".replace("_", "-") for k, v in settings.items())
            env = {k.removeprefix("env."): str(v) for k, v in settings.items()
                   if k.startswith("env.")}
            kept = sorted(set(env) & set(ENV))
            if kept:
                raise SystemExit(f"--with {text}: {', '.join(kept)} stays as gpu.sh sets "
                                 f"it (NVLink multicast off)")
            fields = {**p.many, **{k: v for k, v in settings.items()
                                   if not k.startswith("env.")}}
            if env:
                fields["env"] = {**p.many.get("env", {}), **env}
            try:
                Case.from_dict({**fields, "gpus_per_node": p.gpus})
            except (CaseError, ValueError) as error:
                print(f"--with {text}: not for {p.name} ({error})", flush=True)
                continue
            out.append(Pair(f"{p.name}-{suffix}", f"{p.label}, {text}", None, fields, [],
                            p.target_speedup, p.target_per_gpu, one_of=p.one_of or p.name,
                            gpus=p.gpus, layouts=p.layouts))
    return out


def cases(items: list[Pair], smoke: bool) -> list[dict[str, Any]]:
    out = []
    for p in items:
        for suffix, fields, gpus in (("-1g", p.one, 1), (f"-{p.gpus}g", p.many, p.gpus)):
            if fields is None or (gpus > 1 and p.baseline_only):
                continue
            case = {"name": p.name + suffix, **fields, "gpus_per_node": gpus,
                    "env": {**ENV, **fields.get("env", {})},
                    "profile": {"ranks": list(range(gpus)), "steps": PROFILE_STEPS}}
            if smoke:
                model = fields["model"]
                case.update(device="cpu", warmup_iterations=2, measured_iterations=3,
                            model_config=SMOKE_SIZES[model], cpu_threads=1)
                if p.layouts:  # 8 layers: 2 stages a rank at pp 4; 4 heads for tp 4
                    case["model_config"] = {**SMOKE_SIZES[model], "num_layers": 8,
                                            "num_heads": 4}
                elif model == "gpt":
                    mb = 2 if case.get("parallel", {}).get("pp", 1) > 1 else 4
                    case["batch_size_per_device"] = 8 if mb == 2 else 4
                    case["parallel"] = {**case.get("parallel", {}), "micro_batch_size": mb}
                else:
                    case["batch_size_per_device"] = 4
            Case.from_dict({k: v for k, v in case.items() if k != "name"})  # fails early
            out.append(case)
    return out


def grid_text(part: str, items: list[Pair], smoke: bool, repeats: int = REPEATS) -> str:
    """One grid whose `zip` lists every case (`gpu_common.zip_of`)."""
    base = {"framework": "torch", "slurm": {"time_min": 8}}  # each case's env holds ENV
    return yaml.safe_dump({"name": f"gpu_scaling_{part}", "repeats": repeats, "base": base,
                           "zip": [zip_of(cases(items, smoke))]},
                          sort_keys=False)


def figures(runs: list[dict[str, str]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("status") == "ok"]
    tputs = [v for r in ok if (v := num(r.get("throughput_sps"))) is not None]
    median = statistics.median(tputs) if tputs else None
    spread = ((max(tputs) - min(tputs)) / median if len(tputs) > 1 and median else None)
    return {"throughput_sps": median, "repeats": tputs, "spread": spread,
            "compile": sorted({r.get("compile") or "" for r in runs}),
            "errors": [str(r.get("error"))[:120] for r in runs if r.get("status") != "ok"]}


def plain_commands(p: Pair) -> list[tuple[int, list[str]]]:
    """The plain runs of a row: (ranks, script and arguments)."""
    out = [(1, p.plain)] if p.plain else []
    if not p.baseline_only and (p.plain_n or p.plain):
        out.append((p.gpus, p.plain_n or p.plain))
    return out


def plain_runs(p: Pair, logs: Path, cache: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    mpirun = ["mpirun", "--bind-to", "none", "--allow-run-as-root"]
    for ranks, plain in plain_commands(p):
        log = logs / f"plain-{p.name}-{ranks}.log"
        cmd = [*mpirun, "-np", str(ranks), *(a for k in ENV for a in ("-x", k)), sys.executable,
               str(ROOT / "benchmarks" / plain[0]), *plain[1:]]
        print(f"plain {ranks} rank(s): {' '.join(plain)}", flush=True)
        rc, secs = run(cmd, log, {**ENV, "TORCHINDUCTOR_CACHE_DIR": str(cache)},
                       timeout=PLAIN_TIMEOUT_S)
        out[str(ranks)] = {**last_json(log), "exit": rc, "wall_s": secs}
        print(f"  exit {rc} in {secs:.0f} s: {out[str(ranks)].get('bare_throughput_sps')}",
              flush=True)
    return out


def table(items: list[Pair], device: str, plain_ran: bool = True) -> str:
    """The scaling table, the plain commands that ran beside it (none when not `plain_ran`) and
    how each toolkit case ran."""
    gpus = items[0].gpus if items else GPU_COUNTS[0]
    lines = [f"Device: {device}. Toolkit: median of its repeats through `toolkit.submit` at "
             "the defaults unless the row says (repeats listed, spread = (max - min) / "
             "median); plain: the plain compiled script under mpirun, one run each, in the "
             "same call. Speedup: N-GPU samples/s over the one-GPU case's; per GPU: speedup "
             f"/ {gpus}; ratio: the toolkit's speedup over the plain script's.", "",
             f"| workload | toolkit 1 GPU | toolkit {gpus} GPUs (repeats) | spread | speedup | "
             f"per GPU | plain 1 -> {gpus} | plain speedup | ratio | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_name = {p.name: p for p in items}
    for p in items:
        if p.baseline_only:
            continue
        one_pair = by_name[p.one_of] if p.one_of else p
        one = one_pair.result.get("one", {}).get("throughput_sps")
        many = p.result.get("many", {})
        tput = many.get("throughput_sps")
        speedup = tput / one if tput and one else None
        plain = p.result.get("plain", {})
        if not p.plain and p.plain_n:  # the one-rank plain run of the row it is measured against
            plain = {"1": one_pair.result.get("plain", {}).get("1"), **plain}
        p1 = (plain.get("1") or {}).get("bare_throughput_sps")
        pn = (plain.get(str(gpus)) or {}).get("bare_throughput_sps")
        psp = pn / p1 if p1 and pn else None
        ratio = speedup / psp if speedup and psp else None
        if p.target_speedup is not None:
            target, met_by = f">= {p.target_speedup:.2f}x", speedup
            met = None if speedup is None else speedup >= p.target_speedup
        else:
            target = f">= {p.target_per_gpu:.2f} per GPU" if p.target_per_gpu else ""
            per = speedup / gpus if speedup else None
            met_by = per
            met = None if per is None or p.target_per_gpu is None else per >= p.target_per_gpu
        del met_by
        reps = ", ".join(fmt(v, ",.1f") for v in many.get("repeats", []))
        errors = "; ".join(many.get("errors") or [])
        lines.append(
            f"| {p.label} | {fmt(one, ',.1f')} | {fmt(tput, ',.1f')} ({reps or '-'})"
            f"{' ' + errors if errors else ''} | {fmt(many.get('spread'), '.1%')} | "
            f"{fmt(speedup, '.3f')} | {fmt(speedup / gpus if speedup else None, '.3f')} | "
            f"{fmt(p1, ',.1f')} -> {fmt(pn, ',.1f')} | {fmt(psp, '.3f')} | "
            f"{fmt(ratio, '.3f')} | {target} | "
            f"{'-' if met is None else ('yes' if met else '**no**')} |")
    lines += ["", "Plain runs (benchmarks/, under mpirun):", ""]
    if not plain_ran:
        lines.append("- none in this call (--no-plain or --smoke)")
    for p in items if plain_ran else []:
        for ranks, plain in plain_commands(p):
            lines.append(f"- {p.name}, {ranks} rank(s): `{' '.join(plain)}`")
    lines += ["", "How each toolkit case ran (runs.csv `compile`):", ""]
    for p in items:
        for key in ("one", "many"):
            res = p.result.get(key)
            if res:
                lines.append(f"- {p.name} {'1 GPU' if key == 'one' else f'{gpus} GPUs'}: "
                             f"{', '.join(res['compile']) or '-'}")
    return "\n".join(lines)


def plan(items: list[Pair], smoke: bool, no_plain: bool) -> str:
    """What a call runs: each toolkit case (name, GPUs, layout) and each plain command."""
    lines = ["toolkit cases (through toolkit.submit):"]
    for case in cases(items, smoke):
        lines.append(f"  {case['name']}: {case['gpus_per_node']} GPU(s), "
                     f"batch {case['batch_size_per_device']}, parallel "
                     f"{case.get('parallel', {})}"
                     + (f", {case['pipeline_schedule']}" if "pipeline_schedule" in case else ""))
    lines.append("plain runs (mpirun -np RANKS python benchmarks/...):")
    if smoke or no_plain:
        lines.append("  none (--smoke or --no-plain)")
    for p in items:
        if smoke or no_plain:
            break
        for ranks, plain in plain_commands(p):
            lines.append(f"  {p.name}, {ranks} rank(s): {' '.join(plain)}")
    return "\n".join(lines)


def node_shapes(gpus: int, nodes: int) -> list[tuple[int, int]]:
    """(nodes, GPUs per node) a row is measured at on up to `nodes` nodes of `gpus` GPUs in
    all: one GPU, then every split of the GPUs into equal nodes (4 GPUs, 4 nodes: 1 x 1, 1 x 4,
    2 x 2, 4 x 1)."""
    return [(1, 1), *((n, gpus // n) for n in range(1, min(nodes, gpus) + 1) if gpus % n == 0)]


def node_cases(items: list[Pair], gpus: int, nodes: int, smoke: bool) -> list[dict[str, Any]]:
    """Each data-parallel row's cases at `node_shapes` (named `<row>-<n>n<g>g`): the same
    GPUs as one node and spread over namespaced nodes, whose link NCCL crosses."""
    out = []
    for base in cases([p for p in items if p.one is not None and not p.baseline_only and
                       layout_of(p) == (p.gpus, 1, 1)], smoke):
        if not base["name"].endswith("-1g"):
            continue
        for n, g in node_shapes(gpus, nodes):
            case = {**base, "name": f"{base['name'][:-3]}-{n}n{g}g", "num_nodes": n,
                    "gpus_per_node": g, "profile": {"ranks": list(range(n * g)),
                                                    "steps": PROFILE_STEPS}}
            Case.from_dict({k: v for k, v in case.items() if k != "name"})  # fails early
            out.append(case)
    return out


def node_grid_text(part: str, node_list: list[dict[str, Any]], repeats: int = REPEATS) -> str:
    """The grid of `node_cases`, for `toolkit.submit --executor slurm`."""
    base = {"framework": "torch", "slurm": {"time_min": 8}}
    return yaml.safe_dump({"name": f"gpu_scaling_{part}_nodes", "repeats": repeats,
                           "base": base, "zip": [zip_of(node_list)]}, sort_keys=False)


def node_plan(items: list[Pair], gpus: int, nodes: int, smoke: bool) -> str:
    """The cases of `--nodes N --plan`, and how they are run."""
    lines = [f"toolkit cases over up to {nodes} nodes, {gpus} GPUs in all (through "
             f"toolkit.submit --executor slurm, on `trainbench localslurm up --nodes {nodes}` "
             "with namespaced GPU nodes):"]
    for case in node_cases(items, gpus, nodes, smoke):
        lines.append(f"  {case['name']}: {case['num_nodes']} node(s) x "
                     f"{case['gpus_per_node']} GPU(s), batch {case['batch_size_per_device']}")
    return "\n".join(lines)


def device_name(smoke: bool) -> str:
    if smoke:
        return "cpu (smoke: nothing measured)"
    import torch

    return (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, "
            f"torch {torch.__version__}")


def gpus_missing(gpus: int) -> str | None:
    """Why this machine cannot run the N-GPU cases (None: it can)."""
    import torch

    found = torch.cuda.device_count()
    return None if found >= gpus else f"this machine has {found} CUDA device(s)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_scaling_out")))
    p.add_argument("--part", choices=["dp", "gpt", "matrix"], required=True)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--gpus", type=int, choices=GPU_COUNTS, default=GPU_COUNTS[0],
                   help="GPUs of the N-GPU cases and ranks of the N-rank plain runs "
                        "(default %(default)s)")
    p.add_argument("--no-plain", action="store_true", help="skip the plain scripts")
    p.add_argument("--only", default="", metavar="NAME,...", help="these rows only")
    p.add_argument("--repeats", type=int, default=REPEATS,
                   help=f"repeats of every toolkit case (default {REPEATS})")
    p.add_argument("--with", dest="variants", action="append", default=[],
                   metavar="KEY=VALUE[,...]")
    p.add_argument("--plan", action="store_true",
                   help="print the toolkit cases and the plain commands, run nothing")
    p.add_argument("--nodes", type=int, default=1, metavar="N",
                   help="with --plan: the data-parallel rows over up to N namespaced GPU "
                        "nodes (1 GPU, then the GPUs split into 1, 2, ... N equal nodes)")
    args = p.parse_args(argv)
    rows = matrix(args.gpus) if args.part == "matrix" else pairs(args.part, args.gpus)
    items = with_variants(select(rows, args.only), args.variants)
    if args.nodes > 1:
        if not args.plan:
            raise SystemExit("--nodes: planning only for now (--plan); run the cases it "
                             "prints through toolkit.submit --executor slurm")
        print(node_plan(items, args.gpus, args.nodes, args.smoke), flush=True)
        grid = args.out.absolute() / f"grid-{args.part}-{args.nodes}nodes.yaml"
        grid.parent.mkdir(parents=True, exist_ok=True)
        grid.write_text(node_grid_text(args.part, node_cases(items, args.gpus, args.nodes,
                                                             args.smoke), args.repeats))
        print(f"grid: {grid}", flush=True)
        return 0
    if args.plan:
        print(plan(items, args.smoke, args.no_plain), flush=True)
        return 0
    if not args.smoke:
        missing = gpus_missing(args.gpus)
        if missing:
            raise SystemExit(f"--gpus {args.gpus}: {missing}")
    out = args.out.absolute()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    grid = out / f"grid-{args.part}.yaml"
    grid.write_text(grid_text(args.part, items, args.smoke, args.repeats))
    results = out / f"results-{args.part}"
    print(f"toolkit.submit {grid} -> {results}", flush=True)
    rc, secs = run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results",
                    str(results)], logs / f"submit-{args.part}.log")
    print(f"  exit {rc} in {secs:.0f} s", flush=True)
    run([sys.executable, "-m", "toolkit.collect", str(results), "--quiet", "--no-store"],
        logs / f"collect-{args.part}.log")
    by_case = read_runs(results)
    for item in items:
        if item.one is not None:
            item.result["one"] = figures(by_case.get(item.name + "-1g", []))
        if not item.baseline_only:
            item.result["many"] = figures(by_case.get(f"{item.name}-{item.gpus}g", []))
    plain_ran = not (args.smoke or args.no_plain)

    def write() -> str:
        """The table and the JSON as far as they go (again after each plain row, so that a
        call cut short by its time limit keeps what it measured)."""
        text = table(items, device_name(args.smoke), plain_ran=plain_ran)
        if args.part == "matrix":
            text += "\n" + over_dp(items)
        (out / f"scaling-{args.part}.md").write_text(text + "\n")
        (out / f"scaling-{args.part}.json").write_text(json.dumps(
            {"device": device_name(args.smoke), "submit_s": secs,
             "rows": [{"name": x.name, "label": x.label, "one": x.one, "many": x.many,
                       "plain": x.plain, "plain_n": x.plain_n,
                       "baseline_only": x.baseline_only, **x.result} for x in items]},
            indent=2, default=str))
        return text

    write()
    if plain_ran:
        for item in items:
            if plain_commands(item):
                item.result["plain"] = plain_runs(item, logs, out / "plain-compile-cache")
                write()
    print(write(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
