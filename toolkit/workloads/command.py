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

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
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
    steps_read_file,
    window_read_file,
)
from toolkit.results.safe_write import atomic_write_json, open_file
from toolkit.spec import Case, CommandLaunch, RateScope
from toolkit.spec.command import (
    EXIT_GRACE_S,
    STOP_GRACE_S,
    CommandOptions,
    fill_argv,
    interpreter_path,
    program_argv,
)
from toolkit.workloads.command_output import (
    MEASURED_BY_REPORT,
    FileFollower,
    Iteration,
    LineReader,
    StepRecord,
    numbered,
    read_log_text,
    read_report_lines,
    timeline,
)
from toolkit.workloads.command_pump import TAIL_LINES, GroupEnd, OutputPump

POLL_S = 0.2
"""How often the worker looks at the program, its peers' window marker and the graces while
no line arrives."""

READ_AFTER_END_S = 2.0
"""Once the program has exited and its process group is ended, how long its output is still
read while something (a writer outside the group) keeps printing to it."""

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ProgramFailed(RuntimeError):
    """The program ended badly (exit code or signal); the message quotes its last lines."""


def placeholder_values(case: Case, case_id: str, info: RankInfo, run_dir: Path, repeat: int,
                       workdir: str, python: str) -> dict[str, object]:
    per_node = case.command.launch is CommandLaunch.PER_NODE
    return {
        **case_values(case, case_id), "rank": info.rank,
        "local_rank": 0 if per_node else info.local_rank, "node_rank": info.node_index,
        "master_addr": info.master_addr, "master_port": info.master_port,
        "run_dir": str(run_dir.absolute()), "repeat": repeat,
        "workdir": workdir, "python": python,
    }


def case_values(case: Case, case_id: str) -> dict[str, object]:
    """The placeholders whose values are the case's, the same on every rank and repeat."""
    return {
        "batch_size_per_device": case.batch_size_per_device,
        "global_batch_size": case.global_batch_size, "precision": case.precision.value,
        "warmup_iterations": case.warmup_iterations,
        "measured_iterations": case.measured_iterations,
        "total_iterations": case.total_iterations, "seed": case.seed,
        "num_nodes": case.num_nodes, "gpus_per_node": case.gpus_per_node,
        "world_size": case.world_size, "case_id": case_id,
    }


def planned_command_line(case: Case, case_id: str) -> str:
    """The program's command line as a rank will run it, for a dry run: the case's
    placeholders filled (the interpreter in front where one is set); those a rank fills
    (`{rank}`, `{run_dir}`, `{master_port}`, the toolkit's own `{python}`, ...) left as they
    are written."""
    options = case.command
    workdir = options.workdir or os.getcwd()
    values: dict[str, object] = {**case_values(case, case_id), "workdir": workdir}
    if options.interpreter is not None:
        values["python"] = interpreter_path(options.interpreter, workdir)
    return shlex.join(fill_argv(program_argv(options, workdir), values, keep_unknown=True))


def visible_devices(gpu_index: int | None, local_rank: int, count: int,
                    visible: str | None = None) -> str | None:
    """CUDA_VISIBLE_DEVICES for a program that opens `cuda:LOCAL_RANK`, as torchrun's workers
    do: every GPU of the node, ordered so that position LOCAL_RANK is the GPU the binding
    chose (an NVML index). `visible`: the rank's own CUDA_VISIBLE_DEVICES (a node given some of
    the machine's GPUs), whose entries are then the node's GPUs. None where nothing was
    bound, or where `visible` does not list the bound GPU by its index."""
    order = [e.strip() for e in visible.split(",")] if visible is not None else \
        [str(i) for i in range(count)]
    if gpu_index is None or not 0 <= local_rank < len(order) or str(gpu_index) not in order:
        return None
    at = order.index(str(gpu_index))
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
    devices = visible_devices(gpu_index, info.local_rank, gpu_count,
                              env.get("CUDA_VISIBLE_DEVICES"))
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


def _own_group_dying_with_parent() -> None:  # pragma: no cover - in the child, before exec
    # a process group of its own: trainbench can end the program and every child it started
    _LIBC.setpgid(0, 0)
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with code {rc}"


FAULT_DUMP = re.compile(r"\s*((Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):"
                        r"|Extension modules: |File \"|<no Python frame>|$)")
"""The lines of Python's fault handler dump after its `Fatal Python error:` line."""


TEARDOWN_ABORT = "terminate called without an active exception"
"""What C++ prints when a thread is destroyed still running; in a multi-rank PyTorch program
that exits without ending its process group, gloo's worker threads at the interpreter's end."""

TEARDOWN_HINT = ("(a PyTorch program that exits with its process group alive can abort so "
                 "in its teardown: end it with torch.distributed.destroy_process_group())")


def fatal_error(lines: list[str]) -> str:
    """Where a program's last lines (oldest first) end in Python's fault handler dump, its
    `Fatal Python error: ...` line and the line printed just before it (what C++ said:
    `terminate called without an active exception` ...), which the dump's thread and module
    lists would otherwise push out of the newest lines; '' where there is none."""
    for k in range(len(lines) - 1, -1, -1):
        if lines[k].startswith("Fatal Python error:"):
            if not all(FAULT_DUMP.match(line) for line in lines[k + 1:]):
                return ""
            before = next((line for line in reversed(lines[:k]) if line.strip()), "")
            return f"{before}: {lines[k]}" if before else lines[k]
    return ""


def run(case: Case, case_id: str, info: RankInfo, run_dir: Path, repeat: int,
        gpu_index: int | None, gpu_count: int, on_output: Callable[[int, int], None],
        ) -> tuple[list[Iteration], dict[str, Any]]:
    """Run the program on this rank. `on_output(records so far, lines so far)` after each
    batch of lines (the watchdog's beat). Returns the rank's iterations and its summary;
    raises ProgramFailed when the program ends badly.

    How it ends: by itself, when its output closes; or, once it has exited, `EXIT_GRACE_S`
    later by trainbench ending its process group, when a child of it still holds its output;
    or, with `stop_after_window`, by trainbench once the last step of the measured window has
    been read on this rank or on a peer (`window_read_file`); or by trainbench, failing the
    run, once it has printed lines for `watchdog.unread_output_s` none of which is a step
    (`printed_no_step`). Whatever trainbench did is in the
    summary's `ended`; a program trainbench ended is judged on what it printed."""
    options = case.command
    workdir = options.workdir or os.getcwd()
    python = (interpreter_path(options.interpreter, workdir) if options.interpreter
              else sys.executable)
    values = placeholder_values(case, case_id, info, run_dir, repeat, workdir, python)
    argv = fill_argv(program_argv(options, workdir), values)
    env = program_environment(case, info, run_dir, gpu_index, gpu_count, dict(os.environ))
    log_path = program_log_file(run_dir, info.rank)
    reader = LineReader(options.pattern, options.log_format)
    started = time.time()
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_own_group_dying_with_parent)
    except OSError as err:
        raise ProgramFailed(f"rank {info.rank}: cannot start {argv[0]!r} in {workdir}: "
                            f"{err.strerror or err}") from None
    assert proc.stdout is not None
    keeper = _keeper(proc.pid)
    fd = open_file(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=run_dir)
    pump = OutputPump(proc.stdout.fileno(), fd)
    _RUNNING.add(proc.pid)
    try:
        with _group_ends_with_worker(proc.pid):
            pump.start()
            ending = _follow(case, info.rank, run_dir, proc, pump, reader, on_output, started,
                             _followers(case, run_dir, info.rank, values))
    finally:
        _RUNNING.discard(proc.pid)
        pump.stop()
        os.close(fd)
        proc.stdout.close()
    rc = proc.wait()
    _release(keeper)
    ended = time.time()
    if ending is not None and ending.get("unread"):
        raise ProgramFailed(f"rank {info.rank}: {ending['unread']}; ended by trainbench "
                            f"({program_log_file(run_dir, info.rank).name} has its output); "
                            f"argv: {' '.join(argv)}")
    stopped = ending is not None and ending.get("window_read")
    peer = _peer_window(run_dir, started) if rc != 0 and options.stop_after_window else None
    if not stopped and peer is not None:
        # a peer read the window and ended its program first: this one lost its peer
        ending = {"by": "peer", "window_read": True,
                  "why": f"{peer} read the end of the measured window and ended its program; "
                         f"this rank's program then {describe_exit(rc)}"}
        stopped = True
    if rc != 0 and not stopped:
        # One line, newest first: run tables quote a reason's first line, cut short.
        kept = [t.decode("utf-8", "replace").strip() for t in pump.tail]
        shown = " | ".join([t for t in reversed(kept) if t][:TAIL_LINES])
        fatal = fatal_error(kept)
        if fatal.startswith(TEARDOWN_ABORT) and info.world_size > 1:
            fatal = f"{fatal} {TEARDOWN_HINT}"
        if fatal:
            shown = f"{fatal}; then {shown}"
        unlogged = (f" (its log could not be written: {pump.log_error}; the lines below were "
                    "read from its output)" if pump.log_error else "")
        raise ProgramFailed(f"rank {info.rank}: the program {describe_exit(rc)}{unlogged} after "
                            f"{ended - started:.1f} s; its last lines, newest first "
                            f"({log_path.name}): {shown or '(it printed nothing)'}; argv: "
                            f"{' '.join(argv)}")
    records, measured_by, skipped = _records(case, reader, values, run_dir, info.rank, ended)
    rate_ranks = case.dp if options.rate is RateScope.RANK else 1
    iterations, method, clock = timeline(records, case.global_batch_size, started, rate_ranks)
    summary: dict[str, Any] = {
        "command": {"argv": argv, "workdir": workdir, "exit_code": rc,
                    "output_lines": pump.lines, "lines_not_parsed": pump.not_parsed,
                    "program_log": log_path.name, "log_bytes_left_out": pump.log_left_out,
                    "log_error": pump.log_error,
                    "records": len(records), "measured_by": measured_by,
                    "method": method, "clock": clock, "wall_s": ended - started,
                    "rate_scope": (options.rate or RateScope.JOB).value,
                    "rate_scope_stated": options.rate is not None, "rate_ranks": rate_ranks,
                    "ended": ending, "skipped": skipped},
        "device": program_device(gpu_count),
        "threads": given_threads(env),
    }
    return iterations, summary


def program_device(bound_gpus: int) -> str | None:
    """What the program computed on, as far as trainbench knows: `cpu` on a node without a
    GPU (so that a scaling note names its threads per rank, as for a built-in CPU run); None
    where the node has GPUs (which of them the program used is its own). `bound_gpus`: the
    GPUs counted for the rank's binding, 0 where none was bound (the node is asked then)."""
    return "cpu" if bound_gpus == 0 and gpu_count() == 0 else None


def given_threads(env: dict[str, str]) -> int | None:
    """The compute threads the program was given: `OMP_NUM_THREADS` in its environment (the
    case's `cpu_threads`, else the CPUs each rank has, as the launcher sets it; the grid's
    `env` may set another). None where it is not a count; what the program then does with its
    threads is its own."""
    value = env.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


_RUNNING: set[int] = set()
"""Process groups of the programs this worker runs now (each program leads its own)."""


def end_running_programs() -> None:
    """SIGKILL every running program's process group: for the worker's way out when it aborts
    the job (the hang watchdog), since a child of a program is no child of the worker and the
    kernel's parent-death signal reaches the program alone."""
    for pgid in list(_RUNNING):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def _group_ends_with_worker(pgid: int) -> Iterator[None]:
    """While the program runs: a SIGTERM or SIGINT to the worker (the launcher ending the job,
    Ctrl-C) ends the program's process group first, then the worker as the signal would have.
    Only where this is the main thread (signal handlers can be set nowhere else)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        sig = signal.Signals(signum)
        signal.signal(sig, _handler(previous[sig]))
        signal.raise_signal(sig)

    previous = {sig: signal.signal(sig, end) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, _handler(handler))


_KEEPER = """
import os, signal, sys
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
if not sys.stdin.buffer.read():
    try:
        os.killpg(int(sys.argv[1]), signal.SIGKILL)
    except OSError:
        pass
"""


def _keeper(pgid: int) -> subprocess.Popen[bytes] | None:
    """A small process, in a session of its own, that ends the program's process group when
    this worker dies without saying so (`kill -9`, the OOM killer): the kernel's parent-death
    signal reaches the program alone, and what it started would run on with nobody to end
    it. It reads its input until it closes: a word first means the worker ended normally."""
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _KEEPER, str(pgid)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _release(keeper: subprocess.Popen[bytes] | None) -> None:
    """The program is over: its keeper leaves without ending anything."""
    if keeper is None or keeper.stdin is None:
        return
    with contextlib.suppress(OSError):
        keeper.stdin.write(b"ended\n")
        keeper.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        keeper.wait(timeout=5)


def _handler(handler: Any) -> Any:
    """A handler `signal.signal` returned, as one it takes (None: set outside Python)."""
    return signal.SIG_DFL if handler is None else handler


def _followers(case: Case, run_dir: Path, rank: int,
               values: dict[str, object]) -> list[FileFollower]:
    """The files the program's steps come from besides its output, followed while it runs
    (none with a pattern: then its output alone counts, as `_records` reads it)."""
    options = case.command
    if options.pattern is not None:
        return []
    out = [FileFollower(report_events_file(run_dir, rank), report=True)]
    if options.log_file is not None:
        out.append(FileFollower(_log_file_path(options, values), report=False,
                                log_format=options.log_format))
    return out


def _log_file_path(options: CommandOptions, values: dict[str, object]) -> Path:
    path = Path(fill_argv((options.log_file or "",), values)[0])
    return path if path.is_absolute() else Path(options.workdir or ".") / path


def _steps(reader: LineReader, followers: list[FileFollower]) -> list[StepRecord]:
    """The step records so far, from where `_records` will take them: the report API's where
    it wrote any, else the log file's, else the output's."""
    for follower in followers:
        if follower.records:
            return follower.records
    return reader.records


def _follow(case: Case, rank: int, run_dir: Path, proc: subprocess.Popen[bytes],
            pump: OutputPump, reader: LineReader, on_output: Callable[[int, int], None],
            started_s: float, followers: list[FileFollower] | None = None,
            ) -> dict[str, Any] | None:
    """Parse the program's lines as the pump hands them on until its output is drained, and
    the files it reports its steps to (`followers`) as they grow, ending its process group
    where `run` says. Returns what trainbench did to end it, or None."""
    options = case.command
    followers = followers or []
    group: GroupEnd | None = None
    exited_s: float | None = None
    beaten = looked = 0.0
    lines_seen = records_seen = 0
    first_line_s: float | None = None
    unread: str | None = None
    steps_marked = False
    window_read: dict[str, Any] | None = None
    over_s = 0.0
    outside = False
    while not pump.drained:
        got = pump.get(POLL_S)
        for read_s, lines in got:
            reader.feed_lines(lines, read_s)
        now = time.time()
        followed = now - looked >= POLL_S and sum(f.poll(now) for f in followers) > 0
        steps = _steps(reader, followers)
        if got or pump.lines != lines_seen or followed:  # lines not parsed beat it too
            lines_seen = pump.lines
            on_output(len(steps), pump.lines)
            beaten = now
            first_line_s = now if first_line_s is None else first_line_s
            if steps and not steps_marked:
                steps_marked = _mark_steps_read(run_dir, rank)
        watch = group is None and options.stop_after_window and exited_s is None
        if watch and len(steps) != records_seen:  # at once: the program runs on
            records_seen = len(steps)
            window_read = _window_end(steps, case.total_iterations, rank)
            if window_read is not None:
                _mark_window_read(run_dir, rank, window_read["iteration"])
        if now - looked < POLL_S and got and window_read is None:
            continue
        looked = now
        if exited_s is None and proc.poll() is not None:
            exited_s = now
        if group is None and exited_s is not None and now - exited_s >= EXIT_GRACE_S:
            group = GroupEnd(proc.pid, f"its output was still open {EXIT_GRACE_S:g} s after it "
                             f"{describe_exit(proc.returncode)} (a child of it held it)",
                             STOP_GRACE_S)
        if watch and window_read is None and (peer := _peer_window(run_dir, started_s)):
            window_read = {"iteration": None, "rank": peer}
        limit = case.watchdog.unread_output_s
        if (group is None and exited_s is None and limit > 0 and first_line_s is not None
                and beaten - first_line_s >= limit and not reader.records
                and options.log_file is None and not report_events_file(run_dir, rank).exists()
                and not _peer_steps(run_dir, started_s)):
            # steady output, none of it a step on any rank: a pattern or log format that
            # reads nothing
            unread = (printed_no_step(options, pump.lines, beaten - first_line_s,
                                      reader.notes())
                      + f" (watchdog.unread_output_s={limit:g}; 0 turns this off)")
            group = GroupEnd(proc.pid, unread, STOP_GRACE_S)
        if watch and group is None and window_read is not None:
            where = (f"iteration {window_read['iteration']} read, the measured window ends at "
                     f"{case.total_iterations}" if window_read["iteration"] is not None else
                     f"{window_read['rank']} read the end of the measured window")
            group = GroupEnd(proc.pid, f"stop_after_window: {where}", STOP_GRACE_S)
        if group is not None:
            group.step()
            if group.over and proc.poll() is not None:
                over_s = over_s or now
                # everything it started is gone or killed: what is left in the pipe is read
                # once it falls silent, and a writer outside its group (its own session) is
                # not waited for past READ_AFTER_END_S, whatever it still prints
                if now - beaten > 2 * POLL_S:
                    break
                if now - over_s >= READ_AFTER_END_S:
                    outside = True
                    break
    if group is None:
        return None
    ending = {**group.record(), "window_read": window_read is not None,
              **({"unread": unread} if unread is not None else {})}
    if outside:
        ending["why"] += (f"; a writer outside its process group (in a session of its own) "
                          f"was still printing to its output {READ_AFTER_END_S:g} s after the "
                          "group ended, and was not read further")
        ending["writer_outside_group"] = True
    return ending


def printed_no_step(options: CommandOptions, lines: int, span_s: float | None = None,
                    refused: list[str] | None = None) -> str:
    """Why a program's output gave no step record: how many lines it printed (over how long)
    and what they were read with (`the program printed 44 line(s) in 31 s, none of which
    matched the pattern '...'`), and the step lines whose figures were refused."""
    if options.pattern is not None:
        what = f"matched the pattern {options.pattern!r}"
    elif options.log_format != "auto":
        what = f"is a step line of the log format {options.log_format!r}"
    else:
        what = "is a step line of a log family trainbench reads (log_format: auto)"
    over = f" in {span_s:.0f} s" if span_s is not None else ""
    return (f"the program printed {lines} line(s){over}, none of which {what}"
            + (f"; {'; '.join(refused)}" if refused else ""))


def _window_end(records: list[StepRecord], total: int, rank: int) -> dict[str, Any] | None:
    """{'iteration', 'rank'} once the records reach the window's last iteration, else None."""
    items = numbered(records)
    if items and items[-1][0] >= total:
        return {"iteration": items[-1][0], "rank": f"rank {rank}"}
    return None


def _mark_window_read(run_dir: Path, rank: int, iteration: int) -> None:
    path = window_read_file(run_dir)
    if not path.exists():
        atomic_write_json(path, {"rank": rank, "iteration": iteration, "time_s": time.time()},
                          root=run_dir)


def _mark_steps_read(run_dir: Path, rank: int) -> bool:
    path = steps_read_file(run_dir)
    if not path.exists():
        atomic_write_json(path, {"rank": rank, "time_s": time.time()}, root=run_dir)
    return True


def _peer_steps(run_dir: Path, since_s: float) -> bool:
    """Whether a rank of this attempt read a step of its program (`steps_read_file` written
    after `since_s`)."""
    try:
        return float(json.loads(steps_read_file(run_dir).read_text())["time_s"]) > since_s
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _peer_window(run_dir: Path, since_s: float) -> str | None:
    """`rank N`, when rank N wrote that it read the end of the window after `since_s` (a
    marker from an earlier attempt in the same directory is older), else None."""
    try:
        data = json.loads(window_read_file(run_dir).read_text())
        if float(data["time_s"]) > since_s:
            return f"rank {int(data['rank'])}"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


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
        path = _log_file_path(options, values)
        if path.is_file():
            text = path.read_text("utf-8", errors="replace")
            measured_by, records, notes = read_log_text(text, options.log_format, ended)
            return records, measured_by, notes
        return [], f"log:{options.log_format} (no file {path})", []
    return reader.records, reader.measured_by, reader.notes()
