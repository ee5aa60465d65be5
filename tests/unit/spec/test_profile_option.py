"""The `profile:` grid option: which ranks, how many steps; checked against the case's ranks,
and not part of the config hash (it runs after the timed window, so it measures nothing)."""

from __future__ import annotations

import pytest

from toolkit.spec import Case, CaseError, from_plain, resolve
from toolkit.spec.grid import GridError, parse_grid


def case(**fields) -> Case:
    return resolve(from_plain(Case, {"gpus_per_node": 2, **fields}, ""))


def test_profile_is_parsed_and_not_hashed():
    profiled = case(profile={"ranks": [0, 1], "steps": 5})
    assert profiled.profile.ranks == (0, 1) and profiled.profile.steps == 5
    assert profiled.profile.enabled and not case().profile.enabled
    assert not case(profile={"ranks": [0], "steps": 0}).profile.enabled
    assert not case(profile={"steps": 5}).profile.enabled  # no rank chosen
    assert profiled.config_hash() == case().config_hash()


def test_only_the_chosen_ranks_record_and_only_in_the_last_repeat():
    one = case(profile={"ranks": [1], "steps": 4}, repeats=3).profile
    assert [one.steps_in(r, 3) for r in range(3)] == [0, 0, 4]  # every rank takes the steps
    assert [one.records(rank, 2, 3) for rank in (0, 1)] == [False, True]
    assert not one.records(1, 1, 3)  # not the last repeat
    off = case(profile={"steps": 4}).profile  # no rank chosen
    assert off.steps_in(0, 1) == 0 and not off.records(0, 0, 1)


@pytest.mark.parametrize("profile,key,text", [
    ({"ranks": [2], "steps": 3}, "profile.ranks", "ranks [2] are not ranks of this case (0 to 1)"),
    ({"ranks": [-1], "steps": 3}, "profile.ranks", "not ranks of this case"),
    ({"ranks": [0], "steps": -1}, "profile.steps", "expected an integer >= 0"),
])
def test_bad_profiles_name_the_key(profile, key, text):
    with pytest.raises(CaseError) as info:
        case(profile=profile)
    assert key in str(info.value) and text in str(info.value)


def test_unknown_profile_key_in_a_grid_lists_the_valid_ones():
    grid = "base:\n  profile: {ranks: [0], stpes: 3}\n"
    with pytest.raises(GridError) as info:
        parse_grid(grid, source="g.yaml")
    assert "g.yaml" in str(info.value) and "stpes" in str(info.value)
    assert "steps" in str(info.value)
