"""Oversubscription on the real local 2-node Slurm cluster (toolkit.localslurm): its nodes are
the CPUs of this one machine, so two jobs at once, or more ranks than the machine has CPUs,
measure contention. The cluster runs one job per node at a time; runs that still shared their
CPUs are flagged in runs.csv, summary.csv, every table of the report and the store; so is a
run on a node that another job shared (a cluster started with --shared-nodes)."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import (
    TINY,
    client_env,
    skip_without_local_slurm,
    slurm_submit,
)
from tests.integration.conftest_localslurm import run as _run
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster, free_port_base, start_cluster


@pytest.fixture()
def env(local_slurm: LocalCluster) -> dict[str, str]:
    return client_env(local_slurm)


def _state(env: dict[str, str], job: str, cwd: Path) -> str:
    p = _run(env, "squeue", "-h", "-j", job, "-o", "%T", cwd=cwd)
    return p.stdout.strip()


def test_the_local_cluster_runs_one_job_per_node_at_a_time(env: dict[str, str],
                                                            tmp_path: Path) -> None:
    # two jobs of one CPU each on node1 (it has at least 2): the second waits for the first
    jobs = []
    for _ in range(2):
        p = _run(env, "sbatch", "--parsable", "-w", "node1", "-n", "1", "-t", "2",
                 "--wrap", "sleep 20", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        jobs.append(p.stdout.strip().split(";")[0])
    try:
        deadline = time.monotonic() + 60
        while _state(env, jobs[0], tmp_path) != "RUNNING":
            assert time.monotonic() < deadline, "the first job never started"
            time.sleep(1)
        for _ in range(6):  # two scheduler passes: it would have started by now
            assert _state(env, jobs[1], tmp_path) == "PENDING"
            time.sleep(1.5)
    finally:
        _run(env, "scancel", *jobs, cwd=tmp_path)


def _runs_csv(res: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (res / "runs.csv").open() as fh:
        return {(r["case_id"], r["repeat"]): r for r in csv.DictReader(fh)}


def _spans(run: Path) -> list[tuple[float, float]]:
    out = []
    for f in run.glob("rank*.jsonl"):
        records = [json.loads(line) for line in f.read_text().splitlines()]
        out.append((records[0]["time_s"], records[-1]["time_s"]))
    return out


def test_two_jobs_at_once_on_the_same_cpus_are_flagged_everywhere(
        env: dict[str, str], tmp_path: Path) -> None:
    # one case, two repeats: two array tasks, one per node, started in one scheduler pass
    grid = tmp_path / "twice.yaml"
    grid.write_text("name: twice\nrepeats: 2\nbase:" + TINY.replace(
        "measured_iterations: 3", "measured_iterations: 20") + "  slurm: {time_min: 5}\n")
    res = tmp_path / "res"
    slurm_submit(env, grid, res, "--wait", cwd=tmp_path)
    case = "resnet50-torch-fp32-1n1g-bs4"
    (a,), (b,) = (_spans(res / "cases" / case / f"r{k}") for k in (0, 1))
    assert a[0] < b[1] and b[0] < a[1], f"the two jobs did not overlap: {a} {b}"

    store = tmp_path / "store.sqlite"
    p = _tb(env, "collect", str(res), "--store", str(store), "--no-plots", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = _runs_csv(res)
    host = json.loads((res / "cases" / case / "r0" / "rank000.jsonl").read_text()
                      .splitlines()[0])["host"]
    assert f"ran at the same time as {case} r1 on {host}" in runs[(case, "0")]["oversubscribed"]
    assert f"ran at the same time as {case} r0 on {host}" in runs[(case, "1")]["oversubscribed"]
    with (res / "summary.csv").open() as fh:
        (summary,) = csv.DictReader(fh)
    assert summary["runs_oversubscribed"] == "2"
    report = (res / "report.md").read_text()
    # the throughput of every table that shows it carries the mark, and a note says why
    assert "| 1 | 1 | 4 | " in report and " † |" in report
    assert "† oversubscribed: ranks shared their CPUs" in report
    assert "oversubscribed" in (res / "report.html").read_text()
    with sqlite3.connect(store) as db:
        stored = db.execute("SELECT executor, oversubscribed FROM runs").fetchall()
    assert len(stored) == 2
    assert all(executor == "slurm" and "ran at the same time as" in why
               for executor, why in stored)


def test_more_ranks_than_the_machine_has_cpus_are_flagged(
        env: dict[str, str], local_slurm: LocalCluster, tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    per_node = local_slurm.cpus_per_node  # the cluster says each node has this many
    if per_node > 4:
        pytest.skip(f"{2 * per_node} ranks are too many for a test on this machine")
    grid = tmp_path / "crowd.yaml"
    grid.write_text("name: crowd\nrepeats: 1\nbase:" + TINY +
                    f"  num_nodes: 2\n  gpus_per_node: {per_node}\n"
                    "  slurm: {time_min: 5}\n")
    res = tmp_path / "res"
    slurm_submit(env, grid, res, "--wait", cwd=tmp_path)
    p = _tb(env, "collect", str(res), "--no-store", "--no-plots", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    ((_, row),) = _runs_csv(res).items()
    assert row["status"] == "ok"
    # both simulated nodes are this machine: 2 x per_node ranks on its CPUs
    assert f"{2 * per_node} ranks on " in row["oversubscribed"]
    assert f"share {cpus} CPU(s)" in row["oversubscribed"]
    assert "oversubscribed" in p.stdout


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A one-node cluster started as `localslurm up --shared-nodes` does: jobs share nodes."""
    skip_without_local_slurm()
    cluster = start_cluster(tmp_path_factory.mktemp("shared"), nodes=1, cpus_per_node=2,
                            port_base=free_port_base(1, start=20817), shared_nodes=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_run_on_a_node_shared_with_another_job_is_flagged(shared: LocalCluster,
                                                            tmp_path: Path) -> None:
    env = client_env(shared)
    assert "OverSubscribe=EXCLUSIVE" not in shared.conf_path.read_text()
    p = _run(env, "sbatch", "--parsable", "-n", "1", "-t", "3", "--wrap", "sleep 170",
             cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    other = p.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while _state(env, other, tmp_path) != "RUNNING":
            assert time.monotonic() < deadline, "the other job never started"
            time.sleep(1)
        grid = tmp_path / "beside.yaml"
        grid.write_text("name: beside\nrepeats: 1\nbase:" + TINY + "  slurm: {time_min: 5}\n")
        res = tmp_path / "res"
        slurm_submit(env, grid, res, "--wait", cwd=tmp_path)
    finally:
        _run(env, "scancel", other, cwd=tmp_path)
    p = _tb(env, "collect", str(res), "--no-store", "--no-plots", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    ((_, row),) = _runs_csv(res).items()
    assert row["status"] == "ok"
    assert row["oversubscribed"] == f"its node(s) node1 ran other Slurm job(s) too: {other}"
