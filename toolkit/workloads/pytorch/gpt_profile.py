"""Where a GPT step's GPU time goes: run one case of a grid, profile a few steps after warm-up
with `torch.profiler`, and print rank 0's kernel time per step by kind (GEMM/conv,
attention, norm/elementwise, communication, optimizer, other, idle) next to the step's wall
time, plus the largest kernels.

    python -m toolkit.workloads.pytorch.gpt_profile --grid G.yaml --case ID [--steps 5]
    mpirun -np 2 python -m toolkit.workloads.pytorch.gpt_profile --grid G.yaml --case ID

Kernel names are classified by `toolkit.analysis.kernels` (GEMM/conv, attention,
norm/elementwise, communication, optimizer, other); the part of the step in which no kernel
ran is idle (host overhead, waits on communication). The trace is read from the profiler's
Chrome export, whose format is the same across torch versions.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from toolkit.analysis.kernels import (
    COMMUNICATION,
    EXPOSED_COMMUNICATION,
    IDLE,
    breakdown,
    trace_kernels,
)


def summarize_trace(trace: dict[str, Any], steps: int, step_ms: float
                    ) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """(ms per step by kind, idle included: `toolkit.analysis.kernels.breakdown`;
    [(kernel, ms per step)] largest first) from a Chrome trace."""
    kernels = trace_kernels(trace)
    by_kernel: dict[str, float] = defaultdict(float)
    for name, _, dur in kernels:
        by_kernel[name] += dur / 1000.0 / steps
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])
    return breakdown(kernels, steps, step_ms), top


def render(by_kind: dict[str, float], top: list[tuple[str, float]], step_ms: float,
           title: str, n_top: int = 15) -> str:
    lines = [f"## {title}", "", f"step: {step_ms:.1f} ms (wall, mean over the profiled steps)",
             "", "| kind | ms per step | % of step |", "| -- | -- | -- |"]
    kinds = {k: v for k, v in by_kind.items()
             if k not in (IDLE, EXPOSED_COMMUNICATION) and v > 0}
    for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
        lines.append(f"| {kind} | {ms:.1f} | {100 * ms / step_ms:.1f} |")
    idle = by_kind.get(IDLE, 0.0)
    lines.append(f"| {IDLE} (no kernel running) | {idle:.1f} | {100 * idle / step_ms:.1f} |")
    if by_kind.get(EXPOSED_COMMUNICATION):
        exposed = by_kind[EXPOSED_COMMUNICATION]
        lines.append(f"| {EXPOSED_COMMUNICATION} (of {COMMUNICATION}: nothing else running) | "
                     f"{exposed:.1f} | {100 * exposed / step_ms:.1f} |")
    lines += ["", "| kernel | ms per step |", "| -- | -- |"]
    for name, ms in top[:n_top]:
        short = name if len(name) <= 90 else name[:87] + "..."
        lines.append(f"| `{short}` | {ms:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolkit.workloads.pytorch.gpt_profile",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", type=Path, required=True)
    p.add_argument("--case", required=True, help="case id in the grid")
    p.add_argument("--steps", type=int, default=5, help="profiled steps (after warm-up)")
    p.add_argument("--out", type=Path, default=None, help="also write the summary here (.md)")
    args = p.parse_args(argv)

    from toolkit.spec.grid import load_grid

    cases = dict(load_grid(args.grid).items())
    if args.case not in cases:
        print(f"error: {args.grid}: no case {args.case!r}; cases: {', '.join(cases)}",
              file=sys.stderr)
        return 2
    case = cases[args.case]
    from toolkit.rank.discovery import RankInfo

    comm = None
    if case.world_size > 1:
        from toolkit.rank.discovery import discover

        info, comm = discover(expected_world=case.world_size, expected_nodes=1)
    else:
        host = socket.gethostname()
        info = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0,
                        num_nodes=1, host=host, hosts=(host,), master_addr="127.0.0.1",
                        master_port=0)
    try:
        text = _profile(case, info, args.steps, args.case)
    except BaseException:
        if comm is not None:
            import traceback

            traceback.print_exc()
            comm.abort(1)
        raise
    if info.rank == 0:
        print(text)
        if args.out is not None:
            args.out.write_text(text)
    return 0


def _profile(case: Any, info: Any, steps: int, case_id: str) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from toolkit.workloads.pytorch import common as torch_common
    from toolkit.workloads.pytorch import gpt as torch_gpt_train

    rt = torch_common.setup(case, info)
    try:
        run = torch_gpt_train.build(case, rt, info.world_size)
        trainer = torch_gpt_train.GPTTrainer(run, rt)
        for _ in range(max(3, case.warmup_iterations)):
            trainer.step()
        sync = torch.cuda.synchronize if rt.device.type == "cuda" else (lambda: None)
        sync()
        activities = [ProfilerActivity.CPU]
        if rt.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                trainer.step()
            sync()
            step_ms = (time.perf_counter() - t0) * 1000.0 / steps
        if info.rank != 0:
            return ""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            trace = json.loads(path.read_text())
        by_kind, top = summarize_trace(trace, steps, step_ms)
        return render(by_kind, top, step_ms,
                      f"{case_id}: rank 0 of {info.world_size}, {rt.device_name}")
    finally:
        torch_common.teardown(rt)


if __name__ == "__main__":
    sys.exit(main())
