"""The preflight on one GPU, side by side with plain scripts in the same call.

Order: a plain `torch.matmul` bf16 shape sweep and a plain large `copy_`, then
`python -m toolkit.preflight` (one rank, the command as a user runs it, timed from start to
exit), then the plain scripts again. The preflight's bf16 GEMM and HBM copy figures are divided
by the better of the two plain runs. Also records `nvidia-smi -q` and `-q -x`.

    python benchmarks/preflight_gpu.py --out DIR

Writes DIR/preflight_gpu.json, DIR/nvidia-smi-q.txt, DIR/nvidia-smi-q.xml and the preflight's
results under DIR/pf.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def plain_gemm(seconds: float = 0.2) -> dict[str, object]:
    """The best bf16 TFLOP/s of torch.matmul over M, N, K in {2048, 4096, 8192, 16384}."""
    import torch

    best: tuple[float, list[int] | None] = (0.0, None)
    sizes = (2048, 4096, 8192, 16384)
    for m, n, k in itertools.product(sizes, sizes, sizes):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.matmul(a, b)
        torch.cuda.synchronize()
        calls = max(2, int(seconds / (time.perf_counter() - t0)))
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        tflops = 2 * m * n * k * calls / (time.perf_counter() - t0) / 1e12
        if tflops > best[0]:
            best = (tflops, [m, n, k])
        del a, b
    torch.cuda.empty_cache()
    return {"tflops": best[0], "shape": best[1], "shapes": len(sizes) ** 3}


def plain_copy(seconds: float = 0.5) -> dict[str, object]:
    """The best GB/s (read + write) of dst.copy_(src) at 1, 2 and 4 GiB."""
    import torch

    best = (0.0, 0)
    for gib in (1, 2, 4):
        src = torch.ones(gib << 28, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        calls = max(2, int(seconds / (time.perf_counter() - t0)))
        t0 = time.perf_counter()
        for _ in range(calls):
            dst.copy_(src)
        torch.cuda.synchronize()
        gbps = 2 * src.numel() * 4 * calls / (time.perf_counter() - t0) / 1e9
        if gbps > best[0]:
            best = (gbps, gib)
        del src, dst
        torch.cuda.empty_cache()
    return {"gbps": best[0], "gib": best[1]}


def plain(label: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    out: dict[str, Any] = {"gemm_bf16": plain_gemm(), "hbm_copy": plain_copy()}
    out["wall_s"] = time.perf_counter() - t0
    print(label, json.dumps(out), flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for flags, name in ((["-q"], "nvidia-smi-q.txt"), (["-q", "-x"], "nvidia-smi-q.xml")):
        text = subprocess.run(["nvidia-smi", *flags], capture_output=True, text=True).stdout
        (args.out / name).write_text(text)
    first = plain("plain before")
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "toolkit.preflight", "--results",
                         str(args.out / "pf"), "--ranks", "1", "--on-fail", "warn"]).returncode
    wall = time.perf_counter() - t0
    second = plain("plain after")
    pf_dir = sorted((args.out / "pf" / "preflight").iterdir())[-1]
    verdict = json.loads((pf_dir / "verdict.json").read_text())
    figs = {f["metric"]: f for f in verdict["figures"] if f.get("scope") == "gpu"}
    ref_gemm = max(first["gemm_bf16"]["tflops"], second["gemm_bf16"]["tflops"])
    ref_copy = max(first["hbm_copy"]["gbps"], second["hbm_copy"]["gbps"])
    result = {
        "preflight_wall_s": wall, "preflight_rc": rc,
        "preflight": {m: figs[m]["value"] for m in figs},
        "pct_datasheet": {m: figs[m].get("pct_datasheet") for m in figs},
        "plain_before": first, "plain_after": second,
        "gemm_bf16_ratio": figs["gemm_bf16"]["value"] / ref_gemm,
        "hbm_copy_ratio": figs["hbm_copy"]["value"] / ref_copy,
        "health": verdict["health"], "nodes": verdict["nodes"],
    }
    (args.out / "preflight_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: result[k] for k in ("preflight_wall_s", "gemm_bf16_ratio",
                                             "hbm_copy_ratio", "preflight")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
