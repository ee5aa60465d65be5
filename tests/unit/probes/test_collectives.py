"""The pairing of nodes and devices and the busbw factors of the collective probe."""

from __future__ import annotations

import pytest

from toolkit.probes.collectives import (
    BUSBW_FACTOR,
    ROTATED_ROUNDS,
    link_rounds,
    node_indices,
    pair_rounds,
    preflights_to_cover,
    round_robin,
)


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


@pytest.mark.parametrize("n", range(0, 18))
def test_round_robin_pairs_every_two_nodes_once_in_disjoint_rounds(n: int) -> None:
    rounds = round_robin(n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for r in rounds:
        members = [m for p in r for m in p]
        assert len(members) == len(set(members)), rounds
    if n >= 2 and n % 2 == 0:  # N-1 rounds of N/2 pairs: every node in every round
        assert len(rounds) == n - 1 and all(len(r) == n // 2 for r in rounds)


def test_up_to_16_nodes_one_preflight_tests_every_pair() -> None:
    assert link_rounds(16, turn=5) == round_robin(16) and preflights_to_cover(16) == 1


@pytest.mark.parametrize("n", [17, 20, 64, 512])
def test_above_16_nodes_the_pairs_rotate_and_cover_every_link_in_the_stated_preflights(
        n: int) -> None:
    turns = preflights_to_cover(n)
    assert turns == -(-len(round_robin(n)) // ROTATED_ROUNDS)
    tested = [p for t in range(turns) for r in link_rounds(n, t) for p in r]
    assert sorted(tested) == sorted(p for r in round_robin(n) for p in r)
    assert all(len(link_rounds(n, t)) <= ROTATED_ROUNDS for t in range(turns))
    assert link_rounds(n, turns) == link_rounds(n, 0)  # and then again from the start
