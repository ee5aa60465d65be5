"""What the launcher said about ranks that died: Open MPI's `mpirun` and Slurm's `srun` messages
in a run's `output.log` -> `LauncherReport`s. Pure text parsing, no files.

A rank killed outright (SIGKILL, the OOM killer, a segfault) writes nothing into its own event
file; the launcher is the only witness. The messages read here, as recorded in
`tests/data/launcher/` (Open MPI 4.1.4, Slurm 22.05.8)::

    mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
    MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD
    with errorcode 4.
    mpirun detected that one or more processes exited with non-zero status, ...
      Process name: [[19921,1],1]
      Exit code:    3
    srun: error: node2: task 1: Killed
    srun: error: node1: tasks 0-1: Exited with exit code 2

A rank that Python's fault handler guards (the launcher sets `PYTHONFAULTHANDLER=1`) prints, as
it dies of SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT, where its Python code was
(`python_crashes`)::

    Fatal Python error: Segmentation fault

    Current thread 0x00007f397aab9b80 (most recent call first):
      File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
      File "/tmp/rec/segv.py", line 8 in read_null

Open MPI reports the first process that failed (later ones are killed by mpirun silently, and
its "PID" is 0 in 4.1); srun reports every task, in the order it saw them end. mpirun's rank and
srun's task are the MPI rank (the worker checks that SLURM_PROCID equals it). Combining these
with the rank files into a reason is `toolkit.results.diagnose`'s job.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from parsers import logtext
from topology.model import parse_cpu_list  # "0-1,3": integer ranges, here of tasks

MAX_TASKS = 1 << 24
"""Tasks a task list of srun's may name; more is garbled output, not a job."""
KIND_SIGNAL = "signal"
"""The rank was killed by a signal."""
KIND_EXIT = "exit"
"""The rank exited with a non-zero code."""
KIND_ABORT = "abort"
"""The rank called MPI_Abort (its own event file says why)."""
KIND_OTHER = "other"
"""srun said something else about the task (its text is in `detail`)."""


@dataclass(frozen=True)
class LauncherReport:
    launcher: str
    """`mpirun` or `srun`."""
    ranks: tuple[int, ...]
    kind: str
    signal: str | None = None
    """`SIGKILL`, ... for KIND_SIGNAL (`signal 42` when Python has no name for it)."""
    exit_code: int | None = None
    """For KIND_EXIT, and MPI_Abort's error code for KIND_ABORT."""
    host: str | None = None
    detail: str = ""
    """The launcher's own words."""

    def describe(self) -> str:
        """`was killed by signal SIGKILL`, `exited with exit code 3`, ..."""
        if self.kind == KIND_SIGNAL:
            return f"was killed by signal {self.signal}"
        if self.kind == KIND_EXIT:
            return f"exited with exit code {self.exit_code}"
        if self.kind == KIND_ABORT:
            return f"called MPI_Abort with error code {self.exit_code}"
        return f"ended: {self.detail}"


# The launcher's messages begin a line; the worker quotes a program's output only inside a line
# of its own (`[rank 0] ...`, `... its last lines, newest first: ...`), so a program that prints
# an mpirun-style line is never taken for mpirun. Ranks, signals and codes are at most 9 digits:
# a longer figure is garbled output, not a number to convert (Python refuses 4,300 digits).
_MPIRUN_SIGNAL = logtext.compile(
    r"(?m)^mpirun noticed that process rank (\d{1,9}) with PID \d+ on node (\S+?) exited on "
    r"signal (\d{1,9})\b")
_MPIRUN_ABORT = logtext.compile(
    r"(?m)^MPI_ABORT was invoked on rank (\d{1,9}) in communicator \S+\s+with errorcode "
    r"(-?\d{1,9})\b")
_MPIRUN_EXIT = logtext.compile(
    r"(?ms)^mpirun detected that one or more processes exited with non-zero status.*?"
    r"Process name:\s*\[\[\d+,\d+\],(\d{1,9})\]\s*(?:Local host:\s*(\S+)\s*)?Exit code:\s*"
    r"(-?\d{1,9})\b")
_SRUN_TASKS = logtext.compile(r"(?m)^srun: error: (\S+): tasks? ([\d,-]+): (.+?)[ \t]*$")
_SRUN_EXIT = logtext.compile(r"Exited with exit code (-?\d{1,9})")
#: srun names a signal the way strsignal(3) does ("Killed", "Terminated", "Segmentation fault").
_SIGNAL_BY_TEXT = {signal.strsignal(s): s.name for s in signal.Signals
                   if signal.strsignal(s) and s.name.startswith("SIG")
                   and not s.name.startswith("SIG_")}


_FATAL = logtext.compile(r"(?m)^Fatal Python error: ([^\n]{1,200})$")
_THREAD = logtext.compile(
    r"(?m)^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$")
_FRAME = logtext.compile(r'(?m)^  File "([^"\n]{1,1000})", line (\d+) in ([^\n]{1,200})$')
#: Open MPI's own signal handler, for a fault at address 0 (a call through an empty pointer).
_NULL_FAULT = logtext.compile(r"(?m)^\[[^\]\n]{1,300}\] Failing at address: \(nil\)$")
#: signals whose death Python's fault handler reports.
FAULT_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"})
STACK_FRAMES = 3
"""Innermost frames kept of a crashed thread's stack."""


@dataclass(frozen=True)
class PythonCrash:
    """One `Fatal Python error` block of the fault handler."""

    error: str
    """`Segmentation fault`, `Aborted`, ..."""
    frames: tuple[str, ...]
    """The crashed thread's innermost frames first, as `name (file:line)`."""

    @property
    def in_import(self) -> bool:
        """Whether the innermost frames are the import machinery's (an extension module's
        initialisation, such as mpi4py's MPI_Init, crashed)."""
        return any("<frozen importlib." in frame for frame in self.frames)

    def describe(self) -> str:
        where = " called from ".join(self.frames)
        return f"Python's fault handler: {self.error}" + (f" in {where}" if where else "")


def python_crashes(text: str) -> list[PythonCrash]:
    """Every fault-handler block in the text, in order. The frames are those of the thread the
    handler names first after the error (the one that crashed), up to `STACK_FRAMES`."""
    out: list[PythonCrash] = []
    fatals = list(_FATAL.finditer(text))
    for i, m in enumerate(fatals):
        end = fatals[i + 1].start() if i + 1 < len(fatals) else len(text)
        thread = _THREAD.search(text, m.end(), end)
        frames: list[str] = []
        if thread is not None:
            pos = thread.end() + 1
            while len(frames) < STACK_FRAMES:
                f = _FRAME.match(text, pos, end)
                if f is None:
                    break
                frames.append(f"{f[3]} ({f[1]}:{f[2]})")
                pos = f.end() + 1
        out.append(PythonCrash(m[1].strip(), tuple(frames)))
    return out


def null_fault(text: str) -> bool:
    """Whether Open MPI's signal handler reported a fault at address 0 in the text."""
    return _NULL_FAULT.search(text) is not None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _task_list(text: str) -> tuple[int, ...] | None:
    """srun's task list (`0-1,3`) in order, or `None` for one that is not a list or names more
    tasks than a job has (`0-999999999` would be a billion integers in memory)."""
    total = 0
    for part in text.split(","):
        first, _, last = part.partition("-")
        if not (first.isdigit() and (not last or last.isdigit())) or max(
                len(first), len(last)) > 9:
            return None
        total += int(last) - int(first) + 1 if last else 1
        if total > MAX_TASKS:
            return None
    try:
        return tuple(sorted(parse_cpu_list(text)))
    except ValueError:
        return None


def parse(text: str, world: int | None = None) -> list[LauncherReport]:
    """Every rank the launcher reported as ended abnormally, in the order of the text. Given
    the run's `world` size, a report of ranks the run does not have is not the launcher's."""
    found: list[tuple[int, LauncherReport]] = []
    for m in _MPIRUN_SIGNAL.finditer(text):
        found.append((m.start(), LauncherReport(
            "mpirun", (int(m[1]),), KIND_SIGNAL, signal=signal_name(int(m[3])), host=m[2],
            detail=_line_at(text, m.start()))))
    for m in _MPIRUN_ABORT.finditer(text):
        found.append((m.start(), LauncherReport(
            "mpirun", (int(m[1]),), KIND_ABORT, exit_code=int(m[2]),
            detail=" ".join(m[0].split()))))
    for m in _MPIRUN_EXIT.finditer(text):
        found.append((m.start(), LauncherReport(
            "mpirun", (int(m[1]),), KIND_EXIT, exit_code=int(m[3]), host=m[2],
            detail=f"process rank {m[1]} exited with exit code {m[3]}")))
    for m in _SRUN_TASKS.finditer(text):
        tasks = _task_list(m[2])
        if tasks is None:
            continue  # not a task list after all
        host, what = m[1], m[3]
        exited = _SRUN_EXIT.fullmatch(what)
        if exited:
            report = LauncherReport("srun", tasks, KIND_EXIT, exit_code=int(exited[1]),
                                    host=host, detail=m[0])
        elif what in _SIGNAL_BY_TEXT:
            report = LauncherReport("srun", tasks, KIND_SIGNAL, signal=_SIGNAL_BY_TEXT[what],
                                    host=host, detail=m[0])
        else:
            report = LauncherReport("srun", tasks, KIND_OTHER, host=host, detail=m[0])
        found.append((m.start(), report))
    return [r for _, r in sorted(found, key=lambda x: x[0])
            if world is None or all(0 <= rank < world for rank in r.ranks)]


def _line_at(text: str, pos: int) -> str:
    end = text.find("\n", pos)
    return text[pos:end if end >= 0 else len(text)].strip()
