"""Optimizers of the torch workloads: LAMB (torch has none) and the recipe's choice per model.

`Lamb` follows NVIDIA's `apex.optimizers.FusedLAMB`, the optimizer of NVIDIA's BERT pretraining
reference (You et al. 2019, "Large Batch Optimization for Deep Learning", arXiv 1904.00962):

1. gradients are clipped by their global norm over all parameters (`max_grad_norm`, 1.0);
2. Adam moments with bias correction: ``u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p``;
3. a per-tensor trust ratio ``||p|| / ||u||`` (1 where either norm is 0) scales the update,
   for tensors with weight decay only unless `adapt_no_decay` (apex's `use_nvlamb`);
4. ``p -= lr * trust_ratio * u``.

It is written with `torch._foreach_*` ops (a few kernels per step for all tensors, no per-tensor
Python loop on the device) and never reads a value back to the host, so it does not stall the
GPU. The straightforward per-tensor version it is tested against lives in
`tests/unit/test_torch_optim.py`.

`make_optimizer` builds the recipe's optimizer (fused AdamW/SGD on CUDA, foreach on CPU) from
parameter groups that exempt biases and normalisation weights from weight decay, as both NVIDIA
recipes do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from toolkit.spec import Optimizer


class Lamb(torch.optim.Optimizer):
    """LAMB with global gradient clipping, as NVIDIA's FusedLAMB computes it (foreach ops)."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, max_grad_norm: float = 1.0,
                 adapt_no_decay: bool = False) -> None:
        if lr <= 0:
            raise ValueError(f"Lamb: lr must be > 0, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Lamb: betas must be in [0, 1), got {betas}")
        if eps <= 0 or weight_decay < 0 or max_grad_norm < 0:
            raise ValueError("Lamb: eps must be > 0, weight_decay and max_grad_norm >= 0")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "adapt_no_decay": adapt_no_decay}
        super().__init__(params, defaults)
        self.max_grad_norm = max_grad_norm

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads_all = [p.grad for g in self.param_groups for p in g["params"]
                     if p.grad is not None]
        if not grads_all:
            return loss
        clip: torch.Tensor | None = None
        if self.max_grad_norm > 0:
            # clip factor max_norm / max(norm, max_norm), as FusedLAMB: <= 1, never a sync
            norms = torch._foreach_norm(grads_all)
            global_norm = torch.linalg.vector_norm(torch.stack(norms))
            clip = self.max_grad_norm / torch.clamp(global_norm, min=self.max_grad_norm)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params, clip)
        return loss

    def _update_group(self, group: dict[str, Any], params: list[torch.Tensor],
                      clip: torch.Tensor | None) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        grads = [p.grad for p in params]
        if clip is not None:
            grads = torch._foreach_mul(grads, clip)
        torch._foreach_add_(steps, 1.0)
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        # bias corrections 1 - beta^t as device tensors (the step count stays on the device)
        bc1 = torch._foreach_sub(torch._foreach_pow(beta1, steps), 1.0)  # beta1^t - 1
        bc2 = torch._foreach_sub(torch._foreach_pow(beta2, steps), 1.0)
        torch._foreach_neg_(bc1)
        torch._foreach_neg_(bc2)
        denom = torch._foreach_div(exp_avg_sqs, bc2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, eps)
        updates = torch._foreach_div(exp_avgs, bc1)
        torch._foreach_div_(updates, denom)
        if wd != 0:
            torch._foreach_add_(updates, params, alpha=wd)
        if wd != 0 or group["adapt_no_decay"]:
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(updates))
            trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                                torch.ones_like(w_norm))
            torch._foreach_mul_(updates, list(trust.unbind(0)))
        torch._foreach_add_(params, updates, alpha=-lr)


def no_decay(name: str, param: torch.Tensor) -> bool:
    """Biases and normalisation weights (the 1-D tensors) get no weight decay."""
    return param.ndim <= 1


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two parameter groups: with weight decay, and without it for biases and norm weights."""
    decay: list[torch.Tensor] = []
    exempt: list[torch.Tensor] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (exempt if no_decay(name, p) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": exempt, "weight_decay": 0.0}]


def make_optimizer(kind: Optimizer, model: torch.nn.Module, device: torch.device, *, lr: float,
                   weight_decay: float, momentum: float = 0.0) -> tuple[Any, str]:
    """The optimizer and its name as recorded in the run (`SGD(fused)`, `LAMB(foreach)`...).

    Fused kernels on CUDA (one launch per step for all tensors), foreach on CPU.
    """
    groups = decay_groups(model, weight_decay)
    impl = "fused" if device.type == "cuda" else "foreach"
    flag = {impl: True}
    if kind is Optimizer.SGD:
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, **flag), f"SGD({impl})"
    if kind is Optimizer.ADAMW:
        return torch.optim.AdamW(groups, lr=lr, **flag), f"AdamW({impl})"
    if kind is Optimizer.LAMB:
        return Lamb(groups, lr=lr), "LAMB(foreach)"
    raise ValueError(f"unknown optimizer {kind}")  # pragma: no cover - closed enum
