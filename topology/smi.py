"""Parse the text of `nvidia-smi topo -m` into a `NodeTopology`.

What belongs here: the pure text parser, which reads the matrix by its header and never by
column position, so every driver generation gives the same structure:

- older drivers: space-separated, NICs named by device (`mlx5_0`), only `CPU Affinity`;
- newer drivers: tab-separated, header underlined with ANSI codes, `NUMA Affinity` and
  `GPU NUMA ID` columns, NICs named `NIC0`... with a `NIC Legend:` block (`NIC0: mlx5_0`);
- large nodes: multi-range CPU lists (`0-47,96-143`), several NICs at PIX/PXB.

Running the command lives in `topology.sources`; the data model in `topology.model`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topology.model import Gpu, Link, LinkType, Nic, NodeTopology, parse_cpu_list

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_RE = re.compile(r"GPU(\d+)")
_DEVICE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_NIC_LEGEND_RE = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")

CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"
# Known trailing columns; they hold spaces, so the header cannot simply be split on whitespace.
_ATTRIBUTE_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)
_ATTRIBUTE_RE = re.compile("|".join(re.escape(c) for c in _ATTRIBUTE_COLUMNS))
_UNKNOWN = {"N/A", "n/a", "-"}


@dataclass(frozen=True)
class _Header:
    """The matrix header, split into device columns and trailing attribute columns."""

    line_no: int
    """1-based line number of the header in the input."""
    devices: tuple[str, ...]
    """Device column names in order (`GPU0`, ..., `NIC0` or `mlx5_0`)."""
    attributes: tuple[str, ...]
    """Attribute column names in order (`CPU Affinity`, `NUMA Affinity`, ...)."""


def strip_ansi(text: str) -> str:
    """Remove terminal escape codes (the newer drivers underline the header)."""
    return _ANSI_RE.sub("", text)


def parse_topo_matrix(text: str, *, source: str = "nvidia-smi topo -m") -> NodeTopology:
    """Parse `nvidia-smi topo -m` output. ValueError naming the line and column when it can't.

    Text before the header (a shell prompt, a report heading) and after the matrix (legends) is
    allowed; the `NIC Legend:` block, when present, maps matrix names to device names.
    """
    lines = strip_ansi(text).replace("\r\n", "\n").split("\n")
    header = _find_header(lines)
    rows = _read_rows(lines, header)
    nic_devices = _read_nic_legend(lines)

    gpu_columns = [d for d in header.devices if _GPU_RE.fullmatch(d)]
    nic_columns = [d for d in header.devices if not _GPU_RE.fullmatch(d)]
    if not gpu_columns:
        raise ValueError(f"line {header.line_no}: header has no GPU<n> column")
    nics = tuple(Nic(name=n, device=nic_devices.get(n, n)) for n in nic_columns)
    device_of = {nic.name: nic.device for nic in nics}

    gpus: list[Gpu] = []
    for column in gpu_columns:
        if column not in rows:
            raise ValueError(f"line {header.line_no}: column {column!r} has no matrix row")
        line_no, links, attributes = rows[column]
        index = _gpu_index(column)
        gpu_links = {_gpu_index(other): links[other] for other in gpu_columns if other != column}
        nic_links = {device_of[n]: links[n] for n in nic_columns}
        gpus.append(
            Gpu(
                index=index,
                cpus=_cpus(attributes.get(CPU_AFFINITY), line_no),
                numa_node=_numa(attributes.get(NUMA_AFFINITY), line_no),
                gpu_links=gpu_links,
                nic_links=nic_links,
            )
        )
    return NodeTopology(gpus=tuple(sorted(gpus, key=lambda g: g.index)), nics=nics, source=source)


def _gpu_index(column: str) -> int:
    match = _GPU_RE.fullmatch(column)
    assert match is not None  # callers pass GPU columns only
    return int(match.group(1))


def _find_header(lines: list[str]) -> _Header:
    # The header is the first line whose first word is GPU0 and that is not itself a row
    # (a row's second cell is the `X` of its diagonal).
    for i, line in enumerate(lines):
        words = line.split()
        if words and words[0] == "GPU0" and (len(words) < 2 or words[1] != "X"):
            return _split_header(line, i + 1)
    raise ValueError(
        "no `nvidia-smi topo -m` header found: expected a line starting with GPU0 "
        "(e.g. 'GPU0  GPU1  CPU Affinity')"
    )


def _split_header(line: str, line_no: int) -> _Header:
    found = _ATTRIBUTE_RE.search(line)
    device_part = line[: found.start()] if found else line
    devices = tuple(device_part.split())
    for column in devices:
        if not _DEVICE_RE.fullmatch(column):
            raise ValueError(f"line {line_no}: header column {column!r} is not a device name")
    if len(set(devices)) != len(devices):
        raise ValueError(f"line {line_no}: header repeats a device column: {' '.join(devices)}")
    attributes: list[str] = []
    rest = line[found.start() :] if found else ""
    while rest.strip():
        rest = rest.lstrip()
        known = _ATTRIBUTE_RE.match(rest)
        if known:
            attributes.append(known.group(0))
            rest = rest[known.end() :]
        else:
            # A column a future driver adds: keep its name so the row cells still line up.
            name = re.split(r"\t| {2,}", rest, maxsplit=1)[0]
            attributes.append(name.strip())
            rest = rest[len(name) :]
    return _Header(line_no=line_no, devices=devices, attributes=tuple(attributes))


_Row = tuple[int, dict[str, Link], dict[str, str]]


def _read_rows(lines: list[str], header: _Header) -> dict[str, _Row]:
    rows: dict[str, _Row] = {}
    n_devices = len(header.devices)
    for i in range(header.line_no, len(lines)):
        line_no = i + 1
        line = lines[i]
        words = line.split()
        if not words:
            if rows:
                break
            continue
        if words[0].rstrip(":") in ("Legend", "NIC"):
            break
        label = words[0]
        if label not in header.devices:
            raise ValueError(
                f"line {line_no}: row {label!r} is not one of the header's devices "
                f"({', '.join(header.devices)})"
            )
        if label in rows:
            raise ValueError(f"line {line_no}: second row for {label!r}")
        cells = words[1:]
        is_gpu = _GPU_RE.fullmatch(label) is not None
        expected = n_devices + len(header.attributes)
        # NIC rows carry no affinity cells; GPU rows must carry all of them.
        allowed = {expected} if is_gpu else {n_devices, expected}
        if len(cells) not in allowed:
            raise ValueError(
                f"line {line_no}: row {label!r} has {len(cells)} cells, expected "
                f"{n_devices} device columns + {len(header.attributes)} attribute columns "
                f"({', '.join(header.attributes) or 'none'})"
            )
        links: dict[str, Link] = {}
        for column, cell in zip(header.devices, cells[:n_devices], strict=True):
            try:
                link = Link.parse(cell)
            except ValueError as err:
                where = f"line {line_no}, row {label!r}, column {column!r}"
                raise ValueError(f"{where}: {err}") from None
            if (link.type is LinkType.SELF) != (column == label):
                raise ValueError(
                    f"line {line_no}, row {label!r}, column {column!r}: "
                    f"{cell!r} where the diagonal (X) {'is' if column == label else 'is not'}"
                )
            links[column] = link
        attributes = dict(zip(header.attributes, cells[n_devices:], strict=False))  # NIC rows: none
        rows[label] = (line_no, links, attributes)
    if not rows:
        raise ValueError(f"line {header.line_no}: header is not followed by any matrix row")
    return rows


def _read_nic_legend(lines: list[str]) -> dict[str, str]:
    legend: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_legend = True
            continue
        if in_legend:
            match = _NIC_LEGEND_RE.fullmatch(line)
            if match:
                legend[match.group(1)] = match.group(2)
            elif line.strip():
                in_legend = False
    return legend


def _cpus(cell: str | None, line_no: int) -> frozenset[int]:
    if cell is None or cell in _UNKNOWN:
        return frozenset()
    try:
        return parse_cpu_list(cell)
    except ValueError as err:
        raise ValueError(f"line {line_no}, column {CPU_AFFINITY!r}: {err}") from None


def _numa(cell: str | None, line_no: int) -> int | None:
    if cell is None or cell in _UNKNOWN:
        return None
    try:
        nodes = parse_cpu_list(cell)  # same list syntax: `0`, or `0-1` on odd platforms
    except ValueError:
        raise ValueError(
            f"line {line_no}, column {NUMA_AFFINITY!r}: {cell!r} is not a NUMA node or N/A"
        ) from None
    # A GPU spanning several NUMA nodes has no single home node to bind to.
    return next(iter(nodes)) if len(nodes) == 1 else None
