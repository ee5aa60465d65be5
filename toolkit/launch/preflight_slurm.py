"""A preflight as a Slurm job of its own over chosen nodes (`python -m toolkit.preflight
--executor slurm`): its script is rendered like a case's (submitit's directives), its ranks
start with the same srun or mpirun line; it is submitted and followed until it ends.

`sbatch --wait` is not used: it asks the controller 2, 10, 42 s after submitting and then
every 32 s (Slurm 22.05), so a preflight whose job ended after 12 s returned after 43 s.
The job's state is asked for every `POLL_RUNNING_S` while it runs, every `POLL_PENDING_S`
while it waits for nodes."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.launch.launcher import (
    SLURM_CPUS_PER_TASK,
    export_lines,
    module_lines,
    rank_environment,
)
from toolkit.launch.preflight import rank_argv
from toolkit.launch.shell import shell_join
from toolkit.launch.slurm import SlurmExecutor
from toolkit.launch.slurm_client import ACTIVE_STATES, SchedulerError, SlurmClient
from toolkit.results.safe_write import atomic_write_text
from toolkit.spec import Case

POLL_RUNNING_S = 1.0
"""Seconds between two questions about a running preflight job (one `scontrol show job`)."""
POLL_PENDING_S = 5.0
"""Seconds between two questions about a job still waiting for its nodes."""


@dataclass
class SlurmRun:
    """A preflight as a Slurm job of its own: `case` gives the allocation (nodes, ranks per
    node, device, partition, time limit); `nodelist`, when given, the nodes to test."""

    case: Case
    nodelist: str | None = None
    python: str = sys.executable
    client: SlurmClient = field(default_factory=SlurmClient)
    sleep: Callable[[float], None] = time.sleep

    def script(self, directory: Path) -> str:

        ex = SlurmExecutor(python=self.python)
        params = ex.parameters(self.case, "trainbench-preflight", directory)
        if self.nodelist:
            params["additional_parameters"]["nodelist"] = self.nodelist
        run = shell_join(ex.rank_command(self.case, directory.absolute().parents[1],
                                         rank_argv(self.python, directory), str(directory)))
        body = ["# trainbench preflight: every rank measures its GPU (or CPU), the collectives "
                "and its health", *module_lines(self.case),
                *export_lines(rank_environment(self.case, {}, SLURM_CPUS_PER_TASK,
                                                launcher=self.case.slurm.launcher)),
                run]
        return ex._render(params, body, directory)

    def run(self, directory: Path) -> int:
        """Write `preflight.sh` into `directory`, submit it and wait for its job to end; the
        job's exit status (128 + the signal for a job killed by one), or 1 when Slurm refused
        it (its words printed) or no longer knows it. Ctrl-C cancels the job."""
        script = directory / "preflight.sh"
        atomic_write_text(script, self.script(directory), root=directory)
        try:
            job = self.client.sbatch(str(script), tag=f"preflight-{uuid.uuid4().hex[:12]}")
        except SchedulerError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            return 1
        print(f"Slurm job {job}", flush=True)
        try:
            return wait_for_job(self.client, job, self.sleep)
        except KeyboardInterrupt:
            self.client.cancel([job])
            print(f"cancelled Slurm job {job}", file=sys.stderr, flush=True)
            raise


def wait_for_job(client: SlurmClient, job: str, sleep: Callable[[float], None]) -> int:
    """Ask the controller for `job`'s state until it ends; its exit status (`job_exit_status`).
    A job the controller has forgotten (it keeps ended jobs `MinJobAge` seconds) is looked up
    in the accounting; 1 when neither knows it."""
    while True:
        info = client.job_info(job)
        if info is None:
            acct = (client.accounting([job]) or {}).get(job)
            if acct is None:
                print(f"error: Slurm no longer knows job {job}", file=sys.stderr, flush=True)
                return 1
            state, code = acct
        else:
            state, code = info.get("JobState", ""), info.get("ExitCode", "")
        if state not in ACTIVE_STATES:
            return job_exit_status(code, state)
        sleep(POLL_PENDING_S if state == "PENDING" else POLL_RUNNING_S)


def job_exit_status(code: str, state: str) -> int:
    """Slurm's `ExitCode` (`status:signal`) as a shell's exit status: the status, or 128 +
    the signal; 1 for an ended job whose code says nothing (a job cancelled while pending)."""
    status, _, signal = code.partition(":")
    if status.isdigit() and signal.isdigit():
        if int(signal):
            return 128 + int(signal)
        if int(status) or state == "COMPLETED":
            return int(status)
    return 0 if state == "COMPLETED" else 1
