"""`nvidia-smi topo -m` parsing: every recorded shape gives the same structure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.model import Link, LinkType, format_cpu_list, parse_cpu_list
from topology.smi import parse_topo_matrix

DATA = Path(__file__).resolve().parents[2] / "data" / "topo"
FIXTURES = sorted(p.name for p in DATA.glob("*.txt"))


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_every_fixture_has_a_source_note() -> None:
    assert FIXTURES
    for name in FIXTURES:
        assert (DATA / name).with_suffix(".source.md").is_file(), name


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_parses_into_a_consistent_structure(name: str) -> None:
    topo = parse_topo_matrix(load(name))
    indices = [g.index for g in topo.gpus]
    assert indices == list(range(len(indices)))
    nic_devices = {nic.device for nic in topo.nics}
    for gpu in topo.gpus:
        assert set(gpu.gpu_links) == set(indices) - {gpu.index}
        assert set(gpu.nic_links) == nic_devices
        assert gpu.cpus, "every recorded matrix gives each GPU a CPU affinity"
        for other, link in gpu.gpu_links.items():
            assert topo.gpu(other).gpu_links[gpu.index] == link  # the matrix is symmetric
        assert gpu.nvlink_peers == tuple(
            i for i, link in sorted(gpu.gpu_links.items()) if link.type is LinkType.NVLINK
        )


@pytest.mark.parametrize("name", FIXTURES)
def test_layout_does_not_matter_only_the_header(name: str) -> None:
    """Tabs expanded to spaces (a copy from a terminal) and no ANSI codes: same result."""
    text = load(name)
    expected = parse_topo_matrix(text)
    assert parse_topo_matrix(text.expandtabs(8)) == expected
    assert parse_topo_matrix(re.sub(r"\x1b\[[0-9;]*m", "", text)) == expected
    assert parse_topo_matrix("$ nvidia-smi topo -m\n" + text.replace("\n", "\r\n")) == expected


def test_dgx1_seed_matrix() -> None:
    topo = parse_topo_matrix(load("dgx1_v100_seed.txt"))
    assert len(topo.gpus) == 8
    assert [(n.name, n.device) for n in topo.nics] == [("mlx5_0", "mlx5_0")]
    socket0, socket1 = parse_cpu_list("0-11,24-35"), parse_cpu_list("12-23,36-47")
    assert [g.cpus for g in topo.gpus] == [socket0] * 4 + [socket1] * 4
    assert all(g.numa_node is None for g in topo.gpus)  # old drivers print no NUMA column
    assert [str(g.nic_links["mlx5_0"]) for g in topo.gpus] == [
        "NODE", "NODE", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"
    ]  # fmt: skip
    gpu0 = topo.gpu(0)
    assert gpu0.nvlink_peers == (1, 2, 3, 4)
    assert gpu0.gpu_links[3] == Link(LinkType.NVLINK, 2)
    assert gpu0.gpu_links[1] == Link(LinkType.NVLINK, 1)
    assert gpu0.gpu_links[5] == Link(LinkType.SYS)
    assert topo.gpu(7).nvlink_peers == (3, 4, 5, 6)


def test_h100_single_gpu_newer_driver() -> None:
    topo = parse_topo_matrix(load("h100_1gpu.txt"))
    assert len(topo.gpus) == 1 and topo.nics == ()
    gpu = topo.gpu(0)
    assert gpu.cpus == frozenset(range(16))
    assert gpu.numa_node == 0
    assert gpu.gpu_links == {} and gpu.nvlink_peers == ()


def test_h200_pair_joined_by_nv18() -> None:
    topo = parse_topo_matrix(load("h200x2_nvlink.txt"))
    assert topo.nics == ()
    for gpu in topo.gpus:
        assert gpu.cpus == frozenset(range(32))
        assert gpu.numa_node == 0
    assert topo.gpu(0).gpu_links == {1: Link(LinkType.NVLINK, 18)}
    assert topo.gpu(1).nvlink_peers == (0,)
    assert str(topo.gpu(0).gpu_links[1]) == "NV18"


def test_nic_legend_maps_matrix_names_to_devices() -> None:
    topo = parse_topo_matrix(load("constructed_8gpu_2socket_5nic.txt"))
    assert [(n.name, n.device) for n in topo.nics] == [(f"NIC{k}", f"mlx5_{k}") for k in range(5)]
    assert [g.numa_node for g in topo.gpus] == [0] * 4 + [1] * 4
    assert topo.gpu(5).cpus == parse_cpu_list("48-95,144-191")
    assert str(topo.gpu(2).nic_links["mlx5_2"]) == "PIX"
    assert [n.device for n, _ in topo.nearest_nics(0)] == ["mlx5_0", "mlx5_1"]


def test_old_and_new_shapes_give_the_same_structure() -> None:
    """The DGX-1 matrix rewritten the way a newer driver prints it parses to the same GPUs."""
    old = parse_topo_matrix(load("dgx1_v100_seed.txt"))
    rows = [line.split() for line in load("dgx1_v100_seed.txt").splitlines()[1:10]]
    header = (
        "\t\x1b[4m"
        + "\t".join(
            [f"GPU{i}" for i in range(8)] + ["NIC0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        )
        + "\x1b[0m"
    )
    body = []
    for row in rows:
        label = "NIC0" if row[0] == "mlx5_0" else row[0]
        cells = [" X " if c == "X" else c for c in row[1:10]]
        tail = [row[10], "N/A", "", "N/A"] if label != "NIC0" else ["", "", ""]
        body.append("\t".join([label, *cells, *tail]))
    legend = ["", "Legend:", "", "NIC Legend:", "", "  NIC0: mlx5_0", ""]
    new_text = "\n".join([header, *body, *legend])
    new = parse_topo_matrix(new_text)
    assert new.gpus == old.gpus
    assert [n.device for n in new.nics] == ["mlx5_0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", "no `nvidia-smi topo -m` header"),
        (
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\nGPU1\tFOO\t X \t0-3\n",
            "line 3, row 'GPU1', column 'GPU0': unknown link code 'FOO'",
        ),
        (
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\nGPU1\tNV4\t0-3\n",
            "line 3: row 'GPU1' has 2 cells, expected 2 device columns + 1 attribute columns",
        ),
        (
            "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-3\nGPU1\tNV4\tNV4\t0-3\n",
            "line 3, row 'GPU1', column 'GPU1': 'NV4' where the diagonal (X) is",
        ),
        ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-x\n", "line 2, column 'CPU Affinity': bad CPU list"),
        (
            "\tGPU0\tCPU Affinity\nGPU0\t X \t0-3\nGPU9\t X \t0-3\n",
            "line 3: row 'GPU9' is not one of the header's devices",
        ),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-3\n", "column 'GPU1' has no matrix row"),
        (
            "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-3\tzero\n",
            "line 2, column 'NUMA Affinity': 'zero' is not a NUMA node",
        ),
    ],
)
def test_unparseable_input_names_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_topo_matrix(text)


def test_not_available_affinity_means_unknown() -> None:
    topo = parse_topo_matrix(
        "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-7\t\tN/A\t\tN/A\n"
    )
    assert topo.gpu(0).cpus == frozenset(range(8)) and topo.gpu(0).numa_node is None


def test_link_codes() -> None:
    assert Link.parse("NV12") == Link(LinkType.NVLINK, 12)
    assert [Link.parse(c).type for c in ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC")] == [
        LinkType.SELF, LinkType.PIX, LinkType.PXB, LinkType.PHB, LinkType.NODE, LinkType.SYS,
        LinkType.SYS,
    ]  # fmt: skip
    ordered = ["PIX", "PXB", "PHB", "NODE", "SYS"]
    assert sorted(ordered[::-1], key=lambda c: Link.parse(c).distance) == ordered
    with pytest.raises(ValueError, match="unknown link code 'NVX'"):
        Link.parse("NVX")


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-11,24-35") == frozenset([*range(12), *range(24, 36)])
    assert parse_cpu_list("3") == frozenset({3})
    assert parse_cpu_list("0,2,4-5") == frozenset({0, 2, 4, 5})
    assert format_cpu_list(parse_cpu_list("0-47,96-143")) == "0-47,96-143"
    assert format_cpu_list({0, 2, 3}) == "0,2-3"
    assert format_cpu_list(set()) == ""
    for bad in ("", "N/A", "3-1", "1-", "a,b"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


@given(st.frozensets(st.integers(min_value=0, max_value=512), min_size=1))
def test_cpu_list_round_trip(cpus: frozenset[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus
