"""NCCL's settings between nodes, chosen from what the node's network is.

Each rank finds what its node offers between nodes (`node_link`): RDMA devices under
`/sys/class/infiniband` (InfiniBand or RoCE: NCCL's `NET/IB`), or only TCP sockets
(`NET/Socket`), and the speed of the interface it reaches rank 0's node through (ethtool's, as
the preflight's link floor reads it). The ranks exchange theirs, and the job's link is the
slowest node's (`job_link`): an InfiniBand link only where every node has one.

On sockets NCCL's defaults open one socket in one helper thread per connection, which leaves a
fast link mostly idle; `SOCKET_SETTINGS` is the table of what was measured and the settings
each measurement found best, keyed on the link's reported speed. On InfiniBand nothing is set:
NCCL's defaults are what was measured there.

The settings apply to GPU ranks of a job that spans more than one node only: within a node
NCCL's connections are P2P or SHM, and the socket settings would change nothing but the
threads NCCL starts. A variable the grid, the site or the job set (already in the rank's
environment) is never overridden: if either socket variable is set, neither is set here (they
bound each other), and `NCCL_NET` or `NCCL_IB_DISABLE` set to sockets makes the link a socket
link. The record (`nccl_settings`, `nccl_settings_reason`) goes into the rank's summary and
meta.json; the gradient reduction's choice (`toolkit.analysis.grad_reduce`) reads the same link.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOCKET_VARIABLES = ("NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS")
MAX_SOCKET_THREADS = 16
"""NCCL's bound on `NCCL_SOCKET_NTHREADS` (1..16)."""
MAX_SOCKETS = 64
"""NCCL's bound on `NCCL_NSOCKS_PERTHREAD * NCCL_SOCKET_NTHREADS`."""

TRANSPORT_IB = "ib"
TRANSPORT_SOCKET = "socket"


@dataclass(frozen=True)
class SocketMeasurement:
    """One measured link and the socket settings that were best on it."""

    min_speed_mbps: int
    """The row applies to socket links whose interface reports at least this speed."""
    nsocks_per_thread: int
    socket_threads: int
    busbw_defaults_gbs: float
    """All-reduce bus bandwidth between the nodes at NCCL's defaults, GB/s (low end)."""
    busbw_gbs: float
    """The same at this row's settings, GB/s (low end)."""
    measured: str
    """Where and how it was measured."""

    def __post_init__(self) -> None:
        if not (1 <= self.socket_threads <= MAX_SOCKET_THREADS
                and self.nsocks_per_thread >= 1
                and self.nsocks_per_thread * self.socket_threads <= MAX_SOCKETS):
            raise ValueError(f"{self}: NCCL takes NCCL_SOCKET_NTHREADS 1..{MAX_SOCKET_THREADS} "
                             f"and NCCL_NSOCKS_PERTHREAD * NCCL_SOCKET_NTHREADS <= {MAX_SOCKETS}")

    def environment(self) -> dict[str, str]:
        return {"NCCL_NSOCKS_PERTHREAD": str(self.nsocks_per_thread),
                "NCCL_SOCKET_NTHREADS": str(self.socket_threads)}


SOCKET_SETTINGS: tuple[SocketMeasurement, ...] = (
    SocketMeasurement(
        min_speed_mbps=10_000, nsocks_per_thread=4, socket_threads=4,
        busbw_defaults_gbs=2.4, busbw_gbs=8.1,
        measured="4 x H200, 2 network namespaces as 2 nodes of 2 GPUs joined by a veth "
                 "(reports 10000 Mb/s), NET/Socket: all-reduce of 256 MB 2.4-2.9 GB/s bus "
                 "bandwidth at NCCL's defaults, 8.1-11.3 GB/s at 4 sockets x 4 threads"),
)
"""What was measured, fastest row last: a socket link takes the last row whose
`min_speed_mbps` its speed reaches; below every row (or at an unknown speed) NCCL's defaults
stay. Add a row when a link of another speed is measured."""


def socket_row(speed_mbps: int | None,
               table: Sequence[SocketMeasurement] = SOCKET_SETTINGS) -> SocketMeasurement | None:
    """The measured row a socket link of `speed_mbps` takes (pure); None: no row applies."""
    if speed_mbps is None:
        return None
    rows = [r for r in table if speed_mbps >= r.min_speed_mbps]
    return max(rows, key=lambda r: r.min_speed_mbps) if rows else None


SYSFS = Path("/sys")


def node_link(interface: str | None, speed_mbps: int | None,
              sysfs: Path = SYSFS) -> dict[str, Any]:
    """What this node offers between nodes: `{"transport", "rdma_devices", "interface",
    "speed_mbps", "virtual"}`. `transport` is `ib` where `sysfs/class/infiniband` holds a
    device, else `socket`; `virtual` says the interface has no device behind it (a veth, a
    bridge), whose reported speed is nominal."""
    ib = sysfs / "class" / "infiniband"
    try:
        devices = sorted(p.name for p in ib.iterdir())
    except OSError:
        devices = []
    virtual = None
    if interface:
        net = sysfs / "class" / "net" / interface
        virtual = not (net / "device").exists() if net.exists() else None
    return {"transport": TRANSPORT_IB if devices else TRANSPORT_SOCKET,
            "rdma_devices": devices, "interface": interface, "speed_mbps": speed_mbps,
            "virtual": virtual}


def job_link(links: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The job's link from every rank's `node_link` (pure): InfiniBand where every node has a
    device, the slowest reported speed (None if any rank reports none), virtual if any is."""
    speeds = [link.get("speed_mbps") for link in links]
    return {"transport": TRANSPORT_IB if links and all(
                link.get("transport") == TRANSPORT_IB for link in links) else TRANSPORT_SOCKET,
            "speed_mbps": None if not speeds or None in speeds else min(
                int(s) for s in speeds if s is not None),
            "virtual": any(bool(link.get("virtual")) for link in links),
            "interfaces": sorted({str(link["interface"]) for link in links
                                  if link.get("interface")})}


def sockets_forced(env: Mapping[str, str]) -> bool:
    """Whether the environment makes NCCL use sockets where InfiniBand is there."""
    return env.get("NCCL_NET", "").lower() == "socket" or env.get("NCCL_IB_DISABLE") == "1"


def nccl_settings(link: Mapping[str, Any], env: Mapping[str, str], num_nodes: int,
                  uses_nccl: bool,
                  table: Sequence[SocketMeasurement] = SOCKET_SETTINGS) -> dict[str, Any]:
    """What to set for NCCL between nodes (pure): `{"nccl_settings": {variable: value},
    "nccl_settings_reason", "nccl_settings_kept", "link"}`; `transport` in `link` is the one
    NCCL is expected to take (sockets where the environment forces them)."""
    link = {**link}
    if link.get("transport") == TRANSPORT_IB and sockets_forced(env):
        link["transport"] = TRANSPORT_SOCKET
    kept = {k: env[k] for k in SOCKET_VARIABLES if env.get(k)}
    out: dict[str, Any] = {"nccl_settings": {}, "nccl_settings_kept": kept, "link": link}
    if not uses_nccl:
        return {**out, "nccl_settings_reason": "no NCCL: one rank, or ranks without GPUs"}
    if num_nodes <= 1:
        return {**out, "nccl_settings_reason": "one node: NCCL's connections stay within it "
                                               "(P2P, SHM)"}
    if link.get("transport") == TRANSPORT_IB:
        return {**out, "nccl_settings_reason": "InfiniBand/RoCE on every node: NCCL's "
                                               "defaults"}
    if kept:
        return {**out, "nccl_settings_reason": f"{' and '.join(kept)} set by the grid, the "
                                               "site or the job: NCCL's socket settings left "
                                               "to them"}
    speed = link.get("speed_mbps")
    row = socket_row(speed, table)
    if row is None:
        why = "no interface speed reported" if speed is None else \
            f"{speed} Mb/s is below every measured link"
        return {**out, "nccl_settings_reason": f"sockets between nodes, {why}: NCCL's "
                                               "defaults"}
    return {**out, "nccl_settings": row.environment(),
            "nccl_settings_reason": f"sockets between nodes at {speed} Mb/s (slowest node): "
                                    f"measured best at >= {row.min_speed_mbps} Mb/s "
                                    f"({row.measured})"}


def apply_nccl_settings(link: Mapping[str, Any], num_nodes: int, uses_nccl: bool,
                        environ: MutableMapping[str, str]) -> dict[str, Any]:
    """`nccl_settings` for the job's link, set in `environ`; returns the record."""
    record = nccl_settings(link, environ, num_nodes, uses_nccl)
    environ.update(record["nccl_settings"])
    return record


def link_rate(record: Mapping[str, Any],
              table: Sequence[SocketMeasurement] = SOCKET_SETTINGS) -> dict[str, Any]:
    """The rate the job's link between nodes carries, GB/s, for the gradient reduction's rule
    (pure), from an `nccl_settings` record: `{"link_rate_gbs", "link_rate_source"}`. A
    physical interface: its reported speed. A virtual one (veth): its reported speed is
    nominal, so the bus bandwidth measured on one, at the settings this record set (at NCCL's
    defaults where it set none). InfiniBand or no speed: None."""
    link = record.get("link") or {}
    speed = link.get("speed_mbps")
    if link.get("transport") != TRANSPORT_SOCKET or speed is None:
        return {"link_rate_gbs": None, "link_rate_source":
                "InfiniBand: the interface's speed is not the link's" if
                link.get("transport") == TRANSPORT_IB else "no interface speed reported"}
    if not link.get("virtual"):
        return {"link_rate_gbs": speed / 8000,
                "link_rate_source": f"the interface's speed, {speed} Mb/s"}
    row = socket_row(speed, table)
    if row is None:
        return {"link_rate_gbs": None, "link_rate_source":
                f"a virtual interface (nominal {speed} Mb/s) of no measured kind"}
    if record.get("nccl_settings") == row.environment():
        return {"link_rate_gbs": row.busbw_gbs, "link_rate_source":
                f"a virtual interface: measured at these settings ({row.measured})"}
    return {"link_rate_gbs": row.busbw_defaults_gbs, "link_rate_source":
            f"a virtual interface: measured at NCCL's defaults ({row.measured})"}


def job_nccl_settings(allgather: Any, interface: str | None, num_nodes: int, uses_nccl: bool,
                      environ: MutableMapping[str, str]) -> dict[str, Any]:
    """Every rank's part: find this node's link, exchange it (`allgather`, a collective every
    rank calls: MPI's, before any NCCL communicator), set the settings for the job's link in
    `environ`; returns the record with the link's rate (`link_rate`). The rate is agreed too
    (the slowest rank's; None if any has none): the gradient reduction's choice takes the same
    path on every rank only if every rank holds the same rate, and a rank's own settings (what
    its environment kept) could make it differ."""
    from toolkit.rank.network import interface_speed_mbps

    links = allgather(node_link(interface, interface_speed_mbps(interface)))
    record = apply_nccl_settings(job_link(links), num_nodes, uses_nccl, environ)
    record.update(link_rate(record))
    rates = allgather(record["link_rate_gbs"])
    if len(set(rates)) > 1:
        record["link_rate_gbs"] = None if None in rates else min(rates)
        record["link_rate_source"] += f"; the ranks' rates differed ({rates}): the slowest"
    return record


def job_settings(ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """meta.json's record of the run's communication settings, from every rank's summary:
    `nccl_settings` ({variable: value} set by the toolkit), `nccl_settings_reason`,
    `nccl_settings_kept` (what the grid, site or job had set), the job's `link` and its rate
    (as every rank found them together), and `grad_reduce_choice` (the workload's, where it
    records one); rank 0's, with `nccl_settings_ranks_differ` where another rank set other
    values."""
    if not ranks:
        return {}
    first = ranks[0].get("nccl_settings") or {}
    out: dict[str, Any] = {k: first.get(k) for k in (
        "nccl_settings", "nccl_settings_reason", "nccl_settings_kept", "link",
        "link_rate_gbs", "link_rate_source") if k in first}
    differ = [int(r.get("rank", i)) for i, r in enumerate(ranks)
              if (r.get("nccl_settings") or {}).get("nccl_settings") != first.get("nccl_settings")]
    if differ:
        out["nccl_settings_ranks_differ"] = differ
    choice = ranks[0].get("grad_reduce_choice")
    if choice is not None:
        out["grad_reduce_choice"] = choice
    return out
