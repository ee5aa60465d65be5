"""The benchmark case: one fully resolved configuration that runs as one job.

What lives here: the closed vocabularies (enums), the frozen `Case` dataclass and its parts, the
per-model defaults, cross-field checks (`CaseError` names the key that is wrong), strict
conversion from and to plain dicts (JSON/YAML), the human-readable case id and the config hash.

What lives elsewhere: reading grid YAML, sweeps and error reporting with file names
(`toolkit.spec.grid`); executor-specific limits such as "nodes > 1 on the local executor"
(`toolkit.launch.executor`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from toolkit.spec.command import CommandOptions, hashed_options
from toolkit.spec.convert import CaseError, check_env_names, from_plain, to_plain
from toolkit.spec.models import MODEL_DEFAULTS, MODEL_KEYS, ModelConfig
from toolkit.spec.placement import ContainerOptions, SiteOptions
from toolkit.spec.vocab import (
    MODEL_OPTIMIZERS,
    BindingMode,
    CommandLaunch,
    CompiledDDP,
    CompileMode,
    DataParallelKind,
    DataSource,
    DeviceKind,
    Framework,
    GradReduce,
    LossScaling,
    Model,
    Optimizer,
    PipelineSchedule,
    Precision,
)


@dataclass(frozen=True)
class Parallelism:
    """How the world is divided. Data-parallel size is derived: world / (tp x pp)."""

    tp: int = 1
    """Tensor-parallel degree."""
    pp: int = 1
    """Pipeline-parallel degree."""
    micro_batch_size: int | None = None
    """Samples per forward pass on one rank; `None` = batch_size_per_device (no accumulation)."""


@dataclass(frozen=True)
class RankBinding:
    """One local rank's explicit binding (with `binding: explicit`)."""

    local_rank: int
    gpu: int | None = None
    """NVML index of the GPU; `None` = the topology plan's choice."""
    cpus: str | None = None
    """CPU list such as `0-11,24-35`; `None` = the plan's share of the GPU's CPUs."""
    nic: str | None = None
    """RDMA device (`mlx5_0`) for NCCL_IB_HCA / UCX_NET_DEVICES; `None` = the nearest one."""


PMIX_FENCES = ("ring", "tree", "mixed", "site")
"""`slurm.pmix_fence`'s values: Slurm's three `PMIxCollFence` collectives, and `site`."""


@dataclass(frozen=True)
class SlurmJobOptions:
    """Scheduler options. Strings are passed to sbatch as single arguments, never to a shell."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 60
    """Wall-clock limit of one job in minutes (also the local executor's per-run limit)."""
    exclusive: bool = False
    constraint: str | None = None
    cpus_per_task: int | None = None
    launcher: str = "srun"
    """`srun` (srun --mpi=<mpi>) or `mpirun` inside the allocation."""
    mpi: str = "pmix"
    """The PMI plugin for `srun --mpi=` (Debian's Open MPI works with pmix)."""
    pmix_fence: str = "ring"
    """The collective of the PMIx plugin's fences under `srun --mpi=pmix*`, exported to the
    step as `SLURM_PMIX_FENCE` (which wins over the cluster's mpi.conf): `ring`, `tree`,
    `mixed`, or `site` (export nothing: the cluster's `PMIxCollFence` holds). `ring` by
    default: Slurm's tree fence (`tree`, and the end of `mixed`, Slurm's own default) builds
    its tree from `TreeWidth` and, on a step of fewer nodes than that, waits for no other
    node, so a rank can leave MPI_Init while a peer on another node is still in it, and that
    peer dies of SIGSEGV when the first message reaches it
    (`toolkit.results.diagnose.PMIX_START_CAUSE`)."""
    repeats_as: str = "array"
    """`array`: each repeat is one task of a job array; `sequence`: one job runs the repeats
    back to back in a single allocation."""
    array_scope: str = "case"
    """`case`: one job (array) per case; `grid`: cases with the same sbatch directives share
    one job array (far fewer sbatch calls for large grids; job name = grid name)."""
    array_parallelism: int | None = None
    """At most this many tasks of a job array run at once (`--array=...%K`); 1 runs the repeats
    one after another, so that they never share the cluster with each other. None: no cap."""
    extra_sbatch: tuple[str, ...] = ()
    """Further sbatch options, each one `--name=value` argument."""
    requeue: bool = True
    """When a node of the job fails or a higher-priority job preempts it, Slurm requeues the
    job (`--requeue`) and the interrupted run is tried again (its attempt kept as
    `r<k>.attempt<n>`); `false` (`--no-requeue`): the run is recorded as node_fail / preempted
    and a later submit runs it again."""


@dataclass(frozen=True)
class WatchdogOptions:
    """The worker's hang watchdog (`toolkit.rank.watchdog`): a rank that logs no `iter` event for
    this long writes an `error` event with the reason and aborts the whole MPI job. It does not
    change what is measured, so it is not part of the config hash."""

    iteration_s: float = 300.0
    """Longest wait from one iteration to the next, in seconds; 0 = off."""
    first_iteration_s: float = 1800.0
    """Longest wait from the rank's start to its first iteration (model build, torch.compile,
    data loading), in seconds; 0 = off."""
    unread_output_s: float = 30.0
    """Own scripts (`model: command`) read from their output: a program that has printed
    lines for this long, none of them a step record (a `pattern` with a typo, the wrong
    `log_format`), is ended with that reason instead of waiting for `first_iteration_s`;
    0 = off (a program that prints for longer than this before its first step: progress bars
    of a download or of data loading)."""


PREFLIGHT_ON_FAIL = ("warn", "skip_node", "stop")


@dataclass(frozen=True)
class PreflightOptions:
    """A preflight (`python -m toolkit.preflight`: GEMM, memory and collective bandwidth, GPU
    health) on every rank at the start of each job, before training. It does not change what
    is measured, so it is not part of the config hash."""

    enabled: bool = False
    on_fail: str = "warn"
    """What a node found `slow` or `fault` does to the job: `warn` (train anyway, the report
    says so), `stop` (the job ends before training; its runs stay to do), `skip_node` (as
    `stop`, and the next submit of the grid gives Slurm those nodes to `--exclude`)."""
    timeout_s: int = 600
    """The preflight's ranks are killed after this many seconds (a hung collective must not
    hold the allocation); what they wrote by then is judged, a rank that did not finish is a
    fault."""

    def __post_init__(self) -> None:
        if self.timeout_s < 10:
            raise CaseError("timeout_s", f"expected an integer >= 10, got {self.timeout_s}")
        if self.on_fail not in PREFLIGHT_ON_FAIL:
            raise CaseError("on_fail", f"expected one of {', '.join(PREFLIGHT_ON_FAIL)}"
                            f", got {self.on_fail!r}")


@dataclass(frozen=True)
class ProfileOptions:
    """A PyTorch profiler trace of `steps` steps on each rank in `ranks`, in the case's last
    repeat only, run right after that repeat's timed window (so no measured figure includes
    the profiler). The trace goes into the run directory and the kernel time by kind
    (`toolkit.analysis.kernels`) into the rank's summary and the report. It does not change
    what is measured, so it is not part of the config hash."""

    ranks: tuple[int, ...] = ()
    steps: int = 0
    """0 = no profile."""

    @property
    def enabled(self) -> bool:
        return self.steps > 0 and bool(self.ranks)

    def steps_in(self, repeat: int, repeats: int) -> int:
        """Profiled steps every rank takes in `repeat` of `repeats`: `steps` in the last one
        (under data parallelism each rank waits for the others), else 0."""
        return self.steps if self.enabled and repeat == repeats - 1 else 0

    def records(self, rank: int, repeat: int, repeats: int) -> bool:
        """Whether `rank` records a trace in `repeat`: a chosen rank, in the profiled repeat."""
        return self.steps_in(repeat, repeats) > 0 and rank in self.ranks


@dataclass(frozen=True)
class Case:
    """One benchmark configuration. Built by `toolkit.spec.grid`; runs as `repeats` jobs."""

    framework: Framework = Framework.TORCH
    model: Model = Model.RESNET50
    precision: Precision = Precision.FP32
    loss_scaling: LossScaling | None = None
    """amp_fp16 only: `dynamic` (default for fp16) or `static`."""
    static_loss_scale: float = 128.0
    """The fixed scale used with `loss_scaling: static`."""
    num_nodes: int = 1
    gpus_per_node: int = 1
    """Ranks per node: one per GPU, or CPU ranks on a machine without GPUs."""
    batch_size_per_device: int = 32
    """Samples per rank per optimizer step (micro-batches x accumulation)."""
    parallel: Parallelism = field(default_factory=Parallelism)
    model_config: ModelConfig = field(default_factory=ModelConfig)
    command: CommandOptions = field(default_factory=CommandOptions)
    """`model: command`: the user's program, its arguments and how its figures are read
    (`toolkit.spec.command`)."""
    warmup_iterations: int = 20
    """Iterations run before the clock starts; dropped from throughput."""
    measured_iterations: int = 100
    """Iterations in the throughput window."""
    data: DataSource = DataSource.SYNTHETIC
    device: DeviceKind = DeviceKind.AUTO
    cpu_threads: int | None = None
    """Intra-op threads per rank on CPU; `None` = the node's CPUs divided by its ranks."""
    seed: int = 1234
    name: str | None = None
    """An explicit case id (e.g. `DP_8x1x1_16_1536x16`); `None` derives one."""
    telemetry_interval_ms: int = 100
    """NVML sampling interval per rank; 0 turns the sampler off."""
    binding: BindingMode = BindingMode.AUTO
    binding_map: tuple[RankBinding, ...] = ()
    """With `binding: explicit`: one entry per local rank."""
    slurm: SlurmJobOptions = field(default_factory=SlurmJobOptions)
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment for every rank; wins over values the toolkit derives."""
    repeats: int = 1
    """How many times the case runs (at most MAX_REPEATS). Not part of the config hash."""
    watchdog: WatchdogOptions = field(default_factory=WatchdogOptions)
    """Hang limits per rank (`iteration_s`, `first_iteration_s`). Not part of the config hash."""
    preflight: PreflightOptions = field(default_factory=PreflightOptions)
    """A preflight of every node before training (`enabled`, `on_fail`). Not hashed."""
    container: ContainerOptions = field(default_factory=ContainerOptions)
    """The container the ranks run in (`runtime`, `image`, `mounts`, ...). Not hashed: the
    image is recorded in each run's meta.json."""
    site: SiteOptions = field(default_factory=SiteOptions)
    """Set from the site profile (`--site`), never by a grid: its name, environment, modules
    and GPU request. Not hashed."""
    profile: ProfileOptions = field(default_factory=ProfileOptions)
    """Profiler trace of the last repeat (`ranks`, `steps`), after its timed window. Not
    hashed."""

    # -- torch run options ---------------------------------------------------------
    # How the torch workloads run: compilation, CUDA graphs, memory format, optimizer and the
    # real-data pipeline. `None` means "the default for the device the rank ends up on"; the
    # worker records what it resolved to in its summary event. Checked in `_check_run_options`.
    compile: bool | None = None
    """torch.compile the model and its loss (every torch model, the GPT's layers included).
    `None` = on for CUDA, off on CPU, on anywhere when `compile_mode` is not `default`."""
    compile_mode: CompileMode = CompileMode.DEFAULT
    """Inductor's mode: `default` or `max_autotune` (benchmarks kernel choices; long compile)."""
    kernel_tuning: bool | None = None
    """Inductor's coordinate-descent tuning: each generated Triton kernel's block sizes are
    tuned by timing them on the device when the compiled model first runs.
    `None` = on for resnet50 under AMP (amp_bf16, amp_fp16) compiled on CUDA, whose batch-norm
    and ReLU kernels are half its step; off for resnet50 in tf32/fp32 and for the transformers.
    It lengthens a cold start: on one H200, ResNet50 amp_bf16 reached its first iteration
    after 263 s with an empty compile cache (63 s untuned); a warm cache gives the tuned
    kernels back (26 s, as untuned; `tuning_cache`).
    Needs compile; on CPU there are no Triton kernels to tune: recorded as off."""
    cudnn_benchmark: bool | None = None
    """cuDNN's benchmark mode (`torch.backends.cudnn.benchmark`): every process times each
    convolution shape's candidate algorithms when it first runs and keeps the fastest.
    `None` = off: cuDNN's heuristics choose without timing. On one H200 and one H100, ResNet50
    bs 256 ran as fast either way (amp_bf16 and tf32, within 0.5%) while the timing added
    12-27 s to every run's first iteration, cached compile or not."""
    cuda_graphs: bool | None = None
    """Replay the compiled forward and backward as CUDA graphs (torch.compile's reduce-overhead
    machinery); needs compile. `None` = on for a torch resnet50 or bert_base, on one rank and
    on N alike (`cuda_graphs_by_default`), so that a speedup compares runs that ran the same
    way: on one H200, ResNet50 amp_bf16 bs 256 ran 1.6% faster with them; on two H100s under
    DDP with bucket graphs, ResNet50's two-GPU speedup was 1.931 with them against 1.879
    without, and BERT's (seq 128, bs 128) 1.830 against 1.113: without them, launching DDP's
    per-bucket graphs leaves the GPUs idle. Off
    for the GPT, whose parallel layouts (DTensor, pipeline stages) do not capture. On CPU
    there is nothing to capture: recorded as off. With kernel tuning, cases with and without
    CUDA graphs in one compile cache tune their shared kernels again at every start; a cache
    of either alone keeps the tuned kernels."""
    channels_last: bool | None = None
    """ResNet50: NHWC memory format for weights and images. `None` = on for CUDA, off on CPU."""
    optimizer: Optimizer | None = None
    """`None` = the model's recipe: sgd for resnet50, adamw for bert_base (or lamb)."""
    data_path: str | None = None
    """With `data: image_folder`: a directory of class folders of JPEGs (ImageNet's train
    layout), read on the compute nodes."""
    data_workers: int | None = None
    """DataLoader worker processes per rank; `None` = the rank's CPUs minus one (at least 1)."""
    ddp_bucket_mb: float | None = None
    """ResNet50/BERT with several ranks: DDP's gradient bucket size in MiB (`bucket_cap_mb`;
    `None` = torch's 25). Compiled, each bucket is a graph split whose all-reduce overlaps the
    rest of the backward; one bucket as large as the gradients keeps one graph and all-reduces
    once after the backward."""
    compiled_ddp: CompiledDDP | None = None
    """With several data-parallel ranks and compile: how DDP's gradient all-reduce meets
    torch.compile. `bucket_graphs`: a graph per gradient bucket, each bucket's all-reduce
    overlapping the rest of the backward (torch's default); `one_graph`: one forward and one
    backward graph, the buckets all-reduced after it; `compiled_autograd`: the all-reduces
    traced into the compiled backward (DDP's python reducer). `None` = `one_graph` for resnet50
    and bert_base (on two H100s: ResNet50 speedup 1.923 against 1.879 with bucket graphs, BERT
    1.670 against 1.113, both without CUDA graphs: fewer, larger graphs and launches), and
    `bucket_graphs` for the GPT, whose 2 GiB of gradients gain from the overlap
    (`compiled_ddp_default`). The GPT under DDP (tp = pp = 1) compiles the model and its loss
    as one function around the DDP module, as one rank does; under FSDP, tp or pp it compiles
    each layer and this option does not apply."""
    grad_reduce: GradReduce | None = None
    """With several DDP ranks (resnet50, bert_base, the GPT at tp = pp = 1): the dtype the
    gradients are all-reduced in, `fp32` or `bf16` (half the bytes, the sum rounded to
    bfloat16; torch's `bf16_compress_hook`). `None` = fp32, what one GPU applies. Not with
    `compiled_ddp: compiled_autograd`, whose reduction is traced without DDP's hooks."""
    # -- end of torch run options --------------------------------------------------------------
    # -- GPT options (toolkit/workloads/torch_gpt*.py) ------------------------------------------
    activation_checkpointing: bool = False
    """GPT: recompute every layer's activations in backward (full recomputation). TFLOP/s then
    use Megatron's 96-formula (`toolkit.analysis.flops`)."""
    sequence_parallel: bool = False
    """GPT with `parallel.tp > 1` (and no pipeline): Megatron's sequence parallelism. Between
    the tensor-parallel layers the residual stream, the LayerNorms and the embedding output are
    split over the sequence, so each all-reduce becomes a reduce-scatter and an all-gather (the
    same bytes) and the LayerNorm and residual work is divided by tp. Off unless set: not yet
    measured against plain tensor parallelism on GPUs."""
    async_tp: bool = False
    """GPT with `sequence_parallel` and compile, on CUDA: asynchronous tensor parallelism
    (Inductor's micro-pipelined TP over symmetric memory, as torchtitan enables it). Each
    all-gather before a column-parallel GEMM and each reduce-scatter after a row-parallel one is
    split into chunks that overlap the GEMM. Needs no NVLink multicast. On a CPU rank it is
    recorded as not applied. Off unless set: not yet measured."""
    pipeline_schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    """GPT with `parallel.pp > 1`: `gpipe`, `1f1b` or `interleaved_1f1b` (torch only); the
    micro-batches of one step are the pipeline's micro-batches (batch_size_per_device /
    micro_batch_size of them)."""
    pipeline_stages_per_rank: int | None = None
    """GPT with `pipeline_schedule: interleaved_1f1b`: the stages each pipeline rank holds (v,
    at least 2; rank r holds stages r, r + pp, ...). The layers are balanced over pp x v
    stages, and the pipeline bubble is (pp - 1) / (v x micro-batches) of the ideal step instead
    of (pp - 1) / micro-batches. `None` = 2 with interleaved_1f1b; no other schedule takes it."""
    data_parallel: DataParallelKind = DataParallelKind.AUTO
    """GPT: gradient sharing over the data-parallel ranks: `ddp`, `fsdp` (FSDP2) or `auto`."""
    # `compile` (above, with the torch run options) compiles each GPT layer and the loss, with
    # the default of every torch workload.
    # -- end of GPT options ---------------------------------------------------------------------

    def __post_init__(self) -> None:
        for key in ("num_nodes", "gpus_per_node", "batch_size_per_device", "measured_iterations",
                    "repeats"):
            if getattr(self, key) < 1:
                raise CaseError(key, f"expected an integer >= 1, got {getattr(self, key)}")
        if self.profile.steps < 0:
            raise CaseError("profile.steps", f"expected an integer >= 0 (0 = off), got "
                                             f"{self.profile.steps}")
        bad = [r for r in self.profile.ranks if not 0 <= r < self.world_size]
        if bad:
            raise CaseError("profile.ranks", f"ranks {bad} are not ranks of this case (0 to "
                                             f"{self.world_size - 1})")
        if self.repeats > MAX_REPEATS:
            raise CaseError("repeats", f"expected at most {MAX_REPEATS} (one Slurm job array), "
                                       f"got {self.repeats}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise CaseError("cpu_threads", f"expected an integer >= 1 (or null: the node's CPUs "
                                           f"divided by its ranks), got {self.cpu_threads}")
        if self.telemetry_interval_ms < 0:
            raise CaseError("telemetry_interval_ms", "expected an integer >= 0 (0 = off)")
        if self.warmup_iterations < 0:
            raise CaseError("warmup_iterations", "expected an integer >= 0")
        for key in ("iteration_s", "first_iteration_s", "unread_output_s"):
            if not getattr(self.watchdog, key) >= 0:  # NaN fails too
                raise CaseError(f"watchdog.{key}", "expected a number of seconds >= 0 (0 = off), "
                                f"got {getattr(self.watchdog, key)}")
        if self.loss_scaling is not None and self.precision is not Precision.AMP_FP16:
            raise CaseError("loss_scaling", f"only applies to amp_fp16, not {self.precision.value}")
        if not math.isfinite(self.static_loss_scale) or self.static_loss_scale <= 0:
            raise CaseError("static_loss_scale",
                            f"expected a finite number > 0, got {self.static_loss_scale}")
        p = self.parallel
        for key in ("tp", "pp"):
            if getattr(p, key) < 1:
                raise CaseError(f"parallel.{key}", "expected an integer >= 1")
        if self.world_size % (p.tp * p.pp):
            raise CaseError(
                "parallel",
                f"tp x pp = {p.tp} x {p.pp} = {p.tp * p.pp} does not divide the world size "
                f"num_nodes x gpus_per_node = {self.num_nodes} x {self.gpus_per_node} = "
                f"{self.world_size}",
            )
        mbs = p.micro_batch_size
        if mbs is not None and (mbs < 1 or self.batch_size_per_device % mbs):
            raise CaseError(
                "parallel.micro_batch_size",
                f"{mbs} does not divide batch_size_per_device {self.batch_size_per_device}",
            )
        if self.slurm.launcher not in ("srun", "mpirun"):
            raise CaseError("slurm.launcher",
                            f"expected srun or mpirun, got {self.slurm.launcher!r}")
        if self.slurm.time_min < 1:
            raise CaseError("slurm.time_min", "expected an integer >= 1")
        if self.container.runtime == "pyxis" and self.slurm.launcher != "srun":
            raise CaseError("container.runtime", "pyxis starts containers through srun: set "
                            f"slurm.launcher: srun (got {self.slurm.launcher})")
        self._check_slurm()
        self._check_binding()
        self._check_run_options()
        self._check_gpt_options()
        self._check_command()
        if self.name is not None and not _ID_RE.fullmatch(self.name):
            raise CaseError("name", f"{self.name!r} is not a valid case id: {_ID_RULE}")
        check_env_names(self.env, "a grid")

    def _check_slurm(self) -> None:
        """Slurm strings end up in `#SBATCH` lines: one line each, so no control characters."""
        o = self.slurm
        choices = {"repeats_as": ("array", "sequence"), "array_scope": ("case", "grid")}
        for key, allowed in choices.items():
            if getattr(o, key) not in allowed:
                raise CaseError(f"slurm.{key}", f"expected one of {', '.join(allowed)}, "
                                                f"got {getattr(o, key)!r}")
        if o.array_parallelism is not None and o.array_parallelism < 1:
            raise CaseError("slurm.array_parallelism",
                            f"expected an integer >= 1 (or leave it out), got "
                            f"{o.array_parallelism}")
        if not _WORD_RE.fullmatch(o.mpi):
            raise CaseError("slurm.mpi", f"expected a PMI plugin name like pmix, got {o.mpi!r}")
        if o.pmix_fence not in PMIX_FENCES:
            raise CaseError("slurm.pmix_fence", f"expected one of {', '.join(PMIX_FENCES)}, "
                                                f"got {o.pmix_fence!r}")
        for key in ("partition", "account", "qos", "constraint"):
            value = getattr(o, key)
            if value is not None and (not value or not _SBATCH_VALUE_RE.fullmatch(value)):
                raise CaseError(f"slurm.{key}", f"{value!r}: expected printable text without "
                                                "control characters or newlines")
            if value is not None and "\\" in value:
                raise CaseError(f"slurm.{key}", f"{value!r}: {_BACKSLASH}")
        for i, opt in enumerate(o.extra_sbatch):
            if not _EXTRA_SBATCH_RE.fullmatch(opt):
                raise CaseError(f"slurm.extra_sbatch[{i}]",
                                f"{opt!r}: expected one option like --mem=8G or --exclude=n1 "
                                "(a long option; its value printable, no newlines, at most "
                                "200 characters)")
            if "\\" in opt:
                raise CaseError(f"slurm.extra_sbatch[{i}]", f"{opt!r}: {_BACKSLASH}")
        if self.slurm.cpus_per_task is not None and self.slurm.cpus_per_task < 1:
            raise CaseError("slurm.cpus_per_task", "expected an integer >= 1")

    def _check_gpt_options(self) -> None:
        """The GPT block: options other models do not have, and what pipelining needs."""
        if self.model is not Model.GPT:
            defaults = {"activation_checkpointing": False, "sequence_parallel": False,
                        "async_tp": False,
                        "pipeline_schedule": PipelineSchedule.ONE_F_ONE_B,
                        "pipeline_stages_per_rank": None,
                        "data_parallel": DataParallelKind.AUTO}
            for key, default in defaults.items():
                if getattr(self, key) != default:
                    raise CaseError(key, f"only model gpt has this option, not {self.model.value}")
            return
        p = self.parallel
        # torch's pipelining schedules; OneFlow's GPT runs its own GPipe loop.
        if (p.pp > 1 and self.pipeline_schedule is PipelineSchedule.ONE_F_ONE_B
                and self.framework is Framework.TORCH and self.accumulation_steps < p.pp):
            raise CaseError(
                "parallel.micro_batch_size",
                f"pipeline_schedule 1f1b needs at least pp = {p.pp} micro-batches per step; "
                f"batch_size_per_device / micro_batch_size = {self.batch_size_per_device} / "
                f"{self.micro_batch_size} = {self.accumulation_steps}")
        self._check_interleaving()
        if self.sequence_parallel and p.tp == 1:
            raise CaseError("sequence_parallel", "needs tensor parallelism (parallel.tp > 1)")
        if self.sequence_parallel and p.pp > 1:
            raise CaseError("sequence_parallel", f"is not supported with pipeline stages "
                            f"(parallel.pp = {p.pp}): use tp alone")
        if self.sequence_parallel and self.framework is not Framework.TORCH:
            raise CaseError("sequence_parallel", f"applies to torch only, not "
                            f"{self.framework.value}")
        if self.async_tp and not self.sequence_parallel:
            raise CaseError("async_tp", "needs sequence_parallel: true (it overlaps the "
                            "all-gathers and reduce-scatters that sequence parallelism makes)")
        if self.async_tp and self.compile is False:
            raise CaseError("async_tp", "needs compile: true (or unset); Inductor splits the "
                            "collectives")
        if self.data_parallel is DataParallelKind.DDP and p.tp > 1 and self.dp > 1:
            raise CaseError(
                "data_parallel",
                f"ddp cannot hold tensor-parallel (DTensor) parameters: with tp = {p.tp} and "
                f"dp = {self.dp} use fsdp (or auto)")

    def _check_interleaving(self) -> None:
        """`interleaved_1f1b` and its stages per rank, as torch's ScheduleInterleaved1F1B takes
        them: it splits the m micro-batches into max(1, m // pp) rounds of equal size."""
        v = self.pipeline_stages_per_rank
        interleaved = self.pipeline_schedule is PipelineSchedule.INTERLEAVED_1F1B
        if v is not None and not interleaved:
            raise CaseError("pipeline_stages_per_rank", f"only applies to pipeline_schedule: "
                            f"interleaved_1f1b, not {self.pipeline_schedule.value}")
        if v is not None and v < 2:
            raise CaseError("pipeline_stages_per_rank", f"expected an integer >= 2 (one stage "
                            f"per rank is pipeline_schedule: 1f1b), got {v}")
        if interleaved and self.framework is not Framework.TORCH:
            raise CaseError("pipeline_schedule", f"interleaved_1f1b applies to torch only, "
                            f"not {self.framework.value} (its GPT runs its own GPipe loop)")
        pp, m = self.parallel.pp, self.accumulation_steps
        if not interleaved or pp == 1:
            return
        rounds = max(1, m // pp)
        if m % rounds:
            raise CaseError(
                "parallel.micro_batch_size",
                f"pipeline_schedule interleaved_1f1b needs a number of micro-batches per step "
                f"m that divides into max(1, m // pp) rounds of equal size (torch's "
                f"ScheduleInterleaved1F1B): batch_size_per_device / micro_batch_size = "
                f"{self.batch_size_per_device} / {self.micro_batch_size} = {m} micro-batches "
                f"do not divide into {rounds} rounds at pp = {pp} (a multiple of pp does)")

    @property
    def stages_per_rank(self) -> int:
        """Pipeline stages each pp rank holds: `pipeline_stages_per_rank` (2 unset) with
        interleaved_1f1b and pp > 1, else 1."""
        if (self.parallel.pp > 1
                and self.pipeline_schedule is PipelineSchedule.INTERLEAVED_1F1B):
            return self.pipeline_stages_per_rank or 2
        return 1

    def _check_command(self) -> None:
        """A command case has its program; the built-in models' options do not apply to it."""
        if self.model is not Model.COMMAND:
            if self.command != CommandOptions():
                raise CaseError("command", f"only model command runs a program, not "
                                f"{self.model.value}")
            return
        if not self.command.argv:
            raise CaseError("command.argv", "model command needs the program and its "
                            "arguments as a list, e.g. [python, train.py, --batch-size, "
                            "'{batch_size_per_device}']")
        if self.parallel.tp > 1 or self.parallel.pp > 1:
            raise CaseError("parallel", "a command case's parallel layout is the program's "
                            "own; leave parallel.tp and parallel.pp at 1")
        if self.profile.enabled:
            raise CaseError("profile", "the profiler runs inside built-in workloads only")
        for key in self.run_options():
            raise CaseError(key, "an option of the built-in workloads; a command case's "
                            "program has its own")

    def _check_binding(self) -> None:
        if self.binding_map and self.binding is not BindingMode.EXPLICIT:
            raise CaseError("binding_map", "only used with binding: explicit")
        if self.binding is not BindingMode.EXPLICIT:
            return
        ranks = sorted(b.local_rank for b in self.binding_map)
        # compared without building range(gpus_per_node): that may be any huge number
        if len(ranks) != self.gpus_per_node or ranks != list(range(len(ranks))):
            raise CaseError("binding_map", f"expected one entry for each local rank 0.."
                            f"{self.gpus_per_node - 1}; got local ranks {ranks}")
        gpus = [b.gpu for b in self.binding_map if b.gpu is not None]
        if len(gpus) != len(set(gpus)):
            raise CaseError("binding_map", f"two local ranks share a GPU: {gpus}")
        for i, b in enumerate(self.binding_map):
            if b.cpus is not None and not _CPUS_RE.fullmatch(b.cpus):
                raise CaseError(f"binding_map[{i}].cpus",
                                f"expected a CPU list like 0-11,24-35; got {b.cpus!r}")
            if b.gpu is not None and b.gpu < 0:
                raise CaseError(f"binding_map[{i}].gpu", "expected a GPU index >= 0")

    def _check_run_options(self) -> None:
        """Cross-field checks of the torch run options block."""
        if self.data is DataSource.IMAGE_FOLDER:
            if self.model is not Model.RESNET50:
                raise CaseError("data", f"image_folder feeds resnet50 only; {self.model.value} "
                                "trains on synthetic data")
            if not self.data_path:
                raise CaseError("data_path", "data: image_folder needs data_path, a directory "
                                "of class folders of JPEG images")
        elif self.data_path is not None:
            raise CaseError("data_path", f"only used with data: image_folder, not "
                            f"{self.data.value}")
        if self.ddp_bucket_mb is not None and not (
                math.isfinite(self.ddp_bucket_mb) and self.ddp_bucket_mb > 0):
            raise CaseError("ddp_bucket_mb", f"expected a finite number of MiB > 0, got "
                            f"{self.ddp_bucket_mb}")
        if self.ddp_bucket_mb is not None and (self.framework is not Framework.TORCH
                                               or self.model is Model.GPT):
            raise CaseError("ddp_bucket_mb", "applies to torch resnet50 and bert_base only")
        if self.compiled_ddp is not None and self.compile is False:
            raise CaseError("compiled_ddp", "needs compile: true (or unset); it says how the "
                            "compiled model meets DDP")
        if self.grad_reduce is not None and (self.framework is not Framework.TORCH
                                             or self.model is Model.COMMAND):
            raise CaseError("grad_reduce", "applies to the torch built-in workloads only")
        if self.grad_reduce is GradReduce.BF16 and \
                self.compiled_ddp is CompiledDDP.COMPILED_AUTOGRAD:
            raise CaseError("grad_reduce", "bf16 needs DDP's communication hook, which "
                            "compiled_ddp: compiled_autograd does not run; use one_graph or "
                            "bucket_graphs")
        if self.compiled_ddp is not None and self.framework is not Framework.TORCH:
            raise CaseError("compiled_ddp", f"applies to torch only, not {self.framework.value}")
        if self.data_workers is not None and self.data_workers < 0:
            raise CaseError("data_workers", f"expected an integer >= 0 (0 = load in the "
                            f"training process), got {self.data_workers}")
        if self.compile is False and self.cuda_graphs:
            raise CaseError("cuda_graphs", "needs compile: true (or unset); the graphs are "
                            "captured by torch.compile")
        if self.compile is False and self.kernel_tuning:
            raise CaseError("kernel_tuning", "needs compile: true (or unset); it tunes the "
                            "kernels torch.compile generates")
        if self.compile is False and self.compile_mode is not CompileMode.DEFAULT:
            raise CaseError("compile_mode", f"{self.compile_mode.value} needs compile: true "
                            "(or unset)")
        if self.channels_last and self.model is not Model.RESNET50:
            raise CaseError("channels_last", f"applies to resnet50 only, not {self.model.value}")
        allowed = MODEL_OPTIMIZERS.get(self.model.value)
        if self.optimizer is not None and allowed is not None and self.optimizer not in allowed:
            raise CaseError("optimizer", f"{self.model.value} trains with "
                            + " or ".join(o.value for o in allowed)
                            + f", not {self.optimizer.value}")

    # -- derived -----------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def ranks_per_node(self) -> int:
        """Processes the launcher starts on each node: one per GPU, or one for a command
        case whose program starts its own workers (`launch: per_node`)."""
        if self.model is Model.COMMAND and self.command.launch is CommandLaunch.PER_NODE:
            return 1
        return self.gpus_per_node

    @property
    def launched_ranks(self) -> int:
        """Processes the launcher starts, over all nodes (each writes a rank file)."""
        return self.num_nodes * self.ranks_per_node

    @property
    def dp(self) -> int:
        return self.world_size // (self.parallel.tp * self.parallel.pp)

    @property
    def micro_batch_size(self) -> int:
        return self.parallel.micro_batch_size or self.batch_size_per_device

    @property
    def accumulation_steps(self) -> int:
        return self.batch_size_per_device // self.micro_batch_size

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step over all data-parallel ranks."""
        return self.batch_size_per_device * self.dp

    @property
    def total_iterations(self) -> int:
        return self.warmup_iterations + self.measured_iterations

    @property
    def effective_loss_scaling(self) -> LossScaling | None:
        if self.precision is Precision.AMP_FP16:
            return self.loss_scaling or LossScaling.DYNAMIC
        return None

    # -- identity ----------------------------------------------------------------------------
    def base_id(self) -> str:
        """The readable id, before disambiguation among the cases of one grid."""
        if self.name:
            return self.name
        label = self.command.label() if self.model is Model.COMMAND else self.model.value
        parts = [label, self.framework.value, self.precision.value]
        if self.effective_loss_scaling is LossScaling.STATIC:
            parts.append("static")
        parts.append(f"{self.num_nodes}n{self.gpus_per_node}g")
        parts.append(f"bs{self.batch_size_per_device}")
        if self.parallel.tp > 1:
            parts.append(f"tp{self.parallel.tp}")
        if self.parallel.pp > 1:
            parts.append(f"pp{self.parallel.pp}")
        if self.micro_batch_size != self.batch_size_per_device:
            parts.append(f"mb{self.micro_batch_size}")
        if self.binding is not BindingMode.AUTO:
            parts.append(f"bind_{self.binding.value}")
        return "-".join(parts)

    def variant(self) -> str:
        """What distinguishes this case beyond framework/model/precision/nodes/GPUs/batch:
        model size and parallel layout. Speedups compare runs of one variant only."""
        mc = dataclasses.asdict(self.model_config)
        bits = [f"{k}={_short(v)}" for k, v in mc.items() if v is not None]
        if self.model is Model.COMMAND:
            bits.append(f"command={self.command.label()},program={self.command_digest()}")
        if self.effective_loss_scaling is not None:
            bits.append(f"loss_scaling={self.effective_loss_scaling.value}")
        if self.model is not Model.COMMAND:  # a program's data is its own
            bits.append(f"data={self.data.value}")
        bits += [f"{k}={_short(v.value if isinstance(v, Enum) else v)}"
                 for k, v in self.run_options().items()]
        # Parallel layout and the GPT options, where they differ from the plain default: a
        # tp=2 run and a dp=2 run of one batch size are different variants.
        p = self.parallel
        for key, value, default in (
                ("tp", p.tp, 1), ("pp", p.pp, 1), ("mbs", self.micro_batch_size,
                                                   self.batch_size_per_device),
                ("recompute", self.activation_checkpointing, False),
                ("sp", self.sequence_parallel, False),
                ("async_tp", self.async_tp, False),
                ("schedule", self.pipeline_schedule.value if p.pp > 1 else None, None),
                ("vstages", self.stages_per_rank, 1),
                ("dp_kind", self.data_parallel.value, DataParallelKind.AUTO.value)):
            if value != default:
                bits.append(f"{key}={_short(value)}")
        return ",".join(bits)

    def run_options(self) -> dict[str, Any]:
        """The torch run options that differ from their defaults (part of the variant).
        `cuda_graphs` counts as the config hash counts it: unset is the case's own default
        (`cuda_graphs_by_default`), so saying that default changes neither."""
        defaults = Case()
        out = {}
        for k in ("compile", "compile_mode", "kernel_tuning", "cudnn_benchmark", "cuda_graphs",
                  "channels_last", "optimizer", "data_workers", "ddp_bucket_mb",
                  "compiled_ddp", "grad_reduce"):
            value, default = getattr(self, k), getattr(defaults, k)
            if k == "grad_reduce":
                value = self.grad_reduce_set
            if k == "cuda_graphs":
                default = self.cuda_graphs_by_default
                value = default if value is None else value
            if k == "compiled_ddp":
                default = self.compiled_ddp_default if self.compiled_ddp_applies else None
                value = default if value is None or default is None else value
            if value != default:
                out[k] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        # A fresh copy (callers may change it); JSON round trip: plain data, and C-fast.
        out: dict[str, Any] = json.loads(json.dumps(self._plain))
        return out

    @functools.cached_property
    def _plain(self) -> dict[str, Any]:
        """The plain form, computed once (the case is frozen); `to_dict` hands out copies."""
        out: dict[str, Any] = to_plain(self)
        return out

    @property
    def grad_reduce_set(self) -> GradReduce | None:
        """`grad_reduce` where it differs from what unset means (fp32): bf16, else None."""
        return None if self.grad_reduce is GradReduce.FP32 else self.grad_reduce

    @property
    def cuda_graphs_by_default(self) -> bool:
        """What `cuda_graphs` unset means: on for a torch resnet50 or bert_base that may run on
        a GPU and compiled, at any number of ranks."""
        return (self.framework is Framework.TORCH
                and self.model in (Model.RESNET50, Model.BERT_BASE)
                and self.compile is not False and self.device is not DeviceKind.CPU)

    @property
    def compiled_ddp_default(self) -> CompiledDDP:
        """What `compiled_ddp` unset means where it applies: `one_graph` for resnet50 and
        bert_base, `bucket_graphs` (torch's own default) for the GPT."""
        return (CompiledDDP.BUCKET_GRAPHS if self.model is Model.GPT
                else CompiledDDP.ONE_GRAPH)

    @property
    def compiled_ddp_applies(self) -> bool:
        """Whether `compiled_ddp` can change what runs: torch, compiled (or unset), several
        data-parallel ranks, a built-in workload (a command case's program compiles its own)."""
        return (self.framework is Framework.TORCH and self.compile is not False
                and self.dp > 1 and self.model is not Model.COMMAND)

    def command_digest(self) -> str:
        """What a command case runs, in 8 hex digits: its argument templates, interpreter,
        launch, how it is read and the files argv names (not where they lie). The same
        program at every batch size and GPU count has the same digest."""
        c = hashed_options(to_plain(self.command))
        blob = json.dumps(c, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:8]

    def config_hash(self) -> str:
        return self._hash

    @functools.cached_property
    def _hash(self) -> str:
        """Hash of everything that changes what is measured (not repeats, Slurm options, the
        hang watchdog's limits, the preflight, the container or the site)."""
        d = self.to_dict()
        for key in ("repeats", "slurm", "name", "watchdog", "preflight", "profile",
                    "container", "site"):
            d.pop(key, None)
        if isinstance(d.get("command"), dict):  # where the program lies is not what it is
            d["command"] = hashed_options(d["command"])
        for key, default in HASHED_ONLY_WHEN_SET.items():
            if d.get(key) == default:
                d.pop(key, None)
        if d.get("cuda_graphs") is None:  # hashed as what runs: unset and its value alike
            d["cuda_graphs"] = self.cuda_graphs_by_default
        # compiled_ddp likewise, except that torch's own default (bucket_graphs, what every
        # earlier run did) and a setting that does not apply leave the hash as it was
        ddp = (self.compiled_ddp or self.compiled_ddp_default) if self.compiled_ddp_applies \
            else None
        d.pop("compiled_ddp", None)
        if ddp is not None and ddp is not CompiledDDP.BUCKET_GRAPHS:
            d["compiled_ddp"] = ddp.value
        if self.grad_reduce_set is None:  # hashed as unset: fp32 is what unset means
            d.pop("grad_reduce", None)
        d.pop("pipeline_stages_per_rank", None)  # hashed as what runs, where it runs
        if self.stages_per_rank > 1:
            d["pipeline_stages_per_rank"] = self.stages_per_rank
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Case:
        return from_plain(cls, data, "")


#: Options added after results existed: at their default they leave the config hash as it was,
#: so results of earlier cases still match their cases (a new key must not make them "other
#: cases under the same ids").
HASHED_ONLY_WHEN_SET: dict[str, Any] = {"ddp_bucket_mb": None, "kernel_tuning": None,
                                        "cudnn_benchmark": None, "compiled_ddp": None,
                                        "grad_reduce": None,
                                        "sequence_parallel": False, "async_tp": False,
                                        "command": hashed_options(to_plain(CommandOptions()))}


MAX_REPEATS = 1000
"""Repeats of one case: Slurm's default MaxArraySize (1001) allows array tasks 0..1000."""


_ID_RULE = "letters, digits, '.', '_', '-' and '=' only, not starting with '.' or '-'"


_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._=-]{0,199}")


_CPUS_RE = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


_WORD_RE = re.compile(r"[A-Za-z0-9_]+")


_SBATCH_VALUE_RE = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


#: sbatch reads its `#SBATCH` lines with a tokenizer of its own, not bash's: a backslash
#: escapes the next character even inside single quotes, so no quoting carries one verbatim
#: (a value `a\' --hold` would end the quotes and add --hold). Carriage returns and other
#: control characters are refused by the patterns above.
_BACKSLASH = ("no backslash: sbatch reads one in an #SBATCH line as an escape, even inside "
              "quotes, so the value would not reach Slurm as written")


_EXTRA_SBATCH_RE = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[^\x00-\x1f\x7f]{1,200})?")


def valid_case_id(text: str) -> bool:
    return bool(_ID_RE.fullmatch(text))


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value)
    return str(value)


def resolve(case: Case) -> Case:
    """Fill model-size defaults and reject knobs that do not apply to the model."""
    mc = dataclasses.asdict(case.model_config)
    allowed = MODEL_KEYS[case.model]
    for key, value in mc.items():
        if value is not None and key not in allowed:
            raise CaseError(
                f"model_config.{key}",
                f"does not apply to model {case.model.value}; its knobs are "
                + ", ".join(sorted(allowed)),
            )
        if isinstance(value, int) and value < 1:  # sizes; a 0 would divide by zero below
            raise CaseError(f"model_config.{key}", f"expected an integer >= 1, got {value}")
    if case.model is Model.GPT and mc["intermediate_size"] is None and mc["hidden_size"]:
        mc["intermediate_size"] = 4 * mc["hidden_size"]  # GPT's MLP is 4h at every size
    filled = {k: (v if v is not None else MODEL_DEFAULTS[case.model].get(k)) for k, v in mc.items()}
    model_config = ModelConfig(**filled)
    if case.model in (Model.BERT_BASE, Model.GPT):
        h, heads = model_config.hidden_size, model_config.num_heads
        assert h is not None and heads is not None
        if h % heads:
            raise CaseError("model_config.num_heads", f"{heads} does not divide hidden_size {h}")
    if case.model is Model.GPT:
        _check_gpt_sizes(case, model_config)
    if case.model is Model.BERT_BASE:
        assert model_config.masked_positions is not None and model_config.seq_len is not None
        if not 0 < model_config.masked_positions <= model_config.seq_len:
            raise CaseError("model_config.masked_positions", "expected 1 .. seq_len")
    if case.model is Model.RESNET50:
        layers = model_config.resnet_layers
        if layers is None or len(layers) != 4 or min(layers) < 1:
            raise CaseError("model_config.resnet_layers", "expected four integers >= 1")
        if model_config.image_size is not None and model_config.image_size < 32:
            raise CaseError("model_config.image_size", "expected at least 32 pixels")
    return dataclasses.replace(case, model_config=model_config)


def _check_gpt_sizes(case: Case, mc: ModelConfig) -> None:
    """Tensor parallelism splits heads, MLP width and vocabulary evenly; pipelining needs a
    layer per stage."""
    tp, pp = case.parallel.tp, case.parallel.pp
    for key in ("num_heads", "intermediate_size", "vocab_size"):
        value = getattr(mc, key)
        if value is None or value < 1:
            raise CaseError(f"model_config.{key}", "expected an integer >= 1")
        if value % tp:
            raise CaseError(f"model_config.{key}",
                            f"{value} is not divisible by the tensor-parallel degree tp = {tp}")
    assert mc.num_layers is not None and mc.seq_len is not None
    if mc.num_layers < pp:
        raise CaseError("model_config.num_layers",
                        f"{mc.num_layers} layers cannot fill pp = {pp} pipeline stages")
    v = case.stages_per_rank
    if mc.num_layers < pp * v:
        raise CaseError("model_config.num_layers",
                        f"{mc.num_layers} layers cannot fill pp x pipeline_stages_per_rank = "
                        f"{pp} x {v} = {pp * v} pipeline stages")
    if mc.seq_len < 1:
        raise CaseError("model_config.seq_len", "expected an integer >= 1")
    if case.sequence_parallel and mc.seq_len % tp:
        raise CaseError("model_config.seq_len", f"{mc.seq_len} is not divisible by tp = {tp}: "
                        "sequence_parallel splits the sequence over the tensor-parallel ranks")
