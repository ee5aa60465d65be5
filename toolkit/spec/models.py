"""Model sizes: the size knobs (`ModelConfig`), each model's published defaults, and the knobs
each model takes; `toolkit.spec.case.resolve` fills a case's sizes in from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.spec.vocab import Model


@dataclass(frozen=True)
class ModelConfig:
    """Model size knobs. `None` means the model's published size (filled in by `resolve`)."""

    image_size: int | None = None
    """ResNet50: input height and width in pixels (224 for the published model)."""
    num_classes: int | None = None
    """ResNet50: output classes (1000)."""
    resnet_layers: tuple[int, ...] | None = None
    """ResNet50: bottleneck blocks per stage ((3, 4, 6, 3)); smaller for CPU smoke runs."""
    hidden_size: int | None = None
    """BERT/GPT: hidden width (768 for BERT-base)."""
    num_layers: int | None = None
    """BERT/GPT: transformer layers (12 for BERT-base)."""
    num_heads: int | None = None
    """BERT/GPT: attention heads (12 for BERT-base)."""
    intermediate_size: int | None = None
    """BERT/GPT: MLP width (4 x hidden)."""
    seq_len: int | None = None
    """BERT/GPT: tokens per sample (128 for BERT phase 1)."""
    vocab_size: int | None = None
    """BERT/GPT: vocabulary size (30522 for BERT)."""
    masked_positions: int | None = None
    """BERT: masked-LM positions per sequence (20 at seq 128, as NVIDIA's reference)."""


# -- per-model defaults ---------------------------------------------------------------------
MODEL_DEFAULTS: dict[Model, dict[str, Any]] = {
    Model.RESNET50: {"image_size": 224, "num_classes": 1000, "resnet_layers": (3, 4, 6, 3)},
    Model.BERT_BASE: {
        "hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072,
        "seq_len": 128, "vocab_size": 30522, "masked_positions": 20,
    },
    Model.GPT: {
        "hidden_size": 1536, "num_layers": 16, "num_heads": 16, "intermediate_size": 6144,
        "seq_len": 2048, "vocab_size": 50304,
    },
    Model.COMMAND: {},  # the program's sizes are its own
}


MODEL_KEYS: dict[Model, frozenset[str]] = {m: frozenset(d) for m, d in MODEL_DEFAULTS.items()}
