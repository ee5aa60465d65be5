"""ResNet50 v1.5 (flowvision 0.2.2) under OneFlow on synthetic ImageNet-shaped data.

flowvision's `ResNet(Bottleneck, ...)` is torchvision's model ported to OneFlow: v1.5 (the
stride-2 in the 3x3 convolution of each downsampling bottleneck), the same initialisation and the
same parameter count (25,557,032 at the published size). The recipe mirrors `torch_resnet50`:
SGD with momentum 0.875, weight decay 3.0517578125e-05, lr 0.256 x global batch / 256, label
smoothing 0.1. Unlike the torch workload there is no channels-last layout on CUDA (OneFlow 0.9.0
eager has no `channels_last` memory format), so cuDNN sees NCHW tensors.
"""

from __future__ import annotations

from typing import Any

from toolkit.spec import Case
from toolkit.workloads.oneflow.common import OneFlowRuntime


def build(case: Case, rt: OneFlowRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    flow = rt.flow
    from flowvision.models.resnet import Bottleneck, ResNet

    mc = case.model_config
    assert mc.resnet_layers is not None and mc.image_size is not None and mc.num_classes
    flow.manual_seed(case.seed)
    model = ResNet(Bottleneck, list(mc.resnet_layers), num_classes=mc.num_classes).to(rt.device)
    params = sum(p.numel() for p in model.parameters())
    fused = rt.device_type == "cuda"
    optimizer = flow.optim.SGD(model.parameters(), lr=0.256 * case.global_batch_size / 256,
                               momentum=0.875, weight_decay=3.0517578125e-05, fused=fused)

    gen = flow.Generator()
    gen.manual_seed(case.seed * 1000 + rank)
    mbs = case.micro_batch_size
    images = flow.randn(mbs, 3, mc.image_size, mc.image_size, generator=gen)
    labels = flow.randint(0, mc.num_classes, (mbs,), generator=gen)
    batch = (images.to(rt.device), labels.to(rt.device))
    criterion = flow.nn.CrossEntropyLoss(label_smoothing=0.1)

    def loss_fn(m: Any, b: Any) -> Any:
        x, y = b
        return criterion(m(x), y)

    info = {"parameters": int(params), "channels_last": False,
            "optimizer": "SGD(fused)" if fused else "SGD"}
    return model, optimizer, loss_fn, batch, info
