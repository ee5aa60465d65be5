"""NCCL's own report of the transports it chose (`NCCL_DEBUG=INFO`, one file a rank through
`NCCL_DEBUG_FILE`), as recorded in `tests/data/nccl_debug/` (NCCL 2.28)::

    vm:565:565 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
    vm:565:565 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0

and within a node (`via P2P/CUMEM/read`, `via P2P/IPC`, `via P2P/direct pointer`,
`via SHM/direct/direct`; older NCCL writes `Channel 00 :`). Each connection names its two
ranks; given the host of every rank, `transports` tells the links between nodes from those
within one, so that a "multi-node" figure that went over NVLink, or an InfiniBand cluster
whose NCCL fell back to sockets, is visible in the run's record.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from parsers import logtext

_VIA = logtext.compile(
    r"NCCL INFO Channel \d{1,4}(?:/\d{1,4})? : (\d{1,9})\[\d{1,9}\] -> (\d{1,9})\[\d{1,9}\]"
    r"(?: \[(?:send|receive)\])? via ([A-Za-z0-9_]{1,32})(?:/([A-Za-z0-9_]{1,64}))?")
_NET = logtext.compile(r"NCCL INFO Using network ([A-Za-z0-9_]{1,64})")
#: kinds whose second part says which: NET/Socket, NET/IB; P2P/CUMEM, P2P/IPC, P2P/direct
_NAMED = ("NET", "P2P", "COLLNET")
MAX_FILE_BYTES = 16 << 20
"""A rank's NCCL report is kilobytes; a larger file is not read."""


@dataclass
class Transports:
    between_nodes: set[str] = field(default_factory=set)
    within_node: set[str] = field(default_factory=set)
    networks: set[str] = field(default_factory=set)
    """What NCCL says it uses between hosts (`Using network Socket`, `IB`)."""

    def to_dict(self) -> dict[str, list[str]]:
        return {"between_nodes": sorted(self.between_nodes),
                "within_node": sorted(self.within_node), "networks": sorted(self.networks)}


def transport_name(kind: str, which: str | None) -> str:
    """`NET/Socket`, `P2P/CUMEM`, `SHM`: the kind, and which one where the kind has several."""
    return f"{kind}/{which}" if kind in _NAMED and which else kind


def transports(text: str, hosts: Sequence[str]) -> Transports:
    """The transports of every connection in `text`, between nodes where the two ranks' hosts
    (`hosts`, by rank) differ; a connection to a rank outside `hosts` is not counted."""
    found = Transports()
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        m = _VIA.search(line)
        if m is not None:
            a, b = int(m[1]), int(m[2])
            if a >= len(hosts) or b >= len(hosts):
                continue
            name = transport_name(m[3], m[4])
            (found.within_node if hosts[a] == hosts[b] else found.between_nodes).add(name)
            continue
        n = _NET.search(line)
        if n is not None:
            found.networks.add(n[1])
    return found


def read_transports(path: str | os.PathLike[str], hosts: Sequence[str]) -> Transports:
    """`transports` of a rank's NCCL report file; `logtext.ReadError` where it cannot be read."""
    return transports(logtext.read_lines(path, max_file_bytes=MAX_FILE_BYTES).text, hosts)
