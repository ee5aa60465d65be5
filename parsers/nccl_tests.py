"""nccl-tests output: the table its `*_perf` binaries print, and the JSON file that `-J` writes.

The text is read by its own header, not by position: the column names (`size count type redop
root time algbw busbw #wrong ...`) differ between versions and collectives (before the 2022
format, 2.13, `redop` and `root` appear only for the collectives that have them and an `error`
column stands where `#wrong` is; `cputime` with `-C 1`, per-iteration columns with `-I 1`, a
trailing timestamp with `-S 1`), so each table is matched against the header line printed above
it. The block above the table gives the world
(`#  Rank  0 Group  0 Pid 123 on host device  0 [0000:04:00] NVIDIA H100 ...`), the
`# nThread ...` settings and, from 2.17.4 on, the nccl-tests and NCCL versions; the footer gives
`# Avg bus bandwidth`, which nccl-tests averages over every printed busbw (sizes, out-of-place
and in-place). Values are read as printed (`%.2f`, fewer digits for large values, exponent form
for huge ones); the time column is in microseconds except in the 2017-2018 format (`bytes N
type op time ...`, no units line), which printed milliseconds and is converted.

The JSON file (`-J file.json`, nccl-tests 2.17.4 and later) holds the same figures at full
precision; `parse_json` reads it into the same classes. It names no nccl-tests version, only its
own format version (in `settings`).

Noise around the table (mpirun warnings, `NCCL INFO` lines, shell prompts, `[1,0]<stdout>:`
tags from `mpirun --tag-output`, `0: ` labels from `srun -l`) is skipped; a line that starts
like a table row but does not fit the header raises `ValueError` naming the line, and so does a
row whose time or bandwidth is not a finite number >= 0 (`inf`, `nan`, `-1.0`: no measurement),
naming the column too. This module
reads files only: running nccl-tests is the toolkit's business.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from parsers import logtext


@dataclass(frozen=True)
class NcclTestsRank:
    """One `#  Rank ...` line: a rank and the GPU it ran on, as far as the version printed it."""

    rank: int
    host: str
    device: int
    """CUDA device index on its host."""
    bus_id: str
    """As printed: `0x36` (PCI bus only, older versions) or `0000:04:00` (domain:bus:device)."""
    device_name: str
    group: int | None = None
    """`NCCL_TESTS_SPLIT` group (printed from 2.13 on)."""
    pid: int | None = None


@dataclass(frozen=True)
class NcclTestsResult:
    """The figures of one size in one placement (out-of-place or in-place)."""

    time_us: float
    """Mean time of one operation (CPU time where the run's `cputime` is set)."""
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None = None
    """Wrong elements (`#wrong`); `None` where printed `N/A` (data check off) or not printed."""
    max_error: float | None = None
    """Largest deviation, which versions before 2.13 printed in an `error` column instead."""


@dataclass(frozen=True)
class NcclTestsRow:
    """One printed size of one (type, reduction, root)."""

    size_bytes: int
    count: int
    """Elements."""
    dtype: str
    redop: str | None
    """As printed (`sum`, `none` for collectives without reduction); `None` if not a column."""
    root: int | None
    """As printed (`-1` for collectives without root); `None` if not a column."""
    out_of_place: NcclTestsResult | None
    in_place: NcclTestsResult | None
    timestamp: str | None = None
    """The `-S 1` report time, as printed."""


@dataclass(frozen=True)
class NcclTestsRun:
    """One run of one nccl-tests binary."""

    op: str | None
    """Collective from the binary name without `_perf` (`all_reduce`, `sendrecv`); `None` if
    neither the text nor the caller named it."""
    ranks: list[NcclTestsRank]
    rows: list[NcclTestsRow]
    """In printed order; `-N` cycles and `-d all` / `-o all` repeat sizes."""
    avg_busbw_gbps: float | None
    """The printed `Avg bus bandwidth`, or `None` where the output was cut before it."""
    version: str | None = None
    """nccl-tests version (`# nccl-tests version 2.17.9 ...`, printed from 2.17.4 on)."""
    nccl_version: str | None = None
    """NCCL library version, from `nccl-library=22902` or an `NCCL version 2.16.5` line."""
    settings: dict[str, str] = field(default_factory=dict)
    """The `# nThread ...` line's values as printed (`nThread`, `nGpus`, `minBytes`,
    `warmup iters`, ...); for JSON, the `config` object and the file's own `json_version`."""
    out_of_bounds: int | None = None
    """The printed `Out of bounds values` count (results that failed the data check)."""
    cputime: bool = False
    """Times are CPU times (`-C 1`), not GPU latencies."""

    @property
    def hosts(self) -> list[str]:
        """Distinct host names in rank order."""
        return list(dict.fromkeys(r.host for r in self.ranks))


def max_busbw_gbps(run: NcclTestsRun) -> float | None:
    """Largest bus bandwidth over all sizes, out-of-place and in-place; `None` if no row."""
    values = _busbw_values(run)
    return max(values) if values else None


def mean_busbw_gbps(run: NcclTestsRun) -> float | None:
    """Mean of every busbw in the table: what nccl-tests prints as `Avg bus bandwidth` (computed
    there from unrounded values, so the two agree to the printed rounding)."""
    values = _busbw_values(run)
    return statistics.fmean(values) if values else None


def _busbw_values(run: NcclTestsRun) -> list[float]:
    return [r.busbw_gbps for row in run.rows for r in (row.out_of_place, row.in_place)
            if r is not None]


# ---------------------------------------------------------------------------------------------
# Text output

_PREFIX = logtext.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_VERSION = logtext.compile(r"^nccl-tests version (\S+)(?:.*?\bnccl-library=(\d+))?")
_STARTING = logtext.compile(r"^Collective test starting:\s*(\S+)")
_NCCL_VERSION = logtext.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_BINARY = logtext.compile(r"(?:^|[\s/=])([a-z][a-z0-9]*(?:_[a-z0-9]+)*?)_perf\w*")
_RANK = logtext.compile(
    r"^Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[([^\]]*)\]\s*(.*)$"
)
_SETTING = logtext.compile(r"\b(nThread|nGpus|minBytes|maxBytes)\s+(\S+)")
_NAMED = logtext.compile(r"([A-Za-z_][\w ]*?):\s*(\S+)")
_FOOTER = logtext.compile(r"^(Avg bus bandwidth|Out of bounds values)\s*:\s*(\S+)")

#: Header names of the columns before the first time column, and the field each fills.
_LEADING = {"size": "size", "bytes": "size", "count": "count", "N": "count", "type": "dtype",
            "redop": "redop", "op": "redop", "root": "root"}
_TIME = ("time", "cputime")


@dataclass
class _Table:
    """A table header as printed: where each field sits in a row."""

    line: int
    leading: dict[str, int]
    groups: list[dict[str, int]]
    """Per placement (out-of-place, then in-place): column name -> index."""
    width: int
    timestamp: bool
    time_scale: float
    cputime: bool


def _header(tokens: list[str], lineno: int) -> _Table:
    leading: dict[str, int] = {}
    groups: list[dict[str, int]] = []
    timestamp = False
    for index, name in enumerate(tokens):
        if name in _TIME:
            groups.append({"time": index})
        elif name == "timestamp" and index == len(tokens) - 1:
            timestamp = True
        elif groups:
            groups[-1][name] = index
        elif name in _LEADING:
            leading[_LEADING[name]] = index
        else:
            raise ValueError(f"line {lineno}: unknown column {name!r} before the time column in "
                             f"the nccl-tests header {' '.join(tokens)!r}")
    if not 1 <= len(groups) <= 2 or any(not {"algbw", "busbw"} <= set(g) for g in groups):
        raise ValueError(f"line {lineno}: the nccl-tests header {' '.join(tokens)!r} does not "
                         "have one or two (time, algbw, busbw) groups")
    if not {"size", "count", "dtype"} <= set(leading):
        raise ValueError(f"line {lineno}: the nccl-tests header {' '.join(tokens)!r} lacks "
                         "size, count or type")
    # The 2017-2018 format (`bytes N type ...`) printed the time in ms and no units line; a
    # units line that follows sets the scale back (`_read_runs`).
    return _Table(line=lineno, leading=leading, groups=groups,
                  width=len(tokens) - (1 if timestamp else 0), timestamp=timestamp,
                  time_scale=1000.0 if tokens[0] == "bytes" else 1.0,
                  cputime=tokens[groups[0]["time"]] == "cputime")


_MAX_BYTES = 1 << 50
"""Largest message size or element count read (1 PiB; nccl-tests sizes are `size_t`)."""
_MAX_BANDWIDTH_GBPS = 1e6
"""A bandwidth above 1 PB/s is no measurement."""


def _number(token: str, lineno: int, column: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"line {lineno}: {token!r} in column {column} is not a number") from None


def _measure(token: str, lineno: int, column: str, maximum: float = math.inf) -> float:
    """A time, a bandwidth or a footer average: a finite number >= 0 (a bandwidth at most
    1 PB/s). nccl-tests prints none other, so `inf`, `nan`, a negative value or a bandwidth of
    1e308 is a broken or edited row, not a measurement."""
    number = _number(token, lineno, column)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(f"line {lineno}: {token!r} in column {column} is not a measurement: "
                         "not a finite number >= 0")
    if number > maximum:
        raise ValueError(f"line {lineno}: {token!r} in column {column} is not a measurement: "
                         f"more than {maximum:g} (no link carries it)")
    return number


def _whole(token: str, lineno: int, column: str, minimum: int = 0) -> int:
    """A size, count, root or wrong-element count: a whole number >= minimum (`%g` may print a
    large count as `1e+06`)."""
    number = _number(token, lineno, column)
    if not (math.isfinite(number) and number.is_integer() and minimum <= number <= _MAX_BYTES):
        raise ValueError(f"line {lineno}: {token!r} in column {column} is not a whole number "
                         f"in {minimum}..{_MAX_BYTES}")
    return int(number)


def _result(tokens: list[str], group: dict[str, int], table: _Table,
            lineno: int) -> NcclTestsResult:
    wrong: int | None = None
    max_error: float | None = None
    for name, index in group.items():
        token = tokens[index]
        if name in ("#wrong", "wrong") and token != "N/A":
            wrong = _whole(token, lineno, name)  # %g: 1000000 prints as 1e+06
        elif name in ("error", "res") and token != "N/A":
            max_error = _number(token, lineno, name)
    return NcclTestsResult(
        time_us=_measure(tokens[group["time"]], lineno, "time") * table.time_scale,
        algbw_gbps=_measure(tokens[group["algbw"]], lineno, "algbw", _MAX_BANDWIDTH_GBPS),
        busbw_gbps=_measure(tokens[group["busbw"]], lineno, "busbw", _MAX_BANDWIDTH_GBPS),
        wrong=wrong,
        max_error=max_error,
    )


def _row(line: str, table: _Table, lineno: int) -> NcclTestsRow:
    tokens = line.split()
    timestamp = None
    if table.timestamp and len(tokens) == table.width + 2:  # "%Y-%m-%d %H:%M:%S"
        timestamp = " ".join(tokens[-2:])
        tokens = tokens[:-2]
    if len(tokens) != table.width:
        raise ValueError(f"line {lineno}: {len(tokens)} fields where the nccl-tests header at "
                         f"line {table.line} names {table.width}: {line.strip()!r}")
    lead = table.leading
    results = [_result(tokens, g, table, lineno) for g in table.groups]
    return NcclTestsRow(
        size_bytes=_whole(tokens[lead["size"]], lineno, "size"),
        count=_whole(tokens[lead["count"]], lineno, "count"),
        dtype=tokens[lead["dtype"]],
        redop=tokens[lead["redop"]] if "redop" in lead else None,
        root=_whole(tokens[lead["root"]], lineno, "root", minimum=-1) if "root" in lead else None,
        out_of_place=results[0],
        in_place=results[1] if len(results) > 1 else None,
        timestamp=timestamp,
    )


def _op_name(name: str) -> str:
    match = _BINARY.search(name)
    return match.group(1) if match else name


@dataclass
class _RunText:
    """What one run's lines said, gathered while reading."""

    first_line: int
    op: str | None = None
    binary: str | None = None
    version: str | None = None
    nccl_version: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    ranks: list[NcclTestsRank] = field(default_factory=list)
    table: _Table | None = None
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None

    def finish(self, op: str | None) -> NcclTestsRun:
        found = self.op or self.binary
        if op is not None and found is not None and _op_name(op) != found:
            raise ValueError(f"line {self.first_line}: the output names the collective "
                             f"{found!r}, the caller {op!r}")
        assert self.table is not None
        return NcclTestsRun(
            op=found or (_op_name(op) if op is not None else None),
            ranks=self.ranks, rows=self.rows, avg_busbw_gbps=self.avg_busbw_gbps,
            version=self.version, nccl_version=self.nccl_version, settings=self.settings,
            out_of_bounds=self.out_of_bounds, cputime=self.table.cputime,
        )


def _settings(body: str) -> dict[str, str]:
    # "nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ..."
    found = dict(_SETTING.findall(body))
    rest = body[body.find("step:"):] if "step:" in body else ""
    found.update((k.strip(), v) for k, v in _NAMED.findall(rest))
    return found


def _nccl_version_from_code(code: int) -> str:
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch from 2.9 on, major*1000 + ... before.
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _read_runs(text: str) -> list[_RunText]:
    """The runs in order: a new one starts after an `Avg bus bandwidth` footer, or where a
    header block or table starts again after a table."""
    runs: list[_RunText] = []
    run = _RunText(first_line=1)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        stripped = line.strip()
        commented = stripped.startswith("#")
        # Pasted into Markdown, the leading '#' is often lost: header lines match without it.
        body = stripped.lstrip("#").strip()
        tokens = body.split()
        starts_run = (body.startswith(("nccl-tests version", "Collective test starting"))
                      or tokens[:1] == ["nThread"])
        if starts_run and run.table is not None:
            runs.append(run)
            run = _RunText(first_line=lineno)
        if (match := _VERSION.match(body)) is not None:
            run.version = match.group(1)
            if match.group(2):
                run.nccl_version = _nccl_version_from_code(int(match.group(2)))
        elif (match := _STARTING.match(body)) is not None:
            run.op = _op_name(match.group(1))
        elif tokens[:1] == ["nThread"]:
            run.settings = _settings(body)
        elif (match := _RANK.match(body)) is not None:
            rank, group, pid, host, device, bus_id, name = match.groups()
            run.ranks.append(NcclTestsRank(
                rank=int(rank), host=host, device=int(device), bus_id=bus_id,
                device_name=name.strip(), group=None if group is None else int(group),
                pid=None if pid is None else int(pid)))
        elif tokens[:1] in (["size"], ["bytes"]) and "busbw" in tokens:
            if run.rows:
                runs.append(run)
                run = _RunText(first_line=lineno)
            run.table = _header(tokens, lineno)
        elif tokens[:1] == ["(B)"] and run.table is not None:
            run.table.time_scale = 1.0  # "(us)": printed in microseconds
        elif (match := _FOOTER.match(body)) is not None:
            name, value = match.groups()
            if name == "Out of bounds values":
                run.out_of_bounds = _whole(value, lineno, name)
            else:
                run.avg_busbw_gbps = _measure(value, lineno, name, _MAX_BANDWIDTH_GBPS)
                if run.table is not None:
                    runs.append(run)
                    run = _RunText(first_line=lineno + 1)
        elif run.table is not None and not commented and tokens and tokens[0].isdigit():
            run.rows.append(_row(line, run.table, lineno))
        else:
            if run.nccl_version is None and (match := _NCCL_VERSION.search(line)) is not None:
                run.nccl_version = match.group(1)
            if (run.binary is None and "Collective test concluded" not in body
                    and (match := _BINARY.search(line)) is not None):
                run.binary = match.group(1)
    if run.table is not None:
        runs.append(run)
    if not runs:
        raise ValueError("no nccl-tests result table (a '#  size  count  type ... busbw' header "
                         f"followed by rows) in {len(text.splitlines())} lines")
    return runs


def parse(text: str, op: str | None = None) -> NcclTestsRun:
    """Read the output of one nccl-tests run.

    `op` names the collective (`all_reduce` or `all_reduce_perf`) where the text does not: the
    text names it in `# Collective test starting:` (2.16.7 and later) or in a command line
    around the table. A text that holds several runs raises `ValueError`; `parse_all` reads
    them one by one.
    """
    runs = _read_runs(text)
    if len(runs) > 1:
        starts = ", ".join(str(r.table.line) for r in runs if r.table is not None)
        raise ValueError(f"the text holds {len(runs)} nccl-tests runs (tables at lines "
                         f"{starts}); parse_all reads each")
    return runs[0].finish(op)


def parse_all(text: str, op: str | None = None) -> list[NcclTestsRun]:
    """Read every run in a text that holds several (a sweep script's log, one binary after
    another); each run's collective comes from its own lines, `op` only fills in where a run
    names none."""
    return [r.finish(op) for r in _read_runs(text)]


# ---------------------------------------------------------------------------------------------
# JSON output (`-J`)

# Every field is checked for its type and range, and an error names the field: a file edited by
# hand, cut, or written by something else must never become a row with a negative size or an
# infinite bandwidth, nor a traceback.
_MAX_RANK = 1 << 24
_MAX_DEVICE = 1 << 10
_MAX_PID = 1 << 32
_MAX_TEXT = 1024
_ROOT_TEXT = logtext.compile(r"-?\d{1,12}")
"""Characters of a host, device or type name."""


def _json_float(value: Any, where: str, maximum: float = math.inf) -> float:
    """A number in 0..maximum, or NaN (the writer prints an unmeasured value as "nan")."""
    if value == "nan":
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {value!r} is not a number")
    number = float(value)
    if math.isnan(number):
        return number
    if not (math.isfinite(number) and 0 <= number <= maximum):
        bound = "" if math.isinf(maximum) else f" (at most {maximum:g})"
        raise ValueError(f"{where}: {value!r} is out of range: not a finite number >= 0{bound}")
    return number


def _json_int(value: Any, where: str, minimum: int = 0, maximum: int = _MAX_BYTES) -> int:
    """An integer in minimum..maximum; a float only where it is whole (`0.0`: the writer prints
    some counts as doubles)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{where}: {value!r} is not an integer")
    if not minimum <= value <= maximum:
        raise ValueError(f"{where}: {value!r} is out of range ({minimum}..{maximum})")
    return int(value)


def _json_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {value!r} is not a string")
    if len(value) > _MAX_TEXT:
        raise ValueError(f"{where}: a string of {len(value)} characters, more than "
                         f"{_MAX_TEXT}")
    return value


def _json_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, found {_short(value)}")
    return value


def _json_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, found {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _present(obj: dict[str, Any], key: str, default: Any) -> Any:
    """`obj[key]`, or `default` where the key is absent or null."""
    value = obj.get(key)
    return default if value is None else value


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}: no {key!r}")
    return obj[key]


def _json_result(value: Any, where: str) -> NcclTestsResult | None:
    if value is None:
        return None
    value = _json_object(value, where)
    time_key = "cpu_time" if "cpu_time" in value else "time"
    nwrong = value.get("nwrong")
    return NcclTestsResult(
        time_us=_json_float(_field(value, time_key, where), f"{where}.{time_key}"),
        algbw_gbps=_json_float(_field(value, "alg_bw", where), f"{where}.alg_bw",
                               _MAX_BANDWIDTH_GBPS),
        busbw_gbps=_json_float(_field(value, "bus_bw", where), f"{where}.bus_bw",
                               _MAX_BANDWIDTH_GBPS),
        wrong=None if nwrong is None else _json_int(nwrong, f"{where}.nwrong"),
    )


def _json_rank(device: Any, where: str) -> NcclTestsRank:
    device = _json_object(device, where)
    group, pid = device.get("group"), device.get("pid")
    return NcclTestsRank(
        rank=_json_int(_field(device, "rank", where), f"{where}.rank", maximum=_MAX_RANK),
        host=_json_text(_field(device, "hostname", where), f"{where}.hostname"),
        device=_json_int(_field(device, "device", where), f"{where}.device",
                         maximum=_MAX_DEVICE),
        bus_id=_json_text(_field(device, "device_hex", where), f"{where}.device_hex"),
        device_name=_json_text(_field(device, "device_info", where),
                               f"{where}.device_info").strip(),
        group=None if group is None else _json_int(group, f"{where}.group", maximum=_MAX_RANK),
        pid=None if pid is None else _json_int(pid, f"{where}.pid", maximum=_MAX_PID))


def _json_row(result: Any, where: str) -> NcclTestsRow:
    result = _json_object(result, where)
    root_value = _field(result, "root", where)
    if isinstance(root_value, str):  # written as the text's "%6i" field
        digits = root_value.strip()
        if digits and not _ROOT_TEXT.fullmatch(digits):
            raise ValueError(f"{where}.root: {_short(root_value)} is not an integer")
        root_value = int(digits) if digits else None
    root = None if root_value is None else _json_int(root_value, f"{where}.root", minimum=-1,
                                                      maximum=_MAX_RANK)
    return NcclTestsRow(
        size_bytes=_json_int(_field(result, "size", where), f"{where}.size"),
        count=_json_int(_field(result, "count", where), f"{where}.count"),
        dtype=_json_text(_field(result, "type", where), f"{where}.type"),
        redop=_json_text(_field(result, "redop", where), f"{where}.redop"),
        root=root,
        out_of_place=_json_result(result.get("out_of_place"), f"{where}.out_of_place"),
        in_place=_json_result(result.get("in_place"), f"{where}.in_place"))


def parse_json(text: str, op: str | None = None) -> NcclTestsRun:
    """Read the JSON file that nccl-tests writes with `-J` (format versions 1 to 3).

    The collective comes from the binary name in `args`; `op` fills in where it does not.
    Files written before 2.17.9 spell the average `average_bus_bandwidith` / `bandwidith`;
    both spellings are read. A field of the wrong type or out of range raises `ValueError`
    naming it (`results[3].out_of_place.bus_bw: -1 is out of range ...`).
    """
    try:
        doc = logtext.json_value(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a nccl-tests JSON document: line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:
        raise ValueError(f"not a nccl-tests JSON document: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError("not a nccl-tests JSON document: no 'results' list at the top level")
    args = _json_list(_present(doc, "args", []), "args")
    program = _json_text(args[0], "args[0]") if args else ""
    binary = _op_name(program) if _BINARY.search(program) else None
    if op is not None and binary is not None and _op_name(op) != binary:
        raise ValueError(f"the JSON's args name the collective {binary!r}, the caller {op!r}")
    config = _json_object(_present(doc, "config", {}), "config")
    devices = _json_list(_present(config, "devices", []), "config.devices")
    ranks = [_json_rank(device, f"config.devices[{i}]") for i, device in enumerate(devices)]
    rows = [_json_row(result, f"results[{i}]") for i, result in enumerate(doc["results"])]
    cputime = any("cpu_time" in (result.get(k) or {})
                  for result in doc["results"] for k in ("out_of_place", "in_place"))
    average_key = ("average_bus_bandwidth" if "average_bus_bandwidth" in doc
                   else "average_bus_bandwidith")
    average = _json_object(_present(doc, average_key, {}), average_key)
    avg_key = "bandwidth" if "bandwidth" in average else "bandwidith"
    avg = average.get(avg_key)
    bounds = _json_object(_present(doc, "out_of_bounds", {}), "out_of_bounds")
    out_of_bounds = bounds.get("count")
    settings = {k: str(v) for k, v in config.items() if k != "devices"}
    settings["json_version"] = str(doc.get("version"))
    code = doc.get("nccl_version")
    return NcclTestsRun(
        op=binary or (_op_name(op) if op is not None else None),
        ranks=ranks, rows=rows,
        avg_busbw_gbps=None if avg is None else _json_float(
            avg, f"{average_key}.{avg_key}", _MAX_BANDWIDTH_GBPS),
        version=None,
        nccl_version=None if code is None else _nccl_version_from_code(
            _json_int(code, "nccl_version", maximum=10**8)),
        settings=settings,
        out_of_bounds=None if out_of_bounds is None else _json_int(out_of_bounds,
                                                                   "out_of_bounds.count"),
        cputime=cputime,
    )
