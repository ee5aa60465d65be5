"""The OneFlow side of `toolkit.workloads.run`: set up OneFlow, build the case's model, wrap it
in DDP, train it through the timed loop and summarise. Mirrors the torch path in
`toolkit/workloads/__init__.py`; the machinery is in `oneflow_common`."""

from __future__ import annotations

from typing import Any

from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case, Model
from toolkit.workloads.oneflow import common as oneflow_common
from toolkit.workloads.oneflow.common import IterCallback


def run_oneflow(case: Case, info: RankInfo, on_iter: IterCallback,
                gpu_index: int | None = None) -> dict[str, Any]:
    rt = oneflow_common.setup(case, info, gpu_index)
    # The model modules import oneflow at module level: only after setup exported the
    # distributed environment that OneFlow reads on import.
    if case.model is Model.RESNET50:
        from toolkit.workloads.oneflow import resnet50 as module
    elif case.model is Model.BERT_BASE:
        from toolkit.workloads.oneflow import bert as module  # type: ignore[no-redef]
    else:
        from toolkit.workloads.oneflow import gpt as module  # type: ignore[no-redef]
    model, optimizer, loss_fn, batch, build_info = module.build(case, rt, info.rank)
    if build_info.get("global_tensors"):
        # SBP already reduces gradients over data-parallel ranks; the loss, on the last stage,
        # is broadcast to every rank as the step's end marker
        from toolkit.workloads.oneflow.gpt_parallel import world_marker

        trainer = oneflow_common.Trainer(
            case, rt, model, optimizer, loss_fn, batch, gpipe=case.parallel.pp > 1,
            marker=world_marker(rt.device_type, info.world_size))
    else:
        model = oneflow_common.wrap_ddp(model, rt)
        trainer = oneflow_common.Trainer(case, rt, model, optimizer, loss_fn, batch)
    timing = oneflow_common.timed_loop(trainer.step, case.total_iterations,
                                       case.warmup_iterations, rt, on_iter)
    summary: dict[str, Any] = {
        "device": rt.device_name,
        "pci_bus_id": oneflow_common.pci_bus_id(rt),
        "device_type": rt.device_type,
        "backend": rt.backend,
        "precision_flags": rt.precision_flags,
        "framework_peak_memory_mib": None,  # OneFlow 0.9.0 exposes no allocator statistics
        "oneflow_cuda_build": oneflow_common.cuda_build(),
        **build_info,
        **timing,
    }
    if rt.distributed and case.accumulation_steps > 1:
        summary["ddp_allreduce"] = "every micro-batch (OneFlow 0.9.0 DDP has no no_sync)"
    if trainer.dynamic is not None:
        summary["loss_scale_final"] = trainer.dynamic.scale
        summary["skipped_steps"] = trainer.dynamic.skipped_steps
    return summary
