"""Pytest fixture: one local Slurm cluster (toolkit.localslurm) per test session.

Import it from a conftest.py (``from tests.integration.conftest_localslurm import local_slurm``)
and request ``local_slurm`` in Slurm tests; run clients with ``env=local_slurm.client_env()``.
Skips, rather than fails, where the cluster cannot exist: not root, or no Slurm and no apt-get.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from toolkit.localslurm import LocalCluster, free_port_base, start_cluster


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 2-node cluster, up for the whole session, stopped at its end."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root")
    if shutil.which("slurmctld", path="/usr/sbin:/usr/bin") is None and not shutil.which("apt-get"):
        pytest.skip("no Slurm and no apt-get to install it")
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
