"""Which Python interpreter runs a case's ranks, and what its environment needs on top.

PyTorch cases run under the interpreter the executor was given (by default the one running
`toolkit.submit`). OneFlow 0.9.0 has wheels for CPython 3.10 only, so OneFlow cases run under a
second environment: `$TRAINBENCH_ONEFLOW_PYTHON`, else `<project>/.venv-oneflow/bin/python`
(`make oneflow-env` builds it). Its wheel links cuDNN, cuBLAS and NVRTC from the
`nvidia-*-cu11` packages, whose `lib` directories must be on `LD_LIBRARY_PATH` before the
process starts (the dynamic loader reads it once, at start-up), so they are exported by the
executor rather than set inside the worker.

Every executor (local, Slurm) asks `python_env(case)` before it writes anything; an unusable
environment comes back as `PythonEnv.problem`, a message that says how to fix it, never as an
exception at launch time. Looking inside an interpreter runs it once (`probe`, cached per path):
the thin seam that unit tests replace.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import PROJECT_ROOT
from toolkit.spec import Case, Framework

ONEFLOW_PYTHON_VAR = "TRAINBENCH_ONEFLOW_PYTHON"
ONEFLOW_VENV = ".venv-oneflow"
ONEFLOW_MODULES = ("oneflow", "flowvision", "mpi4py")
"""What a OneFlow rank imports besides the toolkit's source (which comes from PYTHONPATH)."""
ONEFLOW_NVIDIA_LIBS = ("cudnn", "cublas", "cuda_nvrtc")
"""`nvidia/<name>/lib` directories the OneFlow 0.9.0 wheel loads its CUDA libraries from."""
SETUP_HINT = "run `make oneflow-env`, or set TRAINBENCH_ONEFLOW_PYTHON to such an interpreter"


@dataclass(frozen=True)
class Probe:
    """What one interpreter has, found without importing the frameworks (which is slow)."""

    version: str
    """`major.minor.micro` of the interpreter."""
    missing: tuple[str, ...] = ()
    """Modules of ONEFLOW_MODULES it cannot find."""
    nvidia_lib_dirs: tuple[str, ...] = ()
    """Existing `nvidia/<name>/lib` directories, in ONEFLOW_NVIDIA_LIBS order."""
    versions: dict[str, str] = field(default_factory=dict)
    """Installed distribution versions (oneflow, flowvision, numpy)."""


@dataclass(frozen=True)
class PythonEnv:
    """The interpreter for a case's ranks and the variables to export before they start."""

    framework: Framework
    python: str
    env: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    """Why this interpreter cannot run the case (None when it can); says how to fix it.
    Executors report it under the key `framework`."""


_PROBE_SCRIPT = r"""
import importlib.metadata as md, importlib.util as u, json, os, platform, sys
mods, libs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
missing = [m for m in mods if u.find_spec(m) is None]
dirs = []
try:
    spec = u.find_spec("nvidia")
except Exception:
    spec = None
for name in libs:
    for base in (spec.submodule_search_locations or []) if spec else []:
        d = os.path.join(base, name, "lib")
        if os.path.isdir(d):
            dirs.append(d)
            break
versions = {}
for dist in ("oneflow", "flowvision", "numpy"):
    try:
        versions[dist] = md.version(dist)
    except md.PackageNotFoundError:
        pass
print(json.dumps({"version": platform.python_version(), "missing": missing,
                  "nvidia_lib_dirs": dirs, "versions": versions}))
"""


@functools.lru_cache(maxsize=8)
def probe(python: str) -> Probe:
    """Run `python` once and report what it has. Raises OSError / RuntimeError when it cannot
    be run or answers nonsense."""
    proc = subprocess.run([python, "-c", _PROBE_SCRIPT, json.dumps(ONEFLOW_MODULES),
                           json.dumps(ONEFLOW_NVIDIA_LIBS)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} exited with code {proc.returncode}: {tail}")
    try:
        data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"{python}: unexpected probe output {proc.stdout!r}") from None
    return Probe(version=str(data["version"]), missing=tuple(data["missing"]),
                 nvidia_lib_dirs=tuple(data["nvidia_lib_dirs"]),
                 versions={str(k): str(v) for k, v in data["versions"].items()})


def oneflow_python(environ: Mapping[str, str], root: Path = PROJECT_ROOT) -> tuple[str, str]:
    """(interpreter path, where the choice came from) for OneFlow cases; the path may not exist.

    A bare command name in the variable is looked up on PATH.
    """
    chosen = environ.get(ONEFLOW_PYTHON_VAR)
    if chosen:
        if os.sep not in chosen:
            chosen = shutil.which(chosen, path=environ.get("PATH")) or chosen
        return chosen, f"${ONEFLOW_PYTHON_VAR}"
    return str(root / ONEFLOW_VENV / "bin" / "python"), f"the project's {ONEFLOW_VENV}"


def python_env(case: Case, default_python: str = sys.executable,
               environ: Mapping[str, str] | None = None, root: Path = PROJECT_ROOT,
               probe_fn: Callable[[str], Probe] | None = None) -> PythonEnv:
    """The interpreter and added environment for `case`'s ranks (never raises: see `problem`).

    `environ` is the submitting environment (default `os.environ`): it supplies
    TRAINBENCH_ONEFLOW_PYTHON and the LD_LIBRARY_PATH the OneFlow libraries are put in front of.
    `probe_fn` defaults to this module's `probe`, looked up at call time (the test seam).
    """
    environ = os.environ if environ is None else environ
    probe_fn = probe_fn or probe
    if case.framework is not Framework.ONEFLOW:
        return PythonEnv(case.framework, default_python)
    python, origin = oneflow_python(environ, root)
    needs = "oneflow needs a CPython 3.10 environment with OneFlow 0.9.0, flowvision and mpi4py"
    if not Path(python).is_file():
        return PythonEnv(case.framework, python,
                         problem=f"{needs}; {origin} ({python}) does not exist: {SETUP_HINT}")
    try:
        found = probe_fn(python)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        return PythonEnv(case.framework, python,
                         problem=f"{needs}; {origin} ({python}) cannot be run ({err}): "
                                 f"{SETUP_HINT}")
    if found.missing:
        return PythonEnv(case.framework, python,
                         problem=f"{needs}; {origin} ({python}, Python {found.version}) lacks "
                                 f"{', '.join(found.missing)}: {SETUP_HINT}")
    env: dict[str, str] = {}
    if found.nvidia_lib_dirs:
        old = environ.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*found.nvidia_lib_dirs, *([old] if old else [])])
    return PythonEnv(case.framework, python, env=env)
