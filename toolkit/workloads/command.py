"""A command case on one rank: start the user's program as a child of the worker with the
environment torchrun gives its workers, copy what it prints to the rank's program log while
reading its step records from it, and hand the worker its iterations.

The worker around it has already discovered the ranks, bound this process (the child inherits
its CPU set and NIC variables), started the NVML sampler and the hang watchdog; each line the
program prints beats the watchdog, each step record counts as an iteration. The program is
started from an argument list, never through a shell, and dies with the worker (the kernel's
parent-death signal), so an aborted MPI job leaves no training process behind.

What lives elsewhere: the placeholders and their checks (`toolkit.spec.command`), turning
lines into records and records into iterations (`toolkit.workloads.command_output`).
"""

from __future__ import annotations

import collections
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from parsers.foreign import Skipped
from toolkit.rank.discovery import RankInfo
from toolkit.results.layout import (
    REPORT_EVENTS_VARIABLE,
    program_log_file,
    report_events_file,
)
from toolkit.results.safe_write import open_file
from toolkit.spec import Case, CommandLaunch
from toolkit.spec.command import fill_argv, interpreter_path, program_argv
from toolkit.workloads.command_output import (
    MEASURED_BY_REPORT,
    Iteration,
    LineReader,
    StepRecord,
    read_log_text,
    read_report_lines,
    timeline,
)

TAIL_LINES = 5
"""Lines of the program's output a failure message quotes (all of it is in its log)."""

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ProgramFailed(RuntimeError):
    """The program ended badly (exit code or signal); the message quotes its last lines."""


def placeholder_values(case: Case, case_id: str, info: RankInfo, run_dir: Path, repeat: int,
                       workdir: str, python: str) -> dict[str, object]:
    per_node = case.command.launch is CommandLaunch.PER_NODE
    return {
        "batch_size_per_device": case.batch_size_per_device,
        "global_batch_size": case.global_batch_size, "precision": case.precision.value,
        "warmup_iterations": case.warmup_iterations,
        "measured_iterations": case.measured_iterations,
        "total_iterations": case.total_iterations, "seed": case.seed,
        "num_nodes": case.num_nodes, "gpus_per_node": case.gpus_per_node,
        "world_size": case.world_size, "rank": info.rank,
        "local_rank": 0 if per_node else info.local_rank, "node_rank": info.node_index,
        "master_addr": info.master_addr, "master_port": info.master_port,
        "run_dir": str(run_dir.absolute()), "repeat": repeat, "case_id": case_id,
        "workdir": workdir, "python": python,
    }


def visible_devices(gpu_index: int | None, local_rank: int, count: int) -> str | None:
    """CUDA_VISIBLE_DEVICES for a program that opens `cuda:LOCAL_RANK`, as torchrun's workers
    do: every GPU of the node, ordered so that position LOCAL_RANK is the GPU the binding
    chose. None where nothing was bound."""
    if gpu_index is None or count < 1 or not 0 <= local_rank < count or gpu_index >= count:
        return None
    order = list(range(count))
    at = order.index(gpu_index)
    order[at], order[local_rank] = order[local_rank], order[at]
    return ",".join(map(str, order))


def slurm_task_variables(info: RankInfo, per_node: bool) -> dict[str, str]:
    """Slurm's per-task variables as srun sets them for this process: its task's rank, local
    rank and node among the run's tasks (one a rank, or one a node with `per_node`).

    Frameworks that find `SLURM_NTASKS` trust them over torchrun's (Lightning's
    SLURMEnvironment does). Under srun they are already these values; under mpirun inside an
    allocation every process has inherited the batch step's (task 0 of its own count), which
    would make each rank believe it is rank 0."""
    if per_node:
        task, local, tasks, per = info.node_index, 0, info.num_nodes, 1
    else:
        task, local, tasks, per = info.rank, info.local_rank, info.world_size, info.local_size
    return {"SLURM_PROCID": str(task), "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(info.node_index), "SLURM_NTASKS": str(tasks),
            "SLURM_NPROCS": str(tasks), "SLURM_NTASKS_PER_NODE": str(per),
            "SLURM_STEP_NUM_TASKS": str(tasks)}


def program_environment(case: Case, info: RankInfo, run_dir: Path,
                        gpu_index: int | None, gpu_count: int,
                        base: dict[str, str]) -> dict[str, str]:
    """The child's environment: the worker's (Slurm's and Open MPI's variables, the binding's
    NIC variables, the grid's `env`), torchrun's variables, Slurm's per-task variables made
    this process's (`slurm_task_variables`), and the report API's file."""
    env = dict(base)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + env["PYTHONPATH"]
                                             if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env[REPORT_EVENTS_VARIABLE] = str(report_events_file(run_dir, info.rank).absolute())
    env.update({"MASTER_ADDR": info.master_addr, "MASTER_PORT": str(info.master_port)})
    per_node = case.command.launch is CommandLaunch.PER_NODE
    if "SLURM_JOB_ID" in env:
        env.update(slurm_task_variables(info, per_node))
    if per_node:
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            env.pop(name, None)  # the program's own launcher sets them for its workers
        env.update({"NNODES": str(case.num_nodes), "NODE_RANK": str(info.node_index),
                    "NPROC_PER_NODE": str(case.gpus_per_node)})
        return env
    env.update({"RANK": str(info.rank), "LOCAL_RANK": str(info.local_rank),
                "WORLD_SIZE": str(info.world_size), "LOCAL_WORLD_SIZE": str(info.local_size),
                "GROUP_RANK": str(info.node_index), "NODE_RANK": str(info.node_index)})
    devices = visible_devices(gpu_index, info.local_rank, gpu_count)
    if devices is not None and "CUDA_VISIBLE_DEVICES" not in dict(case.env):
        env["CUDA_VISIBLE_DEVICES"] = devices
    return env


def gpu_count() -> int:
    """NVIDIA GPUs on this node (NVML); 0 without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver: no GPU to order
        return 0


def no_records_reason(case: Case, summaries: list[dict[str, Any]]) -> str | None:
    """Why the run has no figure when no rank read a step record from its program (None when
    one did): the pattern that matched nothing, or the log family that was not found."""
    runs = [s.get("command") or {} for s in summaries]
    if any(r.get("records") for r in runs):
        return None
    lines = sum(int(r.get("output_lines") or 0) for r in runs)
    logs = ", ".join(sorted({str(r.get("program_log")) for r in runs if r.get("program_log")}))
    options = case.command
    if options.pattern is not None:
        return (f"the pattern command.pattern `{options.pattern}` matched none of the {lines} "
                f"line(s) the program printed ({logs}): no step was measured")
    how = {str(r.get("measured_by")) for r in runs}
    if options.log_file is not None:
        return (f"no step records in the program's log file {options.log_file!r} "
                f"({', '.join(sorted(how))}); check command.log_file and command.log_format")
    if options.log_format != "auto":
        return (f"no {options.log_format} step records in the {lines} line(s) the program "
                f"printed ({logs})")
    return (f"no step records: none of the {lines} line(s) the program printed ({logs}) is a "
            "known log family's step line, and it wrote none through trainbench.report; name "
            "the family (command.log_format) or give command.pattern")


_LIBC = ctypes.CDLL(None, use_errno=True)
"""Loaded here, in the worker: the child may only call into it between fork and exec (loading a
library there could wait on a lock another thread of the worker held at the fork)."""
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def output_lines(fd: int, write: Callable[[bytes], object], flush: Callable[[], object],
                 chunk: int = 1 << 16, longest: int = 1 << 20) -> Iterator[str]:
    """The lines read from `fd` until it closes, each written (as read) with `write` first. A
    carriage return ends a line too: a progress bar's updates are lines, and a record printed
    after one is read when it is printed. A line longer than `longest` bytes is cut."""
    pending = b""
    while True:
        data = os.read(fd, chunk)
        if not data:
            break
        write(data)
        flush()
        pending += data
        *lines, pending = re.split(rb"\r\n|\r|\n", pending)
        if len(pending) > longest:
            lines.append(pending)
            pending = b""
        for raw in lines:
            yield raw.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with code {rc}"


def run(case: Case, case_id: str, info: RankInfo, run_dir: Path, repeat: int,
        gpu_index: int | None, gpu_count: int, on_output: Callable[[int], None],
        ) -> tuple[list[Iteration], dict[str, Any]]:
    """Run the program on this rank. `on_output(records so far)` after each line (the
    watchdog's beat). Returns the rank's iterations and its summary; raises ProgramFailed when
    the program ends badly."""
    options = case.command
    workdir = options.workdir or os.getcwd()
    python = (interpreter_path(options.interpreter, workdir) if options.interpreter
              else sys.executable)
    values = placeholder_values(case, case_id, info, run_dir, repeat, workdir, python)
    argv = fill_argv(program_argv(options, workdir), values)
    env = program_environment(case, info, run_dir, gpu_index, gpu_count, dict(os.environ))
    log_path = program_log_file(run_dir, info.rank)
    reader = LineReader(options.pattern, options.log_format)
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    started = time.time()
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
    except OSError as err:
        raise ProgramFailed(f"rank {info.rank}: cannot start {argv[0]!r} in {workdir}: "
                            f"{err.strerror or err}") from None
    assert proc.stdout is not None
    fd = open_file(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=run_dir)
    with os.fdopen(fd, "wb") as log:
        for line in output_lines(proc.stdout.fileno(), log.write, log.flush):
            tail.append(line)
            reader.feed(line, time.time())
            on_output(len(reader.records))
    rc = proc.wait()
    ended = time.time()
    if rc != 0:
        # One line, newest first: run tables quote a reason's first line, cut short.
        shown = " | ".join(t.strip() for t in reversed(tail) if t.strip())
        raise ProgramFailed(f"rank {info.rank}: the program {describe_exit(rc)} after "
                            f"{ended - started:.1f} s; its last lines, newest first "
                            f"({log_path.name}): {shown or '(it printed nothing)'}; argv: "
                            f"{' '.join(argv)}")
    records, measured_by, skipped = _records(case, reader, values, run_dir, info.rank, ended)
    iterations, method, clock = timeline(records, case.global_batch_size, started)
    summary: dict[str, Any] = {
        "command": {"argv": argv, "workdir": workdir, "exit_code": rc,
                    "output_lines": reader.lines, "program_log": log_path.name,
                    "records": len(records), "measured_by": measured_by,
                    "method": method, "clock": clock, "wall_s": ended - started,
                    "skipped": skipped},
        "device": None,
    }
    return iterations, summary


def _records(case: Case, reader: LineReader, values: dict[str, object], run_dir: Path,
             rank: int, ended: float) -> tuple[list[StepRecord], str, list[str]]:
    """The rank's step records, how they were read, and what was skipped reading them: the
    case's pattern; else the report API's records where the program wrote any; else its log
    file or its output's family."""
    options = case.command
    if options.pattern is not None:
        return reader.records, reader.measured_by, reader.notes()
    report = report_events_file(run_dir, rank)
    if report.is_file():
        refused = Skipped(f"line(s) of {report.name} not read")
        records = read_report_lines(report.read_bytes().splitlines(), refused)
        if records:
            return records, MEASURED_BY_REPORT, refused.notes()
    if options.log_file is not None:
        path = Path(fill_argv((options.log_file,), values)[0])
        if not path.is_absolute():
            path = Path(options.workdir or ".") / path
        if path.is_file():
            text = path.read_text("utf-8", errors="replace")
            measured_by, records, notes = read_log_text(text, options.log_format, ended)
            return records, measured_by, notes
        return [], f"log:{options.log_format} (no file {path})", []
    return reader.records, reader.measured_by, reader.notes()
