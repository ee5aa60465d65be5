"""Pytest fixture: one local Slurm cluster (toolkit.localslurm) per test session.

Import it from a conftest.py (``from tests.integration.conftest_localslurm import local_slurm``)
and request ``local_slurm`` in Slurm tests; run clients with ``env=local_slurm.client_env()``.
Skips, rather than fails, where the cluster cannot exist: not root, or no Slurm and no apt-get.

Also what every Slurm test module uses: `skip_without_local_slurm`, a tiny CPU case (`TINY`),
client environments and the toolkit's CLI run as a subprocess (`run`, `tb`), and the job
records of a results directory (`jobs`, `submits`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.localslurm import LocalCluster, free_port_base, start_cluster

#: A resnet50 case of a few tenths of a second per iteration on a 2-core machine.
TINY = """
  model: resnet50
  device: cpu
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 3
  cpu_threads: 1
  telemetry_interval_ms: 0
  model_config: {image_size: 32, num_classes: 10, resnet_layers: [1, 1, 1, 1]}
"""


def skip_without_local_slurm() -> None:
    """Skip where no local cluster can exist: not root, or no Slurm and no apt-get."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root")
    if shutil.which("slurmctld", path="/usr/sbin:/usr/bin") is None and not shutil.which("apt-get"):
        pytest.skip("no Slurm and no apt-get to install it")


def client_env(cluster: LocalCluster, columns: int = 200) -> dict[str, str]:
    """This process's environment with the cluster's SLURM_CONF; wide tables for asserts."""
    e = dict(os.environ)
    e.update(cluster.client_env())
    e["COLUMNS"] = str(columns)
    return e


def run(env: dict[str, str], *argv: str, cwd: Path, timeout: float = 600,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def tb(env: dict[str, str], module: str, *args: str, cwd: Path, timeout: float = 600,
       ) -> subprocess.CompletedProcess[str]:
    """`python -m toolkit.<module> ARGS` as a user runs it."""
    return run(env, sys.executable, "-m", f"toolkit.{module}", *args, cwd=cwd, timeout=timeout)


def slurm_submit(env: dict[str, str], grid: Path, results: Path, *args: str, cwd: Path,
                 timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m toolkit.submit --executor slurm` of `grid` into `results`, which must exit 0."""
    p = tb(env, "submit", "--grid", str(grid), "--results", str(results), "--executor", "slurm",
           *args, cwd=cwd, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def jobs(results: Path) -> list[dict]:
    """Every record of results/slurm/jobs.jsonl."""
    path = results / "slurm" / "jobs.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def submits(results: Path) -> list[dict]:
    """The submit records (one per sbatch call) of results/slurm/jobs.jsonl."""
    return [r for r in jobs(results) if r.get("type") == "submit"]


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 2-node cluster, up for the whole session, stopped at its end."""
    skip_without_local_slurm()
    nodes = 2
    cluster = start_cluster(
        tmp_path_factory.mktemp("slurm"),
        nodes=nodes,
        # At least 2 CPUs per node, so 2 ranks per node fit on small machines.
        cpus_per_node=max(2, os.cpu_count() or 1),
        # Not the default ports: a cluster from `localslurm up` may be running beside the tests.
        port_base=free_port_base(nodes, start=18817),
    )
    try:
        yield cluster
    finally:
        cluster.stop()
