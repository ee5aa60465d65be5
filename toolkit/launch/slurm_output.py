"""Why Slurm ended a job, from what it wrote into the job's logs and from `scontrol show job`.

When Slurm ends a job (time limit, node failure, preemption, scancel) every slurmstepd of the job
prints one line into the job's output (and each step's into srun's stderr)::

    slurmstepd-node1: error: *** JOB 1 ON node1 CANCELLED AT 2026-11-23T02:41:59 DUE TO
    TIME LIMIT ***          (one line; folded here)
    ... *** STEP 6.0 ON node1 CANCELLED AT ... DUE TO NODE FAILURE, SEE SLURMCTLD LOG ... ***
    ... *** JOB 2 ON node1 CANCELLED AT 2026-11-23T02:45:35 ***

and srun names a failed node (``srun: error: Node failure on node2``). `scontrol show job -o`
gives the job's Reason (``TimeLimit``, ``NodeDown``) and its restart count while the job is
still known to the controller. Real samples: tests/data/slurm/.
"""

from __future__ import annotations

from dataclasses import dataclass

from parsers import logtext

#: `DUE TO <cause>` -> the run status trainbench records.
CAUSES = {
    "TIME LIMIT": "timeout",
    "NODE FAILURE": "node_fail",
    "PREEMPTION": "preempted",
    "JOB REQUEUE": "requeued",
}
#: scontrol's Reason (while the job completes) -> run status, when no log line said more.
REASONS = {"TimeLimit": "timeout", "NodeDown": "node_fail", "NodeFail": "node_fail"}
#: Final job states (sacct, scontrol after the job completed) -> run status.
JOB_STATES = {"TIMEOUT": "timeout", "NODE_FAIL": "node_fail", "PREEMPTED": "preempted",
              "CANCELLED": "cancelled", "DEADLINE": "timeout", "OUT_OF_MEMORY": "failed",
              "BOOT_FAIL": "node_fail"}

# Slurm's own lines begin a line of the log (`slurmstepd-node1: error: *** JOB ...`): a program's
# text, which the worker quotes only inside a line of its own, is never taken for Slurm's.
_CANCEL_RE = logtext.compile(
    r"(?im)^slurmstepd[^:\s]*: error: \*\*\* (?P<what>JOB|STEP) (?P<id>\S+) ON (?P<node>\S+) "
    r"CANCELLED AT (?P<at>\S+)(?: DUE TO (?P<cause>[A-Za-z ]+?))?(?:,[^*\n]*)? \*\*\*")
_NODE_FAILURE_RE = logtext.compile(r"(?m)^srun: error: Node failure on (?P<node>\S+)")


@dataclass(frozen=True)
class Cancellation:
    """Slurm's own account of why it ended a job."""

    status: str
    """timeout | node_fail | preempted | requeued | cancelled."""
    cause: str
    """Slurm's words (`TIME LIMIT`, ...; `scancel` when no cause was given)."""
    at: str = ""
    failed_nodes: tuple[str, ...] = ()

    def describe(self) -> str:
        what = {"timeout": "the job reached its time limit",
                "node_fail": "a node of the job failed"
                             + (f" ({', '.join(self.failed_nodes)})" if self.failed_nodes
                                else ""),
                "preempted": "the job was preempted by a higher-priority job",
                "requeued": "the job was requeued",
                "cancelled": "the job was cancelled (scancel)"}[self.status]
        return what + (f" at {self.at}" if self.at else "")


def find_cancellation(text: str) -> Cancellation | None:
    """The first `*** ... CANCELLED AT ... ***` line of a job or step log, as a Cancellation.

    A cause given by any line wins over a bare `CANCELLED` (scancel), since a requeued job's
    log may hold both attempts. A bare `STEP ... CANCELLED` with no `JOB` line is not Slurm
    ending the job: srun prints it when it ends its own step because one task failed
    (`--kill-on-bad-exit`), and the ranks, not Slurm, say why."""
    found: Cancellation | None = None
    nodes = tuple(dict.fromkeys(m.group("node") for m in _NODE_FAILURE_RE.finditer(text)))
    for m in _CANCEL_RE.finditer(text):
        cause = (m.group("cause") or "").strip().upper()
        if not cause and m.group("what").upper() == "STEP":
            continue
        status = CAUSES.get(cause, "cancelled" if not cause else "failed")
        c = Cancellation(status, cause or "scancel", m.group("at"), nodes)
        if cause:
            return c
        found = found or c
    if found is None and nodes:
        return Cancellation("node_fail", "NODE FAILURE", "", nodes)
    return found


def parse_scontrol_job(text: str) -> dict[str, str]:
    """`scontrol show job -o JOBID` (one line of Key=Value words) as a dict. Values with spaces
    (rare: Command, WorkDir with blanks) keep only their first word; the keys used here
    (JobState, Reason, Restarts, Requeue, StdOut, TimeLimit) have none."""
    out: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key and key not in out:
            out[key] = value
    return out
