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

A run's GPUs are shared (`gpus_shared`) where its node told its ranks so (the local
cluster's nodes taking turns on one machine's GPUs), or where two of its ranks on one machine
used the same GPU.

Apart from these, `other_load` and `crowded_by_others` tell a run measured while processes that
are no rank of it (another user's job, a build, a test suite) took a saturated host's CPU time,
from each rank's `host_load` record (the host's busy time from /proc/stat less the ranks' own
CPU time); `toolkit.results.runs` writes it to its own column (`host_crowded`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topology.model import format_cpu_list

OVERSUBSCRIBED = "oversubscribed"
"""The run column (runs.csv, the store) that says why a run was oversubscribed; '' if not."""

HOST_OTHERS_PCT = "host_others_pct"
"""The run column: the largest share of a host's CPU time (%) that processes other than the
run's ranks took while they trained there (`other_load`)."""
HOST_CROWDED = "host_crowded"
"""The run column that says why other processes crowded a run (`crowded_by_others`); '' if
they did not."""

GPUS_SHARED_VARIABLE = "TRAINBENCH_GPUS_SHARED"
"""Set for a rank whose node shares its GPUs with other nodes (the local cluster's `up
--share-gpus`): why, in words. Each rank's summary keeps it (`gpus_shared`)."""

GPUS_SHARED = "gpus_shared"
"""meta.json's list of why the run's GPUs were not its own (`gpus_shared`); the run's
OVERSUBSCRIBED column says it too, so its figures carry the contention mark."""

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


SATURATED = 0.9
"""A host busy for this share of its CPU time while a run trained was saturated..."""
OTHERS = 0.1
"""...and where processes other than the run's took this share of it, the run did not have the
CPUs it could have used: crowded."""


def other_load(records: Sequence[Mapping[str, object]]) -> tuple[float, float] | None:
    """(busy share, other processes' share) of one host's CPU time while one run's ranks on it
    trained (`records`: their `host_load`): the host's busy time as its longest-measuring rank
    saw it, less every rank's own CPU time, over that rank's window x the host's CPUs. None
    where a record lacks a figure."""
    usable = []
    for r in records:
        window, busy, own, cpus = (r.get("window_s"), r.get("host_busy_cpu_s"),
                                   r.get("own_cpu_s"), r.get("host_cpus"))
        if isinstance(window, (int, float)) and window > 0 and isinstance(busy, (int, float)) \
                and isinstance(own, (int, float)) and isinstance(cpus, int) and cpus > 0:
            usable.append((float(window), float(busy), float(own), cpus))
    if not usable or len(usable) < len(records):
        return None
    window, busy, _, cpus = max(usable)
    capacity = window * cpus
    others = max(busy - sum(own for _, _, own, _ in usable), 0.0)
    return min(busy / capacity, 1.0), min(others / capacity, 1.0)


def crowded_by_others(host: str, shares: tuple[float, float] | None,
                      during: str = "its ranks trained") -> str | None:
    """Why other processes crowded the run on `host`, where its shares (`other_load`) pass
    the rule; None where they do not."""
    if shares is None:
        return None
    busy, others = shares
    if busy < SATURATED or others < OTHERS:
        return None
    return (f"other processes took {100 * others:.0f}% of host {host}'s CPU time while "
            f"{during} (the host {100 * busy:.0f}% busy: rule, busy >= "
            f"{100 * SATURATED:.0f}% and others >= {100 * OTHERS:.0f}%)")


def crowded_while(records: Sequence[tuple[str, Mapping[str, object]]]) -> str | None:
    """Why other processes crowded a host while one figure was measured, or None: `records`
    are (host, `host_load` record with the machine's boot id as `machine`) of every rank that
    measured it; the ranks on one machine (host names in namespaces of one machine share its
    CPUs) are added up as a run's are (`other_load`, `crowded_by_others`)."""
    by_machine: dict[str, list[Mapping[str, object]]] = {}
    hosts: dict[str, set[str]] = {}
    for host, record in records:
        machine = record.get("machine")
        key = machine if isinstance(machine, str) and machine else host
        by_machine.setdefault(key, []).append(record)
        hosts.setdefault(key, set()).add(host)
    for key in sorted(by_machine):
        why = crowded_by_others(_where(hosts[key]), other_load(by_machine[key]),
                                "it was measured")
        if why:
            return why
    return None


def gpus_shared(ranks: Sequence[Mapping[str, object]]) -> list[str]:
    """Why a run's GPUs were not its own, from its ranks' summaries (as meta.json's `ranks`
    holds them: `rank`, `host`, `machine`, `pci_bus_id`, `gpus_shared`); [] when they were.
    """
    reasons = list(dict.fromkeys(str(r[GPUS_SHARED]) for r in ranks if r.get(GPUS_SHARED)))
    users: dict[tuple[str, str], list[str]] = {}
    for r in ranks:
        machine, bus = r.get("machine"), r.get("pci_bus_id")
        if machine and bus:
            users.setdefault((str(machine), str(bus).lower()), []).append(
                f"{r.get('rank')} ({r.get('host')})")
    reasons += [f"ranks {', '.join(who)} used the same GPU {bus} of one machine"
                for (_, bus), who in users.items() if len(who) > 1]
    return reasons
