"""The toolkit's own run directories -> RunRow. JSON lines only, no regular expressions.

A run directory (`cases/<id>/r<k>/`) holds `rank<NNN>.jsonl` per rank, rank 0's `meta.json`, and
the executor's `status.json`. A run counts (`ok`) only when the executor said it ended well AND
every rank wrote its full measured window; anything short of that is `failed` or `incomplete`
with the reason in `error`, never a figure computed from partial data. Truncated or garbled lines
(a rank killed mid-write) are skipped and counted, not fatal. Damaged files never raise: each
one comes back in `RunRow.skipped_files` with the reason (a directory or a pipe where a file
belongs, status.json or meta.json that are not a JSON object, lines that are cut, binary or not
UTF-8), and numbers that are not finite (or too large for a float) count as missing.
"""

from __future__ import annotations

import itertools
import os
import stat
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from parsers import logtext
from parsers.rows import (
    METHOD_TIMESTAMP_WINDOW,
    STATUS_FAILED,
    STATUS_INCOMPLETE,
    STATUS_OK,
    RunRow,
)
from toolkit.analysis.flops import achieved
from toolkit.analysis.kernels import CATEGORIES, EXPOSED_COMMUNICATION, IDLE, column
from toolkit.analysis.numbers import finite
from toolkit.analysis.scaling import slowest_rank
from toolkit.analysis.sharing import (
    GPUS_SHARED,
    HOST_CROWDED,
    HOST_OTHERS_PCT,
    OVERSUBSCRIBED,
    crowded_by_others,
    other_load,
    oversubscribed,
    spans_of,
)
from toolkit.analysis.summary import BINDING, CPUS_PER_RANK, THREADS_PER_RANK
from toolkit.analysis.throughput import (
    MetricError,
    log_interval,
    logged_window,
    run_throughput,
    window_end_note,
)
from toolkit.results.layout import (
    EARLY_ERROR_FILES,
    JOB_FILE,
    META_FILE,
    RANK_FILES,
    STATUS_FILE,
    rank_of_file,
)
from toolkit.results.provenance import provenance
from toolkit.results.schema import Event
from toolkit.spec import Case, Model
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
    probes: list[dict[str, Any]] = field(default_factory=list)
    """A preflight rank's `probe` events."""
    progress: int = 0
    """The most steps its `progress` records said a command case's program had reported."""
    bad_lines: int = 0
    first_bad: str = ""
    """Where and why the first unreadable line is (`line 14: cut short or not JSON`)."""
    unreadable: str | None = None
    """Why the whole file could not be read (a directory, a pipe, an I/O error)."""

    empty: bool = False
    elapsed: tuple[float, ...] | None = None
    """`elapsed_s` of iterations 1..total, each finite, where `slim` took them out of the
    records; None where they are read from `iterations`."""
    window: tuple[float | None, float | None] | None = None
    """(mean GPU utilisation %, energy J) over the measured window (`window_telemetry`), where
    `slim` worked it out and dropped the telemetry samples; None where they are kept."""

    def problem(self) -> str | None:
        """What is wrong with this file, for the report; None when nothing is."""
        if self.unreadable:
            return self.unreadable
        if self.empty:
            return "empty file"
        if self.bad_lines:
            return (f"{self.bad_lines} line(s) not readable as events, skipped "
                    f"(first: {self.first_bad})")
        return None


def decode_line(line: bytes) -> Any:
    """One rank-file line's JSON value (`parsers.logtext.json_value`: the C scanner without
    `json.loads`' per-call wrappers, which were a third of collect's time; nesting bounded)."""
    return logtext.json_value(line)


def read_file(path: Path) -> tuple[bytes | None, str | None]:
    """(content, None), or (None, why) for anything that is not a readable regular file. A
    FIFO would block the reader forever and a directory raises: both are reported instead."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            return None, f"{kind}, not a file"
        return path.read_bytes(), None
    except OSError as err:
        return None, f"cannot read: {err.strerror or err}"


def _bad_line(number: int, line: bytes, error: Exception | None) -> str:
    if b"\x00" in line:
        why = "NUL bytes"
    elif isinstance(error, UnicodeDecodeError):
        why = "not UTF-8"
    elif isinstance(error, logtext.JSONDepthError):
        why = f"JSON {error}"
    elif error is not None:
        why = "cut short or not JSON"
    else:
        why = "not a JSON object"
    return f"line {number}: {why}"


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19
"""A run of 19 digits: orjson reads an integer beyond 64 bits as a float, json as an int."""


READ_CHUNK_BYTES = 4 << 20
"""How much of a rank file is read at a time: a rank file of any size is read in about this
much memory beyond the records kept."""

MAX_RECORD_BYTES = 16 << 20
"""A line longer than this is no record of the worker's: skipped (and counted) unread."""


def _block_records(block: bytes, first: int, log: RankLog) -> list[dict[str, Any]]:
    """The records of `block` (whole lines; `first`: the number of its first line), decoded by
    orjson (several times faster than json: a run of 4,096 ranks is millions of lines) where
    every line is a JSON object and orjson and `decode_line` cannot differ; else line by line
    (`_line_records`): a number of 19 digits or more (orjson makes a float of an integer
    beyond 64 bits), a carriage return (bytes.splitlines ends a line there too), a line only
    json reads (NaN, Infinity, a lone surrogate) or a damaged one."""
    if b"\r" not in block and _LONG_NUMBER not in block.translate(_DIGITS_AS_ZERO):
        loads = orjson.loads
        try:
            records = [loads(line) for line in block.split(b"\n") if line.strip()]
        except orjson.JSONDecodeError:
            records = None
        if records is not None and all(type(r) is dict for r in records):
            return records
    return _line_records(block, first, log)


def _line_records(block: bytes, first: int, log: RankLog) -> list[dict[str, Any]]:
    """The records of `block` line by line; the lines that are no JSON object are counted in
    `log` (`bad_lines`, `first_bad`) and skipped."""
    records = []
    for number, line in enumerate(block.splitlines(), first):
        if not line.strip():
            continue
        try:
            rec = decode_line(line)
        except (ValueError, UnicodeDecodeError) as err:
            log.bad_lines += 1
            log.first_bad = log.first_bad or _bad_line(number, line, err)
            continue
        if not isinstance(rec, dict):
            log.bad_lines += 1
            log.first_bad = log.first_bad or _bad_line(number, line, None)
            continue
        records.append(rec)
    return records


def _stream_records(fh: BinaryIO, log: RankLog) -> Iterator[list[dict[str, Any]]]:
    """The records of an open rank file, a block of whole lines at a time, read
    `READ_CHUNK_BYTES` at a time; a line longer than `MAX_RECORD_BYTES` is counted and skipped
    without being held."""
    number = 1
    pending = b""
    skipping = False  # inside a line too long to hold
    seen = False
    while chunk := fh.read(READ_CHUNK_BYTES):
        seen = seen or bool(chunk.strip())
        if skipping:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            chunk, skipping = chunk[end + 1:], False
            number += 1
        pending += chunk
        cut = pending.rfind(b"\n")  # a \r within a block ends a line there too
        if cut >= 0:
            block, pending = pending[:cut + 1], pending[cut + 1:]
            yield _block_records(block, number, log)
            number += len(block.splitlines()) if b"\r" in block else block.count(b"\n")
        if len(pending) > MAX_RECORD_BYTES:
            log.bad_lines += 1
            log.first_bad = log.first_bad or f"line {number}: longer than {MAX_RECORD_BYTES} bytes"
            pending, skipping = b"", True
    if pending and not skipping:
        yield _block_records(pending, number, log)
    log.empty = not seen


_ITER, _START, _SUMMARY, _END, _ERROR, _TELEMETRY, _PROBE, _PROGRESS = (
    Event.ITER.value, Event.START.value, Event.SUMMARY.value, Event.END.value,
    Event.ERROR.value, Event.TELEMETRY.value, Event.PROBE.value, Event.PROGRESS.value)


def read_rank_file(path: Path) -> RankLog:
    """A rank file's records, read a chunk at a time (`_stream_records`): memory beyond the
    records kept does not grow with the file."""
    log = RankLog(rank=rank_of_file(path))
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            log.unreadable = f"{kind}, not a file"
            return log
        with path.open("rb") as fh:
            for block in _stream_records(fh, log):
                _dispatch(block, log)
    except OSError as err:
        log.unreadable = f"cannot read: {err.strerror or err}"
    return log


def _dispatch(records: Iterable[dict[str, Any]], log: RankLog) -> None:
    for rec in records:
        kind = rec.get("type")
        if kind == _TELEMETRY:
            log.telemetry.append(rec)
        elif kind == _ITER and isinstance(rec.get("iteration"), int):
            log.iterations[rec["iteration"]] = rec
        elif kind == _START:
            log.start = rec
        elif kind == _SUMMARY:
            log.summary = rec
        elif kind == _END:
            log.end = rec
        elif kind == _ERROR:
            log.errors.append(rec)
        elif kind == _PROBE:
            log.probes.append(rec)
        elif kind == _PROGRESS and isinstance(rec.get("steps"), int):
            log.progress = max(log.progress, rec["steps"])


def slim(log: RankLog, warmup: int, last: int) -> None:
    """Keep of `log` only what `read_run` reads of a rank other than the one whose losses and
    start-up it reports, in a case whose ranks each time themselves (not a command case): its
    window's telemetry figures (`window`) in place of the samples, and its iterations' `elapsed_s`
    (`elapsed`, where each of 1..`last` has a finite one; else `elapsed_s` of each record) with
    only the last record's `time_s` (where its span may end). A run of 4,096 ranks holds two
    million telemetry samples: kept whole, they would not fit in memory."""
    if log.window is None:
        log.window = window_telemetry(log, warmup, last)
    log.telemetry = []
    final = max(log.iterations, default=None)
    try:
        log.elapsed = tuple(_elapsed(log, i) for i in range(1, last + 1))
    except (KeyError, ValueError):  # read_run says why, from the records
        log.iterations = {i: {"elapsed_s": rec.get("elapsed_s"),
                              **({"time_s": rec.get("time_s")} if i == final else {})}
                          for i, rec in log.iterations.items()}
        return
    log.iterations = {i: {"time_s": rec.get("time_s")} if i == final else _READ
                      for i, rec in log.iterations.items()}


_READ: dict[str, Any] = {}
"""What `slim` leaves of a record all of whose figures it took out: one shared empty record,
which pickles once for a whole rank (collect's workers send their ranks to the main process)."""


def read_run_rank_file(path: Path, case: Case) -> RankLog:
    """A rank file of a run of `case` as `read_run` keeps it: whole for rank 0 and for a
    command case's ranks, else `slim`."""
    log = read_rank_file(path)
    if case.model is not Model.COMMAND and log.rank != 0:
        slim(log, case.warmup_iterations, case.total_iterations)
    return log


def read_run_rank_files(paths: list[Path], case: Case) -> list[tuple[Path, RankLog]]:
    """`read_run_rank_file` of each path: a share of a large run's rank files, read in a
    process of its own (`toolkit.results.scan`)."""
    return [(p, read_run_rank_file(p, case)) for p in paths]


def placement(meta: dict[str, Any] | None) -> dict[str, str]:
    """Where a run ran, from its meta.json: `site` (the site profile's name), `container`
    (`runtime:image`), `container_digest`, `nccl_between_nodes` (the transports NCCL
    reported between nodes, `none` where every connection stayed within a node),
    `nccl_settings` (what the toolkit set for NCCL from the link, `VARIABLE=value` words) and
    `grad_reduce_chosen` (the gradient reduction the toolkit chose from the link, with the
    transfer and backward times it compared); only the keys it records."""
    if not meta:
        return {}
    out = {}
    if isinstance(meta.get("site"), str):
        out["site"] = meta["site"]
    box = meta.get("container")
    if isinstance(box, dict) and box.get("runtime"):
        out["container"] = f"{box['runtime']}:{box.get('image')}"
        if box.get("digest"):
            out["container_digest"] = str(box["digest"])
    nccl = meta.get("nccl_transports")
    if isinstance(nccl, dict) and nccl.get("ranks_reporting") and \
            isinstance(nccl.get("between_nodes"), list):
        out["nccl_between_nodes"] = " ".join(map(str, nccl["between_nodes"])) or "none"
    settings = meta.get("nccl_settings")
    if isinstance(settings, dict) and settings:
        out["nccl_settings"] = " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    choice = meta.get("grad_reduce_choice")
    if isinstance(choice, dict) and choice.get("chosen_by") == "toolkit":
        out["grad_reduce_chosen"] = (f"{choice.get('grad_reduce')} (link "
                                     f"{1e3 * float(choice.get('transfer_s') or 0):.0f} ms, "
                                     f"backward {1e3 * float(choice.get('backward_s') or 0):.0f}"
                                     " ms)")
    return out


#: Non-ok run statuses an executor may record (lifecycle.slurm_verdict), kept in the row.
RUN_END_STATUSES = frozenset({"timeout", "node_fail", "preempted", "cancelled"})


def read_run(run_dir: Path, case_id: str, case: Case, repeat: int,
             status: dict[str, Any] | None = None,
             rank_logs: list[tuple[Path, RankLog]] | None = None) -> RunRow:
    """One run directory -> one row (status ok only when the data is complete).

    `status`: the executor's verdict when it is deciding it (status.json not yet written).
    `rank_logs`: its rank files (`run_dir`'s RANK_FILES in sorted order), already read by
    `read_run_rank_files`; None: read here.
    """
    row = RunRow(
        case_id=case_id, repeat=repeat, status=STATUS_INCOMPLETE,
        framework=case.framework.value,
        model=case.command.label() if case.model is Model.COMMAND else case.model.value,
        precision=case.precision.value,
        num_nodes=case.num_nodes, gpus_per_node=case.gpus_per_node,
        batch_size_per_device=case.batch_size_per_device,
        global_batch_size=case.global_batch_size, dp=case.dp, tp=case.parallel.tp,
        pp=case.parallel.pp, method=METHOD_TIMESTAMP_WINDOW,
        warmup_iterations=case.warmup_iterations, measured_iterations=case.measured_iterations,
        variant=case.variant(), source=str(run_dir))
    row.extra["micro_batch_size"] = case.micro_batch_size
    if case.stages_per_rank > 1:  # interleaved pipeline stages (the bubble divides by them)
        row.extra["pipeline_stages_per_rank"] = case.stages_per_rank
    if case.model is Model.GPT:  # the shape of the activations tp and pp move between ranks
        mc = case.model_config
        row.extra.update(hidden_size=mc.hidden_size, seq_len=mc.seq_len,
                         num_layers=mc.num_layers)
    if case.name:
        row.extra["name"] = case.name
    problems: list[str] = []
    if status is None:
        status, why = read_json_object(run_dir / STATUS_FILE)
        if why is not None:
            row.skipped_files.append((str(run_dir / STATUS_FILE), why))
            problems.append(f"status.json: {why}")
        elif status is None:
            problems.append("no status.json: the run is still going or its launcher died")
    if status is not None and isinstance(status.get("executor"), str):
        row.extra["executor"] = status["executor"]
    shared = status.get("jobs_sharing_nodes") if status is not None else None
    if isinstance(shared, list) and shared:
        nodes = (status or {}).get("slurm_job_nodelist") or _job_nodes(run_dir)
        row.extra[OVERSUBSCRIBED] = (
            f"its node(s) {nodes or '?'} ran other Slurm job(s) too: "
            f"{', '.join(map(str, shared))}")
    meta, why = read_json_object(run_dir / META_FILE)
    if meta is not None:
        row.provenance = provenance(meta)
        gpus = meta.get(GPUS_SHARED)
        if isinstance(gpus, list) and gpus:
            own = row.extra.get(OVERSUBSCRIBED)
            row.extra[OVERSUBSCRIBED] = "; ".join(
                [*([own] if own else []), "its GPUs were shared: " + "; ".join(map(str, gpus))])
    if why is not None:  # provenance only: listed, the figures do not depend on it
        row.skipped_files.append((str(run_dir / META_FILE), why))
    row.extra.update(placement(meta))
    if rank_logs is None:
        rank_logs = read_run_rank_files(sorted(run_dir.glob(RANK_FILES)), case)
    early = [(p, read_rank_file(p)) for p in sorted(run_dir.glob(EARLY_ERROR_FILES))]
    damaged: list[str] = []  # in the reason only when the run is not ok anyway
    for path, log in rank_logs + early:
        why = log.problem()
        if why:
            row.skipped_files.append((str(path), why))
            (problems if log.unreadable else damaged).append(f"{path.name}: {why}")
    # a failed run's reason names the ranks' errors (`failed_ranks`); errors from before the
    # ranks were known (error-pid*.jsonl) are always listed
    errors = [] if status and status.get("failed_ranks") else [
        e for _, log in rank_logs for e in log.errors]
    errors += [e for _, log in early for e in log.errors]
    logs_ = [log for _, log in rank_logs if not log.unreadable]
    if status is not None and status.get("status") != STATUS_OK:
        # How it ended, where the executor knows more than "failed" (Slurm's timeout, ...).
        verdict = status.get("status")
        row.status = verdict if verdict in RUN_END_STATUSES else STATUS_FAILED
        problems.append(str(status.get("reason") or f"executor status {status.get('status')}"))
    for err in errors:
        problems.append(f"rank {err.get('rank')}: {err.get('message')}")
    ranks = {log.rank for log in logs_}
    missing = _missing_ranks(case.launched_ranks, ranks)
    if missing:
        problems.append(f"no rank file for rank(s) {missing}")
    total = case.total_iterations
    command = case.model is Model.COMMAND
    # A command case's program may print its steps on one rank only, and every few steps:
    # the ranks that logged steps are timed, each over the window it logged.
    timed = [log for log in logs_ if log.iterations] if command else logs_
    short = [log.rank for log in timed if len(log.iterations) < total and not command]
    if short:
        problems.append(f"rank(s) {format_cpu_list(short)} logged fewer than {total} iterations")
    if command and not timed and not problems:
        problems.append("no rank logged a step of the program")
    bad = sum(log.bad_lines for log in logs_)
    if bad:
        row.extra["unreadable_lines"] = bad

    rank0 = next((log for log in logs_ if log.rank == 0), None)
    first_timed = min(timed, key=lambda lg: lg.rank, default=None)
    if command and first_timed is not None:
        # how the lowest rank that logged steps was read and timed (rank 0 may print none)
        row.extra["timed_ranks"] = format_cpu_list([log.rank for log in timed])
        run = (first_timed.summary or {}).get("command")
        if isinstance(run, dict):
            row.method = str(run.get("method") or row.method)
            row.extra["measured_by"] = str(run.get("measured_by"))
            row.extra["measured_clock"] = str(run.get("clock"))
            row.extra.update(command_figure_notes(case, [log.rank for log in timed], run))
        # what each timed rank's reader skipped: garbled lines, figures no run has
        skipped = [f"rank {log.rank}: {note}" for log in timed
                   if isinstance(run := (log.summary or {}).get("command"), dict)
                   and isinstance(run.get("skipped"), list) for note in run["skipped"]]
        if skipped:
            row.extra["skipped_records"] = "; ".join(skipped)
    if command:
        programs = {log.rank: run for log in logs_
                    if isinstance(run := (log.summary or {}).get("command"), dict)}
        row.extra.update(command_run_notes(programs, row.extra.get(FIGURE_FLAG)))
        rank0 = first_timed if rank0 is None or not rank0.iterations else rank0
    if rank0 is not None and rank0.iterations:
        its = [rank0.iterations[i] for i in sorted(rank0.iterations)]
        losses = [v for r in its if (v := finite(r.get("loss"))) is not None]
        if losses:
            row.loss_first, row.loss_last = losses[0], losses[-1]
        steps = [v for r in its if (v := finite(r.get("step_time_s"))) is not None
                 and isinstance(r.get("iteration"), int)
                 and r["iteration"] > case.warmup_iterations]
        if steps:
            row.step_time_median_s = statistics.median(steps)
    summaries = [log.summary for log in logs_ if log.summary]
    peaks = [v for s in summaries if (v := finite(s.get("framework_peak_memory_mib"))) is not None]
    if peaks:
        row.extra["framework_peak_memory_mib"] = max(peaks)
    nvml = [v for s in summaries if isinstance(s.get("telemetry"), dict)
            and (v := finite(s["telemetry"].get("peak_memory_mib"))) is not None]
    if nvml:
        row.peak_memory_mib = max(nvml)
    # a command case's ranks that print no steps are windowed by the lowest timed rank's clock
    windows = [log.window if log.window is not None else
               window_telemetry(log, case.warmup_iterations, case.total_iterations,
                                clock=first_timed if command and not log.iterations else None)
               for log in logs_]
    utils = [w[0] for w in windows if w[0] is not None]
    if utils:
        row.extra["mean_utilization_pct"] = sum(utils) / len(utils)
    energies = [w[1] for w in windows if w[1] is not None]
    if energies and len(energies) == case.launched_ranks:
        row.extra["energy_per_sample_j"] = sum(energies) / (
            case.global_batch_size * case.measured_iterations)
    if rank0 is not None and rank0.summary and isinstance(rank0.summary.get("device"), str):
        row.extra["device"] = rank0.summary["device"]
    row.extra.update(cpu_use(rank0, logs_))
    params = (rank0.summary or {}).get("parameters") if rank0 is not None else None
    if isinstance(params, int) and not isinstance(params, bool) and params > 0:
        row.extra["parameters"] = params
    if rank0 is not None and rank0.summary:
        label = compile_label(rank0.summary)
        if label is not None:
            row.extra["compile"] = label
        compile_s = finite(rank0.summary.get("compile_s"))
        if compile_s is not None:
            row.extra["compile_s"] = compile_s
        cache = compile_cache_label(rank0.summary)
        if cache is not None:
            row.extra["compile_cache"] = cache
    row.spans = rank_spans(logs_)
    crowded, others_pct = crowded_by_other_processes(logs_)
    if others_pct is not None:
        row.extra[HOST_OTHERS_PCT] = others_pct
    if crowded:
        row.extra[HOST_CROWDED] = "; ".join(crowded)
    row.extra.update(profile_columns(logs_))
    row.profiles = rank_profiles(logs_)
    row.extra.update(start_up(status, rank0))
    row.extra.update(exit_time(status, rank0))

    if not problems:
        try:
            if command:
                windows_read = [logged_window(
                    {i: (_elapsed(log, i), _samples(log, i)) for i in log.iterations},
                    case.warmup_iterations, total) for log in timed]
                row.throughput_sps = min(figure for figure, _ in windows_read)
                end = min(end for _, end in windows_read)
                note = window_end_note(end, total, log_interval(sorted(timed[0].iterations)))
                if note:
                    row.extra[WINDOW_END] = note
            else:
                elapsed = [log.elapsed if log.elapsed is not None else
                           [_elapsed(log, i) for i in range(1, total + 1)] for log in logs_]
                row.throughput_sps = run_throughput(elapsed, case.global_batch_size,
                                                    case.warmup_iterations,
                                                    case.measured_iterations)
            row.status = STATUS_OK
            row.extra.update(achieved(case, row.throughput_sps, row.extra.get("device")))
        except (KeyError, TypeError, ValueError, ArithmeticError, MetricError) as err:
            problems.append(f"timing data unusable: {err}")
    if problems:
        if row.status == STATUS_OK:
            row.status = STATUS_INCOMPLETE
        row.throughput_sps = None
        row.error = "; ".join(dict.fromkeys(problems + damaged))
        log_path = run_dir / str(status["log"]) if status and status.get("log") else None
        if log_path is not None and f"log: {log_path}" not in row.error:
            row.error += f" (log: {log_path})"
    return row



#: runs.csv column: where a command case's window ended before its last iteration, and why.
WINDOW_END = "window_end"
#: runs.csv column: why a command case's figure is to be read with care ('' when it is not).
FIGURE_FLAG = "figure_flag"
#: runs.csv column: whose samples the printed rate that timed the window counts, and the rule.
RATE_SCOPE = "rate_scope"


def command_figure_notes(case: Case, timed: list[int],
                         run: dict[str, Any]) -> dict[str, str]:
    """What a command case's figure rests on, as runs.csv columns: RATE_SCOPE where printed
    rates timed the window (the scope, `default` when the case does not state it, and the
    rule that made the job's rate of it), FIGURE_FLAG where fewer ranks printed steps than
    ran or a rate over several ranks has no stated scope."""
    out: dict[str, str] = {}
    flags: list[str] = []
    ranks = case.launched_ranks
    who = f"rank {timed[0]}" if len(timed) == 1 else f"ranks {format_cpu_list(timed)}"
    if run.get("clock") == "rate":
        dp = case.dp
        if run.get("rate_scope") == "rank":
            out[RATE_SCOPE] = (f"rank: each timed rank's samples/s x {dp} data-parallel "
                               "rank(s), the slowest timed rank's")
        else:
            stated = bool(run.get("rate_scope_stated"))
            out[RATE_SCOPE] = "job" if stated else "job (default)"
            if not stated and dp > 1:
                flags.append(f"the samples/s printed on {who} taken as the whole job's "
                             "(command.rate unset: job); if the program prints its own "
                             "process's rate, set command.rate: rank")
    if timed and len(timed) < ranks:
        flags.append(f"timed on {len(timed)} of {ranks} ranks ({who} printed steps)")
    if flags:
        out[FIGURE_FLAG] = "; ".join(flags)
    return out


#: runs.csv column: how trainbench ended a command case's program, per rank ('' when it ended
#: by itself).
PROGRAM_END = "program_end"


def command_run_notes(runs: dict[int, Any], flag: str | None) -> dict[str, str]:
    """From every rank's program summary: PROGRAM_END (what trainbench did to end a program,
    per rank) and FIGURE_FLAG with the lines the reader could not parse added to `flag`."""
    out: dict[str, str] = {}
    ended = [f"rank {rank}: {e.get('why')}"
             + (f" ({', then '.join(e['signals'])} to its process group)"
                if e.get("signals") else "")
             for rank, run in sorted(runs.items())
             if isinstance(e := run.get("ended"), dict)]
    if ended:
        out[PROGRAM_END] = "; ".join(ended)
    behind = [(rank, n, run.get("output_lines")) for rank, run in sorted(runs.items())
              if isinstance(n := run.get("lines_not_parsed"), int) and n > 0]
    flags = [flag] if flag else []
    flags += [f"the reader fell behind the program on rank {rank}: {n} of {total} line(s) "
              "not parsed (its log has them all); step records among them may be missing"
              for rank, n, total in behind]
    if flags:
        out[FIGURE_FLAG] = "; ".join(flags)
    return out


def _job_nodes(run_dir: Path) -> str | None:
    job, _ = read_json_object(run_dir / JOB_FILE)
    nodes = (job or {}).get("slurm_job_nodelist")
    return nodes if isinstance(nodes, str) else None


def run_label(row: RunRow) -> str:
    """`<case id> r<k>`: how a run is named in the reasons of another."""
    return f"{row.case_id} r{row.repeat}"


def mark_oversubscribed(rows: list[RunRow]) -> None:
    """Set each native run's OVERSUBSCRIBED column: why its ranks did not have their CPUs to
    themselves ('' when they did), from the spans of every run in `rows`
    (`toolkit.analysis.sharing`)."""
    found = oversubscribed({run_label(r): spans_of(r.spans) for r in rows if r.spans})
    for row in rows:
        own = row.extra.get(OVERSUBSCRIBED)  # from the run's own record (read_run)
        if row.spans or own:
            row.extra[OVERSUBSCRIBED] = "; ".join([*([own] if own else []),
                                                   *found.get(run_label(row), [])])


def crowded_by_other_processes(logs: list[RankLog]) -> tuple[list[str], float | None]:
    """From the ranks' `host_load` records, per host: why other processes crowded the run
    (`toolkit.analysis.sharing.crowded_by_others`), and the largest share of a host's CPU time
    other processes took while the run trained there, in % (None where not recorded)."""
    by_host: dict[str, list[dict[str, Any]]] = {}
    for log in logs:
        host = (log.start or {}).get("host")
        load = (log.summary or {}).get("host_load")
        if isinstance(host, str) and isinstance(load, dict):
            by_host.setdefault(host, []).append(load)
    reasons, shares = [], []
    for host, records in sorted(by_host.items()):
        found = other_load(records)
        if found is not None:
            shares.append(100 * found[1])
        why = crowded_by_others(host, found)
        if why:
            reasons.append(why)
    return reasons, (max(shares) if shares else None)


def cpu_use(rank0: RankLog | None, logs: list[RankLog]) -> dict[str, Any]:
    """How the run's ranks used the CPUs, for a scaling row to compare its two sides
    (`toolkit.analysis.summary.side_differences`): THREADS_PER_RANK (rank 0's compute threads:
    its summary's `threads`, torch's or, for a command case, the OMP_NUM_THREADS its program
    was given; else the N of the `cpu (N threads)` its device names),
    CPUS_PER_RANK (the fewest CPUs any rank could run on: each summary's `cpus`, where every
    rank recorded them) and BINDING (`bound` or `unbound`: rank 0's binding applied or not).
    Each is left out where the ranks do not say."""
    out: dict[str, Any] = {}
    summary = (rank0.summary or {}) if rank0 is not None else {}
    threads = summary.get("threads")
    device = summary.get("device")
    if not (isinstance(threads, int) and not isinstance(threads, bool) and threads > 0) and \
            isinstance(device, str) and device.startswith("cpu (") and \
            device.endswith(" threads)"):
        count = device.removeprefix("cpu (").removesuffix(" threads)")
        threads = int(count) if count.isdigit() and int(count) > 0 else None
    if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0:
        out[THREADS_PER_RANK] = threads
    cpus = [c for log in logs if isinstance(c := (log.summary or {}).get("cpus"), list)]
    if logs and len(cpus) == len(logs) and all(cpus):
        out[CPUS_PER_RANK] = min(len(c) for c in cpus)
    binding = summary.get("binding")
    if isinstance(binding, dict) and isinstance(binding.get("applied"), bool):
        out[BINDING] = "bound" if binding["applied"] else "unbound"
    return out


def rank_spans(logs: list[RankLog]) -> list[dict[str, Any]]:
    """Where and when each rank ran: its `start` record's host and time, the time of its last
    record (`end`, else its summary or last iteration), and the CPUs its summary says it could
    run on (`cpus`, `host_cpus`) and the machine it ran on (`machine`, its boot id; None where
    not recorded). Ranks without a start are left out."""
    spans = []
    for log in logs:
        start = log.start or {}
        host, begin = start.get("host"), finite(start.get("time_s"))
        last = [log.end, log.summary,
                log.iterations[max(log.iterations)] if log.iterations else None]
        end = next((t for rec in last if rec and (t := finite(rec.get("time_s"))) is not None),
                   None)
        if not isinstance(host, str) or begin is None or end is None:
            continue
        summary = log.summary or {}
        cpus = summary.get("cpus")
        host_cpus = summary.get("host_cpus")
        machine = summary.get("machine")
        spans.append({"rank": log.rank, "host": host, "start_s": begin, "end_s": end,
                      "cpus": [c for c in cpus if isinstance(c, int)]
                      if isinstance(cpus, list) else None,
                      "host_cpus": host_cpus if isinstance(host_cpus, int) else None,
                      "machine": machine if isinstance(machine, str) else None})
    return spans


def compile_label(summary: dict[str, Any]) -> str | None:
    """How the run's model ran, from rank 0's summary: `eager`, `compiled`, or `compiled
    (<torch.compile mode>, tuned kernels, layer by layer)` with what applies; None where the
    workload does not say (OneFlow, foreign logs).
    Reads `run_options` (every torch workload), else the GPT's own `compile` of older runs."""
    options = summary.get("run_options")
    source = options if isinstance(options, dict) else summary
    compiled = source.get("compile")
    if not isinstance(compiled, bool):
        return None
    if not compiled:
        return "eager"
    mode = source.get("torch_compile_mode")
    how = [mode] if isinstance(mode, str) and mode else []
    if source.get("kernel_tuning") is True:
        how.append("tuned kernels")
    if summary.get("compile_scope") == LAYER_BY_LAYER:
        how.append("layer by layer")  # the GPT's parallel layouts: not one graph, as one rank
    return f"compiled ({', '.join(how)})" if how else "compiled"


LAYER_BY_LAYER = "each layer, and the loss"
"""The GPT's `compile_scope` where tensor or pipeline parallelism or FSDP keeps the model out of
one graph (`toolkit.workloads.pytorch.gpt`)."""


def compile_cache_label(summary: dict[str, Any]) -> str | None:
    """What rank 0's torch.compile found in the compile cache (`compile_cache` of its summary):
    `hit` (every compiled graph loaded from it), `miss` (every graph compiled), `partial (h of
    n graphs)`, and `, N tuning trials` where kernel tuning timed configurations in this run
    (0 when every tuned configuration came from the cache). None for an eager run, a workload
    that does not say, or a run of an older version."""
    counts = summary.get("compile_cache")
    if not isinstance(counts, dict):
        return None

    def count(key: str) -> int:
        value = finite(counts.get(key))
        return int(value) if value is not None and value > 0 else 0

    hits, total = count("graph_hits"), sum(count(k) for k in ("graph_hits", "graph_misses",
                                                                "graph_bypasses"))
    if total == 0:
        return None
    label = "hit" if hits == total else "miss" if hits == 0 else \
        f"partial ({hits} of {total} graphs)"
    trials = count("tuning_trials")
    return f"{label}, {trials} tuning trials" if trials else label


def _has_kernel_profile(log: RankLog) -> bool:
    prof = (log.summary or {}).get("profile")
    return isinstance(prof, dict) and isinstance(prof.get("kernel_ms"), dict)


PROFILE_KINDS = (*CATEGORIES, EXPOSED_COMMUNICATION, IDLE)
"""The kinds of a profile's time, each a `kernels.column` of runs.csv and profiles.csv."""

#: Where a rank sits in the GPT's device mesh: profiles.csv's column, and the key of the
#: `parallel` record of the rank's summary that holds it (`toolkit.workloads.pytorch.gpt`).
MESH_COORDINATES = (("pp_rank", "stage"), ("dp_rank", "dp_rank"), ("tp_rank", "tp_rank"))

PROFILE_TABLE_COLUMNS: tuple[str, ...] = (
    "case_id", "repeat", "rank", "host", *(name for name, _ in MESH_COORDINATES),
    "profile_steps", "profile_step_ms", *(column(kind) for kind in PROFILE_KINDS))
"""profiles.csv's columns: the run, the rank and where it sat (empty where its workload does
not say), and its profile figures under runs.csv's names for them."""


def rank_profile(log: RankLog) -> dict[str, Any] | None:
    """One rank's profile (`profile:` grid option) from its summary: `rank`, `host`, its mesh
    coordinates where recorded (MESH_COORDINATES), the profiled steps, their wall ms per step
    and each kind's ms per step; None where the rank profiled nothing."""
    prof = (log.summary or {}).get("profile")
    kernel_ms = prof.get("kernel_ms") if isinstance(prof, dict) else None
    step_ms = finite(prof.get("step_ms")) if isinstance(prof, dict) else None
    if not isinstance(prof, dict) or not isinstance(kernel_ms, dict) or step_ms is None:
        return None
    host = (log.start or {}).get("host")
    out: dict[str, Any] = {"rank": log.rank, "host": host if isinstance(host, str) else None}
    parallel = (log.summary or {}).get("parallel")
    for name, key in MESH_COORDINATES:
        value = parallel.get(key) if isinstance(parallel, dict) else None
        out[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
    steps = prof.get("steps")
    out["profile_steps"] = steps if isinstance(steps, int) and not isinstance(steps, bool) \
        else None
    out["profile_step_ms"] = step_ms
    for kind in PROFILE_KINDS:
        value = finite(kernel_ms.get(kind))
        if value is not None:
            out[column(kind)] = value
    return out


def rank_profiles(logs: list[RankLog]) -> list[dict[str, Any]]:
    """Every profiled rank's profile (`rank_profile`), lowest rank first."""
    found = (rank_profile(log) for log in sorted(logs, key=lambda lg: lg.rank))
    return [p for p in found if p is not None]


def profile_columns(logs: list[RankLog]) -> dict[str, Any]:
    """runs.csv's profile columns (`profile:` grid option): the lowest profiled rank's kernel
    time by kind (`profile_rank`, the profiled steps' wall ms per step `profile_step_ms`, each
    kind's ms per step `kernels.column`), how many ranks profiled (`profile_ranks`), and which
    of them the others waited for (`profile_slowest_rank`: `analysis.scaling.slowest_rank`,
    whose figures are the efficiency split's; every rank's are in profiles.csv)."""
    profiles = rank_profiles(logs)
    if not profiles:
        return {}
    lowest = profiles[0]
    out: dict[str, Any] = {"profile_rank": lowest["rank"],
                           "profile_step_ms": lowest["profile_step_ms"]}
    out.update((column(kind), lowest[column(kind)]) for kind in PROFILE_KINDS
               if column(kind) in lowest)
    out["profile_ranks"] = sum(1 for lg in logs if _has_kernel_profile(lg))
    slowest = slowest_rank(profiles)
    if slowest is not None:
        out["profile_slowest_rank"] = slowest["rank"]
    return out


def profile_table(rows: list[RunRow]) -> list[dict[str, Any]]:
    """profiles.csv's rows: one per profiled rank of each run, in the runs' order, with the
    run's `case_id` and `repeat` (PROFILE_TABLE_COLUMNS)."""
    return [{"case_id": row.case_id, "repeat": row.repeat, **profile}
            for row in rows for profile in row.profiles]


START_UP_PHASES = (
    ("start_up_launch_s", "the launcher starting the ranks, the interpreter and the worker"),
    ("start_up_setup_s", "binding, telemetry, importing the framework, the device and the "
                         "process group"),
    ("start_up_build_s", "the model, optimizer and data"),
    ("start_up_first_iteration_s", "compiling or loading the compiled model, then the first "
                                   "step"),
)
"""runs.csv's split of `start_to_first_iteration_s`, in order, with what each phase holds."""


def start_up(status: dict[str, Any] | None, rank0: RankLog | None) -> dict[str, float]:
    """`start_to_first_iteration_s`: seconds from the run's start (`runstate begin`, just
    before the launcher starts the ranks: status.json's `started_s`) to the end of rank 0's
    first iteration (interpreter and framework start-up, rank discovery, model build,
    compilation and the first step); none where either end is unknown or out of order.
    With it, that time cut at rank 0's `start` event, the end of its framework set-up
    (`ready_time_s` in its summary) and the start of its timed loop (`loop_start_time_s`): one
    figure per phase of `START_UP_PHASES`, each where both its ends are known and in order (a
    workload that does not stamp them gives fewer phases)."""
    if status is None or rank0 is None or not rank0.iterations:
        return {}
    summary = rank0.summary or {}
    marks = [finite(status.get("started_s")),
             finite((rank0.start or {}).get("time_s")),
             finite(summary.get("ready_time_s")),
             finite(summary.get("loop_start_time_s")),
             finite(rank0.iterations[min(rank0.iterations)].get("time_s"))]
    started, first = marks[0], marks[-1]
    if started is None or first is None or first < started:
        return {}
    out = {"start_to_first_iteration_s": first - started}
    for (name, _), begin, end in zip(START_UP_PHASES, marks[:-1], marks[1:], strict=True):
        if begin is not None and end is not None and end >= begin:
            out[name] = end - begin
    return out


def exit_time(status: dict[str, Any] | None, rank0: RankLog | None) -> dict[str, float]:
    """`exit_s`: seconds from rank 0's `end` record (everything recorded) to the run's end
    (status.json's `finished_s`: the ranks, the launcher and the job script's step after it
    have exited); none where either is unknown or out of order."""
    end = finite((rank0.end or {}).get("time_s")) if rank0 is not None else None
    finished = finite((status or {}).get("finished_s"))
    if end is None or finished is None or finished < end:
        return {}
    return {"exit_s": finished - end}


def _elapsed(log: RankLog, iteration: int) -> float:
    value = finite(log.iterations[iteration].get("elapsed_s"))
    if value is None:
        raise ValueError(f"rank {log.rank} iteration {iteration}: elapsed_s "
                         f"{log.iterations[iteration].get('elapsed_s')!r:.40} is not a number")
    return value


def _samples(log: RankLog, iteration: int) -> float:
    value = finite(log.iterations[iteration].get("samples"))
    if value is None:
        raise ValueError(f"rank {log.rank} iteration {iteration}: samples is not a number")
    return value


def _missing_ranks(world_size: int, ranks: set[int]) -> str:
    """`0-2,5` for the ranks of 0..world_size-1 without a file, without building that range
    (case.json's world size may be anything)."""
    present = sorted(r for r in ranks if 0 <= r < world_size)
    gaps, start = [], 0
    for r in [*present, world_size]:
        if r > start:
            gaps.append(str(start) if r - 1 == start else f"{start}-{r - 1}")
        start = r + 1
    return ",".join(gaps)


def window_telemetry(log: RankLog, warmup: int, last: int,
                     clock: RankLog | None = None) -> tuple[float | None, float | None]:
    """(mean GPU utilisation %, energy J) of one rank over its measured window.

    The window runs from the wall-clock time of the last warm-up iteration's record to the last
    iteration's; telemetry samples inside it are averaged (utilisation) and integrated with the
    trapezoid rule (power -> energy). Model build and warm-up stay out. (None, None) when the
    rank has no samples in the window. `clock`: the rank whose iteration records give the
    window, where `log` has none of its own.
    """
    timing = clock if clock is not None else log
    start_rec = timing.iterations.get(warmup) if warmup > 0 else timing.start
    end_rec = timing.iterations.get(last)
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
    # a rank that stands for its node (`launch: per_node`) samples each of its GPUs, named by
    # `gpu_bus_id`: each GPU's power is integrated alone and the energies summed
    gpus: dict[Any, list[tuple[float, float]]] = {}
    for s in inside:
        if isinstance(s.get("power_w"), (int, float)):
            gpus.setdefault(s.get("gpu_bus_id"), []).append(
                (float(s["time_s"]), float(s["power_w"])))
    energy = None
    if gpus and all(len(p) >= 2 and p[-1][0] > p[0][0] for p in gpus.values()):
        energy = 0.0
        for power in gpus.values():
            covered = sum((tb - ta) * (pa + pb) / 2
                          for (ta, pa), (tb, pb) in itertools.pairwise(power))
            # scale to the whole window: the samples start and end up to one interval inside
            energy += covered * (t1 - t0) / (power[-1][0] - power[0][0])
    return (sum(utils) / len(utils) if utils else None), energy


def read_json_object(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(object, None); (None, None) when the file does not exist; (None, why) when it exists
    but is no JSON object (half written, binary, a directory, a list)."""
    if not os.path.lexists(path):
        return None, None
    raw, why = read_file(path)
    if raw is None:
        return None, why
    try:
        data = logtext.json_value(raw)
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError as err:
        return None, f"not valid JSON (cut short or garbled: {err})"
    if not isinstance(data, dict):
        return None, f"not a JSON object (a {type(data).__name__})"
    return data, None
