"""Where the GPU time of a training step goes: torch.profiler over a few steps, kernels grouped
by kind (`toolkit.analysis.kernels`, the toolkit's classification: run with the repository on
PYTHONPATH, as the benchmark scripts set it). Used by the bare scripts' `--profile N`
(`bare_resnet50.py`, `bare_bert.py`, `bare_gpt.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def profile_table(step: Callable[[], Any], iters: int) -> str:
    """GPU time of `iters` steps by kernel: top 12 and shares by kind (first matching pattern)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / iters
    rows = []
    for ev in prof.key_averages():
        t = float(getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0) or 0)
        if t > 0 and ev.count > 0:
            rows.append((ev.key, t, int(ev.count)))
    # device activity only: kernels and copies, not the host-side ops that launched them
    kernels = [r for r in rows if not r[0].startswith(("aten::", "cuda", "Torch-Compiled"))]
    total = sum(t for _, t, _ in kernels) or 1.0
    from toolkit.analysis.kernels import COMMUNICATION, kernel_category

    by_kind: dict[str, float] = {}
    for name, t, _ in kernels:
        kind = kernel_category(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + t
    nccl = by_kind.get(COMMUNICATION, 0.0)
    lines = [f"profile: {iters} iterations, {wall * 1e3:.2f} ms wall per iteration (under the "
             f"profiler), {total / 1e3 / iters:.2f} ms GPU kernel time per iteration, "
             f"{(total - nccl) / 1e3 / iters:.2f} ms without NCCL (which may overlap the rest)",
             "share  ms/iter  kind"]
    lines += [f"{t / total:5.1%}  {t / 1e3 / iters:7.2f}  {k}"
              for k, t in sorted(by_kind.items(), key=lambda kv: -kv[1])]
    lines.append("share  ms/iter  calls/iter  kernel (top 12)")
    for name, t, n in sorted(kernels, key=lambda r: -r[1])[:12]:
        lines.append(f"{t / total:5.1%}  {t / 1e3 / iters:7.2f}  {n / iters:10.1f}  {name[:90]}")
    return "\n".join(lines)


def print_profiles(comm: Any, step: Callable[[], Any], iters: int) -> None:
    """Every rank of the MPI communicator `comm` profiles `iters` steps (all must run them: DDP
    steps wait for each other); rank 0 prints each rank's table under `-- rank K of N`."""
    tables = comm.gather(profile_table(step, iters), root=0)
    if comm.Get_rank() == 0:
        for k, table in enumerate(tables):
            print(f"-- rank {k} of {comm.Get_size()}\n{table}", flush=True)
