"""Where a training step's GPU time goes: GPU kernels, by name, in the kinds a "why is it slow?"
answer needs (GEMM/conv, attention, norm/elementwise, communication, optimizer), and the time
no kernel ran (idle). Pure functions over (name, start, duration) records, as PyTorch's profiler
exports them in its Chrome trace (`trace_kernels`); used by the GPT profile
(`toolkit.workloads.pytorch.gpt_profile`) and the plain scripts' `--profile`
(`benchmarks/_profile.py`).

Kernel names are matched in order, first match wins: NCCL is communication; flash/fMHA/SDPA
names are attention (cuDNN's SDPA kernels are `cudnn_generated_fort_native_sdpa_...`, so this
comes before cuDNN's convolutions); AdamW/SGD/LAMB multi-tensor kernels are the optimizer
(`lamb` not as the start of `lambda`, which every eager elementwise and reduction kernel's
templated name holds: `...::{lambda(float, float)#1}`);
Inductor's Triton kernels are GEMM/conv when they are its matmul templates (`triton_mm`,
`triton_bmm`, `triton_tem_`) and norm/elementwise otherwise (Inductor names fused kernels after
the ops they fuse, e.g. `triton_red_fused_..._convolution_backward_...`, which is a batch-norm
reduction, not a convolution); batch/layer-norm names are norm/elementwise before cuDNN's
(`cudnn::bn_fw_...`); cuBLAS/CUTLASS/nvjet GEMMs and cuDNN convolutions are GEMM/conv; eager
elementwise, reduction and softmax kernels are norm/elementwise; anything else is other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

GEMM_CONV = "GEMM/conv"
ATTENTION = "attention"
NORM_ELEMENTWISE = "norm/elementwise"
COMMUNICATION = "communication"
OPTIMIZER = "optimizer"
OTHER = "other"
IDLE = "idle"
"""Step time in which no kernel ran (host overhead, waits): not a kernel kind."""
EXPOSED_COMMUNICATION = "exposed communication"
"""Step time in which communication kernels ran and nothing else did: the communication no
computation hid (a part of the communication kind's time, not a kernel kind)."""
CATEGORIES = (GEMM_CONV, ATTENTION, NORM_ELEMENTWISE, COMMUNICATION, OPTIMIZER, OTHER)

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.I)) for kind, pattern in (
        (COMMUNICATION, r"nccl"),
        (ATTENTION, r"flash|fmha|attention|sdpa"),
        (OPTIMIZER, r"adam|sgd|lamb(?!da)|multi_tensor|foreach"),
        (GEMM_CONV, r"^triton_(mm|bmm|tem_)"),
        (NORM_ELEMENTWISE, r"^triton_|batch_?norm|layer_?norm|bn_f|bn_b|welford"),
        (GEMM_CONV, r"gemm|cutlass|xmma|nvjet|cublas|matmul|splitk|fprop|dgrad|wgrad|conv"
                    r"|implicit|cudnn"),
        (NORM_ELEMENTWISE, r"elementwise|reduce|softmax|vectorized|norm|gelu|relu|dropout"),
    ))


def kernel_category(name: str) -> str:
    """The kind of one GPU kernel, from its name (one of CATEGORIES)."""
    for kind, pattern in _RULES:
        if pattern.search(name):
            return kind
    return OTHER


def trace_kernels(trace: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of every GPU kernel of a Chrome trace from
    `torch.profiler` (`export_chrome_trace`): events of category `kernel`; host ops, memcpys
    and annotations are left out."""
    out = []
    for ev in trace.get("traceEvents", []):
        if not isinstance(ev, Mapping) or ev.get("cat") != "kernel":
            continue
        dur, ts = ev.get("dur"), ev.get("ts", 0.0)
        if isinstance(dur, (int, float)) and isinstance(ts, (int, float)):
            out.append((str(ev.get("name", "")), float(ts), float(dur)))
    return out


def busy_us(kernels: Iterable[tuple[str, float, float]]) -> float:
    """Microseconds in which at least one kernel ran (kernels on several streams that overlap
    count once)."""
    total, end = 0.0, float("-inf")
    for _, start, dur in sorted(kernels, key=lambda k: k[1]):
        stop = start + dur
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def exposed_us(kernels: Iterable[tuple[str, float, float]]) -> float:
    """Microseconds in which communication kernels ran and no other kernel did: the time all
    kernels were busy less the time the non-communication kernels were."""
    kernels = list(kernels)
    return _exposed_us(kernels, [kernel_category(name) for name, _, _ in kernels])


def _exposed_us(kernels: list[tuple[str, float, float]], kinds: list[str]) -> float:
    compute = [k for k, kind in zip(kernels, kinds, strict=True) if kind != COMMUNICATION]
    return max(0.0, busy_us(kernels) - busy_us(compute))


def breakdown(kernels: Iterable[tuple[str, float, float]], steps: int,
              step_ms: float | None = None) -> dict[str, float]:
    """Milliseconds per step of each kernel kind (every one of CATEGORIES, 0.0 where none ran),
    EXPOSED_COMMUNICATION (the communication no other kernel overlapped) and, given the step's
    wall time `step_ms`, IDLE: the part of it in which no kernel ran. Kernels that overlap
    (communication beside compute) count in full in their own kind."""
    kernels = list(kernels)
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    kinds = [kernel_category(name) for name, _, _ in kernels]  # each name matched once
    out = dict.fromkeys(CATEGORIES, 0.0)
    for kind, (_, _, dur) in zip(kinds, kernels, strict=True):
        out[kind] += dur / 1000.0 / steps
    out[EXPOSED_COMMUNICATION] = _exposed_us(kernels, kinds) / 1000.0 / steps
    if step_ms is not None:
        out[IDLE] = max(0.0, step_ms - busy_us(kernels) / 1000.0 / steps)
    return out


def kind_key(kind: str) -> str:
    """A kind's name in column and file names: `gemm_conv` for `GEMM/conv`."""
    return re.sub(r"[^a-z0-9]+", "_", kind.lower())


def column(kind: str) -> str:
    """The runs.csv column of a kind's milliseconds per profiled step (`profile_gemm_conv_ms`,
    ..., `profile_idle_ms`)."""
    return f"profile_{kind_key(kind)}_ms"
