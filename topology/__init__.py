"""Node topology for trainbench: which GPU, CPUs, NUMA node and NIC each local rank gets.

Modules: `model` (the data classes), `smi` (parsing `nvidia-smi topo -m`), `sources` (NVML,
sysfs, running nvidia-smi, `discover()`), `plan` (per-rank binding, `apply`, the NCCL socket
interface), `cli` (`python -m topology`). The names below are the ones other packages use.

`python -m topology` is the package's one command: `python -m topology.cli` (or any other
module) would run nothing and exit 0, so it says so on stderr and exits 2, as toolkit's own
modules that are not commands do (`toolkit._refuse_library_module`; this package imports
nothing from toolkit and keeps its own copy of the rule).
"""

from __future__ import annotations

import sys
from pathlib import Path

from topology.model import Gpu, Link, LinkType, Nic, NodeTopology, format_cpu_list, parse_cpu_list
from topology.plan import Binding, apply, plan_node, socket_ifname_for
from topology.smi import parse_topo_matrix
from topology.sources import discover, probe

__all__ = [
    "Binding",
    "Gpu",
    "Link",
    "LinkType",
    "Nic",
    "NodeTopology",
    "apply",
    "discover",
    "format_cpu_list",
    "parse_cpu_list",
    "parse_topo_matrix",
    "plan_node",
    "probe",
    "socket_ifname_for",
]


def _module_run_by_python_m(argv: list[str]) -> str | None:
    """The module of `python [options] -m MODULE ...` (`sys.orig_argv`), or None."""
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, None)
        if word.startswith("-m"):
            return word[2:]
        if word in ("-W", "-X"):
            next(words, None)
        elif word.startswith("-c") or not word.startswith("-"):
            return None
    return None


def _refuse_library_module() -> None:
    if sys.argv[:1] != ["-m"]:
        return  # imported by a program, not while `python -m` looks for one of our modules
    module = _module_run_by_python_m(list(getattr(sys, "orig_argv", [])))
    if module is None or module in (__name__, f"{__name__}.__main__"):
        return
    parts = module.split(".")
    base = Path(__file__).parent.joinpath(*parts[1:])
    if parts[0] != __name__ or not (base.with_suffix(".py").is_file() or base.is_dir()):
        return  # no such module: Python's own error names it
    print(f"topology: {module} is not a command; `python -m {module}` runs nothing.\n"
          f"The command is `python -m {__name__}` (`python -m {__name__} --help`).",
          file=sys.stderr)
    sys.exit(2)


_refuse_library_module()
