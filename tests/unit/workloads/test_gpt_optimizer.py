"""The GPT's optimizer steps DTensor parameters through their local shards: the same update as
torch's AdamW over the same parameters, written into the parameters' own storage, on CPU in a
one-rank gloo world (a one-device mesh). The multi-rank layouts are checked against one rank in
tests/integration/test_gpt_parallel.py."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from toolkit.workloads.pytorch.gpt import LEARNING_RATE, WEIGHT_DECAY, ShardAdamW  # noqa: E402


@pytest.fixture(scope="module")
def one_rank_world(tmp_path_factory):
    if dist.is_initialized():
        yield
        return
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def two_layers() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 4))


def train(model: torch.nn.Module, opt, steps: int = 3) -> None:
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(9))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()


def torch_adamw(model: torch.nn.Module):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    exempt = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": exempt, "weight_decay": 0.0}],
                             lr=LEARNING_RATE, betas=(0.9, 0.95), eps=1e-8, foreach=True)


def test_plain_parameters_get_torch_adamws_update():
    ours, theirs = two_layers(), two_layers()
    before = copy.deepcopy(ours.state_dict())
    train(ours, ShardAdamW(ours, torch.device("cpu")))
    train(theirs, torch_adamw(theirs))
    for key, value in ours.state_dict().items():
        assert not torch.equal(value, before[key])  # it trained
        torch.testing.assert_close(value, theirs.state_dict()[key], rtol=0, atol=0)


def test_dtensor_parameters_are_stepped_in_their_own_storage(one_rank_world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (1,))
    sharded, plain = two_layers(), two_layers()
    parallelize_module(sharded, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    assert sum(isinstance(p, DTensor) for p in sharded.parameters()) == 4
    opt = ShardAdamW(sharded, torch.device("cpu"))
    train(sharded, opt)
    train(plain, torch_adamw(plain))
    assert opt.label == "AdamW(foreach)"
    for (name, p), q in zip(sharded.named_parameters(), plain.parameters(), strict=True):
        got = p.full_tensor() if isinstance(p, DTensor) else p
        torch.testing.assert_close(got.detach(), q.detach(), rtol=1e-6, atol=1e-7, msg=name)


def test_a_local_tensor_moved_after_the_first_step_is_an_error(one_rank_world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (1,))
    model = two_layers()
    parallelize_module(model, mesh, {"0": ColwiseParallel()})
    opt = ShardAdamW(model, torch.device("cpu"))
    train(model, opt, steps=1)
    weight = model[0].weight
    weight._local_tensor = weight._local_tensor.clone()  # what a re-initialising wrapper does
    with pytest.raises(RuntimeError, match="local tensor changed"):
        train(model, opt, steps=1)
