"""`submit --hosts`: mpirun across named hosts over Open MPI's ssh launcher, without Slurm, on
the session's namespaced local cluster (after `localslurm env`, the launcher's agent enters a
node). A host that does not answer stops the submit before anything is written, and the next
submit runs the grid."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import TINY, client_env
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster

pytestmark = pytest.mark.integration

GRID = "name: hosts\nrepeats: 1\nbase:\n" + TINY + "sweep:\n  num_nodes: [1, 2]\n"


def hosts_env(cluster: LocalCluster) -> dict[str, str]:
    """The environment after `eval "$(python -m toolkit.localslurm env)"`."""
    env = client_env(cluster)
    p = _tb(env, "localslurm", "env", "--state-dir", str(cluster.state_dir), cwd=Path.cwd())
    assert p.returncode == 0, p.stderr
    for line in p.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0]
    assert env["OMPI_MCA_plm_rsh_agent"].split()[:3] == [sys.executable, "-m",
                                                         "toolkit.localslurm.agent"]
    return env


def test_a_grid_runs_across_the_named_hosts_and_an_unreachable_one_stops_it_whole(
        local_slurm: LocalCluster, tmp_path: Path) -> None:
    env = hosts_env(local_slurm)
    grid = tmp_path / "hosts.yaml"
    grid.write_text(GRID)
    results = tmp_path / "res"

    refused = _tb(env, "submit", "--grid", str(grid), "--results", str(results), "--hosts",
                  "node1,node9", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "hosts: cannot reach node9: " in refused.stderr
    assert "no such node in the local cluster" in refused.stderr
    assert not results.exists()

    # An image that sets Open MPI's launcher to start every rank on this machine (the lent GPU
    # machines' do) must not keep the ranks off the named hosts.
    done = _tb({**env, "OMPI_MCA_plm": "isolated"}, "submit", "--grid", str(grid), "--results",
               str(results), "--hosts", "node1,node2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 2 ok, 0 failed" in done.stdout
    run = results / "cases" / "resnet50-torch-fp32-2n1g-bs4" / "r0"
    status = json.loads((run / "status.json").read_text())
    assert status["executor"] == "hosts" and status["status"] == "ok"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["hosts"] == ["node1", "node2"]
    # each rank found its node's own interface to rank 0's node, as under Slurm
    assert meta["network"]["rank0_address"] == "node1"
    assert meta["network"]["interface"] not in (None, "lo")
    one = json.loads((results / "cases" / "resnet50-torch-fp32-1n1g-bs4" / "r0" /
                      "meta.json").read_text())
    assert one["hosts"] == ["node1"]
    # the script beside the case re-runs it the same way
    script = (run.parent / "run_local.sh").read_text()
    assert "--host node1:1,node2:1" in script and "--executor hosts" in script
