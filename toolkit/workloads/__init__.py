"""Workloads: framework x model. `run(case, ...)` picks the implementation.

Each model module builds (model, optimizer, loss function, synthetic batch); the loop, precision
and process group are shared (`torch_common`, and `oneflow_common` for OneFlow, which runs in its
own Python 3.10 environment and never imports torch). GPT (`torch_gpt*`) brings its own step:
tensor, pipeline and data parallelism. A `model: command` case runs the user's own program
instead (`command`, called by the worker; `command_output` reads what it prints).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case, CompileMode, DeviceKind, Framework, Model, Precision
from toolkit.workloads.oneflow import (
    gpt_parallel as oneflow_gpt_parallel,  # these two import no framework at load
)
from toolkit.workloads.oneflow.common import CPU_AMP_REASON

IterSink = Callable[[int, float, float, float | None, float], None]


class WorkloadUnavailable(RuntimeError):
    pass


SUPPORTED = {(Framework.TORCH, Model.RESNET50), (Framework.TORCH, Model.BERT_BASE),
             (Framework.TORCH, Model.GPT),
             (Framework.ONEFLOW, Model.RESNET50), (Framework.ONEFLOW, Model.BERT_BASE),
             (Framework.ONEFLOW, Model.GPT)}
PARALLEL_MODELS = {Model.GPT}
"""Models with tensor and pipeline parallelism."""
TORCH_ONLY_OPTIONS = ("compile", "kernel_tuning", "cuda_graphs", "activation_checkpointing",
                      "channels_last")


def unsupported_reason(case: Case) -> str | None:
    """Why this toolkit version cannot run the case (checked before anything is submitted)."""
    if case.model is Model.COMMAND:
        return None  # the program's own (checked when the grid was loaded)
    if (case.framework, case.model) in SUPPORTED:
        if (case.framework is Framework.ONEFLOW and case.device is DeviceKind.CPU
                and case.precision in (Precision.AMP_BF16, Precision.AMP_FP16)):
            return CPU_AMP_REASON
        if case.framework is Framework.ONEFLOW:
            used = [k for k in TORCH_ONLY_OPTIONS if getattr(case, k)]
            if case.cudnn_benchmark is not None:  # false is a choice too
                used.append("cudnn_benchmark")
            if case.compile_mode is not CompileMode.DEFAULT:
                used.append("compile_mode")
            if used:
                return f"{', '.join(used)}: torch options, not available with oneflow"
        if case.model is Model.GPT and case.cuda_graphs:
            return ("cuda_graphs: not available for gpt (its layers compile one by one, "
                    "under tensor and pipeline parallelism)")
        if case.model in PARALLEL_MODELS and case.framework is Framework.TORCH:
            return None
        if case.parallel.tp > 1 or case.parallel.pp > 1:
            if (case.framework, case.model) == (Framework.ONEFLOW, Model.GPT):
                return oneflow_gpt_parallel.unsupported(case)  # global tensors (SBP)
            return (f"tensor/pipeline parallelism is not available for {case.model.value}; "
                    "only data parallelism")
        return None
    return (f"{case.framework.value} x {case.model.value} is not implemented yet; available: "
            + ", ".join(sorted(f"{f.value} x {m.value}" for f, m in SUPPORTED)))


def run(case: Case, info: RankInfo, on_iter: IterSink,
        gpu_index: int | None = None, profile: int = 0,
        record_profile: bool = True, link_rate_gbs: float | None = None) -> dict[str, Any]:
    """Build and train the case's workload on this rank; returns a summary for meta/events.
    `profile`: steps every rank runs after the timed window, under torch.profiler where
    `record_profile` (torch only; the summary then has `profile` and `profile_trace`).
    `link_rate_gbs`: the rate of the job's link between nodes (`toolkit.rank.nccl_settings`),
    from which a torch ResNet50 or BERT chooses its gradient reduction
    (`toolkit.analysis.grad_reduce`; the summary's `grad_reduce_choice`)."""
    reason = unsupported_reason(case)
    if reason:
        raise WorkloadUnavailable(reason)
    if case.framework is Framework.ONEFLOW:
        from toolkit.workloads.oneflow.run import run_oneflow

        return run_oneflow(case, info, on_iter, gpu_index)
    from toolkit.workloads.pytorch import common as torch_common

    rt = torch_common.setup(case, info, gpu_index)
    try:
        if case.model is Model.GPT:  # its own step: pipeline schedules, TP loss, FSDP
            from toolkit.workloads.pytorch import gpt as torch_gpt_train

            return torch_gpt_train.train(case, rt, info, on_iter, profile, record_profile)
        if case.model is Model.RESNET50:
            from toolkit.workloads.pytorch import resnet50 as module
        else:
            from toolkit.workloads.pytorch import bert as module  # type: ignore[no-redef]
        model, optimizer, loss_fn, batch, build_info = module.build(case, rt, info.rank)
        # BERT's only buffers are its position and token-type ids, which training never writes;
        # ResNet50's batch-norm statistics change every step and rank 0's are broadcast
        constant_buffers = case.model is Model.BERT_BASE
        choice = torch_common.choose_grad_reduce(case, rt, model, loss_fn, batch,
                                                 link_rate_gbs)
        model = torch_common.wrap_ddp(model, rt, case.ddp_bucket_mb, rt.options.grad_reduce,
                                      broadcast_buffers=not constant_buffers)
        if rt.distributed:
            build_info = {**build_info, "ddp_broadcast_buffers": not constant_buffers,
                          "grad_reduce_choice": choice}
        hook = torch_common.ddp_comm_hook(model)
        if hook is not None:
            build_info = {**build_info, "ddp_comm_hook": hook}
        trainer = torch_common.Trainer(case, rt, model, optimizer, loss_fn, batch)
        timing = trainer.run(case.total_iterations, on_iter, profile, record_profile)
        return {**torch_common.runtime_summary(rt), **build_info, **timing}
    finally:
        torch_common.teardown(rt)
