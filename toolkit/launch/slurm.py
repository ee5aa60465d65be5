"""The Slurm executor: one batch script per case, submitted with sbatch, run by hand the same way.

Every case directory gets `submission.sh`: a complete, readable sbatch script with no pickled
Python in it. Its `#SBATCH` directives come from the case (nodes, tasks per node = ranks per
node, GPUs per node when the cluster has GPUs, CPUs per task, time, partition, account, QoS,
exclusive, constraint, job name = case id, extra options) and are rendered and validated by
submitit's `SlurmExecutor`; its body runs each repeat between `python -m toolkit.runstate
begin` and `end` with `srun --mpi=pmix` (or `mpirun` inside the allocation). `sbatch
submission.sh` re-runs the case by hand into the same layout;
`sbatch --array=3 submission.sh` adds repeat 3.

Why not `submitit.SlurmExecutor.submit(fn)`: it pickles a Python callable and its script only
unpickles it, so the script could not be read or re-run by hand, which this tool promises. We use
submitit for what it does well (the directive names, their validation and rendering) and submit
the very script a person would.

Repeats are array tasks (`repeats_as: array`) or run back to back in one allocation
(`sequence`). With `array_scope: grid`, cases that need identical directives share one job
array (`slurm/array-<n>.sh`, which calls each case's `submission.sh`): one sbatch call instead of
hundreds for a large grid.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from toolkit import PROJECT_ROOT
from toolkit.launch import job_ledger
from toolkit.launch.container import path_problem, rank_command
from toolkit.launch.executor import LaunchError, Plan
from toolkit.launch.launcher import (
    RUN_DIR,
    SLURM_CPUS_PER_TASK,
    export_lines,
    module_lines,
    rank_environment,
    run_block,
    worker_argv,
)
from toolkit.launch.preflight import job_lines as preflight_job_lines
from toolkit.launch.preflight import slurm_launcher
from toolkit.launch.python_env import python_env
from toolkit.launch.shell import shell_join
from toolkit.launch.slurm_client import SchedulerError, SlurmClient
from toolkit.launch.slurm_submit import queued_runs, submit_slurm
from toolkit.launch.submission_queue import Submission, array_cap
from toolkit.results.layout import (
    SLURM_DIR,
    SUBMISSION_SCRIPT,
    array_script,
    array_script_numbers,
    cases_dir,
    dry_run_dir,
    job_log_pattern,
)
from toolkit.results.preflight import excluded_nodes, node_exclusion
from toolkit.results.safe_write import atomic_write_text, make_dir
from toolkit.spec import Case, DeviceKind

#: sbatch options the toolkit sets itself, and where they come from; a grid's extra_sbatch may
#: not give them (nor any abbreviation: sbatch accepts `--outp=` for --output).
RESERVED_OPTIONS: dict[str, str] = {
    "array": "the case's repeats (slurm.repeats_as)", "output": "the results layout",
    "error": "the results layout", "open-mode": "the results layout",
    "nodes": "num_nodes", "ntasks": "num_nodes x gpus_per_node",
    "ntasks-per-node": "gpus_per_node", "gpus-per-node": "gpus_per_node and device",
    "cpus-per-task": "slurm.cpus_per_task", "time": "slurm.time_min",
    "job-name": "the case id", "partition": "slurm.partition", "account": "slurm.account",
    "qos": "slurm.qos", "constraint": "slurm.constraint",
    "requeue": "slurm.requeue", "no-requeue": "slurm.requeue",
    "wrap": "the case's script", "parsable": "the submit, which reads sbatch's answer",
    "test-only": "the submit, which reads sbatch's answer",
    "wait": "the submit, which reads sbatch's answer",
    "help": "the submit, which reads sbatch's answer",
    "usage": "the submit, which reads sbatch's answer",
    "version": "the submit, which reads sbatch's answer",
}

#: Options the toolkit reads back from extra_sbatch by their full name (the ledger's tag goes
#: after the grid's --comment; a grid's own --hold is never released).
READ_OPTIONS = frozenset({"comment", "hold"})

#: sbatch long options that are complete names although they begin another option's name
#: (getopt takes an exact name before any abbreviation): `--gpus=2` is not --gpus-per-node.
WHOLE_NAMES = frozenset({"gpus"})

#: sbatch (22.05) options that take no value, or an optional one: only these may be given
#: without `=value`. Any other option without a value takes the NEXT `#SBATCH` argument as its
#: value (`--comment` alone would swallow the line after it, such as --output).
FLAG_OPTIONS = frozenset({"contiguous", "exclusive", "get-user-env", "hold", "ignore-pbs",
                          "nice", "no-kill", "overcommit", "oversubscribe", "propagate",
                          "quiet", "reboot", "spread-job", "use-min-nodes", "verbose"})


def extra_option_problem(opt: str) -> str | None:
    """Why one extra_sbatch option (`--name` or `--name=value`, checked by the case) cannot
    go into an `#SBATCH` line as sbatch parses it, or None."""
    name, eq, _ = opt[2:].partition("=")
    if name in RESERVED_OPTIONS:
        return f"--{name} is set by the toolkit from {RESERVED_OPTIONS[name]}"
    if name not in WHOLE_NAMES:
        for full in sorted(set(RESERVED_OPTIONS) | READ_OPTIONS):
            if full.startswith(name) and full != name:
                return (f"--{name} is an abbreviation sbatch may read as --{full}: write "
                        "options in full" + (f" (--{full} is set by the toolkit from "
                                             f"{RESERVED_OPTIONS[full]})"
                                             if full in RESERVED_OPTIONS else ""))
    if not eq and name not in FLAG_OPTIONS:
        return (f"--{name} without a value: write --{name}=VALUE (sbatch would take the next "
                "#SBATCH option as its value); options without a value: "
                + ", ".join(f"--{f}" for f in sorted(FLAG_OPTIONS)))
    return None


@dataclass
class SlurmExecutor:
    python: str = field(default_factory=lambda: sys.executable)
    slurm: SlurmClient = field(default_factory=SlurmClient)
    gpus: bool | None = None
    """Whether to request GPUs for device `auto` cases; None = ask sinfo (GPU GRES) for each
    partition they use."""
    asked: dict[str | None, tuple[bool, str]] = field(default_factory=dict)
    """Partition (None: the default one) -> whether its device `auto` cases get GPUs, and why
    (what sinfo said, or why it could not be asked): the dry run and the submit print it."""

    name = "slurm"
    script_name = SUBMISSION_SCRIPT

    def prepare(self, cases: Sequence[Case]) -> None:
        self.resolve_gpus(cases)

    def in_flight(self, root: Path) -> tuple[set[tuple[str, int]], list[str]]:
        """Settle the ledger's open sbatch calls, then the runs whose latest job squeue shows
        pending or running."""
        try:
            lines = job_ledger.settle(root, self.slurm)
            return queued_runs(root, self.slurm), lines
        except SchedulerError as e:
            raise LaunchError("cannot ask Slurm which runs are already queued, so nothing is "
                              f"submitted (a resubmit could duplicate them): {e.message}"
                              ) from None

    def dry_run(self, root: Path, grid_name: str,
                plan: Plan) -> tuple[dict[str, Any], list[str]]:
        subs = self.plan(root, grid_name, plan, scripts=dry_run_dir(root))
        planned: dict[str, Any] = {"executor": self.name, "submissions": [
            {"command": s.command(), "tasks": [{"task": t, "case": cid, "repeats": list(r)}
                                               for t, cid, r in s.tasks]} for s in subs]}
        lines = ["  " + shlex.join(s.command()) for s in subs]
        lines += exclusion_notes(root, plan)
        if self.asked:
            planned["device_auto"] = [{"partition": p, "gpus": gpus, "why": why}
                                      for p, (gpus, why) in self.asked.items()]
            lines += [why for _, why in self.asked.values()]
        return planned, lines

    def execute(self, root: Path, grid_name: str, plan: Plan, console: Console, err: Console,
                wait: bool) -> int:
        notes = [why for _, why in self.asked.values()] + exclusion_notes(root, plan)
        for why in notes:
            console.print(why, soft_wrap=True, markup=False)
        return submit_slurm(root, grid_name, self, plan, console, err, wait)

    def problems(self, case: Case) -> list[tuple[str, str]]:
        out = []
        if shutil.which("sbatch") is None:
            out.append(("executor", "sbatch not found: this machine is not a Slurm login node "
                                    "(use --executor local, or start a local cluster: python "
                                    "-m toolkit.localslurm up)"))
        problem = python_env(case, self.python).problem
        if problem:
            out.append(("framework", problem))
        for i, opt in enumerate(case.slurm.extra_sbatch):
            why = extra_option_problem(opt)
            if why:
                out.append((f"slurm.extra_sbatch[{i}]", f"{opt}: {why}"))
        for name, value in (*case.env, *case.site.env):
            if "\r" in value:
                out.append((f"env.{name}", "a carriage return: sbatch refuses a script that "
                                           "holds one before a line break (as DOS text)"))
        if case.container.runtime == "podman":
            out.append(("container.runtime", "podman runs containers on this machine (the local "
                                             "executor); on Slurm use pyxis or apptainer"))
        if case.container.enabled and (why := path_problem(str(PROJECT_ROOT))):
            out.append(("container", why))
        return out

    # -- directives --------------------------------------------------------------------------
    def resolve_gpus(self, cases: Sequence[Case]) -> None:
        """Ask the cluster once per partition whether its `device: auto` cases get GPUs."""
        for case in cases:
            if case.device is DeviceKind.AUTO:
                self._uses_gpus(case)

    def _uses_gpus(self, case: Case) -> bool:
        """Whether the case's job asks Slurm for GPUs (the site's `gpu_request` first)."""
        request = case.site.gpu_request
        if case.device is DeviceKind.CPU or request == "none":
            return False
        if case.device is DeviceKind.CUDA or request != "auto":
            return True
        if self.gpus is not None:
            return self.gpus
        partition = case.slurm.partition
        if partition not in self.asked:
            where = f"partition {partition}" if partition else "the default partition"
            try:
                gpus = self.slurm.has_gpus(partition)
                why = (f"device auto: sinfo shows GPU GRES on {where}: GPUs requested "
                       "(--gpus-per-node)" if gpus else
                       f"device auto: sinfo shows no GPU GRES on {where}: no GPUs requested")
            except SchedulerError as e:
                gpus = False
                why = (f"device auto: could not ask Slurm whether {where} has GPUs ({e}): no "
                       "GPUs requested (--gpus-per-node left out); set device: cuda or cpu in "
                       "the grid to choose")
            self.asked[partition] = (gpus, why)
        return self.asked[partition][0]

    def parameters(self, case: Case, job_name: str, log_folder: Path,
                   array: str | None = None) -> dict[str, Any]:
        """submitit SlurmExecutor parameters for this case (validated by submitit)."""
        o = case.slurm
        params: dict[str, Any] = {
            "job_name": job_name, "nodes": case.num_nodes,
            "ntasks_per_node": case.ranks_per_node, "time": o.time_min,
            "use_srun": False, "stderr_to_stdout": True, "wckey": "",
        }
        extra: dict[str, Any] = {}
        for opt in o.extra_sbatch:
            name, _, value = opt[2:].partition("=")
            extra[name] = value if value else True
        if self._uses_gpus(case):
            if case.site.gpu_request != "gres":
                params["gpus_per_node"] = case.gpus_per_node
            elif "gres" not in extra:  # a grid's own --gres (with other resources) wins
                extra["gres"] = f"gpu:{case.gpus_per_node}"
        cpus = o.cpus_per_task or case.cpu_threads
        if cpus:
            params["cpus_per_task"] = cpus
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(o, key):
                params[key] = getattr(o, key)
        if o.exclusive:
            params["exclusive"] = True
        extra["output"] = job_log_pattern(log_folder, array is not None)
        # A requeued job appends: its log keeps why the earlier attempt ended.
        extra["open-mode"] = "append"
        extra["requeue" if o.requeue else "no-requeue"] = True
        if array:
            extra["array"] = array + array_cap(case.slurm.array_parallelism)
        params["additional_parameters"] = extra
        return params

    def _render(self, params: dict[str, Any], body: list[str], folder: Path) -> str:
        """The sbatch script text. `folder` must exist when the job starts: Slurm does not
        create --output directories, and such a job dies before its first line runs."""
        ex = _renderer()(folder=folder, python=shlex.quote(self.python))
        ex.update_parameters(**params)
        text = ex._make_submission_file_text("\n".join(body), uid="script")
        # submitit always adds an empty wckey, a USR2 warning signal for its own requeue
        # handler and its executor marker; none applies to this script (a USR2 would kill the
        # ranks). Exactly those lines go: a grid's own --signal or --wckey (extra_sbatch) and an
        # env value that mentions SUBMITIT_EXECUTOR stay.
        # Lines as bash and sbatch see them: split at "\n" only. str.splitlines() also splits
        # at U+2028, U+0085, \x1c-\x1e, ...: inside a quoted value those became newlines, and
        # the rest of an `#SBATCH` value became a shell line of its own.
        extra = params.get("additional_parameters", {})
        ours = {"#SBATCH --wckey=''"} if "wckey" not in extra else set()
        if "signal" not in extra:
            ours |= {ln for ln in text.split("\n") if ln.startswith("#SBATCH --signal=USR2@")}
        lines = text.rstrip("\n").split("\n")
        marker = lines.index("# command") + 1
        if lines[marker:marker + 1] == ["export SUBMITIT_EXECUTOR=slurm"]:
            del lines[marker]
        lines = [ln for ln in lines if ln not in ours]
        return "\n".join(lines) + "\n"

    def shape(self, case: Case) -> str:
        """Key of the directives that decide the allocation (cases with equal keys can share
        one job array)."""
        params = self.parameters(case, "-", Path("-"), array="-")
        blob = json.dumps(params, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    # -- scripts -----------------------------------------------------------------------------
    def launch(self, case: Case, case_json: Path) -> str:
        """The launcher line (quoted) that starts every rank of the case, in its container
        when it has one."""
        python = python_env(case, self.python).python  # per framework (OneFlow: Python 3.10)
        return shell_join(self.rank_command(case, case_json.absolute().parents[2],
                                            worker_argv(python, case_json), RUN_DIR))

    def rank_command(self, case: Case, results_root: Path, python_argv: list[str],
                     workdir: str) -> list[str]:
        """srun or mpirun, the container's words, then `python_argv` (the worker, or the
        preflight's rank)."""
        return rank_command(case, slurm_launcher(case), python_argv,
                            results_root=str(results_root), workdir=workdir,
                            gpus=self._uses_gpus(case))

    def preflight_lines(self, case: Case, case_json: Path) -> list[str]:
        """The preflight before the repeats, with the workers' launcher and container (none
        when off)."""
        if not case.preflight.enabled:
            return []
        return preflight_job_lines(self.python, case, lambda argv, workdir: self.rank_command(
            case, case_json.absolute().parents[2], argv, workdir))

    def env_lines(self, case: Case, case_json: Path | None = None) -> list[str]:
        """The ranks' environment: the CPUs of each rank are the job's `--cpus-per-task`;
        with `case_json`, the grid's compile cache."""
        return export_lines(rank_environment(case, python_env(case, self.python).env,
                                             SLURM_CPUS_PER_TASK, case_json=case_json,
                                             launcher=case.slurm.launcher))

    def script(self, case: Case, case_id: str, case_json: Path) -> str:
        """`submission.sh` of one case (sbatch it, or `bash` it inside an allocation with the
        repeats to run as its argument)."""
        case_dir = case_json.absolute().parent
        every = " ".join(str(k) for k in range(case.repeats))
        array = f"0-{case.repeats - 1}" if case.slurm.repeats_as == "array" else None
        params = self.parameters(case, case_id, case_dir, array)
        body = [
            f"# trainbench case {case_id}: sbatch {SUBMISSION_SCRIPT} runs its repeats into r<k>/"
            " beside it",
            "# (finished repeats are skipped, never overwritten); sbatch --array=K adds repeat K;",
            '# inside an allocation: bash submission.sh "0 2" runs repeats 0 and 2.',
            f'REPEATS="${{1:-${{SLURM_ARRAY_TASK_ID:-{every}}}}}"',
            *module_lines(case),
            *self.env_lines(case, case_json),
            *run_block(self.python, self.launch(case, case_json), case_dir, "slurm",
                       repeats_var="REPEATS", before=self.preflight_lines(case, case_json)),
        ]
        return self._render(params, body, case_dir)

    def group_script(self, root: Path, name: str, case: Case,
                     tasks: list[tuple[str, tuple[int, ...]]]) -> str:
        """A grid-level array job: task i runs `tasks[i]` = (case id, repeats) through that
        case's own submission.sh. `case` gives the shared directives."""
        make_dir(root / SLURM_DIR, root=root)
        params = self.parameters(case, name, root / SLURM_DIR, f"0-{len(tasks) - 1}")
        body = ['case "${SLURM_ARRAY_TASK_ID:?run this script with sbatch}" in']
        for i, (cid, repeats) in enumerate(tasks):
            script = shlex.quote(str((cases_dir(root) / cid / SUBMISSION_SCRIPT).absolute()))
            reps = shlex.quote(" ".join(map(str, repeats)))
            body.append(f"  {i}) exec bash {script} {reps} ;;")
        body += ['  *) echo "no task $SLURM_ARRAY_TASK_ID in this array" >&2; exit 2 ;;', "esac"]
        return self._render(params, body, root / SLURM_DIR)

    # -- planning ----------------------------------------------------------------------------
    def plan(self, root: Path, grid_name: str, todo: list[tuple[str, Case, tuple[int, ...]]],
             scripts: Path | None = None) -> list[Submission]:
        """The sbatch calls that run `todo` ((case id, case, repeats to run) per case).
        Writes the grid-level array scripts, numbered after those of `root`, under `scripts`
        (default `root`; a dry run's go under dry-run/, beside the scripts of queued jobs);
        case scripts must already exist."""
        subs: list[Submission] = []
        avoid = excluded_nodes(root) if any(c.preflight.on_fail == "skip_node"
                                            for _, c, _ in todo) else []
        grouped: dict[str, list[tuple[str, Case, tuple[int, ...]]]] = {}
        for cid, case, repeats in todo:
            if not repeats:
                continue
            if case.slurm.array_scope == "grid":
                grouped.setdefault(self.shape(case), []).append((cid, case, repeats))
                continue
            script = cases_dir(root) / cid / SUBMISSION_SCRIPT
            skip = exclude_option(case, avoid)
            if case.slurm.repeats_as == "array":
                subs.append(Submission(
                    script, (f"--array={','.join(map(str, repeats))}"
                             f"{array_cap(case.slurm.array_parallelism)}", *skip), (),
                    tuple((r, cid, (r,)) for r in repeats), _comment(case),
                    case.slurm.array_parallelism))
            else:
                subs.append(Submission(script, skip, (" ".join(map(str, repeats)),),
                                       ((None, cid, repeats),), _comment(case)))
        n = max(array_script_numbers(root), default=-1) + 1
        for members in grouped.values():
            tasks: list[tuple[str, tuple[int, ...]]] = []
            for cid, case, repeats in members:
                if case.slurm.repeats_as == "array":
                    tasks += [(cid, (r,)) for r in repeats]
                else:
                    tasks.append((cid, repeats))
            path = array_script(scripts or root, n)
            atomic_write_text(path, self.group_script(root, grid_name, members[0][1], tasks),
                              root=root)
            # one allocation per task: a member that skips bad nodes makes the array skip them
            skip = max((exclude_option(c, avoid) for _, c, _ in members), key=len)
            subs.append(Submission(path, skip, (), tuple((i, cid, reps)
                                                         for i, (cid, reps) in enumerate(tasks)),
                                   _comment(members[0][1]),
                                   members[0][1].slurm.array_parallelism))
            n += 1
        return subs


def exclusion_notes(root: Path, todo: Sequence[tuple[str, Case, tuple[int, ...]]]) -> list[str]:
    """What the `on_fail: skip_node` cases to run are given to `--exclude`, for the dry run
    and the submit to print: how many of the nodes the preflight judged it excludes and
    where; and each case that asks for more nodes than are left (Slurm refuses it: 'Requested
    node configuration is not available'), with how to clear an exclusion."""
    cases = [(cid, c) for cid, c, repeats in todo if repeats and exclude_option(c, ["x"])]
    if not cases:
        return []
    found = node_exclusion(root)
    if not found.nodes:
        return []
    lines = [f"preflight on_fail: skip_node: {found.text()}; given to --exclude"]
    left = found.judged - len(found.nodes)
    for cid, case in cases:
        if case.num_nodes > left:
            lines.append(f"{cid}: {case.num_nodes} node(s) asked for, {found.text()}: "
                         f"{left} left, so Slurm will refuse it ('Requested node "
                         "configuration is not available'); a node a later preflight finds ok "
                         "is no longer excluded, or move the preflight directory out of the "
                         "results to clear its exclusion")
    return lines


def exclude_option(case: Case, avoid: Sequence[str]) -> tuple[str, ...]:
    """`--exclude=` for the nodes a preflight found not ok, when the case's preflight says
    `on_fail: skip_node`; with the grid's own `--exclude` (an sbatch option on the command line
    replaces the script's, so both go into this one)."""
    if not avoid or not case.preflight.enabled or case.preflight.on_fail != "skip_node":
        return ()
    own = [v for opt in case.slurm.extra_sbatch if opt.startswith("--exclude=")
           for v in opt.split("=", 1)[1].split(",") if v]
    return (f"--exclude={','.join(dict.fromkeys([*own, *avoid]))}",)


@functools.cache
def _renderer() -> Any:
    """submitit's SlurmExecutor, used to validate and render directives only. Imported here, not
    at module load: machines that only run the local executor need not have submitit. It may
    run where srun is absent (a dry run on a laptop), so its cluster check is skipped."""
    import submitit

    class Renderer(submitit.SlurmExecutor):
        @classmethod
        def affinity(cls) -> int:
            return 1

    return Renderer


def _comment(case: Case) -> str:
    """The value of the case's own `--comment=` (extra_sbatch), or ""."""
    found = [o.partition("=")[2] for o in case.slurm.extra_sbatch if o.startswith("--comment=")]
    return found[-1] if found else ""
