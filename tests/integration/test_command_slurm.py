"""A user's own DDP script (`model: command`) on the real local 2-node Slurm cluster
(toolkit.localslurm): srun --mpi=pmix starts one worker per rank on two Slurm nodes, each runs
the unmodified script with torchrun's environment (gloo over the nodes), with the preflight
before it, and its Megatron-style log lands in the same tables as built-in cases."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import client_env, slurm_submit
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "command_scripts"


@pytest.fixture()
def env(local_slurm: LocalCluster) -> dict[str, str]:
    return client_env(local_slurm)


def test_ddp_script_on_two_slurm_nodes(env: dict[str, str], tmp_path: Path) -> None:
    for script in ("train_tiny.py", "own_workers.py"):
        shutil.copy(SCRIPTS / script, tmp_path)
    grid = tmp_path / "own.yaml"
    grid.write_text("""
name: own
base:
  model: command
  batch_size_per_device: 8
  warmup_iterations: 3
  measured_iterations: 6
  telemetry_interval_ms: 0
  command:
    name: tiny
    argv: ["{python}", train_tiny.py, --batch-size, "{batch_size_per_device}",
           --iters, "{total_iterations}", --log-style, megatron]
zip:
  - {num_nodes: [1, 2, 1], gpus_per_node: [1, 1, 2],
     preflight: [{enabled: false}, {enabled: true}, {enabled: false}],
     slurm: [{time_min: 5}, {time_min: 5}, {time_min: 5, launcher: mpirun}]}
""")
    # a program that starts its own 2 workers on each of the 2 nodes (srun: one task a node)
    per_node = tmp_path / "per_node.yaml"
    per_node.write_text("""
name: per_node
base:
  model: command
  num_nodes: 2
  gpus_per_node: 2
  batch_size_per_device: 4
  warmup_iterations: 3
  measured_iterations: 6
  telemetry_interval_ms: 0
  slurm: {time_min: 5}
  command: {name: own_workers, launch: per_node,
            argv: ["{python}", own_workers.py, "{total_iterations}",
                   "{batch_size_per_device}"]}
""")
    res = tmp_path / "res"
    p = slurm_submit(env, grid, res, "--wait", cwd=tmp_path)
    assert "submitted 3 job(s), 3 run(s)" in p.stdout, p.stdout
    two = res / "cases" / "tiny-torch-fp32-2n1g-bs8" / "r0"
    status = json.loads((two / "status.json").read_text())
    assert status["status"] == "ok" and status["executor"] == "slurm", status
    starts = [json.loads(f.read_text().splitlines()[0]) for f in sorted(two.glob("rank*.jsonl"))]
    assert [(s["rank"], s["world_size"], s["node_index"]) for s in starts] == [(0, 2, 0),
                                                                              (1, 2, 1)]
    # the script saw torchrun's environment on each Slurm node
    assert "rank 1/2 local_rank 0 master " in (two / "program-rank001.log").read_text()
    assert list((res / "cases" / "tiny-torch-fp32-2n1g-bs8" / "preflight").glob("*/rank*"))

    res2 = tmp_path / "res2"
    slurm_submit(env, per_node, res2, "--wait", cwd=tmp_path)
    p = _tb(env, "collect", str(res2), "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    with (res2 / "runs.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["status"] == "ok" and row["global_batch_size"] == "16", row["error"]
    run2 = res2 / "cases" / row["case_id"] / "r0"
    assert sorted(f.name for f in run2.glob("rank*.jsonl")) == ["rank000.jsonl", "rank001.jsonl"]
    assert "node 1/2: starting 2 workers" in (run2 / "program-rank001.log").read_text()

    p = _tb(env, "collect", str(res), "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    with (res / "runs.csv").open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    assert {r["status"] for r in rows.values()} == {"ok"}, {
        k: r["error"] for k, r in rows.items()}
    assert {r["measured_by"] for r in rows.values()} == {"log:megatron"}
    with (res / "summary.csv").open() as fh:
        summary = {(r["num_nodes"], r["gpus_per_node"]): r for r in csv.DictReader(fh)}
    assert summary[("2", "1")]["speedup"] and summary[("1", "2")]["speedup"]
