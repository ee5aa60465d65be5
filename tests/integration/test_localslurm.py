"""The local Slurm cluster (toolkit.localslurm) against real daemons, jobs and MPI.

Boots its own 2-node cluster in a temporary state dir for this module (not the shared session
fixture, because the last test stops it), and proves: both nodes idle, srun spreads over both,
sbatch --wait writes its output, mpirun in a 2-node allocation and srun --mpi=pmix give one MPI
world spread over node1 and node2, the CLI answers, and down leaves none of the started daemons.
Tests run in file order; the last one takes the cluster down.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit import localslurm
from toolkit.launch.launcher import launcher_environment
from toolkit.localslurm import LocalCluster, free_port_base, start_cluster
from toolkit.localslurm import cli as localslurm_cli
from toolkit.spec import Case

pytestmark = pytest.mark.integration

NODES = ["node1", "node2"]

# One JSON file per rank; the allgather of large buffers goes through Open MPI's byte transfer
# layer, where a shared-memory clash between the two local "nodes" used to crash (see
# localslurm.config.render_task_prolog).
MPI_PROBE = textwrap.dedent(
    """
    import json, os, sys
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    blobs = comm.allgather(bytes([comm.rank]) * 2_000_000)
    ok = all(b == bytes([r]) * 2_000_000 for r, b in enumerate(blobs))
    record = {
        "rank": comm.rank,
        "size": comm.size,
        "node": os.environ.get("SLURMD_NODENAME"),
        "sum": comm.allreduce(comm.rank + 1),
        "ok": ok,
    }
    # One file per rank: ranks' stdout lines can interleave in a shared output file.
    with open(os.path.join(sys.argv[1], f"rank{comm.rank}.json"), "w") as f:
        json.dump(record, f)
    """
)

# node1's second task (SLURM_NODEID 0, SLURM_LOCALID 1) starts MPI_Init argv[1] s late
LATE_PROBE = textwrap.dedent(
    """
    import os, sys, time
    if os.environ["SLURM_NODEID"] == "0" and os.environ["SLURM_LOCALID"] == "1":
        time.sleep(float(sys.argv[1]))
    from mpi4py import MPI
    assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.size
    """
)

needs_mpi4py = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None, reason="mpi4py is not installed"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root")
    found = start_cluster(
        tmp_path_factory.mktemp("lslurm"),
        nodes=2,
        cpus_per_node=max(2, os.cpu_count() or 1),
        port_base=free_port_base(2, start=19817),
    )
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("probe") / "mpi_probe.py"
    path.write_text(MPI_PROBE)
    return path


def run(cluster: LocalCluster, argv: list[str], cwd: Path | None = None, timeout_s: float = 120):
    result = subprocess.run(
        argv,
        env=cluster.client_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert result.returncode == 0, (
        f"{argv} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result


def rank_records(out_dir: Path) -> list[dict]:
    records = [json.loads(p.read_text()) for p in out_dir.glob("rank*.json")]
    return sorted(records, key=lambda r: r["rank"])


def assert_world(records: list[dict], size: int, nodes: list[str]) -> None:
    assert [r["rank"] for r in records] == list(range(size)), records
    assert {r["size"] for r in records} == {size}, records
    assert sorted({r["node"] for r in records}) == nodes, records
    assert {r["sum"] for r in records} == {size * (size + 1) // 2}, records
    assert all(r["ok"] for r in records), records


def test_sinfo_shows_two_idle_nodes(cluster: LocalCluster) -> None:
    out = run(cluster, ["sinfo", "-h", "-N", "-o", "%N %T %P"]).stdout
    assert localslurm.parse_sinfo_nodes(out) == {"node1": "idle", "node2": "idle"}
    assert "debug" in out
    assert cluster.up_s < 60


def test_the_pmix_plugin_runs_its_fences_as_a_ring(cluster: LocalCluster) -> None:
    # the tree fence waits for no other node on a step of fewer nodes than TreeWidth
    out = run(cluster, ["scontrol", "show", "config"]).stdout
    assert re.search(r"^PMIxCollFence\s*=\s*ring$", out, re.MULTILINE), out


def test_srun_runs_one_task_on_each_node(cluster: LocalCluster) -> None:
    out = run(
        cluster,
        ["srun", "-N2", "-n2", "bash", "-c", 'echo "$SLURM_NODEID $SLURMD_NODENAME $SLURM_PROCID"'],
    ).stdout
    lines = sorted(line.split() for line in out.splitlines())
    assert [line[:2] for line in lines] == [["0", "node1"], ["1", "node2"]], out
    assert sorted(line[2] for line in lines) == ["0", "1"]


def test_sbatch_wait_writes_output(cluster: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "hello.sh"
    script.write_text('#!/bin/bash\necho "hello from $SLURMD_NODENAME job $SLURM_JOB_ID"\n')
    out_file = tmp_path / "hello.out"
    run(cluster, ["sbatch", "--wait", "-o", str(out_file), str(script)], cwd=tmp_path)
    assert out_file.read_text().startswith("hello from node1 job ")


@needs_mpi4py
def test_mpirun_in_two_node_allocation(cluster: LocalCluster, probe: Path, tmp_path: Path) -> None:
    # 2 ranks per node: also covers ranks that have a local peer (the shared-memory case).
    script = tmp_path / "mpi.sh"
    script.write_text(
        "#!/bin/bash\n"
        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
        "echo nodelist=$SLURM_JOB_NODELIST\n"
        # Open MPI reads the allocation and starts its daemons on both nodes through srun.
        f"mpirun -n 4 {sys.executable} {probe} {tmp_path}\n"
    )
    out_file = tmp_path / "mpi.out"
    run(
        cluster,
        ["sbatch", "--wait", "-N2", "--ntasks-per-node=2", "-o", str(out_file), str(script)],
        cwd=tmp_path,
    )
    text = out_file.read_text()
    assert "nodelist=node[1-2]" in text
    records = rank_records(tmp_path)
    assert_world(records, 4, NODES)
    assert [r["node"] for r in records] == ["node1", "node1", "node2", "node2"]


@needs_mpi4py
def test_srun_pmix_one_node(cluster: LocalCluster, probe: Path, tmp_path: Path) -> None:
    run(cluster, ["srun", "--mpi=pmix", "-N1", "-n2", sys.executable, str(probe), str(tmp_path)])
    records = rank_records(tmp_path)
    assert_world(records, 2, [records[0]["node"]])


@needs_mpi4py
def test_srun_pmix_across_two_nodes(cluster: LocalCluster, probe: Path, tmp_path: Path) -> None:
    # Works only because each node has its own TmpFS (PMIx client dir) in the local slurm.conf.
    run(cluster, ["srun", "--mpi=pmix", "-N2", "-n4", sys.executable, str(probe), str(tmp_path)])
    assert_world(rank_records(tmp_path), 4, NODES)


@needs_mpi4py
def test_a_late_rank_starts_with_the_toolkits_pmix_fence_and_dies_with_the_tree(
        cluster: LocalCluster, tmp_path: Path) -> None:
    # node1's second rank enters MPI_Init 3 s after the others: a fence that is no barrier
    # across nodes lets node2's ranks send to node1's first rank while it still waits in it
    probe = tmp_path / "late.py"
    probe.write_text(LATE_PROBE)
    argv = ["srun", "--mpi=pmix", "-N2", "-n4", "--kill-on-bad-exit=1", sys.executable,
            str(probe), "3"]
    fence = launcher_environment(Case(device="cpu", num_nodes=2), "srun")
    assert fence == {"SLURM_PMIX_FENCE": "ring"}

    def step(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**cluster.client_env(), **env}, capture_output=True,
                              text=True, timeout=120, check=False)

    started = step(fence)
    assert started.returncode == 0, started.stdout + started.stderr
    # the control: the variable wins over the cluster's mpi.conf, and with the tree the rank dies
    tree = step({"SLURM_PMIX_FENCE": "tree"})
    assert tree.returncode != 0 and "srun: error: node1: task 0: Segmentation fault" in \
        tree.stderr, tree.stdout + tree.stderr
    # the killed step's nodes are idle again before the next test reads them
    deadline = time.monotonic() + 60
    while localslurm.parse_sinfo_nodes(run(cluster, ["sinfo", "-h", "-N", "-o", "%N %T %P"])
                                       .stdout) != {"node1": "idle", "node2": "idle"}:
        assert time.monotonic() < deadline, "nodes not idle 60 s after the step"
        time.sleep(0.5)


def test_cli_status_env_and_idempotent_up(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["--state-dir", str(cluster.state_dir)]
    assert localslurm_cli.main(["status", *state]) == 0
    out = capsys.readouterr().out
    assert "node1            idle" in out and "node2            idle" in out
    assert f"SLURM_CONF={cluster.conf_path}" in out

    assert localslurm_cli.main(["env", *state]) == 0
    conf, agent = capsys.readouterr().out.strip().splitlines()
    assert conf == f"export SLURM_CONF={cluster.conf_path}"
    # Open MPI's ssh launcher reaches the nodes through the agent (submit --hosts)
    assert agent == (f"export OMPI_MCA_plm_rsh_agent='{sys.executable} -m "
                     f"toolkit.localslurm.agent --state-dir {cluster.state_dir}'")

    pids = [d.pid for d in cluster.daemons]
    assert localslurm_cli.main(["up", *state]) == 0
    assert "already up" in capsys.readouterr().out
    reloaded = localslurm.load_cluster(cluster.state_dir)
    assert reloaded is not None and [d.pid for d in reloaded.daemons] == pids

    # A different node count on a running cluster is refused, not silently ignored.
    assert localslurm_cli.main(["up", "--nodes", "3", *state]) == 1
    assert "run down first" in capsys.readouterr().err


def test_down_stops_every_started_daemon(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    started = list(cluster.daemons)
    assert {d.name for d in started} >= {"slurmctld", "slurmd-node1", "slurmd-node2"}
    assert all(d.alive() for d in started)
    state = ["--state-dir", str(cluster.state_dir)]
    assert localslurm_cli.main(["down", *state]) == 0
    capsys.readouterr()
    cluster.stop()  # reaps our own children (the CLI can only signal them)
    for daemon in started:
        assert not daemon.alive(), daemon
        # Independently: gone, a zombie, or another process that reused the pid.
        stat = localslurm.processes.proc_stat(daemon.pid)
        assert stat is None or stat[0] == "Z" or stat[1] != daemon.start_ticks, (daemon, stat)
    assert localslurm_cli.main(["status", *state]) == 1
