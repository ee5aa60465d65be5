"""The grid's binding choice on a recorded DGX-1 matrix, and its validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.rank.binding import resolve_binding
from toolkit.spec import Case, CaseError
from topology.smi import parse_topo_matrix

DGX1 = parse_topo_matrix(
    (Path(__file__).resolve().parents[2] / "data" / "topo" / "dgx1_v100_seed.txt").read_text())


def case(**kw) -> Case:
    return Case.from_dict({"gpus_per_node": 2, **kw})


def test_auto_follows_the_topology_plan():
    b = resolve_binding(DGX1, case(gpus_per_node=8), local_rank=2, local_size=8)
    assert b.gpu_index == 2
    assert b.nic is not None and b.nic.device == "mlx5_0" and str(b.nic_link) == "PIX"
    assert b.env["NCCL_IB_HCA"] == "=mlx5_0:1"


def test_explicit_map_overrides_gpu_cpus_and_nic():
    c = case(binding="explicit", binding_map=[
        {"local_rank": 0, "gpu": 3, "cpus": "0-3"},
        {"local_rank": 1, "gpu": 6, "nic": "mlx5_0"}])
    b0 = resolve_binding(DGX1, c, 0, 2)
    b1 = resolve_binding(DGX1, c, 1, 2)
    assert (b0.gpu_index, sorted(b0.cpus)) == (3, [0, 1, 2, 3])
    assert b1.gpu_index == 6
    assert b1.cpus and min(b1.cpus) >= 12  # GPU 6 sits on the second socket: 12-23,36-47
    assert b1.env == {"NCCL_IB_HCA": "=mlx5_0:1", "UCX_NET_DEVICES": "mlx5_0:1"}


def test_explicit_unknown_nic_is_an_error():
    c = case(binding="explicit", binding_map=[{"local_rank": 0, "nic": "mlx5_9"},
                                              {"local_rank": 1}])
    with pytest.raises(ValueError, match="no NIC 'mlx5_9' on this node"):
        resolve_binding(DGX1, c, 0, 2)


@pytest.mark.parametrize("kw, message", [
    ({"binding": "explicit", "binding_map": [{"local_rank": 0}]},
     "binding_map: expected one entry for each local rank 0..1; got local ranks [0]"),
    ({"binding": "explicit", "binding_map": [{"local_rank": 0, "gpu": 1},
                                             {"local_rank": 1, "gpu": 1}]},
     "two local ranks share a GPU"),
    ({"binding": "explicit", "binding_map": [{"local_rank": 0, "cpus": "0-3;rm"},
                                             {"local_rank": 1}]},
     "binding_map[0].cpus: expected a CPU list"),
    ({"binding_map": [{"local_rank": 0}, {"local_rank": 1}]},
     "binding_map: only used with binding: explicit"),
    ({"binding": "pinned"}, "binding: expected one of auto, none, explicit"),
])
def test_binding_validation(kw, message):
    with pytest.raises(CaseError) as info:
        case(**kw)
    assert message in str(info.value)
