"""A preflight as a Slurm job of its own over chosen nodes (`python -m toolkit.preflight
--executor slurm`): its script is rendered like a case's (submitit's directives), its ranks
start with the same srun or mpirun line, and `sbatch --wait` runs it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
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
from toolkit.results.safe_write import atomic_write_text
from toolkit.spec import Case


@dataclass
class SlurmRun:
    """A preflight as a Slurm job of its own: `case` gives the allocation (nodes, ranks per
    node, device, partition, time limit); `nodelist`, when given, the nodes to test."""

    case: Case
    nodelist: str | None = None
    python: str = sys.executable

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
        """Write `preflight.sh` into `directory` and `sbatch --wait` it; the job's exit status
        (sbatch's own on a refusal, which it prints)."""
        script = directory / "preflight.sh"
        atomic_write_text(script, self.script(directory), root=directory)
        return subprocess.run(["sbatch", "--wait", "--parsable", str(script)],
                              check=False).returncode
