"""The toolkit's own run directories -> RunRow. JSON lines only, no regular expressions.

A run directory (`cases/<id>/r<k>/`) holds `rank<NNN>.jsonl` per rank, rank 0's `meta.json`, and
the executor's `status.json`. A run counts (`ok`) only when the executor said it ended well AND
every rank wrote its full measured window; anything short of that is `failed` or `incomplete`
with the reason in `error`, never a figure computed from partial data. Truncated or garbled lines
(a rank killed mid-write) are skipped and counted, not fatal.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers.rows import (
    METHOD_TIMESTAMP_WINDOW,
    STATUS_FAILED,
    STATUS_INCOMPLETE,
    STATUS_OK,
    RunRow,
)
from toolkit.case import Case
from toolkit.flops import achieved
from toolkit.metrics import MetricError, run_throughput
from toolkit.results import read_json
from topology.model import format_cpu_list  # 0-2,5: integer ranges, here of ranks


@dataclass
class RankLog:
    rank: int
    iterations: dict[int, dict[str, Any]] = field(default_factory=dict)
    start: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0


_RAW_DECODE = json.JSONDecoder().raw_decode


def decode_line(line: bytes) -> Any:
    """`json.loads` of one UTF-8 line without its per-call Python wrappers (encoding
    detection, whitespace regex): the C scanner must consume the whole stripped line, so the
    same lines decode and the same ones are rejected (ValueError / UnicodeDecodeError). Collect
    decodes millions of lines; the wrappers were a third of its time."""
    text = line.decode("utf-8").strip(" \t\r\n")
    record, end = _RAW_DECODE(text)
    if end != len(text):
        raise ValueError(f"extra data after the record at column {end}")
    return record


def read_rank_file(path: Path) -> RankLog:
    rank = int(path.stem.removeprefix("rank")) if path.stem.removeprefix("rank").isdigit() else -1
    log = RankLog(rank=rank)
    try:
        raw = path.read_bytes()
    except OSError:
        log.bad_lines += 1
        return log
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            rec = decode_line(line)
        except (ValueError, UnicodeDecodeError):
            log.bad_lines += 1
            continue
        if not isinstance(rec, dict):
            log.bad_lines += 1
            continue
        kind = rec.get("type")
        if kind == "iter" and isinstance(rec.get("iteration"), int):
            log.iterations[rec["iteration"]] = rec
        elif kind == "start":
            log.start = rec
        elif kind == "summary":
            log.summary = rec
        elif kind == "end":
            log.end = rec
        elif kind == "error":
            log.errors.append(rec)
        elif kind == "telemetry":
            log.telemetry.append(rec)
    return log


#: Non-ok run statuses an executor may record (runstate.slurm_verdict), kept in the row.
RUN_END_STATUSES = frozenset({"timeout", "node_fail", "preempted", "cancelled"})


def read_run(run_dir: Path, case_id: str, case: Case, repeat: int,
             status: dict[str, Any] | None = None) -> RunRow:
    """One run directory -> one row (status ok only when the data is complete).

    `status`: the executor's verdict when it is deciding it (status.json not yet written).
    """
    row = RunRow(
        case_id=case_id, repeat=repeat, status=STATUS_INCOMPLETE,
        framework=case.framework.value, model=case.model.value, precision=case.precision.value,
        num_nodes=case.num_nodes, gpus_per_node=case.gpus_per_node,
        batch_size_per_device=case.batch_size_per_device,
        global_batch_size=case.global_batch_size, method=METHOD_TIMESTAMP_WINDOW,
        warmup_iterations=case.warmup_iterations, measured_iterations=case.measured_iterations,
        variant=case.variant(), source=str(run_dir))
    if status is None:
        status = _read_json(run_dir / "status.json")
    logs = [read_rank_file(p) for p in sorted(run_dir.glob("rank*.jsonl"))]
    # a failed run's reason names the ranks' errors (`failed_ranks`); errors from before the
    # ranks were known (error-pid*.jsonl) are always listed
    errors = [] if status and status.get("failed_ranks") else [
        e for log in logs for e in log.errors]
    errors += [e for p in sorted(run_dir.glob("error-pid*.jsonl"))
               for e in read_rank_file(p).errors]
    problems: list[str] = []
    if status is None:
        problems.append("no status.json: the run is still going or its launcher died")
    elif status.get("status") != STATUS_OK:
        # How it ended, where the executor knows more than "failed" (Slurm's timeout, ...).
        verdict = status.get("status")
        row.status = verdict if verdict in RUN_END_STATUSES else STATUS_FAILED
        problems.append(str(status.get("reason") or f"executor status {status.get('status')}"))
    for err in errors:
        problems.append(f"rank {err.get('rank')}: {err.get('message')}")
    ranks = {log.rank for log in logs}
    missing = sorted(set(range(case.world_size)) - ranks)
    if missing:
        problems.append(f"no rank file for rank(s) {format_cpu_list(missing)}")
    total = case.total_iterations
    short = [log.rank for log in logs if len(log.iterations) < total]
    if short:
        problems.append(f"rank(s) {format_cpu_list(short)} logged fewer than {total} iterations")
    bad = sum(log.bad_lines for log in logs)
    if bad:
        row.extra["unreadable_lines"] = bad

    rank0 = next((log for log in logs if log.rank == 0), None)
    if rank0 is not None and rank0.iterations:
        its = [rank0.iterations[i] for i in sorted(rank0.iterations)]
        losses = [float(r["loss"]) for r in its if isinstance(r.get("loss"), (int, float))]
        if losses:
            row.loss_first, row.loss_last = losses[0], losses[-1]
        steps = [float(r["step_time_s"]) for r in its[case.warmup_iterations:]
                 if isinstance(r.get("step_time_s"), (int, float))]
        if steps:
            row.step_time_median_s = statistics.median(steps)
    summaries = [log.summary for log in logs if log.summary]
    peaks = [s.get("framework_peak_memory_mib") for s in summaries]
    peaks_num = [float(p) for p in peaks if isinstance(p, (int, float))]
    if peaks_num:
        row.extra["framework_peak_memory_mib"] = max(peaks_num)
    nvml = [s.get("telemetry", {}).get("peak_memory_mib") for s in summaries
            if isinstance(s.get("telemetry"), dict)]
    nvml_num = [float(p) for p in nvml if isinstance(p, (int, float))]
    if nvml_num:
        row.peak_memory_mib = max(nvml_num)
    windows = [window_telemetry(log, case.warmup_iterations, case.total_iterations)
               for log in logs]
    utils = [w[0] for w in windows if w[0] is not None]
    if utils:
        row.extra["mean_utilization_pct"] = sum(utils) / len(utils)
    energies = [w[1] for w in windows if w[1] is not None]
    if energies and len(energies) == case.world_size:
        row.extra["energy_per_sample_j"] = sum(energies) / (
            case.global_batch_size * case.measured_iterations)
    if rank0 is not None and rank0.summary:
        row.extra["device"] = rank0.summary.get("device")

    if not problems:
        try:
            elapsed = [[float(log.iterations[i]["elapsed_s"]) for i in range(1, total + 1)]
                       for log in logs]
            row.throughput_sps = run_throughput(elapsed, case.global_batch_size,
                                                case.warmup_iterations, case.measured_iterations)
            row.status = STATUS_OK
            row.extra.update(achieved(case, row.throughput_sps, row.extra.get("device")))
        except (KeyError, TypeError, ValueError, MetricError) as err:
            problems.append(f"timing data unusable: {err}")
    if problems:
        if row.status == STATUS_OK:
            row.status = STATUS_INCOMPLETE
        row.error = "; ".join(dict.fromkeys(problems))
        log = run_dir / str(status["log"]) if status and status.get("log") else None
        if log is not None and f"log: {log}" not in row.error:
            row.error += f" (log: {log})"
    return row


def window_telemetry(log: RankLog, warmup: int, last: int) -> tuple[float | None, float | None]:
    """(mean GPU utilisation %, energy J) of one rank over its measured window.

    The window runs from the wall-clock time of the last warm-up iteration's record to the last
    iteration's; telemetry samples inside it are averaged (utilisation) and integrated with the
    trapezoid rule (power -> energy). Model build and warm-up stay out. (None, None) when the
    rank has no samples in the window.
    """
    start_rec = log.iterations.get(warmup) if warmup > 0 else log.start
    end_rec = log.iterations.get(last)
    if not start_rec or not end_rec:
        return None, None
    t0, t1 = start_rec.get("time_s"), end_rec.get("time_s")
    if not isinstance(t0, (int, float)) or not isinstance(t1, (int, float)) or t1 <= t0:
        return None, None
    inside = sorted((s for s in log.telemetry
                     if isinstance(s.get("time_s"), (int, float)) and t0 <= s["time_s"] <= t1),
                    key=lambda s: s["time_s"])
    utils = [float(s["utilization_pct"]) for s in inside
             if isinstance(s.get("utilization_pct"), (int, float))]
    power = [(float(s["time_s"]), float(s["power_w"])) for s in inside
             if isinstance(s.get("power_w"), (int, float))]
    energy = None
    if len(power) >= 2:
        covered = sum((tb - ta) * (pa + pb) / 2
                      for (ta, pa), (tb, pb) in itertools.pairwise(power))
        # scale to the whole window: the samples start and end up to one interval inside it
        energy = covered * (t1 - t0) / (power[-1][0] - power[0][0])
    return (sum(utils) / len(utils) if utils else None), energy


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None
