"""Loading a script of `benchmarks/` as a module, for the tests of the scripts that run on GPU
machines (they are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def benchmark_module(name: str) -> Iterator[ModuleType]:
    """`benchmarks/<name>.py` as module `name` for as long as the caller's fixture lives."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
