"""OneFlow machinery shared by the OneFlow workloads: the distributed environment, device and
precision, the optimizer step with accumulation and loss scaling, and the timed loop.

Runs under OneFlow 0.9.0 (CPython 3.10, its own venv: `toolkit.launch.python_env`); nothing
here imports torch. What differs from `torch_common` and why:

- The distributed environment. OneFlow builds it when `oneflow` is first imported, from
  MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK / LOCAL_RANK, which the worker exports from the
  mpi4py discovery before it calls the workload. `setup` imports OneFlow only after that and
  checks that OneFlow sees the same rank and world. Gradients are averaged by
  `oneflow.nn.parallel.DistributedDataParallel` (NCCL on GPUs, OneFlow's own transport on CPU).
- Precision. OneFlow 0.9.0 has no TF32 switch in Python; `ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION`
  (read when its CUDA device starts) sets cuBLAS's TF32 math mode, so it is exported before the
  import: `0` for fp32, `1` otherwise (a value from the grid's `env` wins). Its autocast works on
  CUDA only ("CPU autocast is not supported currently"), so AMP cases need a GPU.
- Loss scaling. `oneflow.amp.GradScaler` only configures `nn.Graph`; in eager mode the scaling is
  done here as torch's GradScaler does it: scale the loss, unscale the gradients, skip the step
  and halve the scale on inf/NaN, double it after `growth_interval` clean steps.
- The clock. OneFlow 0.9.0 has no CUDA events in Python. Its eager ops run asynchronously on a
  virtual machine whose streams execute in issue order, so a tiny op queued after the optimizer
  update (the step's "marker") is finished only when the whole step is. The loop keeps one step
  queued ahead and reads the previous step's marker (a blocking copy to the host) while the next
  step is already queued, so the device is never left waiting for the host; the one exception is
  the last warm-up step, read before the first measured step is queued so that the window starts
  exactly when the device finished warm-up. `elapsed_s` is thus the time the host saw the device
  finish that step, from one synchronised start.
- Memory. OneFlow 0.9.0 exposes no allocator statistics: `framework_peak_memory_mib` is None and
  the NVML telemetry is the memory figure.

Model definitions live in `oneflow_resnet50.py`, `oneflow_bert.py` and `oneflow_gpt.py`.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit.rank.binding import cuda_index
from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case, LossScaling, Precision

IterCallback = Callable[[int, float, float, float | None, float], None]
"""(iteration, elapsed_s, step_time_s, loss, wall-clock time the iteration finished)."""

TF32_ENV = "ONEFLOW_EP_CUDA_ENABLE_TF32_EXECUTION"
DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")
AMP_PRECISIONS = (Precision.AMP_BF16, Precision.AMP_FP16)
CPU_AMP_REASON = ("OneFlow 0.9.0 has no CPU autocast (amp_bf16 / amp_fp16 need a CUDA device); "
                  "use fp32 or tf32 on CPU")


class OneFlowUnavailable(RuntimeError):
    """The case cannot run under OneFlow on this rank (a clear message, not a traceback)."""


@dataclass
class OneFlowRuntime:
    flow: Any
    """The `oneflow` module, imported after the distributed environment was exported."""
    device: Any
    """oneflow.device the rank runs on."""
    device_type: str
    device_name: str
    distributed: bool
    backend: str | None
    precision_flags: dict[str, Any] = field(default_factory=dict)


def export_environment(case: Case, info: RankInfo) -> dict[str, str]:
    """What OneFlow reads at import: the rank's place (from the mpi4py discovery) and the TF32
    switch. Values the grid's `env` set are kept. Returns the variables as set."""
    wanted = {"MASTER_ADDR": info.master_addr, "MASTER_PORT": str(info.master_port),
              "WORLD_SIZE": str(info.world_size), "RANK": str(info.rank),
              "LOCAL_RANK": str(info.local_rank)}
    os.environ.update(wanted)
    os.environ.setdefault(TF32_ENV, "0" if case.precision is Precision.FP32 else "1")
    return {k: os.environ[k] for k in (*DIST_ENV, TF32_ENV)}


def import_oneflow() -> Any:
    """`import oneflow`, with the one attribute flowvision 0.2.2 needs and OneFlow 0.9.0 lacks.

    flowvision 0.2.2 decorates two box ops with `oneflow.jit._script_if_tracing` (added to
    OneFlow after 0.9.0); without it `import flowvision` fails. Eager OneFlow never traces, so
    the identity decorator is what the real one amounts to here.
    """
    import oneflow as flow

    if not hasattr(flow.jit, "_script_if_tracing"):
        flow.jit._script_if_tracing = lambda fn: fn
    return flow


def setup(case: Case, info: RankInfo, gpu_index: int | None = None) -> OneFlowRuntime:
    """Export the environment, import OneFlow, choose the device, check the distributed world."""
    exported = export_environment(case, info)
    flow = import_oneflow()
    if flow.env.get_world_size() != info.world_size or flow.env.get_rank() != info.rank:
        raise RuntimeError(
            f"OneFlow sees rank {flow.env.get_rank()} of {flow.env.get_world_size()}, MPI rank "
            f"{info.rank} of {info.world_size}: was oneflow imported before the worker "
            f"exported {', '.join(DIST_ENV)}?")
    has_cuda = bool(flow.cuda.is_available())
    if case.device.value == "cuda" and not has_cuda:
        raise OneFlowUnavailable("case asks for device cuda but OneFlow sees no CUDA device "
                                 "(the 0.9.0 wheel is built for CUDA 11.7, sm_60 to sm_86)")
    use_cuda = case.device.value != "cpu" and has_cuda
    if case.precision in AMP_PRECISIONS and not use_cuda:
        raise OneFlowUnavailable(CPU_AMP_REASON)
    if use_cuda:
        count = flow.cuda.device_count()
        if info.local_size > count:
            raise RuntimeError(f"{info.local_size} ranks on host {info.host} but OneFlow sees "
                               f"only {count} GPUs")
        index = cuda_index(gpu_index, info.local_rank, count)
        flow.cuda.set_device(index)
        device = flow.device("cuda", index)
        device_name = str(flow.cuda.get_device_name(index))
    else:
        threads = case.cpu_threads or max(1, (os.cpu_count() or 1) // max(1, info.local_size))
        flow.set_num_threads(threads)
        device = flow.device("cpu")
        device_name = f"cpu ({threads} threads)"
    flags: dict[str, Any] = {TF32_ENV: exported[TF32_ENV],
                             "autocast": case.precision.value if use_cuda else None}
    distributed = info.world_size > 1
    return OneFlowRuntime(flow=flow, device=device, device_type="cuda" if use_cuda else "cpu",
                          device_name=device_name, distributed=distributed,
                          backend=("nccl" if use_cuda else "oneflow-cpu") if distributed
                          else None, precision_flags=flags)


def autocast_dtype(flow: Any, precision: Precision) -> Any:
    return {Precision.AMP_BF16: flow.bfloat16, Precision.AMP_FP16: flow.float16}.get(precision)


def wrap_ddp(model: Any, rt: OneFlowRuntime) -> Any:
    """OneFlow's DDP when there is more than one rank; the bare module otherwise."""
    if not rt.distributed:
        return model
    from oneflow.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


class DynamicLossScale:
    """Eager dynamic loss scaling with torch GradScaler's defaults (2**16, x2 / x0.5, 2000)."""

    def __init__(self, flow: Any, init_scale: float = 2.0**16, growth_interval: int = 2000):
        self.flow = flow
        self.scale = init_scale
        self.growth_interval = growth_interval
        self.clean_steps = 0
        self.skipped_steps = 0

    def unscale_and_check(self, params: list[Any]) -> bool:
        """Divide the gradients by the scale; True when all are finite (then step)."""
        grads = [p.grad for p in params if p.grad is not None]
        finite = bool(self.flow.stack([self.flow.isfinite(g).all() for g in grads]).all()
                      .numpy()) if grads else True
        if finite:
            for g in grads:
                g.mul_(1.0 / self.scale)
        return finite

    def update(self, finite: bool) -> None:
        if finite:
            self.clean_steps += 1
            if self.clean_steps >= self.growth_interval:
                self.scale *= 2.0
                self.clean_steps = 0
        else:
            self.scale *= 0.5
            self.clean_steps = 0
            self.skipped_steps += 1


class Trainer:
    """One optimizer step: micro-batches with gradient accumulation, autocast, loss scaling.

    OneFlow 0.9.0's DDP has no `no_sync`: with accumulation on several ranks the gradients are
    all-reduced after every micro-batch (recorded in the summary as `ddp_allreduce`).
    """

    def __init__(self, case: Case, rt: OneFlowRuntime, model: Any, optimizer: Any,
                 loss_fn: Callable[[Any, Any], Any], batch: Any, gpipe: bool = False,
                 marker: Callable[[Any], Any] | None = None) -> None:
        self.gpipe = gpipe
        """Forward every micro-batch, then one backward of the summed loss (pipeline stages
        overlap); otherwise forward and backward per micro-batch."""
        self.marker = marker or (lambda total: total.float() * 1.0)
        """The step's end marker from its loss: a new op queued after the update."""
        self.flow = rt.flow
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.batch = batch
        self.accumulation = case.accumulation_steps
        self.device_type = rt.device_type
        self.amp_dtype = autocast_dtype(rt.flow, case.precision)
        self.scaling = case.effective_loss_scaling
        self.static_scale = case.static_loss_scale
        self.dynamic = (DynamicLossScale(rt.flow) if self.scaling is LossScaling.DYNAMIC
                        else None)
        self.params = [p for p in model.parameters() if p.requires_grad]

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return self.flow.autocast(self.device_type, dtype=self.amp_dtype)

    def _scale(self) -> float | None:
        if self.dynamic is not None:
            return self.dynamic.scale
        if self.scaling is LossScaling.STATIC:
            return self.static_scale
        return None

    def step(self) -> Any:
        """Queue one optimizer step; returns a scalar that is ready only once the step is done:
        the step's loss, recomputed by an op queued after the update (see the module doc)."""
        # Not set_to_none: under OneFlow 0.9.0's DDP that keeps the previous steps' gradients
        # in the all-reduce buckets, and every step after the first trains on their sum
        # (tests/integration/test_oneflow_gpt_parallel.py::...[dp2-ddp] catches it).
        self.optimizer.zero_grad(set_to_none=False)
        scale = self._scale()
        total = None
        for micro in range(self.accumulation):
            with self._autocast():
                loss = self.loss_fn(self.model, self.batch)
                if self.accumulation > 1:
                    loss = loss / self.accumulation
            if self.gpipe:  # keep the graph; one backward after the last forward
                total = loss if total is None else total + loss
                if micro == self.accumulation - 1:
                    (total * scale if scale is not None else total).backward()
                    total = total.detach()
                continue
            (loss * scale if scale is not None else loss).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.dynamic is not None:
            finite = self.dynamic.unscale_and_check(self.params)
            if finite:
                self.optimizer.step()
            self.dynamic.update(finite)
        else:
            if self.scaling is LossScaling.STATIC:
                for p in self.params:
                    if p.grad is not None:
                        p.grad.mul_(1.0 / self.static_scale)
            self.optimizer.step()
        assert total is not None
        return self.marker(total)


def synchronize(rt: OneFlowRuntime) -> None:
    """Wait until every op queued so far has finished (device and OneFlow's VM)."""
    if rt.device_type == "cuda":
        rt.flow.cuda.synchronize()
    rt.flow._oneflow_internal.eager.Sync()


def timed_loop(step: Callable[[], Any], iterations: int, warmup: int, rt: OneFlowRuntime,
               on_iter: IterCallback) -> dict[str, float]:
    """Run `iterations` steps, one queued ahead; call `on_iter` as each step's end is seen."""
    synchronize(rt)
    t0 = time.perf_counter()
    wall0 = time.time()
    pending: collections.deque[tuple[int, Any]] = collections.deque()
    prev = 0.0

    def finish(i: int, marker: Any) -> None:
        nonlocal prev
        value = float(marker.numpy())  # blocks until the step's last op has run
        elapsed = time.perf_counter() - t0
        on_iter(i, elapsed, elapsed - prev, value, wall0 + elapsed)
        prev = elapsed

    for i in range(1, iterations + 1):
        pending.append((i, step()))
        # Keep one step queued, except that warm-up's last step is read before the next is
        # queued: the measured window starts when the device finished it, not later.
        while len(pending) > 1 or (pending and pending[-1][0] == warmup):
            finish(*pending.popleft())
    while pending:
        finish(*pending.popleft())
    synchronize(rt)
    return {"host_elapsed_s": time.perf_counter() - t0, "queued_steps_ahead": 1.0}


def pci_bus_id(rt: OneFlowRuntime) -> str | None:
    """The CUDA device's PCI bus id as NVML prints it, when OneFlow reports it; None on CPU."""
    if rt.device_type != "cuda":
        return None
    try:
        props = rt.flow.cuda.get_device_properties(rt.device.index)
    except Exception:  # not every OneFlow build fills these in
        return None
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def cuda_build() -> str | None:
    """The CUDA version the OneFlow wheel was built with (`11.7` for 0.9.0), None without CUDA."""
    from oneflow import sysconfig

    if not sysconfig.with_cuda():
        return None
    code = int(sysconfig.get_cuda_version())  # 11070
    return f"{code // 1000}.{code % 1000 // 10}"
