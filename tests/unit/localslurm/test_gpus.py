"""The local cluster's GPU nodes: which node owns which of the machine's GPUs, the slurm.conf
and gres.conf Slurm reads them from, the record and `status`, and what the ssh agent gives a
node's processes.

The machines are recorded `nvidia-smi -q` outputs (tests/data/nvidia_smi/SOURCE.md): the 8 x H100
dump, of which the first 4 or 2 GPUs stand for a machine of 4 or 2, the one-H200 machine of the
device tool, and an A100 whose one GPU has minor number 1 (its device file is /dev/nvidia1,
not /dev/nvidia0).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from toolkit.localslurm import agent, cli
from toolkit.localslurm import gpus as gpu
from toolkit.localslurm import network as net
from toolkit.localslurm.config import ClusterError, render_slurm_conf, render_task_prolog
from toolkit.localslurm.daemons import LocalCluster, _plan_gpus, load_cluster

DATA = Path(__file__).resolve().parents[2] / "data" / "nvidia_smi"


def machine(file: str, count: int | None = None) -> list[gpu.MachineGpu]:
    found = gpu.gpus_from_nvidia_smi((DATA / file).read_text())
    return found if count is None else found[:count]


H100 = "h100_8gpu_535.161.08.txt"
H200 = "h200_device_580.159.04.txt"
A100 = "a100_sxm4_mig_535.54.03.xml"


def gres_lines(plan: gpu.GpuPlan | None) -> list[str]:
    return [line for line in gpu.render_gres_conf(plan).splitlines()
            if not line.startswith("#")]


def node_lines(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line.startswith("NodeName=")]


def test_the_recorded_machines_give_index_minor_number_and_uuid() -> None:
    h100 = machine(H100)
    assert [(g.index, g.minor) for g in h100] == [(i, i) for i in range(8)]
    assert h100[0].uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert h100[0].name == "NVIDIA H100 80GB HBM3" and h100[0].device == "/dev/nvidia0"
    (h200,) = machine(H200)
    assert (h200.index, h200.minor, h200.device) == (0, 0, "/dev/nvidia0")
    (a100,) = machine(A100)
    assert (a100.index, a100.minor, a100.device) == (0, 1, "/dev/nvidia1")


@pytest.mark.parametrize("nodes,per_node,have,expected", [
    (2, 2, 4, [["/dev/nvidia0", "/dev/nvidia1"], ["/dev/nvidia2", "/dev/nvidia3"]]),
    (4, 1, 4, [["/dev/nvidia0"], ["/dev/nvidia1"], ["/dev/nvidia2"], ["/dev/nvidia3"]]),
    (2, 1, 2, [["/dev/nvidia0"], ["/dev/nvidia1"]]),
])
def test_node_k_owns_its_own_slice_of_the_gpus_as_gres(nodes: int, per_node: int, have: int,
                                                       expected: list[list[str]]) -> None:
    names = [f"node{k}" for k in range(1, nodes + 1)]
    plan = gpu.plan_gpus(names, per_node, machine(H100, have))
    assert plan is not None and not plan.shared
    assert gres_lines(plan) == [f"NodeName={n} Name=gpu File={f}"
                                for n, files in zip(names, expected, strict=True) for f in files]
    conf = render_slurm_conf(Path("/s"), "vm", nodes, 4, gres_per_node=per_node)
    assert "GresTypes=gpu" in conf.splitlines()
    assert all(f" Gres=gpu:{per_node} " in line for line in node_lines(conf))
    assert [n.indices for n in plan.nodes] == [
        list(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]


def test_without_gpus_slurm_conf_names_no_gres() -> None:
    conf = render_slurm_conf(Path("/s"), "vm", 2, 4)
    assert "Gres" not in conf
    assert gpu.plan_gpus(["node1", "node2"], 0, machine(H100)) is None
    assert gres_lines(None) == []


def test_gres_conf_names_the_device_file_by_minor_number_not_index() -> None:
    plan = gpu.plan_gpus(["node1"], 1, machine(A100))
    assert gres_lines(plan) == ["NodeName=node1 Name=gpu File=/dev/nvidia1"]


def test_more_gpus_than_the_machine_has_is_an_error_naming_the_options() -> None:
    with pytest.raises(ClusterError) as err:
        gpu.plan_gpus(["node1", "node2"], 1, machine(H200))
    text = str(err.value)
    assert "--nodes 2 x --gpus-per-node 1 = 2 GPUs, but this machine has 1 " \
           "(0: NVIDIA H200)" in text
    assert "--share-gpus" in text
    with pytest.raises(ClusterError, match=r"--gpus-per-node 2: this machine has 1 GPU\(s\)"):
        gpu.plan_gpus(["node1"], 2, machine(H200), share=True)
    with pytest.raises(ClusterError, match="--gpus-per-node must be 0 or more, got -1"):
        gpu.plan_gpus(["node1"], -1, machine(H200))
    with pytest.raises(ClusterError, match="--share-gpus needs --gpus-per-node"):
        gpu.plan_gpus(["node1"], 0, machine(H200), share=True)
    with pytest.raises(ClusterError, match=r"--gpus-per-node 1: this machine has no NVIDIA GPU "
                                           r"\(NVML: no driver\)"):
        gpu.plan_gpus(["node1"], 1, [], why_none="NVML: no driver")


def test_share_gpus_lets_nodes_take_turns_and_says_so() -> None:
    plan = gpu.plan_gpus(["node1", "node2"], 1, machine(H200), share=True)
    assert plan is not None and plan.shared
    assert gres_lines(plan) == ["NodeName=node1 Name=gpu File=/dev/nvidia0",
                                "NodeName=node2 Name=gpu File=/dev/nvidia0"]
    assert [n.shared_with for n in plan.nodes] == [("node2",), ("node1",)]
    assert gpu.describe(plan.node("node2")) == "GPU 0 (shared with node1)"
    assert task_exports(gpu.node_gpus_file(plan.node("node1")), "0") == [
        "export CUDA_VISIBLE_DEVICES=0", "export CUDA_DEVICE_ORDER=PCI_BUS_ID",
        "export TRAINBENCH_GPUS_SHARED=node1 takes turns on GPU(s) 0 with node2 "
        "(localslurm up --share-gpus)"]
    # three nodes of one GPU each on two GPUs: node2 has GPU 1 to itself
    three = gpu.plan_gpus(["node1", "node2", "node3"], 1, machine(H100, 2), share=True)
    assert three is not None
    assert [(n.indices, n.shared_with) for n in three.nodes] == [
        ([0], ("node3",)), ([1], ()), ([0], ("node1",))]
    assert task_exports(gpu.node_gpus_file(three.node("node2")), "0") == [
        "export CUDA_VISIBLE_DEVICES=1", "export CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    # enough GPUs: --share-gpus changes nothing
    four = gpu.plan_gpus(["node1", "node2"], 2, machine(H100, 4), share=True)
    assert four is not None and not four.shared


def test_the_task_prolog_runs_the_nodes_gpu_file() -> None:
    prolog = render_task_prolog(Path("/s"))
    assert 'sh "/s/node-gpus/$SLURMD_NODENAME"' in prolog


def test_up_asks_the_machine_only_when_gpus_are_asked_for(monkeypatch) -> None:
    def no_machine() -> list[gpu.MachineGpu]:
        raise gpu.NoGpus("NVML: NVMLError_LibraryNotFound; nvidia-smi -q: not found")

    monkeypatch.setattr(gpu, "read_machine_gpus", no_machine)
    assert _plan_gpus(["node1"], 0, False, None) is None
    with pytest.raises(ClusterError, match=r"no NVIDIA GPU \(NVML: NVMLError_LibraryNotFound"):
        _plan_gpus(["node1"], 1, False, None)


def _recorded(tmp_path: Path, plan: gpu.GpuPlan | None) -> LocalCluster:
    names = ["node1", "node2"]
    cluster = LocalCluster(state_dir=tmp_path, nodes=names, cpus_per_node=1, port_base=17817,
                           daemons=[], started_at=time.time(),
                           network=net.plan_network(17817, names, "10.217.3.0/24", [], mark="m"),
                           gpus=plan)
    cluster.save()
    return cluster


def test_the_record_keeps_each_nodes_gpus(tmp_path: Path) -> None:
    plan = gpu.plan_gpus(["node1", "node2"], 2, machine(H100, 4))
    _recorded(tmp_path, plan)
    loaded = load_cluster(tmp_path)
    assert loaded is not None and loaded.gpus == plan
    assert loaded.gpus.node("node2").gpus[1].uuid == "GPU-afe9f2ed-9dd0-572c-3cd8-b42b58b3bc99"
    _recorded(tmp_path, None)
    again = load_cluster(tmp_path)
    assert again is not None and again.gpus is None


def test_status_shows_each_nodes_gpus(tmp_path: Path, monkeypatch, capsys) -> None:
    _recorded(tmp_path, gpu.plan_gpus(["node1", "node2"], 1, machine(H200), share=True))
    monkeypatch.setattr(LocalCluster, "alive", lambda self: [])
    assert cli.main(["status", "--state-dir", str(tmp_path)]) == 1  # no daemon runs
    monkeypatch.setattr(LocalCluster, "alive", lambda self: [
        type("D", (), {"name": "slurmctld"})()])
    monkeypatch.setattr(LocalCluster, "node_states",
                        lambda self: {"node1": "idle", "node2": "idle"})
    cli.main(["status", "--state-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "GPU 0 (shared with node2)" in out and "GPU 0 (shared with node1)" in out


def test_the_agent_gives_a_nodes_processes_only_its_gpus(tmp_path: Path) -> None:
    _recorded(tmp_path, gpu.plan_gpus(["node1", "node2"], 2, machine(H100, 4)))
    argv = agent.node_argv(tmp_path, "node2", ["orted", "-mca", "x"], environ={})
    at = argv.index("env")
    assert argv[at:] == ["env", "CUDA_VISIBLE_DEVICES=2,3", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                         "sh", "-c", "orted -mca x"]
    # the caller's own order is kept; its own GPU list is checked, not overridden
    argv = agent.node_argv(tmp_path, "node1", ["true"],
                           environ={"CUDA_DEVICE_ORDER": "FASTEST_FIRST",
                                    "CUDA_VISIBLE_DEVICES": "0,1"})
    assert argv[argv.index("env"):] == ["env", "CUDA_VISIBLE_DEVICES=0,1", "sh", "-c", "true"]
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES=0 is set where mpirun runs, but "
                                         r"node2 owns GPU\(s\) 2,3"):
        agent.node_argv(tmp_path, "node2", ["true"], environ={"CUDA_VISIBLE_DEVICES": "0"})


def test_the_agent_refuses_a_launch_that_names_other_gpus_as_ssh_fails(
        tmp_path: Path, monkeypatch, capsys) -> None:
    _recorded(tmp_path, gpu.plan_gpus(["node1", "node2"], 1, machine(H100, 2)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert agent.main(["--state-dir", str(tmp_path), "node2", "true"]) == agent.UNREACHABLE
    assert "node2 owns GPU(s) 1" in capsys.readouterr().err


def test_shared_gpus_tell_the_agents_processes_why(tmp_path: Path) -> None:
    _recorded(tmp_path, gpu.plan_gpus(["node1", "node2"], 1, machine(H200), share=True))
    argv = agent.node_argv(tmp_path, "node2", ["true"], environ={})
    assert "TRAINBENCH_GPUS_SHARED=node2 takes turns on GPU(s) 0 with node1 " \
           "(localslurm up --share-gpus)" in argv
    assert "CUDA_VISIBLE_DEVICES=0" in argv


def test_a_cluster_without_gpus_leaves_the_agents_environment_alone(tmp_path: Path) -> None:
    _recorded(tmp_path, None)
    argv = agent.node_argv(tmp_path, "node1", ["true"], environ={"CUDA_VISIBLE_DEVICES": "5"})
    assert "env" not in argv and argv[-3:] == ["sh", "-c", "true"]


def test_up_writes_gres_conf_and_each_shared_nodes_file(tmp_path: Path) -> None:
    from toolkit.localslurm.daemons import _write_gpu_files

    (tmp_path / "node-gpus").mkdir()
    (tmp_path / "node-gpus" / "node9").write_text("export TRAINBENCH_GPUS_SHARED=old\n")
    _write_gpu_files(tmp_path, gpu.plan_gpus(["node1", "node2"], 1, machine(H200), share=True))
    assert (tmp_path / "gres.conf").read_text().splitlines()[-1] == \
        "NodeName=node2 Name=gpu File=/dev/nvidia0"
    assert sorted(p.name for p in (tmp_path / "node-gpus").iterdir()) == ["node1", "node2"]
    _write_gpu_files(tmp_path, None)
    assert list((tmp_path / "node-gpus").iterdir()) == []
    assert "NodeName" not in (tmp_path / "gres.conf").read_text()
    (tmp_path / "node-gpus").rmdir()
    (tmp_path / "node-gpus").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ClusterError, match="is a symbolic link"):
        _write_gpu_files(tmp_path, None)


def test_submit_hosts_names_the_node_whose_gpus_the_launch_would_override(
        tmp_path: Path, monkeypatch) -> None:
    """`submit --hosts` asks every host through the agent before anything is written: the
    refusal reaches it as the host's reason."""
    from toolkit.launch.hosts import Host, unreachable

    _recorded(tmp_path, gpu.plan_gpus(["node1", "node2"], 1, machine(H100, 2)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    words = agent.agent_words(tmp_path)
    assert words is not None
    (why,) = unreachable([Host("node2")], words)
    assert why.startswith("node2: ") and "exited 255" in why
    assert "CUDA_VISIBLE_DEVICES=0 is set where mpirun runs, but node2 owns GPU(s) 1" in why


@pytest.mark.skipif(os.geteuid() != 0, reason="up refuses everyone but root first")
def test_shared_gpus_need_nodes_with_names_of_their_own(tmp_path: Path) -> None:
    """Refused before anything is made: NCCL would refuse the ranks later, less clearly."""
    from toolkit.localslurm.daemons import start_cluster

    with pytest.raises(ClusterError, match="--share-gpus needs nodes on their own network "
                                           r"\(not --network loopback\): NCCL refuses"):
        start_cluster(tmp_path / "s", nodes=2, gpus_per_node=1, share_gpus=True,
                      machine_gpus=machine(H200), network="loopback")
    assert not (tmp_path / "s").exists()


def test_the_machine_is_asked_through_nvml_then_nvidia_smi(monkeypatch) -> None:
    import subprocess

    def no_nvml() -> list[gpu.MachineGpu]:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gpu, "_nvml_gpus", no_nvml)
    dump = (DATA / H100).read_text()
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 0, dump if argv == ["nvidia-smi", "-q"] else "", ""))
    assert [g.minor for g in gpu.read_machine_gpus()] == list(range(8))

    def not_there(argv, **kw):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    monkeypatch.setattr(subprocess, "run", not_there)
    with pytest.raises(gpu.NoGpus, match="NVML: RuntimeError: NVML Shared Library Not Found; "
                                         r"nvidia-smi -q: .*No such file"):
        gpu.read_machine_gpus()


def task_exports(script: str, slurm_visible: str | None,
                 order: str | None = None) -> list[str]:
    """What the TaskProlog prints for a task of the node whose `node-gpus` file is `script`,
    where Slurm set CUDA_VISIBLE_DEVICES to `slurm_visible` (None: the task asked no GPU)."""
    import subprocess

    env = {"PATH": "/usr/bin:/bin"}
    if slurm_visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = slurm_visible
    if order is not None:
        env["CUDA_DEVICE_ORDER"] = order
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.splitlines()


def test_a_task_gets_the_machines_numbers_of_the_gpus_slurm_gave_it() -> None:
    # Slurm without cgroups numbers a node's GPUs by their place among the node's: node2 of
    # 2 x 2 on four GPUs owns GPUs 2 and 3, which Slurm gives as 0 and 1
    plan = gpu.plan_gpus(["node1", "node2"], 2, machine(H100, 4))
    assert plan is not None
    node2 = gpu.node_gpus_file(plan.node("node2"))
    assert task_exports(node2, "0,1") == ["export CUDA_VISIBLE_DEVICES=2,3",
                                          "export CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert task_exports(node2, "1")[0] == "export CUDA_VISIBLE_DEVICES=3"
    # a task that asked for no GPU gets none named; a task's own device order is kept
    assert task_exports(node2, None) == ["export CUDA_DEVICE_ORDER=PCI_BUS_ID"]
    assert task_exports(node2, "0", order="FASTEST_FIRST") == [
        "export CUDA_VISIBLE_DEVICES=2"]
