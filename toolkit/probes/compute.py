"""What one device does alone: dense GEMM TFLOP/s per precision, device-memory bandwidth, and
host<->device bandwidth.

GEMM: `torch.matmul(a, b, out=c)` over a small sweep of shapes; the figure is the best shape's
(the achievable peak, which no single shape reaches on every GPU). Each shape runs a few
untimed calls, then enough timed calls to fill `seconds_per_shape`, timed by CUDA events around
the whole batch (no host synchronisation between calls). Memory: `dst.copy_(src)` counts the
bytes read and written (2 x size), the triad `a = b + s * c` three times the size. Host<->device:
a pinned host buffer copied to and from the device. On a CPU the same code runs tiny shapes in
fp32, a host-memory copy, and no host<->device figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from toolkit.probes.measurement import GBPS, TFLOPS, Measurement

GPU_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (8192, 8192, 16384),
    (16384, 8192, 8192), (8192, 16384, 8192), (12288, 12288, 12288), (6144, 6144, 6144),
)
"""(M, N, K): squares and the wide shapes of transformer layers, sizes where cuBLAS tiles evenly.
"""

CPU_SHAPES: tuple[tuple[int, int, int], ...] = ((256, 256, 256), (512, 512, 512))

GPU_MEMORY_BYTES = 2 << 30
CPU_MEMORY_BYTES = 64 << 20
H2D_BYTES = 1 << 30


def _sync(device: Any) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_calls(fn: Callable[[], Any], device: Any, seconds: float, warmup: int = 3,
               max_calls: int = 10_000) -> tuple[float, int]:
    """Seconds per call of `fn` and the number of timed calls: `warmup` untimed calls, a short
    probe for the call's length, then as many calls as fill `seconds`, timed as one batch."""
    import torch

    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    calls = int(min(max_calls, max(2, seconds / one)))
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0 / calls, calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls, calls


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def gemm_precisions(device: Any) -> list[str]:
    """The precisions worth measuring on this device: fp32 on a CPU; bf16, fp16 and tf32 on a
    GPU, and fp8 from compute capability 8.9 (Ada, Hopper) on."""
    import torch

    if device.type != "cuda":
        return ["fp32"]
    out = ["bf16", "fp16", "tf32"]
    if torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
        out.append("fp8")
    return out


def _gemm_call(precision: str, m: int, n: int, k: int, device: Any) -> Callable[[], Any]:
    import torch

    if precision == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    c = torch.empty(m, n, device=device, dtype=dtype)
    return lambda: torch.matmul(a, b, out=c)


def gemm(device: Any, precision: str, shapes: tuple[tuple[int, int, int], ...],
         seconds_per_shape: float) -> Measurement:
    """The best TFLOP/s of `precision` over `shapes` (2*M*N*K FLOPs a call)."""
    import torch

    sweep: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    with _tf32(precision == "tf32"):
        for m, n, k in shapes:
            try:
                call = _gemm_call(precision, m, n, k, device)
                per_call, calls = time_calls(call, device, seconds_per_shape)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
                sweep.append({"shape": [m, n, k], "error": f"{type(err).__name__}: {err}"[:200]})
                continue
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            tflops = 2.0 * m * n * k / per_call / 1e12
            point = {"shape": [m, n, k], "tflops": round(tflops, 3), "calls": calls,
                     "call_s": per_call}
            sweep.append(point)
            if best is None or tflops > best["tflops"]:
                best = point
    if best is None:
        return Measurement("gemm", f"gemm_{precision}", None, TFLOPS,
                           detail={"sweep": sweep}, reason="no shape ran: " +
                           "; ".join(str(p.get("error")) for p in sweep)[:300])
    return Measurement("gemm", f"gemm_{precision}", best["tflops"], TFLOPS,
                       detail={"shape": best["shape"], "sweep": sweep})


def memory(device: Any, nbytes: int, seconds: float) -> list[Measurement]:
    """Device-memory bandwidth: copy (2 x bytes a call) and triad (3 x bytes a call)."""
    import torch

    kind = "hbm" if device.type == "cuda" else "host_memory"
    n = nbytes // 4
    try:
        src = torch.ones(n, device=device)
        dst = torch.empty_like(src)
        other = torch.ones(n, device=device)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
        reason = f"{type(err).__name__}: {err}"[:300]
        return [Measurement("memory", f"{kind}_{op}", None, GBPS, reason=reason)
                for op in ("copy", "triad")]
    out = []
    for op, fn, moved in (("copy", lambda: dst.copy_(src), 2),
                          ("triad", lambda: torch.add(src, other, alpha=2.0, out=dst), 3)):
        per_call, calls = time_calls(fn, device, seconds)
        out.append(Measurement("memory", f"{kind}_{op}", moved * n * 4 / per_call / 1e9, GBPS,
                               detail={"bytes": n * 4, "calls": calls, "call_s": per_call}))
    return out


def host_device(device: Any, nbytes: int, seconds: float) -> list[Measurement]:
    """Pinned host -> device and device -> host bandwidth (none on a CPU)."""
    import torch

    if device.type != "cuda":
        return []
    host = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    out = []
    for metric, fn in (("h2d", lambda: dev.copy_(host, non_blocking=True)),
                       ("d2h", lambda: host.copy_(dev, non_blocking=True))):
        per_call, calls = time_calls(fn, device, seconds)
        out.append(Measurement("memory", metric, nbytes / per_call / 1e9, GBPS,
                               detail={"bytes": nbytes, "calls": calls, "call_s": per_call}))
    return out
