"""submit's command line: bad input exits 2 and writes nothing; a dry run writes scripts and a
manifest of what would run, and runs or submits nothing."""

from __future__ import annotations

import json

import pytest

from toolkit import submit
from toolkit.launch.choice import choose_executor
from toolkit.results.layout import CaseDir


def test_invalid_grid_exits_2_and_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {precision: fp64}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "local"]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: base.precision: expected one of" in err
    assert not out.exists()


def test_local_executor_refuses_two_nodes_before_writing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {num_nodes: 2, gpus_per_node: 1}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "local"]) == 2
    assert "num_nodes: 2 nodes, but the local executor runs on this machine only" in \
        capsys.readouterr().err
    assert not out.exists()


def test_unsupported_workload_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: resnet50, gpus_per_node: 2, parallel: {tp: 2}}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "r"),
                        "--executor", "local"]) == 2
    assert "tensor/pipeline parallelism is not available for resnet50" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_dry_run_prints_each_programs_command_line(tmp_path, capsys):
    (tmp_path / "train.py").write_text("print('training')\n")
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: command, warmup_iterations: 2, measured_iterations: 4,\n"
                    "       command: {name: mine, argv: [python3, train.py, --steps,\n"
                    "                 '{total_iterations+10}', --out, '{run_dir}/o.json']}}\n"
                    "sweep: {batch_size_per_device: [8, 16]}\n")
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "r"), "--dry-run",
                        "--executor", "local"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if ": program: " in x]
    assert lines == [f"mine-torch-fp32-1n1g-bs{bs}: program: python3 train.py --steps 16 --out "
                     "'{run_dir}/o.json'" for bs in (8, 16)]


def test_dry_run_writes_scripts_and_manifest_but_runs_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("repeats: 3\nsweep: {batch_size_per_device: [8, 16]}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "local"]) == 0
    text = capsys.readouterr().out
    assert "resnet50-torch-fp32-1n1g-bs8" in text and "resnet50-torch-fp32-1n1g-bs16" in text
    assert "2 cases, 6 runs" in text
    planned = json.loads((out / "dry-run.json").read_text())
    assert {(r["case"], r["repeat"]) for r in planned["runs"]} == {
        (f"resnet50-torch-fp32-1n1g-bs{bs}", k) for bs in (8, 16) for k in range(3)}
    assert len(planned["runs"]) == 6
    for cid in ("resnet50-torch-fp32-1n1g-bs8", "resnet50-torch-fp32-1n1g-bs16"):
        assert (out / "cases" / cid / "case.json").exists()
        assert (out / "cases" / cid / "run_local.sh").exists()
        assert not list((out / "cases" / cid).glob("r*/"))  # nothing ran


def test_dry_run_slurm_writes_sbatch_scripts_without_a_cluster(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("repeats: 2\nbase: {num_nodes: 2, device: cpu, slurm: {partition: gpu}}\n"
                    "sweep: {batch_size_per_device: [8, 16]}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 0
    planned = json.loads((out / "dry-run.json").read_text())
    commands = [s["command"] for s in planned["submissions"]]
    script = out / "cases" / "resnet50-torch-fp32-2n1g-bs8" / "submission.sh"
    assert ["sbatch", "--array=0,1", str(script)] in commands
    text = script.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --job-name=resnet50-torch-fp32-2n1g-bs8", "#SBATCH --array=0-1"):
        assert line in text.splitlines()
    assert "pickle" not in text and "submitit" not in text
    assert "srun --mpi=pmix --nodes=2 --ntasks=2 --ntasks-per-node=1" in text
    assert not (out / "slurm" / "jobs.jsonl").exists()  # nothing submitted


def _sinfo(bin_dir, script: str) -> None:
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\n" + script)
    (bin_dir / "sinfo").chmod(0o755)


def _dry_run_auto(tmp_path, bin_dir, monkeypatch, capsys) -> tuple[str, dict, str]:
    """A slurm dry run of one `device: auto` case with only `bin_dir` on PATH."""
    monkeypatch.setenv("PATH", str(bin_dir))
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: auto, slurm: {partition: gpu}}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 0
    script = (out / "cases" / "resnet50-torch-fp32-1n1g-bs32" / "submission.sh").read_text()
    return (capsys.readouterr().out, json.loads((out / "dry-run.json").read_text()), script)


@pytest.mark.parametrize("sinfo", [None, "echo 'sinfo: error: Invalid partition name' >&2\n"
                                         "exit 1\n"])
def test_dry_run_says_that_device_auto_gets_no_gpus_when_slurm_cannot_be_asked(
        tmp_path, monkeypatch, capsys, sinfo):
    """sinfo missing, or failing: the dry run still writes the scripts, without GPUs, and says
    so and why, instead of choosing silently."""
    bin_dir = tmp_path / "bin"
    if sinfo is None:
        bin_dir.mkdir()
    else:
        _sinfo(bin_dir, sinfo)
    out, planned, script = _dry_run_auto(tmp_path, bin_dir, monkeypatch, capsys)
    text = " ".join(out.split())  # as one line, whatever the terminal width
    assert ("device auto: could not ask Slurm whether partition gpu has GPUs (sinfo: "
            in text)
    assert "no GPUs requested (--gpus-per-node left out)" in text
    assert ("not found" if sinfo is None else "Invalid partition name") in text
    (choice,) = planned["device_auto"]
    assert choice["partition"] == "gpu" and choice["gpus"] is False
    assert "could not ask Slurm" in choice["why"]
    assert "--gpus-per-node" not in script


def test_dry_run_says_that_device_auto_gets_gpus_where_sinfo_shows_them(tmp_path, monkeypatch,
                                                                         capsys):
    bin_dir = tmp_path / "bin"
    _sinfo(bin_dir, "echo 'gpu:h100:8(S:0-1)'\n")
    out, planned, script = _dry_run_auto(tmp_path, bin_dir, monkeypatch, capsys)
    assert ("device auto: sinfo shows GPU GRES on partition gpu: GPUs requested "
            "(--gpus-per-node)") in " ".join(out.split())
    assert [(c["partition"], c["gpus"]) for c in planned["device_auto"]] == [("gpu", True)]
    assert "#SBATCH --gpus-per-node=1" in script.split("\n")


def test_each_partition_decides_for_its_own_device_auto_cases(tmp_path, monkeypatch, capsys):
    """sinfo is asked per partition: a grid over a GPU and a CPU partition requests GPUs on
    the first only, whichever comes first."""
    bin_dir = tmp_path / "bin"
    _sinfo(bin_dir, 'case "$*" in *"-p gpu"*) echo "gpu:4";; *) echo "(null)";; esac\n')
    monkeypatch.setenv("PATH", str(bin_dir))
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {device: auto}\nsweep: {slurm.partition: [cpu, gpu]}\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--dry-run",
                        "--executor", "slurm"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "sinfo shows no GPU GRES on partition cpu: no GPUs requested" in text
    assert "sinfo shows GPU GRES on partition gpu: GPUs requested" in text
    scripts = {p.read_text().split("#SBATCH --partition=")[1].split("\n")[0]:
               "#SBATCH --gpus-per-node=1" in p.read_text().split("\n")
               for p in (out / "cases").glob("*/submission.sh")}
    assert scripts == {"cpu": False, "gpu": True}


def test_auto_executor_is_local_without_a_slurm_controller(monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")
    assert choose_executor("auto").name == "local"


def test_changed_configuration_under_same_id_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {batch_size_per_device: 8}\n")
    out = tmp_path / "results"
    cid = "resnet50-torch-fp32-1n1g-bs8"
    cdir = CaseDir(out, cid)
    cdir.path.mkdir(parents=True)
    (cdir.path / "case.json").write_text(json.dumps({"id": cid, "config_hash": "000000000000",
                                                     "case": {}}))
    before = sorted(p.name for p in out.rglob("*"))
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "local"]) == 2
    assert "holds config 000000000000" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == before


def test_only_runs_the_matching_cases_and_an_unmatched_pattern_writes_nothing(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("sweep: {batch_size_per_device: [8, 16, 32]}\n")
    out = tmp_path / "results"
    args = ["--grid", str(grid), "--results", str(out), "--dry-run", "--executor", "local"]
    assert submit.main([*args, "--only", "*-bs1?", "--only", "*-bs8"]) == 0
    planned = json.loads((out / "dry-run.json").read_text())
    assert [r["case"] for r in planned["runs"]] == [
        "resnet50-torch-fp32-1n1g-bs8", "resnet50-torch-fp32-1n1g-bs16"]
    assert not (out / "cases" / "resnet50-torch-fp32-1n1g-bs32").exists()
    capsys.readouterr()
    other = tmp_path / "other"
    assert submit.main(["--grid", str(grid), "--results", str(other), "--executor", "local",
                        "--only", "*-bs8", "--only", "bert*"]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: --only: 'bert*' matches no case id of this grid" in err
    assert "resnet50-torch-fp32-1n1g-bs32" in err  # the ids it could have named
    assert not other.exists()


def test_changed_configuration_error_names_the_keys_that_differ(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    out = tmp_path / "results"
    args = ["--grid", str(grid), "--results", str(out), "--executor", "local", "--dry-run"]
    grid.write_text("base: {batch_size_per_device: 8, seed: 7, warmup_iterations: 3}\n")
    assert submit.main(args) == 0
    grid.write_text("base: {batch_size_per_device: 8, seed: 8, warmup_iterations: 3,\n"
                    "       slurm: {partition: gpu}}\n")
    capsys.readouterr()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert submit.main(args) == 2
    err = capsys.readouterr().err
    assert "differing: seed: 7 -> 8; slurm.partition: null -> \"gpu\"" in err
    assert "warmup_iterations" not in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_an_executor_problem_shared_by_many_cases_is_one_line(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    seeds = ", ".join(str(i) for i in range(500))
    grid.write_text(f"base: {{num_nodes: 2, gpus_per_node: 1}}\nsweep: {{seed: [{seeds}]}}\n"
                    "zip: [{batch_size_per_device: [8, 16]}]\n")
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out), "--executor", "local"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: cannot run this grid with the local executor"
    assert len(err) == 2
    assert err[1].startswith(f"{grid}: num_nodes: 2 nodes, but the local executor runs on this "
                             "machine only")
    assert err[1].endswith("(all 1,000 cases: resnet50-torch-fp32-2n1g-bs8-seed0, "
                           "resnet50-torch-fp32-2n1g-bs16-seed0, "
                           "resnet50-torch-fp32-2n1g-bs8-seed1 ...)")
    assert not out.exists()


def test_many_cases_with_the_same_changed_keys_are_one_conflict_line(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    out = tmp_path / "results"
    args = ["--grid", str(grid), "--results", str(out), "--executor", "local", "--dry-run"]
    seeds = ", ".join(str(i) for i in range(200))
    grid.write_text(f"base: {{batch_size_per_device: 8, warmup_iterations: 3}}\n"
                    f"sweep: {{seed: [{seeds}]}}\n")
    assert submit.main(args) == 0
    grid.write_text(grid.read_text().replace("warmup_iterations: 3", "warmup_iterations: 4"))
    capsys.readouterr()
    assert submit.main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[1].startswith("200 cases hold another configuration (")
    assert err[1].endswith(" ...); differing: warmup_iterations: 3 -> 4")


def test_a_full_disk_is_said_in_one_line_without_a_traceback(tmp_path, capsys, monkeypatch):
    """Writing a run's outcome on a full disk: one line naming the error and the file."""
    grid = tmp_path / "g.yaml"
    grid.write_text("base: {model: resnet50}\n")
    status = tmp_path / "results" / "cases" / "x" / "r0" / "status.json"

    def full(*_args: object) -> int:
        raise OSError(28, "No space left on device", str(status))

    monkeypatch.setattr(submit, "_submit", full)
    assert submit.main(["--grid", str(grid), "--results", str(tmp_path / "results"),
                        "--executor", "local"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"No space left on device ({status}); nothing more is run" in err.replace("\n", " ")
