"""`benchmarks/preflight_verdicts.py --rejudge`: runs recorded under an earlier rule, judged
again by this tree's, counted as the benchmark counts them. On real rank files
(`tests/data/preflight/SOURCE.md`), as the benchmark lays them out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.preflight_verdicts import main

DATA = Path(__file__).resolve().parents[2] / "data" / "preflight"


def test_runs_judged_again_by_this_trees_rules(tmp_path: Path) -> None:
    for name, recorded in (("n8-healthy-0", "cpu8_healthy_noisy"),
                           ("n8-node2-0", "cpu8_node2_100mbit")):
        shutil.copytree(DATA / recorded, tmp_path / name / "preflight" / "t1")
        (tmp_path / name / "preflight" / "t1" / "verdict.json").write_text("{}")
    # as the earlier rule judged them: four healthy links named, node2 named
    healthy = {"exit": 6, "seconds": 43.7, "slow": [], "inconclusive": [],
               "inconclusive_figures": 1, "links": ["node1+node3", "node2+node7"],
               "not_judged": 3, "tail": ""}
    node2 = {**healthy, "slow": ["node2"], "links": [], "seconds": 61.0}
    (tmp_path / "summary.json").write_text(json.dumps({"scenarios": [
        {"nodes": 8, "throttle": None, "runs": [healthy]},
        {"nodes": 8, "throttle": "node2=100mbit", "runs": [node2]}]}))
    assert main(["--rejudge", "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "summary-rejudged.json").read_text())["scenarios"]
    assert again[0]["right"] == 1 and again[0]["links_named_when_healthy"] == 0
    assert again[0]["runs"][0]["links"] == [] and again[0]["seconds"] == [43.7]
    assert again[1]["right"] == 1 and again[1]["runs"][0]["slow"] == ["node2"]
    assert again[1]["seconds"] == [61.0]


def test_each_finished_preflight_is_handed_on_so_a_stopped_benchmark_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.preflight_verdicts as pv

    throttled: list[list[object]] = []

    class Cluster:
        def set_throttles(self, rules: list[object]) -> None:
            throttled.append(rules)

    ran = iter([{"exit": 0, "seconds": 11.0, "slow": [], "links": [], "inconclusive": [],
                 "inconclusive_figures": 0, "not_judged": 0, "tail": ""},
                {"exit": 6, "seconds": 12.0, "slow": ["node3"], "links": [],
                 "inconclusive": [], "inconclusive_figures": 0, "not_judged": 0, "tail": ""}])
    monkeypatch.setattr(pv, "preflight", lambda env, nodes, res: next(ran))
    seen: list[dict[str, object]] = []
    final = pv.scenario(Cluster(), {}, 4, None, 2, tmp_path, seen.append)
    assert [(s["count"], s["right"], s["named_slow_when_healthy"]) for s in seen] == [
        (1, 1, 0), (2, 1, 1)]
    assert final == seen[-1] and throttled == [[], []]
