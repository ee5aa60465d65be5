"""The real-data input pipeline for ResNet50: an image folder read by DataLoader workers.

`data: image_folder` with `data_path: DIR`, where DIR holds one folder of JPEGs per class
(ImageNet's train layout, what torchvision's `ImageFolder` reads). Each worker process decodes
(PIL), takes a random resized crop (scale 0.08-1, ratio 3/4-4/3) and flips half the images, and
hands back uint8 tensors; the training process copies the batch to the device (pinned memory, a
side stream on CUDA so the copy overlaps the previous step), converts it to float and normalises
it with ImageNet's mean and std there. That is how NVIDIA's reference splits the work (DALI does
the same on the GPU): a uint8 batch is a quarter of the bytes of a float one.

Each rank reads its own shard (`DistributedSampler`) and starts a new epoch when it runs out, so
any number of iterations can run. The time the training process waits for the next batch is
summed, so a run can say whether the pipeline kept up (see `ImageFolderStream.summary`).

The synthetic source (one fixed batch on the device) lives with each model's `build`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from toolkit.workloads.pytorch.common import BatchStream

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DataError(RuntimeError):
    """The data directory cannot feed the run; the message names the path and what was wrong."""


def default_workers() -> int:
    """The rank's CPUs minus one for the training process, at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus - 1)


def train_transform(image_size: int) -> Any:
    """Decoded PIL image -> augmented uint8 CHW tensor (runs in the worker processes)."""
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(image_size, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.PILToTensor(),
    ])


def open_image_folder(root: str | Path, image_size: int) -> Any:
    """torchvision's ImageFolder over `root`, or a DataError that says what is missing."""
    from torchvision.datasets import ImageFolder

    path = Path(root)
    if not path.is_dir():
        raise DataError(f"data_path {str(path)!r}: not a directory (expected one folder of "
                        "JPEG images per class)")
    if not any(child.is_dir() for child in path.iterdir()):
        raise DataError(f"data_path {str(path)!r}: holds no class folders (expected one folder "
                        "of JPEG images per class)")
    try:
        dataset = ImageFolder(str(path), transform=train_transform(image_size))
    except (FileNotFoundError, RuntimeError) as err:
        raise DataError(f"data_path {str(path)!r}: {err}") from None
    return dataset


class ImageFolderStream(BatchStream):
    """Endless training batches `(images, labels)` on `device` from an image folder."""

    def __init__(self, root: str | Path, *, image_size: int, batch_size: int, workers: int,
                 rank: int, world_size: int, seed: int, device: torch.device,
                 channels_last: bool) -> None:
        from torch.utils.data import DataLoader, DistributedSampler

        self.root = str(root)
        self.dataset = open_image_folder(root, image_size)
        shard = len(self.dataset) // world_size
        if shard < batch_size:
            raise DataError(f"data_path {self.root!r}: {len(self.dataset)} images give each of "
                            f"{world_size} ranks {shard}, fewer than one batch of {batch_size}")
        self.sampler = DistributedSampler(self.dataset, num_replicas=world_size, rank=rank,
                                          shuffle=True, seed=seed, drop_last=True)
        pin = device.type == "cuda"
        self.workers = workers
        self.loader = DataLoader(
            self.dataset, batch_size=batch_size, sampler=self.sampler, num_workers=workers,
            pin_memory=pin, drop_last=True, persistent_workers=workers > 0,
            prefetch_factor=4 if workers > 0 else None)
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        shape = (1, 3, 1, 1)
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(shape) * 255
        self.inv_std = 1.0 / (torch.tensor(IMAGENET_STD, device=device).view(shape) * 255)
        self.epoch = 0
        self.batches = 0
        self.wait_s = 0.0
        self.max_wait_s = 0.0
        self._it: Iterator[Any] = self._epoch_iter()
        self._copy_stream = torch.cuda.Stream(device) if pin else None
        self._ready: tuple[Any, Any, Any] | None = None
        if self._copy_stream is not None:
            self._ready = self._fetch_and_copy()

    def _epoch_iter(self) -> Iterator[Any]:
        self.sampler.set_epoch(self.epoch)
        return iter(self.loader)

    def _fetch(self) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        try:
            images, labels = next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = self._epoch_iter()
            images, labels = next(self._it)
        waited = time.perf_counter() - t0
        self.wait_s += waited
        self.max_wait_s = max(self.max_wait_s, waited)
        self.batches += 1
        return images, labels

    def _fetch_and_copy(self) -> tuple[Any, Any, Any]:
        """Start the next batch's host-to-device copy on the side stream."""
        images, labels = self._fetch()
        assert self._copy_stream is not None
        with torch.cuda.stream(self._copy_stream):
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        return images, labels, done

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._copy_stream is None:
            images, labels = self._fetch()
            images, labels = images.to(self.device), labels.to(self.device)
        else:
            assert self._ready is not None
            images, labels, done = self._ready
            current = torch.cuda.current_stream(self.device)
            current.wait_event(done)
            # the tensors were made on the copy stream; tell the allocator they are used here
            images.record_stream(current)
            labels.record_stream(current)
            self._ready = self._fetch_and_copy()
        x = images.to(dtype=torch.float32, memory_format=self.memory_format)
        x = (x - self.mean) * self.inv_std
        return x, labels

    def summary(self) -> dict[str, Any]:
        return {
            "source": "image_folder", "path": self.root, "images": len(self.dataset),
            "classes": len(self.dataset.classes), "workers": self.workers,
            "batches_loaded": self.batches, "epochs_started": self.epoch + 1,
            "host_wait_s": self.wait_s, "host_wait_max_s": self.max_wait_s,
            "fixed_batch": False,
        }
