"""The container words around a case's ranks, the GPU request a site makes, and what a run
records of where it ran."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from toolkit import PROJECT_ROOT
from toolkit.launch.container import rank_command
from toolkit.launch.launcher import RUN_DIR, module_lines, rank_environment
from toolkit.launch.local import LocalExecutor
from toolkit.launch.shell import ShellWord, shell_join
from toolkit.launch.slurm import SlurmExecutor
from toolkit.rank.meta import container_meta
from toolkit.results.runs import placement
from toolkit.spec import Case
from toolkit.spec.placement import ContainerOptions, SiteOptions

WORKER = ["/py", "-m", "toolkit.worker", "/r/cases/c/case.json"]


def _case(**container: object) -> Case:
    return Case(container=ContainerOptions(**container))  # type: ignore[arg-type]


def test_no_container_is_the_bare_launcher() -> None:
    assert rank_command(Case(), ["mpirun", "-np", "2"], WORKER, results_root="/r",
                        workdir="/r/x", gpus=True) == ["mpirun", "-np", "2", *WORKER]


def test_pyxis_options_go_to_srun() -> None:
    case = _case(runtime="pyxis", image="nvcr.io#nvidia/pytorch:24.05-py3",
                 mounts=("/data:/d:ro", "/scratch"), env=("NCCL_IB_HCA",), writable=True,
                 mount_home=False, python="python", options=("--container-remap-root",))
    cmd = rank_command(case, ["srun", "--mpi=pmix"], WORKER, results_root="/r", workdir="/r/w",
                       gpus=True)
    assert cmd == [
        "srun", "--mpi=pmix", "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        f"--container-mounts={PROJECT_ROOT}:{PROJECT_ROOT}:ro,/r:/r,/data:/d:ro,"
        "/scratch:/scratch", "--container-workdir=/r/w", "--container-env=NCCL_IB_HCA",
        "--container-writable", "--no-container-mount-home", "--container-remap-root",
        "python", "-m", "toolkit.worker", "/r/cases/c/case.json"]


def test_apptainer_runs_under_the_launcher_with_gpus() -> None:
    case = _case(runtime="apptainer", image="/img/pt.sif", mount_home=False)
    cmd = rank_command(case, ["mpirun", "-np", "8"], WORKER, results_root="/r", workdir="/r/w",
                       gpus=True)
    assert cmd[:5] == ["mpirun", "-np", "8", "apptainer", "exec"]
    assert "--nv" in cmd and "--no-home" in cmd and "--pwd=/r/w" in cmd
    assert cmd[cmd.index("/img/pt.sif") + 1:] == ["python3", *WORKER[1:]]
    no_gpu = rank_command(case, ["srun"], WORKER, results_root="/r", workdir="/r/w", gpus=False)
    assert "--nv" not in no_gpu


def test_podman_holds_the_launcher_and_passes_only_named_variables() -> None:
    case = _case(runtime="podman", image="localhost/x:1", env=("HF_HOME",),
                 options=("--runtime=runc",))
    cmd = rank_command(case, ["mpirun", "-np", "2"], WORKER, results_root="/r",
                       workdir="/r/w", gpus=False, env_names=["PYTHONPATH", "OMP_NUM_THREADS"],
                       name="tb-1")
    image = cmd.index("localhost/x:1")
    assert cmd[:3] == ["podman", "run", "--rm"] and "--name=tb-1" in cmd
    assert [w for w in cmd[:image] if w.startswith("--env=")] == [
        "--env=PYTHONPATH", "--env=OMP_NUM_THREADS", "--env=HF_HOME"]
    assert f"--volume={PROJECT_ROOT}:{PROJECT_ROOT}:ro" in cmd and "--volume=/r:/r" in cmd
    assert cmd[image - 1] == "--runtime=runc"  # the case's options last, before the image
    assert cmd[image + 1:image + 4] == ["mpirun", "-np", "2"]
    assert "--device=nvidia.com/gpu=all" not in cmd


def test_shell_words_stay_unquoted_and_values_stay_quoted() -> None:
    case = _case(runtime="pyxis", image="x", mounts=("/a'b",))
    cmd = rank_command(case, ["srun"], WORKER, results_root=ShellWord('"$RESULTS_DIR"'),
                       workdir=RUN_DIR, gpus=False)
    line = shell_join(cmd)
    assert '--container-workdir="$RUN_DIR"' in line
    # a quote in a path stays a character of the path
    words = shlex.split(line.replace('"$RUN_DIR"', "RUN").replace('"$RESULTS_DIR"', "RES"))
    assert words[2] == f"--container-mounts={PROJECT_ROOT}:{PROJECT_ROOT}:ro,RES:RES,/a'b:/a'b"


def test_site_environment_sits_between_toolkit_and_case() -> None:
    case = Case(env=(("SHARED", "case"),), cpu_threads=2,
                site=SiteOptions(env=(("OMP_NUM_THREADS", "9"), ("SHARED", "site"),
                                      ("NCCL_IB_HCA", "mlx5_0"))),
                container=ContainerOptions(runtime="apptainer", image="/i.sif"))
    env = rank_environment(case, {}, "4", digest="sha256:ab")
    assert env["SHARED"] == "case" and env["NCCL_IB_HCA"] == "mlx5_0"
    assert env["OMP_NUM_THREADS"] == "9"  # the site may set what the toolkit derives
    assert env["TRAINBENCH_CONTAINER_IMAGE"] == "/i.sif"
    assert env["TRAINBENCH_CONTAINER_DIGEST"] == "sha256:ab"


def test_module_lines_fail_clearly_without_module() -> None:
    assert module_lines(Case()) == []
    lines = module_lines(Case(site=SiteOptions(name="c", modules=("cuda/12.4", "nccl"))))
    assert lines[-1] == "module load cuda/12.4 nccl || exit $?"
    assert "no module command" in lines[0] and "exit 2" in lines[0]


@pytest.mark.parametrize(("request_", "device", "gpus_per_node", "gres"), [
    ("gpus-per-node", "auto", 4, None), ("gres", "auto", None, "gpu:4"),
    ("none", "cuda", None, None), ("gres", "cpu", None, None), ("auto", "cuda", 4, None)])
def test_site_gpu_request(request_: str, device: str, gpus_per_node: int | None,
                          gres: str | None) -> None:
    case = Case.from_dict({"gpus_per_node": 4, "device": device,
                           "site": {"gpu_request": request_}})
    params = SlurmExecutor(gpus=False).parameters(case, "j", Path("/r"))
    assert params.get("gpus_per_node") == gpus_per_node
    assert params["additional_parameters"].get("gres") == gres


def test_a_grids_own_gres_wins() -> None:
    case = Case.from_dict({"gpus_per_node": 2, "site": {"gpu_request": "gres"},
                           "slurm": {"extra_sbatch": ["--gres=gpu:2,nvme:1"]}})
    params = SlurmExecutor().parameters(case, "j", Path("/r"))
    assert params["additional_parameters"]["gres"] == "gpu:2,nvme:1"


def test_executors_refuse_runtimes_they_cannot_start() -> None:
    podman = _case(runtime="podman", image="x")
    assert ("container.runtime", ) == tuple(k for k, _ in SlurmExecutor().problems(podman)
                                            if k.startswith("container"))
    local = LocalExecutor(mpirun="/usr/bin/mpirun", gpus=0, cpus=2,
                          digests={"x": (None, "podman has no image x")})
    keys = {k: m for k, m in local.problems(podman)}
    assert "podman has no image x" in keys["container.image"]
    assert "runs on Slurm" in dict(local.problems(_case(runtime="pyxis", image="y")))[
        "container.runtime"]
    assert "site.modules" in dict(local.problems(Case(site=SiteOptions(modules=("m",)))))


def test_local_command_and_digest(tmp_path: Path) -> None:
    case = _case(runtime="podman", image="x", python="/venv/bin/python")
    local = LocalExecutor(mpirun="/usr/bin/mpirun", gpus=0, cpus=2,
                          digests={"x": ("sha256:12", None)})
    run_dir = tmp_path / "cases" / "c" / "r0"
    cmd = local.command(case, tmp_path / "cases" / "c" / "case.json", run_dir, 0, name="n")
    assert cmd[cmd.index("x") + 1:cmd.index("x") + 2] == ["mpirun"]  # the image's mpirun
    assert f"--workdir={run_dir}" in cmd and f"--volume={tmp_path}:{tmp_path}" in cmd
    assert cmd[-8:] == ["/venv/bin/python", "-m", "toolkit.worker",
                        str(tmp_path / "cases" / "c" / "case.json"), "--run-dir",
                        str(run_dir), "--repeat", "0"]
    assert local.environment(case)["TRAINBENCH_CONTAINER_DIGEST"] == "sha256:12"


def test_meta_and_results_record_where_a_run_ran(tmp_path: Path) -> None:
    assert container_meta({}) is None
    seen = container_meta({"TRAINBENCH_CONTAINER_RUNTIME": "pyxis",
                           "TRAINBENCH_CONTAINER_IMAGE": "nvcr.io#x/y@sha256:feed",
                           "ENROOT_ROOTFS": "/tmp/r"})
    assert seen is not None and seen["digest"] == "sha256:feed"
    assert "ENROOT_ROOTFS=/tmp/r" in seen["seen"]
    assert placement({"site": "c1", "container": {"runtime": "podman", "image": "i",
                                                  "digest": "sha256:1"}}) == {
        "site": "c1", "container": "podman:i", "container_digest": "sha256:1"}
    assert placement({"site": None, "container": None}) == {}
    assert placement(None) == {}
