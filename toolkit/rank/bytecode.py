"""Python bytecode for ranks whose framework was installed without it.

Python runs a module from the bytecode it compiled earlier (`__pycache__/*.pyc` beside the
source) and compiles the source only when there is none. Installations made without bytecode
(`pip install --no-compile`, images built with PYTHONDONTWRITEBYTECODE) on a file system the
ranks cannot or must not write (a read-only container image, a shared software tree) leave
every rank of every run to compile the source of all it imports: torch, torch.compile's
Inductor and Dynamo, transformers. That is seconds of every start (about 11 s of a warm
ResNet50 start on one H100 machine, two thirds of its imports).

There, the rank puts Python's bytecode in the grid's own cache (`sys.pycache_prefix`, and
PYTHONPYCACHEPREFIX for the processes it starts, such as Inductor's compile workers): the first
run compiles and writes it, every later run and case of the grid reads it. Nothing else
changes: the same source runs. An installation with its bytecode, and a prefix the user set,
are left as they are. Python writes each file to a temporary name and renames it into place,
so ranks that import at once read a whole file or compile the source themselves.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from toolkit.results.safe_write import unsafe_below

PREFIX_VARIABLE = "PYTHONPYCACHEPREFIX"
NO_WRITE_VARIABLE = "PYTHONDONTWRITEBYTECODE"


def installed_without_bytecode(module: str) -> bool | None:
    """Whether the top-level package `module` has no bytecode beside its source (None: not
    installed, or not Python source). Reads the file system only; imports nothing."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    prefix, sys.pycache_prefix = sys.pycache_prefix, None
    try:
        beside = importlib.util.cache_from_source(origin)
    finally:
        sys.pycache_prefix = prefix
    return not os.path.exists(beside)


def use_bytecode_cache(directory: Path, root: Path, module: str) -> dict[str, Any]:
    """Put this process's bytecode (and its children's) in `directory`, below the results
    directory `root`, when the framework package `module` was installed without it. Returns
    what meta.json records: the directory used (None if not) and why."""
    if sys.pycache_prefix is not None:
        return {"directory": None, "reason": f"{PREFIX_VARIABLE} is set: {sys.pycache_prefix}"}
    lacking = installed_without_bytecode(module)
    if not lacking:
        return {"directory": None, "reason": f"{module} is installed with its bytecode"
                if lacking is False else f"{module} is not installed as Python source"}
    problem = unsafe_below(root, directory)
    if problem is not None:
        return {"directory": None, "reason": f"{module} has no bytecode, but {problem}"}
    sys.pycache_prefix = str(directory)
    sys.dont_write_bytecode = False
    os.environ[PREFIX_VARIABLE] = str(directory)
    os.environ.pop(NO_WRITE_VARIABLE, None)
    return {"directory": str(directory), "reason": f"{module} is installed without bytecode"}
