"""`trainbench VERB ...`: one entry for every command (`trainbench submit --grid ...` is
`python -m toolkit.submit --grid ...`). Each verb is also a script of its own
(`trainbench-submit`, ...). `trainbench --help` lists the verbs with what each does;
`trainbench --version` prints the installed version."""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

from toolkit import interruptible


class Verb(NamedTuple):
    module: str
    """The module whose `main(argv)` runs the verb."""
    summary: str
    """One line on what the verb does, for `trainbench --help`."""

    @property
    def python_m(self) -> str:
        """The module `python -m` runs it as: a `cli` module's package (whose `__main__.py`
        calls it), else the module itself."""
        return self.module.removesuffix(".cli")


VERBS: dict[str, Verb] = {
    "submit": Verb("toolkit.submit", "expand a grid into cases and run what has not finished "
                                     "(Slurm, or mpirun here)"),
    "status": Verb("toolkit.status", "where every run of a grid stands; failures and their logs"),
    "cancel": Verb("toolkit.cancel", "scancel a grid's queued and running jobs"),
    "collect": Verb("toolkit.collect", "results and old logs -> CSVs, report.md, report.html, "
                                       "plots; check against a reference"),
    "gpt-table": Verb("toolkit.gpt_table", "the GPT table (latency, memory, TFLOP/s, MFU) of "
                                           "a grid"),
    "archive": Verb("toolkit.archive", "one results directory as one checked .tar.gz"),
    "compare": Verb("toolkit.compare", "which cases changed between two runs, beyond the noise"),
    "history": Verb("toolkit.history", "every case over time from the store, with change points"),
    "store": Verb("toolkit.store_cli", "which results store is in use, and what it holds"),
    "preflight": Verb("toolkit.preflight", "is this node healthy and as fast as it should be "
                                           "(GEMM, memory, NCCL, NVML)"),
    "topology": Verb("topology.cli", "this node's GPU/CPU/NIC map and each rank's binding"),
    "container": Verb("toolkit.container", "build a podman image to run cases in, here"),
    "localslurm": Verb("toolkit.localslurm.cli", "a local Slurm cluster on this machine "
                                                 "(up, status, down, env)"),
}


def usage() -> str:
    """What `trainbench --help` prints: the verbs, one line each."""
    width = max(map(len, VERBS))
    lines = ["usage: trainbench VERB [arguments]", "", "verbs:"]
    lines += [f"  {verb:<{width}}  {v.summary}" for verb, v in VERBS.items()]
    lines += ["", "trainbench VERB --help   the arguments of one verb",
              "trainbench --version     the installed version"]
    return "\n".join(lines)


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args and args[0] in ("-V", "--version"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"trainbench {version('trainbench')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            from toolkit import __version__

            print(f"trainbench {__version__} (not installed)")
        return 0
    if not args or args[0] not in VERBS:
        if args:
            print(f"trainbench: unknown verb {args[0]!r}", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    # imported by name, not at load: each verb brings only what it needs
    module = importlib.import_module(VERBS[args[0]].module)
    code: int = module.main(args[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
