"""ResNet50 v1.5 (torchvision) on synthetic ImageNet-shaped data.

torchvision's `resnet50` is v1.5: the stride-2 sits in the 3x3 convolution of each downsampling
bottleneck. The optimizer follows NVIDIA's DeepLearningExamples recipe (SGD, momentum 0.875,
weight decay 3.0517578125e-05, label smoothing 0.1). Size knobs (image size, blocks per stage)
let CPU tests run the same model code at a small size.
"""

from __future__ import annotations

from typing import Any

from toolkit.case import Case
from toolkit.workloads.torch_common import TorchRuntime


def build(case: Case, rt: TorchRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    import torch
    from torchvision.models.resnet import Bottleneck, ResNet

    mc = case.model_config
    assert mc.resnet_layers is not None and mc.image_size is not None and mc.num_classes
    torch.manual_seed(case.seed)
    model = ResNet(Bottleneck, list(mc.resnet_layers), num_classes=mc.num_classes)
    channels_last = rt.device.type == "cuda"
    model = model.to(rt.device, memory_format=torch.channels_last if channels_last else
                     torch.contiguous_format)
    params = sum(p.numel() for p in model.parameters())
    opt_kwargs: dict[str, Any] = {"lr": 0.256 * case.global_batch_size / 256, "momentum": 0.875,
                                  "weight_decay": 3.0517578125e-05}
    if rt.device.type == "cuda":
        opt_kwargs["fused"] = True
    else:
        opt_kwargs["foreach"] = True
    optimizer = torch.optim.SGD(model.parameters(), **opt_kwargs)

    gen = torch.Generator(device="cpu").manual_seed(case.seed * 1000 + rank)
    mbs = case.micro_batch_size
    images = torch.randn(mbs, 3, mc.image_size, mc.image_size, generator=gen)
    labels = torch.randint(0, mc.num_classes, (mbs,), generator=gen)
    images = images.to(rt.device, memory_format=torch.channels_last if channels_last else
                       torch.contiguous_format)
    batch = (images, labels.to(rt.device))
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def loss_fn(m: Any, b: Any) -> Any:
        x, y = b
        return criterion(m(x), y)

    info = {"parameters": params, "channels_last": channels_last,
            "optimizer": "SGD(fused)" if opt_kwargs.get("fused") else "SGD(foreach)"}
    return model, optimizer, loss_fn, batch, info
