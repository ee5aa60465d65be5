"""Sites and containers with the real tools: one grid on the local Slurm cluster under two site
profiles; the pyxis and Apptainer job scripts read by the real sbatch and run with stand-ins for
`srun --container-*` and `apptainer` that record their arguments; and CPU cases inside a real
podman container built here from Debian's packages, read back by collect."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import TINY, client_env, slurm_submit
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.launch.podman_image import DEFAULT_IMAGE, ImageError, build, host_python_mounts
from toolkit.launch.slurm import SlurmExecutor
from toolkit.localslurm import LocalCluster
from toolkit.report.tables import OVERSUBSCRIBED_MARK
from toolkit.results.layout import CaseDir
from toolkit.spec.grid import parse_grid
from toolkit.spec.site import find_site

CI = os.environ.get("CI") == "true"


def _grid(tmp_path: Path, body: str, name: str = "sites") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nrepeats: 1\nbase:" + TINY + body)
    return path


def _runs(results: Path) -> list[dict[str, str]]:
    with (results / "runs.csv").open() as f:
        return list(csv.DictReader(f))


def test_one_grid_on_two_sites_of_the_local_cluster(local_slurm: LocalCluster,
                                                    tmp_path: Path) -> None:
    """Same ids and hashes on both sites; each job in its site's partition with its
    launcher; the report names the site of every run."""
    env = client_env(local_slurm)
    grid = _grid(tmp_path, "  gpus_per_node: 2\n")
    cases = {}
    for site, partition, launcher in (("local", "debug", "srun --mpi=pmix"),
                                      ("local-mpirun", "urgent", "mpirun -np 2")):
        res = tmp_path / site
        slurm_submit(env, grid, res, "--site", site, "--wait", cwd=tmp_path)
        [case_dir] = (res / "cases").iterdir()
        case = json.loads((case_dir / "case.json").read_text())
        cases[site] = (case_dir.name, case["config_hash"] if "config_hash" in case else
                       json.loads((case_dir / "r0" / "meta.json").read_text())["config_hash"])
        script = (case_dir / "submission.sh").read_text()
        assert f"#SBATCH --partition={partition}" in script
        assert f"exec {launcher}" in script
        meta = json.loads((case_dir / "r0" / "meta.json").read_text())
        assert meta["site"] == site and meta["env"]["SLURM_JOB_PARTITION"] == partition
        p = _tb(env, "collect", str(res), "--no-plots", cwd=tmp_path)
        assert p.returncode == 0, p.stdout + p.stderr
        [run] = _runs(res)
        assert run["status"] == "ok" and run["site"] == site
        report = (res / "report.md").read_text()
        row = re.search(rf"\| 2 \| 4 \| [\d,.]+( {OVERSUBSCRIBED_MARK})? \| {site} \|", report)
        assert row, report
        # a figure carries the mark only where the run shared its CPUs or its host was crowded
        assert not row[1] or run.get("host_crowded") or run.get("oversubscribed"), run
    assert cases["local"] == cases["local-mpirun"]


# -- pyxis and Apptainer: the real sbatch parser, and stand-ins for the runtimes -------------

SBATCH_CONF = """ClusterName=nowhere
SlurmctldHost=nowhere(127.0.0.1)
SlurmctldPort=9
NodeName=n[1-2] CPUs=8 State=UNKNOWN
PartitionName=batch Nodes=n[1-2] Default=YES
"""


def _sbatch() -> str:
    found = shutil.which("sbatch")
    if found is None:
        if CI:
            pytest.fail("sbatch not found (the localslurm tests install slurm-wlm)")
        pytest.skip("sbatch not found")
    return found


def sbatch_reads(script: Path, tmp_path: Path) -> dict[str, str]:
    """What the real sbatch reads from `script` (`--test-only -vv` prints its options before
    it asks a controller, which here does not exist)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(SBATCH_CONF)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        done = subprocess.run([_sbatch(), "--test-only", "-vv", str(script)], env=env,
                              capture_output=True, text=True, timeout=8, check=False)
        err = done.stderr
    except subprocess.TimeoutExpired as e:  # still trying to reach the controller
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    assert "end of defined options" in err, err
    block = err.split("defined options", 1)[1].split("end of defined options", 1)[0]
    out = {}
    for line in block.splitlines():
        m = re.match(r"sbatch: (\S[\w-]*)\s+: (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


STAND_INS = {
    # pyxis: srun's --container-* options are recorded; the rank runs here, in the workdir
    # pyxis would give it (the host is the "image": container.python is this interpreter).
    "srun": r"""#!/bin/bash
printf '%s\n' "srun $*" >> "$STANDIN_LOG"
workdir=
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
  case "$1" in --container-workdir=*) workdir="${1#--container-workdir=}";; esac
  shift
done
cd "$workdir" && exec "$@"
""",
    # apptainer exec [options] IMAGE COMMAND...: recorded, then COMMAND runs in --pwd.
    "apptainer": r"""#!/bin/bash
printf '%s\n' "apptainer $*" >> "$STANDIN_LOG"
shift  # exec
pwd_=
while [ "${1#-}" != "$1" ]; do
  case "$1" in --pwd=*) pwd_="${1#--pwd=}";; esac
  shift
done
shift  # the image
export APPTAINER_CONTAINER=/stand-in.sif
cd "$pwd_" && exec "$@"
""",
}


@pytest.mark.parametrize(("site", "launcher", "ranks"), [("nvidia-pyxis-example", "srun", 1),
                                                         ("apptainer-example", "mpirun", 2)])
def test_container_scripts_pass_sbatch_and_run_with_stand_ins(site: str, launcher: str,
                                                              ranks: int,
                                                              tmp_path: Path) -> None:
    grid_text = ("name: boxed\nbase:" + TINY +
                 f"  gpus_per_node: {ranks}\n  slurm: {{launcher: {launcher}}}\n"
                 f"  container: {{python: {sys.executable}}}\n")
    [(cid, case)] = parse_grid(grid_text, source="boxed.yaml", site=find_site(site)).items()
    root = tmp_path / "res"
    cdir = CaseDir(root, cid)
    cdir.write_case(case)
    case_dir = cdir.path
    script = case_dir / "submission.sh"
    script.write_text(SlurmExecutor(python=sys.executable).script(case, cid,
                                                                   case_dir / "case.json"))

    read = sbatch_reads(script, tmp_path)
    site_slurm = find_site(site).slurm  # type: ignore[union-attr]
    assert read["partition"] == site_slurm["partition"]
    assert read["account"] == site_slurm["account"]
    assert read["job-name"] == cid and read["nodes"] == "1"
    assert "container" not in " ".join(read)  # pyxis options are srun's, not sbatch's

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in STAND_INS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "standin.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", STANDIN_LOG=str(log),
               # the site's modules: a `module` that loads nothing
               BASH_FUNC_module__="() { echo \"module $*\" >> \"$STANDIN_LOG\"; }")
    env["BASH_FUNC_module%%"] = env.pop("BASH_FUNC_module__")
    done = subprocess.run(["bash", str(script), "0"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr + (case_dir / "r0" /
                                                              "output.log").read_text()
    calls = log.read_text().splitlines()
    run_dir = case_dir / "r0"
    if "pyxis" in site:
        assert calls[0] == "module load nccl/2.21"
        [srun] = [c for c in calls if c.startswith("srun ")]
        words = shlex.split(srun)
        assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in words
        assert f"--container-workdir={run_dir}" in words
        assert "--container-env=NCCL_IB_HCA,NCCL_SOCKET_IFNAME" in words
        assert "--no-container-mount-home" in words
        mounts = next(w for w in words if w.startswith("--container-mounts="))
        assert f"{root}:{root}" in mounts
    else:
        runs = [shlex.split(c) for c in calls if c.startswith("apptainer ")]
        assert len(runs) == ranks  # one container per rank, started by mpirun
        for words in runs:
            assert words[1] == "exec" and "/shared/images/pytorch-24.05.sif" in words
            assert f"--pwd={run_dir}" in words and "--nv" not in words  # a CPU case
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["container"]["runtime"] == case.container.runtime
    assert meta["site"] == find_site(site).name  # type: ignore[union-attr]
    p = subprocess.run([sys.executable, "-m", "toolkit.collect", str(root), "--no-plots"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    [run] = _runs(root)
    assert run["status"] == "ok" and float(run["throughput_sps"]) > 0
    assert run["container"].startswith(case.container.runtime + ":")


# -- podman, for real ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def podman_image() -> str:
    """The Debian image of `python -m toolkit.container build` (built once; a minute or two,
    and apt-get of podman, mmdebstrap and runc when missing)."""
    if os.geteuid() != 0 and shutil.which("podman") is None:
        pytest.skip("podman is not installed and apt-get needs root")
    try:
        build(DEFAULT_IMAGE)
    except (ImageError, OSError, subprocess.CalledProcessError) as e:
        if CI:
            raise
        pytest.skip(f"cannot build the podman image: {e}")
    return DEFAULT_IMAGE


@pytest.mark.slow
def test_cpu_cases_run_inside_a_real_podman_container(podman_image: str,
                                                      tmp_path: Path) -> None:
    mounts = json.dumps(host_python_mounts())
    grid = _grid(tmp_path, f"  container: {{runtime: podman, image: {podman_image}, "
                           f"python: {sys.executable}, mounts: {mounts}}}\n"
                           "sweep:\n  gpus_per_node: [1, 2]\n", name="boxed")
    res = tmp_path / "res"
    env = {**os.environ, "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid),
                        "--results", str(res), "--executor", "local", "--site", "local"],
                       env=env, capture_output=True, text=True, timeout=900, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    digest = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}",
                             podman_image], capture_output=True, text=True,
                            check=True).stdout.strip()
    for ranks in (1, 2):
        run_dir = res / "cases" / f"resnet50-torch-fp32-1n{ranks}g-bs4" / "r0"
        status = json.loads((run_dir / "status.json").read_text())
        assert status["command"][:2] == ["podman", "run"]
        meta = json.loads((run_dir / "meta.json").read_text())
        # the ranks saw podman's marks, so they really ran inside
        assert "container=podman" in meta["container"]["seen"], meta["container"]
        assert meta["container"]["digest"] == digest
        assert meta["world"]["world_size"] == ranks
    # no container left behind
    left = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"],
                          capture_output=True, text=True, check=True).stdout
    assert "trainbench-" not in left
    p = subprocess.run([sys.executable, "-m", "toolkit.collect", str(res), "--no-plots"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = _runs(res)
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert {r["container"] for r in runs} == {f"podman:{podman_image}"}
    assert {r["site"] for r in runs} == {"local"}
