"""ResNet50 v1.5 (torchvision) on synthetic ImageNet-shaped data or a real image folder.

torchvision's `resnet50` is v1.5: the stride-2 sits in the 3x3 convolution of each downsampling
bottleneck. The recipe is NVIDIA's DeepLearningExamples one (the reports' runs): SGD with momentum
0.875, lr 0.256 per 256 images, weight decay 3.0517578125e-05 on the weights of convolutions and
the classifier only (not on batch-norm parameters or biases), label smoothing 0.1. The optimizer
is fused on CUDA, foreach on CPU.

The loss is computed inside the module's forward (`ClassifierWithLoss`), so torch.compile fuses
the classifier's softmax cross-entropy with the rest. Channels-last (NHWC) memory format is on
by default on CUDA, where cuDNN's and Inductor's convolutions are fastest with it. Size knobs
(image size, blocks per stage, classes) let CPU tests run the same model code at a small size.
"""

from __future__ import annotations

from typing import Any

import torch

from toolkit.spec import Case, DataSource, Optimizer
from toolkit.workloads.pytorch.common import TorchRuntime
from toolkit.workloads.pytorch.optim import make_optimizer

MOMENTUM = 0.875
WEIGHT_DECAY = 3.0517578125e-05
LR_PER_256 = 0.256
LABEL_SMOOTHING = 0.1


class ClassifierWithLoss(torch.nn.Module):
    """The network and its loss as one module: `forward(images, labels) -> loss`."""

    def __init__(self, net: torch.nn.Module, label_smoothing: float) -> None:
        super().__init__()
        self.net = net
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=label_smoothing)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.criterion(self.net(images), labels)


def build(case: Case, rt: TorchRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    from torchvision.models.resnet import Bottleneck, ResNet

    mc = case.model_config
    assert mc.resnet_layers is not None and mc.image_size is not None and mc.num_classes
    channels_last = rt.options.channels_last
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    torch.manual_seed(case.seed)
    net = ResNet(Bottleneck, list(mc.resnet_layers), num_classes=mc.num_classes)
    model = ClassifierWithLoss(net, LABEL_SMOOTHING).to(rt.device, memory_format=fmt)
    params = sum(p.numel() for p in model.parameters())
    kind = case.optimizer or Optimizer.SGD
    optimizer, opt_name = make_optimizer(
        kind, model, rt.device, lr=LR_PER_256 * case.global_batch_size / 256,
        weight_decay=WEIGHT_DECAY, momentum=MOMENTUM)

    mbs = case.micro_batch_size
    batch: Any
    if case.data is DataSource.IMAGE_FOLDER:
        from toolkit.workloads.pytorch.data import DataError, ImageFolderStream, default_workers

        assert case.data_path is not None
        workers = case.data_workers if case.data_workers is not None else default_workers()
        batch = ImageFolderStream(
            case.data_path, image_size=mc.image_size, batch_size=mbs, workers=workers,
            rank=rank, world_size=rt.world_size, seed=case.seed, device=rt.device,
            channels_last=channels_last)
        classes = len(batch.dataset.classes)
        if classes > mc.num_classes:
            raise DataError(f"data_path {case.data_path!r}: {classes} class folders, but the "
                            f"model has model_config.num_classes = {mc.num_classes}")
    else:
        gen = torch.Generator(device="cpu").manual_seed(case.seed * 1000 + rank)
        images = torch.randn(mbs, 3, mc.image_size, mc.image_size, generator=gen)
        labels = torch.randint(0, mc.num_classes, (mbs,), generator=gen)
        batch = (images.to(rt.device, memory_format=fmt), labels.to(rt.device))

    def loss_fn(m: Any, b: Any) -> Any:
        images, labels = b
        return m(images, labels)

    info = {"parameters": params, "channels_last": channels_last, "optimizer": opt_name}
    return model, optimizer, loss_fn, batch, info
