"""The start and end of one run (one repeat of one case), shared by every way a run is started:
the local executor, the Slurm batch scripts and the scripts a person re-runs by hand.

``begin`` refuses to touch a finished run, and records who runs the new attempt: its owner
(``job.json``: host, the pid of the job script and that process's start time, the Slurm job
and array task, and a random claim). One run has one owner: a ``begin`` for a repeat whose
owner is still alive (same host: the pid runs with the recorded start time, so a reused pid is
not mistaken for it; Slurm: the job is pending or running) refuses it, and leaves the live
attempt where it is. Only an owner that is gone (killed, its node lost) is taken over: its
attempt is moved aside (``r<k>.attempt<n>``) and the run starts again; so is an attempt that
ended (it has a status that is not ``ok``). Two ``begin`` calls of
one repeat take turns (a lock file beside the run directory).

``end`` decides the run's status once, from the launcher's exit code and the rank files
(``ok`` only when the launcher exited 0 AND every rank wrote its full measured window), and
writes ``status.json`` into the attempt its ``begin`` made (found by the claim, also when it
was moved aside since), never into another owner's attempt and never over an ``ok``. A batch
script calls them around its launcher::

    CLAIM=$(python -m toolkit.runstate begin CASE_DIR REPEAT --pid $$)
    # exit 3: already finished, 4: another live owner runs it; either way skip it
    srun ... python -m toolkit.worker ...; rc=$?
    python -m toolkit.runstate end CASE_DIR REPEAT --claim "$CLAIM" --rc "$rc" --executor slurm

A run that did not end well gets a reason that names the ranks, from the rank files and the
launcher's output in ``r<k>/output.log`` (`toolkit.results.diagnose`): which rank was killed by
which signal or exited with which code (mpirun's and srun's messages), which rank's hang watchdog
fired and which peers it found silent, which ranks wrote an error; then the launcher's exit
status and the log's path. For example::

    rank 1 (pid 1234 on host n1) was killed by signal SIGKILL after iteration 12;
    mpirun exited with signal SIGKILL (exit code 137); log: .../r0/output.log

``status.json`` holds the same facts as data in ``failed_ranks`` (rank, pid, host,
last_iteration, and signal / exit_code / error / watchdog / silent_s as known).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, SlurmClient
from toolkit.results.layout import (
    CASE_FILE,
    JOB_FILE,
    LOG_FILE,
    STATUS_FILE,
    CaseDir,
    attempt_dirs,
    begin_lock_file,
    load_case_file,
    read_json,
    run_dir_name,
)
from toolkit.results.safe_write import ResultsConflict, UnsafePath, atomic_write_json, open_file

if TYPE_CHECKING:
    from parsers.rows import RunRow

EXIT_FINISHED = 3
"""`begin`'s exit code when the run already finished (the script skips it)."""
EXIT_BUSY = 4
"""`begin`'s exit code when another owner that is still alive runs the repeat (the script
skips it, and ends unsuccessfully: the repeat it was asked for ran elsewhere)."""

_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
               "SLURM_JOB_PARTITION", "SLURM_CLUSTER_NAME", "SLURM_RESTART_COUNT")


class RunBusy(ResultsConflict):
    """Another owner that is still alive (or cannot be checked from here) runs the repeat."""


class ClaimGone(Exception):
    """No attempt of this repeat holds the claim `end` was given."""


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the process's name (Linux); None where absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()  # the name may hold spaces and parentheses


def process_start(pid: int) -> str | None:
    """When process `pid` started: the boot's id and the start time in clock ticks from
    /proc (Linux), so a pid the kernel reused for another process reads differently. None
    where /proc does not tell (no such process, or another system)."""
    fields = _proc_stat(pid)
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    return f"{boot}:{fields[19]}" if fields and len(fields) > 19 else None


def pid_alive(pid: int, start: str | None) -> bool:
    """Whether process `pid` of this host runs (a zombie, killed and not yet reaped, does
    not), and is the one that started at `start`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    fields = _proc_stat(pid)
    if fields and fields[0] in ("Z", "X"):
        return False
    return start is None or process_start(pid) == start


def owner_record(pid: int) -> dict[str, Any]:
    """job.json of a new attempt whose job script is process `pid` of this host; under Slurm
    with the other jobs on its nodes as it starts (`neighbours`)."""
    record: dict[str, Any] = {
        "host": socket.gethostname(), "pid": pid, "pid_start": process_start(pid),
        "started_s": time.time(), "claim": secrets.token_hex(8),
        **{k.lower(): os.environ[k] for k in _SLURM_VARS if k in os.environ}}
    others = neighbours()
    if others:
        record["jobs_sharing_nodes"] = others
    return record


def neighbours(slurm: SlurmClient | None = None) -> list[str]:
    """Under Slurm, the other jobs running on this job's nodes now (they compete for its CPUs,
    memory bandwidth and network); empty outside Slurm or when squeue does not answer at once
    (a run is never held up by it)."""
    job, nodes = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_JOB_NODELIST")
    if not job or not nodes:
        return []
    try:
        return (slurm or SlurmClient(retries=0)).jobs_on_nodes(nodes, job)
    except SchedulerError:
        return []


def describe_owner(job: dict[str, Any]) -> str:
    """`Slurm job 12_3 (process 1234 on host n1)` / `process 1234 on host n1`."""
    where = f"process {job.get('pid')} on host {job.get('host')}"
    slurm_id = _slurm_id(job)
    return f"Slurm job {slurm_id} ({where})" if slurm_id else where


def _slurm_id(job: dict[str, Any]) -> str | None:
    if job.get("slurm_array_job_id") and job.get("slurm_array_task_id") is not None:
        return f"{job['slurm_array_job_id']}_{job['slurm_array_task_id']}"
    return str(job["slurm_job_id"]) if job.get("slurm_job_id") else None


def local_owner_alive(job: dict[str, Any]) -> bool | None:
    """For an owner of this host: whether its job script, or the launcher it started, still
    runs (a `submit` killed by SIGKILL leaves its launcher and ranks running: the run is not
    lost, and is never started twice beside itself). None where this host cannot tell
    (another host's process, or job.json names no checkable owner)."""
    if job.get("host") != socket.gethostname() or "claim" not in job:
        return None
    try:
        pid = int(job["pid"])
    except (KeyError, TypeError, ValueError):
        return None
    start = job.get("pid_start")
    return pid_alive(pid, start if isinstance(start, str) else None) or launcher_alive(job)


def record_launcher(run_dir: Path, pid: int, root: Path) -> None:
    """Add the launcher's process group (`pid` leads it: it was started in a session of its
    own) to the attempt's job.json, so that the run's processes are known to be alive after
    the process that started them is gone."""
    job = _read(run_dir / JOB_FILE) or {}
    job.update(launcher_pgid=pid, launcher_start=process_start(pid))
    atomic_write_json(run_dir / JOB_FILE, job, root=root)


def launcher_alive(job: dict[str, Any]) -> bool:
    """Whether a process of the launcher's process group recorded in job.json (this host's)
    still runs. A group whose leader has ended keeps its id while any member lives, so the id
    is not another's; a leader that runs but started at another time is another process."""
    pgid, start = job.get("launcher_pgid"), job.get("launcher_start")
    if type(pgid) is not int or pgid <= 1:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member of another user: the group exists
    leader = process_start(pgid)
    return not isinstance(start, str) or leader is None or leader == start


def owner_alive(job: dict[str, Any] | None, slurm: SlurmClient | None) -> tuple[bool | None, str]:
    """Whether the owner recorded in an attempt's job.json still runs it: True, False (gone:
    its attempt may be taken over), or None (cannot tell: it must not be); and why."""
    if job is None:
        return False, "it records no owner"
    who = describe_owner(job)
    local = local_owner_alive(job)
    if local is not None:
        if local and launcher_alive(job):
            return True, (f"{who} started its launcher (process group {job['launcher_pgid']}), "
                          "which still runs")
        return local, f"{who} {'still runs' if local else 'has ended'}"
    slurm_id = _slurm_id(job)
    if slurm_id is None:
        if "claim" not in job:  # written before owners were recorded: its pid is begin's own
            return False, "it records no owner"
        return None, f"{who} cannot be checked from host {socket.gethostname()}"
    if str(job.get("slurm_job_id")) == os.environ.get("SLURM_JOB_ID"):
        # This very job: an earlier start of it (Slurm requeued it) has ended.
        if str(job.get("slurm_restart_count", "0")) != os.environ.get("SLURM_RESTART_COUNT", "0"):
            return False, f"{who} was requeued by Slurm"
        return None, f"{who} is this job on another host"
    try:
        state = (slurm or SlurmClient(retries=1)).queue([slurm_id]).get(slurm_id, ("", ""))[0]
    except (SchedulerError, OSError) as err:
        return None, f"{who}: Slurm cannot say whether it still runs ({err})"
    if state in ACTIVE_STATES:
        return True, f"{who} is {state.lower()}"
    return False, f"{who} has left Slurm's queue"


@contextlib.contextmanager
def _begin_lock(cdir: CaseDir, repeat: int) -> Iterator[None]:
    """Two `begin` calls of one repeat take turns. A file system without locks (some Lustre
    mounts) leaves them untaken: the owner check still holds, only a race of two starts within
    the same instant is not excluded there. The lock is opened like every file under the
    results root: never through a symbolic link."""
    fd = open_file(begin_lock_file(cdir.path, repeat), os.O_WRONLY | os.O_CREAT, root=cdir.root,
                   mode=0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:
            if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)


def begin_run(case_dir: Path, repeat: int, pid: int | None = None,
              slurm: SlurmClient | None = None) -> Path:
    """Prepare `r<repeat>/` for a new attempt owned by the job script `pid` (default: this
    process) and record its owner. Raises ResultsConflict when the run already finished (it
    is never overwritten), RunBusy when its owner still runs it or cannot be checked."""
    cdir = CaseDir(case_dir.parent.parent, case_dir.name)
    with _begin_lock(cdir, repeat):
        run = cdir.run_dir(repeat)
        # An attempt with a status has ended (its owner's `end` wrote it): no owner to ask.
        if run.exists() and cdir.run_status(repeat) is None:
            alive, why = owner_alive(_read(run / JOB_FILE), slurm)
            if alive is not False:
                raise RunBusy(f"{run} is not started again: {why}" + (
                    "" if alive else "; if it has ended, move the directory aside by hand"))
        run_dir = cdir.prepare_run(repeat)
        atomic_write_json(run_dir / JOB_FILE, owner_record(os.getpid() if pid is None else pid),
                          root=cdir.root)
    return run_dir


def claim_of(run_dir: Path) -> str | None:
    job = _read(run_dir / JOB_FILE)
    claim = job.get("claim") if job else None
    return claim if isinstance(claim, str) else None


def claimed_run_dir(case_dir: Path, repeat: int, claim: str | None) -> Path:
    """The attempt that the `begin` which handed out `claim` made: `r<k>`, or where it was
    moved aside since. Without a claim: `r<k>`. Raises ClaimGone when no attempt holds it."""
    run = case_dir / run_dir_name(repeat)
    if claim is None:
        return run
    for candidate in (run, *attempt_dirs(run)):
        if claim_of(candidate) == claim:
            return candidate
    raise ClaimGone(f"no attempt of {run} holds claim {claim} (its directory was removed); "
                    "no status is written")


def describe_rc(rc: int) -> str:
    """`exit code 3` / `signal SIGKILL` (negative: Python's convention; 128+N: the shell's)."""
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)
    if sig is not None:
        try:
            return f"signal {signal.Signals(sig).name}" + (f" (exit code {rc})" if rc > 0 else "")
        except ValueError:
            return f"signal {sig}"
    return f"exit code {rc}"


def record_outcome(case_dir: Path, repeat: int, status: dict[str, Any],
                   claim: str | None = None) -> tuple[dict[str, Any], RunRow]:
    """Complete `status` (which holds `status` and, unless ok, `reason`) from the rank files and
    write status.json into the attempt that holds `claim` (`claimed_run_dir`). A launcher that
    said ok while a rank's data is short becomes `failed`. An attempt whose status.json already
    says ok keeps it (ResultsConflict)."""
    from toolkit.results.runs import read_run  # the rank-file reader; not needed to submit

    case_id, case = load_case_file(case_dir / CASE_FILE)
    run_dir = claimed_run_dir(case_dir, repeat, claim)
    done = _read(run_dir / STATUS_FILE)
    if done and done.get("status") == "ok":
        raise ResultsConflict(f"{run_dir} already finished; its status is never overwritten")
    job = _read(run_dir / JOB_FILE)
    status.setdefault("log", LOG_FILE)
    if job:
        status.setdefault("started_s", job.get("started_s"))
        for k in ("slurm_job_id", "slurm_array_job_id", "slurm_array_task_id"):
            if k in job:
                status[k] = job[k]
    status["finished_s"] = time.time()
    if isinstance(status.get("started_s"), (int, float)):
        status["duration_s"] = status["finished_s"] - status["started_s"]
    if status["status"] != "ok":
        explain(run_dir, status)
    row = read_run(run_dir, case_id, case, repeat, status=status)
    if status["status"] == "ok" and row.status != "ok":
        status.update(status="failed", reason=row.error)
        row = read_run(run_dir, case_id, case, repeat, status=status)
    atomic_write_json(run_dir / STATUS_FILE, status, root=case_dir.parent.parent)
    return status, row


def explain(run_dir: Path, status: dict[str, Any]) -> None:
    """Put the ranks' side into a failed run's `reason` (and `failed_ranks`), with the log."""
    from toolkit.results.diagnose import diagnose_run

    diagnosis = diagnose_run(run_dir, status.get("log"))
    known = [status.get("reason"), diagnosis.reason]
    # Slurm's cause (time limit, node failure, preemption, scancel) comes first; else the ranks'.
    if status.get("status") not in ("timeout", "node_fail", "preempted", "cancelled"):
        known.reverse()
    status["reason"] = "; ".join(str(x) for x in known if x) or f"status {status.get('status')}"
    if status.get("log"):
        status["reason"] += f"; log: {run_dir / str(status['log'])}"
    if diagnosis.failed_ranks:
        status["failed_ranks"] = diagnosis.failed_ranks


def end_run(case_dir: Path, repeat: int, rc: int, executor: str, terminated: bool = False,
            slurm: SlurmClient | None = None,
            claim: str | None = None) -> tuple[dict[str, Any], RunRow]:
    """Decide and write the status of a run whose launcher returned `rc`. `terminated`: the
    script caught SIGTERM (Slurm ending the job, or a person). Under Slurm, a run that did not
    succeed asks Slurm why (`slurm_verdict`): timeout, node_fail, preempted or cancelled, and
    whether Slurm requeued the job. `claim`: what `begin` handed out (`record_outcome`)."""
    run_dir = claimed_run_dir(case_dir, repeat, claim)
    status: dict[str, Any] = {"executor": executor, "host": socket.gethostname(),
                              "returncode": rc, "status": "ok" if rc == 0 else "failed"}
    if rc != 0:
        status["reason"] = f"launcher exited with {describe_rc(rc)}"
    if terminated:
        status["terminated"] = True
        if rc != 0:
            status["reason"] += " after SIGTERM reached the job script"
    if (rc != 0 or terminated) and os.environ.get("SLURM_JOB_ID"):
        status.update(slurm_verdict(run_dir, os.environ["SLURM_JOB_ID"], slurm or SlurmClient()))
    at_start = (_read(run_dir / JOB_FILE) or {}).get("jobs_sharing_nodes") or []
    shared = sorted({*map(str, at_start), *neighbours(slurm)})
    if shared:  # at the start or the end of the run: its nodes were not its own
        status["jobs_sharing_nodes"] = shared
    return record_outcome(case_dir, repeat, status, claim)


def slurm_verdict(run_dir: Path, job_id: str, slurm: SlurmClient) -> dict[str, Any]:
    """Status fields for a run Slurm ended: from the `*** ... CANCELLED ... DUE TO ... ***`
    lines in the launcher's log and the job's log, else scontrol's Reason. Empty when Slurm did
    not end it (an ordinary failure of the program). Must be quick: Slurm sends SIGKILL
    KillWait seconds after its SIGTERM."""
    from toolkit.launch.slurm_output import JOB_STATES, REASONS, find_cancellation

    info = slurm.job_info(job_id) or {}
    texts = [_tail(run_dir / LOG_FILE)]
    if info.get("StdOut"):
        texts.append(_tail(Path(info["StdOut"])))
    found = find_cancellation("\n".join(texts))
    kind = found.status if found else (REASONS.get(info.get("Reason", ""))
                                      or JOB_STATES.get(info.get("JobState", "")))
    if not kind:
        return {}
    try:
        requeued = int(info.get("Restarts", "0")) > int(os.environ.get("SLURM_RESTART_COUNT")
                                                        or 0)
    except ValueError:
        requeued = False
    requeued = requeued or kind == "requeued"
    what = found.describe() if found else f"Slurm ended the job (Reason={info.get('Reason')}, " \
                                          f"JobState={info.get('JobState')})"
    out: dict[str, Any] = {
        "status": "failed" if kind == "requeued" else kind,
        "reason": f"{what} (Slurm job {job_id})" + ("; Slurm requeued the job, so the run is "
                                                     "tried again" if requeued else ""),
        "slurm": {k: info[k] for k in ("JobState", "Reason", "Restarts", "Requeue", "TimeLimit")
                  if k in info},
    }
    if found and found.failed_nodes:
        out["failed_nodes"] = list(found.failed_nodes)
    if requeued:
        out["requeued"] = True
    return out


def _tail(path: Path, size: int = 65536) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolkit.runstate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("begin", help="prepare r<REPEAT>/ and print its claim (exit 3 if it "
                                     "already finished, 4 if another live owner runs it)")
    e = sub.add_parser("end", help="decide and write r<REPEAT>/status.json")
    for q in (b, e):
        q.add_argument("case_dir", type=Path)
        q.add_argument("repeat", type=int)
    b.add_argument("--pid", type=int, default=None,
                   help="the job script's process, the owner of the attempt (default: the "
                        "parent of this process)")
    e.add_argument("--claim", default=None, help="what `begin` printed: end writes into that "
                                                 "attempt only")
    e.add_argument("--rc", type=int, required=True, help="the launcher's exit code")
    e.add_argument("--executor", default="slurm")
    e.add_argument("--terminated", action="store_true",
                   help="the script caught SIGTERM (Slurm ending the job, or a person)")
    args = p.parse_args(argv)
    case_dir = args.case_dir.absolute()
    if args.cmd == "begin":
        try:
            run_dir = begin_run(case_dir, args.repeat,
                                os.getppid() if args.pid is None else args.pid)
        except UnsafePath as err:
            print(f"trainbench: error: {err}", file=sys.stderr)
            return 2
        except RunBusy as err:
            print(f"trainbench: {err}; skipping it", file=sys.stderr)
            return EXIT_BUSY
        except ResultsConflict as err:
            print(f"trainbench: {err}; skipping it", file=sys.stderr)
            return EXIT_FINISHED
        print(claim_of(run_dir))
        print(f"trainbench: running {run_dir}", file=sys.stderr)
        return 0
    try:
        # What begin printed, as the script captured it: the claim is its last line.
        claim = (args.claim.strip().splitlines() or [""])[-1] if args.claim is not None else None
        status, row = end_run(case_dir, args.repeat, args.rc, args.executor, args.terminated,
                              claim=claim)
    except UnsafePath as err:
        print(f"trainbench: error: {err}", file=sys.stderr)
        return 2
    except (ClaimGone, ResultsConflict) as err:
        print(f"trainbench: r{args.repeat}: {err}", file=sys.stderr)
        return 1
    figure = f", {row.throughput_sps:,.1f} samples/s" if row.throughput_sps else ""
    print(f"trainbench: r{args.repeat} {status['status']}{figure}"
          + (f": {status.get('reason')}" if status["status"] != "ok" else ""), file=sys.stderr)
    return 0 if status["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
