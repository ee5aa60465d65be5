"""The launch of a case's ranks, in one place for every executor: the worker command, the
mpirun and srun lines that start it on every rank, the environment every rank gets, and the
shell lines of a job script that run its repeats between `runstate begin` and `end`.

Values from the grid reach the shell only through `shlex.quote`; the one unquoted value is
`ShellWord` (`toolkit.launch.shell`), which only the launch stage makes. The container words
around the worker are `toolkit.launch.container`'s.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolkit import PROJECT_ROOT
from toolkit.launch.container import markers
from toolkit.launch.lifecycle import EXIT_BUSY, EXIT_FINISHED
from toolkit.launch.shell import ShellWord
from toolkit.results.layout import (
    CACHE_VARIABLE,
    CASE_FILE,
    COMPILE_CACHE_DIR,
    LOG_FILE,
    compile_cache_dir,
    run_dir_name,
)
from toolkit.spec import Case, Framework


def run_block(python: str, launch: str, case_dir: Path | ShellWord, executor: str,
              repeats_var: str = "REPEAT", tee: bool = False,
              before: Sequence[str] = ()) -> list[str]:
    """Shell lines that run the repeats named in `$REPEATS_VAR` (space-separated) with
    `launch` (already quoted) + `--run-dir ... --repeat ...`, between `runstate begin` and
    `end`. The launcher's output goes to r<k>/output.log (and the terminal with `tee`).
    `case_dir` is a path, or `SCRIPT_DIR` for the directory the script lies in when it runs.

    The script's own process (`$$`) owns each attempt it begins; `begin` prints the attempt's
    claim and `end` gets it back, so `end` writes only into that attempt. A repeat that
    another live owner runs is skipped (`begin` says so), and the script then exits 1.

    SIGTERM (Slurm ending the job at its time limit, on node failure or preemption, or scancel)
    is trapped: the launcher gets it too and exits, the status is still written (`end
    --terminated` asks Slurm why; `end` itself ignores SIGTERM, and runs again with
    `--terminated` when the signal came while it ran), and no further repeat starts. Slurm's
    SIGKILL follows after KillWait seconds (30 by default), which `end` fits in.

    `before`: lines that run once before the repeats, with CASE_DIR set (the preflight).

    The variables these lines use are `toolkit.spec.case.SCRIPT_VARIABLES`, which a case's
    `env` (exported before them) cannot set."""
    py = shlex.quote(python)
    cdir = case_dir if isinstance(case_dir, ShellWord) else shlex.quote(str(case_dir))
    # `end` ignores SIGTERM (a subshell's `trap '' TERM` is inherited through exec): Slurm
    # signals every process of the job, and an `end` killed half-way would leave no status.
    end = (f"(trap '' TERM; exec {py} -m toolkit.runstate end \"$CASE_DIR\" \"$REPEAT\" "
           f'--claim "$CLAIM" --rc "$rc" --executor {executor}')
    log = f'"$RUN_DIR/{LOG_FILE}"'
    sink = f"2>&1 | tee {log}" if tee else f"> {log} 2>&1"
    return [
        f"CASE_DIR={cdir}",
        "TERMINATED=",
        "FAILED=",  # not the caller's: sbatch passes the submitting shell's environment on
        "trap 'TERMINATED=--terminated' TERM",
        *before,
        f'for REPEAT in ${repeats_var}; do',
        '  if [ -n "$TERMINATED" ]; then break; fi',
        f'  CLAIM=$({py} -m toolkit.runstate begin "$CASE_DIR" "$REPEAT" --pid $$)',
        "  rc=$?",
        f"  if [ $rc -eq {EXIT_FINISHED} ]; then continue; elif [ $rc -eq {EXIT_BUSY} ]; then"
        " FAILED=1; continue; elif [ $rc -ne 0 ]; then exit $rc; fi",
        f'  RUN_DIR="$CASE_DIR/{run_dir_name("$REPEAT")}"',
        "  rc=0",
        f'  (cd "$RUN_DIR" && exec {launch} --run-dir "$RUN_DIR" --repeat "$REPEAT") {sink}'
        " || rc=$?",
        '  ENDED_AS="$TERMINATED"',
        f"  {end} $ENDED_AS) || FAILED=1",
        # SIGTERM while `end` ran after a failed launcher (it had failed on its own, e.g. a
        # node's daemon died, just before Slurm ended the job for it): decide again, asking
        # Slurm why. A run that succeeded stays as `end` wrote it.
        f'  if [ "$TERMINATED" != "$ENDED_AS" ] && [ "$rc" -ne 0 ]; then {end} $TERMINATED)'
        " || FAILED=1; fi",
        "done",
        'if [ -n "$TERMINATED" ]; then exit 143; fi',
        'exit "${FAILED:-0}"',
    ]


WORKER_MODULE = "toolkit.worker"
"""What every rank runs: `python -m toolkit.worker CASE_JSON --run-dir DIR --repeat K`."""


SCRIPT_DIR = ShellWord('"$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"')
"""The directory of the running script, found when it runs: a copied results directory's
script writes into the copy."""

CASE_JSON = ShellWord('"$CASE_DIR"/' + CASE_FILE)
"""case.json beside the running script (`run_block` sets CASE_DIR first)."""

SLURM_CPUS_PER_TASK = ShellWord('"${SLURM_CPUS_PER_TASK:-1}"')
"""CPUs per rank inside a Slurm allocation (1 where the job did not ask for more)."""

RUN_DIR = ShellWord('"$RUN_DIR"')
"""The run directory of the repeat `run_block` runs (set before each launch)."""

SCRIPT_COMPILE_CACHE = ShellWord(
    f'"$(dirname -- "$(dirname -- {SCRIPT_DIR})")/{COMPILE_CACHE_DIR}"')
"""The grid's compile cache, found from the running script's place in the results directory."""

RESULTS_DIR = ShellWord('"$RESULTS_DIR"')
"""The results directory above CASE_DIR, found when the script runs (`RESULTS_DIR_LINE`)."""

RESULTS_DIR_LINE = 'RESULTS_DIR="$(cd -- "$CASE_DIR/../.." && pwd)"'
"""Sets RESULTS_DIR in a job script, after `run_block` set CASE_DIR."""


def worker_argv(python: str, case_json: Path) -> list[str]:
    """python -m toolkit.worker CASE_JSON (the run directory and repeat follow). Absolute: the
    ranks run with the run directory as their working directory."""
    return [python, "-m", WORKER_MODULE, str(case_json.absolute())]


def _as_root() -> list[str]:
    return ["--allow-run-as-root"] if os.geteuid() == 0 else []


def mpirun_argv(mpirun: str, ranks: int, ranks_per_node: int | None = None) -> list[str]:
    """`mpirun -np N` with no binding of its own (each rank binds itself from the topology
    plan); inside an allocation of several nodes, `ranks_per_node` ranks on each."""
    spread = ["--map-by", f"ppr:{ranks_per_node}:node"] if ranks_per_node else []
    return [mpirun, "-np", str(ranks), *spread, "--bind-to", "none", *_as_root()]


def srun_argv(case: Case) -> list[str]:
    """`srun --mpi=<plugin>` over the whole allocation, one task per GPU (one per node for a
    command case with `launch: per_node`); one bad rank ends the step."""
    return ["srun", f"--mpi={case.slurm.mpi}", f"--nodes={case.num_nodes}",
            f"--ntasks={case.launched_ranks}", f"--ntasks-per-node={case.ranks_per_node}",
            "--kill-on-bad-exit=1", "--unbuffered"]


def rank_environment(case: Case, interpreter_env: Mapping[str, str],
                     cpus_per_rank: str, *, digest: str | None = None,
                     case_json: Path | None = None,
                     launcher: str | None = None) -> dict[str, str]:
    """What every rank gets on top of the launching environment, in the order it is set:
    unbuffered output, Python's fault handler (a rank killed by SIGSEGV, SIGBUS, SIGFPE or
    SIGABRT prints its Python stack into the log), `OMP_NUM_THREADS` (the case's
    `cpu_threads`, else the CPUs each rank has), the interpreter's variables (OneFlow's library
    path), what the `launcher` that starts the ranks needs (`launcher_environment`),
    torch.compile's caches in the grid's results directory (torch cases, given the case's
    `case_json`: `compile_cache_environment`), the container's markers (its runtime, image and
    `digest`), the site's environment, and the grid's `env`, which wins over all of them."""
    env = {"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1",
           "OMP_NUM_THREADS": str(case.cpu_threads) if case.cpu_threads else cpus_per_rank}
    env.update(interpreter_env)
    if launcher is not None:
        env.update(launcher_environment(case, launcher))
    if case_json is not None and case.framework is Framework.TORCH:
        env.update(compile_cache_environment(compile_cache_dir(case_json)))
    env.update(markers(case, digest))
    env.update(dict(case.site.env))
    env.update(dict(case.env))
    return env


def launcher_environment(case: Case, launcher: str) -> dict[str, str]:
    """What `launcher` needs in the environment it starts the ranks from. Under `srun` with a
    PMIx plugin: `SLURM_PMIX_FENCE`, the collective of the plugin's fences
    (`slurm.pmix_fence`), which Slurm's step daemon reads from the step's environment before
    the cluster's mpi.conf; nothing for `site`, another plugin or another launcher."""
    fence = case.slurm.pmix_fence
    if launcher != "srun" or not case.slurm.mpi.startswith("pmix") or fence == "site":
        return {}
    return {"SLURM_PMIX_FENCE": fence}


def module_lines(case: Case) -> list[str]:
    """`module load` of the site's modules, in a job script; a clear error where the job's
    shell has no `module` command."""
    if not case.site.modules:
        return []
    names = " ".join(shlex.quote(m) for m in case.site.modules)
    why = (f"site {case.site.name or '(unnamed)'}: cannot load modules "
           f"{' '.join(case.site.modules)}: the job's shell has no module command")
    return [f"if ! command -v module >/dev/null 2>&1; then echo {shlex.quote(why)} >&2; "
            "exit 2; fi",
            f"module load {names} || exit $?"]


def compile_cache_environment(directory: Path) -> dict[str, str]:
    """torch.compile's on-disk caches in `directory`, shared by every repeat and case of a grid:
    a repeat (or a case with the same graphs) after the first loads Inductor's compiled FX
    graphs and AOTAutograd's forward/backward split instead of compiling them again, and
    Triton's compiled kernels (`<dir>/triton`) with them. The cache holds the generated code
    itself, so a hit runs the same kernels as a compile would; what is measured stays the same.
    Safe for ranks that compile at once, on one node or over a shared file system: torch
    writes each entry to a temporary file and renames it into place, so a reader sees a whole
    entry or none."""
    return {CACHE_VARIABLE: str(directory),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}


def pythonpath(current: str | None) -> str:
    """PYTHONPATH with the project first, so that ranks import this very toolkit."""
    root = str(PROJECT_ROOT)
    return root + (os.pathsep + current if current else "")


def export_lines(env: Mapping[str, str]) -> list[str]:
    """`export` lines of a job script: PYTHONPATH first, then `env`, every value quoted
    except a `ShellWord`."""
    lines = [f"export PYTHONPATH={shlex.quote(str(PROJECT_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"]
    lines += [f"export {k}={v if isinstance(v, ShellWord) else shlex.quote(v)}"
              for k, v in env.items()]
    return lines
