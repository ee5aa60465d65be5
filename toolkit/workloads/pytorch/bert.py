"""BERT pretraining (masked LM + next sentence), as NVIDIA's reference trains it, on synthetic
token batches.

The encoder is transformers' `BertModel` with scaled-dot-product attention (SDPA), built from a
config (no download). The masked-LM head runs only on the `masked_positions` masked tokens of each
sequence (20 of 128, 80 of 512), gathered before the head: NVIDIA's reference does this, and it
is what `toolkit.analysis.flops` counts (the head on every token would cost 22% more at seq 128 and
compute logits nobody trains on). The heads are `BertForPreTraining`'s own (`cls`, decoder tied to
the word embeddings). The loss is computed inside the module's forward, so torch.compile fuses
the vocabulary-sized cross-entropy with the head.

Synthetic batches carry no padding, so no attention mask is passed and SDPA may use its fastest
(flash) kernel; masked positions hold the [MASK] token and their labels are the original tokens.
Optimizers: AdamW (fused on CUDA; lr 1e-4, weight decay 0.01) or LAMB (`optim.Lamb`, lr 2e-3),
with biases and LayerNorm weights exempt from weight decay. Size knobs (hidden, layers, heads,
seq len, vocab) let CPU tests run the same model code at a small size.
"""

from __future__ import annotations

from typing import Any

import torch

from toolkit.spec import Case, Optimizer
from toolkit.workloads.pytorch.common import TorchRuntime
from toolkit.workloads.pytorch.optim import make_optimizer

WEIGHT_DECAY = 0.01
LR = {Optimizer.ADAMW: 1e-4, Optimizer.LAMB: 2e-3}
MASK_TOKEN_ID = 103
"""[MASK] in BERT's uncased WordPiece vocabulary."""


class MaskedLMPretraining(torch.nn.Module):
    """BERT with its pretraining heads, the masked-LM head applied to the masked positions only.

    `forward(input_ids, token_type_ids, masked_positions, masked_labels, next_sentence_label)`
    returns the summed MLM + NSP loss; `masked_positions` is (batch, P) token indices.
    """

    def __init__(self, pretraining: Any) -> None:
        super().__init__()
        self.bert = pretraining.bert
        self.cls = pretraining.cls

    def mlm_logits(self, sequence_output: torch.Tensor,
                   masked_positions: torch.Tensor) -> torch.Tensor:
        """(batch, P, vocab) logits of the masked positions only."""
        hidden = sequence_output.size(-1)
        index = masked_positions.unsqueeze(-1).expand(-1, -1, hidden)
        out: torch.Tensor = self.cls.predictions(torch.gather(sequence_output, 1, index))
        return out

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                next_sentence_label: torch.Tensor) -> torch.Tensor:
        out = self.bert(input_ids=input_ids, token_type_ids=token_type_ids)
        logits = self.mlm_logits(out.last_hidden_state, masked_positions)
        mlm = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                masked_labels.flatten())
        nsp = torch.nn.functional.cross_entropy(
            self.cls.seq_relationship(out.pooler_output).float(), next_sentence_label)
        return mlm + nsp


UNPADDED_SDPA = "sdpa_unpadded"


def unpadded_sdpa() -> str:
    """The attention implementation for batches without padding (ours: synthetic, full length).

    transformers' own "sdpa" may build a (batch, 1, seq, seq) mask of all True under
    torch.compile even when no attention mask is passed; with a mask, SDPA cannot use the flash
    kernel, and with attention dropout it then falls back to the math path (measured on H200:
    softmax, dropout and two batched GEMMs per layer). Registered under another name, the same
    SDPA function gets no mask (transformers builds none for attention it has no mask function
    for), so the flash kernel runs, dropout included. Older transformers without
    `AttentionInterface`: plain "sdpa".
    """
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError:  # pragma: no cover - transformers < 4.48
        return "sdpa"
    AttentionInterface.register(UNPADDED_SDPA, sdpa_attention_forward)
    return UNPADDED_SDPA


def bert_pretraining(case: Case) -> MaskedLMPretraining:
    """The model at the case's size, SDPA attention without a mask (`unpadded_sdpa`), dropout
    0.1 as in pretraining."""
    from transformers import BertConfig, BertForPreTraining

    mc = case.model_config
    assert mc.hidden_size and mc.num_layers and mc.num_heads and mc.intermediate_size
    assert mc.seq_len and mc.vocab_size
    kwargs = {"vocab_size": mc.vocab_size, "hidden_size": mc.hidden_size,
              "num_hidden_layers": mc.num_layers, "num_attention_heads": mc.num_heads,
              "intermediate_size": mc.intermediate_size,
              "max_position_embeddings": max(512, mc.seq_len), "type_vocab_size": 2}
    try:
        config = BertConfig(**kwargs, attn_implementation="sdpa")
    except TypeError:  # pragma: no cover - transformers that take it only as an attribute
        config = BertConfig(**kwargs)
    config._attn_implementation = unpadded_sdpa()
    torch.manual_seed(case.seed)
    return MaskedLMPretraining(BertForPreTraining(config))


def synthetic_batch(case: Case, rank: int) -> dict[str, torch.Tensor]:
    """One fixed batch of random sequences on the CPU: P masked positions per sequence (sorted,
    distinct), holding [MASK], labelled with the tokens they replaced; half the tokens are
    segment B; random next-sentence labels."""
    mc = case.model_config
    assert mc.seq_len and mc.vocab_size and mc.masked_positions
    gen = torch.Generator(device="cpu").manual_seed(case.seed * 1000 + rank)
    mbs, seq, masked = case.micro_batch_size, mc.seq_len, mc.masked_positions
    input_ids = torch.randint(0, mc.vocab_size, (mbs, seq), generator=gen)
    token_type_ids = torch.zeros(mbs, seq, dtype=torch.long)
    token_type_ids[:, seq // 2:] = 1
    positions = torch.stack([torch.randperm(seq, generator=gen)[:masked].sort().values
                             for _ in range(mbs)])
    labels = torch.gather(input_ids, 1, positions)
    input_ids.scatter_(1, positions, MASK_TOKEN_ID % mc.vocab_size)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids,
            "masked_positions": positions, "masked_labels": labels,
            "next_sentence_label": torch.randint(0, 2, (mbs,), generator=gen)}


def build(case: Case, rt: TorchRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    model = bert_pretraining(case).to(rt.device)
    params = sum(p.numel() for p in model.parameters())
    kind = case.optimizer or Optimizer.ADAMW
    optimizer, opt_name = make_optimizer(kind, model, rt.device, lr=LR[kind],
                                         weight_decay=WEIGHT_DECAY)
    batch = {k: v.to(rt.device) for k, v in synthetic_batch(case, rank).items()}

    def loss_fn(m: Any, b: Any) -> Any:
        return m(**b)

    info = {"parameters": params, "attention": model.bert.config._attn_implementation,
            "mlm_head_positions": case.model_config.masked_positions, "optimizer": opt_name}
    return model, optimizer, loss_fn, batch, info
