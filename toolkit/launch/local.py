"""The local executor: each (case, repeat) runs as
`mpirun -np <gpus_per_node> python -m toolkit.worker <case.json> --run-dir ... --repeat k`
on this machine, one rank per GPU, or CPU ranks when the machine has no GPU.

Arguments go to subprocesses as lists: no value from a grid ever passes through a shell. The
printed `run_local.sh` quotes every word.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from parsers.rows import RunRow
from toolkit import PROJECT_ROOT, Interrupted
from toolkit.launch.container import path_problem, podman_image_digest, rank_command
from toolkit.launch.executor import Plan
from toolkit.launch.launcher import (
    CASE_JSON,
    RESULTS_DIR,
    RESULTS_DIR_LINE,
    RUN_DIR,
    SCRIPT_COMPILE_CACHE,
    SCRIPT_DIR,
    export_lines,
    mpirun_argv,
    pythonpath,
    rank_environment,
    run_block,
    worker_argv,
)
from toolkit.launch.lifecycle import (
    LOG_FILE,
    RunBusy,
    begin_run,
    claim_of,
    describe_rc,
    record_launcher,
    record_outcome,
)
from toolkit.launch.preflight import PREFLIGHT_FAILED, PREFLIGHT_PARTLY_JUDGED
from toolkit.launch.preflight import LocalRun as LocalPreflight
from toolkit.launch.preflight import begin as begin_preflight
from toolkit.launch.preflight import job_lines as preflight_job_lines
from toolkit.launch.python_env import python_env
from toolkit.launch.shell import shell_join
from toolkit.results.layout import (
    CACHE_VARIABLE,
    CASE_FILE,
    LOCAL_SCRIPT,
    CaseDir,
    compile_cache_dir,
)
from toolkit.results.safe_write import open_file
from toolkit.spec import Case, DeviceKind


def visible_gpu_count() -> int:
    """GPUs this machine offers to ranks (the node's topology: NVML, then nvidia-smi;
    CUDA_VISIBLE_DEVICES caps it)."""
    from topology import discover

    topo = discover()
    count = len(topo.gpus) if topo is not None else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and count:
        entries = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        count = min(count, len(entries))
    return count


@dataclass
class LocalExecutor:
    python: str = field(default_factory=lambda: sys.executable)
    mpirun: str | None = field(default_factory=lambda: shutil.which("mpirun"))
    gpus: int = field(default_factory=visible_gpu_count)
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    digests: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """Image -> (digest, problem), as podman answered (`_digest`)."""

    name = "local"
    script_name = LOCAL_SCRIPT

    def prepare(self, cases: Sequence[Case]) -> None:
        """Nothing to learn: the machine was looked at when the executor was made."""

    def in_flight(self, root: Path) -> tuple[set[tuple[str, int]], list[str]]:
        """Nothing runs on this machine between two submits (a run is started and waited for
        by the submit that plans it)."""
        return set(), []

    def dry_run(self, root: Path, grid_name: str,
                plan: Plan) -> tuple[dict[str, Any], list[str]]:
        planned = {"executor": self.name, "runs": [
            {"case": cid, "repeat": k,
             "command": self.command(case, cdir.path / CASE_FILE, cdir.run_dir(k), k)}
            for cid, case, reps in plan for cdir in [CaseDir(root, cid)] for k in reps]}
        return planned, []

    def execute(self, root: Path, grid_name: str, plan: Plan, console: Console, err: Console,
                wait: bool) -> int:
        """Run every repeat of `plan` here, one after another, under a progress bar."""
        todo = [(cid, case, CaseDir(root, cid), k) for cid, case, reps in plan for k in reps]
        with ending_signals():
            failures = run_all(todo, self, console)
        console.print(f"done: {len(todo) - failures} ok, {failures} failed. "
                      f"Tables: python -m toolkit.collect {root}")
        return 1 if failures else 0

    def problems(self, case: Case) -> list[tuple[str, str]]:
        """(key, message) for every reason this case cannot run here."""
        out = []
        if case.num_nodes > 1:
            out.append(("num_nodes", f"{case.num_nodes} nodes, but the local executor runs on "
                                     "this machine only (use --executor slurm)"))
        if case.device is DeviceKind.CUDA and self.gpus == 0:
            out.append(("device", "cuda requested but this machine has no visible GPU"))
        uses_gpus = self._uses_gpus(case)
        if uses_gpus and case.gpus_per_node > self.gpus:
            out.append(("gpus_per_node", f"{case.gpus_per_node} ranks but this machine has "
                                         f"{self.gpus} visible GPU(s)"))
        if not uses_gpus and case.gpus_per_node > self.cpus:
            out.append(("gpus_per_node", f"{case.gpus_per_node} CPU ranks but this machine has "
                                         f"{self.cpus} CPU(s) (no GPU found)"))
        if self.mpirun is None and not case.container.enabled:
            out.append(("executor", "mpirun not found: install Open MPI (Debian: openmpi-bin)"))
        out += self._placement_problems(case)
        problem = python_env(case, self.python).problem
        if problem:
            out.append(("framework", problem))
        return out

    def _placement_problems(self, case: Case) -> list[tuple[str, str]]:
        """What the case's site and container ask that this machine cannot give."""
        out = []
        if case.site.modules:
            out.append(("site.modules", "modules are loaded by Slurm job scripts; the local "
                                        "executor runs in this shell's environment: load "
                                        f"{' '.join(case.site.modules)} before submitting"))
        runtime = case.container.runtime
        if runtime in ("pyxis", "apptainer"):
            out.append(("container.runtime", f"{runtime} runs on Slurm (--executor slurm); on "
                                             "this machine use podman"))
        elif runtime == "podman":
            if why := path_problem(str(PROJECT_ROOT)):
                out.append(("container", why))
            elif why := self._digest(case)[1]:
                out.append(("container.image", why))
        return out

    def _digest(self, case: Case) -> tuple[str | None, str | None]:
        """(digest, problem) of the case's podman image, asked of podman once per image."""
        image = case.container.image
        if case.container.runtime != "podman" or image is None:
            return None, None
        if image not in self.digests:
            self.digests[image] = podman_image_digest(image)
        return self.digests[image]

    def _uses_gpus(self, case: Case) -> bool:
        return self.gpus > 0 and case.device is not DeviceKind.CPU

    def _command(self, case: Case, python_argv: list[str], results_root: str, workdir: str,
                 case_json: Path, name: str | None = None) -> list[str]:
        """mpirun (in the case's container, when it has one) + `python_argv`. In a container
        the image's mpirun starts the ranks, so MPI needs nothing from this machine, and the
        ranks' environment (`_added_env`) is passed in by name."""
        mpirun = "mpirun" if case.container.enabled else self.mpirun
        assert mpirun is not None
        return rank_command(case, mpirun_argv(mpirun, case.ranks_per_node), python_argv,
                            results_root=results_root, workdir=workdir,
                            gpus=self._uses_gpus(case),
                            env_names=["PYTHONPATH", *self._added_env(case, case_json)],
                            name=name)

    def _worker(self, case: Case, case_json: Path) -> list[str]:
        """python -m toolkit.worker CASE_JSON (the run directory and repeat follow); the
        interpreter of the case's framework (OneFlow: Python 3.10)."""
        return worker_argv(python_env(case, self.python).python, case_json)

    def command(self, case: Case, case_json: Path, run_dir: Path, repeat: int,
                name: str | None = None) -> list[str]:
        """The whole command of one repeat. Absolute paths: the ranks run with the run
        directory as their working directory. `name`: the container's, when it has one."""
        return [*self._command(case, self._worker(case, case_json),
                               str(case_json.absolute().parents[2]), str(run_dir.absolute()),
                               case_json, name), "--run-dir", str(run_dir.absolute()),
                "--repeat", str(repeat)]

    def _added_env(self, case: Case, case_json: Path | None = None) -> dict[str, str]:
        """What the ranks get on top of the caller's environment: this machine's CPUs are
        shared by the case's ranks; with `case_json`, the grid's compile cache."""
        return rank_environment(case, python_env(case, self.python).env,
                                str(max(1, self.cpus // case.gpus_per_node)),
                                digest=self._digest(case)[0], case_json=case_json)

    def _script_env(self, case: Case, case_json: Path) -> dict[str, str]:
        """`_added_env` as run_local.sh exports it: the grid's compile cache found beside the
        script when it runs (a copied results directory compiles into the copy's cache); a
        cache the grid's `env` names stays as given."""
        env = self._added_env(case, case_json)
        if env.get(CACHE_VARIABLE) == str(compile_cache_dir(case_json)):
            env[CACHE_VARIABLE] = SCRIPT_COMPILE_CACHE
        return env

    def environment(self, case: Case, case_json: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
        env.update(self._added_env(case, case_json))
        return env

    def script(self, case: Case, case_id: str, case_json: Path) -> str:
        """A script that re-runs one repeat by hand (`run_local.sh [REPEAT]`, default 0) into
        `r<REPEAT>/` beside case.json, with the executor's environment; every word quoted.
        It finds case.json and the run directories beside itself when it runs, so a copy of
        the results directory runs into the copy."""
        lines = ["#!/bin/bash",
                 "# Re-run one repeat of this case on this machine (local executor):",
                 "#   bash run_local.sh [REPEAT]    (default 0; writes r<REPEAT>/ beside it;",
                 "#   a finished repeat is never overwritten: pick a new number)",
                 "set -uo pipefail",
                 'REPEAT="${1:-0}"',
                 *export_lines(self._script_env(case, case_json))]
        launch = shell_join(self._command(case, [*self._worker(case, case_json)[:-1], CASE_JSON],
                                          RESULTS_DIR, RUN_DIR, case_json))
        before = [RESULTS_DIR_LINE] if case.container.enabled else []
        if case.preflight.enabled:
            before += preflight_job_lines(self.python, case, lambda argv, workdir: self._command(
                case, argv, RESULTS_DIR, workdir, case_json))
        lines += run_block(self.python, launch, SCRIPT_DIR, self.name, tee=True,
                           before=before)
        return "\n".join(lines) + "\n"

    def preflight(self, case: Case, case_dir: Path) -> tuple[bool, str]:
        """The case's preflight on this machine before its first repeat: (whether its repeats
        may run, what to say). Output in `preflight/<tag>/output.log`; the verdict is the
        `verdict` command's, run as the job scripts run it."""
        directory = begin_preflight(case_dir)
        root = str(case_dir.absolute().parents[1])
        case_json = case_dir / CASE_FILE
        rc = LocalPreflight(case.gpus_per_node, self.mpirun or "mpirun", self.python,
                            self.environment(case, case_json), case.preflight.timeout_s,
                            (lambda argv, workdir: self._command(case, argv, root, workdir,
                                                                 case_json))
                            if case.container.enabled else None).run(directory)
        verdict = subprocess.run(
            [self.python, "-m", "toolkit.preflight", "verdict", str(directory), "--on-fail",
             case.preflight.on_fail], capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": pythonpath(os.environ.get("PYTHONPATH")),
                 "COLUMNS": "120"})
        last = (verdict.stdout.strip().splitlines() or [""])[-1]
        if rc != 0:
            last = f"its ranks exited with {describe_rc(rc)}; {last}"
        if verdict.returncode not in (0, PREFLIGHT_PARTLY_JUDGED, PREFLIGHT_FAILED):
            return False, f"preflight {directory.name}: verdict failed: {verdict.stderr[-300:]}"
        # ok as far as judged trains, as the Slurm job's lines do
        return verdict.returncode != PREFLIGHT_FAILED, f"preflight {directory.name}: {last}"

    def run(self, case: Case, case_json: Path, run_dir: Path,
            repeat: int) -> tuple[dict[str, Any], RunRow]:
        """Run one repeat (its directory prepared by `lifecycle.begin_run`) to completion; write
        status.json once, `ok` only when every rank wrote its full window."""
        name = (f"trainbench-{os.getpid()}-{case.config_hash()}-r{repeat}"
                if case.container.runtime == "podman" else None)
        cmd = self.command(case, case_json, run_dir, repeat, name)
        claim = claim_of(run_dir)
        log_path = run_dir / LOG_FILE
        limit_s = case.slurm.time_min * 60
        status: dict[str, Any] = {"executor": self.name, "host": socket.gethostname(),
                                  "command": cmd, "log": log_path.name}
        fd = open_file(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=run_dir)
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    env=self.environment(case, case_json), cwd=str(run_dir),
                                    start_new_session=True)
            try:
                record_launcher(run_dir, proc.pid, case_json.parent.parent.parent)
                rc = proc.wait(timeout=limit_s)
                status.update(status="ok" if rc == 0 else "failed", returncode=rc)
                if rc != 0:
                    status["reason"] = f"mpirun exited with {describe_rc(rc)}"
            except subprocess.TimeoutExpired:
                _kill_group(proc, name)
                status.update(status="timeout", returncode=None,
                              reason=f"time limit of {case.slurm.time_min} min reached")
            except KeyboardInterrupt as err:
                _kill_group(proc, name)
                signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
                status.update(status="cancelled", returncode=None,
                              reason=f"submit received {signal.Signals(signum).name}: the run's "
                                     "launcher and ranks were ended")
                record_outcome(case_json.parent, repeat, status, claim)
                raise
        return record_outcome(case_json.parent, repeat, status, claim)


ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What ends a local submit's runs: `timeout`, CI runners and Slurm send SIGTERM; a terminal
that closes sends SIGHUP; `kill -INT` reaches the submit process alone (its runs are in
sessions of their own, out of reach of a terminal's Ctrl-C)."""


@contextlib.contextmanager
def ending_signals() -> Iterator[None]:
    """While runs are in flight, each of ENDING_SIGNALS raises `Interrupted` in the main thread
    (the run in flight ends its launcher's process group and records itself `cancelled`), even
    where the signal was inherited ignored (a background job of a script ignores SIGINT); a
    SIGHUP that `nohup` ignores stays ignored. After the first, the others are ignored until
    the block ends, so that ending the run's processes is not cut short."""

    def end(signum: int, _frame: object) -> None:
        for sig in installed:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {sig: signal.getsignal(sig) for sig in ENDING_SIGNALS}
    installed = [sig for sig in ENDING_SIGNALS
                 if not (sig == signal.SIGHUP and previous[sig] == signal.SIG_IGN)]
    for sig in installed:
        signal.signal(sig, end)
    try:
        yield
    finally:
        for sig in installed:
            signal.signal(sig, previous[sig])


def _kill_group(proc: subprocess.Popen[Any], container: str | None = None) -> None:
    """End the launcher's process group, and the podman container `container` (podman's
    client forwards SIGTERM, but a container outlives a client that was killed)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue
    if container:
        subprocess.run(["podman", "rm", "--force", "--time=5", container], capture_output=True,
                       timeout=60, check=False)


def run_all(todo: list[tuple[str, Case, CaseDir, int]], executor: LocalExecutor,
            console: Console) -> int:

    failures = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("runs", total=len(todo))
        checked: dict[str, bool] = {}
        for cid, case, cdir, k in todo:
            progress.update(task, description=f"{cid} r{k}")
            if case.preflight.enabled and cid not in checked:
                progress.update(task, description=f"{cid} preflight")
                checked[cid], said = executor.preflight(case, cdir.path)
                colour = "green" if checked[cid] else "red"
                progress.console.print(f"  [{colour}]{escape(said)}[/{colour}]")
                progress.update(task, description=f"{cid} r{k}")
            if not checked.get(cid, True):
                failures += 1
                progress.console.print(f"  [yellow]SKIP[/yellow] {cid} r{k}: the preflight "
                                       f"found a node not ok (on_fail: {case.preflight.on_fail})")
                progress.advance(task)
                continue
            try:
                run_dir = begin_run(cdir.path, k)
            except RunBusy as err:
                failures += 1
                progress.console.print(f"  [yellow]SKIP[/yellow] {cid} r{k}: {escape(str(err))}")
                progress.advance(task)
                continue
            status, row = executor.run(case, cdir.path / CASE_FILE, run_dir, k)
            if status["status"] == "ok" and row.throughput_sps is not None:
                progress.console.print(f"  [green]ok[/green]   {cid} r{k}: "
                                       f"{row.throughput_sps:,.1f} samples/s")
            else:
                failures += 1
                # reasons quote ranks' errors, which may hold [brackets]: not rich markup
                progress.console.print(f"  [red]FAIL[/red] {cid} r{k}: "
                                       f"{escape(str(status.get('reason')))}")
            progress.advance(task)
    return failures
