"""Which compute figures a rank measures again, after the ranks exchange their first pass (the
exchange faked at its one seam, the communicator's allgather), and how measurements combine."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from toolkit.probes.measurement import Measurement, best_of
from toolkit.probes.runner import _compute_again

CLEAR = {"window_s": 1.0, "host_busy_cpu_s": 1.0, "own_cpu_s": 1.0, "host_cpus": 2,
         "machine": "m1"}
CROWDED = {**CLEAR, "host_busy_cpu_s": 2.0}


def gemm(value: float, load: dict[str, Any]) -> Measurement:
    return Measurement("gemm", "gemm_fp32", value, "TFLOP/s",
                       detail={"attempts": [{"value": value, "host_load": load}]})


class Others:
    """Every other rank's first pass, as allgather hands them round."""

    def __init__(self, others: list[tuple[int, str, str, dict[Any, Any]]]) -> None:
        self.others = others

    def allgather(self, mine: Any) -> list[Any]:
        return [mine, *self.others]


def peers(*values: float) -> list[tuple[int, str, str, dict[Any, Any]]]:
    return [(k + 1, f"n{k + 1}", "cpu", {(0, "gemm_fp32"): [{"value": v, "host_load": CLEAR}]})
            for k, v in enumerate(values)]


def test_a_rank_below_its_peers_measures_again_the_rest_do_not() -> None:
    info = SimpleNamespace(rank=0)
    low = {0: [gemm(0.030, CLEAR)], 1: [Measurement("memory", "host_memory_copy", 8.0,
                                                   detail={"attempts": [{"value": 8.0,
                                                                         "host_load": CLEAR}]})]}
    assert _compute_again(info, Others(peers(0.064, 0.064, 0.065)), "n0", "cpu", low) == [0]
    fine = {0: [gemm(0.063, CLEAR)]}
    assert _compute_again(info, Others(peers(0.064, 0.064, 0.065)), "n0", "cpu", fine) == []
    # below its peers while crowded: measured again; at their level while crowded: not
    assert _compute_again(info, Others(peers(0.064, 0.064)), "n0", "cpu",
                          {0: [gemm(0.030, CROWDED)]}) == [0]
    assert _compute_again(info, Others(peers(0.064, 0.064)), "n0", "cpu",
                          {0: [gemm(0.063, CROWDED)]}) == []
    # peers of another device are no reference
    other = [(1, "n1", "other cpu", {(0, "gemm_fp32"): [{"value": 1.0, "host_load": CLEAR}]})]
    assert _compute_again(info, Others(other), "n0", "cpu", fine) == []


def test_the_best_of_several_measurements_keeps_every_attempt() -> None:
    m = best_of([gemm(0.030, CROWDED), gemm(0.060, CLEAR), gemm(0.050, CLEAR)])
    assert m.value == 0.060
    assert [a["value"] for a in m.detail["attempts"]] == [0.030, 0.060, 0.050]
