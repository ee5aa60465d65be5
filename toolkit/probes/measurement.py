"""One preflight figure, as every probe reports it and as a `probe` event carries it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
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


def with_host_load(measure: Callable[[], list[Measurement]]) -> list[Measurement]:
    """`measure()`'s figures, each with the host's load while it ran (`detail.host_load`: the
    record of `toolkit.rank.host_load.HostLoad`, with the machine's boot id) as its one
    attempt (`detail.attempts`)."""
    from toolkit.rank.binding import cpu_record
    from toolkit.rank.host_load import HostLoad

    load = HostLoad()
    load.start()
    found = measure()
    record = {**load.stop(), "machine": cpu_record()["machine"]}
    return [replace(m, detail={**m.detail, "host_load": record,
                               "attempts": [{"value": m.value, "host_load": record}]})
            for m in found]


def best_of(measurements: list[Measurement]) -> Measurement:
    """Several measurements of one figure as one: the best value (contention only ever
    lowers a figure), its own detail, and every attempt's value and host load in
    `detail.attempts`."""
    valued = [m for m in measurements if m.value is not None]
    best = max(valued, key=lambda m: float(m.value or 0.0)) if valued else measurements[-1]
    attempts = [a for m in measurements for a in m.detail.get("attempts", [])]
    return replace(best, detail={**best.detail, "attempts": attempts})
