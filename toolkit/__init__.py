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
import re
import signal
import sys
from pathlib import Path
from typing import Protocol

__version__ = "0.1.0"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The directory that holds `toolkit/`: on PYTHONPATH of every rank the executors start."""


EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Exit status after Ctrl-C (130), as a shell reports a command that SIGINT ended."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP (or a SIGINT sent to the process alone) where a command ends its work
    on it as on Ctrl-C (`toolkit.launch.local`: the runs in flight)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Main(Protocol):
    """A command's entry: `main(argv=None) -> exit status`."""

    def __call__(self, argv: list[str] | None = None) -> int: ...


def interruptible(main: Main) -> Main:
    """A command's `main`, ending on Ctrl-C (SIGINT) with one line on stderr and exit status
    EXIT_INTERRUPTED instead of a traceback. Every command's `main` is wrapped in it, so the
    rule holds whichever entry runs it (`python -m`, a console script, `trainbench VERB`).

    A command that can say more (what `submit` had submitted) catches KeyboardInterrupt itself
    and returns EXIT_INTERRUPTED; this is the rule for everything else. An `Interrupted` (a
    command that ends on SIGTERM or SIGHUP as on Ctrl-C) exits with 128 + its signal.
    `topology` imports nothing from toolkit and keeps its own copy of the rule
    (`topology.cli.main`)."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt as err:
            signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
            # the process's own stderr: a live view cut short in its start (rich's Progress)
            # leaves sys.stderr redirected into the view
            print("interrupted" if signum == signal.SIGINT else
                  f"interrupted by {signal.Signals(signum).name}",
                  file=sys.__stderr__ or sys.stderr, flush=True)
            return 128 + signum

    return run


def module_run_by_python_m(argv: list[str]) -> str | None:
    """The module of `python [options] -m MODULE ...` (`sys.orig_argv`), or None when the
    interpreter runs a script, `-c` or nothing."""
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, None)
        if word.startswith("-m"):
            return word[2:]
        if word in ("-W", "-X"):
            next(words, None)
        elif word == "-c" or word.startswith("-c") or not word.startswith("-"):
            return None
    return None


def is_command(module: str) -> bool:
    """Whether `python -m MODULE` runs something: a module of this package that ends in an
    `if __name__ == "__main__":` block, or a package with a `__main__.py`. False for a name
    that is not in the package at all (Python says so itself)."""
    parts = module.split(".")
    if parts[0] != __name__:
        return False
    base = Path(__file__).parent.joinpath(*parts[1:])
    if (base / "__main__.py").is_file():
        return True
    source = base.with_suffix(".py")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r'^if __name__ == "__main__":', text, re.M) is not None


def _refuse_library_module() -> None:
    """`python -m toolkit.report.gpt` would import the module and exit 0 having done nothing: a
    module that is not a command says so and exits 2, naming the commands."""
    module = module_run_by_python_m(list(getattr(sys, "orig_argv", [])))
    if module is None or module.split(".")[0] != __name__ or is_command(module):
        return
    base = Path(__file__).parent.joinpath(*module.split(".")[1:])
    if not (base.with_suffix(".py").is_file() or base.is_dir()):
        return  # no such module: Python's own error names it
    here = Path(__file__).parent
    names = [f"{__name__}.{p.stem}" for p in here.glob("*.py")]
    names += [f"{__name__}.{p.name}" for p in here.iterdir() if p.is_dir()]
    commands = sorted(n for n in names if is_command(n))
    print(f"trainbench: {module} is not a command; `python -m {module}` runs nothing.\n"
          "The commands are `trainbench VERB` (`trainbench --help` lists the verbs and what\n"
          "each does), or `python -m` of one of:\n"
          + "".join(f"  python -m {c}\n" for c in commands), end="", file=sys.stderr)
    sys.exit(2)


_refuse_library_module()
