"""Starting a preflight's ranks: inside a job before its repeats (the job script's lines), on
this machine under mpirun, or as a Slurm job of its own over chosen nodes.

Every way runs the same three steps: `begin` makes `preflight/<tag>/` (tag: UTC time and the
Slurm job id or pid, so tags sort by time) and prints it, every rank runs `rank --dir` into it,
and `verdict` judges what they wrote (and exits PREFLIGHT_FAILED when a node is not ok and
`on_fail` is not `warn`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.launch.launcher import mpirun_argv, pythonpath, srun_argv
from toolkit.launch.shell import ShellWord, shell_join
from toolkit.results.layout import LOG_FILE, preflight_dir
from toolkit.results.safe_write import make_dir
from toolkit.spec import Case

if TYPE_CHECKING:
    from toolkit.analysis.preflight import Verdict

MODULE = "toolkit.preflight"
PREFLIGHT_FAILED = 6
"""Exit status of `verdict` (and of the job it ends) when a node or a link is not ok under
on_fail `stop` or `skip_node`."""
PREFLIGHT_PARTLY_JUDGED = 7
"""Exit status of `verdict` when nothing judged is not ok but some figures could not be judged
(nothing to compare with, or a host crowded while they were measured): ok as far as judged.
A job's preflight goes on to train on it."""


def exit_status(verdict: Verdict, warn: bool = False) -> int:
    """`verdict`'s exit status: PREFLIGHT_FAILED when a node or a link is not ok (unless
    `warn`), else 0 when every figure was judged and PREFLIGHT_PARTLY_JUDGED when not."""
    if not verdict.ok and not warn:
        return PREFLIGHT_FAILED
    return 0 if verdict.all_judged else PREFLIGHT_PARTLY_JUDGED


def new_tag(job_id: str | None = None) -> str:
    """`20261124T101500Z-<job>`: sorts by time, unique per job; the job as Slurm names it
    (`123`, or `123_4` for an array task), or `local-<pid>`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{job_id or f'local-{os.getpid()}'}"


def begin(base: Path, job: str | None = None) -> Path:
    """Make a new preflight directory under a results root or case directory; `job` names
    what runs it (default: the Slurm job this runs in, else `local-<pid>`)."""
    env = os.environ
    job = job or (f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
           if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID")
           else env.get("SLURM_JOB_ID"))
    for _ in range(100):
        out = preflight_dir(base, new_tag(job))
        if not os.path.lexists(out):
            make_dir(out, root=base)
            return out
        time.sleep(1.0)
    raise FileExistsError(f"{out} exists")


def rank_argv(python: str, directory: Path | str) -> list[str]:
    return [python, "-m", MODULE, "rank", "--dir", str(directory)]


RankCommand = Callable[[list[str], ShellWord], list[str]]
"""Given the python words of a rank and its working directory, the whole command that starts
every rank (the executor's launcher, and its container when the case has one)."""

PREFLIGHT_VAR = ShellWord('"$PREFLIGHT"')
"""The preflight directory in a job script (set by `begin`'s line)."""


def job_lines(python: str, case: Case, command: RankCommand) -> list[str]:
    """Shell lines of a job script that run the case's preflight before its repeats, its ranks
    started by `command`; `CASE_DIR` is set before."""
    py = shlex.quote(python)
    start = shell_join(command([python, "-m", MODULE, "rank", "--dir", PREFLIGHT_VAR],
                               PREFLIGHT_VAR))
    on_fail = shlex.quote(case.preflight.on_fail)
    return [
        f'PREFLIGHT=$({py} -m {MODULE} begin "$CASE_DIR") || exit $?',
        f"(timeout --kill-after=30 {int(case.preflight.timeout_s)} {start}) "
        f'> "$PREFLIGHT/{LOG_FILE}" 2>&1',
        f'{py} -m {MODULE} verdict "$PREFLIGHT" --on-fail {on_fail} '
        f'|| {{ rc=$?; [ "$rc" -eq {PREFLIGHT_PARTLY_JUDGED} ] || exit "$rc"; }}',
    ]


def slurm_launcher(case: Case) -> list[str]:
    if case.slurm.launcher == "mpirun":
        return mpirun_argv("mpirun", case.launched_ranks, case.ranks_per_node)
    return srun_argv(case)


@dataclass
class LocalRun:
    """A preflight of this machine's ranks under mpirun."""

    ranks: int
    mpirun: str = "mpirun"
    python: str = sys.executable
    env: dict[str, str] | None = None
    timeout_s: float | None = None
    """Kill the ranks (the whole process group) after this long."""
    command: Callable[[list[str], str], list[str]] | None = None
    """Given a rank's python words and the preflight directory, the whole command (a
    container's around the launcher); None: `mpirun` here."""

    def run(self, directory: Path) -> int:
        """Run the ranks into `directory` (made by `begin`); their output goes to its
        output.log and to this terminal. Returns the launcher's exit status."""
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.ranks)))
        argv = rank_argv(self.python, directory)
        cmd = (self.command(argv, str(directory)) if self.command is not None
               else [*mpirun_argv(self.mpirun, self.ranks), *argv])
        from toolkit.results.safe_write import open_file

        fd = open_file(directory / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                       root=directory)
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=env, text=True, start_new_session=True)
            timer = threading.Timer(self.timeout_s or 1e9, _kill_group, (proc,))
            timer.daemon = True
            timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    if line.startswith("preflight:"):
                        sys.stdout.write("  " + line)
                        sys.stdout.flush()
                return proc.wait()
            finally:
                timer.cancel()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)

