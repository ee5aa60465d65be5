"""Results directories on shared project space: a symbolic link planted anywhere inside the
results tree is never written through, and a directory that is not a results directory is
never written into."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit import collect, status, submit
from toolkit.launch import job_ledger
from toolkit.launch.lifecycle import main as runstate_main
from toolkit.launch.local import LocalExecutor
from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import (
    COMPILE_CACHE_DIR,
    GRID_FILE,
    LOCK_FILE,
    MARKER_FILE,
    CaseDir,
    rank_file,
)
from toolkit.results.safe_write import UnsafePath, atomic_write_text
from toolkit.spec import Case
from toolkit.spec.grid import load_grid

DATA = Path(__file__).resolve().parents[2] / "data"
GRID = "name: tiny\nrepeats: 1\nbase: {device: cpu, warmup_iterations: 1, " \
       "measured_iterations: 2}\nsweep: {batch_size_per_device: [8, 16]}\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its content (what must not change)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the results tree that a planted link points at, with one file."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "victim.txt").write_text("precious\n")
    return folder


def dry_run(grid: Path, results: Path, *extra: str) -> int:
    return submit.main(["--grid", str(grid), "--results", str(results), "--dry-run",
                        "--executor", "local", *extra])


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A results directory written by a dry-run submit of a two-case grid."""
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    root = tmp_path / "res"
    assert dry_run(grid, root) == 0
    return root


def case_ids(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cases").iterdir())


def plant_dir_link(link: Path, target: Path) -> None:
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    link.symlink_to(target, target_is_directory=True)


def test_submit_refuses_a_case_directory_that_is_a_link(results, outside, capsys):
    before = snapshot(outside)
    plant_dir_link(results / "cases" / case_ids(results)[0], outside)
    assert dry_run(results.parent / "tiny.yaml", results) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link inside the results directory" in err
    assert snapshot(outside) == before


def test_submit_refuses_a_compile_cache_that_is_a_link(results, outside, capsys):
    """torch writes the grid's compile cache itself: a link planted in its place would take
    its writes outside the results directory."""
    before = snapshot(outside)
    plant_dir_link(results / COMPILE_CACHE_DIR, outside)
    assert dry_run(results.parent / "tiny.yaml", results) == 2
    assert "is a symbolic link inside the results directory" in capsys.readouterr().err
    assert snapshot(outside) == before


def test_submit_never_opens_a_lock_that_is_a_link(results, outside, capsys):
    (results / LOCK_FILE).unlink()
    (results / LOCK_FILE).symlink_to(outside / "lock-target")
    assert dry_run(results.parent / "tiny.yaml", results) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert sorted(os.listdir(outside)) == ["victim.txt"]


def test_submit_replaces_a_linked_grid_dump_without_following_it(results, outside):
    (results / GRID_FILE).unlink()
    (results / GRID_FILE).symlink_to(outside / "victim.txt")
    assert dry_run(results.parent / "tiny.yaml", results) == 0
    assert (outside / "victim.txt").read_text() == "precious\n"
    assert not (results / GRID_FILE).is_symlink()


def test_job_ledger_is_never_appended_through_a_linked_slurm_dir(results, outside):
    plant_dir_link(results / "slurm", outside)
    before = snapshot(outside)
    with pytest.raises(UnsafePath, match="slurm is a symbolic link"):
        job_ledger.append(results, {"kind": "submit", "job": "12"})
    assert snapshot(outside) == before


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    """A copy of a real results directory (the quickstart's BERT cases, 1 and 2 ranks)."""
    root = tmp_path / "ran"
    shutil.copytree(DATA / "results_quickstart", root)
    return root


@pytest.mark.parametrize("where", ["plots", "tables"])
def test_collect_never_writes_into_a_linked_output_dir(ran, outside, capsys, where):
    plant_dir_link(ran / where, outside)
    before = snapshot(outside)
    assert collect.main([str(ran), "--quiet"]) == 2
    assert f"{ran / where} is a symbolic link inside the results directory" in \
        capsys.readouterr().err
    assert snapshot(outside) == before


@pytest.mark.parametrize("name", ["runs.csv", "summary.csv", "report.md", "report.html"])
def test_collect_replaces_a_linked_report_file_in_place(ran, outside, name):
    (ran / name).symlink_to(outside / "victim.txt")
    assert collect.main([str(ran), "--quiet", "--no-plots"]) == 0
    assert (outside / "victim.txt").read_text() == "precious\n"
    assert (ran / name).is_file() and not (ran / name).is_symlink()


def test_runstate_begin_refuses_a_linked_case_dir(results, outside, capsys):
    cid = case_ids(results)[0]
    shutil.copy(results / "cases" / cid / "case.json", outside / "case.json")
    plant_dir_link(results / "cases" / cid, outside)
    before = snapshot(outside)
    assert runstate_main(["begin", str(results / "cases" / cid), "0"]) == 2
    assert "is a symbolic link inside the results directory" in capsys.readouterr().err
    assert snapshot(outside) == before and sorted(os.listdir(outside)) == [
        "case.json", "victim.txt"]


@pytest.mark.parametrize("dangling", [False, True])
def test_runstate_begin_moves_a_linked_run_dir_aside(results, outside, dangling):
    """`r0 -> elsewhere` is moved aside like an unfinished attempt, never followed: the run and
    its output.log land in a real r0 inside the case."""
    case_dir = results / "cases" / case_ids(results)[0]
    (case_dir / "r0").symlink_to(outside / "gone" if dangling else outside)
    before = snapshot(outside)
    assert runstate_main(["begin", str(case_dir), "0"]) == 0
    assert (case_dir / "r0").is_dir() and not (case_dir / "r0").is_symlink()
    assert (case_dir / "r0" / "job.json").is_file()
    assert (case_dir / "r0.attempt1").is_symlink()
    assert snapshot(outside) == before


def test_runstate_end_never_writes_status_through_a_link(results, outside, capsys):
    case_dir = results / "cases" / case_ids(results)[0]
    assert runstate_main(["begin", str(case_dir), "0"]) == 0
    (case_dir / "r0" / "status.json").symlink_to(outside / "victim.txt")
    runstate_main(["end", str(case_dir), "0", "--rc", "1", "--executor", "local"])
    assert (outside / "victim.txt").read_text() == "precious\n"
    assert not (case_dir / "r0" / "status.json").is_symlink()


def test_local_run_never_writes_its_log_through_a_link(tmp_path, outside):
    case = Case.from_dict({"device": "cpu", "warmup_iterations": 1, "measured_iterations": 2})
    cdir = CaseDir(tmp_path / "res", "c")
    cdir.write_case(case)
    run_dir = cdir.prepare_run(0)
    (run_dir / "output.log").symlink_to(outside / "victim.txt")
    executor = LocalExecutor(mpirun="/bin/true", gpus=0, cpus=2)
    with pytest.raises(UnsafePath):
        executor.run(case, cdir.path / "case.json", run_dir, 0)
    assert (outside / "victim.txt").read_text() == "precious\n"


def test_rank_events_are_never_appended_through_a_link(tmp_path, outside):
    run_dir = tmp_path / "r0"
    run_dir.mkdir()
    rank_file(run_dir, 0).symlink_to(outside / "victim.txt")
    with pytest.raises(UnsafePath):
        EventWriter(rank_file(run_dir, 0), 0)
    assert (outside / "victim.txt").read_text() == "precious\n"


def test_atomic_write_refuses_a_linked_parent_and_a_path_outside_the_root(tmp_path, outside):
    root = tmp_path / "res"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "c").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePath):
        atomic_write_text(root / "cases" / "c" / "r0" / "x.json", "{}", root=root)
    with pytest.raises(UnsafePath, match="not inside the results directory"):
        atomic_write_text(root / ".." / "elsewhere" / "victim.txt", "x", root=root)
    assert snapshot(outside) == {"victim.txt": b"precious\n"}


def test_results_dot_never_overwrites_the_users_own_files(tmp_path, capsys, monkeypatch):
    """`--results .` beside the user's grid.yaml: refused, the grid untouched."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "grid.yaml").write_text(GRID)
    (project / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(project)
    before = snapshot(project)
    assert dry_run(Path("grid.yaml"), Path(".")) == 2
    assert "not a results directory" in capsys.readouterr().err
    assert snapshot(project) == before


def test_results_may_be_new_empty_ours_or_made_by_an_older_version(tmp_path, results):
    grid = results.parent / "tiny.yaml"
    (tmp_path / "empty").mkdir()
    assert dry_run(grid, tmp_path / "empty") == 0
    assert (tmp_path / "empty" / MARKER_FILE).is_file()
    assert dry_run(grid, results) == 0  # ours: a second submit goes on
    (results / MARKER_FILE).unlink()  # an older version's: cases/<id>/case.json
    assert dry_run(grid, results) == 0


@pytest.mark.parametrize("command", ["collect", "status"])
def test_collect_and_status_refuse_a_directory_that_is_not_results(tmp_path, capsys, command):
    """A user's folder that happens to hold `cases/` is not ours: nothing is written there."""
    folder = tmp_path / "mine"
    (folder / "cases").mkdir(parents=True)
    (folder / "cases" / "notes.txt").write_text("mine\n")
    main = collect.main if command == "collect" else status.main
    assert main([str(folder)]) == 2
    assert "not a results directory" in capsys.readouterr().err
    assert sorted(p.name for p in folder.rglob("*")) == ["cases", "notes.txt"]


def test_the_resolved_grid_feeds_back_with_grid_unchanged(tmp_path):
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    root = tmp_path / "res"
    args = ["--set", "measured_iterations=3", "--only", "*-bs16"]
    assert dry_run(grid, root, *args) == 0
    original = load_grid(grid, ["measured_iterations=3"]).select(["*-bs16"])
    again = load_grid(root / GRID_FILE)
    assert [(cid, c.config_hash()) for cid, c in again.items()] == \
        [(cid, c.config_hash()) for cid, c in original.items()]
    assert again.name == "tiny"
    assert dry_run(root / GRID_FILE, root) == 0  # the same cases: no conflict


@pytest.fixture
def stand_in_mpirun(tmp_path: Path, monkeypatch) -> None:
    """An mpirun that only says where it was started and with which arguments (on PATH when
    the local executor is made, so the scripts call it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text('#!/bin/bash\necho "stand-in ran in $PWD with $*"\n')
    (bin_dir / "mpirun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def run_local(script: Path, repeat: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), str(repeat)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=script.parents[3],
                          env={**os.environ, "PYTHONPATH": ""})


@pytest.mark.usefixtures("stand_in_mpirun")
def test_a_copied_results_directory_runs_into_the_copy(tmp_path):
    """run_local.sh finds case.json and its run directories beside itself when it runs."""
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    original = tmp_path / "res"
    assert dry_run(grid, original) == 0
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    before = snapshot(original)
    cid = case_ids(copy)[0]
    done = run_local(copy / "cases" / cid / "run_local.sh", 1)
    run = copy / "cases" / cid / "r1"
    assert (run / "status.json").is_file(), done.stderr
    log = (run / "output.log").read_text()
    assert f"stand-in ran in {run} with" in log
    assert f"{copy / 'cases' / cid / 'case.json'} --run-dir {run} --repeat 1" in log
    assert snapshot(original) == before
    assert not (original / "cases" / cid / "r1").exists()


@pytest.mark.usefixtures("stand_in_mpirun")
@pytest.mark.parametrize("where", ["case", "run"])
def test_the_job_script_never_writes_through_a_planted_link(tmp_path, outside, where):
    """`cases/<id> -> elsewhere`: the script's `runstate begin` refuses and nothing runs;
    `r0 -> elsewhere`: the link is moved aside and the run and its output.log land in a real
    r0. Either way nothing under `elsewhere` changes."""
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    root = tmp_path / "res"
    assert dry_run(grid, root) == 0
    case_dir = root / "cases" / case_ids(root)[0]
    if where == "case":
        shutil.copytree(case_dir, outside, dirs_exist_ok=True)
        plant_dir_link(case_dir, outside)
    else:
        plant_dir_link(case_dir / "r0", outside)
    before = snapshot(outside)
    done = run_local(case_dir / "run_local.sh", 0)
    assert snapshot(outside) == before and not (outside / "r0").exists()
    if where == "case":
        assert done.returncode == 2
        assert "is a symbolic link inside the results directory" in done.stderr
    else:
        assert (case_dir / "r0").is_dir() and not (case_dir / "r0").is_symlink()
        assert "stand-in ran in" in (case_dir / "r0" / "output.log").read_text()
        assert (case_dir / "r0" / "status.json").is_file(), done.stderr


def test_collect_out_never_writes_into_a_users_own_folder(tmp_path, capsys):
    """`--out` follows the rule of `--results`: a folder with files that collect did not write
    is refused; a new one gets a marker, so the next collect may write there again."""
    results = tmp_path / "res"
    shutil.copytree(Path(__file__).parents[2] / "data" / "results_quickstart", results)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my own notes\n")
    assert collect.main([str(results), "--out", str(mine), "--quiet", "--no-plots"]) == 2
    assert "collect did not write" in " ".join(capsys.readouterr().err.split())
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"]
    assert (mine / "report.md").read_text() == "my own notes\n"

    fresh = tmp_path / "fresh"
    for _ in range(2):
        assert collect.main([str(results), "--out", str(fresh), "--quiet", "--no-plots"]) == 0
    assert (fresh / "report.md").is_file() and (fresh / ".trainbench-report").is_file()


def test_a_submit_starting_beside_another_is_told_a_submit_runs(tmp_path, capsys):
    """Two submits into a new directory at once: the second may look while the first holds
    its lock and has not yet written its marker. The directory is ours, and the second is told
    that another submit runs, not that the directory is foreign."""
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    root = tmp_path / "res"
    root.mkdir()
    with open(root / LOCK_FILE, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        (root / f".{MARKER_FILE}.123.abcd.tmp").write_text("")
        assert dry_run(grid, root) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "another toolkit.submit is running" in err and "not a results directory" not in err
