"""The GPT's optimizer step under tensor parallelism: torch's AdamW over the DTensor parameters
against `ShardAdamW` (the same AdamW over each rank's local shards), on the same built model and
the same gradients, alternating. Prints the median milliseconds of each per step and their ratio
on rank 0. Start one process per rank:

    mpirun -np 2 python benchmarks/tp_optimizer.py --tp 2                       # CPU, gloo
    mpirun -np 2 python benchmarks/tp_optimizer.py --tp 2 --device cuda --hidden 1536 --layers 16

On CUDA both sides use the fused kernels and the time includes a device synchronisation, so it
is the step's GPU time plus whatever host time is not hidden behind it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--steps", type=int, default=20, help="timed steps of each side")
    args = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from toolkit.rank.discovery import discover
    from toolkit.spec.case import Case, resolve
    from toolkit.spec.convert import from_plain
    from toolkit.workloads.pytorch import gpt as gpt_mod
    from toolkit.workloads.pytorch.common import TorchRuntime
    from toolkit.workloads.pytorch.gpt_parallel import align_grad_placements

    info, _ = discover(expected_world=args.tp, expected_nodes=1)
    if args.device == "cuda":
        torch.cuda.set_device(info.local_rank)
    dist.init_process_group(backend="nccl" if args.device == "cuda" else "gloo",
                            rank=info.rank, world_size=info.world_size,
                            init_method=f"tcp://{info.master_addr}:{info.master_port}")
    device = (torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda"
              else torch.device("cpu"))
    case = resolve(from_plain(Case, {
        "model": "gpt", "framework": "torch", "precision": "fp32", "device": args.device,
        "gpus_per_node": args.tp, "batch_size_per_device": 2, "parallel": {"tp": args.tp},
        "model_config": {"vocab_size": args.vocab, "seq_len": 64, "hidden_size": args.hidden,
                         "num_layers": args.layers, "num_heads": 8},
        "warmup_iterations": 0, "measured_iterations": 1, "telemetry_interval_ms": 0,
    }, ""))
    rt = TorchRuntime(device=device, device_name=str(device), distributed=True, backend=None)
    run = gpt_mod.build(case, rt, args.tp)
    trainer = gpt_mod.GPTTrainer(run, rt)
    trainer.step()  # gradients on every parameter, placements aligned
    align_grad_placements(trainer.dtensor_params)

    impl = "fused" if device.type == "cuda" else "foreach"
    dtensors = [q for q in trainer.params if isinstance(q, DTensor)]
    plain = [q for q in trainer.params if not isinstance(q, DTensor)]
    on_dtensors = torch.optim.AdamW([g for g in ({"params": dtensors}, {"params": plain})
                                     if g["params"]], lr=1e-4, **{impl: True})
    on_shards = run.optimizer

    def timed(opt: object) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        opt.step()  # type: ignore[attr-defined]
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    for _ in range(3):
        timed(on_dtensors), timed(on_shards)
    dt_ms, shard_ms = [], []
    for _ in range(args.steps):
        dt_ms.append(timed(on_dtensors))
        shard_ms.append(timed(on_shards))
    if info.rank == 0:
        a, b = statistics.median(dt_ms), statistics.median(shard_ms)
        print(json.dumps({
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "tp": args.tp, "hidden": args.hidden, "layers": args.layers, "vocab": args.vocab,
            "dtensor_params": len(dtensors), "parameters_on_rank": run.info["parameters_on_rank"],
            "steps": args.steps, "adamw_on_dtensors_ms": round(a, 3),
            "shard_adamw_ms": round(b, 3), "ratio": round(a / b, 2)}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
