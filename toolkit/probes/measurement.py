"""One preflight figure, as every probe reports it and as a `probe` event carries it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Units, spelled once.
TFLOPS = "TFLOP/s"
GBPS = "GB/s"
"""10^9 bytes per second, as nccl-tests and datasheets count."""


@dataclass(frozen=True)
class Measurement:
    """A figure a probe measured (bigger is better), or a health reading."""

    probe: str
    """`gemm`, `memory`, `collective`, `p2p` or `health`."""
    metric: str
    """What was measured: `gemm_bf16`, `hbm_copy`, `h2d`, `all_reduce`, `ecc_uncorrected`..."""
    value: float | None
    """The figure (the best over the sweep for GEMM); None when it could not be measured."""
    unit: str = ""
    scope: str = "gpu"
    """`gpu` (this rank's device), `node` (its node's ranks), `job` (every rank) or `pair`
    (the ranks of two nodes, or two GPUs of a node for `p2p`)."""
    group: str = ""
    """Which node, pair or job a collective ran over (`n1`, `n1+n2`, `job`)."""
    detail: dict[str, Any] = field(default_factory=dict)
    """How it was measured: shape, bytes, iterations, seconds, algbw, the sweep."""
    reason: str | None = None
    """Why `value` is None, or what a health reading means."""

    def to_event(self) -> dict[str, Any]:
        return asdict(self)
