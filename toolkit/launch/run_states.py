"""Where every run of a results directory stands: finished, failed, queued or running in Slurm,
lost or unknown, from its files, the ledger of submitted jobs and squeue; and the live view
that `toolkit.status --watch` and `toolkit.submit --wait` print.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from toolkit.launch import job_ledger
from toolkit.launch.lifecycle import JOB_FILE, LOG_FILE, describe_owner, local_owner_alive
from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, SlurmClient
from toolkit.results.layout import (
    CASE_FILE,
    CaseDir,
    cases_dir,
    job_log,
    load_case_file,
    read_json,
)
from toolkit.results.preflight import stopped_by_preflight
from toolkit.spec.visible import visible

STATES = ("finished", "failed", "timeout", "running", "pending", "cancelled", "lost", "preflight",
          "unknown",
          "not submitted")
DONE_STATES = frozenset({"finished", "failed", "timeout", "cancelled", "lost", "preflight"})


@dataclass(frozen=True)
class RunState:
    case_id: str
    repeat: int
    state: str
    reason: str = ""
    log: str = ""
    job: str = ""


def _log_of(root: Path, m: job_ledger.JobLedger, entry: job_ledger.Entry) -> Path:
    """The job log: `slurm-<job>[_<task>].out` beside the script that was submitted."""
    script = m.scripts.get(entry.job_id)  # every submit record names its script
    folder = Path(script).parent if script else cases_dir(root) / entry.case_id
    return job_log(folder, entry.job_id, entry.task)


def run_states(root: Path, slurm: SlurmClient | None) -> tuple[list[RunState], str]:
    """Every run's state, and a note on what the scheduler could not tell."""
    m = job_ledger.load(root)
    note = ""
    if m.unconfirmed and slurm is not None:
        try:  # what an sbatch that failed without an answer queued all the same
            m = job_ledger.with_tagged(m, slurm)
        except SchedulerError as e:
            note = f"squeue failed ({e.message}); "
    latest = m.latest()
    unsettled = {(cid, r) for i in m.unconfirmed.values() for _, cid, reps in i.tasks
                 for r in reps}
    queue: dict[str, tuple[str, str]] | None = {}
    acct: dict[str, tuple[str, str]] | None = None
    ids = [e.slurm_id for e in latest.values()]
    if slurm is None and ids:
        queue = None
        note = "no Slurm client here (squeue not found); runs submitted to Slurm are unknown"
    elif slurm is not None and ids:
        try:
            queue = slurm.queue(ids)
        except SchedulerError as e:
            queue = None
            note = f"squeue failed ({e.message}); runs without a status are unknown"
        acct = slurm.accounting(ids) if queue is not None else None
    wanted: dict[str, set[int]] = {}
    for case_json in sorted(cases_dir(root).glob(f"*/{CASE_FILE}")):
        try:
            cid, case = load_case_file(case_json)
        except (OSError, ValueError, KeyError) as err:
            note += f"; {case_json}: unreadable ({err})"
            continue
        cdir = CaseDir(root, cid)
        wanted[cid] = set(range(case.repeats)) | set(cdir.repeats_present())
    for cid, r in set(latest) | unsettled:
        wanted.setdefault(cid, set()).add(r)
    out = []
    for cid in sorted(wanted):
        cdir = CaseDir(root, cid)
        for r in sorted(wanted[cid]):
            if (cid, r) in unsettled and (cid, r) not in latest and \
                    cdir.run_status(r) is None:
                out.append(RunState(cid, r, "unknown", "being submitted, or its sbatch failed "
                                    "without an answer and Slurm lists no job under its tag: "
                                    "the next submit settles which"))
                continue
            out.append(_state(root, m, cdir, r, latest.get((cid, r)), queue, acct))
    return out, note.strip("; ")


NEVER_STARTED = ("nothing ran or was submitted for it: the submit stopped before it, or the "
                 "grid was not submitted again since it was planned")


def runs_not_run(root: Path, ended: Mapping[tuple[str, int], str],
                 slurm: Callable[[], SlurmClient | None]) -> tuple[list[RunState], str]:
    """The planned runs of `root` that gave no row that ended (`ended`: (case id, repeat) ->
    the status of each run read, `incomplete` for one without a status), each with its state
    and why (`run_states`); and a note on what the scheduler could not tell. `slurm()` gives
    the client, asked only when some run did not end."""
    planned: set[tuple[str, int]] = set()
    for case_json in sorted(cases_dir(root).glob(f"*/{CASE_FILE}")):
        try:
            cid, case = load_case_file(case_json)
        except (OSError, ValueError, KeyError):
            continue  # collect lists it as not read
        planned |= {(cid, r) for r in range(case.repeats)}
    if all(ended.get(run, "incomplete") != "incomplete" for run in planned):
        return [], ""
    states, note = run_states(root, slurm())
    out = [s if s.reason or s.state != "not submitted" else
           RunState(s.case_id, s.repeat, s.state, NEVER_STARTED)
           for s in states if ended.get((s.case_id, s.repeat), "incomplete") == "incomplete"]
    return out, note


def _state(root: Path, m: job_ledger.JobLedger, cdir: CaseDir, r: int,
           entry: job_ledger.Entry | None,
           queue: dict[str, tuple[str, str]] | None, acct: dict[str, tuple[str, str]] | None
           ) -> RunState:
    cid = cdir.case_id
    run_dir = cdir.run_dir(r)
    status = cdir.run_status(r)
    job = entry.slurm_id if entry else ""
    if status is not None:
        verdict = status.get("status")
        reason = str(status.get("reason", verdict))
        if verdict == "ok":
            return RunState(cid, r, "finished", job=job)
        live = (queue or {}).get(job, ("", ""))[0] if entry is not None else ""
        if status.get("requeued") and live in ACTIVE_STATES:
            # Slurm requeued the job after this attempt (node failure, preemption).
            # The attempt is over (its status is written): until the job runs again it waits,
            # whatever Slurm calls the in-between (REQUEUED, COMPLETING, REQUEUE_HOLD).
            state = "running" if live in ("RUNNING", "CONFIGURING") else "pending"
            return RunState(cid, r, state, f"requeued: {reason}", str(_log_of(root, m, entry))
                            if entry else "", job)
        state = verdict if verdict in ("timeout", "cancelled") else "failed"
        return RunState(cid, r, state, reason, str(run_dir / str(status.get("log", LOG_FILE))),
                        job)
    owner = _owner(run_dir)
    slurm_owned = bool(owner and owner.get("slurm_job_id"))
    if owner is not None and "claim" in owner and (entry is None or not slurm_owned):
        # Its job script's process, where this host can see it: for a run started outside
        # Slurm (the local executor, run_local.sh), or a Slurm job the ledger does not know.
        alive = local_owner_alive(owner)
        who = describe_owner(owner)
        if alive:
            return RunState(cid, r, "running", who, str(run_dir / LOG_FILE), job)
        if alive is False and entry is None:
            return RunState(cid, r, "lost", f"{who} ended without writing a status",
                            str(run_dir / LOG_FILE))
        if alive is None and entry is None and not slurm_owned:
            return RunState(cid, r, "running", f"{who}; cannot be checked from this host",
                            str(run_dir / LOG_FILE))
    if entry is None:
        if (run_dir / JOB_FILE).exists():
            return RunState(cid, r, "running", "started outside the scheduler record",
                            str(run_dir / LOG_FILE))
        return RunState(cid, r, "not submitted")
    log = str(_log_of(root, m, entry))
    if m.is_cancelled(entry):
        return RunState(cid, r, "cancelled", f"job {job} cancelled by toolkit.cancel", log, job)
    if queue is None:
        return RunState(cid, r, "unknown", "Slurm did not answer; the job may still run", log,
                        job)
    state, why = queue.get(job, ("", ""))
    if state == "PENDING":
        return RunState(cid, r, "pending", why, log, job)
    if state in ACTIVE_STATES:
        return RunState(cid, r, "running", state.lower(), log, job)
    stopped = stopped_by_preflight(cdir.path, str(job))
    if stopped:
        return RunState(cid, r, "preflight", stopped, log, job)
    ended = (acct or {}).get(job, (state, ""))[0] or state
    if ended in ("TIMEOUT", "CANCELLED"):
        # Killed before its script could write a status; accounting names how.
        return RunState(cid, r, ended.lower(), f"job {job} ended {ended} (sacct) without "
                        "writing a status", log, job)
    if ended:
        reason = f"job {job} ended {ended} without writing a status"
    else:
        reason = f"job {job} left the queue without writing a status (time limit, node " \
                 "failure or killed; accounting is off, so Slurm cannot say which)"
    return RunState(cid, r, "lost", reason, log, job)


def _owner(run_dir: Path) -> dict[str, Any] | None:
    """The owner an attempt's job.json records, or None."""
    try:
        data = read_json(run_dir / JOB_FILE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def counts(states: list[RunState]) -> Counter[str]:
    return Counter(s.state for s in states)


def render(root: Path, states: list[RunState], note: str, console: Console) -> None:
    """The counts per state, then one line per failed or lost run with its reason and log.

    The title and the runs are lines, not table cells: a table folds what does not fit its
    column, and a path or case id split over two lines cannot be copied. Reasons quote programs
    (gloo's "[/path:545]" reads as rich markup): printed as plain text. They and the names come
    from the run files, whose log lines may hold escape sequences: every control character is
    shown as an escape (`visible`), never sent to the terminal."""
    c = counts(states)
    console.print(f"{visible(root)}: {len(states)} runs", markup=False, soft_wrap=True)
    table = Table()
    table.add_column("state", no_wrap=True)
    table.add_column("runs", no_wrap=True, justify="right")
    for st in STATES:
        if c.get(st):
            table.add_row(st, str(c[st]))
    console.print(table)
    bad = [s for s in states if s.state in ("failed", "timeout", "lost", "preflight")]
    if bad:
        console.print("failed and lost runs:")
    for s in bad:
        job = f" (job {s.job})" if s.job else ""
        log = f" (log: {s.log})" if s.log and s.log not in s.reason else ""  # said once
        console.print(visible(f"  {s.state} {s.case_id} r{s.repeat}{job}: {s.reason}{log}"),
                      markup=False, soft_wrap=True)
    for st in ("pending", "running"):
        # Why runs wait, and which running runs are a requeued job's second go.
        waiting = [s for s in states if s.state == st and s.reason
                   and (st == "pending" or s.reason.startswith("requeued: "))]
        if waiting:
            reasons = Counter(s.reason for s in waiting)
            # Reasons quote programs (gloo's "[/path:545]" reads as markup): plain text.
            console.print(visible(f"{st}: " + ", ".join(f"{n} x {why}"
                                                        for why, n in reasons.items())),
                          markup=False, soft_wrap=True)
    if note:
        console.print(visible(f"note: {note}"), soft_wrap=True, markup=False)


def watch(root: Path, slurm: SlurmClient | None, console: Console, interval_s: float = 2.0,
          timeout_s: float | None = None) -> int:
    """Redraw until nothing is pending or running; 0 when every run finished."""
    started = time.monotonic()
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("runs", total=None)
        while True:
            states, note = run_states(root, slurm)
            c = counts(states)
            done = sum(c[s] for s in DONE_STATES)
            desc = " ".join(f"{st}={c[st]}" for st in STATES if c.get(st))
            progress.update(bar, total=len(states), completed=done, description=desc)
            if not c.get("running") and not c.get("pending") and not c.get("unknown"):
                break
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                progress.stop()
                console.print(f"still running after {timeout_s:.0f} s; stopped watching")
                return 1
            time.sleep(interval_s)
    render(root, states, note, console)
    return 0 if c.get("finished", 0) == len(states) else 1
