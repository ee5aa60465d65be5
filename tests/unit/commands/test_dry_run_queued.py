"""`--dry-run` never changes what queued jobs will run: the case.json and case scripts that a
queued grid-level array job reads when it starts, and the array scripts themselves, keep their
bytes; the dry run writes its versions under dry-run/."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit import submit
from toolkit.launch.slurm import SlurmExecutor
from toolkit.spec.grid import load_grid

GRID = ("repeats: 2\nbase: {device: cpu, slurm: {partition: gpu, array_scope: grid}}\n"
        "sweep: {batch_size_per_device: [8, 16]}\n")


def _files(root: Path) -> dict[Path, bytes]:
    """Every file a job may read: all but the dry runs' own (dry-run.json, dry-run/)."""
    return {p: p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in ("dry-run", "dry-run.json")}


def test_a_dry_run_leaves_every_file_of_queued_jobs_as_it_was(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    out = tmp_path / "results"
    # The grid as submitted: case files, then the array script that sbatch queued.
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 0
    loaded = load_grid(grid, [])
    queued = out / "slurm" / "array-0000.sh"
    SlurmExecutor(gpus=False).plan(out, loaded.name, [(cid, c, (0, 1))
                                                      for cid, c in loaded.items()])
    assert queued.is_file()
    before = _files(out)

    # A dry run of the same grid with other Slurm options and watchdog limits (neither is in
    # the config hash, so the results directory takes it).
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm", "--set", "slurm.time_min=45",
                        "--set", "watchdog.iteration_s=60"]) == 0
    assert _files(out) == before

    # What the dry run would write lies beside, under dry-run/, with the same relative paths.
    case = "resnet50-torch-fp32-1n1g-bs8"
    preview = out / "dry-run" / "cases" / case
    assert "#SBATCH --time=45" in (preview / "submission.sh").read_text().splitlines()
    assert json.loads((preview / "case.json").read_text())["case"]["watchdog"][
        "iteration_s"] == 60
    planned = json.loads((out / "dry-run.json").read_text())
    [command] = [s["command"] for s in planned["submissions"]]
    assert command == ["sbatch", str(out / "dry-run" / "slurm" / "array-0001.sh")]
    assert (out / "dry-run" / "slurm" / "array-0001.sh").is_file()


def test_a_dry_run_of_an_unchanged_grid_writes_nothing_beside(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    out = tmp_path / "results"
    args = ["--grid", str(grid), "--results", str(out), "--dry-run", "--executor", "local"]
    assert submit.main(args) == 0
    before = _files(out)
    assert submit.main(args) == 0
    assert _files(out) == before
    assert not (out / "dry-run").exists()


def test_a_real_resubmit_never_rewrites_what_queued_jobs_read(tmp_path, monkeypatch, capsys):
    """The seam is the executor's questions to Slurm: which runs are queued, and the sbatch
    calls it would make."""
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 0
    cases = load_grid(grid, []).case_ids
    queued = {(cid, k) for cid in cases for k in (0, 1)}
    submitted: list = []
    monkeypatch.setattr(SlurmExecutor, "problems", lambda self, case: [])
    monkeypatch.setattr(SlurmExecutor, "in_flight", lambda self, root: (queued, []))
    monkeypatch.setattr(SlurmExecutor, "execute",
                        lambda self, root, name, plan, *a: submitted.append(plan) or 0)
    before = _files(out)
    capsys.readouterr()

    # Another time limit: the queued jobs' submission.sh would change under them.
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "slurm",
                        "--set", "slurm.time_min=45"]) == 2
    err = capsys.readouterr().err
    assert "queued or running jobs read these files" in " ".join(err.split())
    assert f"{cases[0]}/submission.sh: would change; 2 run(s)" in err.replace("\n", "")
    assert _files(out) == before and submitted == []

    # The same grid again: nothing changes, and nothing queued is submitted twice.
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "slurm"]) == 0
    assert _files(out) == before
    [plan] = submitted
    assert [repeats for _, _, repeats in plan] == [(), ()]
