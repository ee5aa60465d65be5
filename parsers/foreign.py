"""Shared vocabulary of the foreign-log parsers: hints, records, the parse result, throughput.

Every foreign family module (`parsers.dllogger`, `parsers.oneflow_cnn`, ...) exposes
`parse(text, *, hints) -> ParsedLog`. What they share lives here:

- `LogHints`: what the caller knows about the run (usually read from the DLPerf path by
  `parsers.detect.hints_from_dlperf_path`) and the measurement window;
- `IterRecord`: one logged training iteration as the log printed it;
- `ParsedLog`: the records plus the derived throughput, the method used and every warning;
- the three throughput methods of `reference/log-formats.md` (timestamp window, mean of
  self-reported rates, latency) and `to_run_row`, which turns a `ParsedLog` into a `RunRow`.

Format detection and reading files live in `parsers.detect`; the row contract in `parsers.rows`.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from parsers.rows import (
    METHOD_LATENCY,
    METHOD_MEAN_OF_RATES,
    METHOD_TIMESTAMP_WINDOW,
    STATUS_INCOMPLETE,
    STATUS_OK,
    RunRow,
)

DEFAULT_WARMUP_ITERATIONS = 20
DEFAULT_MEASURED_ITERATIONS = 100


WINDOW_WARNINGS = ("no record after the", "log does not cover the window", "log ends at iteration",
                   "no logged interval ends by")
"""How the warnings that a log does not fit the measurement window begin (`window_warnings`)."""


def window_warnings(warnings: Iterable[str]) -> list[str]:
    """The warnings that say the log does not fit the measurement window."""
    return [w for w in warnings if w.startswith(WINDOW_WARNINGS)]


class LogParseError(Exception):
    """A log that cannot be read or understood; the message names the file and the reason."""


# What a run can be. A value outside these ranges, or of another type, comes from a damaged or
# hostile file, never from a run: it fails the file (`LogParseError` naming the field) before
# any arithmetic, so that a node count given as text is never multiplied into a string of
# gigabytes and a billion GPUs never reach a table.
MAX_NODES = 1 << 16
MAX_GPUS_PER_NODE = 1 << 10
MAX_RANKS = 1 << 24
"""World size, and each of the data-, tensor- and pipeline-parallel degrees."""
MAX_BATCH = 1 << 30
"""Samples per device or per iteration over all ranks."""
MAX_ITERATION = 1 << 53
MAX_TEXT = 256
"""Characters of a framework, model, precision or variant name."""
MAX_RATE_SPS = 1e12
"""Samples a second of one run, or of one rank's step: a thousand times what the largest
training clusters reach. A higher figure (or a finite 1e308, whose median with another is
infinite) is no measurement."""
MAX_SECONDS = 1e9
"""A step time or a span of a run (31 years)."""
MAX_TIMESTAMP_S = 1e11
"""A wall-clock time in Unix seconds (the year 5138): a time in milliseconds or beyond is
misread, not a time."""
_INT_RANGES = {
    "num_nodes": (1, MAX_NODES), "gpus_per_node": (1, MAX_GPUS_PER_NODE),
    "batch_size_per_device": (1, MAX_BATCH), "repeat": (0, MAX_ITERATION),
    "accumulation": (1, MAX_BATCH), "global_batch_size": (1, MAX_BATCH << 10),
    "world_size": (1, MAX_RANKS), "dp": (1, MAX_RANKS), "tp": (1, MAX_RANKS),
    "pp": (1, MAX_RANKS),
}
_TEXT_FIELDS = ("precision", "model", "framework", "variant")


def checked_int(name: str, value: Any, minimum: int, maximum: int) -> int:
    """`value` when it is an integer (not a bool, not a float) in minimum..maximum;
    `LogParseError` naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogParseError(f"{name}: {_shown(value)} is not an integer")
    if not minimum <= value <= maximum:
        raise LogParseError(f"{name}: {_shown(value)} is out of range ({minimum}..{maximum})")
    return value


def checked_number(name: str, value: Any, minimum: float = 0.0,
                   maximum: float = math.inf) -> float:
    """`value` as a float when it is a finite number (not a bool) in minimum..maximum;
    `LogParseError` naming `name` otherwise (NaN, infinity, text, 1e308 where the figure has
    a physical bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LogParseError(f"{name}: {_shown(value)} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise LogParseError(f"{name}: {_shown(value)} is out of range") from None
    if not (math.isfinite(number) and number >= minimum):
        raise LogParseError(f"{name}: {_shown(value)} is out of range (a finite number >= "
                            f"{minimum:g})")
    if number > maximum:
        raise LogParseError(f"{name}: {_shown(value)} is out of range (at most {maximum:g}: "
                            "no run has it)")
    return number


@dataclass
class Skipped:
    """Lines or records a reader left out, counted, with the first one's reason: a garbled
    line or a value no run has costs that line or record, never the file."""

    what: str
    """What was skipped, plural (`DLLL lines not JSON`)."""
    count: int = 0
    first: str = ""

    def add(self, why: str) -> None:
        self.count += 1
        self.first = self.first or why

    def notes(self) -> list[str]:
        """The warning that says so; none when nothing was skipped."""
        return [f"{self.count} {self.what}, skipped (first: {self.first})"] if self.count else []


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class LogHints:
    """What is known about a run from outside its log text. `None` means unknown.

    Values found in the log itself (an argument dump, a DLLogger PARAMETER line) fill the
    fields left `None`; a hint that disagrees with the log is kept and reported as a warning.
    """

    num_nodes: int | None = None
    gpus_per_node: int | None = None
    batch_size_per_device: int | None = None
    """Samples per device per micro-step (before gradient accumulation)."""
    precision: str | None = None
    model: str | None = None
    framework: str | None = None
    repeat: int | None = None
    """The repeat number the log's file name carries (DLPerf numbers from 1)."""
    accumulation: int | None = None
    """Gradient-accumulation steps per logged optimizer step (`None` counts as 1)."""
    global_batch_size: int | None = None
    """Samples per logged iteration over all ranks, when known directly (overrides the product)."""
    world_size: int | None = None
    """Ranks in the run, when the log says so but not how they split into nodes x GPUs; with
    one of `num_nodes` / `gpus_per_node` known it gives the other (`resolved_topology`)."""
    dp: int | None = None
    """Data-parallel degree, when the log or its name says."""
    tp: int | None = None
    """Tensor-parallel degree, when the log or its name says."""
    pp: int | None = None
    """Pipeline-parallel degree, when the log or its name says."""
    variant: str | None = None
    """What distinguishes the run beyond model/precision/topology/batch (parallel layout, model
    size), as `key=value,...`; runs are only compared within one variant."""
    warmup_iterations: int = DEFAULT_WARMUP_ITERATIONS
    """Iterations dropped before the measurement window starts."""
    measured_iterations: int = DEFAULT_MEASURED_ITERATIONS
    """Iterations in the timestamp window (warmup -> warmup + measured)."""

    def __post_init__(self) -> None:
        for name, (minimum, maximum) in _INT_RANGES.items():
            value = getattr(self, name)
            if value is not None:
                checked_int(name, value, minimum, maximum)
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or len(value) > MAX_TEXT):
                raise LogParseError(f"{name}: {_shown(value)} is not a name (text of at most "
                                    f"{MAX_TEXT} characters)")
        if self.warmup_iterations < 0 or self.measured_iterations <= 0:
            raise ValueError(
                f"window needs warmup_iterations >= 0 and measured_iterations > 0, got "
                f"warmup_iterations={self.warmup_iterations}, "
                f"measured_iterations={self.measured_iterations}"
            )

    def resolved_global_batch_size(self) -> int | None:
        """Global samples per logged iteration, or `None` when a factor is unknown."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        nodes, gpus = self.resolved_topology()
        if nodes is None or gpus is None or self.batch_size_per_device is None:
            return None
        return nodes * gpus * self.batch_size_per_device * (self.accumulation or 1)

    def resolved_topology(self) -> tuple[int | None, int | None]:
        """(num_nodes, gpus_per_node), completing one from `world_size` and the other.

        A world size that the known factor does not divide leaves the other unknown rather
        than rounding it: a wrong topology would corrupt every speedup.
        """
        nodes, gpus = self.num_nodes, self.gpus_per_node
        world = self.world_size
        if world and nodes is None and gpus and world % gpus == 0:
            nodes = world // gpus
        elif world and gpus is None and nodes and world % nodes == 0:
            gpus = world // nodes
        return nodes, gpus

    def filled_from_log(self, found: Mapping[str, Any]) -> tuple[LogHints, list[str]]:
        """Fill unknown fields from values the log printed; return warnings for conflicts."""
        valid = {f.name for f in fields(self)}
        changes: dict[str, Any] = {}
        warnings: list[str] = []
        for name, value in found.items():
            if name not in valid or value is None:
                continue
            current = getattr(self, name)
            if current is None:
                changes[name] = value
            elif current != value:
                warnings.append(f"hint {name}={current!r} differs from the log's {value!r}; "
                                f"using the hint")
        return replace(self, **changes), warnings


@dataclass(frozen=True)
class IterRecord:
    """One logged training iteration, as printed. Fields the format lacks are `None`."""

    iteration: int
    """Iterations completed when the line was printed (1 = after the first), across epochs."""
    timestamp_s: float | None = None
    """Wall-clock time (Unix seconds; naive log times read as UTC), only when sub-second."""
    rate_sps: float | None = None
    """The rate the framework printed, in samples per second."""
    loss: float | None = None
    rank: int | None = None
    step_time_s: float | None = None
    """Seconds per iteration the framework printed (Megatron, OneFlow-GPT, MindSpore, ...)."""
    since_iteration: int | None = None
    """First iteration of the interval a rate or step time covers, when the line says so."""
    samples: int | None = None
    """Global samples per iteration, when the line itself says (Megatron's global batch)."""


@dataclass(frozen=True)
class ParsedLog:
    """What one foreign log says: records, the derived throughput and how it was derived."""

    family: str
    records: tuple[IterRecord, ...]
    hints: LogHints
    """The hints the figures were computed with (caller's hints filled from the log)."""
    throughput_sps: float | None = None
    method: str | None = None
    """One of the METHOD_* constants of `parsers.rows`; `None` when no throughput."""
    window_start_iteration: int | None = None
    window_end_iteration: int | None = None
    warmup_iterations: int | None = None
    measured_iterations: int | None = None
    step_time_median_s: float | None = None
    peak_memory_mib: float | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    """Settings the log printed about itself (argument dumps, PARAMETER lines)."""
    extra: Mapping[str, float] = field(default_factory=dict)
    """Format-specific figures (`latency_ms`, `tflops_per_gpu`, `reported_summary_sps`...)."""
    warnings: tuple[str, ...] = ()
    source: str = ""

    @property
    def loss_first(self) -> float | None:
        return next((r.loss for r in self.records if r.loss is not None), None)

    @property
    def loss_last(self) -> float | None:
        return next((r.loss for r in reversed(self.records) if r.loss is not None), None)


@dataclass(frozen=True)
class Throughput:
    """A throughput figure and the window it was measured over."""

    throughput_sps: float
    method: str
    window_start_iteration: int
    window_end_iteration: int
    measured_iterations: int
    step_time_median_s: float | None
    warnings: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# Small readers shared by the family modules.


def parse_datetime_s(text: str) -> float:
    """Seconds since the epoch of a naive `YYYY-MM-DD HH:MM:SS[.,]ffffff` log time, read as UTC."""
    stamp = text.strip().replace(",", ".")
    parsed = _dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f" if "." in stamp
                                   else "%Y-%m-%d %H:%M:%S")
    return parsed.replace(tzinfo=_dt.timezone.utc).timestamp()


def parse_float(text: str) -> float | None:
    """A float, or `None` for text that is not a finite number (`nan`, a truncated `1.2e`)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def parse_int(text: str | None, name: str) -> int | None:
    """A count a log printed (an argument dump's, a PARAMETER line's): `None` where it is absent
    or printed as `None` or nothing; `LogParseError` naming `name` where it is anything but
    plain digits (`2.5`, `1e3`, `8 GPUs`, `-1`): a run's shape is never guessed from it."""
    if text is None:
        return None
    value = text.strip()
    if value in ("", "None", "null"):
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise LogParseError(f"{name}: {_shown(value)} is not a whole number")
    return int(value)


class EpochIterations:
    """Turns per-epoch iteration counters into one count that keeps growing across epochs.

    With `iterations_per_epoch` known the count is `epoch * iterations_per_epoch + iteration`;
    otherwise an epoch change that sends the counter back adds the last count seen, and the
    caller is told (the guess is exact only when the last logged iteration ended the epoch).
    """

    def __init__(self, iterations_per_epoch: int | None = None) -> None:
        self.iterations_per_epoch = iterations_per_epoch
        self._offset = 0
        self._last_epoch: int | None = None
        self._last_total = 0
        self.guessed = False

    def total(self, epoch: int | None, iteration: int) -> int:
        if epoch is not None and self.iterations_per_epoch:
            total = epoch * self.iterations_per_epoch + iteration
        else:
            if (
                epoch is not None
                and self._last_epoch is not None
                and epoch != self._last_epoch
                and self._offset + iteration <= self._last_total
            ):
                self._offset = self._last_total
                self.guessed = True
            total = self._offset + iteration
        self._last_epoch = epoch
        self._last_total = max(self._last_total, total)
        return total


# --------------------------------------------------------------------------------------------
# Throughput methods (reference/log-formats.md, "Two ways to compute throughput").


def single_stream(records: Iterable[IterRecord]) -> tuple[list[IterRecord], list[str]]:
    """One rank's records (the lowest rank when lines carry ranks), one per iteration, sorted."""
    records = list(records)
    warnings: list[str] = []
    ranks = sorted({r.rank for r in records if r.rank is not None})
    if ranks:
        if len(ranks) > 1:
            warnings.append(f"lines from {len(ranks)} ranks; measured on rank {ranks[0]}")
        records = [r for r in records if r.rank == ranks[0] or r.rank is None]
    by_iteration: dict[int, IterRecord] = {}
    duplicates = 0
    for record in records:
        if record.iteration in by_iteration:
            duplicates += 1
            continue
        by_iteration[record.iteration] = record
    if duplicates:
        warnings.append(f"{duplicates} repeated iteration(s) ignored (first line kept)")
    return [by_iteration[k] for k in sorted(by_iteration)], warnings


def check_record(record: IterRecord) -> None:
    """`LogParseError` naming the iteration and the field when a record holds what no run
    logs: a negative or huge iteration, a negative, infinite or NaN time or rate."""
    iteration = checked_int("iteration", record.iteration, 0, MAX_ITERATION)
    where = f"iteration {iteration}"
    if record.since_iteration is not None:
        checked_int(f"{where}: interval start", record.since_iteration, -MAX_ITERATION,
                    MAX_ITERATION)
    for name, maximum in (("timestamp_s", MAX_TIMESTAMP_S), ("rate_sps", MAX_RATE_SPS),
                          ("step_time_s", MAX_SECONDS)):
        value = getattr(record, name)
        if value is not None:
            checked_number(f"{where}: {name}", value, maximum=maximum)
    if record.samples is not None:
        checked_int(f"{where}: samples", record.samples, 0, MAX_BATCH << 10)


def _interval_starts(records: Sequence[IterRecord]) -> list[int]:
    starts = []
    for index, record in enumerate(records):
        if record.since_iteration is not None:
            starts.append(record.since_iteration)
        elif index > 0:
            starts.append(records[index - 1].iteration)
        else:
            starts.append(record.iteration - 1)
    return starts


def _after_warmup(
    records: Sequence[IterRecord], warmup: int
) -> tuple[list[tuple[int, IterRecord]], list[str]]:
    """Records whose interval starts at or after `warmup`, with their interval starts."""
    paired = list(zip(_interval_starts(records), records, strict=True))
    kept = [(start, r) for start, r in paired if start >= warmup]
    if kept:
        return kept, []
    fallback = paired[1:] if len(paired) > 1 else paired
    what = "the first record dropped" if len(paired) > 1 else "its only record"
    return fallback, [
        f"no record after the {warmup} warm-up iterations (log covers iterations "
        f"{paired[0][1].iteration}..{paired[-1][1].iteration}); measured over what exists, "
        f"{what}"
    ]


def _short_of_window(stream: Sequence[IterRecord], hints: LogHints) -> list[str]:
    """A warning when the log ends before the window's end (`warmup + measured`): the figure
    is then measured over fewer iterations than asked for."""
    end_target = hints.warmup_iterations + hints.measured_iterations
    last = stream[-1].iteration
    if last >= end_target:
        return []
    return [f"log ends at iteration {last}, before the window end {end_target} "
            f"({hints.warmup_iterations} warm-up + {hints.measured_iterations} measured); "
            f"measured up to {last}"]


def timestamp_window(
    records: Iterable[IterRecord], global_batch_size: int, hints: LogHints
) -> Throughput | None:
    """Global batch x iterations between two logged iterations / seconds between them.

    The window is `warmup -> warmup + measured` (20 -> 120 by default): it starts at the first
    record at or after the warm-up and ends at the last record at or before its end. A log
    that does not reach that far is measured from its first to its last record (the first
    record's own interval is thereby dropped) and says so in the warnings.
    """
    stream, warnings = single_stream(r for r in records if r.timestamp_s is not None)
    if len(stream) < 2:
        return None
    warmup = hints.warmup_iterations
    end_target = warmup + hints.measured_iterations
    start = next((r for r in stream if r.iteration >= warmup), None)
    end = next((r for r in reversed(stream) if r.iteration <= end_target), None)
    if start is None or end is None or end.iteration <= start.iteration:
        start, end = stream[0], stream[-1]
        warnings.append(
            f"log does not cover the window {warmup}->{end_target} (iterations "
            f"{start.iteration}..{end.iteration} logged); measured {start.iteration}->"
            f"{end.iteration} over what exists, the first record dropped"
        )
    elif end.iteration < end_target and stream[-1].iteration <= end_target:
        warnings.append(
            f"log ends at iteration {end.iteration}, before {end_target}; measured "
            f"{start.iteration}->{end.iteration}"
        )
    assert start.timestamp_s is not None and end.timestamp_s is not None
    seconds = end.timestamp_s - start.timestamp_s
    iterations = end.iteration - start.iteration
    if seconds <= 0:
        warnings.append(f"timestamps do not increase between iterations {start.iteration} "
                        f"and {end.iteration}; no timestamp window")
        return None
    inside = [r for r in stream if start.iteration <= r.iteration <= end.iteration]
    step_times = [
        (b.timestamp_s - a.timestamp_s) / (b.iteration - a.iteration)
        for a, b in itertools.pairwise(inside)
        if a.timestamp_s is not None and b.timestamp_s is not None
    ]
    return Throughput(
        throughput_sps=global_batch_size * iterations / seconds,
        method=METHOD_TIMESTAMP_WINDOW,
        window_start_iteration=start.iteration,
        window_end_iteration=end.iteration,
        measured_iterations=iterations,
        step_time_median_s=statistics.median(step_times) if step_times else None,
        warnings=tuple(warnings),
    )


def mean_of_rates(
    records: Iterable[IterRecord], hints: LogHints, *, bounded: bool = False
) -> Throughput | None:
    """Mean of the printed rates whose interval starts after the warm-up.

    With `bounded`, only the intervals that also end by the window's end (`warmup + measured`)
    count, the way an extractor that slices its lines `[W:T]` counts them; without it there is
    no upper bound (every rate after the warm-up counts).
    """
    stream, warnings = single_stream(r for r in records if r.rate_sps is not None)
    if not stream:
        return None
    kept, more = _after_warmup(stream, hints.warmup_iterations)
    more += _short_of_window(stream, hints)
    if bounded:
        end_target = hints.warmup_iterations + hints.measured_iterations
        inside = [(s, r) for s, r in kept if r.iteration <= end_target]
        if not inside:
            more.append(f"no logged interval ends by the window end {end_target} (the first "
                        f"after the warm-up ends at {kept[0][1].iteration}); measured over it")
        kept = inside or kept[:1]
    rates = [r.rate_sps for _, r in kept if r.rate_sps is not None]
    return Throughput(
        throughput_sps=statistics.fmean(rates),
        method=METHOD_MEAN_OF_RATES,
        window_start_iteration=kept[0][0],
        window_end_iteration=kept[-1][1].iteration,
        measured_iterations=sum(r.iteration - s for s, r in kept),
        step_time_median_s=None,
        warnings=(*warnings, *more),
    )


def latency(
    records: Iterable[IterRecord], global_batch_size: int | None, hints: LogHints
) -> Throughput | None:
    """Samples / seconds from printed per-iteration times after the warm-up (no upper bound).

    Lines that print their own global batch (Megatron) count their own samples; otherwise the
    figure is `global_batch_size / mean(step time)`.
    """
    stream, warnings = single_stream(r for r in records if r.step_time_s is not None)
    if not stream:
        return None
    kept, more = _after_warmup(stream, hints.warmup_iterations)
    more += _short_of_window(stream, hints)
    times = [r.step_time_s for _, r in kept if r.step_time_s is not None]
    if any(r.samples is not None for _, r in kept) and all(
        r.samples is not None for _, r in kept
    ):
        samples = sum(r.samples for _, r in kept if r.samples is not None)
        value = samples / sum(times)
    elif global_batch_size is not None:
        value = global_batch_size / statistics.fmean(times)
    else:
        return None
    return Throughput(
        throughput_sps=value,
        method=METHOD_LATENCY,
        window_start_iteration=kept[0][0],
        window_end_iteration=kept[-1][1].iteration,
        measured_iterations=sum(r.iteration - s for s, r in kept),
        step_time_median_s=statistics.median(times),
        warnings=(*warnings, *more),
    )


def finish(
    family: str,
    records: Sequence[IterRecord],
    hints: LogHints,
    *,
    order: Sequence[str] = (METHOD_TIMESTAMP_WINDOW, METHOD_LATENCY, METHOD_MEAN_OF_RATES),
    warnings: Iterable[str] = (),
    settings: Mapping[str, str] | None = None,
    extra: Mapping[str, float] | None = None,
    peak_memory_mib: float | None = None,
    bounded_rates: bool = False,
) -> ParsedLog:
    """Compute the throughput with the first method in `order` that the records allow.

    `bounded_rates` gives the mean of rates an upper window bound (`mean_of_rates`), for the
    families whose reference extractor has one."""
    if not records:
        raise LogParseError(f"no {family} training records found")
    refused = Skipped("record(s) holding a value no run has")
    kept = []
    for record in records:
        try:
            check_record(record)
        except LogParseError as error:
            refused.add(str(error))
            continue
        kept.append(record)
    if not kept:
        raise LogParseError(f"no {family} training record holds values a run has "
                            f"({refused.count} refused; first: {refused.first})")
    records = kept
    notes = [*warnings, *refused.notes()]
    global_batch = hints.resolved_global_batch_size()
    result: Throughput | None = None
    for method in order:
        if method == METHOD_TIMESTAMP_WINDOW and global_batch is not None:
            result = timestamp_window(records, global_batch, hints)
        elif method == METHOD_LATENCY:
            result = latency(records, global_batch, hints)
        elif method == METHOD_MEAN_OF_RATES:
            result = mean_of_rates(records, hints, bounded=bounded_rates)
        if result is not None:
            break
    if result is None:
        has_times = any(r.timestamp_s is not None or r.step_time_s is not None for r in records)
        if global_batch is None and has_times:
            notes.append("no throughput: the global batch size is unknown (pass hints: "
                         "num_nodes, gpus_per_node, batch_size_per_device)")
        else:
            notes.append("no throughput: the records carry no usable timestamps, step times "
                         "or rates")
        return ParsedLog(
            family=family, records=tuple(records), hints=hints, settings=dict(settings or {}),
            extra=dict(extra or {}), warnings=tuple(notes), peak_memory_mib=peak_memory_mib,
        )
    if not (math.isfinite(result.throughput_sps) and 0 < result.throughput_sps <= MAX_RATE_SPS):
        raise LogParseError(
            f"throughput {result.throughput_sps!r} samples/s ({result.method} over iterations "
            f"{result.window_start_iteration}..{result.window_end_iteration}) is not a positive "
            f"finite number of at most {MAX_RATE_SPS:g}: the log's times, rates or batch sizes "
            "are not those of a run")
    if (
        result.method == METHOD_MEAN_OF_RATES
        and global_batch is None
        and order.index(METHOD_MEAN_OF_RATES) > 0
        and any(r.timestamp_s is not None or r.step_time_s is not None for r in records)
    ):
        notes.append("mean of self-reported rates used because the global batch size is "
                     "unknown; framework-reported rates can be wrong")
    return ParsedLog(
        family=family,
        records=tuple(records),
        hints=hints,
        throughput_sps=result.throughput_sps,
        method=result.method,
        window_start_iteration=result.window_start_iteration,
        window_end_iteration=result.window_end_iteration,
        warmup_iterations=result.window_start_iteration,
        measured_iterations=result.measured_iterations,
        step_time_median_s=result.step_time_median_s,
        peak_memory_mib=peak_memory_mib,
        settings=dict(settings or {}),
        extra=dict(extra or {}),
        warnings=(*notes, *result.warnings),
    )


# --------------------------------------------------------------------------------------------
# ParsedLog -> RunRow.


_VARIANT_SHORT = {"hidden_size": "h", "num_layers": "l", "num_heads": "nh", "seq_len": "s"}


def case_id_for(hints: LogHints, fallback: str) -> str:
    """`<model>-<framework>-<precision>-<N>n<G>g-bs<B>[-<variant>]` from what is known, else
    `fallback`. The variant (`dp=2,tp=4,...` -> `dp2-tp4-...`) keeps two parallel layouts of
    one topology and batch apart."""
    parts = [hints.model, hints.framework, hints.precision]
    if hints.num_nodes is not None and hints.gpus_per_node is not None:
        parts.append(f"{hints.num_nodes}n{hints.gpus_per_node}g")
    if hints.batch_size_per_device is not None:
        parts.append(f"bs{hints.batch_size_per_device}")
    known = [p for p in parts if p]
    if len(known) < 2:
        return fallback
    if hints.variant:
        for pair in hints.variant.split(","):
            key, _, value = pair.partition("=")
            known.append(f"{_VARIANT_SHORT.get(key, key)}{value}")
    return "-".join(known)


def to_run_row(parsed: ParsedLog, *, case_id: str | None = None) -> RunRow:
    """One `RunRow` from a parsed foreign log.

    Raises `LogParseError` when the topology (`num_nodes`, `gpus_per_node`,
    `batch_size_per_device`) is unknown: the row contract has no "unknown" for those columns,
    and a guessed topology would corrupt speedups. Pass them in `LogHints`.
    """
    nodes, gpus = parsed.hints.resolved_topology()
    hints = replace(parsed.hints, num_nodes=nodes, gpus_per_node=gpus)
    missing = [
        name
        for name in ("num_nodes", "gpus_per_node", "batch_size_per_device")
        if getattr(hints, name) is None
    ]
    if missing:
        where = f"{parsed.source}: " if parsed.source else ""
        world = f" (the log says world_size={hints.world_size})" if hints.world_size else ""
        raise LogParseError(
            f"{where}cannot make a run row: {', '.join(missing)} unknown{world}; neither the "
            f"path nor the log says, pass them as hints (collect --import-logs: --nodes, "
            f"--gpus-per-node, --batch-size)"
        )
    assert hints.num_nodes is not None and hints.gpus_per_node is not None
    assert hints.batch_size_per_device is not None
    stem = parsed.source.rsplit("/", 1)[-1].removesuffix(".log") or parsed.family
    extra: dict[str, Any] = {"log_family": parsed.family, **parsed.extra}
    if parsed.warnings:
        extra["parse_warnings"] = "; ".join(parsed.warnings)
    short = window_warnings(parsed.warnings)
    if short:
        extra["window_warning"] = "; ".join(short)
    ok = parsed.throughput_sps is not None
    dp, tp, pp = _layout(hints)
    return RunRow(
        case_id=case_id or parsed.settings.get("case_id") or case_id_for(hints, stem),
        repeat=hints.repeat if hints.repeat is not None else 0,
        status=STATUS_OK if ok else STATUS_INCOMPLETE,
        framework=hints.framework or "",
        model=hints.model or "",
        precision=hints.precision or "",
        num_nodes=hints.num_nodes,
        gpus_per_node=hints.gpus_per_node,
        batch_size_per_device=hints.batch_size_per_device,
        global_batch_size=hints.resolved_global_batch_size(),
        dp=dp, tp=tp, pp=pp,
        throughput_sps=parsed.throughput_sps,
        method=parsed.method,
        warmup_iterations=parsed.warmup_iterations,
        measured_iterations=parsed.measured_iterations,
        step_time_median_s=parsed.step_time_median_s,
        peak_memory_mib=parsed.peak_memory_mib,
        loss_first=parsed.loss_first,
        loss_last=parsed.loss_last,
        variant=hints.variant or "",
        source=parsed.source,
        error="" if ok else "; ".join(parsed.warnings),
        extra=extra,
    )


def _layout(hints: LogHints) -> tuple[int | None, int, int]:
    """dp, tp and pp of a row: what the log said; tp and pp default to 1, and dp to the ranks
    left over when the topology is known."""
    tp, pp = hints.tp or 1, hints.pp or 1
    dp = hints.dp
    nodes, gpus = hints.resolved_topology()
    if dp is None and nodes and gpus and (nodes * gpus) % (tp * pp) == 0:
        dp = nodes * gpus // (tp * pp)
    return dp, tp, pp
