"""Thin wrappers around the Slurm client commands (sbatch, squeue, sacct, scancel, sinfo).

Every command runs as an argument list (never through a shell). Transient failures (the
controller busy, restarting or unreachable) are retried with exponential back-off; anything else
comes back as a `SchedulerError` carrying the scheduler's own message, so the user sees exactly
what Slurm said ("invalid partition specified", "Job violates accounting/QOS policy", ...).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Substrings of Slurm client errors that mean "try again later", not "this job is wrong".
TRANSIENT_MARKERS = (
    "temporarily unavailable",
    "socket timed out",
    "unable to contact slurm controller",
    "zero bytes were transmitted",
    "connection refused",
    "slurm_persist_conn_open",
    "try again",
    "transport endpoint is not connected",
)
#: Of those, the ones after which the controller may have acted on the request all the same: the
#: client gave up waiting for the answer (MessageTimeout, our own timeout) or lost the connection
#: after sending. An sbatch that fails so may have queued its job; a blind retry would queue a
#: second one (tests/data/slurm/README.md: sbatch_timeout_but_queued.txt).
MAYBE_DONE_MARKERS = (
    "socket timed out",
    "zero bytes were transmitted",
    "transport endpoint is not connected",
)
#: The comment prefix that marks a job as one sbatch call of ours (`Slurm.sbatch(tag=...)`).
TAG_PREFIX = "trainbench:"
#: Submission limits: not an error in the job, but no point retrying within seconds either.
LIMIT_MARKERS = ("maxsubmitjob", "assocmaxsubmitjob", "qosmaxsubmitjob", "submit limit")

#: Job states in which a job may still run (or is running): its repeats are "queued".
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                           "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class SchedulerError(RuntimeError):
    """A Slurm command failed; `message` is the scheduler's own words."""

    def __init__(self, argv: Sequence[str], message: str, transient: bool = False,
                 limit: bool = False, unsure: bool = False) -> None:
        self.argv = list(argv)
        self.message = message.strip()
        self.transient = transient
        self.limit = limit
        self.unsure = unsure
        """An sbatch whose job may have been queued although the call failed (see
        MAYBE_DONE_MARKERS), and Slurm could not be asked."""
        super().__init__(f"{argv[0]}: {self.message}")


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    # Its own session: a Ctrl-C at the terminal must not kill an sbatch half way, after the
    # controller took the job but before we read (and record) its id.
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False,
                          start_new_session=True)


def classify(message: str) -> tuple[bool, bool]:
    """(transient, submission limit) for a client error message."""
    low = message.lower()
    return any(m in low for m in TRANSIENT_MARKERS), any(m in low for m in LIMIT_MARKERS)


def maybe_done(message: str) -> bool:
    """Whether a failed command's request may have reached the controller and been acted on."""
    low = message.lower()
    return any(m in low for m in MAYBE_DONE_MARKERS)


def expand_array_id(job_id: str) -> list[str]:
    """sacct's id of array tasks that share one record, one id per task: "12_[0-2,5%4]" ->
    ["12_0", "12_1", "12_2", "12_5"] (after % is the array's throttle); any other id as is."""
    base, _, tasks = job_id.partition("_[")
    if not tasks.endswith("]"):
        return [job_id]
    out = []
    for part in tasks[:-1].split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or not (hi or lo).isdigit():
            return [job_id]
        out += [f"{base}_{t}" for t in range(int(lo), int(hi or lo) + 1)]
    return out


def holds_on_purpose(script: str, options: Sequence[str]) -> bool:
    """Whether the job is meant to stay held (`--hold` among the options or the script's
    `#SBATCH` lines, as a grid's `extra_sbatch` puts it): then no retry of ours releases it."""
    if "--hold" in options or "-H" in options:
        return True
    try:
        lines = Path(script).read_text().split("\n")
    except (OSError, UnicodeDecodeError):
        return False
    return any(ln.strip() in ("#SBATCH --hold", "#SBATCH -H") for ln in lines)


def _message(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stderr or proc.stdout or f"exit code {proc.returncode}").strip()


def _job_id(argv: Sequence[str], proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout.strip()
    job_id = out.split(";")[0].strip()  # --parsable: "<id>[;<cluster>]"
    if not job_id.isdigit():
        raise SchedulerError(argv, f"unexpected sbatch output {out!r}")
    return job_id


@dataclass
class SlurmClient:
    """The client side of one Slurm cluster (whatever `SLURM_CONF` in the environment names)."""

    runner: Runner = _run
    retries: int = 5
    backoff_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep

    @staticmethod
    def probe() -> tuple[str, str]:
        """(`up`, `down` or `absent`, why) for this machine's Slurm: `up` when `sinfo`
        answers; `down` when the client is configured but the controller does not answer (a
        restart, an outage: the jobs are still Slurm's); `absent` without the client commands
        or a configuration (sinfo then fails at once)."""
        if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
            return "absent", "no sbatch/sinfo on PATH"
        conf = os.environ.get("SLURM_CONF")
        if conf and not Path(conf).is_file():  # sinfo would retry reading it for 60 s
            return "absent", f"SLURM_CONF names no file ({conf})"
        try:
            proc = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                                  timeout=15, check=False)
        except subprocess.TimeoutExpired:
            return "down", "sinfo timed out"
        except OSError as err:
            return "absent", f"sinfo: {err}"
        if proc.returncode == 0:
            return "up", ""
        message = (proc.stderr or proc.stdout).strip()
        return ("down" if classify(message)[0] else "absent"), message

    @staticmethod
    def available() -> bool:
        """Whether this machine can submit now: the client commands exist and the controller
        answers."""
        return SlurmClient.probe()[0] == "up"

    def call(self, argv: Sequence[str]) -> str:
        """Run a client command; retry transient failures with back-off; return stdout."""
        return self._call(argv).stdout

    def _once(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        try:
            return self.runner(argv)
        except FileNotFoundError as err:
            raise SchedulerError(argv, f"{argv[0]} not found ({err})") from err
        except subprocess.TimeoutExpired as err:
            return subprocess.CompletedProcess(list(argv), 1, "", f"socket timed out: {err}")

    def _call(self, argv: Sequence[str], idempotent: bool = True,
              ) -> subprocess.CompletedProcess[str]:
        """`idempotent`: a retry cannot do the work twice (a query, scancel). Otherwise a
        failure after which the controller may have acted (`maybe_done`) is not retried."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            proc = self._once(argv)
            if proc.returncode == 0:
                return proc
            message = _message(proc)
            transient, limit = classify(message)
            unsure = not idempotent and maybe_done(message)
            if not transient or unsure or attempt == self.retries:
                raise SchedulerError(argv, message, transient=transient, limit=limit,
                                     unsure=unsure)
            self.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # -- commands ---------------------------------------------------------------------------
    def sbatch(self, script: str, options: Sequence[str] = (), args: Sequence[str] = (),
               test_only: bool = False, tag: str | None = None, comment: str = "") -> str:
        """Submit `script`; returns the job id, or with `test_only` Slurm's verdict (sbatch
        --test-only validates partition, limits and resources without submitting).

        An sbatch can fail after the controller queued its job (the client's answer timed out).
        With a `tag` (unique per call) the job carries it in its comment (after `comment`, the
        grid's own), and such a failure asks squeue for the tag before trying again: a job
        found is the answer. The retry is submitted held (`--hold`) and released only once
        squeue still shows no other job under the tag; if the first request was acted on late
        after all, the held retry, which never ran, is cancelled and the first job is the
        answer. So the call starts at most one job. Without a tag, or when squeue does not
        answer, it raises a SchedulerError with `unsure` set."""
        mark = [f"--comment={comment + ' ' if comment else ''}{TAG_PREFIX}{tag}"] if tag else []
        argv = ["sbatch", *options, *mark, "--test-only" if test_only else "--parsable",
                script, *args]
        if test_only or tag is None:
            proc = self._call(argv, idempotent=test_only)
            return (proc.stderr or proc.stdout).strip() if test_only else _job_id(argv, proc)
        delay = self.backoff_s
        held = False
        for attempt in range(self.retries + 1):
            now = ["sbatch", "--hold", *argv[1:]] if held else argv
            proc = self._once(now)
            if proc.returncode == 0:
                job_id = _job_id(now, proc)
                if not held:
                    return job_id
                # The first request may have been acted on late after all.
                return self._answer(tag, self._tagged(tag, now, f"job {job_id} is held")
                                    | {job_id}, now, script, options)
            message = _message(proc)
            transient, limit = classify(message)
            if not transient:
                raise SchedulerError(now, message, limit=limit)
            if maybe_done(message):
                found = self._tagged(tag, now, message)
                if found:
                    return self._answer(tag, found, now, script, options) if held else \
                        min(found, key=int)
                held = True
            if attempt == self.retries:
                raise SchedulerError(now, message, transient=True, limit=limit)
            self.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _tagged(self, tag: str, argv: Sequence[str], message: str) -> set[str]:
        """The jobs under `tag`; raises SchedulerError(unsure) when squeue does not answer."""
        try:
            return self.tagged_jobs([tag]).get(tag, set())
        except SchedulerError as err:
            raise SchedulerError(argv, f"{message}\nWhether Slurm queued the job is unknown: "
                                       f"squeue failed too ({err.message}). The job carries "
                                       f"the comment {TAG_PREFIX}{tag}.", transient=True,
                                 unsure=True) from err

    def _answer(self, tag: str, jobs: set[str], argv: Sequence[str], script: str,
                options: Sequence[str]) -> str:
        """`keep_earliest` of the jobs under `tag` after a held retry; a failed release is
        unsure (the next submit's `job_ledger.settle` releases the job)."""
        try:
            return self.keep_earliest(jobs, holds_on_purpose(script, options))
        except SchedulerError as err:
            raise SchedulerError(argv, f"job {min(jobs, key=int)} under the comment "
                                       f"{TAG_PREFIX}{tag} may be held and could not be "
                                       f"released ({err.message}); the next submit releases "
                                       "it", transient=True, unsure=True) from err

    def keep_earliest(self, job_ids: Iterable[str], keep_held: bool) -> str:
        """The job of one sbatch call of which Slurm queued several (its tag): the earliest.
        The later ones are held retries that never ran and are cancelled (best effort: a held
        job left behind never runs). The earliest is released unless the grid holds its jobs
        (`keep_held`): it may be a held retry, and `scontrol release` of a running or unheld
        job is a no-op (exit 0, Slurm 22.05). Raises SchedulerError when the release fails."""
        ids = sorted(job_ids, key=int)
        self._cancel_held(ids[1:])
        if not keep_held:
            self.release(ids[0])
        return ids[0]

    def _cancel_held(self, job_ids: Sequence[str]) -> None:
        """Best effort: a held retry left behind never runs; failing here must not hide the
        job that is the answer."""
        with contextlib.suppress(SchedulerError):
            self.cancel(job_ids)

    def release(self, job_id: str) -> None:
        self.call(["scontrol", "release", job_id])

    def tagged_jobs(self, tags: Iterable[str]) -> dict[str, set[str]]:
        """{tag: job ids (array jobs by their base id)} of this user's jobs the controller
        still knows whose comment carries one of `tags` (Slurm.sbatch's `tag`)."""
        wanted = set(tags)
        if not wanted:
            return {}
        out = self.call(["squeue", "-h", "--me", "--states=all", "-o", "%F|%k"])
        found: dict[str, set[str]] = {}
        for line in out.splitlines():
            job_id, _, comment = line.strip().partition("|")
            for word in comment.split():
                tag = word[len(TAG_PREFIX):] if word.startswith(TAG_PREFIX) else None
                if tag in wanted and job_id.isdigit():
                    found.setdefault(tag, set()).add(job_id)
        return found

    def queue(self, job_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """{job id (array tasks as `<job>_<task>`): (state, reason)} of jobs still known to
        the controller; finished jobs drop out after MinJobAge."""
        ids = sorted({j.split("_")[0] for j in job_ids})
        if not ids:
            return {}
        out = self.call(["squeue", "-h", "-r", "--states=all", "-j", ",".join(ids),
                         "-o", "%i|%T|%r"])
        states = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                states[parts[0]] = (parts[1], parts[2])
        return states

    def jobs_on_nodes(self, nodelist: str, own_job: str) -> list[str]:
        """The other jobs running on any node of `nodelist` (array tasks as `<job>_<task>`),
        `own_job` (a SLURM_JOB_ID) left out: the jobs that share this job's nodes."""
        out = self.call(["squeue", "-h", "-r", "--states=RUNNING,COMPLETING", "-w", nodelist,
                         "-o", "%A|%i"])
        found = set()
        for line in out.splitlines():
            raw, _, shown = line.strip().partition("|")
            if raw and raw != own_job:
                found.add(shown or raw)
        return sorted(found)

    def active_jobs(self) -> int:
        """How many jobs of this user may still run (pending, running, ...), array tasks counted
        one by one (`squeue -r`): what Slurm counts against MaxSubmitJobs."""
        out = self.call(["squeue", "-h", "-r", "--me", "--states=all", "-o", "%i|%T"])
        return sum(1 for line in out.splitlines()
                   if line.partition("|")[2].strip() in ACTIVE_STATES)

    def accounting(self, job_ids: Iterable[str]) -> dict[str, tuple[str, str]] | None:
        """{job id: (state, exit code)} from sacct, or None when accounting is off."""
        ids = sorted({j.split("_")[0] for j in job_ids})
        if not ids:
            return None
        try:
            out = self.call(["sacct", "-X", "-n", "-P", "-j", ",".join(ids),
                             "-o", "JobID,State,ExitCode"])
        except SchedulerError:
            return None  # no sacct, or "Slurm accounting storage is disabled"
        states: dict[str, tuple[str, str]] = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3:
                for key in expand_array_id(parts[0]):
                    states[key] = (parts[1].split(" ")[0], parts[2])
        # Array tasks that never started keep the array's own record: a one-task array
        # cancelled while pending is plain "<job>" there, not "<job>_<task>".
        for j in job_ids:
            base = j.split("_")[0]
            if j not in states and base in states:
                states[j] = states[base]
        return states

    def job_info(self, job_id: str) -> dict[str, str] | None:
        """`scontrol show job -o JOB` as a dict (JobState, Reason, Restarts, ...), or None when
        the controller no longer knows the job (or does not answer)."""
        from toolkit.launch.slurm_output import parse_scontrol_job

        try:
            out = self.call(["scontrol", "show", "job", "-o", job_id])
        except SchedulerError:
            return None
        info = parse_scontrol_job(out)
        return info or None

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.call(["scancel", *job_ids])

    def has_gpus(self, partition: str | None) -> bool:
        """Whether the partition's nodes advertise GPU GRES (`--gpus-per-node` then applies).
        Raises SchedulerError when sinfo cannot tell."""
        argv = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
        return "gpu" in self.call(argv)
