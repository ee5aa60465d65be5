"""The start and end of one run (one repeat of one case), shared by every way a run is started:
the local executor, the Slurm batch scripts and the scripts a person re-runs by hand.

``begin`` refuses to touch a finished run, moves an unfinished earlier attempt aside
(``r<k>.attempt<n>``) and records who is running it (``job.json``: host, Slurm job and array
task). ``end`` decides the run's status once, from the launcher's exit code and the rank files
(``ok`` only when the launcher exited 0 AND every rank wrote its full measured window), and
writes ``status.json``. A batch script calls them around its launcher::

    python -m toolkit.runstate begin CASE_DIR REPEAT    # exit 3: already finished, skip
    srun ... python -m toolkit.worker ...; rc=$?
    python -m toolkit.runstate end CASE_DIR REPEAT --rc "$rc" --executor slurm

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
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.launch.slurm_client import SlurmClient
from toolkit.results.layout import (
    CASE_FILE,
    JOB_FILE,
    LOG_FILE,
    STATUS_FILE,
    CaseDir,
    ResultsConflict,
    UnsafePath,
    atomic_write_json,
    load_case_file,
    read_json,
    run_dir_name,
)

if TYPE_CHECKING:
    from parsers.rows import RunRow

EXIT_FINISHED = 3
"""`begin`'s exit code when the run already finished (the script skips it)."""

_SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
               "SLURM_JOB_PARTITION", "SLURM_CLUSTER_NAME")


def begin_run(case_dir: Path, repeat: int) -> Path:
    """Prepare `r<repeat>/` for a new attempt and record who runs it. Raises ResultsConflict
    when the run already finished (it is never overwritten)."""
    cdir = CaseDir(case_dir.parent.parent, case_dir.name)
    run_dir = cdir.prepare_run(repeat)
    job = {"host": socket.gethostname(), "pid": os.getpid(), "started_s": time.time(),
           **{k.lower(): os.environ[k] for k in _SLURM_VARS if k in os.environ}}
    atomic_write_json(run_dir / JOB_FILE, job, root=cdir.root)
    return run_dir


def describe_rc(rc: int) -> str:
    """`exit code 3` / `signal SIGKILL` (negative: Python's convention; 128+N: the shell's)."""
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)
    if sig is not None:
        try:
            return f"signal {signal.Signals(sig).name}" + (f" (exit code {rc})" if rc > 0 else "")
        except ValueError:
            return f"signal {sig}"
    return f"exit code {rc}"


def record_outcome(case_dir: Path, repeat: int,
                   status: dict[str, Any]) -> tuple[dict[str, Any], RunRow]:
    """Complete `status` (which holds `status` and, unless ok, `reason`) from the rank files and
    write status.json. A launcher that said ok while a rank's data is short becomes `failed`."""
    from toolkit.results.runs import read_run  # the rank-file reader; not needed to submit

    case_id, case = load_case_file(case_dir / CASE_FILE)
    run_dir = case_dir / run_dir_name(repeat)
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
        slurm: SlurmClient | None = None) -> tuple[dict[str, Any], RunRow]:
    """Decide and write the status of a run whose launcher returned `rc`. `terminated`: the
    script caught SIGTERM (Slurm ending the job, or a person). Under Slurm, a run that did not
    succeed asks Slurm why (`slurm_verdict`): timeout, node_fail, preempted or cancelled, and
    whether Slurm requeued the job."""
    status: dict[str, Any] = {"executor": executor, "host": socket.gethostname(),
                              "returncode": rc, "status": "ok" if rc == 0 else "failed"}
    if rc != 0:
        status["reason"] = f"launcher exited with {describe_rc(rc)}"
    if terminated:
        status["terminated"] = True
        if rc != 0:
            status["reason"] += " after SIGTERM reached the job script"
    if (rc != 0 or terminated) and os.environ.get("SLURM_JOB_ID"):
        status.update(slurm_verdict(case_dir / run_dir_name(repeat), os.environ["SLURM_JOB_ID"],
                                    slurm or SlurmClient()))
    return record_outcome(case_dir, repeat, status)


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
    b = sub.add_parser("begin", help="prepare r<REPEAT>/ (exit 3 if it already finished)")
    e = sub.add_parser("end", help="decide and write r<REPEAT>/status.json")
    for q in (b, e):
        q.add_argument("case_dir", type=Path)
        q.add_argument("repeat", type=int)
    e.add_argument("--rc", type=int, required=True, help="the launcher's exit code")
    e.add_argument("--executor", default="slurm")
    e.add_argument("--terminated", action="store_true",
                   help="the script caught SIGTERM (Slurm ending the job, or a person)")
    args = p.parse_args(argv)
    case_dir = args.case_dir.absolute()
    if args.cmd == "begin":
        try:
            run_dir = begin_run(case_dir, args.repeat)
        except UnsafePath as err:
            print(f"trainbench: error: {err}", file=sys.stderr)
            return 2
        except ResultsConflict as err:
            print(f"trainbench: {err}; skipping it", file=sys.stderr)
            return EXIT_FINISHED
        print(f"trainbench: running {run_dir}", file=sys.stderr)
        return 0
    try:
        status, row = end_run(case_dir, args.repeat, args.rc, args.executor, args.terminated)
    except UnsafePath as err:
        print(f"trainbench: error: {err}", file=sys.stderr)
        return 2
    figure = f", {row.throughput_sps:,.1f} samples/s" if row.throughput_sps else ""
    print(f"trainbench: r{args.repeat} {status['status']}{figure}"
          + (f": {status.get('reason')}" if status["status"] != "ok" else ""), file=sys.stderr)
    return 0 if status["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
