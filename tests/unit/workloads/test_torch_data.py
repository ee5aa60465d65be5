"""The image-folder pipeline on a small folder of real JPEG files (written with PIL): worker
processes decode and augment, the batch comes out normalised on the device, each rank reads its
own shard, epochs restart, and bad folders give errors that name the path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
Image = pytest.importorskip("PIL.Image")

from toolkit.spec import Case, resolve  # noqa: E402
from toolkit.workloads.pytorch import resnet50 as torch_resnet50  # noqa: E402
from toolkit.workloads.pytorch.common import TorchRuntime, resolve_options  # noqa: E402
from toolkit.workloads.pytorch.data import (  # noqa: E402
    IMAGENET_MEAN,
    IMAGENET_STD,
    DataError,
    ImageFolderStream,
)


def write_jpegs(root, classes=3, per_class=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for c in range(classes):
        folder = root / f"n{c:08d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            h, w = 40 + 3 * i, 56 - 2 * i  # varied sizes and aspect ratios, like ImageNet
            pixels = torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8)
            Image.fromarray(pixels.numpy()).save(folder / f"img{i}.JPEG", quality=90)
    return root


def stream(root, **kw):
    args = {"image_size": 24, "batch_size": 4, "workers": 2, "rank": 0, "world_size": 1,
            "seed": 7, "device": torch.device("cpu"), "channels_last": False}
    return ImageFolderStream(root, **{**args, **kw})


def test_batches_are_decoded_augmented_and_normalised(tmp_path):
    s = stream(write_jpegs(tmp_path / "train"))
    batches = [s.next_batch() for _ in range(10)]  # 18 images / 4 = 4 batches per epoch
    for images, labels in batches:
        assert images.shape == (4, 3, 24, 24) and images.dtype == torch.float32
        assert labels.dtype == torch.int64 and 0 <= int(labels.min()) <= int(labels.max()) < 3
    x = torch.cat([b[0] for b in batches])
    # uint8 pixels normalised with ImageNet's mean and std: the extremes of 0 and 255
    low = min((0 - m) / s_ for m, s_ in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
    high = max((1 - m) / s_ for m, s_ in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))
    assert low - 1e-4 <= float(x.min()) < -1.0 and 1.0 < float(x.max()) <= high + 1e-4
    assert not torch.equal(batches[0][0], batches[1][0])
    summary = s.summary()
    assert summary["source"] == "image_folder" and summary["images"] == 18
    assert summary["classes"] == 3 and summary["workers"] == 2
    assert summary["batches_loaded"] == 10 and summary["epochs_started"] == 3
    assert summary["host_wait_s"] > 0 and summary["fixed_batch"] is False


def test_random_crops_differ_between_epochs(tmp_path):
    """The same four images drawn again: different crops and flips."""
    root = write_jpegs(tmp_path / "one", classes=1, per_class=4)
    s = stream(root, workers=0)
    first, second = s.next_batch()[0], s.next_batch()[0]
    assert first.shape == second.shape and not torch.equal(first.sort().values,
                                                           second.sort().values)


def test_ranks_read_disjoint_shards_and_channels_last(tmp_path):
    root = write_jpegs(tmp_path / "train", classes=2, per_class=8)
    a = stream(root, rank=0, world_size=2, workers=0, channels_last=True)
    b = stream(root, rank=1, world_size=2, workers=0)
    ia, ib = list(iter(a.sampler)), list(iter(b.sampler))
    assert len(ia) == len(ib) == 8 and not set(ia) & set(ib)
    images, _ = a.next_batch()
    assert images.is_contiguous(memory_format=torch.channels_last)


def test_bad_folders_name_the_path(tmp_path):
    with pytest.raises(DataError, match="not a directory"):
        stream(tmp_path / "missing")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"")
    with pytest.raises(DataError, match=r"flat.*holds no class folders"):
        stream(tmp_path / "flat")
    (tmp_path / "noimages" / "class0").mkdir(parents=True)
    (tmp_path / "noimages" / "class0" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"noimages.*no valid file"):
        stream(tmp_path / "noimages")
    small = write_jpegs(tmp_path / "small", classes=1, per_class=3)
    with pytest.raises(DataError, match=r"small.*3 images give each of 1 ranks 3, fewer than "
                                        r"one batch of 4"):
        stream(small)


def test_resnet_build_checks_classes_against_the_model(tmp_path):
    root = write_jpegs(tmp_path / "train", classes=3, per_class=4)
    case = resolve(Case.from_dict({
        "model": "resnet50", "batch_size_per_device": 4, "data": "image_folder",
        "data_path": str(root), "data_workers": 0,
        "model_config": {"image_size": 32, "resnet_layers": [1, 1, 1, 1], "num_classes": 2}}))
    rt = TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                      backend=None, options=resolve_options(case, "cpu"))
    with pytest.raises(DataError, match=r"3 class folders.*num_classes = 2"):
        torch_resnet50.build(case, rt, rank=0)
