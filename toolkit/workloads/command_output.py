"""What a command case's program printed, turned into the toolkit's iterations: pure functions
and small classes, no processes (those are `toolkit.workloads.command`'s).

Three sources of step records, one per case (`measured_by`):

- `pattern`: the case's RE2 pattern, matched line by line as the program prints;
- `report`: the program's own `trainbench.report.step(...)` records;
- `log:<family>`: a log family the importer reads (`parsers`), named or detected, read from the
  program's output or from the file it writes (`log_file`).

A record says which iteration it ends (or the next one), and what the log measured: a step
time, a rate, a timestamp of its own, or nothing, in which case the time its line was read
counts. `timeline` lays the records on one clock per rank, so that the same window arithmetic
as for built-in workloads (`toolkit.analysis.throughput`) gives the run's figure; the method
(`latency`, `mean_of_rates` or `timestamp_window`) says which of the log's figures it used.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parsers import logtext
from parsers.detect import ANY_MARKER, PARSERS, RECORD_MARKERS, detect, may_hold_record
from parsers.foreign import (
    MAX_BATCH,
    MAX_ITERATION,
    MAX_RATE_SPS,
    MAX_SECONDS,
    MAX_TIMESTAMP_S,
    LogHints,
    LogParseError,
    Skipped,
    checked_int,
    checked_number,
)
from parsers.rows import METHOD_LATENCY, METHOD_MEAN_OF_RATES, METHOD_TIMESTAMP_WINDOW
from toolkit.analysis.numbers import finite
from toolkit.spec.command import compile_pattern

MEASURED_BY_PATTERN = "pattern"
MEASURED_BY_REPORT = "report"
LOG_PREFIX = "log:"


_SEPARATORS = ",_' \u2009\u202f"
_THOUSANDS = logtext.compile(r"^[+-]?\d{1,3}(?:[,_' \x{2009}\x{202f}]\d{3})+"
                             r"(?:\.\d+)?(?:[eE][+-]?\d+)?$")
"""A number written with a thousands separator (`1,234.5`, `12 345`, `1_000`, `1'234`): the same
separator between every group of three digits."""
MAX_NUMBER_CHARS = 100
"""Characters of a figure in a program's line; a longer one is garbled output, not a number."""


def read_figure(text: str) -> float:
    """A figure a pattern group matched, with the usual thousands separators read; `ValueError`
    saying why for text that is no finite number (`1.2.3`, `nan`, 5,000 digits)."""
    plain = text.strip()
    if len(plain) > MAX_NUMBER_CHARS:
        raise ValueError(f"{plain[:20]!r}... is {len(plain)} characters long, not a figure")
    if _THOUSANDS.match(plain) is not None:
        used = {c for c in plain if c in _SEPARATORS}
        if len(used) == 1:
            plain = plain.replace(used.pop(), "")
    try:
        value = float(plain)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


@dataclass(frozen=True)
class StepRecord:
    """One step (or a run of steps) as the program reported it."""

    iteration: int | None
    """The iterations completed when it was printed; None: one more than the record before."""
    read_s: float
    """Wall-clock time the worker read the line (or the record's own time, for the API)."""
    step_time_s: float | None = None
    rate_sps: float | None = None
    timestamp_s: float | None = None
    """The log's own wall-clock time of the record, when it has one."""
    loss: float | None = None
    samples: int | None = None
    """Samples of the step, when the program says (the report API)."""

    def check(self) -> None:
        """`LogParseError` naming the field when the record holds what no run has: an iteration
        or a sample count out of range, a time, rate or step time beyond any run's (1e308
        would make sums and the timeline infinite)."""
        if self.iteration is not None:
            checked_int("iteration", self.iteration, 0, MAX_ITERATION)
        if self.samples is not None:
            checked_int("samples", self.samples, 0, MAX_BATCH << 10)
        checked_number("time", self.read_s, maximum=MAX_TIMESTAMP_S)
        for name, maximum in (("timestamp_s", MAX_TIMESTAMP_S), ("step_time_s", MAX_SECONDS),
                              ("rate_sps", MAX_RATE_SPS)):
            value = getattr(self, name)
            if value is not None:
                checked_number(name, value, maximum=maximum)


class LineReader:
    """Feeds the program's lines, in order, and collects its step records. `pattern`: the
    case's RE2 pattern; otherwise the log family `log_format` (`auto`: the first family any
    line so far matches)."""

    def __init__(self, pattern: str | None, log_format: str = "auto") -> None:
        self.pattern = compile_pattern(pattern) if pattern is not None else None
        self.family: str | None = None if log_format == "auto" else log_format
        self.records: list[StepRecord] = []
        self.refused = Skipped("step line(s) with a figure that cannot be read or that no run "
                               "has")
        self.lines = 0
        self._first: str | None = None
        self._first_count = 0

    @property
    def measured_by(self) -> str:
        if self.pattern is not None:
            return MEASURED_BY_PATTERN
        return LOG_PREFIX + (self.family or "auto")

    def feed(self, line: str, read_s: float) -> list[StepRecord]:
        """The records the line adds (usually none or one)."""
        self.lines += 1
        try:
            new = (self._by_pattern(line, read_s) if self.pattern is not None
                   else self._by_family(line, read_s))
            for record in new:
                record.check()
        except (ValueError, ArithmeticError, IndexError, KeyError, LogParseError) as error:
            self.refused.add(f"output line {self.lines}: {str(error)[:200]}: "
                             f"{line.strip()[:120]!r}")
            return []
        self.records += new
        return new

    def feed_lines(self, lines: list[bytes], read_s: float) -> None:
        """A batch of lines read together, as printed (UTF-8; an invalid byte is replaced).
        Without a pattern, the lines that hold none of the family's markers (any family's,
        while none is detected) are counted and never decoded: one C-level search a line."""
        if self.pattern is None:
            markers = ANY_MARKER if self.family is None else RECORD_MARKERS.get(self.family)
            if markers is not None:
                self.lines += len(lines)
                search = _marker_search(markers)
                for raw in [raw for raw in lines if search(raw)]:
                    self.lines -= 1  # counted above
                    self.feed(raw.decode("utf-8", "replace"), read_s)
                return
        for raw in lines:
            self.feed(raw.decode("utf-8", "replace"), read_s)

    def notes(self) -> list[str]:
        """What was skipped reading the output."""
        return self.refused.notes()

    def _by_pattern(self, line: str, read_s: float) -> list[StepRecord]:
        assert self.pattern is not None
        match = self.pattern.search(line)  # type: ignore[attr-defined]
        if match is None:
            return []
        groups = match.groupdict()

        def number(key: str) -> float | None:
            text = groups.get(key)
            if text is None:
                return None
            try:
                return read_figure(text)
            except ValueError as error:
                raise ValueError(f"group {key}: {error}") from None

        iteration = number("iteration")
        if iteration is not None and not (iteration.is_integer()
                                          and 0 <= iteration <= MAX_ITERATION):
            raise ValueError(f"group iteration: {groups['iteration']!r} is not an iteration "
                             f"(a whole number 0..{MAX_ITERATION})")
        step_s = number("step_time_s")
        if step_s is None and (ms := number("step_time_ms")) is not None:
            step_s = ms / 1000.0
        return [StepRecord(iteration=int(iteration) if iteration is not None else None,
                           read_s=read_s, step_time_s=step_s, rate_sps=number("samples_per_s"),
                           loss=number("loss"))]

    def _by_family(self, line: str, read_s: float) -> list[StepRecord]:
        # the cheap test first: most lines of a chatty program are no family's record
        markers = ANY_MARKER if self.family is None else RECORD_MARKERS.get(self.family)
        if markers is not None and not may_hold_record(line, markers):
            return []
        if self.family is None:
            found = detect(line)
            if found is None:
                return []
            self.family = found
        parse = PARSERS[self.family]
        # A family may read a line in the light of the first record line (pytorch_imagenet:
        # is its batch index 0-based?): parse the first record line with this one.
        text = line if self._first is None else f"{self._first}\n{line}"
        try:
            parsed = parse(text, hints=LogHints())
        except LogParseError:
            return []  # a line of the family that is no step record
        # any other error (a number too long to convert) refuses the line, counted by `feed`
        records = parsed.records[self._first_count:] if self._first is not None \
            else parsed.records
        if not records:
            return []
        if self._first is None:
            self._first, self._first_count = line, len(parsed.records)
        return [StepRecord(iteration=r.iteration, read_s=read_s, step_time_s=r.step_time_s,
                           rate_sps=r.rate_sps, timestamp_s=r.timestamp_s, loss=r.loss,
                           samples=r.samples) for r in records]


@functools.cache
def _marker_search(markers: tuple[str, ...]) -> Callable[[bytes], re.Match[bytes] | None]:
    """The search for any of `markers` in a line's bytes (markers are ASCII: in UTF-8 their
    bytes are found exactly where the decoded text holds them)."""
    return re.compile(b"|".join(re.escape(m.encode()) for m in markers)).search


def read_log_text(text: str, log_format: str, read_s: float
                  ) -> tuple[str, list[StepRecord], list[str]]:
    """A whole log file the program wrote (`log_file`): (measured_by, records, notes). Timed
    by the log's own timestamps, step times or rates; `read_s` where it has none. The notes
    say which lines and records the family's reader skipped, or why it read none."""
    family = detect(text) if log_format == "auto" else log_format
    if family is None:
        return LOG_PREFIX + "auto", [], []
    try:
        parsed = PARSERS[family](text, hints=LogHints())
    except (LogParseError, ValueError, ArithmeticError, IndexError, KeyError) as error:
        return LOG_PREFIX + family, [], [f"log file not read: {error}"]
    skipped = [w for w in parsed.warnings if ", skipped (first: " in w]
    return LOG_PREFIX + family, [
        StepRecord(iteration=r.iteration, read_s=read_s, step_time_s=r.step_time_s,
                   rate_sps=r.rate_sps, timestamp_s=r.timestamp_s, loss=r.loss,
                   samples=r.samples) for r in parsed.records], skipped


def read_report_lines(lines: Iterable[bytes], refused: Skipped | None = None
                      ) -> list[StepRecord]:
    """The records `trainbench.report.step` wrote (one JSON object a line). A line that is not
    one (torn, from a program killed while writing; garbled; nested too deep) or holds a value
    no run has is skipped and counted in `refused`."""
    refused = refused if refused is not None else Skipped("report line(s)")
    out = []
    for number, line in enumerate(lines, 1):
        try:
            rec = logtext.json_value(line)
        except ValueError as error:
            refused.add(f"report line {number}: {str(error)[:100]}")
            continue
        if not isinstance(rec, dict) or "time_s" not in rec:
            refused.add(f"report line {number}: not a step record (an object with time_s)")
            continue
        try:
            time_s = checked_number("time_s", rec["time_s"], maximum=MAX_TIMESTAMP_S)
            step_time = rec.get("step_time_s")
            record = StepRecord(
                iteration=_whole(rec, "iteration", MAX_ITERATION), read_s=time_s,
                step_time_s=None if step_time is None else checked_number(
                    "step_time_s", step_time, maximum=MAX_SECONDS),
                timestamp_s=time_s, samples=_whole(rec, "samples", MAX_BATCH << 10),
                # a loss is no timing figure: a diverged one (NaN, 1e308) is shown as none
                loss=finite(rec.get("loss")))
        except LogParseError as error:
            refused.add(f"report line {number}: {error}")
            continue
        out.append(record)
    return out


def _whole(rec: dict[str, Any], key: str, maximum: int) -> int | None:
    """A report record's count (`1` or `1.0`), None where absent; `LogParseError` naming the
    key for anything else (text, 2.5, 1e308, 10**400)."""
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) <= maximum:
        value = int(value)
    return checked_int(key, value, 0, maximum)


@dataclass(frozen=True)
class Iteration:
    """One record laid on the rank's clock: what the worker writes as an `iter` event."""

    iteration: int
    elapsed_s: float
    """Seconds from the clock's origin to the end of this record's last iteration."""
    step_time_s: float
    samples: int
    loss: float | None
    time_s: float
    """Wall-clock time of the record (the log's own, else when it was read)."""


def numbered(records: list[StepRecord]) -> list[tuple[int, StepRecord]]:
    """(iteration, record) in order: a record without a number is the one after the last; a
    number that goes back (a new epoch's counter) continues from the last; a record of the
    iteration just seen (a log that writes one step in two records) is merged into it. A
    counter that starts at 0 counts from 0: one is added to every number."""
    out: list[tuple[int, StepRecord]] = []
    offset = last = 0
    first = next((r.iteration for r in records if r.iteration is not None), None)
    if first == 0:
        offset = 1
    for rec in records:
        it = last + 1 if rec.iteration is None else rec.iteration + offset
        if rec.iteration is not None and it < last:
            offset = last + (1 if rec.iteration == 0 else 0)
            it = rec.iteration + offset
        if out and it == last:
            _, prev = out[-1]
            out[-1] = (it, StepRecord(
                iteration=prev.iteration, read_s=prev.read_s,
                step_time_s=prev.step_time_s if prev.step_time_s is not None else rec.step_time_s,
                rate_sps=prev.rate_sps if prev.rate_sps is not None else rec.rate_sps,
                timestamp_s=prev.timestamp_s, loss=prev.loss if prev.loss is not None
                else rec.loss, samples=prev.samples))
            continue
        out.append((it, rec))
        last = it
    return out


def choose_method(records: list[StepRecord]) -> tuple[str, str]:
    """(method, clock) for a rank's records: the log's step times (`latency`), else its
    rates (`mean_of_rates`, weighted by time), else its own timestamps, else the times its
    lines were read (`timestamp_window` on the `log` or the `output` clock)."""
    if records and all(r.step_time_s is not None and r.step_time_s > 0 for r in records):
        return METHOD_LATENCY, "step_time"
    if records and all(r.rate_sps is not None and r.rate_sps > 0 for r in records):
        return METHOD_MEAN_OF_RATES, "rate"
    if records and all(r.timestamp_s is not None for r in records):
        return METHOD_TIMESTAMP_WINDOW, "log"
    return METHOD_TIMESTAMP_WINDOW, "output"


def timeline(records: list[StepRecord], samples_per_iteration: int,
             started_s: float, rate_ranks: int = 1) -> tuple[list[Iteration], str, str]:
    """The records on one clock: (iterations, method, clock). `started_s`: when the program
    started (wall clock), the origin where the log has no duration of its own. `rate_ranks`:
    the ranks whose samples a printed rate stands for, when it counts one rank's (the job's
    rate is the rank's times the data-parallel ranks; 1: the rate is the job's)."""
    items = numbered(records)
    method, clock = choose_method([r for _, r in items])
    out: list[Iteration] = []
    elapsed, prev_it = 0.0, 0
    prev_t = started_s
    for it, rec in items:
        n = it - prev_it
        samples = rec.samples if rec.samples is not None else samples_per_iteration * n
        when = rec.timestamp_s if rec.timestamp_s is not None else rec.read_s
        if clock == "step_time":
            assert rec.step_time_s is not None
            duration = rec.step_time_s * n
        elif clock == "rate":
            assert rec.rate_sps is not None
            duration = samples / (rec.rate_sps * rate_ranks)
        else:
            duration = when - prev_t
        elapsed += duration
        out.append(Iteration(iteration=it, elapsed_s=elapsed, step_time_s=duration / n,
                             samples=samples, loss=rec.loss, time_s=when))
        prev_it, prev_t = it, when
    return out, method, clock


def last_lines(lines: list[str], n: int = 20) -> str:
    return "\n".join(lines[-n:])



class FileFollower:
    """A file the program writes its steps to while it runs (`trainbench.report`'s records, a
    `log_file`), read as it grows so the hang watchdog and `stop_after_window` see its steps
    before the program exits. `poll` reads what was appended since, at most `max_bytes` a
    call, whole lines only (a line longer than `longest` is dropped); the file's final records
    are read once more, whole, when the program has exited."""

    def __init__(self, path: Path, report: bool, log_format: str = "auto",
                 max_bytes: int = 4 << 20, longest: int = 1 << 20) -> None:
        self.path, self.report = path, report
        self.records: list[StepRecord] = []
        self._reader = None if report else LineReader(None, log_format)
        self._offset = 0
        self._partial = b""
        self._max_bytes, self._longest = max_bytes, longest

    def poll(self, read_s: float) -> int:
        """Records added since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read(self._max_bytes)
        except OSError:
            return 0
        if not data:
            return 0
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > self._longest:
            self._partial = b""
        before = len(self.records)
        if self._reader is None:
            self.records += read_report_lines(lines)
        else:
            self._reader.feed_lines(lines, read_s)
            self.records = self._reader.records
        return len(self.records) - before
