"""Why a run failed, rank by rank: its rank files (which ranks wrote `end`, which wrote `error`,
which stopped silently) together with what the launcher said (`toolkit.results.launcher_output`).

`diagnose` gives a one-line reason and `failed_ranks`, the same facts as data::

    rank 1 (pid 8049 on host vm) was killed by signal SIGKILL after iteration 12;
    also rank 0 (pid 8048 on host vm): RuntimeError: ... Connection closed by peer ...

    [{"rank": 1, "pid": 8049, "host": "vm", "last_iteration": 12, "signal": "SIGKILL"},
     {"rank": 0, "pid": 8048, "host": "vm", "last_iteration": 12, "error": "RuntimeError: ..."}]

The causes come first, in this order: the first hang watchdog to fire (with the peers it found
silent), ranks the launcher reports dead without an error record of their own (a SIGKILL leaves
none), and, when neither exists, the ranks' own error records or, failing those, the ranks that
stopped without any record. What followed from the cause (a peer's "connection closed", a later
watchdog) comes after "also". `toolkit.launch.lifecycle` writes both into status.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.results import launcher_output as launcher
from toolkit.results.layout import RANK_FILES
from toolkit.results.runs import RankLog, read_rank_file

LOG_TAIL_BYTES = 1 << 20
"""How much of the end of the launcher's output is read: its messages come last."""
MESSAGE_CHARS = 240
"""Longest error message quoted in a reason (the event file keeps the whole one)."""
PMIX_START_CAUSE = (
    "the crash at MPI start under srun's PMIx plugin: its tree fence (PMIxCollFence tree, or "
    "mixed, Slurm's default) waits for no other node on a step of fewer nodes than TreeWidth, "
    "so a peer that had left MPI_Init sent this rank a message it could not yet take; "
    "slurm.pmix_fence: ring (the default) ends it")
"""Why a rank dies of SIGSEGV under srun before its start record, in MPI_Init."""


@dataclass
class Diagnosis:
    reason: str = ""
    """Empty when the files tell nothing about any rank."""
    failed_ranks: list[dict[str, Any]] = field(default_factory=list)


def diagnose_run(run_dir: Path, log_name: str | None) -> Diagnosis:
    """Read `run_dir`'s rank files and the tail of its launcher log, then `diagnose`."""
    logs = [read_rank_file(p) for p in sorted(run_dir.glob(RANK_FILES))]
    return diagnose(logs, read_tail(run_dir / log_name) if log_name else "")


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def diagnose(logs: list[RankLog], launcher_text: str) -> Diagnosis:
    by_rank = {log.rank: log for log in logs if log.rank >= 0}
    # the world the ranks' start records agree on: the launcher has no word on other ranks
    worlds = {log.start.get("world_size") for log in by_rank.values() if log.start}
    world = worlds.pop() if len(worlds) == 1 else None
    reports: dict[int, launcher.LauncherReport] = {}
    for report in launcher.parse(launcher_text, world if type(world) is int and world > 0
                                 else None):
        for rank in report.ranks:
            reports.setdefault(rank, report)  # the first word on a rank is the cause
    entries: dict[int, dict[str, Any]] = {}  # rank -> facts, in the order of the reason
    causes: list[str] = []
    after: list[str] = []

    def add(rank: int, facts: dict[str, Any], text: str, follows: bool) -> None:
        entries.setdefault(rank, {"rank": rank, **_identity(by_rank.get(rank))}).update(facts)
        if text:
            (after if follows else causes).append(text)

    hangs = sorted((e for log in by_rank.values() for e in log.errors[:1]
                    if isinstance(e.get("watchdog"), dict)), key=_time)
    if hangs:  # the first watchdog to fire saw the hang; the peers it found silent caused it
        first = hangs[0]
        add(int(first["rank"]), {"error": first.get("message"), "watchdog": first["watchdog"]},
            f"{_label(int(first['rank']), by_rank)}: {first.get('message')}", False)
        for quiet in first["watchdog"].get("silent_ranks") or []:
            if isinstance(quiet, dict) and isinstance(quiet.get("rank"), int):
                add(quiet["rank"], {"silent_s": quiet.get("silent_s")}, "", False)
    crash = _one_crash(reports, launcher_text)
    for rank, report in reports.items():
        log = by_rank.get(rank)
        if log is not None and log.errors:
            continue  # its own record says more than the launcher
        facts: dict[str, Any] = {"launcher": report.detail}
        where = ""
        if report.kind == launcher.KIND_SIGNAL:
            facts["signal"] = report.signal
            if crash is not None and report.signal in launcher.FAULT_SIGNALS:
                facts["python_stack"] = list(crash.frames)
                where = f" ({crash.describe()})"
            if _pmix_start_crash(report, log, crash, launcher_text):
                facts["cause"] = "pmix_start"
                where += f"; likely {PMIX_START_CAUSE}"
        elif report.kind in (launcher.KIND_EXIT, launcher.KIND_ABORT):
            facts["exit_code"] = report.exit_code
        # after a watchdog fired, the launcher only reports how the abort ended each rank
        add(rank, facts, "" if rank in entries else
            f"{_label(rank, by_rank, report.host)} {report.describe()}{_when(log)}{where}",
            bool(hangs))
    errors = [(log.rank, log.errors[0]) for log in by_rank.values()
              if log.errors and log.rank not in entries]
    for rank, err in sorted(errors, key=lambda x: _time(x[1])):
        message = _first_line(str(err.get("message")))
        add(rank, {"error": message}, f"{_label(rank, by_rank)}: {message}", bool(causes))
    if not causes:
        for log in sorted(by_rank.values(), key=lambda x: x.rank):
            if log.end is None and not log.errors:
                add(log.rank, {"stopped": "without an end or error record"},
                    f"{_label(log.rank, by_rank)} stopped{_when(log)} without an end or error "
                    "record", False)
    reason = "; ".join(causes + (["also " + "; ".join(after)] if after else []))
    return Diagnosis(reason, list(entries.values()))


def _one_crash(reports: dict[int, launcher.LauncherReport],
               text: str) -> launcher.PythonCrash | None:
    """The fault handler's stack, when exactly one rank died of a signal it reports: the log
    does not say which rank printed a stack, so with several such ranks none is named."""
    crashed = [r for r in reports.values()
               if r.kind == launcher.KIND_SIGNAL and r.signal in launcher.FAULT_SIGNALS]
    if len(crashed) != 1 or len(crashed[0].ranks) != 1:
        return None
    crashes = launcher.python_crashes(text)
    return crashes[0] if len(crashes) == 1 else None


def _pmix_start_crash(report: launcher.LauncherReport, log: RankLog | None,
                      crash: launcher.PythonCrash | None, text: str) -> bool:
    """A rank srun reports dead of SIGSEGV before its start record, while importing (mpi4py's
    MPI_Init) or in a call through an empty pointer: how a message that reaches a rank still
    in MPI_Init's first fence kills it (`PMIX_START_CAUSE`)."""
    if report.launcher != "srun" or report.signal != "SIGSEGV":
        return False
    if log is not None and log.start is not None:
        return False
    return (crash is not None and crash.in_import) or launcher.null_fault(text)


def _time(record: dict[str, Any]) -> float:
    t = record.get("time_s")
    return float(t) if isinstance(t, (int, float)) else float("inf")


def _identity(log: RankLog | None) -> dict[str, Any]:
    start = (log.start if log is not None else None) or {}
    return {"pid": start.get("pid"), "host": start.get("host"),
            "last_iteration": max(log.iterations) if log is not None and log.iterations
            else None}


def _label(rank: int, by_rank: dict[int, RankLog], host: str | None = None) -> str:
    """`rank 1 (pid 1234 on host vm)`, from its start record (else the launcher's host)."""
    ident = _identity(by_rank.get(rank))
    host = ident["host"] or host
    if ident["pid"] is not None and host:
        return f"rank {rank} (pid {ident['pid']} on host {host})"
    return f"rank {rank} (host {host})" if host else f"rank {rank}"


def _when(log: RankLog | None) -> str:
    if log is None or log.start is None:
        return " before it wrote its start record"
    if not log.iterations and log.progress:
        return (f" after its program reported {log.progress} step(s) (their iterations are "
                "written when it exits)")
    if not log.iterations:
        return " before its first iteration"
    return f" after iteration {max(log.iterations)}"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."
