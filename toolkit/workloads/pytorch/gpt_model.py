"""A Megatron-style GPT in plain PyTorch: learned token and position embeddings, pre-LayerNorm
blocks (causal self-attention through `scaled_dot_product_attention`, GELU MLP of width 4h), a
final LayerNorm and an output layer tied to the token embedding. No dropout: a benchmark wants the
same arithmetic every step.

What lives here: the configuration, the modules, the stage-aware forward (a `GPT` built for a
pipeline stage holds only its layers, the embeddings on the first stage and the head on the
last), the loss, and a parameter initialisation that gives every parameter the same values
whichever rank, stage or tensor-parallel shard holds it (each parameter is drawn from a
generator seeded by its name, then the rank keeps its shard). That last property is what lets the
parallel runs be checked against the single-rank model number by number.

What lives elsewhere: the mesh, tensor/pipeline/data parallelism (`torch_gpt_parallel`), the
training step and the workload entry point (`torch_gpt_train`). torch is imported at the top:
this module is only imported on the ranks, inside `toolkit.workloads.run`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from toolkit.spec import Case


@dataclass(frozen=True)
class GPTConfig:
    """Model sizes (from the case's resolved `model_config`)."""

    vocab_size: int
    seq_len: int
    hidden_size: int
    num_layers: int
    num_heads: int
    ffn_size: int
    """MLP width; 4 x hidden as in GPT/Megatron unless the grid says otherwise."""
    activation_checkpointing: bool = False
    """Recompute each layer's forward in backward (Megatron's full recomputation)."""
    init_std: float = 0.02

    @classmethod
    def from_case(cls, case: Case) -> GPTConfig:
        mc = case.model_config
        assert mc.vocab_size and mc.seq_len and mc.hidden_size and mc.num_layers
        assert mc.num_heads and mc.intermediate_size, "resolve() fills the GPT defaults"
        return cls(vocab_size=mc.vocab_size, seq_len=mc.seq_len, hidden_size=mc.hidden_size,
                   num_layers=mc.num_layers, num_heads=mc.num_heads,
                   ffn_size=mc.intermediate_size,
                   activation_checkpointing=case.activation_checkpointing)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def parameter_count(self) -> int:
        """Parameters of the whole model, the tied embedding counted once."""
        h, f = self.hidden_size, self.ffn_size
        per_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h) + 4 * h
        return self.vocab_size * h + self.seq_len * h + self.num_layers * per_layer + 2 * h


class Attention(nn.Module):
    """Causal self-attention. The fused QKV output is laid out per head as (heads, 3, head_dim),
    as Megatron does, so that splitting its rows evenly over tensor-parallel ranks gives each rank
    whole heads with their q, k and v; the forward infers the local head count from the shape."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, -1, 3, self.head_dim)
        q, k, v = qkv.permute(3, 0, 2, 1, 4).unbind(0)  # each (b, heads, s, head_dim)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.hidden_size, cfg.ffn_size)
        self.proj = nn.Linear(cfg.ffn_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm transformer layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_size)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden_size)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(to_autocast_dtype(self.ln_1(x)))
        return x + self.mlp(to_autocast_dtype(self.ln_2(x)))


def to_autocast_dtype(x: torch.Tensor) -> torch.Tensor:
    """A LayerNorm output (fp32 under autocast) in the autocast dtype, as the next linear layer
    would cast it anyway: the same numbers, but under tensor parallelism the column-parallel
    layer's input, and so the all-reduce of its gradient in backward, is bf16/fp16 instead of
    fp32 (half the bytes: 2 of the 4 all-reduces per layer)."""
    if torch.is_autocast_enabled(x.device.type):
        return x.to(torch.get_autocast_dtype(x.device.type))
    return x


class GPT(nn.Module):
    """The whole model, or one pipeline stage of it.

    Layers sit in a ModuleDict keyed by their index in the whole model, so parameter names
    (`layers.7.attn.qkv.weight`) are the same in every stage and in the single-rank model.
    A stage's forward takes tokens (first stage) or hidden states and returns hidden states or,
    on the last stage, logits (a vocabulary shard of them under tensor parallelism).
    """

    def __init__(self, cfg: GPTConfig, layer_ids: Sequence[int] | None = None,
                 first: bool = True, last: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        ids = list(range(cfg.num_layers)) if layer_ids is None else list(layer_ids)
        self.first, self.last = first, last
        self.tok_emb: nn.Embedding | None = (
            nn.Embedding(cfg.vocab_size, cfg.hidden_size) if first else None)
        self.pos_emb: nn.Embedding | None = (
            nn.Embedding(cfg.seq_len, cfg.hidden_size) if first else None)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in ids})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(cfg.hidden_size) if last else None
        self.lm_head: nn.Linear | None = (
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if last else None)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the output layer's weight with the token embedding when one module holds both.

        Called again after anything that replaces parameters (tensor parallelism, `to_empty`).
        Across pipeline stages the two are separate copies kept equal by summing their
        gradients (`torch_gpt_parallel.TiedEmbedding`).
        """
        if self.tok_emb is not None and self.lm_head is not None:
            self.lm_head.weight = self.tok_emb.weight

    seq_shard: tuple[int, int] | None = None
    """(this rank's index, ranks) when the sequence is split over tensor-parallel ranks
    (sequence parallelism): the embedding output holds this rank's positions only."""

    amp_dtype: torch.dtype | None = None
    """Autocast dtype for the forward (bf16/fp16 AMP); None runs in the parameters' dtype. The
    model enters autocast itself so that a pipeline schedule's backward runs outside it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.amp_dtype is None:
            return self._forward(x)
        with torch.autocast(x.device.type, dtype=self.amp_dtype):
            return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None:
            assert self.pos_emb is not None
            positions = torch.arange(x.shape[1], device=x.device)
            if self.seq_shard is not None:
                index, ranks = self.seq_shard
                positions = positions.chunk(ranks)[index]
            x = self.tok_emb(x) + self.pos_emb(positions)
        for layer in self.layers.values():
            if self.cfg.activation_checkpointing and torch.is_grad_enabled():
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        if self.lm_head is not None:
            assert self.ln_f is not None
            x = self.lm_head(to_autocast_dtype(self.ln_f(x)))
        return x


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss over every position (logits in fp32, as autocast does anyway)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


# -- initialisation ------------------------------------------------------------------------------
_TIED_NAMES = {"lm_head.weight": "tok_emb.weight"}
"""A stage that holds the output layer but not the embedding initialises it as the embedding."""


def _name_seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1)


def _full_init(name: str, shape: torch.Size, cfg: GPTConfig, seed: int,
               device: torch.device) -> torch.Tensor:
    """The value the parameter `name` has in the whole model (GPT-2/Megatron scheme: normal
    0.02, output projections scaled by 1/sqrt(2 x layers), biases 0, LayerNorm 1/0)."""
    *_, owner, leaf = ["", *name.split(".")]
    if owner.startswith("ln_"):
        return (torch.ones if leaf == "weight" else torch.zeros)(shape, device=device)
    if leaf == "bias":
        return torch.zeros(shape, device=device)
    std = cfg.init_std
    if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
        std = cfg.init_std / math.sqrt(2 * cfg.num_layers)
    gen = torch.Generator(device=device)
    gen.manual_seed(_name_seed(seed, _TIED_NAMES.get(name, name)))
    return torch.empty(shape, device=device).normal_(0.0, std, generator=gen)


def _local_part(full: torch.Tensor, param: Any) -> torch.Tensor:
    """This rank's part of `full` for a parameter that may be a DTensor (even Shard/Replicate
    placements, as tensor parallelism makes them; sizes are checked divisible by the case)."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(param, DTensor):
        return full
    mesh = param.device_mesh
    part = full
    for dim, placement in enumerate(param.placements):
        if isinstance(placement, Shard):
            part = part.chunk(mesh.size(dim), dim=placement.dim)[mesh.get_local_rank(dim)]
    return part


@torch.no_grad()
def init_parameters(model: GPT, seed: int) -> None:
    """Give every parameter (or this rank's shard of it) its whole-model value.

    Run after tensor parallelism and `to_empty`, before data-parallel wrapping: names must be
    the model's own (`layers.3.mlp.fc.weight`).
    """
    from torch.distributed.tensor import DTensor

    for name, param in model.named_parameters():
        local = param.to_local() if isinstance(param, DTensor) else param
        full = _full_init(name, param.shape, model.cfg, seed, local.device)
        local.copy_(_local_part(full, param))
