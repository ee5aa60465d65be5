"""LAMB (foreach, `toolkit.workloads.pytorch.optim.Lamb`) against a straightforward per-tensor
version of
NVIDIA's FusedLAMB written from the paper, and the recipe's parameter groups."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from toolkit.spec import Optimizer  # noqa: E402
from toolkit.workloads.pytorch.optim import Lamb, decay_groups, make_optimizer  # noqa: E402


def reference_lamb(groups, grads_per_step, *, lr, betas, eps, max_grad_norm, adapt_no_decay):
    """Plain float64 LAMB, one tensor at a time. `groups`: list of (params, weight_decay)."""
    b1, b2 = betas
    params = [[p.detach().double().clone() for p in ps] for ps, _ in groups]
    m = [[torch.zeros_like(p) for p in ps] for ps in params]
    v = [[torch.zeros_like(p) for p in ps] for ps in params]
    for t, grads in enumerate(grads_per_step, start=1):
        grads = [[g.double() for g in gs] for gs in grads]
        total = math.sqrt(sum(float((g * g).sum()) for gs in grads for g in gs))
        clip = max_grad_norm / max(total, max_grad_norm) if max_grad_norm > 0 else 1.0
        for gi, (_, wd) in enumerate(groups):
            for i, p in enumerate(params[gi]):
                g = grads[gi][i] * clip
                m[gi][i] = b1 * m[gi][i] + (1 - b1) * g
                v[gi][i] = b2 * v[gi][i] + (1 - b2) * g * g
                m_hat = m[gi][i] / (1 - b1 ** t)
                v_hat = v[gi][i] / (1 - b2 ** t)
                u = m_hat / (v_hat.sqrt() + eps) + wd * p
                ratio = 1.0
                if wd != 0 or adapt_no_decay:
                    w_norm, u_norm = float(p.norm()), float(u.norm())
                    if w_norm > 0 and u_norm > 0:
                        ratio = w_norm / u_norm
                params[gi][i] = p - lr * ratio * u
    return params


def make_problem(seed, grad_scale=1.0, steps=4):
    gen = torch.Generator().manual_seed(seed)
    decay = [torch.randn(6, 5, generator=gen), torch.randn(3, 2, 2, generator=gen),
             torch.zeros(4, 3)]  # a zero tensor: trust ratio falls back to 1
    exempt = [torch.randn(5, generator=gen), torch.randn(3, generator=gen)]
    grads = [[[torch.randn(p.shape, generator=gen) * grad_scale for p in ps]
              for ps in (decay, exempt)] for _ in range(steps)]
    return decay, exempt, grads


@pytest.mark.parametrize("grad_scale,max_grad_norm,adapt_no_decay", [
    (0.01, 1.0, False),   # global norm below the limit: no clipping
    (10.0, 1.0, False),   # clipping on every step
    (1.0, 0.0, True),     # clipping off; trust ratio on the no-decay group too (NVLAMB)
])
def test_lamb_matches_reference(grad_scale, max_grad_norm, adapt_no_decay):
    decay, exempt, grads = make_problem(0, grad_scale)
    settings = {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-6,
                "max_grad_norm": max_grad_norm, "adapt_no_decay": adapt_no_decay}
    expected = reference_lamb([(decay, 0.01), (exempt, 0.0)], grads, **settings)

    params = [[p.clone().requires_grad_() for p in ps] for ps in (decay, exempt)]
    opt = Lamb([{"params": params[0], "weight_decay": 0.01},
                {"params": params[1], "weight_decay": 0.0}], **settings)
    for step_grads in grads:
        for ps, gs in zip(params, step_grads, strict=True):
            for p, g in zip(ps, gs, strict=True):
                p.grad = g.clone()
        opt.step()
    for ps, es in zip(params, expected, strict=True):
        for p, e in zip(ps, es, strict=True):
            torch.testing.assert_close(p.detach().double(), e, rtol=2e-5, atol=2e-6)
    # the zero tensor moved (trust ratio 1), and every step count is on the tensor's device
    assert params[0][2].detach().abs().sum() > 0
    assert all(float(opt.state[p]["step"]) == len(grads) for ps in params for p in ps)


def test_lamb_step_is_lr_times_weight_norm():
    """The trust ratio makes one step's size lr * ||p||, whatever the gradient's scale."""
    for scale in (1e-4, 1e3):
        p = torch.randn(20, 10, generator=torch.Generator().manual_seed(1)).requires_grad_()
        before = p.detach().clone()
        opt = Lamb([p], lr=0.02, weight_decay=0.01, max_grad_norm=0.0)
        p.grad = torch.randn(20, 10) * scale
        opt.step()
        moved = float((p.detach() - before).norm())
        assert moved == pytest.approx(0.02 * float(before.norm()), rel=1e-4)


def test_lamb_skips_params_without_grad_and_rejects_bad_settings():
    a, b = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    opt = Lamb([a, b], lr=0.1)
    a.grad = torch.ones(3)
    opt.step()
    assert torch.equal(b.detach(), torch.ones(3)) and not torch.equal(a.detach(), torch.ones(3))
    assert b not in opt.state
    with pytest.raises(ValueError, match="lr"):
        Lamb([a], lr=0.0)
    with pytest.raises(ValueError, match="betas"):
        Lamb([a], betas=(1.0, 0.9))


def test_decay_groups_exempt_biases_and_norm_weights():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3),
                                torch.nn.Conv2d(3, 2, 1), torch.nn.BatchNorm2d(2))
    decay, exempt = decay_groups(model, 0.5)
    assert decay["weight_decay"] == 0.5 and exempt["weight_decay"] == 0.0
    assert {tuple(p.shape) for p in decay["params"]} == {(3, 4), (2, 3, 1, 1)}
    assert len(exempt["params"]) == 6  # linear/conv biases, LayerNorm and BatchNorm affine


@pytest.mark.parametrize("kind,name,cls", [
    (Optimizer.SGD, "SGD(foreach)", torch.optim.SGD),
    (Optimizer.ADAMW, "AdamW(foreach)", torch.optim.AdamW),
    (Optimizer.LAMB, "LAMB(foreach)", Lamb),
])
def test_make_optimizer_on_cpu(kind, name, cls):
    model = torch.nn.Linear(4, 2)
    opt, label = make_optimizer(kind, model, torch.device("cpu"), lr=0.1, weight_decay=0.01,
                                momentum=0.9)
    assert label == name and isinstance(opt, cls)
    model(torch.randn(3, 4)).sum().backward()
    before = model.weight.detach().clone()
    opt.step()
    assert not torch.equal(before, model.weight.detach())
