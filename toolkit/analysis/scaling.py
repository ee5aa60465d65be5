"""Where a multi-GPU case's efficiency went: its profiled step against the ideal one, the loss
split into slower compute, exposed communication, pipeline bubble and idle/host time, and the
communication that the bytes moved and a measured bus bandwidth predict. Pure functions over
one rank's profile figures, under the names runs.csv and profiles.csv give them
(`profile_step_ms`, `profile_<kind>_ms`: `toolkit.analysis.kernels`); the report's table and
plot are `toolkit.report.scaling`.

A case's split is of its slowest profiled rank (`slowest_rank`), with one line per rank beside
it. Every rank of a step ends the step together, so each rank's profiled step is the same wall
time; what differs is how much of it the rank computed. The rank with the most compute time is
the one the others wait for: a pipeline's heaviest stage, a data-parallel rank on a slower GPU.
Its split says why the step is as long as it is. Another rank shows the same wait as idle time
or communication (its collective spins until the slow rank joins it), which would read as host
overhead or a slow link where the cause is the slow rank's compute.

The arithmetic, per optimizer step of the N-GPU case, in the one-GPU baseline's terms
(`toolkit.analysis.summary` picks the baseline: the one-GPU case of the same model and work):

- work factor k = (samples per step of the N-GPU case / samples per step of the baseline) / N:
  the share of the baseline's step each GPU would take if nothing were lost (1 under data
  parallelism at the same per-device batch, 1/2 for tp = 2 on the baseline's batch);
- ideal step = k x the baseline's profiled step; efficiency (profiled) = ideal / step;
- compute = step - idle - exposed communication (time some non-communication kernel ran);
  slower compute = compute - k x the baseline's compute (split fusions, smaller GEMMs, the
  collectives' SMs);
- exposed communication: time only communication kernels ran (`kernels.exposed_us`);
- pipeline bubble (pp > 1): a stage waits pp - 1 micro-batch times per step, (pp - 1) / m of
  its compute for m micro-batches; with interleaved 1F1B and v stages per rank each of those
  waits is for a stage of 1/v of the rank's layers, (pp - 1) / (v x m) of its compute
  (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", section 2.2.2; `bubble_fraction`); no more than its idle time;
- idle/host: the rest of the idle time beyond k x the baseline's (launch gaps, host syncs,
  waiting for the slower rank).

The four parts add up to step - ideal. Predicted communication, at the all-reduce bus bandwidth
(busbw) a preflight measured, summed over the kinds of parallelism the case uses:

- data parallelism (dp = n > 1): DDP all-reduces every gradient once per step, 4 bytes per
  parameter: bytes x 2 (n - 1) / n / busbw;
- tensor parallelism (the GPT, tp = n > 1, Megatron's layout): each layer all-reduces its
  (micro-batch x seq x hidden) activations twice in the forward and twice in the backward, and
  the embedding and the output layer once each, per micro-batch, in the autocast dtype (2 bytes
  under amp, else 4); sequence parallelism replaces each all-reduce by a reduce-scatter and an
  all-gather, the same bytes;
- pipeline parallelism (the GPT, pp > 1): across each boundary it has with a neighbouring
  stage, a stage moves one (micro-batch x seq x hidden) fp32 activation forward and its
  gradient backward per micro-batch, each at bytes / busbw (a point-to-point transfer over one
  link). The first and the last stage have one such boundary, a middle stage two (it receives
  from the one before and sends to the one after), so a middle stage moves twice a first
  stage's bytes; a rank of an interleaved pipeline counts the boundaries of each of its v
  stages (`stage_boundaries`). The prediction is the profiled rank's own: its pipeline rank
  (profiles.csv's `pp_rank`) says which stages it holds, and without it nothing is predicted
  for a pipelined case. Under tp, the embedding's all-reduce is the first stage's and the
  output layer's the last stage's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.analysis.kernels import COMMUNICATION, EXPOSED_COMMUNICATION, IDLE, column
from toolkit.analysis.numbers import finite


def pipeline_bubble(pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """The share of a pipelined step each stage is idle: (pp - 1) / (v x m + pp - 1) for GPipe
    and 1F1B with m micro-batches (interleaved 1F1B with v virtual stages per rank divides the
    fill and drain by v). 0 without pipelining."""
    fraction = bubble_fraction(pp, micro_batches, virtual_stages)
    return fraction / (1 + fraction)


def stage_ids(pp_rank: int, pp: int, stages_per_rank: int) -> list[int]:
    """The pipeline stages rank `pp_rank` of `pp` holds: pp_rank, pp_rank + pp, ...
    (`stages_per_rank` of them; the interleaved schedule's placement, one stage per rank
    otherwise)."""
    return [pp_rank + i * pp for i in range(stages_per_rank)]


def bubble_fraction(pp: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """The bubble as a fraction of the ideal (bubble-free) step: (pp - 1) / (v x m) for m
    micro-batches and v stages per rank (v = 1: GPipe and 1F1B); 0 without pipelining. The
    share of the whole step (`pipeline_bubble`) is this over 1 + this."""
    if pp < 1 or micro_batches < 1 or virtual_stages < 1:
        raise ValueError(f"pp, micro-batches and virtual stages must be >= 1, got {pp}, "
                         f"{micro_batches}, {virtual_stages}")
    return (pp - 1) / (virtual_stages * micro_batches)


def ring_allreduce_s(size_bytes: float, ranks: int, bus_bw_gbps: float) -> float:
    """Seconds an all-reduce of `size_bytes` over `ranks` takes at the bus bandwidth (nccl-tests'
    busbw, GB/s): size x 2 (n - 1) / n / busbw."""
    if ranks < 2:
        return 0.0
    return size_bytes * 2 * (ranks - 1) / ranks / (bus_bw_gbps * 1e9)


def _positive_int(value: Any) -> int | None:
    number = finite(value)
    return int(number) if number is not None and number >= 1 and number == int(number) else None


def stage_boundaries(pp_rank: int, pp: int, stages_per_rank: int = 1) -> int:
    """How many boundaries with a neighbouring stage the stages of pipeline rank `pp_rank`
    have (`stage_ids`: its stages of pp x stages_per_rank): one for the first and the last
    stage, two for each stage between them, 0 without pipelining."""
    if not 0 <= pp_rank < pp or stages_per_rank < 1:
        raise ValueError(f"pipeline rank {pp_rank} of {pp} with {stages_per_rank} stage(s) per "
                         "rank: expected 0 <= rank < pp and at least one stage per rank")
    last = pp * stages_per_rank - 1
    return sum((s > 0) + (s < last) for s in stage_ids(pp_rank, pp, stages_per_rank))


def predicted_communication_ms(run: dict[str, Any], bus_bw_gbps: float, *, dp: int, tp: int,
                               pp: int, micro_batches: int, virtual_stages: int = 1,
                               pp_rank: int | None = None) -> float | None:
    """Milliseconds per step of communication the bytes moved predict for one rank (the rules
    are the module's; `pp_rank`: the rank's pipeline rank, needed where pp > 1); None where
    none applies or a figure it needs is missing."""
    total, known = 0.0, False
    params = finite(run.get("parameters"))
    if dp > 1 and params:
        total += ring_allreduce_s(4 * params, dp, bus_bw_gbps)
        known = True
    if str(run.get("model")) == "gpt" and (tp > 1 or pp > 1):
        shape = [_positive_int(run.get(k)) for k in ("micro_batch_size", "seq_len",
                                                      "hidden_size", "num_layers")]
        if pp > 1 and pp_rank is None:
            return None  # which stages the rank holds decides what it moves
        if None in shape:
            return total * 1e3 if known else None
        mb, seq, hidden, layers = (v or 0 for v in shape)
        m = max(1, micro_batches)
        activation = mb * seq * hidden
        mine = stage_ids(pp_rank or 0, pp, virtual_stages) if pp > 1 else [0]
        last = pp * virtual_stages - 1
        if tp > 1:
            amp = str(run.get("precision", "")).startswith("amp_")
            # four a layer of the rank's share, the embedding on the first stage, the output
            # layer on the last
            per_stage = 4 * layers // max(1, pp) + (0 in mine) + (last in mine)
            total += m * per_stage * ring_allreduce_s(activation * (2 if amp else 4), tp,
                                                      bus_bw_gbps)
        if pp > 1:
            sides = stage_boundaries(pp_rank or 0, pp, virtual_stages)
            total += m * sides * 2 * activation * 4 / (bus_bw_gbps * 1e9)
        known = True
    return total * 1e3 if known else None


@dataclass(frozen=True)
class Breakdown:
    """One N-GPU case's profiled step against its ideal (milliseconds per step)."""

    step_ms: float
    ideal_ms: float
    slower_compute_ms: float
    exposed_communication_ms: float
    bubble_ms: float
    idle_host_ms: float
    communication_ms: float
    """All communication kernel time, overlapped or not."""
    bubble_share: float | None
    """The pipeline's computed bubble (`pipeline_bubble`); None without pipelining."""
    predicted_communication_ms: float | None = None
    """What the bytes and the measured bus bandwidth predict; None where either is unknown."""

    @property
    def efficiency(self) -> float:
        return self.ideal_ms / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def lost_ms(self) -> float:
        return self.step_ms - self.ideal_ms


def _profile(run: dict[str, Any]) -> dict[str, float] | None:
    """The profile figures the split needs; None where there are none, or where communication
    ran but the profile does not say how much of it was exposed (taken by an older version)."""
    step = finite(run.get("profile_step_ms"))
    idle = finite(run.get(column(IDLE)))
    if step is None or step <= 0 or idle is None:
        return None
    comm = finite(run.get(column(COMMUNICATION))) or 0.0
    exposed = finite(run.get(column(EXPOSED_COMMUNICATION)))
    if exposed is None and comm > 0:
        return None
    return {"step": step, "idle": idle, "comm": comm, "exposed": exposed or 0.0}


def _compute(figures: dict[str, float]) -> float:
    """Step - idle - exposed communication of `_profile`'s figures, at least 0."""
    return max(0.0, figures["step"] - figures["idle"] - figures["exposed"])


def compute_ms(profile: dict[str, Any]) -> float | None:
    """Milliseconds per profiled step in which some non-communication kernel ran (step - idle -
    exposed communication) of one rank's profile figures; None where they do not say."""
    mine = _profile(profile)
    return None if mine is None else _compute(mine)


def slowest_rank(profiles: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The profile (one rank's figures with its `rank`) of the rank the others waited for: the
    most compute time per step (`compute_ms`), then the longest step, then the lowest rank;
    None where no profile says how much it computed."""
    known = [(c, p) for p in profiles if (c := compute_ms(p)) is not None]
    if not known:
        return None

    def order(item: tuple[float, dict[str, Any]]) -> tuple[float, float, float]:
        rank = finite(item[1].get("rank"))
        return (item[0], finite(item[1].get("profile_step_ms")) or 0.0,
                -(rank if rank is not None else float("inf")))

    return max(known, key=order)[1]


def _stage_of(run: dict[str, Any], pp: int) -> int | None:
    """The run row's pipeline rank (profiles.csv's `pp_rank`, merged into the row by the
    report) where it is one of the pp; None otherwise."""
    value = finite(run.get("pp_rank"))
    if value is None or value != int(value) or not 0 <= value < pp:
        return None
    return int(value)


def breakdown(run: dict[str, Any], baseline: dict[str, Any], *, gpus: int,
              samples_per_step: float, baseline_samples_per_step: float, pp: int = 1,
              micro_batches: int = 1, dp: int | None = None, tp: int = 1,
              bus_bw_gbps: float | None = None, virtual_stages: int = 1) -> Breakdown | None:
    """The breakdown of `run` (a run row of the N-GPU case with the profile figures of one of
    its ranks, and that rank's `pp_rank` under pipelining) against `baseline` (a profiled run
    row of its one-GPU baseline); None where either has no profile."""
    mine, base = _profile(run), _profile(baseline)
    if mine is None or base is None or gpus < 1 or baseline_samples_per_step <= 0:
        return None
    k = samples_per_step / baseline_samples_per_step / gpus
    ideal = k * base["step"]
    compute = _compute(mine)
    share = pipeline_bubble(pp, micro_batches, virtual_stages) if pp > 1 else None
    bubble = 0.0
    if share is not None:
        bubble = min(mine["idle"], compute * bubble_fraction(pp, micro_batches, virtual_stages))
    predicted = None
    if bus_bw_gbps:
        stage = _stage_of(run, pp)
        predicted = predicted_communication_ms(run, bus_bw_gbps, dp=dp or 1, tp=tp, pp=pp,
                                               micro_batches=micro_batches,
                                               virtual_stages=virtual_stages, pp_rank=stage)
    return Breakdown(step_ms=mine["step"], ideal_ms=ideal,
                     slower_compute_ms=compute - k * (base["step"] - base["idle"]
                                                      - base["exposed"]),
                     exposed_communication_ms=mine["exposed"], bubble_ms=bubble,
                     idle_host_ms=mine["idle"] - bubble - k * base["idle"],
                     communication_ms=mine["comm"], bubble_share=share,
                     predicted_communication_ms=predicted)
