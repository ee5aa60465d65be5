"""A case's `env` is exported inside both executors' job scripts: it can set nothing that the
scripts' own lines read (their loop variables, the shell's word splitting and command search,
the toolkit's PYTHONPATH, Slurm's SLURM_* variables)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from toolkit.launch.local import LocalExecutor
from toolkit.launch.slurm import SlurmExecutor
from toolkit.spec import Case, CaseError, SlurmJobOptions
from toolkit.spec.grid import GridError, parse_grid

READ = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def scripts(tmp_path: Path) -> dict[str, str]:
    case = Case(device="cpu", repeats=2)
    json_path = tmp_path / "cases" / "c" / "case.json"
    slurm = SlurmExecutor(python="/usr/bin/python3", gpus=False)
    return {
        "submission.sh": slurm.script(case, "c", json_path),
        "sequence": SlurmExecutor(python="/usr/bin/python3", gpus=False).script(
            Case(device="cpu", repeats=2, slurm=SlurmJobOptions(repeats_as="sequence")), "c",
            json_path),
        "array": slurm.group_script(tmp_path, "g", case, [("c", (0,)), ("c", (1,))]),
        "run_local.sh": LocalExecutor(python="/usr/bin/python3", mpirun="/usr/bin/mpirun",
                                      gpus=0, cpus=2).script(case, "c", json_path),
    }


def variables_read(text: str) -> set[str]:
    """Every variable a script expands, outside its comments and `#SBATCH` lines."""
    lines = [ln for ln in text.split("\n") if not ln.lstrip().startswith("#")]
    return {m.group(1) for ln in lines for m in READ.finditer(ln)}


def test_every_variable_the_job_scripts_read_is_refused_in_a_case_env(tmp_path):
    read = set().union(*(variables_read(t) for t in scripts(tmp_path).values()))
    assert {"REPEATS", "REPEAT", "FAILED", "SLURM_ARRAY_TASK_ID", "PYTHONPATH"} <= read
    for name in sorted(read | {"IFS", "PATH", "BASH_ENV", "SLURM_NTASKS", "SLURM_MPI_TYPE",
                              "SRUN_CPUS_PER_TASK"}):
        with pytest.raises(CaseError) as info:
            Case(device="cpu", env=((name, "0 1 2 3"),))
        assert info.value.key == f"env.{name}"


@pytest.mark.parametrize("name", ["REPEATS", "IFS", "PATH", "SLURM_ARRAY_TASK_ID", "FAILED"])
def test_a_grid_env_name_the_scripts_use_is_refused_naming_file_and_key(name):
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"base": {"env": {"NCCL_DEBUG": "WARN", name: "x"}}}),
                   source="g.yaml")
    assert f"g.yaml: base.env.{name}: cannot be set by a grid" in str(info.value)


def test_other_env_names_stay_allowed():
    env = (("NCCL_DEBUG", "WARN"), ("OMP_NUM_THREADS", "2"), ("LD_LIBRARY_PATH", "/x"),
           ("MY_SLURM_NOTE", "y"), ("repeats", "z"))
    assert Case(device="cpu", env=env).env == env
