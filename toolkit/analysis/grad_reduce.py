"""The gradient reduction a data-parallel torch case gets across a slow link between nodes.

A step's gradients cross the link between nodes once per step; DDP overlaps that all-reduce
with the backward pass, so the step waits on the link where the all-reduce takes longer than
the backward does. There the toolkit all-reduces in bfloat16 (DDP's `bf16_compress_hook`: half
the bytes), where that keeps the model's losses; elsewhere fp32, as one GPU applies. The rule:

    transfer_s = 2 (n - 1) / n x gradient bytes / link rate      (n: data-parallel ranks)
    bf16 where transfer_s > backward_s

`2 (n - 1) / n x bytes` is what a ring all-reduce moves through each rank's link, and the
rate is the link's bus bandwidth as nccl-tests define it, so the same figure measured there
can be put in. The link rate is the interface's speed, or for a virtual interface (a veth,
whose reported speed is nominal) what was measured on one (`toolkit.rank.nccl_settings`).
`backward_s` is measured on each rank before training (the model's backward on its own,
eager, the slowest rank's): eager is at least as slow as compiled, so the rule compresses
only where even the slower backward cannot hide the transfer.

It applies (`eligibility`) only where nothing else decides: the case leaves `grad_reduce`
unset (a user's `fp32` or `bf16` wins), it is ResNet50 or BERT under DDP (the GPT's reduction
is its own), its data-parallel ranks span more than one node, its precision is AMP (the
gradients are computed in 16 bits already, so a bfloat16 sum keeps the losses; in fp32 or
tf32 the user asked for full-precision arithmetic), its DDP runs communication hooks (not
`compiled_ddp: compiled_autograd`), and the link's rate is known (not InfiniBand, whose rate
the interface does not report).
"""

from __future__ import annotations

from typing import Any

from toolkit.spec import Case, CompiledDDP, Framework, GradReduce, Model, Precision

RULE = "bf16 where 2 (n - 1) / n x gradient bytes / link rate > backward time (n: ranks)"

COMPRESSING_PRECISIONS = (Precision.AMP_BF16, Precision.AMP_FP16)


def eligibility(case: Case, compiled_ddp: CompiledDDP | None,
                link_rate_gbs: float | None) -> str | None:
    """Why the toolkit does not choose this case's reduction (pure); None: it does."""
    if case.grad_reduce is not None:
        return f"grad_reduce: {case.grad_reduce.value} set by the case"
    if case.framework is not Framework.TORCH or case.model not in (Model.RESNET50,
                                                                    Model.BERT_BASE):
        return "chosen only for the torch resnet50 and bert_base"
    if case.dp <= 1:
        return "one data-parallel rank: nothing to reduce"
    if case.num_nodes <= 1:
        return "one node: no link between nodes"
    if case.precision not in COMPRESSING_PRECISIONS:
        return (f"precision {case.precision.value}: full-precision arithmetic asked for, "
                "gradients reduced in fp32")
    if compiled_ddp is CompiledDDP.COMPILED_AUTOGRAD:
        return "compiled_ddp: compiled_autograd runs no communication hook"
    if link_rate_gbs is None:
        return "the link's rate is not known"
    return None


def transfer_s(gradient_bytes: int, ranks: int, link_rate_gbs: float) -> float:
    """Seconds a ring all-reduce of `gradient_bytes` over `ranks` takes at the link's rate."""
    return 2 * (ranks - 1) / ranks * gradient_bytes / (link_rate_gbs * 1e9)


def choose(gradient_bytes: int, ranks: int, nodes: int, link_rate_gbs: float,
           backward_s: float) -> dict[str, Any]:
    """The reduction by the rule, with every figure it used (pure)."""
    t = transfer_s(gradient_bytes, ranks, link_rate_gbs)
    bf16 = t > backward_s
    return {"grad_reduce": (GradReduce.BF16 if bf16 else GradReduce.FP32).value,
            "chosen_by": "toolkit", "rule": RULE,
            "gradient_bytes": gradient_bytes, "ranks": ranks, "nodes": nodes,
            "link_rate_gbs": link_rate_gbs, "transfer_s": round(t, 6),
            "backward_s": round(backward_s, 6),
            "reason": (f"the link carries the step's gradients in {t * 1e3:.1f} ms, "
                       f"{'longer' if bf16 else 'no longer'} than the backward's "
                       f"{backward_s * 1e3:.1f} ms: "
                       + ("bf16 all-reduce (half the bytes)" if bf16 else "fp32"))}


def not_chosen(reason: str, case: Case) -> dict[str, Any]:
    """The record where the rule does not apply: the case's reduction (fp32 where unset)."""
    value = (case.grad_reduce or GradReduce.FP32).value
    return {"grad_reduce": value,
            "chosen_by": "case" if case.grad_reduce is not None else "default",
            "rule": RULE, "reason": reason}
