"""Where a multi-GPU case's efficiency went: the pipeline bubble arithmetic, the all-reduce
time the bytes predict, the split of a real two-GPU profile (tests/data/profiles, SOURCE.md)
against its one-GPU baseline, and which rank of a run the others waited for (the second rank
of those tests is derived from the recorded one, as `_waiting` says)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.analysis.kernels import (
    COMMUNICATION,
    EXPOSED_COMMUNICATION,
    GEMM_CONV,
    IDLE,
    breakdown,
    column,
    trace_kernels,
)
from toolkit.analysis.scaling import breakdown as efficiency_breakdown
from toolkit.analysis.scaling import (
    bubble_fraction,
    compute_ms,
    pipeline_bubble,
    predicted_communication_ms,
    ring_allreduce_s,
    slowest_rank,
    stage_boundaries,
    stage_ids,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "profiles"


@pytest.mark.parametrize("pp,m,v,share", [
    (1, 8, 1, 0.0),
    (2, 16, 1, 1 / 17),  # 1F1B, 16 micro-batches over two stages
    (2, 8, 1, 1 / 9),
    (4, 8, 1, 3 / 11),
    (2, 8, 2, 1 / 17),  # interleaved: two virtual stages per rank halve the fill and drain
])
def test_pipeline_bubble(pp, m, v, share):
    assert pipeline_bubble(pp, m, v) == pytest.approx(share)


def test_pipeline_bubble_refuses_nonsense():
    with pytest.raises(ValueError, match=">= 1"):
        pipeline_bubble(2, 0)
    with pytest.raises(ValueError, match=">= 1"):
        bubble_fraction(2, 8, 0)


@pytest.mark.parametrize("pp,m,v,fraction", [
    (1, 8, 1, 0.0),
    (2, 16, 1, 1 / 16),  # 1F1B: (pp - 1) / m of the ideal step
    (4, 8, 1, 3 / 8),
    (4, 8, 2, 3 / 16),  # interleaved (Narayanan et al. 2021): (pp - 1) / (v x m)
    (4, 8, 4, 3 / 32),
    (8, 16, 3, 7 / 48),
])
def test_bubble_fraction_of_the_ideal_step_divides_by_the_stages_per_rank(pp, m, v, fraction):
    assert bubble_fraction(pp, m, v) == pytest.approx(fraction)
    # the share of the whole (ideal + bubble) step is the same bubble
    f = bubble_fraction(pp, m, v)
    assert pipeline_bubble(pp, m, v) == pytest.approx(f / (1 + f))


def test_ring_allreduce_time_from_bytes_and_bus_bandwidth():
    # 2 GiB of fp32 gradients over two ranks at 329 GB/s busbw: size x 2(n-1)/n / busbw
    assert ring_allreduce_s(2 * 2**30, 2, 329.0) == pytest.approx(2 * 2**30 / 329e9)
    assert ring_allreduce_s(1e9, 8, 100.0) == pytest.approx(1e9 * 2 * 7 / 8 / 100e9)
    assert ring_allreduce_s(1e9, 1, 100.0) == 0.0


def _real() -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, float, float]]]:
    summaries = json.loads((DATA / "gpt_dp2_h100_summaries.json").read_text())
    with gzip.open(DATA / "gpt_dp2_h100_rank1_kernels.json.gz") as fh:
        kernels = trace_kernels(json.load(fh))
    return summaries["one_gpu_rank0"], summaries["two_gpus_rank1"], kernels


def _row(record: dict[str, Any], kernel_ms: dict[str, float]) -> dict[str, Any]:
    return {"profile_step_ms": record["profile"]["step_ms"], "parameters": record["parameters"],
            **{column(k): v for k, v in kernel_ms.items()}}


def test_the_real_ddp_profile_hides_almost_all_of_its_all_reduce():
    _, two, kernels = _real()
    steps = two["profile"]["steps"]
    by_kind = breakdown(kernels, steps, two["profile"]["step_ms"])
    # the trace gives back what the rank's own summary recorded
    for kind in (COMMUNICATION, IDLE):
        assert by_kind[kind] == pytest.approx(two["profile"]["kernel_ms"][kind], rel=1e-6)
    # 47 ms of NCCL kernels per step, of which about 2 ms had nothing beside them
    assert by_kind[COMMUNICATION] == pytest.approx(47.04, abs=0.01)
    assert by_kind[EXPOSED_COMMUNICATION] == pytest.approx(2.14, abs=0.01)


def test_the_real_two_gpu_step_split_against_its_one_gpu_baseline():
    one, two, kernels = _real()
    mine = _row(two, breakdown(kernels, two["profile"]["steps"], two["profile"]["step_ms"]))
    base = _row(one, one["profile"]["kernel_ms"])
    b = efficiency_breakdown(mine, base, gpus=2, samples_per_step=16 * 2,
                             baseline_samples_per_step=16, dp=2, bus_bw_gbps=329.0)
    assert b is not None
    # data parallel at the same per-device batch: the ideal step is the one-GPU step
    assert b.ideal_ms == pytest.approx(241.674, abs=1e-3)
    assert b.step_ms == pytest.approx(255.016, abs=1e-3)
    assert b.efficiency == pytest.approx(241.674 / 255.016, abs=1e-5)
    parts = (b.slower_compute_ms, b.exposed_communication_ms, b.bubble_ms, b.idle_host_ms)
    assert sum(parts) == pytest.approx(b.lost_ms)
    # most of the 13.3 ms lost is slower compute (the all-reduce's kernels beside the GEMMs);
    # 2.1 ms is exposed communication; no pipeline; the idle time is the baseline's
    assert b.slower_compute_ms == pytest.approx(11.4, abs=0.1)
    assert b.exposed_communication_ms == pytest.approx(2.14, abs=0.01)
    assert b.bubble_ms == 0.0 and b.bubble_share is None
    assert abs(b.idle_host_ms) < 0.5
    # 533.7 M parameters: 2.13 GB of fp32 gradients all-reduced over two ranks at 329 GB/s
    assert b.predicted_communication_ms == pytest.approx(4 * 533_720_064 / 329e9 * 1e3)


def test_a_pipeline_bubble_is_taken_from_the_idle_time():
    base = {"profile_step_ms": 100.0, column(IDLE): 2.0}
    pp = {"profile_step_ms": 60.0, column(IDLE): 8.0, column(COMMUNICATION): 1.0,
          column(EXPOSED_COMMUNICATION): 1.0}
    b = efficiency_breakdown(pp, base, gpus=2, samples_per_step=16,
                             baseline_samples_per_step=16, pp=2, micro_batches=8)
    assert b is not None and b.ideal_ms == 50.0
    assert b.bubble_share == pytest.approx(1 / 9)
    assert b.bubble_ms == pytest.approx(51.0 / 8)  # (pp - 1) / m of the 51 ms of compute
    assert b.idle_host_ms == pytest.approx(8.0 - 51.0 / 8 - 1.0)
    assert b.slower_compute_ms == pytest.approx(51.0 - 49.0)
    assert sum((b.slower_compute_ms, b.exposed_communication_ms, b.bubble_ms,
                b.idle_host_ms)) == pytest.approx(b.lost_ms)


def test_an_interleaved_pipeline_bubble_divides_by_its_stages_per_rank():
    base = {"profile_step_ms": 100.0, column(IDLE): 2.0}
    pp = {"profile_step_ms": 60.0, column(IDLE): 8.0, column(COMMUNICATION): 1.0,
          column(EXPOSED_COMMUNICATION): 1.0}
    b = efficiency_breakdown(pp, base, gpus=2, samples_per_step=16,
                             baseline_samples_per_step=16, pp=2, micro_batches=8,
                             virtual_stages=2)
    assert b is not None
    assert b.bubble_share == pytest.approx(1 / 17)
    assert b.bubble_ms == pytest.approx(51.0 / 16)  # (pp - 1) / (v x m) of the compute
    assert b.idle_host_ms == pytest.approx(8.0 - 51.0 / 16 - 1.0)
    assert sum((b.slower_compute_ms, b.exposed_communication_ms, b.bubble_ms,
                b.idle_host_ms)) == pytest.approx(b.lost_ms)


def test_no_split_without_both_profiles_or_without_the_exposed_figure():
    base = {"profile_step_ms": 100.0, column(IDLE): 2.0}
    assert efficiency_breakdown({}, base, gpus=2, samples_per_step=2,
                                baseline_samples_per_step=1) is None
    older = {"profile_step_ms": 110.0, column(IDLE): 2.0, column(COMMUNICATION): 5.0}
    assert efficiency_breakdown(older, base, gpus=2, samples_per_step=2,
                                baseline_samples_per_step=1) is None


# The 2 x H100 GPT of docs/BENCHMARKS.md (h 1536, 16 layers, seq 2048, vocab 50304, amp_bf16)
GPT_ROW = {"model": "gpt", "precision": "amp_bf16", "seq_len": 2048, "hidden_size": 1536,
           "num_layers": 16}


def test_tensor_parallel_communication_from_the_activation_all_reduces():
    # tp 2, one micro-batch of 16: 66 all-reduces (4 a layer, the embedding, the head) of
    # 16 x 2048 x 1536 bf16 elements; at 326 GB/s about 20 ms (24.6 ms of NCCL was measured)
    row = {**GPT_ROW, "micro_batch_size": 16}
    got = predicted_communication_ms(row, 326.0, dp=1, tp=2, pp=1, micro_batches=1)
    size = 16 * 2048 * 1536 * 2
    assert got == pytest.approx(66 * size / 326e9 * 1e3)
    assert 19 < got < 22
    fp32 = predicted_communication_ms({**row, "precision": "fp32"}, 326.0, dp=1, tp=2, pp=1,
                                      micro_batches=1)
    assert fp32 == pytest.approx(2 * got)


PP_ROW = {**GPT_ROW, "micro_batch_size": 8}
# one fp32 activation of a micro-batch of 8 forward and its gradient backward, at 326 GB/s
ONE_SIDE_MS = 16 * 2 * 8 * 2048 * 1536 * 4 / 326e9 * 1e3


def _pp_ms(pp: int, pp_rank: int | None, v: int = 1, tp: int = 1) -> float | None:
    return predicted_communication_ms(PP_ROW, 326.0, dp=1, tp=tp, pp=pp, micro_batches=16,
                                      virtual_stages=v, pp_rank=pp_rank)


def test_pipeline_communication_from_the_activations_between_stages():
    # pp 2, 16 micro-batches of 8: each stage has one neighbour, about 10 ms at 326 GB/s
    # (where the profile's 67.2 ms of NCCL is mostly waiting)
    assert _pp_ms(2, 0) == pytest.approx(ONE_SIDE_MS) and 9 < ONE_SIDE_MS < 10
    assert _pp_ms(2, 1) == pytest.approx(ONE_SIDE_MS)


@pytest.mark.parametrize("pp_rank,sides", [(0, 1), (1, 2), (2, 2), (3, 1)])
def test_a_middle_stage_moves_twice_a_first_stages_bytes(pp_rank, sides):
    # pp 4: the first and the last stage send and receive on one side, the middle on both
    assert stage_boundaries(pp_rank, 4) == sides
    assert _pp_ms(4, pp_rank) == pytest.approx(sides * ONE_SIDE_MS)


@pytest.mark.parametrize("pp,v,pp_rank,stages,sides", [
    (2, 2, 0, [0, 2], 3),  # stage 0 (first: one side) and stage 2 (middle: two)
    (2, 2, 1, [1, 3], 3),  # stage 1 (middle) and stage 3 (last)
    (4, 2, 0, [0, 4], 3),
    (4, 2, 2, [2, 6], 4),  # two middle stages
    (4, 2, 3, [3, 7], 3),
    (2, 1, 0, [0], 1),
])
def test_an_interleaved_rank_counts_each_of_its_stages(pp, v, pp_rank, stages, sides):
    assert stage_ids(pp_rank, pp, v) == stages
    assert stage_boundaries(pp_rank, pp, v) == sides
    assert _pp_ms(pp, pp_rank, v) == pytest.approx(sides * ONE_SIDE_MS)


def test_tensor_parallel_communication_within_a_stage_is_that_stages_own():
    # tp 2 within pp 2: four all-reduces a layer of the stage's 8 layers, the embedding's on
    # the first stage and the output layer's on the last
    tp_ms = 16 * 8 * 2048 * 1536 * 2 / 326e9 * 1e3  # one bf16 all-reduce over two ranks
    for pp_rank in (0, 1):
        assert _pp_ms(2, pp_rank, tp=2) == pytest.approx(ONE_SIDE_MS + (4 * 8 + 1) * tp_ms)
    # pp 4: a middle stage has neither
    assert _pp_ms(4, 1, tp=2) == pytest.approx(2 * ONE_SIDE_MS + 4 * 4 * tp_ms)
    # an interleaved rank of pp 2 holding the first and a middle stage
    assert _pp_ms(2, 0, v=2, tp=2) == pytest.approx(3 * ONE_SIDE_MS + (4 * 8 + 1) * tp_ms)


def test_no_pipeline_prediction_without_the_ranks_stage():
    assert _pp_ms(2, None) is None
    with pytest.raises(ValueError, match="pipeline rank 2 of 2"):
        stage_boundaries(2, 2)


def test_the_split_predicts_the_communication_of_the_profiled_ranks_stage():
    base = {"profile_step_ms": 100.0, column(IDLE): 2.0}
    stage = {**PP_ROW, "profile_step_ms": 60.0, column(IDLE): 8.0, column(COMMUNICATION): 1.0,
             column(EXPOSED_COMMUNICATION): 1.0}
    got = {}
    for pp_rank in (0, 1, 3, None, 7):
        b = efficiency_breakdown({**stage, "pp_rank": pp_rank}, base, gpus=4,
                                 samples_per_step=128, baseline_samples_per_step=128, pp=4,
                                 micro_batches=16, bus_bw_gbps=326.0)
        assert b is not None
        got[pp_rank] = b.predicted_communication_ms
    assert got[0] == pytest.approx(ONE_SIDE_MS) and got[3] == pytest.approx(ONE_SIDE_MS)
    assert got[1] == pytest.approx(2 * ONE_SIDE_MS)
    # a row that does not say (or cannot be) which stage: nothing predicted
    assert got[None] is None and got[7] is None


def test_no_prediction_without_the_shape_or_for_other_models():
    row = {**GPT_ROW, "micro_batch_size": None}
    assert predicted_communication_ms(row, 326.0, dp=1, tp=2, pp=1, micro_batches=1) is None
    bert = {**GPT_ROW, "model": "bert_base", "micro_batch_size": 16}
    assert predicted_communication_ms(bert, 326.0, dp=1, tp=2, pp=1, micro_batches=1) is None
    # data parallelism still predicts from the parameters alone
    ddp = {"model": "resnet50", "parameters": 25_557_032}
    assert predicted_communication_ms(ddp, 326.0, dp=2, tp=1, pp=1, micro_batches=1) == \
        pytest.approx(ring_allreduce_s(4 * 25_557_032, 2, 326.0) * 1e3)


def _real_rank1() -> dict[str, Any]:
    """The real rank 1 of the two-GPU DDP case, with its rank and the exposed communication
    its trace gives (the summary was written before that figure existed)."""
    _, two, kernels = _real()
    return {**_row(two, breakdown(kernels, two["profile"]["steps"], two["profile"]["step_ms"])),
            "rank": 1}


def _waiting(profile: dict[str, Any], rank: int, wait_ms: float) -> dict[str, Any]:
    """A rank derived from `profile` (not recorded): the same step, with `wait_ms` of its
    GEMM time idle instead, as a rank that finished its compute first and waited shows it."""
    return {**profile, "rank": rank,
            column(GEMM_CONV): profile[column(GEMM_CONV)] - wait_ms,
            column(IDLE): profile[column(IDLE)] + wait_ms}


def test_the_slowest_rank_is_the_one_that_computed_longest():
    real = _real_rank1()
    assert compute_ms(real) == pytest.approx(255.016 - 3.164 - 2.14, abs=0.01)
    rank0 = _waiting(real, 0, 5.0)  # derived: 5 ms less compute, 5 ms more idle
    assert compute_ms(rank0) == pytest.approx(compute_ms(real) - 5.0)
    assert slowest_rank([rank0, real]) is real
    assert slowest_rank([_waiting(real, 0, -5.0), real])["rank"] == 0
    # the same compute: the longer step, then the lower rank
    longer = {**real, "rank": 3, "profile_step_ms": real["profile_step_ms"] + 1.0,
              column(IDLE): real[column(IDLE)] + 1.0}
    assert slowest_rank([real, longer]) is longer
    assert slowest_rank([{**real, "rank": 2}, real])["rank"] == 1
    # a profile that does not say how much of its communication was exposed is not compared
    older = {k: v for k, v in _waiting(real, 0, -50.0).items()
             if k != column(EXPOSED_COMMUNICATION)}
    assert compute_ms(older) is None and slowest_rank([older, real]) is real
    assert slowest_rank([older]) is None and slowest_rank([]) is None


def test_each_ranks_split_adds_up_and_a_waiting_rank_shows_the_wait_as_idle():
    one, _, _ = _real()
    base = _row(one, one["profile"]["kernel_ms"])
    real = _real_rank1()
    rank0 = _waiting(real, 0, 5.0)  # derived from the real rank 1, see _waiting
    splits = {p["rank"]: efficiency_breakdown(p, base, gpus=2, samples_per_step=32,
                                              baseline_samples_per_step=16, dp=2)
              for p in (rank0, real)}
    for b in splits.values():
        assert b is not None
        assert sum((b.slower_compute_ms, b.exposed_communication_ms, b.bubble_ms,
                    b.idle_host_ms)) == pytest.approx(b.step_ms - b.ideal_ms)
    fast, slow = splits[0], splits[1]
    assert fast.step_ms == slow.step_ms and fast.ideal_ms == slow.ideal_ms
    assert slow.slower_compute_ms - fast.slower_compute_ms == pytest.approx(5.0)
    assert fast.idle_host_ms - slow.idle_host_ms == pytest.approx(5.0)
