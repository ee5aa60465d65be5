"""FLOPs formulas and peaks against the figures in shared/reference/performance.md."""

import pytest

from toolkit.analysis.flops import achieved, bert_flops, device_class, flops_per_sample, gpt_flops
from toolkit.spec import Case, from_plain, resolve


def _case(**kw: object) -> Case:
    return resolve(from_plain(Case, kw, "case"))


def test_bert_base_per_sequence_matches_published_figures() -> None:
    assert bert_flops(128, 768, 12, 30522, 20) / 1e9 == pytest.approx(69.9, abs=0.1)
    assert bert_flops(512, 768, 12, 30522, 80) / 1e9 == pytest.approx(301.5, abs=0.1)
    assert bert_flops(128, 768, 12, 30522, 128) / 1e9 == pytest.approx(85.5, abs=0.1)
    assert bert_flops(128, 1024, 24, 30522, 20) / 1e9 == pytest.approx(240.6, abs=0.1)


def test_gpt_96_formula_reproduces_the_seed_v100_row() -> None:
    # seed 001: B = 2, l = 16, h = 1536, V = 51200, s = 2048, 406.16 ms -> 49.43 TFLOP/s
    per_iter = 2 * gpt_flops(2048, 1536, 16, 51200, recompute=True)
    assert per_iter / 0.40616 / 1e12 == pytest.approx(49.43, abs=0.01)


def test_resnet50_uses_the_published_figure_and_refuses_shrunk_models() -> None:
    full = flops_per_sample(_case(model="resnet50", batch_size_per_device=8))
    assert full is not None and full.flops == pytest.approx(24.3e9)
    tiny = _case(model="resnet50", batch_size_per_device=8,
                 model_config={"resnet_layers": [1, 1, 1, 1], "image_size": 64})
    assert flops_per_sample(tiny) is None


def test_device_names_map_to_peaks_and_unknown_gives_no_mfu() -> None:
    assert device_class("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert device_class("NVIDIA H100 PCIe") == "H100 PCIe"
    assert device_class("NVIDIA H200") == "H200"
    assert device_class("NVIDIA H100 NVL") is None
    assert device_class("cpu") is None
    case = _case(model="bert_base", precision="amp_bf16", batch_size_per_device=64,
                 gpus_per_node=2)
    # 2 GPUs at 4,000 seq/s in total: 2,000 seq/s x 69.9 GFLOP each = 139.8 TFLOP/s per GPU
    h200 = achieved(case, 4000.0, "NVIDIA H200")
    assert h200["tflops_per_gpu"] == pytest.approx(139.8, abs=0.1)
    assert h200["mfu"] == pytest.approx(139.8 / 989, abs=1e-3)
    cpu = achieved(case, 4000.0, "cpu")
    assert "mfu" not in cpu and "tflops_per_gpu" in cpu
