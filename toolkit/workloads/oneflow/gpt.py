"""GPT pretraining under OneFlow (data parallel), on synthetic token batches.

A Megatron-LM style decoder, the model of the reports' GPT tables (`MODEL_DEFAULTS[Model.GPT]`:
hidden 1536, 16 layers, 16 heads, MLP 4 x hidden, seq 2048, vocab 50304): learned token and
position embeddings, pre-LayerNorm blocks (fused QKV projection, causal softmax attention,
GELU MLP), dropout 0.1 on hidden states and attention probabilities (Megatron's defaults), a
final LayerNorm and the output layer tied to the token embeddings. Initialisation as Megatron:
normal(0, 0.02), output projections of each block scaled by 1 / sqrt(2 x layers).

Each sample is `seq_len + 1` random tokens: the first `seq_len` are the input, the last
`seq_len` the next-token labels. Optimizer: AdamW (lr 1.5e-4, weight decay 0.01, as Megatron's
GPT examples). Data parallel alone: local tensors and DDP. With `parallel.tp` or `parallel.pp`
above 1: global tensors on dp x tp x pp meshes (`oneflow_gpt_parallel`); the model code is the
same, `_follow` moves activations between pipeline stages.

Imports oneflow at module level: `oneflow_run` imports this module only after
`oneflow_common.setup` exported the distributed environment.
"""

from __future__ import annotations

import math
from typing import Any

import oneflow as flow
import oneflow.nn as nn
import oneflow.nn.functional as F

from toolkit.spec import Case
from toolkit.workloads.oneflow.common import OneFlowRuntime

DROPOUT = 0.1
LN_EPS = 1e-5
INIT_STD = 0.02


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(DROPOUT)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x: Any, causal_mask: Any) -> Any:
        b, s, h = x.shape
        # Megatron's layout, [head][q|k|v][head_dim]: a tensor-parallel split of the output
        # features gives each rank whole heads, so attention needs no communication.
        qkv = self.qkv(x).reshape(b, s, self.heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = flow.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(causal_mask, float("-inf"))
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        ctx = flow.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, h)
        return self.dropout(self.proj(ctx))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.attn = CausalSelfAttention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.fc = nn.Linear(hidden, intermediate)
        self.proj = nn.Linear(intermediate, hidden)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x: Any, causal_mask: Any) -> Any:
        x = x + self.attn(self.ln1(x), causal_mask)
        return x + self.dropout(self.proj(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """Returns the mean next-token cross-entropy of a (batch, seq_len + 1) token tensor."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, intermediate: int,
                 seq_len: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.dropout = nn.Dropout(DROPOUT)
        self.blocks = nn.ModuleList([Block(hidden, heads, intermediate) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=LN_EPS)
        self.apply(self._init_weights)
        scaled = INIT_STD / math.sqrt(2.0 * layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, mean=0.0, std=scaled)
            nn.init.normal_(block.proj.weight, mean=0.0, std=scaled)

    @staticmethod
    def _init_weights(module: Any) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: Any) -> Any:
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        seq = inputs.shape[1]
        where = _where(tokens)
        positions = flow.arange(seq, **where).unsqueeze(0)
        causal_mask = flow.ones(seq, seq, dtype=flow.bool, **where).triu(1)
        x = self.dropout(self.wte(inputs) + self.wpe(positions))
        for block in self.blocks:
            # pipeline stages: activations follow the block's parameters to its ranks
            x, causal_mask = _follow(block.ln1.weight, x, causal_mask)
            x = block(x, causal_mask)
        (x,) = _follow(self.ln_f.weight, x)
        # the output layer is the token embedding (tied), brought to the last stage's ranks
        (weight,) = _follow(x, self.wte.weight)
        logits = flow.matmul(self.ln_f(x), weight.transpose(0, 1))
        (labels,) = _follow(logits, labels)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _follow(anchor: Any, *tensors: Any) -> tuple[Any, ...]:
    """Global tensors moved to `anchor`'s placement (same SBP), so that an op can combine
    them; local tensors, and global ones already there, are returned as they are."""
    if not anchor.is_global:
        return tensors
    return tuple(t.to_global(placement=anchor.placement, sbp=t.sbp)
                 if t.is_global and t.placement != anchor.placement else t for t in tensors)


def _where(like: Any) -> dict[str, Any]:
    """Keyword arguments that create a tensor where `like` lives: its device, or for a global
    tensor its placement, replicated (broadcast) on every rank of it."""
    if like.is_global:
        return {"placement": like.placement, "sbp": [flow.sbp.broadcast] * len(like.sbp)}
    return {"device": like.device}


def build(case: Case, rt: OneFlowRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """Data parallel (local tensors, DDP added by the caller) or, with tp/pp > 1, global
    tensors on the dp x tp x pp meshes of `oneflow_gpt_parallel` (`global_tensors` in info)."""
    from toolkit.workloads.oneflow import gpt_parallel as par

    mc = case.model_config
    assert mc.hidden_size and mc.num_layers and mc.num_heads and mc.intermediate_size
    assert mc.seq_len and mc.vocab_size
    sharded = case.parallel.tp > 1 or case.parallel.pp > 1
    flow.manual_seed(case.seed)  # every rank builds the same model; sharding then slices it
    model = GPT(mc.vocab_size, mc.hidden_size, mc.num_layers, mc.num_heads,
                mc.intermediate_size, mc.seq_len).to(rt.device)
    params = sum(p.numel() for p in model.parameters())
    info: dict[str, Any] = {"parameters": int(params), "parallel": "dp",
                            "attention": "matmul-softmax (no fused kernel)"}
    if sharded:
        meshes = par.stage_meshes(case, rt.device_type)
        info.update(par.shard(model, case, meshes), global_tensors=True)
    fused = rt.device_type == "cuda"
    optimizer = flow.optim.AdamW(model.parameters(), lr=1.5e-4, weight_decay=0.01, fused=fused)
    info["optimizer"] = "AdamW(fused)" if fused else "AdamW"

    gen = flow.Generator()
    # ranks of one data-parallel row must hold the same samples under global tensors
    gen.manual_seed(case.seed * 1000 + (par.dp_index(case, rank) if sharded else rank))
    tokens = flow.randint(0, mc.vocab_size, (case.micro_batch_size, mc.seq_len + 1),
                          generator=gen).to(rt.device)
    if sharded:
        tokens = par.global_batch(tokens, meshes[0])

    def loss_fn(m: Any, b: Any) -> Any:
        return m(b)

    return model, optimizer, loss_fn, tokens, info
