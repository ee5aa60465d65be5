"""FLOPs per training sample and device peaks, for TFLOP/s and MFU (model FLOPs utilisation).

Figures and formulas from `shared/reference/performance.md` (2 FLOPs per multiply-accumulate):

- ResNet50 v1.5 at 224x224: 24.3 GFLOP per image, forward + backward (8.18 forward); other image
  sizes scale with the pixel count.
- BERT per sequence of length s, hidden h, layers L, vocab V, P masked-LM head positions:
  ``6*s*12*L*h^2 + 12*L*h*s^2 + 6*P*(h^2 + h*V)`` (P = s when the head runs on every token).
- GPT (Megatron-LM, Narayanan et al. 2021): per sample of s tokens, l layers, hidden h, vocab V,
  ``72*s*l*h^2*(1 + s/(6h) + V/(12*l*h))`` without activation recomputation and
  ``96*s*l*h^2*(1 + s/(6h) + V/(16*l*h))`` with full recomputation. A table says which.

Peaks are dense tensor-core figures keyed by the device name the driver reports. An unknown
device gives no MFU rather than a guess; so does the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.spec import Case, Model, Precision

RESNET50_TRAIN_FLOP_224 = 24.3e9
"""Forward + backward FLOPs of one 224x224 image through ResNet50 v1.5."""

# Dense peak TFLOP/s by precision class: bf16/fp16 tensor, tf32 tensor, fp32 without tensor cores.
_PEAKS: dict[str, dict[str, float]] = {
    "H100 SXM": {"bf16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.2},
    "H200": {"bf16": 989.0, "tf32": 494.7, "fp32": 66.9},
    "A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "V100": {"bf16": 125.0, "fp32": 15.7},  # fp16 tensor cores only; no bf16, no tf32
}


# Datasheet memory bandwidth, GB/s (10^9 bytes/s), by device class; A100 by its memory size.
_HBM_GBPS: dict[str, float] = {
    "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "H200": 4800.0, "A100": 2039.0, "V100": 900.0,
}


def datasheet(device_name: str | None, metric: str) -> float | None:
    """The datasheet figure a preflight metric is measured against: dense TFLOP/s for
    `gemm_bf16`, `gemm_fp16`, `gemm_tf32`, `gemm_fp8` (twice bf16, Hopper only), memory GB/s for
    `hbm_copy` and `hbm_triad`; None when unknown."""
    key = device_class(device_name)
    if key is None:
        return None
    if metric in ("gemm_bf16", "gemm_fp16"):
        return _PEAKS[key]["bf16"]
    if metric == "gemm_tf32":
        return _PEAKS[key].get("tf32")
    if metric == "gemm_fp8":
        return 2 * _PEAKS[key]["bf16"] if key in ("H100 SXM", "H100 PCIe", "H200") else None
    if metric in ("hbm_copy", "hbm_triad"):
        if key == "A100" and device_name and "40GB" in device_name.upper():
            return 1555.0
        return _HBM_GBPS[key]
    return None


#: PCIe bandwidth per lane and direction, GB/s, after line coding, by link generation.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def device_class(device_name: str | None) -> str | None:
    """The peak-table key for a driver-reported name ("NVIDIA H100 80GB HBM3" -> "H100 SXM")."""
    if not device_name:
        return None
    name = device_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name:
        if "PCIE" in name:
            return "H100 PCIe"
        if "HBM3" in name or "SXM" in name:
            return "H100 SXM"
        return None  # H100 NVL and others: peaks differ, no guess
    if "A100" in name:
        return "A100"
    if "V100" in name:
        return "V100"
    return None


def precision_class(case: Case) -> str:
    if case.precision in (Precision.AMP_BF16, Precision.AMP_FP16):
        return "bf16"
    if case.precision is Precision.TF32:
        return "tf32"
    return "fp32"


def peak_tflops(device_name: str | None, case: Case) -> float | None:
    """Dense peak TFLOP/s of one device for this case's precision; None when unknown."""
    key = device_class(device_name)
    if key is None:
        return None
    peaks = _PEAKS[key]
    if case.precision is Precision.AMP_BF16 and key == "V100":
        return None
    return peaks.get(precision_class(case))


@dataclass(frozen=True)
class FlopsPerSample:
    flops: float
    """Training FLOPs (forward + backward) per sample."""
    formula: str
    """Which formula gave it, for the report."""


def bert_flops(seq: int, hidden: int, layers: int, vocab: int, head_positions: int) -> float:
    return (6 * seq * 12 * layers * hidden**2 + 12 * layers * hidden * seq**2
            + 6 * head_positions * (hidden**2 + hidden * vocab))


def gpt_flops(seq: int, hidden: int, layers: int, vocab: int, recompute: bool) -> float:
    """Megatron-LM's per-sample FLOPs: the 72-formula, or the 96-formula with recomputation."""
    if recompute:
        return 96 * seq * layers * hidden**2 * (1 + seq / (6 * hidden)
                                                + vocab / (16 * layers * hidden))
    return 72 * seq * layers * hidden**2 * (1 + seq / (6 * hidden)
                                            + vocab / (12 * layers * hidden))


def flops_per_sample(case: Case) -> FlopsPerSample | None:
    """Training FLOPs of one sample of a resolved case; None when the model has no formula."""
    mc = case.model_config
    if case.model is Model.RESNET50:
        if mc.image_size is None:
            return None
        scale = (mc.image_size / 224) ** 2
        if mc.resnet_layers not in (None, (3, 4, 6, 3)) or mc.num_classes not in (None, 1000):
            return None  # shrunken CPU model: the published figure does not apply
        return FlopsPerSample(RESNET50_TRAIN_FLOP_224 * scale, "resnet50: 24.3 GFLOP x (px/224)^2")
    if case.model is Model.BERT_BASE:
        if None in (mc.seq_len, mc.hidden_size, mc.num_layers, mc.vocab_size):
            return None
        assert mc.seq_len and mc.hidden_size and mc.num_layers and mc.vocab_size
        positions = mc.masked_positions or mc.seq_len
        return FlopsPerSample(
            bert_flops(mc.seq_len, mc.hidden_size, mc.num_layers, mc.vocab_size, positions),
            f"bert: 72sLh^2 + 12Lhs^2 + 6P(h^2 + hV), P = {positions}")
    if case.model is Model.GPT:
        if None in (mc.seq_len, mc.hidden_size, mc.num_layers, mc.vocab_size):
            return None
        assert mc.seq_len and mc.hidden_size and mc.num_layers and mc.vocab_size
        recompute = bool(getattr(case, "activation_checkpointing", False))
        return FlopsPerSample(
            gpt_flops(mc.seq_len, mc.hidden_size, mc.num_layers, mc.vocab_size, recompute),
            "gpt: megatron 96-formula (recompute)" if recompute else "gpt: megatron 72-formula")
    return None


def achieved(case: Case, throughput_sps: float | None,
             device_name: str | None) -> dict[str, float | str]:
    """`tflops_per_gpu`, `mfu` and `flops_formula` for a run, as far as they are known."""
    out: dict[str, float | str] = {}
    fps = flops_per_sample(case)
    if fps is None or throughput_sps is None:
        return out
    per_gpu = fps.flops * throughput_sps / case.world_size / 1e12
    out["tflops_per_gpu"] = per_gpu
    out["flops_formula"] = fps.formula
    peak = peak_tflops(device_name, case)
    if peak:
        out["mfu"] = per_gpu / peak
    return out
