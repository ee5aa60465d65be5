"""Readers that turn a run's files into rows (`rows.RunRow`).

`events`: the toolkit's own rank files; `launcher` and `failure`: why a run failed, rank by
rank, from its rank files and mpirun's or srun's messages. The other modules read foreign
logs left by earlier benchmark efforts (DLLogger, OneFlow-Benchmark, Megatron-LM, Horovod,
PaddlePaddle BERT, HugeCTR, MXNet BERT, OneFlow InsightFace, MLPerf logging, ...); `detect`
picks one. `nccl_tests` (collective bus bandwidth tables) and `nvidia_smi` (GPU
health from `nvidia-smi -q` dumps) read what a preflight measures, from files people already
have, into records of their own rather than run rows. `logtext` is how all of them read a file:
line by line within stated limits, with RE2 patterns whose time is linear in the text.

The package is a library: no module in it is a command. `python -m parsers...` would run
nothing and exit 0, so it says so on stderr and exits 2, naming the commands that read these
files, as toolkit's own modules that are not commands do (`toolkit._refuse_library_module`;
this package imports nothing from toolkit and keeps its own copy of the rule).
"""

from __future__ import annotations

import sys
from pathlib import Path


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
    if module is None:
        return
    parts = module.split(".")
    base = Path(__file__).parent.joinpath(*parts[1:])
    if parts[0] != __name__ or not (base.with_suffix(".py").is_file() or base.is_dir()):
        return  # no such module: Python's own error names it
    print(f"parsers: {module} is not a command; `python -m {module}` runs nothing.\n"
          "The readers in parsers/ are used by these commands:\n"
          "  python -m toolkit.collect RESULTS --import-logs DIR   (foreign training logs)\n"
          "  python -m toolkit.preflight import FILE...            (nccl-tests output, "
          "nvidia-smi -q dumps)", file=sys.stderr)
    sys.exit(2)


_refuse_library_module()
