"""GPU nodes on one machine, on a machine without a GPU: a local cluster whose nodes own GPUs
as Slurm GRES, checked through Slurm itself.

This machine has no /dev/nvidia*, so the cluster is given a machine of four GPUs: the first four
of the recorded 8 x H100 `nvidia-smi -q` (tests/data/nvidia_smi/SOURCE.md), each pointed at a
stand-in device file the test makes under the cluster's own state directory with os.mknod: a
character device with NVIDIA's major number (195) and the GPU's minor number, as the driver
makes /dev/nvidiaN. No driver answers behind them (opening one fails) and nothing here opens
them: slurmd only reads their numbers (the device number for its device rules, the N of
`nvidiaN` for CUDA_VISIBLE_DEVICES). So what is checked is Slurm's own reading of the
configuration `up` writes: the GRES it reports per node (`scontrol show node`, `sinfo`), the
CUDA_VISIBLE_DEVICES it sets for a job's task on each node, the TaskProlog's word that a node's
GPUs are shared, `status`, a grid's GPU request (`submit --dry-run`), and the agent's
environment for a node; not a GPU computing.

Three nodes of two GPUs on four GPUs with --share-gpus: node1 owns 0,1, node2 2,3, and node3
takes turns with node1 on 0,1.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import client_env, skip_without_local_slurm
from toolkit.localslurm import LocalCluster, free_port_base, start_cluster
from toolkit.localslurm import gpus as gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_smi"
NVIDIA_MAJOR = 195


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    skip_without_local_slurm()
    state = Path(tempfile.mkdtemp(prefix="tbgpu-"))
    devices = state / "dev"
    devices.mkdir()
    machine = []
    for g in gpu.gpus_from_nvidia_smi((DATA / "h100_8gpu_535.161.08.txt").read_text())[:4]:
        path = devices / f"nvidia{g.minor}"
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, g.minor))
        machine.append(gpu.MachineGpu(g.index, g.minor, g.uuid, g.name, str(path)))
    c = start_cluster(state, nodes=3, cpus_per_node=2, gpus_per_node=2, share_gpus=True,
                      machine_gpus=machine, port_base=free_port_base(3, start=24817))
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(state)


def _run(cluster: LocalCluster, *argv: str) -> str:
    p = subprocess.run(list(argv), env=client_env(cluster), capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, f"{' '.join(argv)}: {p.stdout}{p.stderr}"
    return p.stdout


GRID = """name: gpus
repeats: 1
base:
  model: resnet50
  device: auto
  num_nodes: 2
  gpus_per_node: 2
  batch_size_per_device: 4
"""


def test_slurm_knows_each_nodes_gpus_and_gives_a_job_its_nodes(cluster: LocalCluster,
                                                              tmp_path: Path) -> None:
    for node in cluster.nodes:
        shown = _run(cluster, "scontrol", "show", "node", node)
        assert re.search(r"\bGres=gpu:2\b", shown), shown
        assert re.search(r"\bState=IDLE\b", shown), shown
    assert set(_run(cluster, "sinfo", "-h", "-N", "-o", "%N %G").split("\n")[:-1]) == {
        "node1 gpu:2", "node2 gpu:2", "node3 gpu:2"}

    def task_env(node: str, gres: str) -> tuple[str, str]:
        out = _run(cluster, "srun", "-N1", "-n1", "-w", node, f"--gres={gres}", "sh", "-c",
                   'echo "${CUDA_VISIBLE_DEVICES-unset}|${TRAINBENCH_GPUS_SHARED-}"')
        visible, _, shared = out.strip().partition("|")
        return visible, shared

    # the machine's numbers of the GPUs Slurm gave the task (Slurm numbers them by their place
    # among the node's, without cgroups; the TaskProlog puts the machine's in their place)
    assert task_env("node1", "gpu:2") == ("0,1", "node1 takes turns on GPU(s) 0,1 with node3 "
                                                 "(localslurm up --share-gpus)")
    assert task_env("node2", "gpu:2") == ("2,3", "")
    assert task_env("node2", "gpu:1")[0] == "2"
    assert task_env("node3", "gpu:1") == ("0", "node3 takes turns on GPU(s) 0,1 with node1 "
                                                "(localslurm up --share-gpus)")
    status = subprocess.run([sys.executable, "-m", "toolkit.localslurm", "status",
                             "--state-dir", str(cluster.state_dir)], env=client_env(cluster),
                            capture_output=True, text=True, timeout=120, check=False)
    assert status.returncode == 0, status.stdout + status.stderr
    assert re.search(r"node2 .* GPUs 2,3$", status.stdout, re.M), status.stdout
    assert re.search(r"node3 .* GPUs 0,1 \(shared with node1\)$", status.stdout, re.M)
    # a grid's gpus_per_node asks this cluster for its GRES, as it would a GPU cluster
    grid = tmp_path / "gpus.yaml"
    grid.write_text(GRID)
    plan = subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(grid),
                           "--results", str(tmp_path / "res"), "--executor", "slurm",
                           "--dry-run"], env=client_env(cluster), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    script = next((tmp_path / "res" / "cases").glob("*/submission.sh")).read_text()
    assert "#SBATCH --gpus-per-node=2" in script, script
    assert "sinfo shows GPU GRES" in plan.stdout, plan.stdout
    if cluster.network is not None:  # Open MPI's ssh agent enters node2 as ssh would
        from toolkit.localslurm.agent import agent_words

        words = agent_words(cluster.state_dir)
        assert words is not None
        env = {k: v for k, v in client_env(cluster).items() if k != "CUDA_VISIBLE_DEVICES"}
        out = subprocess.run([*words, "node2", 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"'],
                             env=env, capture_output=True, text=True, timeout=60, check=False)
        assert out.stdout.strip() == "node2 2,3", out.stdout + out.stderr
