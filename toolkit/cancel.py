"""`python -m toolkit.cancel results/<grid> [--case ID ...]`: cancel the grid's queued and running
jobs (or only those of some cases) with scancel, and record it so `toolkit.status` shows them as
cancelled. Finished runs are untouched; a later `toolkit.submit` of the grid submits the cancelled
runs again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit import interruptible
from toolkit.launch import job_ledger
from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, SlurmClient


def cancel(root: Path, slurm: SlurmClient, cases: set[str] | None = None) -> list[str]:
    """scancel the active jobs of `root` (array tasks one by one when only some cases are
    named); returns the Slurm ids cancelled."""
    m = job_ledger.with_tagged(job_ledger.load(root), slurm)
    entries = [e for e in m.latest().values()
               if not m.is_cancelled(e) and (cases is None or e.case_id in cases)]
    if not entries:
        return []
    queue = slurm.queue(e.slurm_id for e in entries)
    active = sorted({e.slurm_id for e in entries
                     if queue.get(e.slurm_id, ("", ""))[0] in ACTIVE_STATES})
    if not active:
        return []
    # Whole jobs when every task of the job goes (one scancel per array, not per task).
    by_job: dict[str, set[str]] = {}
    for e in m.entries:
        by_job.setdefault(e.job_id, set()).add(e.slurm_id)
    ids: list[str] = []
    for job, members in by_job.items():
        chosen = members & set(active)
        if not chosen:
            continue
        ids += [job] if chosen == members else sorted(chosen)
    slurm.cancel(ids)
    job_ledger.record_cancel(root, ids)
    return ids


@interruptible
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainbench cancel", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of a submitted grid")
    p.add_argument("--case", action="append", default=None, metavar="ID",
                   help="cancel only this case's jobs (repeatable)")
    args = p.parse_args(argv)
    if not job_ledger.jobs_path(args.results).exists():
        print(f"{args.results}: nothing was submitted to Slurm from here "
              f"({job_ledger.jobs_path(args.results)} is missing)", file=sys.stderr)
        return 2
    try:
        ids = cancel(args.results, SlurmClient(), set(args.case) if args.case else None)
    except SchedulerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"cancelled {len(ids)} job(s)" + (f": {' '.join(ids)}" if ids else
                                            " (none was queued or running)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
