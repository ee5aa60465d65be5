"""The hang watchdog: its deadlines (with an injected clock, the one seam), its thread and
heartbeat (real threads, real files, short limits), and the case block that configures it."""

from __future__ import annotations

import os
import threading
import time

import pytest

from toolkit.rank.watchdog import HangWatchdog, heartbeat_interval, silent_ranks
from toolkit.spec import Case, CaseError, WatchdogOptions, resolve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_iteration_limit_then_iteration_limit():
    clock = Clock()
    wd = HangWatchdog(iteration_s=30, first_iteration_s=600, clock=clock)
    clock.now += 599
    assert wd.overdue() is None and wd.seconds_left() == pytest.approx(1)
    clock.now += 1
    hang = wd.overdue()
    assert hang is not None and hang.key == "first_iteration_s" and hang.last_iteration is None
    assert hang.message == ("no first iteration within 600 s of the start (hang watchdog, "
                            "watchdog.first_iteration_s=600)")

    wd.iteration(1)  # the limit switches to iteration_s, counted from this iteration
    assert wd.overdue() is None and wd.seconds_left() == pytest.approx(30)
    for i in range(2, 13):
        clock.now += 29
        wd.iteration(i)
    clock.now += 29.9
    assert wd.overdue() is None
    clock.now += 0.1
    hang = wd.overdue()
    assert hang is not None and hang.last_iteration == 12
    assert hang.message == ("no iteration for 30 s (hang watchdog, watchdog.iteration_s=30); "
                            "last iteration 12")
    assert hang.to_dict() == {"key": "iteration_s", "limit_s": 30, "idle_s": 30.0,
                              "last_iteration": 12, "phase": None, "silent_ranks": []}


def test_the_exchange_after_training_gets_one_iterations_limit_and_is_named():
    """A peer that stops after training leaves this rank in the final allgather or barrier:
    that phase is watched too, from when it begins, and the message says which it was."""
    clock = Clock()
    wd = HangWatchdog(iteration_s=30, first_iteration_s=600, clock=clock)
    wd.iteration(1)
    clock.now += 25
    wd.phase("the exchange of results after training (allgather, barrier)")
    clock.now += 29  # 54 s after the last iteration, 29 s into the phase
    assert wd.overdue() is None and wd.seconds_left() == pytest.approx(1)
    clock.now += 1
    hang = wd.overdue()
    assert hang is not None and hang.key == "iteration_s" and hang.last_iteration == 1
    assert hang.message == ("the exchange of results after training (allgather, barrier) did "
                            "not finish within 30 s (hang watchdog, watchdog.iteration_s=30); "
                            "last iteration 1")
    assert hang.to_dict()["phase"].startswith("the exchange of results")

    # iteration_s off: the phase falls back to first_iteration_s; both off: never fires.
    only_first = HangWatchdog(iteration_s=0, first_iteration_s=600, clock=clock)
    only_first.iteration(3)
    only_first.phase("the exchange")
    clock.now += 599
    assert only_first.overdue() is None
    clock.now += 1
    late = only_first.overdue()
    assert late is not None and late.key == "first_iteration_s" and late.phase == "the exchange"


def test_the_phase_wakes_a_sleeping_watchdog_thread():
    fired: list[object] = []
    done = threading.Event()
    wd = HangWatchdog(iteration_s=0.3, first_iteration_s=60)
    wd.heartbeat_s = 30
    wd.start(lambda hang: (fired.append(hang), done.set()))
    time.sleep(0.1)
    wd.phase("the exchange")
    assert done.wait(5), "the watchdog did not fire in the phase"
    wd.stop()
    assert len(fired) == 1 and fired[0].phase == "the exchange"  # type: ignore[attr-defined]


def test_zero_turns_a_limit_off():
    clock = Clock()
    wd = HangWatchdog(iteration_s=10, first_iteration_s=0, clock=clock)
    clock.now += 1e6
    assert wd.overdue() is None and wd.seconds_left() is None
    wd.iteration(1)
    clock.now += 10
    assert wd.overdue() is not None
    off = HangWatchdog(iteration_s=0, first_iteration_s=0, clock=clock)
    assert not off.enabled
    off.start(lambda hang: pytest.fail("a disabled watchdog fired"))
    off.stop()


def test_heartbeat_interval_is_a_quarter_of_the_shorter_limit_within_bounds():
    assert heartbeat_interval(300, 1800) == 30
    assert heartbeat_interval(20, 1800) == 5
    assert heartbeat_interval(0, 40) == 10
    assert heartbeat_interval(1, 0) == 0.5


def test_silent_ranks_are_those_whose_heartbeat_is_old(tmp_path):
    now = time.time()
    fresh, stale, missing = tmp_path / "rank001.jsonl", tmp_path / "rank002.jsonl", tmp_path / "x"
    fresh.write_text("")
    stale.write_text("")
    os.utime(stale, (now - 20, now - 20))
    found = silent_ranks({1: fresh, 2: stale, 3: missing}, now, stale_s=5)
    assert set(found) == {2, 3} and found[2] == pytest.approx(20, abs=0.1) and found[3] is None


def test_thread_fires_once_soon_after_the_first_iteration_moves_the_deadline_closer():
    """A long first-iteration limit must not make the thread sleep through a short
    iteration limit: the first iteration wakes it."""
    fired: list[object] = []
    done = threading.Event()
    wd = HangWatchdog(iteration_s=0.3, first_iteration_s=60)
    wd.heartbeat_s = 30  # no beat wakes it either
    wd.start(lambda hang: (fired.append(hang), done.set()))
    time.sleep(0.1)
    t0 = time.monotonic()
    wd.iteration(1)
    assert done.wait(20), "the watchdog did not fire"
    took = time.monotonic() - t0
    wd.stop()
    # a thread that slept through would wake at its 30 s heartbeat or the 60 s first limit;
    # a loaded machine may delay a woken thread by seconds, never by 30
    assert 0.3 <= took < 15
    assert len(fired) == 1 and fired[0].key == "iteration_s"  # type: ignore[attr-defined]


def test_thread_beats_on_the_rank_file_while_iterations_come(tmp_path):
    from toolkit.rank.watchdog import beat_file

    path = tmp_path / "rank000.jsonl"
    path.write_text("")
    old = time.time() - 100
    os.utime(path, (old, old))
    wd = HangWatchdog(iteration_s=0.4, first_iteration_s=0.4)
    assert wd.heartbeat_s == 0.5  # the floor
    wd.heartbeat_s = 0.05
    wd.start(lambda hang: pytest.fail("fired while iterating"), beat=lambda: beat_file(path))
    for i in range(1, 11):
        time.sleep(0.05)
        wd.iteration(i)
        assert time.time() - path.stat().st_mtime < 1
    wd.stop()


def test_a_stopped_watchdog_never_fires():
    wd = HangWatchdog(iteration_s=0.2, first_iteration_s=0.2)
    wd.start(lambda hang: pytest.fail("fired after stop"))
    wd.iteration(1)
    wd.stop()
    time.sleep(0.4)


def test_case_block_defaults_validation_and_hash():
    base = {"model": "bert_base", "gpus_per_node": 2}
    case = resolve(Case.from_dict(base))
    assert case.watchdog == WatchdogOptions(iteration_s=300, first_iteration_s=1800)
    tuned = resolve(Case.from_dict({**base, "watchdog": {"iteration_s": 5,
                                                         "first_iteration_s": 0}}))
    assert tuned.watchdog.iteration_s == 5.0 and tuned.watchdog.first_iteration_s == 0.0
    # not part of what is measured: existing results keep their ids
    assert tuned.config_hash() == case.config_hash()
    assert Case.from_dict(case.to_dict()) == case
    with pytest.raises(CaseError) as err:
        Case.from_dict({**base, "watchdog": {"iteration_s": -1}})
    assert err.value.key == "watchdog.iteration_s" and ">= 0 (0 = off)" in err.value.message
    with pytest.raises(CaseError) as err:
        Case.from_dict({**base, "watchdog": {"first_iteration": 10}})
    assert err.value.key == "watchdog.first_iteration"
    assert err.value.message == "unknown key (did you mean 'first_iteration_s'?)"


def test_config_hash_of_a_case_is_what_it_was_before_the_watchdog():
    """Recorded from the commit before the watchdog block existed (df1490b)."""
    # the default case then ran without CUDA graphs; it keeps its hash with them off, and
    # with their new default (on for one-rank resnet50) it is another case
    assert resolve(Case.from_dict({"cuda_graphs": False})).config_hash() == "94c779892541"
    assert resolve(Case()).config_hash() != "94c779892541"
    assert resolve(Case()).config_hash() == resolve(
        Case.from_dict({"cuda_graphs": True})).config_hash()
    # data-parallel BERT ran then as it runs now with CUDA graphs off and Dynamo's bucket
    # graphs; its new defaults (both on one graph and CUDA graphs) make it another case
    bert = {"model": "bert_base", "precision": "amp_bf16", "gpus_per_node": 8}
    assert resolve(Case.from_dict({**bert, "cuda_graphs": False,
                                   "compiled_ddp": "bucket_graphs"})
                   ).config_hash() == "9251288d46e5"
    assert resolve(Case.from_dict(bert)).config_hash() != "9251288d46e5"
    # an option added later changes the hash only when it is set
    assert resolve(Case.from_dict({"cuda_graphs": False, "ddp_bucket_mb": 200})
                   ).config_hash() != "94c779892541"
