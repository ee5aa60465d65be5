"""Runs whose ranks did not have their CPUs to themselves: their figures measure contention, not
the benchmark. Pure; the spans come from the rank files (`toolkit.results.runs.rank_spans`).

A rank's span is where and when it ran: the host (and the machine, by its kernel's boot id:
host names on one machine, as namespaced nodes are, share its CPUs), the CPUs it could run on
(its affinity, or unknown: every CPU of the host, as an unbound rank may use any), and the
wall-clock times of its `start` and `end` records. A run is oversubscribed when

- its ranks on one host outnumber the CPUs they may run on together, or
- one of its ranks overlapped in time, on the same host and on a CPU they could both use, a rank
  of another run (two array tasks of one grid on the same cores; a node shared with another
  job of the same results).

Each flagged run gets one line per reason, naming the host, the CPUs and the other run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topology.model import format_cpu_list

OVERSUBSCRIBED = "oversubscribed"
"""The run column (runs.csv, the store) that says why a run was oversubscribed; '' if not."""

MIN_OVERLAP_S = 0.5
"""Spans that overlap by less than this are not counted: one run starting as another exits."""


@dataclass(frozen=True)
class RankSpan:
    """Where and when one rank ran."""

    host: str
    start_s: float
    end_s: float
    cpus: frozenset[int] | None = None
    """The CPUs the rank could run on; None when unknown (an unbound rank: the whole host)."""
    host_cpus: int | None = None
    """CPUs online on the host; None when unknown."""
    machine: str | None = None
    """The kernel the rank ran under (its boot id): ranks of several host names on one machine
    (nodes in network namespaces, containers) share its CPUs. None: the host name tells."""

    @property
    def key(self) -> str:
        """What ranks that share CPUs have in common: the machine, else the host."""
        return f"machine {self.machine}" if self.machine else f"host {self.host}"


def _cpus(span: RankSpan) -> frozenset[int] | None:
    if span.cpus is not None:
        return span.cpus
    return frozenset(range(span.host_cpus)) if span.host_cpus else None


def _shared(a: RankSpan, b: RankSpan) -> frozenset[int] | None:
    """The CPUs both spans could use (None: unknown, so possibly all); empty when none."""
    ca, cb = _cpus(a), _cpus(b)
    if ca is None:
        return cb
    if cb is None:
        return ca
    return ca & cb


def _cpu_text(cpus: frozenset[int] | None) -> str:
    return f"CPUs {format_cpu_list(sorted(cpus))}" if cpus else "CPUs not recorded"


def _where(hosts: Iterable[str]) -> str:
    """`node1` or, for host names that share one machine, `node1, node2 (one machine)`."""
    names = sorted(set(hosts), key=_natural)
    if len(names) == 1:
        return names[0]
    shown = names if len(names) <= 4 else [*names[:3], f"... {names[-1]}"]
    return f"{', '.join(shown)} ({len(names)} host names, one machine)"


def _natural(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem):] or 0)


def crowded_hosts(spans: Sequence[RankSpan]) -> list[str]:
    """One line per host (or machine of several host names) where the run's own ranks
    outnumber the CPUs they may run on."""
    lines = []
    by_key: dict[str, list[RankSpan]] = {}
    for s in spans:  # one pass: a run of 512 nodes has 512 hosts and 4,096 spans
        by_key.setdefault(s.key, []).append(s)
    for key in sorted(by_key):
        here = by_key[key]
        known = [c for s in here if (c := _cpus(s)) is not None]
        if len(known) < len(here):
            continue
        cpus = frozenset().union(*known)
        if len(here) > len(cpus):
            lines.append(f"{len(here)} ranks on {_where(s.host for s in here)} share "
                         f"{len(cpus)} CPU(s) ({format_cpu_list(sorted(cpus))})")
    return lines


def oversubscribed(runs: Mapping[str, Sequence[RankSpan]]) -> dict[str, list[str]]:
    """Run label -> why it was oversubscribed, for the runs that were (see the module)."""
    reasons: dict[str, list[str]] = {}
    for label, spans in runs.items():
        for line in crowded_hosts(spans):
            reasons.setdefault(label, []).append(line)
    flat = sorted(((s, label) for label, spans in runs.items() for s in spans),
                  key=lambda x: (x[0].key, x[0].start_s))
    seen: set[tuple[str, str, str]] = set()
    for i, (a, la) in enumerate(flat):
        for b, lb in flat[i + 1:]:
            if b.key != a.key or b.start_s >= a.end_s:
                break  # sorted by machine and start: no later span overlaps `a`
            overlap = min(a.end_s, b.end_s) - b.start_s
            if la == lb or overlap < MIN_OVERLAP_S:
                continue
            shared = _shared(a, b)
            if shared is not None and not shared:
                continue
            for mine, other in ((la, lb), (lb, la)):
                if (mine, other, a.key) in seen:
                    continue
                seen.add((mine, other, a.key))
                reasons.setdefault(mine, []).append(
                    f"ran at the same time as {other} on {_where((a.host, b.host))} "
                    f"({_cpu_text(shared)}, {overlap:.1f} s overlap)")
    return reasons


def spans_of(records: Iterable[Mapping[str, object]]) -> list[RankSpan]:
    """RankSpans from plain records (`host`, `start_s`, `end_s`, `cpus` as a list of ints or
    None, `host_cpus`, `machine`), skipping the incomplete."""
    out = []
    for r in records:
        host, start, end = r.get("host"), r.get("start_s"), r.get("end_s")
        if not isinstance(host, str) or not isinstance(start, (int, float)) or \
                not isinstance(end, (int, float)) or end < start:
            continue
        cpus = r.get("cpus")
        host_cpus = r.get("host_cpus")
        machine = r.get("machine")
        out.append(RankSpan(host, float(start), float(end),
                            frozenset(int(c) for c in cpus)
                            if isinstance(cpus, (list, tuple, frozenset, set)) else None,
                            host_cpus if isinstance(host_cpus, int) else None,
                            machine if isinstance(machine, str) and machine else None))
    return out
