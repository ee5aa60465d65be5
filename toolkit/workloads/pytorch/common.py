"""PyTorch machinery shared by the torch workloads: device and process group, precision, the run
options (compile, CUDA graphs, memory format) resolved for the device, the optimizer step with
accumulation and loss scaling, the timed loop and the loss sanity check.

The timed loop never stalls the device to read the clock. On CUDA it records an event after each
iteration and reads each iteration's completion time from the events once they have completed
(polled without blocking), so the host keeps queueing work exactly as a plain training script
would; on CPU the work is synchronous and the host clock is read after each step. Either way an
`iter` record's `elapsed_s` is the time the device finished that iteration, measured from one
synchronised start.

Compilation wraps the model (DDP included, so DDP's graph splitting keeps gradient
communication overlapped with the backward pass); the loss is part of each model's forward, so it
is compiled with it. Loss scaling and the optimizer stay outside the compiled graph.

Model definitions live in `torch_resnet50.py` and `torch_bert.py`, the image-folder pipeline in
`torch_data.py`, LAMB in `optim.py`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolkit.rank.binding import cuda_index
from toolkit.rank.discovery import RankInfo
from toolkit.spec import (
    Case,
    CompiledDDP,
    CompileMode,
    GradReduce,
    LossScaling,
    Model,
    Precision,
)

IterCallback = Callable[[int, float, float, float | None, float], None]
"""(iteration, elapsed_s, step_time_s, loss, wall-clock time the iteration finished)."""


@dataclass(frozen=True)
class RunOptions:
    """The case's run options as they apply on this rank's device (what actually runs)."""

    compile: bool = False
    compile_mode: CompileMode = CompileMode.DEFAULT
    kernel_tuning: bool = False
    """Inductor's coordinate-descent tuning of the compiled model's Triton kernels."""
    cudnn_benchmark: bool = False
    """cuDNN times each convolution's algorithms (on) or its heuristics choose (off)."""
    cuda_graphs: bool = False
    channels_last: bool = False
    compiled_ddp: CompiledDDP | None = None
    """How compiled DDP runs (`Case.compiled_ddp`); None where it does not apply (eager, or one
    data-parallel rank)."""
    grad_reduce: GradReduce | None = None
    """The dtype the data-parallel gradients are reduced in (`Case.grad_reduce`); None with one
    data-parallel rank."""
    notes: tuple[str, ...] = ()
    """Why a requested option does not apply here (e.g. CUDA graphs on a CPU rank)."""

    @property
    def torch_compile_mode(self) -> str | None:
        """The `mode` argument of torch.compile for these options."""
        autotune = self.compile_mode is CompileMode.MAX_AUTOTUNE
        if self.cuda_graphs:
            return "max-autotune" if autotune else "reduce-overhead"
        return "max-autotune-no-cudagraphs" if autotune else None

    def to_dict(self) -> dict[str, Any]:
        return {"compile": self.compile, "compile_mode": self.compile_mode.value,
                "torch_compile_mode": self.torch_compile_mode if self.compile else None,
                "kernel_tuning": self.kernel_tuning, "cudnn_benchmark": self.cudnn_benchmark,
                "cuda_graphs": self.cuda_graphs, "channels_last": self.channels_last,
                "compiled_ddp": self.compiled_ddp.value if self.compiled_ddp else None,
                "grad_reduce": self.grad_reduce.value if self.grad_reduce else None,
                "notes": list(self.notes)}


def resolve_options(case: Case, device_type: str) -> RunOptions:
    """Fill the case's `None` options with the device's defaults, for every torch workload
    alike: compile and channels_last on CUDA, off on CPU; a `compile_mode` other than
    `default` asks for compilation on any device. Kernel tuning: on for a compiled ResNet50
    under AMP on CUDA unless set (`tuned_by_default`); CUDA graphs: on for a compiled ResNet50
    or BERT at any number of ranks unless set (`Case.cuda_graphs_by_default`); compiled DDP:
    the case's, else `Case.compiled_ddp_default`, where there are several data-parallel ranks.
    CUDA graphs and kernel tuning need a CUDA device; on CPU they are recorded as not applied
    (set) or off (unset)."""
    cuda = device_type == "cuda"
    notes = []
    compile_ = (cuda or case.compile_mode is not CompileMode.DEFAULT) if case.compile is None \
        else case.compile
    graphs = compile_ and cuda and (case.cuda_graphs_by_default if case.cuda_graphs is None
                                    else case.cuda_graphs)
    if case.cuda_graphs and not cuda:
        notes.append("cuda_graphs: not applied on a CPU device (nothing to capture)")
    tuning = compile_ and cuda and (tuned_by_default(case) if case.kernel_tuning is None
                                    else case.kernel_tuning)
    if case.kernel_tuning and not cuda:
        notes.append("kernel_tuning: not applied on a CPU device (no Triton kernels to tune)")
    channels_last = case.model is Model.RESNET50 and (
        cuda if case.channels_last is None else case.channels_last)
    ddp = None
    if compile_ and case.dp > 1:
        ddp = case.compiled_ddp or case.compiled_ddp_default
    elif case.compiled_ddp is not None:
        notes.append("compiled_ddp: not applied (" + (
            "eager" if not compile_ else "one data-parallel rank") + ")")
    reduce = (case.grad_reduce or GradReduce.FP32) if case.dp > 1 else None
    if case.grad_reduce is not None and reduce is None:
        notes.append("grad_reduce: not applied (one data-parallel rank)")
    return RunOptions(compile=compile_, compile_mode=case.compile_mode, kernel_tuning=tuning,
                      cudnn_benchmark=case.cudnn_benchmark is True, cuda_graphs=graphs,
                      channels_last=channels_last, compiled_ddp=ddp, grad_reduce=reduce,
                      notes=tuple(notes))


def tuned_by_default(case: Case) -> bool:
    """Whether `kernel_tuning` unset tunes the case's compiled kernels: ResNet50 under AMP,
    whose 16-bit batch-norm and ReLU kernels are half its step and gain most from tuned block
    sizes; not ResNet50 in tf32 or fp32 (its fp32 kernels gained under 1% for four times the
    compile), nor the transformers (GEMM- and attention-bound)."""
    return case.model is Model.RESNET50 and case.precision in (Precision.AMP_BF16,
                                                               Precision.AMP_FP16)


def apply_compiler_settings(options: RunOptions) -> None:
    """Dynamo's and Inductor's process-wide settings for the options, set before anything is
    compiled (a rank compiles one model, so process-wide is per run): how compiled DDP runs
    (`compiled_ddp`), and kernel tuning, whose warm start also reuses the configurations an
    earlier run tuned (`tuning_cache`)."""
    if options.compiled_ddp is not None:
        import torch._dynamo.config as dynamo_config

        dynamo_config.optimize_ddp = {CompiledDDP.BUCKET_GRAPHS: "ddp_optimizer",
                                      CompiledDDP.ONE_GRAPH: False,
                                      CompiledDDP.COMPILED_AUTOGRAD: "python_reducer"
                                      }[options.compiled_ddp]
        if options.compiled_ddp is CompiledDDP.COMPILED_AUTOGRAD:
            dynamo_config.compiled_autograd = True
    if options.kernel_tuning:
        import torch._inductor.config as inductor_config

        from toolkit.workloads.pytorch.tuning_cache import reuse_tuned_configs

        inductor_config.coordinate_descent_tuning = True
        reuse_tuned_configs()


@dataclass
class TorchRuntime:
    device: Any
    """torch.device the rank runs on."""
    device_name: str
    distributed: bool
    backend: str | None
    precision_flags: dict[str, Any] = field(default_factory=dict)
    options: RunOptions = field(default_factory=RunOptions)
    """The run options resolved for `device` (`resolve_options`)."""
    world_size: int = 1
    rank: int = 0
    ready_time_s: float | None = None
    """Wall-clock time `setup` returned: framework imported, device and process group up."""


def setup(case: Case, info: RankInfo, gpu_index: int | None = None) -> TorchRuntime:
    """Choose the device, set threads and precision flags, start the process group."""
    import torch
    import torch.distributed as dist

    use_cuda = case.device.value != "cpu" and torch.cuda.is_available()
    if case.device.value == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("case asks for device cuda but torch sees no CUDA device")
    if use_cuda:
        count = torch.cuda.device_count()
        if info.local_size > count:
            raise RuntimeError(f"{info.local_size} ranks on host {info.host} but only {count} "
                               "visible GPUs")
        index = cuda_index(gpu_index, info.local_rank, count)
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        device_name = torch.cuda.get_device_name(index)
    else:
        threads = case.cpu_threads or max(1, (os.cpu_count() or 1) // max(1, info.local_size))
        torch.set_num_threads(threads)
        device = torch.device("cpu")
        device_name = f"cpu ({threads} threads)"
    options = resolve_options(case, device.type)
    flags = configure_precision(case.precision, options)
    backend = None
    if info.world_size > 1:
        backend = "nccl" if use_cuda else "gloo"
        os.environ.update(MASTER_ADDR=info.master_addr, MASTER_PORT=str(info.master_port))
        # Collectives on a side stream (tensor parallelism, FSDP) then free their inputs when
        # the collective is waited on, instead of through the caching allocator's record_stream,
        # which holds the memory until the stream's later work completes (torchtitan sets the
        # same). A value from the grid's or site's env wins.
        os.environ.setdefault("TORCH_NCCL_AVOID_RECORD_STREAMS", "1")
        kwargs: dict[str, Any] = {}
        if use_cuda:
            kwargs["device_id"] = device
        dist.init_process_group(backend=backend, rank=info.rank, world_size=info.world_size,
                                init_method=f"tcp://{info.master_addr}:{info.master_port}",
                                **kwargs)
    return TorchRuntime(device=device, device_name=device_name, distributed=backend is not None,
                        backend=backend, precision_flags=flags, options=options,
                        world_size=info.world_size, rank=info.rank, ready_time_s=time.time())


def teardown(rt: TorchRuntime) -> None:
    import torch.distributed as dist

    if rt.distributed and dist.is_initialized():
        dist.destroy_process_group()


def configure_precision(precision: Precision, options: RunOptions) -> dict[str, Any]:
    """Set TF32 switches for the precision and cuDNN's benchmark mode for the options; return
    the flags as recorded in meta.json.

    `fp32` means no TF32 anywhere (PyTorch's default lets cuDNN use TF32 for convolutions);
    `tf32` and the AMP precisions allow TF32 for what stays in FP32.
    """
    import torch

    tf32 = precision is not Precision.FP32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = options.cudnn_benchmark
    return precision_flags()


def precision_flags() -> dict[str, Any]:
    import torch

    flags: dict[str, Any] = {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.get_float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
    }
    # torch >= 2.9 also has per-backend `fp32_precision` settings ("tf32" / "ieee" / "none")
    for name, holder in (("torch.backends.cuda.matmul.fp32_precision",
                          torch.backends.cuda.matmul),
                         ("torch.backends.cudnn.conv.fp32_precision",
                          getattr(torch.backends.cudnn, "conv", None))):
        value = getattr(holder, "fp32_precision", None) if holder is not None else None
        if value is not None:
            flags[name] = value
    return flags


def autocast_dtype(precision: Precision) -> Any:
    import torch

    return {Precision.AMP_BF16: torch.bfloat16, Precision.AMP_FP16: torch.float16}.get(precision)


def wrap_ddp(model: Any, rt: TorchRuntime, bucket_mb: float | None = None,
             grad_reduce: GradReduce | None = None, broadcast_buffers: bool = True) -> Any:
    """DDP when there is more than one rank (gradient buckets of `bucket_mb` MiB, torch's
    default when None; all-reduced in `grad_reduce`'s dtype); the bare module otherwise.
    `broadcast_buffers` False: the model's buffers are constants that training never writes,
    so DDP need not broadcast them from rank 0 before every forward (`forward_sync_buffers`
    where torch has it, which still syncs them once at construction: equal constants stay
    equal; else the older `broadcast_buffers`, which torch now deprecates)."""
    if not rt.distributed:
        return model
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    ids = [rt.device.index] if rt.device.type == "cuda" else None
    extra: dict[str, Any] = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    if not broadcast_buffers:
        names = inspect.signature(DistributedDataParallel.__init__).parameters
        key = "forward_sync_buffers" if "forward_sync_buffers" in names else "broadcast_buffers"
        extra[key] = False
    ddp = DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True, **extra)
    reduce_in(ddp, grad_reduce)
    return ddp


def choose_grad_reduce(case: Case, rt: TorchRuntime, model: Any,
                       loss_fn: Callable[[Any, Any], Any], batch: Any,
                       link_rate_gbs: float | None) -> dict[str, Any]:
    """The gradient reduction by `toolkit.analysis.grad_reduce`'s rule, set in `rt.options`
    before the model is wrapped in DDP; returns the record (the figures and the rule). Every
    rank calls it with the same case and link, so all take the same path; where the rule
    applies each measures its backward (`backward_seconds`) and all take the slowest."""
    from toolkit.analysis import grad_reduce as rule

    why = rule.eligibility(case, rt.options.compiled_ddp, link_rate_gbs) \
        if rt.distributed else "one rank"
    if why is not None or link_rate_gbs is None:
        return rule.not_chosen(why or "the link's rate is not known", case)
    import torch
    import torch.distributed as dist

    backward = torch.tensor([backward_seconds(case, rt, model, loss_fn, batch)],
                            dtype=torch.float64, device=rt.device)
    dist.all_reduce(backward, op=dist.ReduceOp.MAX)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters()
                         if p.requires_grad)
    record = rule.choose(gradient_bytes, rt.world_size, case.num_nodes, link_rate_gbs,
                         float(backward.item()))
    record["backward_source"] = (f"measured: the slowest rank's eager backward, median of "
                                 f"{BACKWARD_STEPS} after one unmeasured")
    rt.options = dataclasses.replace(rt.options, grad_reduce=GradReduce(record["grad_reduce"]))
    return record


BACKWARD_STEPS = 3
"""Backward passes `backward_seconds` times (after one it does not)."""


def backward_seconds(case: Case, rt: TorchRuntime, model: Any,
                     loss_fn: Callable[[Any, Any], Any], batch: Any) -> float:
    """Median seconds of this rank's backward of one micro-batch (the bare model, eager,
    autocast as the case runs), timed on the device's clock. Leaves nothing behind: the random
    state (dropout) is restored, the buffers (batch-norm statistics) put back, the gradients
    cleared, and on a GPU the memory it took is handed back and the allocator's peak starts
    again (the run's memory figures are training's); a batch stream gives its next batch, which
    training then does not see."""
    import torch

    amp = autocast_dtype(case.precision)
    cuda = rt.device.type == "cuda"
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    times = []
    with torch.random.fork_rng(devices=[rt.device] if cuda else []):
        data = batch.next_batch() if isinstance(batch, BatchStream) else batch
        for i in range(BACKWARD_STEPS + 1):
            ctx = torch.autocast(rt.device.type, dtype=amp) if amp is not None else \
                contextlib.nullcontext()
            with ctx:
                loss = loss_fn(model, data)
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                loss.backward()
                end.record()
                end.synchronize()
                elapsed = start.elapsed_time(end) / 1e3
            else:
                began = time.perf_counter()
                loss.backward()
                elapsed = time.perf_counter() - began
            if i:
                times.append(elapsed)
            model.zero_grad(set_to_none=True)
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(saved[name])
    if cuda:  # the run's memory figures are training's, not the eager backward's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(rt.device)
    return sorted(times)[len(times) // 2]


def reduce_in(ddp: Any, grad_reduce: GradReduce | None, group: Any = None) -> None:
    """Make the DDP module all-reduce its gradient buckets in `grad_reduce`'s dtype: bf16
    registers torch's `bf16_compress_hook` (cast, all-reduce over `group`, cast back); fp32 or
    None leaves DDP's own all-reduce."""
    if grad_reduce is not GradReduce.BF16:
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)


def ddp_comm_hook(module: Any) -> str | None:
    """The communication hook a DDP module runs, as DDP's own logging data names it (None: its
    built-in all-reduce, or not a DDP module)."""
    logging_data = getattr(module, "_get_ddp_logging_data", None)
    if logging_data is None:
        return None
    name = logging_data().get("comm_hook")
    return name if isinstance(name, str) and name else None


class BatchStream:
    """A source of a new batch every micro-step (real data), in place of one fixed batch.

    Subclasses (`torch_data.ImageFolderStream`) return batches already on the device.
    """

    def next_batch(self) -> Any:
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        """What the run records about its input (source, size, time spent waiting for it)."""
        raise NotImplementedError


def compile_model(model: Any, options: RunOptions) -> Any:
    """`torch.compile` the (DDP-wrapped) model per the options; the model itself when off.

    Compiling the DDP wrapper, not the module inside, lets Dynamo split the graph at DDP's
    gradient buckets, so their all-reduce still overlaps the backward pass.
    """
    if not options.compile:
        return model
    import torch

    apply_compiler_settings(options)
    return torch.compile(model, mode=options.torch_compile_mode, dynamic=False)


class Trainer:
    """One optimizer step: micro-batches with gradient accumulation, autocast, loss scaling;
    compiled (and CUDA-graphed) as the runtime's options say. `batch` is one fixed batch
    (synthetic data) or a `BatchStream` that gives a new batch every micro-step."""

    def __init__(self, case: Case, rt: TorchRuntime, model: Any, optimizer: Any,
                 loss_fn: Callable[[Any, Any], Any], batch: Any) -> None:
        import torch

        self.options = rt.options
        self.model = compile_model(model, self.options)
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.stream = batch if isinstance(batch, BatchStream) else None
        self.batch = None if self.stream is not None else batch
        self.accumulation = case.accumulation_steps
        self.device_type = rt.device.type
        self.device = rt.device
        self.amp_dtype = autocast_dtype(case.precision)
        self.scaling = case.effective_loss_scaling
        self.static_scale = case.static_loss_scale
        self.scaler = (torch.amp.GradScaler(self.device_type)
                       if self.scaling is LossScaling.DYNAMIC else None)
        self.params = [p for p in model.parameters() if p.requires_grad]

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.amp_dtype)

    def step(self) -> Any:
        """Run one optimizer step; returns the (detached, device) loss of the step."""
        import torch

        if self.options.cuda_graphs:
            # a new step: outputs of the previous replay may be overwritten from here on
            torch.compiler.cudagraph_mark_step_begin()
        self.optimizer.zero_grad(set_to_none=True)
        total = None
        for micro in range(self.accumulation):
            sync = micro == self.accumulation - 1
            no_sync = getattr(self.model, "no_sync", None)
            ctx = no_sync() if (no_sync is not None and not sync) else contextlib.nullcontext()
            batch = self.stream.next_batch() if self.stream is not None else self.batch
            with ctx:
                with self._autocast():
                    loss = self.loss_fn(self.model, batch)
                    if self.accumulation > 1:
                        loss = loss / self.accumulation
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                elif self.scaling is LossScaling.STATIC:
                    (loss * self.static_scale).backward()
                else:
                    loss.backward()
            # a copy: a CUDA-graph output is overwritten by the next micro-step's replay
            value = loss.detach().clone()
            total = value if total is None else total + value
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            if self.scaling is LossScaling.STATIC:
                grads = [p.grad for p in self.params if p.grad is not None]
                torch._foreach_mul_(grads, 1.0 / self.static_scale)
            self.optimizer.step()
        return total

    def run(self, iterations: int, on_iter: IterCallback, profile: int = 0,
            record_profile: bool = True) -> dict[str, Any]:
        """The timed loop over `iterations` steps, then what the run records about itself:
        timing, the options that ran, the input, and the loss sanity check; with `profile`,
        that many more steps, under the profiler when `record_profile` (`profile_steps`:
        `profile` and `profile_trace` in the result)."""
        losses: list[float | None] = []

        def record(i: int, elapsed_s: float, step_s: float, loss: float | None,
                   wall_s: float) -> None:
            losses.append(loss)
            on_iter(i, elapsed_s, step_s, loss, wall_s)

        timing = timed_loop(self.step, iterations, self.device, record)
        data = (self.stream.summary() if self.stream is not None
                else {"source": "synthetic", "fixed_batch": True})
        out: dict[str, Any] = {
            **timing, "run_options": self.options.to_dict(), "data": data,
            "loss_check": loss_check(losses, fixed_batch=self.stream is None),
        }
        if self.scaler is not None:
            out["loss_scale_final"] = float(self.scaler.get_scale())
        if profile > 0:
            summary, trace = profile_steps(self.step, profile, self.device, record_profile)
            if summary is not None:
                out["profile"], out["profile_trace"] = summary, trace
        return out


def loss_check(losses: list[float | None], fixed_batch: bool) -> dict[str, Any]:
    """The sanity check recorded with every run: training on one fixed batch must lower the loss.

    Compares the mean of the first and the last k losses (k = a quarter of the run, 1 to 5), so
    one noisy step (or a step the dynamic loss scaler skipped) does not decide it. With real data
    the batches change and nothing is asserted (`passed` is None); a non-finite loss fails either
    way.
    """
    values = [v for v in losses if v is not None]
    out: dict[str, Any] = {"check": "loss falls on a fixed synthetic batch",
                           "iterations": len(values)}
    if len(values) < 2:
        return {**out, "passed": None, "reason": "fewer than 2 losses"}
    k = max(1, min(5, len(values) // 4))
    first, last = sum(values[:k]) / k, sum(values[-k:]) / k
    finite = all(math.isfinite(v) for v in values)
    out.update(first_mean=first, last_mean=last, window=k, finite=finite)
    if not finite:
        return {**out, "passed": False, "reason": "non-finite loss"}
    if not fixed_batch:
        return {**out, "passed": None, "reason": "batches change every step (real data)"}
    return {**out, "passed": last < first}


def timed_loop(step: Callable[[], Any], iterations: int, device: Any,
               on_iter: IterCallback) -> dict[str, float]:
    """Run `iterations` steps; call `on_iter` for each as soon as its finish time is known.
    Returns the host's seconds over the loop and `loop_start_time_s`, the wall-clock time the
    loop began (the model built, nothing compiled or run yet)."""
    if device.type == "cuda":
        return _timed_loop_cuda(step, iterations, on_iter)
    t0 = time.perf_counter()
    wall0 = time.time()
    prev = 0.0
    for i in range(1, iterations + 1):
        loss = step()
        value = float(loss)  # CPU ops are synchronous: the step is done
        elapsed = time.perf_counter() - t0
        on_iter(i, elapsed, elapsed - prev, value, wall0 + elapsed)
        prev = elapsed
    return {"host_elapsed_s": time.perf_counter() - t0, "loop_start_time_s": wall0}


def _timed_loop_cuda(step: Callable[[], Any], iterations: int,
                     on_iter: IterCallback) -> dict[str, float]:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    wall0 = time.time()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    pending: collections.deque[tuple[int, Any, Any]] = collections.deque()
    prev = 0.0

    def drain(block: bool) -> None:
        nonlocal prev
        while pending and (block or pending[0][1].query()):
            i, event, loss_host = pending.popleft()
            event.synchronize()
            elapsed = start.elapsed_time(event) / 1000.0
            value = float(loss_host) if loss_host is not None else None
            on_iter(i, elapsed, elapsed - prev, value, wall0 + elapsed)
            prev = elapsed

    for i in range(1, iterations + 1):
        loss = step()
        # Copy the loss into pinned host memory without waiting; read it once the event is done.
        loss_host = loss.to("cpu", non_blocking=True) if loss is not None else None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        pending.append((i, event, loss_host))
        drain(block=False)
    drain(block=True)
    torch.cuda.synchronize()
    return {"host_elapsed_s": time.perf_counter() - t0, "device_elapsed_s": prev,
            "loop_start_time_s": wall0}


def profile_steps(step: Callable[[], Any], steps: int, device: Any, record: bool = True
                  ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Run one unrecorded step and then `steps` more after the timed window (nothing measured
    includes them), under torch.profiler when `record`: (what the rank's summary records:
    steps, wall ms per step, kernel ms per step by kind and idle
    (`toolkit.analysis.kernels.breakdown`); the Chrome trace itself). Every rank of a
    distributed run must take these steps, profiled or not: each one waits for the others'
    gradients. The profiler takes each rank a different time to start; the unrecorded step's
    collectives absorb that, so that no rank's first recorded collective holds its wait for
    the others' profilers. (None, None) when not `record`."""
    if not record:
        for _ in range(steps + 1):
            step()
        if device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        return None, None
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from toolkit.analysis.kernels import breakdown, trace_kernels

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        step()  # the profiler's warm-up: not in the trace
        sync()
        prof.step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        step_ms = (time.perf_counter() - t0) * 1000.0 / steps
    with tempfile.TemporaryDirectory() as tmp:  # the profiler writes only to a path
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            trace: dict[str, Any] = json.load(fh)
    kernels = trace_kernels(trace)
    summary = {"steps": steps, "step_ms": step_ms, "kernels": len(kernels),
               "kernel_ms": breakdown(kernels, steps, step_ms)}
    return summary, trace


def pci_bus_id(device: Any) -> str | None:
    """The CUDA device's PCI bus id as NVML prints it (`00000000:18:00.0`); None on CPU."""
    import torch

    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def peak_memory_mib(device: Any) -> float | None:
    """The framework's own peak: bytes the caching allocator handed out (not NVML's view)."""
    import torch

    if device.type != "cuda":
        return None
    return float(torch.cuda.max_memory_allocated(device)) / 2**20


def runtime_summary(rt: TorchRuntime) -> dict[str, Any]:
    """What every torch workload's summary says about the device it ran on (read at the end of
    the run, so the allocator peak covers it), and the CPU threads torch computed with."""
    import torch

    return {
        "device": rt.device_name,
        "threads": torch.get_num_threads(),
        "pci_bus_id": pci_bus_id(rt.device),
        "device_type": rt.device.type,
        "backend": rt.backend,
        "precision_flags": rt.precision_flags,
        "framework_peak_memory_mib": peak_memory_mib(rt.device),
        "ready_time_s": rt.ready_time_s,
        "compile_s": compile_seconds(),
        "compile_cache": compile_cache_counts(),
    }


COMPILE_CACHE_COUNTERS = {
    ("inductor", "fxgraph_cache_hit"): "graph_hits",
    ("inductor", "fxgraph_cache_miss"): "graph_misses",
    ("inductor", "fxgraph_cache_bypass"): "graph_bypasses",
    ("aot_autograd", "autograd_cache_hit"): "autograd_hits",
    ("aot_autograd", "autograd_cache_miss"): "autograd_misses",
    ("inductor", "coordesc_tuning_bench"): "tuning_trials",
}
"""Dynamo's counters this process's compile-cache record reads, under the names it gives them."""


def compile_cache_counts() -> dict[str, int] | None:
    """What torch.compile found in its caches in this process, from Dynamo's own counters:
    Inductor's compiled graphs (`graph_hits`, `graph_misses`, `graph_bypasses`: graphs that
    cannot be cached), AOTAutograd's forward/backward pairs (`autograd_*`), and the kernel
    configurations kernel tuning timed (`tuning_trials`: 0 when every tuned configuration came
    from the cache). None before anything was compiled, or where this torch does not count."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled: do not import Dynamo for this
        return None
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    found = {name: int(counters[group][key]) for (group, key), name in
             COMPILE_CACHE_COUNTERS.items()}
    return found if any(found.values()) else None


def compile_seconds() -> float | None:
    """Seconds this process spent compiling with torch.compile so far: Dynamo's tracing and
    Inductor's code generation of every forward and backward graph (with their cache look-ups),
    as Dynamo itself counts them. 0 for an eager run; None where this torch does not count.
    Kernel tuning that runs when a compiled kernel is first called (`kernel_tuning`, the
    benchmarking of max_autotune's Triton kernels) is not in it: the run's launch-to-first-
    iteration time holds it."""
    try:
        from torch._dynamo.utils import calculate_time_spent
    except ImportError:
        return None
    spent = calculate_time_spent()
    total = spent.get("total_wall_time")
    return float(total) if isinstance(total, (int, float)) else None
