"""BERT pretraining at a tiny size on the CPU: the MLM head sees only the masked positions, the
synthetic batch is masked like BERT's, and the loss falls with AdamW and with LAMB."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from toolkit.analysis.flops import flops_per_sample  # noqa: E402
from toolkit.spec import Case, resolve  # noqa: E402
from toolkit.workloads.pytorch import bert as torch_bert  # noqa: E402
from toolkit.workloads.pytorch.common import TorchRuntime, Trainer, resolve_options  # noqa: E402

TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
        "seq_len": 32, "vocab_size": 500, "masked_positions": 5}


def tiny_case(**fields):
    return resolve(Case.from_dict({"model": "bert_base", "batch_size_per_device": 4,
                                   "warmup_iterations": 2, "measured_iterations": 10,
                                   "model_config": TINY, **fields}))


def cpu_runtime(case):
    return TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                        backend=None, options=resolve_options(case, "cpu"))


def test_mlm_head_runs_on_masked_positions_only():
    case = tiny_case()
    model = torch_bert.bert_pretraining(case).eval()
    batch = torch_bert.synthetic_batch(case, rank=0)
    seen = []
    model.cls.predictions.register_forward_hook(
        lambda mod, args, out: seen.append((tuple(args[0].shape), tuple(out.shape))))
    loss = model(**batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    # (batch, P, hidden) in, (batch, P, vocab) out: 5 positions, not 32 tokens
    assert seen == [((4, 5, 32), (4, 5, 500))]

    # the gathered logits are the full-sequence head's logits at those positions
    with torch.no_grad():
        seq = model.bert(input_ids=batch["input_ids"],
                         token_type_ids=batch["token_type_ids"]).last_hidden_state
        full = model.cls.predictions(seq)
        picked = model.mlm_logits(seq, batch["masked_positions"])
    index = batch["masked_positions"].unsqueeze(-1).expand(-1, -1, 500)
    torch.testing.assert_close(picked, torch.gather(full, 1, index))


def test_compiled_attention_gets_no_mask_so_sdpa_can_pick_flash(monkeypatch):
    # With an attention mask SDPA cannot use the flash kernel (with dropout it fell back to the
    # math path on H200: transformers built an all-True mask under torch.compile). Our batches
    # have no padding, so no mask may reach SDPA, even where an all-ones one is passed.
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        masks.append(kwargs.get("attn_mask"))
        assert kwargs.get("dropout_p") == 0.1 and not kwargs.get("is_causal")
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    case = tiny_case()
    model = torch_bert.bert_pretraining(case).train()
    assert model.bert.config._attn_implementation == "sdpa_unpadded"
    batch = torch_bert.synthetic_batch(case, rank=0)
    assert torch.isfinite(torch.compile(model)(**batch))
    ones = torch.ones_like(batch["input_ids"])
    bert = torch.compile(model.bert)
    bert(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=ones)
    assert masks == [None, None]
    # transformers' own "sdpa" builds a mask there: what made the flash kernel unusable
    model.bert.config._attn_implementation = "sdpa"
    masks.clear()
    torch._dynamo.reset()
    torch.compile(model.bert)(input_ids=batch["input_ids"],
                              token_type_ids=batch["token_type_ids"], attention_mask=ones)
    assert len(masks) == 1 and masks[0] is not None


def test_synthetic_batch_is_masked_like_bert():
    case = tiny_case()
    batch = torch_bert.synthetic_batch(case, rank=0)
    pos = batch["masked_positions"]
    assert pos.shape == (4, 5)
    assert all(len(set(row.tolist())) == 5 for row in pos)
    assert torch.equal(pos, pos.sort(dim=1).values)
    assert (torch.gather(batch["input_ids"], 1, pos) == torch_bert.MASK_TOKEN_ID).all()
    assert batch["masked_labels"].shape == (4, 5) and batch["masked_labels"].max() < 500
    assert batch["token_type_ids"][:, :16].sum() == 0 and batch["token_type_ids"][:, 16:].all()
    again, other = torch_bert.synthetic_batch(case, 0), torch_bert.synthetic_batch(case, 1)
    assert torch.equal(again["input_ids"], batch["input_ids"])
    assert not torch.equal(other["input_ids"], batch["input_ids"])


def test_flops_count_the_masked_head_at_seq_128_and_512():
    case = resolve(Case.from_dict({"model": "bert_base"}))
    long = resolve(Case.from_dict({"model": "bert_base",
                                   "model_config": {"seq_len": 512, "masked_positions": 80}}))
    assert case.model_config.masked_positions == 20
    # performance.md: 69.9 / 301.5 GFLOP per sequence with the head on the masked positions
    assert flops_per_sample(case).flops == pytest.approx(69.9e9, rel=2e-3)
    assert flops_per_sample(long).flops == pytest.approx(301.5e9, rel=2e-3)
    assert "P = 20" in flops_per_sample(case).formula


@pytest.mark.parametrize("optimizer,name", [("adamw", "AdamW(foreach)"),
                                            ("lamb", "LAMB(foreach)")])
def test_loss_falls_on_the_fixed_batch(optimizer, name):
    case = tiny_case(optimizer=optimizer)
    rt = cpu_runtime(case)
    model, opt, loss_fn, batch, info = torch_bert.build(case, rt, rank=0)
    assert info["optimizer"] == name and info["attention"] == "sdpa_unpadded"
    assert info["mlm_head_positions"] == 5
    summary = Trainer(case, rt, model, opt, loss_fn, batch).run(
        case.total_iterations, lambda *a: None)
    check = summary["loss_check"]
    assert check["passed"] is True, check
    assert check["last_mean"] < check["first_mean"]
    assert summary["data"] == {"source": "synthetic", "fixed_batch": True}
