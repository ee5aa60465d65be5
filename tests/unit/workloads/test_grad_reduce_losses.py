"""The gradient reduction the toolkit chooses keeps one rank's losses: two gloo ranks, each on
half of a batch, DDP with the reduction `choose_grad_reduce` picks over a link too slow for the
gradients (bf16), against one rank on the whole batch. Also: the backward it measured, and that
measuring left the model and the random state as they were."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from toolkit.spec import Case  # noqa: E402
from toolkit.workloads.pytorch.common import (  # noqa: E402
    TorchRuntime,
    Trainer,
    backward_seconds,
    choose_grad_reduce,
    ddp_comm_hook,
    resolve_options,
    wrap_ddp,
)

STEPS = 12
TOLERANCE = 2e-3
"""Relative difference allowed between a step's loss over two ranks and one rank's with the
bf16 reduction: the bfloat16 sum rounds each gradient to 8 significant bits (2**-8 = 0.4%);
over these dozen SGD steps the losses differed by at most 3.1e-4 (measured)."""
FP32_TOLERANCE = 1e-3
"""The same with the fp32 reduction: the bf16 autocast backward sums the weight gradients of
16 and of 32 samples in different orders (1.5e-4 measured)."""


def case():
    return Case.from_dict({"model": "bert_base", "precision": "amp_bf16", "num_nodes": 2,
                           "gpus_per_node": 1, "device": "cpu", "compile": False})


def setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Dropout(0.0), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    return model, opt, loss_fn, (x, y)


def runtime(c, rank=0, world=1):
    return TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=world > 1,
                        backend="gloo" if world > 1 else None,
                        options=resolve_options(c, "cpu"), world_size=world, rank=rank)


def _rank(rank, init, out, link_rate_gbs):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        c = case()
        rt = runtime(c, rank, 2)
        model, opt, loss_fn, (x, y) = setup()
        half = (x[rank * 16:(rank + 1) * 16], y[rank * 16:(rank + 1) * 16])
        choice = choose_grad_reduce(c, rt, model, loss_fn, half, link_rate_gbs)
        ddp = wrap_ddp(model, rt, None, rt.options.grad_reduce)
        trainer = Trainer(c, rt, ddp, opt, loss_fn, half)
        losses = []
        for _ in range(STEPS):
            loss = trainer.step().float()
            dist.all_reduce(loss)  # the mean over the two halves is the whole batch's loss
            losses.append(loss.item() / 2)
        if rank == 0:
            with open(out, "w", encoding="utf-8") as fh:
                json.dump({"choice": choice, "losses": losses, "hook": ddp_comm_hook(ddp),
                           "options": rt.options.to_dict()}, fh)
        dist.barrier()  # no rank leaves while the other still exchanges
    finally:
        dist.destroy_process_group()


def two_ranks(tmp_path, link_rate_gbs):
    import torch.multiprocessing as mp

    out = tmp_path / f"out{link_rate_gbs}.json"
    mp.spawn(_rank, args=(f"file://{tmp_path}/pg{link_rate_gbs}", str(out), link_rate_gbs),
             nprocs=2)
    return json.loads(out.read_text())


def one_rank():
    c = Case.from_dict({**case().to_dict(), "num_nodes": 1})
    model, opt, loss_fn, batch = setup()
    trainer = Trainer(c, runtime(c), model, opt, loss_fn, batch)
    return [trainer.step().float().item() for _ in range(STEPS)]


def test_the_chosen_bf16_reduction_keeps_one_ranks_losses(tmp_path):
    # 1e-9 GB/s: the link takes seconds for the model's 5 kB of gradients
    got = two_ranks(tmp_path, 1e-9)
    choice = got["choice"]
    assert choice["grad_reduce"] == "bf16" and choice["chosen_by"] == "toolkit"
    assert choice["gradient_bytes"] == (16 * 64 + 64 + 64 * 4 + 4) * 4
    assert choice["ranks"] == 2 and choice["nodes"] == 2 and choice["backward_s"] > 0
    assert got["options"]["grad_reduce"] == "bf16" and got["hook"] == "bf16_compress_hook"
    alone = one_rank()
    assert alone[-1] < alone[0]  # it learns, so the comparison says something
    worst = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], alone, strict=True))
    print(f"bf16 reduction: largest relative loss difference {worst:.2e}")
    assert worst <= TOLERANCE


def test_a_link_fast_enough_keeps_fp32_and_one_ranks_losses_exactly(tmp_path):
    got = two_ranks(tmp_path, 1e9)
    assert got["choice"]["grad_reduce"] == "fp32" and got["options"]["grad_reduce"] == "fp32"
    assert got["hook"] is None
    assert got["losses"] == pytest.approx(one_rank(), rel=FP32_TOLERANCE)


def test_measuring_the_backward_leaves_the_model_and_the_random_state_as_they_were():
    c = case()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.Dropout(0.5))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = torch.randn(16, 8)
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    seconds = backward_seconds(c, runtime(c), model, lambda m, b: m(b).sum(), batch)
    assert seconds > 0
    assert torch.equal(torch.rand(4), expected)  # dropout drew, the state came back
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # batch-norm statistics
    assert all(p.grad is None for p in model.parameters())
