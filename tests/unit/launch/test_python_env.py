"""The interpreter each case runs under, and the error when the OneFlow one is missing.

The probe (running an interpreter to see what it has) is real here: the "OneFlow environment"
is a wrapper script around this interpreter whose PYTHONPATH holds a made-up site directory
with empty `oneflow`, `flowvision` and `nvidia/*/lib` entries. Only the executor tests replace
the probe, at its one seam (`python_env.probe`).
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from toolkit import submit
from toolkit.launch import python_env as pe
from toolkit.launch.local import LocalExecutor
from toolkit.spec import Case, Framework


def oneflow_case(**kw):
    return Case.from_dict({"framework": "oneflow", "model": "resnet50", **kw})


def fake_env(tmp_path, modules=("oneflow", "flowvision"), libs=("cudnn", "cublas", "cuda_nvrtc")):
    """A `python` that is this interpreter with a site directory holding `modules` and the
    nvidia `libs` directories (mpi4py comes from this interpreter itself)."""
    site = tmp_path / "site"
    for mod in modules:
        (site / mod).mkdir(parents=True)
        (site / mod / "__init__.py").write_text("")
    # always an `nvidia` package, so that one in this interpreter's own site-packages (torch's
    # CUDA wheels bring one) cannot answer for it
    (site / "nvidia").mkdir(parents=True)
    (site / "nvidia" / "__init__.py").write_text("")
    for lib in libs:
        (site / "nvidia" / lib / "lib").mkdir(parents=True)
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python, site


def test_torch_cases_run_under_the_given_interpreter():
    env = pe.python_env(Case(), default_python="/opt/py/bin/python", environ={})
    assert (env.framework, env.python, env.env, env.problem) == (
        Framework.TORCH, "/opt/py/bin/python", {}, None)


def test_oneflow_defaults_to_the_project_venv_and_says_how_to_make_it(tmp_path):
    env = pe.python_env(oneflow_case(), environ={}, root=tmp_path)
    assert env.python == str(tmp_path / ".venv-oneflow" / "bin" / "python")
    assert env.problem is not None
    assert "does not exist" in env.problem and "make oneflow-env" in env.problem
    assert "TRAINBENCH_ONEFLOW_PYTHON" in env.problem


def test_the_variable_wins_and_a_real_probe_finds_modules_and_cuda_libraries(tmp_path):
    python, site = fake_env(tmp_path)
    pe.probe.cache_clear()
    env = pe.python_env(oneflow_case(), environ={pe.ONEFLOW_PYTHON_VAR: str(python),
                                                 "LD_LIBRARY_PATH": "/usr/local/lib"},
                        root=tmp_path / "elsewhere")
    assert env.problem is None, env.problem
    assert env.python == str(python)
    assert env.env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(site / "nvidia" / "cudnn" / "lib"), str(site / "nvidia" / "cublas" / "lib"),
        str(site / "nvidia" / "cuda_nvrtc" / "lib"), "/usr/local/lib"]


def test_a_bare_command_name_is_looked_up_on_path(tmp_path):
    python, _ = fake_env(tmp_path)
    pe.probe.cache_clear()
    env = pe.python_env(oneflow_case(), environ={pe.ONEFLOW_PYTHON_VAR: "python",
                                                 "PATH": str(python.parent)})
    assert env.python == str(python) and env.problem is None


def test_an_interpreter_without_oneflow_is_refused_naming_what_it_lacks(tmp_path):
    python, _ = fake_env(tmp_path, modules=("flowvision",), libs=())
    pe.probe.cache_clear()
    env = pe.python_env(oneflow_case(), environ={pe.ONEFLOW_PYTHON_VAR: str(python)})
    assert env.problem is not None
    assert f"lacks oneflow: {pe.SETUP_HINT}" in env.problem
    assert f"Python {sys.version_info[0]}.{sys.version_info[1]}" in env.problem


def test_an_interpreter_that_cannot_run_is_refused(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no such thing' >&2\nexit 7\n")
    broken.chmod(0o755)
    pe.probe.cache_clear()
    env = pe.python_env(oneflow_case(), environ={pe.ONEFLOW_PYTHON_VAR: str(broken)})
    assert env.problem is not None
    assert "cannot be run" in env.problem and "exited with code 7: no such thing" in env.problem


def test_without_nvidia_libraries_ld_library_path_is_left_alone(tmp_path):
    python, _ = fake_env(tmp_path, libs=())
    pe.probe.cache_clear()
    env = pe.python_env(oneflow_case(), environ={pe.ONEFLOW_PYTHON_VAR: str(python)})
    assert env.problem is None and env.env == {}


# -- the local executor uses the choice: seam = python_env.probe ------------------------------
@pytest.fixture
def fake_probe(monkeypatch):
    libs = ("/site/nvidia/cudnn/lib", "/site/nvidia/cublas/lib")
    monkeypatch.setattr(pe, "probe", lambda python: pe.Probe(version="3.10.13",
                                                             nvidia_lib_dirs=libs))
    return libs


def test_local_executor_launches_oneflow_ranks_in_the_oneflow_env(tmp_path, monkeypatch,
                                                                   fake_probe):
    python = tmp_path / "py310"
    python.write_text("")
    monkeypatch.setenv(pe.ONEFLOW_PYTHON_VAR, str(python))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    executor = LocalExecutor(python="/torch/python", mpirun="/usr/bin/mpirun", gpus=0, cpus=2)
    case = oneflow_case(env={"LD_LIBRARY_PATH": "/grid/wins"})
    assert executor.problems(case) == []
    cmd = executor.command(case, tmp_path / "case.json", tmp_path / "r0", 0)
    assert cmd[cmd.index("-m") - 1] == str(python)
    torch_cmd = executor.command(Case(), tmp_path / "case.json", tmp_path / "r0", 0)
    assert torch_cmd[torch_cmd.index("-m") - 1] == "/torch/python"
    # the grid's env wins over the derived library path; without it, the libraries are exported
    assert executor.environment(case)["LD_LIBRARY_PATH"] == "/grid/wins"
    plain = oneflow_case()
    assert executor.environment(plain)["LD_LIBRARY_PATH"] == os.pathsep.join(fake_probe)
    script = executor.script(plain, "c", tmp_path / "case.json")
    assert f"export LD_LIBRARY_PATH={os.pathsep.join(fake_probe)}" in script
    assert f" {python} -m toolkit.worker " in script
    assert "LD_LIBRARY_PATH" not in executor.script(Case(), "c", tmp_path / "case.json")


def test_submit_refuses_a_oneflow_grid_without_the_env_and_writes_nothing(tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv(pe.ONEFLOW_PYTHON_VAR, str(tmp_path / "missing" / "python"))
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nbase: {framework: oneflow, model: resnet50}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "case resnet50-oneflow-fp32-1n1g-bs32: framework: oneflow needs a CPython 3.10" in err
    assert "make oneflow-env" in " ".join(err.split())
    assert not (tmp_path / "out").exists()
