"""trainbench: YAML grids of training benchmarks -> Slurm/MPI jobs -> result tables.

The commands sit at the top (`submit`, `collect`, `status`, `cancel`, `gpt_table`, and `worker`
and `runstate`, which the generated job scripts call); the stages are folders, in the order
they may import each other: `spec` (case and grid), `analysis` (arithmetic over runs),
`results` (the results directory: layout, event schema, reading runs), `rank` (what one rank
does about itself), `workloads`, `launch` (executors, launcher, Slurm), `report` (tables, plots,
HTML), and `localslurm` (a local cluster for tests and laptops).
"""

from __future__ import annotations

import functools
import signal
import sys
from pathlib import Path
from typing import Protocol

__version__ = "0.1.0"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The directory that holds `toolkit/`: on PYTHONPATH of every rank the executors start."""


EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Exit status after Ctrl-C (130), as a shell reports a command that SIGINT ended."""


class Main(Protocol):
    """A command's entry: `main(argv=None) -> exit status`."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def interruptible(main: Main) -> Main:
    """A command's `main`, ending on Ctrl-C (SIGINT) with one line on stderr and exit status
    EXIT_INTERRUPTED instead of a traceback. Every command's `main` is wrapped in it, so the
    rule holds whichever entry runs it (`python -m`, a console script, `trainbench VERB`).

    A command that can say more (what `submit` had submitted) catches KeyboardInterrupt itself
    and returns EXIT_INTERRUPTED; this is the rule for everything else. `topology` imports
    nothing from toolkit and keeps its own copy of the rule (`topology.cli.main`)."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            # the process's own stderr: a live view cut short in its start (rich's Progress)
            # leaves sys.stderr redirected into the view
            print("interrupted", file=sys.__stderr__ or sys.stderr, flush=True)
            return EXIT_INTERRUPTED

    return run
