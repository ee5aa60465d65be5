"""`python -m topology` through `main([...])`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from topology.cli import main
from topology.model import format_cpu_list, parse_cpu_list
from topology.sources import read_numa_nodes

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "topo"
DGX1 = str(DATA / "dgx1_v100_seed.txt")


def test_table_from_saved_file(capsys) -> None:
    assert main(["--file", DGX1]) == 0
    out = capsys.readouterr().out
    assert "0-11,24-35" in out and "12-23,36-47" in out
    assert "mlx5_0" in out and "PIX" in out and "1,2,3,4" in out


def test_json_from_saved_file(capsys) -> None:
    assert main(["--file", DGX1, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "plan" not in data
    gpus = data["topology"]["gpus"]
    assert [g["cpus"] for g in gpus][:5] == ["0-11,24-35"] * 4 + ["12-23,36-47"]
    assert gpus[2]["nic_links"] == {"mlx5_0": "PIX"}
    assert gpus[0]["gpu_links"]["3"] == "NV2"
    assert gpus[0]["nvlink_peers"] == [1, 2, 3, 4]


def test_plan_json(capsys) -> None:
    assert main(["--file", DGX1, "--plan", "--ranks-per-node", "4", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert [p["cpus"] for p in plan] == ["0-2,24-26", "3-5,27-29", "6-8,30-32", "9-11,33-35"]
    assert [p["nic_link"] for p in plan] == ["NODE", "NODE", "PIX", "PIX"]
    assert plan[0]["env"] == {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1"}


def test_plan_table_defaults_to_one_rank_per_gpu(capsys) -> None:
    assert main(["--file", str(DATA / "constructed_8gpu_2socket_5nic.txt"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "Binding plan (8 local ranks)" in out
    assert "NCCL_IB_HCA==mlx5_1:1" in out and "84-95,180-191" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--file", "/nonexistent/topo.txt"], "cannot read topology from --file"),
        (["--file", __file__], "no `nvidia-smi topo -m` header"),
        (["--file", DGX1, "--plan", "--ranks-per-node", "9"], "ranks_per_node=9 but this node"),
        (["--file", DGX1, "--ranks-per-node", "2"], "--ranks-per-node needs --plan"),
    ],
)
def test_bad_input_exits_2_with_a_message(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="machine has nvidia-smi")
def test_no_gpu_machine_shows_its_cpus_and_numa_nodes(capsys) -> None:
    """The reason on stderr, and on stdout what the machine has: its usable CPUs and each NUMA
    node's CPUs (from sysfs)."""
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("no NVIDIA GPU found (NVML: ")
    assert "nvidia-smi: nvidia-smi not found on PATH)" in err
    cpus = frozenset(os.sched_getaffinity(0))
    assert f"{len(cpus)} usable CPUs ({format_cpu_list(cpus)})" in out
    numa = read_numa_nodes()
    assert f"{len(numa)} NUMA node(s)" in out
    for node, node_cpus in numa.items():
        assert re.search(rf"\b{node}\b.*\b{re.escape(format_cpu_list(node_cpus))}\b", out)
    # a plan needs GPUs
    assert main(["--plan"]) == 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="machine has nvidia-smi")
def test_json_on_a_machine_without_gpus_describes_it_and_exits_0() -> None:
    """`python -m topology --json` as a script runs it: valid JSON on stdout, exit 0, with
    zero GPUs, the reasons, and the CPUs and NUMA nodes the machine does have."""
    done = subprocess.run([sys.executable, "-m", "topology", "--json"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["topology"]["gpus"] == [] and data["topology"]["source"] == "none"
    assert isinstance(data["topology"]["nics"], list)
    assert set(data["problems"]) == {"NVML", "nvidia-smi"}
    assert "nvidia-smi not found on PATH" in data["problems"]["nvidia-smi"]
    assert parse_cpu_list(data["host"]["cpus"]) == frozenset(os.sched_getaffinity(0))
    numa = {int(n): parse_cpu_list(c) for n, c in data["host"]["numa_nodes"].items()}
    assert numa == read_numa_nodes()
    # a plan needs GPUs: that still fails, with the reason
    assert main(["--json", "--plan"]) == 1


def test_numa_nodes_come_from_sysfs(tmp_path: Path) -> None:
    for node, cpus in ((0, "0-3,8-11"), (1, "4-7,12-15")):
        d = tmp_path / "devices/system/node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    (tmp_path / "devices/system/node/possible").write_text("0-1\n")
    assert read_numa_nodes(str(tmp_path)) == {0: frozenset([*range(4), *range(8, 12)]),
                                              1: frozenset([*range(4, 8), *range(12, 16)])}
    assert read_numa_nodes(str(tmp_path / "absent")) == {}
