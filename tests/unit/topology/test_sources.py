"""Sources: combining nvidia-smi, NVML and sysfs; behaviour on a machine without GPUs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from topology.model import Link, LinkType
from topology.sources import (
    NvmlGpu,
    SourceUnavailable,
    discover,
    load_matrix_file,
    pcie_link,
    probe,
    read_infiniband_nics,
    read_numa_node,
    run_nvidia_smi_topo,
    topology_from_nvml,
    visible_gpus,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "topo"
H200 = (DATA / "h200x2_nvlink.txt").read_text()


def nvml_gpus() -> list[NvmlGpu]:
    return [
        NvmlGpu(index=i, name="NVIDIA H200", bus_id=f"0000:00:0{6 + i}.0", uuid=f"GPU-{i}",
                cpus=frozenset(range(32)), memory_mib=143771,
                gpu_links={1 - i: Link(LinkType.NVLINK, 18)})
        for i in range(2)
    ]  # fmt: skip


def unavailable(reason: str):
    def fail():
        raise SourceUnavailable(reason)

    return fail


def fake_sysfs(root: Path) -> Path:
    """/sys with two GPUs and one NIC behind the same PCIe switch as GPU 0."""
    switch = root / "devices/pci0000:17/0000:17:00.0/0000:18:00.0"
    paths = {
        "0000:00:06.0": switch / "0000:19:00.0/0000:00:06.0",
        "0000:00:07.0": root / "devices/pci0000:80/0000:80:01.0/0000:00:07.0",
        "0000:1a:00.0": switch / "0000:19:01.0/0000:1a:00.0",
    }
    numa = {"0000:00:06.0": "0", "0000:00:07.0": "1", "0000:1a:00.0": "0"}
    (root / "bus/pci/devices").mkdir(parents=True)
    for bus, path in paths.items():
        path.mkdir(parents=True)
        (path / "numa_node").write_text(numa[bus] + "\n")
        (root / "bus/pci/devices" / bus).symlink_to(path)
    ib = root / "class/infiniband/mlx5_0"
    (ib / "ports/1").mkdir(parents=True)
    (ib / "device").symlink_to(paths["0000:1a:00.0"])
    return root


def test_matrix_enriched_with_nvml_and_sysfs(tmp_path: Path) -> None:
    found = probe(run_smi=lambda: H200, nvml=nvml_gpus, sysfs_root=str(tmp_path))
    assert found.problems == {}
    topo = found.topology
    assert topo is not None and topo.source == "nvidia-smi topo -m + NVML"
    gpu1 = topo.gpu(1)
    assert (gpu1.bus_id, gpu1.uuid, gpu1.memory_mib) == ("0000:00:07.0", "GPU-1", 143771)
    assert gpu1.numa_node == 0 and gpu1.nvlink_peers == (0,)


def test_nvml_alone_with_sysfs(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path)
    found = probe(run_smi=unavailable("nvidia-smi not found on PATH"), nvml=nvml_gpus,
                  sysfs_root=str(sysfs))  # fmt: skip
    assert found.problems == {"nvidia-smi": "nvidia-smi not found on PATH"}
    topo = found.topology
    assert topo is not None and topo.source == "NVML + sysfs"
    assert [(n.device, n.bus_id, n.numa_node, n.port) for n in topo.nics] == [
        ("mlx5_0", "0000:1a:00.0", 0, 1)
    ]
    assert [g.numa_node for g in topo.gpus] == [0, 1]
    assert topo.gpu(0).nic_links == {"mlx5_0": Link(LinkType.PIX)}
    assert topo.gpu(1).nic_links == {"mlx5_0": Link(LinkType.SYS)}
    assert topo.gpu(0).gpu_links == {1: Link(LinkType.NVLINK, 18)}


def test_unparseable_nvidia_smi_output_is_reported_not_raised() -> None:
    found = probe(run_smi=lambda: "garbage", nvml=unavailable("NVML: no library"))
    assert found.topology is None
    assert found.problems["NVML"] == "NVML: no library"
    assert found.problems["nvidia-smi"].startswith("could not parse `nvidia-smi topo -m`")


def test_pcie_link_levels() -> None:
    root = "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0"
    gpu = f"{root}/0000:19:00.0/0000:1b:00.0"
    assert pcie_link(gpu, f"{root}/0000:19:01.0/0000:1c:00.0", 0, 0) == Link(LinkType.PIX)
    deeper = f"{root}/0000:19:02.0/0000:20:00.0/0000:21:00.0/0000:22:00.0"
    assert pcie_link(gpu, deeper, 0, 0) == Link(LinkType.PXB)
    other_port = "/sys/devices/pci0000:17/0000:17:02.0/0000:30:00.0"
    assert pcie_link(gpu, other_port, 0, 0) == Link(LinkType.PHB)
    other_bridge = "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    assert pcie_link(gpu, other_bridge, 0, 0) == Link(LinkType.NODE)
    assert pcie_link(gpu, other_bridge, 0, 1) == Link(LinkType.SYS)
    assert pcie_link(gpu, other_bridge, None, None) == Link(LinkType.SYS)


def test_sysfs_readers_tolerate_missing_files(tmp_path: Path) -> None:
    assert read_numa_node("0000:18:00.0", str(tmp_path)) is None
    assert read_infiniband_nics(str(tmp_path)) == []
    d = tmp_path / "bus/pci/devices/0000:18:00.0"
    d.mkdir(parents=True)
    (d / "numa_node").write_text("-1\n")
    assert read_numa_node("00000000:18:00.0", str(tmp_path)) is None


def test_topology_from_nvml_keeps_nvml_facts(tmp_path: Path) -> None:
    topo = topology_from_nvml(nvml_gpus(), [], str(tmp_path))
    assert [g.uuid for g in topo.gpus] == ["GPU-0", "GPU-1"]
    assert topo.gpu(0).cpus == frozenset(range(32)) and topo.gpu(0).numa_node is None


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="machine has nvidia-smi")
def test_this_cpu_machine_has_no_gpu_and_nothing_crashes() -> None:
    with pytest.raises(SourceUnavailable, match="nvidia-smi not found"):
        run_nvidia_smi_topo()
    assert discover() is None
    found = probe()
    assert set(found.problems) == {"NVML", "nvidia-smi"}


def test_load_matrix_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("not a matrix\n")
    with pytest.raises(ValueError, match=f"{bad}: no `nvidia-smi topo -m` header"):
        load_matrix_file(str(bad))
    good = load_matrix_file(str(DATA / "dgx1_v100_seed.txt"))
    assert good.source == f"file:{DATA / 'dgx1_v100_seed.txt'}"
    assert os.path.basename(good.source) == "dgx1_v100_seed.txt"


def test_a_node_that_owns_some_gpus_sees_and_plans_for_only_those() -> None:
    """CUDA_VISIBLE_DEVICES as Slurm (indices) or the local cluster's agent sets it: the node's
    GPUs keep NVML's indices, in the order the variable lists them, and a rank's plan binds
    only them. The machine: the recorded constructed 8-GPU matrix."""
    from topology.plan import plan_node

    topo = load_matrix_file(str(DATA / "constructed_8gpu_2socket_5nic.txt"))
    node2 = visible_gpus(topo, "2,3")
    assert node2 is not None and [g.index for g in node2.gpus] == [2, 3]
    assert node2.source.endswith(", CUDA_VISIBLE_DEVICES=2,3")
    assert [b.gpu_index for b in plan_node(node2, 2)] == [2, 3]
    with pytest.raises(ValueError, match=r"this node has 2 GPU\(s\) \(2, 3\)"):
        plan_node(node2, 4)
    assert [g.index for g in visible_gpus(topo, "5,4").gpus] == [5, 4]  # type: ignore[union-attr]
    # as CUDA reads it: the list ends at the first entry that names no GPU
    assert [g.index for g in visible_gpus(topo, "1,9,2").gpus] == [1]  # type: ignore[union-attr]
    assert visible_gpus(topo, "") is None and visible_gpus(topo, "-1") is None
    assert visible_gpus(topo, None) is topo
    assert visible_gpus(topo, "0,1,2,3,4,5,6,7") is topo


def test_visible_gpus_by_uuid(tmp_path: Path) -> None:
    topo = probe(run_smi=lambda: H200, nvml=nvml_gpus, sysfs_root=str(tmp_path)).topology
    only = visible_gpus(topo, "GPU-1")
    assert only is not None and [g.bus_id for g in only.gpus] == ["0000:00:07.0"]
    assert visible_gpus(topo, "GPU-") is None  # names both: not unique, as CUDA refuses it


def test_discover_reads_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    import topology.sources as sources

    found = probe(run_smi=lambda: H200, nvml=nvml_gpus, sysfs_root=str(tmp_path))
    monkeypatch.setattr(sources, "probe", lambda: found)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    topo = sources.discover()
    assert topo is not None and [g.index for g in topo.gpus] == [1]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert sources.discover() is found.topology
