"""BERT pretraining (masked LM + next sentence) with transformers' `BertForPreTraining`, built
from a config (no download), on synthetic token batches.

Each sequence has `masked_positions` labelled tokens (20 at seq 128, NVIDIA's reference) and the
rest ignored (-100); the loss is the model's own MLM + NSP loss. Size knobs (hidden, layers,
heads, seq len, vocab) let CPU tests run the same model code at a small size.
"""

from __future__ import annotations

from typing import Any

from toolkit.case import Case
from toolkit.workloads.torch_common import TorchRuntime


def build(case: Case, rt: TorchRuntime, rank: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    import torch
    from transformers import BertConfig, BertForPreTraining

    mc = case.model_config
    assert mc.hidden_size and mc.num_layers and mc.num_heads and mc.intermediate_size
    assert mc.seq_len and mc.vocab_size and mc.masked_positions
    config = BertConfig(
        vocab_size=mc.vocab_size, hidden_size=mc.hidden_size, num_hidden_layers=mc.num_layers,
        num_attention_heads=mc.num_heads, intermediate_size=mc.intermediate_size,
        max_position_embeddings=max(512, mc.seq_len), type_vocab_size=2,
    )
    torch.manual_seed(case.seed)
    try:
        model = BertForPreTraining(config, attn_implementation="sdpa")
    except TypeError:  # older transformers take it on the config only
        config._attn_implementation = "sdpa"
        model = BertForPreTraining(config)
    model = model.to(rt.device)
    params = sum(p.numel() for p in model.parameters())
    opt_kwargs: dict[str, Any] = {"lr": 1e-4, "weight_decay": 0.01}
    opt_kwargs["fused" if rt.device.type == "cuda" else "foreach"] = True
    optimizer = torch.optim.AdamW(model.parameters(), **opt_kwargs)

    gen = torch.Generator(device="cpu").manual_seed(case.seed * 1000 + rank)
    mbs, seq = case.micro_batch_size, mc.seq_len
    input_ids = torch.randint(0, mc.vocab_size, (mbs, seq), generator=gen)
    token_type_ids = torch.zeros(mbs, seq, dtype=torch.long)
    token_type_ids[:, seq // 2:] = 1
    attention_mask = torch.ones(mbs, seq, dtype=torch.long)
    labels = torch.full((mbs, seq), -100, dtype=torch.long)
    for row in range(mbs):
        pos = torch.randperm(seq, generator=gen)[: mc.masked_positions]
        labels[row, pos] = torch.randint(0, mc.vocab_size, (mc.masked_positions,), generator=gen)
    nsp = torch.randint(0, 2, (mbs,), generator=gen)
    batch = {k: v.to(rt.device) for k, v in {
        "input_ids": input_ids, "token_type_ids": token_type_ids,
        "attention_mask": attention_mask, "labels": labels, "next_sentence_label": nsp}.items()}

    def loss_fn(m: Any, b: Any) -> Any:
        return m(**b).loss

    info = {"parameters": params, "attention": "sdpa",
            "optimizer": "AdamW(fused)" if opt_kwargs.get("fused") else "AdamW(foreach)"}
    return model, optimizer, loss_fn, batch, info
