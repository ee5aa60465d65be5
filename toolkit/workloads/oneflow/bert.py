"""BERT pretraining (masked LM + next sentence) under OneFlow, on synthetic token batches.

transformers has no OneFlow models, so the model is written here, layer for layer as
transformers' `BertForPreTraining` (which `torch_bert` trains): word + position + token-type
embeddings, post-LayerNorm encoder layers (eps 1e-12, GELU, dropout 0.1 on hidden states and
attention probabilities), a tanh pooler on the first token, the MLM head (dense, GELU,
LayerNorm, decoder tied to the word embeddings, own bias) and the NSP head. Same shapes, so the
same parameter count for the same `model_config` (the framework-comparison test checks this
against the torch run). Attention has no padding mask: the synthetic batches have none, as the
torch workload's all-ones mask, which its SDPA path drops.

The batch is built the same way as `torch_bert` (same shapes and label layout, OneFlow's RNG):
`masked_positions` labelled tokens per sequence, the rest ignored (-100), second half of each
sequence token type 1. Optimizer: AdamW, lr 1e-4, weight decay 0.01.

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

LN_EPS = 1e-12
DROPOUT = 0.1
TYPE_VOCAB = 2


class SelfAttention(nn.Module):
    """Multi-head self-attention as BertSelfAttention + BertSelfOutput (post-LN residual)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(DROPOUT)
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(DROPOUT)
        self.norm = nn.LayerNorm(hidden, eps=LN_EPS)

    def _split(self, x: Any) -> Any:
        b, s, _ = x.shape
        return x.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: Any) -> Any:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = flow.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        ctx = flow.matmul(probs, v).permute(0, 2, 1, 3)
        ctx = ctx.reshape(x.shape[0], x.shape[1], -1)
        return self.norm(x + self.dropout(self.dense(ctx)))


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.dropout = nn.Dropout(DROPOUT)
        self.norm = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, x: Any) -> Any:
        x = self.attention(x)
        return self.norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


class BertForPreTraining(nn.Module):
    """Returns the pretraining loss (MLM cross-entropy over labelled positions + NSP)."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, intermediate: int,
                 max_positions: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=LN_EPS)
        self.embed_dropout = nn.Dropout(DROPOUT)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, intermediate)
                                     for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlm_bias = nn.Parameter(flow.zeros(vocab))
        self.nsp = nn.Linear(hidden, 2)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: Any) -> None:
        # transformers' BertPreTrainedModel: normal(0, 0.02) weights, zero biases, unit LN.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: Any, token_type_ids: Any, labels: Any,
                next_sentence_label: Any) -> Any:
        seq = input_ids.shape[1]
        positions = flow.arange(seq, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.embed_dropout(self.embed_norm(x))
        for layer in self.layers:
            x = layer(x)
        pooled = flow.tanh(self.pooler(x[:, 0]))
        h = self.mlm_norm(F.gelu(self.mlm_dense(x)))
        # decoder tied to the word embeddings (one parameter, as in transformers)
        logits = flow.matmul(h, self.word.weight.transpose(0, 1)) + self.mlm_bias
        mlm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                              ignore_index=-100)
        nsp = F.cross_entropy(self.nsp(pooled), next_sentence_label)
        return mlm + nsp


def build(case: Case, rt: OneFlowRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    mc = case.model_config
    assert mc.hidden_size and mc.num_layers and mc.num_heads and mc.intermediate_size
    assert mc.seq_len and mc.vocab_size and mc.masked_positions
    flow.manual_seed(case.seed)
    model = BertForPreTraining(mc.vocab_size, mc.hidden_size, mc.num_layers, mc.num_heads,
                               mc.intermediate_size, max(512, mc.seq_len)).to(rt.device)
    params = sum(p.numel() for p in model.parameters())
    fused = rt.device_type == "cuda"
    optimizer = flow.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fused)

    gen = flow.Generator()
    gen.manual_seed(case.seed * 1000 + rank)
    mbs, seq = case.micro_batch_size, mc.seq_len
    input_ids = flow.randint(0, mc.vocab_size, (mbs, seq), generator=gen)
    token_type_ids = flow.zeros(mbs, seq, dtype=flow.int64)
    token_type_ids[:, seq // 2:] = 1
    labels = flow.full((mbs, seq), -100, dtype=flow.int64)
    for row in range(mbs):
        pos = flow.randperm(seq, generator=gen)[: mc.masked_positions]
        labels[row, pos] = flow.randint(0, mc.vocab_size, (mc.masked_positions,), generator=gen)
    nsp = flow.randint(0, 2, (mbs,), generator=gen)
    batch = {k: v.to(rt.device) for k, v in {
        "input_ids": input_ids, "token_type_ids": token_type_ids, "labels": labels,
        "next_sentence_label": nsp}.items()}

    def loss_fn(m: Any, b: Any) -> Any:
        return m(**b)

    info = {"parameters": int(params), "attention": "matmul-softmax (no fused kernel)",
            "optimizer": "AdamW(fused)" if fused else "AdamW"}
    return model, optimizer, loss_fn, batch, info
