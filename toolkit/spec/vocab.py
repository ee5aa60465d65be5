"""The closed vocabularies of a case, as enums: framework, model, precision, loss scaling, data
source, device, command launch, rate scope, pipeline schedule, data-parallel kind, binding mode,
optimizer, compile mode.
"""

from __future__ import annotations

from enum import Enum


class Framework(str, Enum):
    TORCH = "torch"
    ONEFLOW = "oneflow"


class Model(str, Enum):
    RESNET50 = "resnet50"
    BERT_BASE = "bert_base"
    GPT = "gpt"
    COMMAND = "command"
    """The user's own training program (`command:` block): run, timed from what it prints."""


class CommandLaunch(str, Enum):
    """How many processes of a `model: command` case the launcher starts."""

    PER_RANK = "per_rank"
    """One per GPU (rank), with the environment torchrun sets; the usual case."""
    PER_NODE = "per_node"
    """One per node: the program starts its own workers (torchrun, mp.spawn)."""


class RateScope(str, Enum):
    """Whose samples a rate printed by a `model: command` case's program counts."""

    JOB = "job"
    """All data-parallel ranks' samples: the job's rate (what DLLogger's `total_ips` is)."""
    RANK = "rank"
    """Its own process's samples (torchvision's `img/s`): times the data-parallel ranks."""


class Precision(str, Enum):
    FP32 = "fp32"
    """True FP32 everywhere: TF32 disabled for matmuls and convolutions."""
    TF32 = "tf32"
    """FP32 storage, TF32 tensor-core math for matmuls and convolutions."""
    AMP_BF16 = "amp_bf16"
    AMP_FP16 = "amp_fp16"


class LossScaling(str, Enum):
    DYNAMIC = "dynamic"
    STATIC = "static"


class DataSource(str, Enum):
    SYNTHETIC = "synthetic"
    """One fixed random batch per rank, made on the device: measures the model, not the input."""
    IMAGE_FOLDER = "image_folder"
    """ResNet50: JPEGs in class folders at `data_path`, decoded and augmented by workers."""


class DeviceKind(str, Enum):
    AUTO = "auto"
    """CUDA when the node has GPUs, otherwise CPU ranks."""
    CUDA = "cuda"
    CPU = "cpu"


class CompiledDDP(str, Enum):
    """How a compiled model's data-parallel gradient reduction meets torch.compile (Dynamo's
    `optimize_ddp`)."""

    BUCKET_GRAPHS = "bucket_graphs"
    """Dynamo splits the forward and backward into one graph per DDP gradient bucket, so each
    bucket's all-reduce overlaps the rest of the backward (torch's default)."""
    ONE_GRAPH = "one_graph"
    """One forward and one backward graph; DDP all-reduces the buckets once the backward graph
    has produced every gradient (no overlap, no split fusions, far fewer launches)."""
    COMPILED_AUTOGRAD = "compiled_autograd"
    """Compiled autograd traces the backward with DDP's reduction (`python_reducer`): the
    all-reduces are ops in the compiled backward graph, placed by Inductor."""


class GradReduce(str, Enum):
    """The dtype DDP all-reduces the gradients in."""

    FP32 = "fp32"
    """The gradients as they are (fp32 parameters: fp32), as one GPU would apply them."""
    BF16 = "bf16"
    """Each bucket cast to bfloat16 for the all-reduce and back (torch's `bf16_compress_hook`):
    half the bytes on the link, the summed gradient rounded to bfloat16."""


# -- GPT vocabularies (the GPT option block of `Case`) ------------------------------------------
class PipelineSchedule(str, Enum):
    """torch.distributed.pipelining schedule for `parallel.pp > 1`."""

    GPIPE = "gpipe"
    """All forwards, then all backwards: activations of every micro-batch live at once."""
    ONE_F_ONE_B = "1f1b"
    """One forward, one backward in the steady state: at most pp micro-batches in flight."""
    INTERLEAVED_1F1B = "interleaved_1f1b"
    """1F1B over several non-adjacent stages per rank (`pipeline_stages_per_rank` = v; rank r
    holds stages r, r + pp, ...): the fill and drain take 1/v of 1F1B's (Narayanan et al.
    2021), for v times the point-to-point transfers."""


class DataParallelKind(str, Enum):
    """How the data-parallel ranks of a GPT case share gradients."""

    AUTO = "auto"
    """DDP without tensor parallelism, FSDP2 with it (DDP cannot hold DTensor parameters)."""
    DDP = "ddp"
    FSDP = "fsdp"
    """FSDP2 (`fully_shard`): parameters, gradients and optimizer state sharded over dp."""


class BindingMode(str, Enum):
    AUTO = "auto"
    """GPU, CPUs and NIC derived from the node's topology (`topology.plan_node`)."""
    NONE = "none"
    """Bind nothing: rank i uses GPU i and whatever CPUs the launcher gave it."""
    EXPLICIT = "explicit"
    """Per local rank from `binding_map`; what it leaves out comes from the topology."""


# -- torch run options: vocabularies for the option block of `Case` ------------------
class Optimizer(str, Enum):
    SGD = "sgd"
    """SGD with momentum 0.875, NVIDIA's ResNet50 recipe (fused on CUDA, foreach on CPU)."""
    ADAMW = "adamw"
    """AdamW (fused on CUDA, foreach on CPU)."""
    LAMB = "lamb"
    """LAMB as NVIDIA's BERT pretraining uses it (`workloads.pytorch.optim.Lamb`, foreach)."""


class CompileMode(str, Enum):
    DEFAULT = "default"
    """torch.compile's default mode (Inductor, no autotuning)."""
    MAX_AUTOTUNE = "max_autotune"
    """Inductor benchmarks kernel choices (GEMM/conv templates): faster code, minutes of compile."""


#: Optimizers each model's recipe can use; the first is its default.
MODEL_OPTIMIZERS: dict[str, tuple[Optimizer, ...]] = {
    "resnet50": (Optimizer.SGD,),
    "bert_base": (Optimizer.ADAMW, Optimizer.LAMB),
}
