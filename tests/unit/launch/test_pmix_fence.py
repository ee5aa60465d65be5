"""`slurm.pmix_fence`: the PMIx plugin's fence collective that every srun job script and the
preflight's own job export as SLURM_PMIX_FENCE (ring by default), and what leaves it out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from toolkit.launch.launcher import launcher_environment
from toolkit.launch.local import LocalExecutor
from toolkit.launch.preflight_slurm import SlurmRun
from toolkit.launch.slurm import SlurmExecutor
from toolkit.spec import Case, CaseError, SlurmJobOptions
from toolkit.spec.grid import GridError, parse_grid

EXPORT = re.compile(r"^export SLURM_PMIX_FENCE=(\S+)$", re.MULTILINE)


def submission(case: Case, tmp_path: Path) -> str:
    return SlurmExecutor(python="/usr/bin/python3", gpus=False).script(
        case, "c", tmp_path / "cases" / "c" / "case.json")


def test_an_srun_job_script_exports_the_ring_fence_by_default(tmp_path):
    text = submission(Case(device="cpu", num_nodes=2), tmp_path)
    assert EXPORT.findall(text) == ["ring"]
    # exported before the step that reads it
    assert text.index("export SLURM_PMIX_FENCE=") < text.index("srun --mpi=pmix")


@pytest.mark.parametrize("fence", ["tree", "mixed"])
def test_a_grid_chooses_the_fence(tmp_path, fence):
    case = parse_grid(yaml.safe_dump({"base": {"device": "cpu",
                                               "slurm": {"pmix_fence": fence}}}),
                      source="g.yaml").cases[0]
    assert EXPORT.findall(submission(case, tmp_path)) == [fence]


def test_site_leaves_the_clusters_mpi_conf_in_charge(tmp_path):
    case = Case(device="cpu", slurm=SlurmJobOptions(pmix_fence="site"))
    assert EXPORT.findall(submission(case, tmp_path)) == []


def test_mpirun_and_other_pmi_plugins_get_no_fence(tmp_path):
    mpirun = Case(device="cpu", slurm=SlurmJobOptions(launcher="mpirun"))
    assert EXPORT.findall(submission(mpirun, tmp_path)) == []
    assert launcher_environment(Case(device="cpu", slurm=SlurmJobOptions(mpi="pmi2")),
                                "srun") == {}
    assert launcher_environment(Case(device="cpu", slurm=SlurmJobOptions(mpi="pmix_v4")),
                                "srun") == {"SLURM_PMIX_FENCE": "ring"}
    # the local executor starts its ranks with mpirun, whatever the case's Slurm launcher
    local = LocalExecutor(python="/usr/bin/python3", mpirun="/usr/bin/mpirun", gpus=0,
                          cpus=2).script(Case(device="cpu"), "c", tmp_path / "c" / "case.json")
    assert "SLURM_PMIX_FENCE" not in local


def test_the_preflights_own_job_exports_the_fence(tmp_path):
    directory = tmp_path / "res" / "preflight" / "p1"
    directory.mkdir(parents=True)
    text = SlurmRun(Case(device="cpu", num_nodes=2), python="/usr/bin/python3").script(
        directory)
    assert EXPORT.findall(text) == ["ring"]
    assert text.index("export SLURM_PMIX_FENCE=") < text.index("srun --mpi=pmix")


def test_an_unknown_fence_is_refused_naming_file_and_key():
    with pytest.raises(GridError) as info:
        parse_grid(yaml.safe_dump({"base": {"slurm": {"pmix_fence": "star"}}}), source="g.yaml")
    assert "g.yaml" in str(info.value) and "slurm.pmix_fence" in str(info.value)
    assert "ring, tree, mixed, site" in str(info.value)
    with pytest.raises(CaseError):
        Case(slurm=SlurmJobOptions(pmix_fence="ring; rm -rf /"))


def test_the_fence_is_not_part_of_the_config_hash():
    ring = Case(device="cpu")
    tree = Case(device="cpu", slurm=SlurmJobOptions(pmix_fence="tree"))
    assert ring.config_hash() == tree.config_hash()


def test_a_case_env_cannot_set_the_fence_behind_the_slurm_key():
    with pytest.raises(CaseError) as info:
        Case(device="cpu", env=(("SLURM_PMIX_FENCE", "tree"),))
    assert info.value.key == "env.SLURM_PMIX_FENCE"
