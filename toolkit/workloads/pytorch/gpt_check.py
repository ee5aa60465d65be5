"""Sharding check: train a small GPT for a few steps in one or more parallel layouts and print
each step's loss, for comparison with the single-rank model on the same data and seed.

    mpirun -np 4 python -m toolkit.workloads.pytorch.gpt_check --layout 2x2x1 --layout 1x2x2:gpipe
    python -m toolkit.workloads.pytorch.gpt_check --layout 1x1x1          # the reference

A layout is `DPxTPxPP` with options after colons: `gpipe`, `1f1b` or `interleaved` (pipeline
schedule; `interleaved` is interleaved 1F1B with 2 stages per rank),
`ddp` or `fsdp` (data parallel), `bf16` (autocast), `recompute` (activation checkpointing),
`compile` (torch.compile of the layers and the loss).
Every layout of one invocation must use all ranks. The same global batch and seed are used in
every layout, so a correct sharding gives the reference's losses up to float rounding; a wrong
one (a missing all-reduce, a mis-split QKV, a lost tied-embedding gradient) does not. The
losses are the mean over data-parallel ranks of each rank's loss, i.e. the global batch's loss.
The model is tiny: this runs on CPU ranks with gloo as well as on GPUs with NCCL.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from toolkit.spec import Case, from_plain, resolve

SIZE = {"vocab_size": 128, "seq_len": 16, "hidden_size": 32, "num_layers": 4, "num_heads": 4}
"""Tiny GPT: every dimension that tensor parallelism splits is divisible by 4."""
GLOBAL_BATCH = 8
MICRO_BATCHES = 4
"""Micro-batches per step: pipeline micro-batches, or gradient accumulation without pp."""
LEARNING_RATE = 1e-3
"""Larger than the benchmark's so that a wrong gradient moves the next losses visibly."""

_OPTIONS = {
    "gpipe": ("pipeline_schedule", "gpipe"), "1f1b": ("pipeline_schedule", "1f1b"),
    "interleaved": ("pipeline_schedule", "interleaved_1f1b"),
    "ddp": ("data_parallel", "ddp"), "fsdp": ("data_parallel", "fsdp"),
    "bf16": ("precision", "amp_bf16"), "recompute": ("activation_checkpointing", True),
    "compile": ("compile", True), "sp": ("sequence_parallel", True),
    "bf16reduce": ("grad_reduce", "bf16"),
}


def layout_case(layout: str, seed: int = 1234) -> Case:
    """The case for `DPxTPxPP[:option...]` (a CaseError or ValueError names what is wrong)."""
    dims, *options = layout.split(":")
    try:
        dp, tp, pp = (int(v) for v in dims.lower().split("x"))
    except ValueError:
        raise ValueError(f"layout {layout!r}: expected DPxTPxPP such as 2x1x1") from None
    fields: dict[str, Any] = {}
    for opt in options:
        if opt not in _OPTIONS:
            raise ValueError(f"layout {layout!r}: unknown option {opt!r}; valid: "
                             + ", ".join(_OPTIONS))
        key, value = _OPTIONS[opt]
        fields[key] = value
    world = dp * tp * pp
    plain: dict[str, Any] = {
        "model": "gpt", "framework": "torch", "precision": "fp32", "device": "cpu",
        "gpus_per_node": world, "batch_size_per_device": GLOBAL_BATCH // dp,
        "parallel": {"tp": tp, "pp": pp,
                     "micro_batch_size": max(1, GLOBAL_BATCH // dp // MICRO_BATCHES)},
        "model_config": dict(SIZE), "warmup_iterations": 0, "measured_iterations": 1,
        "telemetry_interval_ms": 0, "seed": seed, **fields,
    }
    return resolve(from_plain(Case, plain, ""))


def run_layouts(layouts: list[str], steps: int, world_size: int, rank: int,
                device: str = "cpu") -> dict[str, list[float]]:
    """Train each layout for `steps` steps on this rank; the global batch's loss per step.

    The process group (world > 1) must be up; every layout must use the whole world.
    """
    import torch
    import torch.distributed as dist

    from toolkit.workloads.pytorch import gpt as train_mod
    from toolkit.workloads.pytorch.common import TorchRuntime, resolve_options

    out: dict[str, list[float]] = {}
    for layout in layouts:
        case = layout_case(layout)
        if case.world_size != world_size:
            raise ValueError(f"layout {layout!r} uses {case.world_size} ranks; this run has "
                             f"{world_size}")
        dev = torch.device(device, rank % max(1, torch.cuda.device_count())) \
            if device == "cuda" else torch.device("cpu")
        # the layout's run options (compile, grad_reduce) as a worker resolves them
        rt = TorchRuntime(device=dev, device_name=str(dev), distributed=world_size > 1,
                          backend=None, options=resolve_options(case, dev.type))
        # where a rank that aborts (no Python exception) was: its fault handler's stack follows
        print(f"rank {rank}: layout {layout}", file=sys.stderr, flush=True)
        losses = []
        try:
            run = train_mod.build(case, rt, world_size, lr=LEARNING_RATE)
            trainer = train_mod.GPTTrainer(run, rt)
            for _ in range(steps):
                loss = trainer.step().detach().clone()
                if run.gmesh.mesh is not None and case.dp > 1:
                    dist.all_reduce(loss, group=run.gmesh.group("dp"))
                    loss /= case.dp
                losses.append(float(loss))
        except Exception:
            print(f"rank {rank}: layout {layout} failed after {len(losses)} of {steps} steps",
                  file=sys.stderr, flush=True)
            raise
        out[layout] = losses
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolkit.workloads.pytorch.gpt_check",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layout", action="append", required=True,
                   help="DPxTPxPP[:gpipe|1f1b|interleaved|ddp|fsdp|bf16|recompute|compile|sp|"
                        "bf16reduce] "
                        "(repeatable)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=None, help="write the losses as JSON (rank 0)")
    args = p.parse_args(argv)
    try:
        cases = [layout_case(x) for x in args.layout]
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    world = cases[0].world_size
    info, comm = None, None
    if world > 1:
        from toolkit.rank.discovery import discover

        info, comm = discover(expected_world=world, expected_nodes=1)
    import torch

    torch.set_num_threads(1)
    rank = info.rank if info is not None else 0
    if args.device == "cuda":  # one GPU per rank, before NCCL starts
        torch.cuda.set_device(rank % torch.cuda.device_count())
    if info is not None:
        import torch.distributed as dist

        dist.init_process_group(backend="nccl" if args.device == "cuda" else "gloo",
                                rank=info.rank, world_size=info.world_size,
                                init_method=f"tcp://{info.master_addr}:{info.master_port}")
    try:
        result = run_layouts(args.layout, args.steps, world, rank, args.device)
    except BaseException:
        traceback.print_exc()
        if comm is not None:
            comm.abort(1)  # a failed rank must not leave its peers waiting in a collective
        raise
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    if rank == 0:
        text = json.dumps(result, indent=1)
        print(text)
        if args.out is not None:
            args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
