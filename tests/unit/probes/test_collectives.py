"""The pairing of nodes and devices and the busbw factors of the collective probe."""

from __future__ import annotations

import pytest

from toolkit.probes.collectives import BUSBW_FACTOR, node_indices, pair_rounds


@pytest.mark.parametrize("n", range(0, 12))
def test_pair_rounds_are_disjoint_and_every_member_is_in_two_pairs(n: int) -> None:
    rounds = pair_rounds(n)
    seen: dict[int, int] = {}
    for pairs in rounds:
        members = [m for p in pairs for m in p]
        assert len(members) == len(set(members)), rounds  # disjoint within a round
        for m in members:
            seen[m] = seen.get(m, 0) + 1
    if n < 2:
        assert rounds == []
    elif n == 2:
        assert rounds == [[(0, 1)]]
    else:
        assert seen == {m: 2 for m in range(n)}, rounds


def test_busbw_factors_are_those_of_nccl_tests() -> None:
    assert BUSBW_FACTOR["all_reduce"](8) == 2 * 7 / 8
    assert BUSBW_FACTOR["all_gather"](8) == BUSBW_FACTOR["reduce_scatter"](8) == 7 / 8
    assert BUSBW_FACTOR["all_to_all"](4) == 3 / 4
    assert BUSBW_FACTOR["sendrecv"](2) == 1.0


def test_node_indices_number_nodes_by_their_first_rank() -> None:
    assert node_indices(["b", "b", "a", "a", "c"]) == [0, 0, 1, 1, 2]
    assert node_indices(["n2", "n1", "n2", "n1"]) == [0, 1, 0, 1]  # ranks placed round-robin
    assert node_indices([]) == []


def test_node_indices_of_512_nodes_of_8_ranks() -> None:
    nodes = [f"node{rank // 8:03d}" for rank in range(4096)]
    assert node_indices(nodes) == [rank // 8 for rank in range(4096)]
