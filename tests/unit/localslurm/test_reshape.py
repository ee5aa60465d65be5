"""A re-shape that tc refuses: the old rules come back and the record says what is in place,
so `status` never shows a rate no rule applies and a later `up` with the old rates re-shapes
what is really there."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

import pytest

from toolkit.localslurm import network as net
from toolkit.localslurm.config import ClusterError
from toolkit.localslurm.daemons import LocalCluster, load_cluster


def _cluster(tmp_path, throttles: list[net.Throttle]) -> LocalCluster:
    plan = net.plan_network(17817, ["node1", "node2"], "10.217.3.0/24", throttles, mark="m")
    c = LocalCluster(state_dir=tmp_path, nodes=["node1", "node2"], cpus_per_node=1,
                     port_base=17817, daemons=[], started_at=time.time(), network=plan)
    c.save()
    return c


class FakeTc:
    """`net.run` that refuses every rule naming one of `refused` rates and records the rest."""

    def __init__(self, *refused: str) -> None:
        self.refused = refused
        self.ran: list[str] = []

    def __call__(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        line = " ".join(argv)
        if any(f"rate {r}" in line or f"ceil {r}" in line for r in self.refused):
            if check:
                raise ClusterError(f"{line} failed: RTNETLINK answers: Invalid argument")
            return subprocess.CompletedProcess(list(argv), 2, "", "Invalid argument")
        self.ran.append(line)
        return subprocess.CompletedProcess(list(argv), 0, "", "")


def test_a_refused_reshape_puts_the_old_rules_back_and_the_record_keeps_them(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = [net.Throttle(("node1",), "20mbit")]
    c = _cluster(tmp_path, old)
    tc = FakeTc("7mbit")
    monkeypatch.setattr(net, "run", tc)
    with pytest.raises(ClusterError, match="old ones are in place again"):
        c.set_throttles([net.Throttle(("node1",), "7mbit")])
    restored = [" ".join(a) for a in net.throttle_commands(c.network)] if c.network else []
    assert tc.ran[-len(restored):] == restored  # the last rules made are the old ones
    recorded = load_cluster(tmp_path)
    assert recorded is not None and recorded.network is not None
    assert list(recorded.network.throttles) == old


def test_when_the_old_rules_are_refused_too_the_record_says_no_link_is_shaped(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _cluster(tmp_path, [net.Throttle(("node1",), "20mbit")])
    monkeypatch.setattr(net, "run", FakeTc("7mbit", "20mbit"))
    with pytest.raises(ClusterError, match="full speed"):
        c.set_throttles([net.Throttle(("node1",), "7mbit")])
    recorded = load_cluster(tmp_path)
    assert recorded is not None and recorded.network is not None
    assert recorded.network.throttles == ()
