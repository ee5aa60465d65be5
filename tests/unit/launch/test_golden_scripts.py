"""The generated job scripts, byte for byte, against golden files in tests/data/golden/.

A change to what `submission.sh`, `run_local.sh` or a grid-level array script says must be made
on purpose: `pytest tests/unit -k golden --regen-golden` rewrites the files, and the diff is
reviewed with the change. Machine-specific words (the project root, the results directory, the
interpreter, mpirun's path) are replaced by placeholders.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit import PROJECT_ROOT
from toolkit.launch.local import LocalExecutor
from toolkit.launch.slurm import SlurmExecutor
from toolkit.spec.grid import parse_grid

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
PYTHON = "/opt/python/bin/python3"

GRID = """
name: golden
repeats: 3
base:
  model: bert_base
  precision: amp_bf16
  batch_size_per_device: 32
  env: {NCCL_DEBUG: WARN, "QUOTED": "it's a $HOME"}
  slurm: {partition: gpu, account: bench, time_min: 30, exclusive: true,
          extra_sbatch: ["--comment=nightly run"]}
zip:
  - num_nodes: [1, 2, 1]
    gpus_per_node: [1, 8, 2]
    device: [cpu, cuda, auto]
    slurm.launcher: [srun, srun, mpirun]
    slurm.repeats_as: [array, array, sequence]
    cpu_threads: [4, null, null]
"""


def _cases() -> list[tuple[str, object]]:
    return parse_grid(GRID, source="golden.yaml").items()


def _normalise(text: str, root: Path) -> str:
    return (text.replace(str(root.absolute()), "@RESULTS@")
            .replace(str(PROJECT_ROOT), "@PROJECT_ROOT@")
            .replace(PYTHON, "@PYTHON@"))


def _check(name: str, text: str, regen: bool) -> None:
    path = GOLDEN / name
    if regen:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.skip(f"rewrote {path}")
    assert path.is_file(), f"no golden file {path}: run pytest with --regen-golden"
    assert text == path.read_text(), (
        f"{name} differs from its golden file; if the change is on purpose, "
        "regenerate with --regen-golden and review the diff")


@pytest.fixture(autouse=True)
def _as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """mpirun gains --allow-run-as-root under root: fix the answer so goldens do not depend on
    who runs the tests."""
    monkeypatch.setattr("os.geteuid", lambda: 0)


@pytest.mark.parametrize("index", range(3))
def test_submission_script_is_golden(index: int, tmp_path: Path, regen_golden: bool) -> None:
    cid, case = _cases()[index]
    executor = SlurmExecutor(python=PYTHON, gpus=True)
    case_json = tmp_path / "cases" / cid / "case.json"
    text = executor.script(case, cid, case_json)  # type: ignore[arg-type]
    _check(f"submission-{index}.sh", _normalise(text, tmp_path), regen_golden)


def test_run_local_script_is_golden(tmp_path: Path, regen_golden: bool) -> None:
    cid, case = _cases()[0]
    executor = LocalExecutor(python=PYTHON, mpirun="/usr/bin/mpirun", gpus=0, cpus=2)
    case_json = tmp_path / "cases" / cid / "case.json"
    text = executor.script(case, cid, case_json)  # type: ignore[arg-type]
    _check("run_local.sh", _normalise(text, tmp_path), regen_golden)


def test_grid_array_script_is_golden(tmp_path: Path, regen_golden: bool) -> None:
    grid = parse_grid(GRID.replace("sequence]", "array]") + "\n", source="golden.yaml")
    cases = [(cid, c) for cid, c in grid.items()]
    from dataclasses import replace
    cases = [(cid, replace(c, slurm=replace(c.slurm, array_scope="grid"))) for cid, c in cases]
    executor = SlurmExecutor(python=PYTHON, gpus=True)
    subs = executor.plan(tmp_path, "golden", [(cid, c, (0, 2)) for cid, c in cases[:1]])
    assert len(subs) == 1 and subs[0].script.name == "array-0000.sh"
    _check("array-grid.sh", _normalise(subs[0].script.read_text(), tmp_path), regen_golden)


def test_preflight_submission_script_is_golden(tmp_path: Path, regen_golden: bool) -> None:
    """The 2-node case with a preflight before its repeats (`on_fail: skip_node`)."""
    from dataclasses import replace

    from toolkit.spec import PreflightOptions

    cid, case = _cases()[1]
    case = replace(case, preflight=PreflightOptions(enabled=True, on_fail="skip_node"))  # type: ignore[type-var]
    executor = SlurmExecutor(python=PYTHON, gpus=True)
    text = executor.script(case, cid, tmp_path / "cases" / cid / "case.json")  # type: ignore[arg-type]
    _check("submission-preflight.sh", _normalise(text, tmp_path), regen_golden)


CONTAINER_GRID = """
name: golden-container
base:
  model: resnet50
  precision: amp_bf16
  num_nodes: 2
  gpus_per_node: 4
  device: cuda
  preflight: {enabled: true}
sweep:
  slurm.launcher: [srun, mpirun]
"""


@pytest.mark.parametrize(("site", "launcher"), [("nvidia-pyxis-example", "srun"),
                                                ("apptainer-example", "srun"),
                                                ("apptainer-example", "mpirun")])
def test_container_submission_script_is_golden(site: str, launcher: str, tmp_path: Path,
                                               regen_golden: bool) -> None:
    """A shipped site's container around the workers and the preflight's ranks, its modules
    and its environment (pyxis starts containers through srun only)."""
    from toolkit.spec.site import find_site

    grid = CONTAINER_GRID.replace("[srun, mpirun]", f"[{launcher}]")
    [(cid, case)] = parse_grid(grid, source="golden.yaml", site=find_site(site)).items()
    text = SlurmExecutor(python=PYTHON).script(case, cid, tmp_path / "cases" / cid / "case.json")
    _check(f"submission-{site}-{launcher}.sh", _normalise(text, tmp_path), regen_golden)
