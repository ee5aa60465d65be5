"""What every executor does (`toolkit.launch.choice` picks one).

An executor turns the runs a grid still needs into running ranks: `local` (mpirun on this
machine, the embedded default) and `slurm` (one re-runnable sbatch script per case). The command
`toolkit.submit` talks to the `Executor` protocol only; a third executor is one new module here
that implements it, plus one line in `toolkit.launch.choice.choose_executor`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from toolkit.spec import Case

EXECUTORS = ("auto", "local", "slurm")

Plan = list[tuple[str, Case, tuple[int, ...]]]
"""(case id, case, repeats to run) for every case of a grid."""


class LaunchError(Exception):
    """The executor cannot tell or do what submit needs; nothing was started."""


class NoController(LaunchError):
    """`--executor auto` on a machine whose Slurm does not answer: running the grid here
    instead would be a surprise (and a login node's CPU), so nothing runs."""


class Executor(Protocol):
    name: str
    """`local` or `slurm`: in messages, status.json and the dry run."""
    script_name: str
    """The re-runnable script written into every case directory."""

    def problems(self, case: Case) -> list[tuple[str, str]]:
        """(key, message) for every reason this case cannot run on this executor."""
        ...

    def prepare(self, cases: Sequence[Case]) -> None:
        """Anything to learn once per grid before the scripts are written (Slurm: whether the
        partition has GPUs)."""
        ...

    def script(self, case: Case, case_id: str, case_json: Path) -> str:
        """The text of `script_name` for one case."""
        ...

    def in_flight(self, root: Path) -> tuple[set[tuple[str, int]], list[str]]:
        """(case id, repeat) pairs already queued or running, not to be started again, and lines
        to show about the ledger. Raises LaunchError when that cannot be known."""
        ...

    def dry_run(self, root: Path, grid_name: str, plan: Plan) -> tuple[dict[str, Any], list[str]]:
        """What `plan` would start, as the body of dry-run.json, and lines to print."""
        ...

    def execute(self, root: Path, grid_name: str, plan: Plan, console: Console, err: Console,
                wait: bool) -> int:
        """Start (or submit) every run of `plan`; the exit status of submit."""
        ...
