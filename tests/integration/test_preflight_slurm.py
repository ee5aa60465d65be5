"""The preflight on the real local 2-node cluster: in every job of a grid, and standalone over
chosen nodes. One node is made slow for real: its tasks get one CPU thread (the local cluster's
per-node TaskProlog environment) where the other node's get two, and the preflight must name it
`slow` on its own figures (its GEMM, and its memory copies where one thread slows them), keep
the job from training (`on_fail: skip_node`), give the next submit an `--exclude`, and show it
in the report.

This machine's CPUs may be taken by other processes while the preflight measures: a GEMM
below its peers measured only while the host was crowded (the runs' crowded mark) is
`inconclusive`, and a crowded healthy node may measure as low as the slow one; the preflight
then names no node and the job trains. Either way the healthy node is never named, and the slow
one is whenever both were measured on an uncrowded host."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest_localslurm import TINY, client_env
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster
from toolkit.localslurm.config import NODE_ENV_DIR

SLOW_NODE = "node2"


@pytest.fixture()
def env(local_slurm: LocalCluster) -> dict[str, str]:
    return client_env(local_slurm)


@pytest.fixture()
def slow_node(local_slurm: LocalCluster) -> Iterator[str]:
    """node2's tasks run with one CPU thread for as long as the test runs."""
    path = local_slurm.state_dir / NODE_ENV_DIR / SLOW_NODE
    path.parent.mkdir(exist_ok=True)
    path.write_text("export OMP_NUM_THREADS=1\n")
    try:
        yield SLOW_NODE
    finally:
        path.unlink()


def _only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


PER_NODE = ("gemm_fp32", "host_memory_copy", "host_memory_triad")
"""The figures a rank measures on its own node: one CPU thread where its peer has two slows
the GEMM and may slow the memory copies (their torch kernels are multi-threaded)."""


def _judged(verdict: dict[str, Any], slow_node: str) -> bool:
    """Whether the slow node was named slow, on the evidence of its own figures (measured again,
    at least once on an uncrowded host, below the healthy node's); when it was not, that the
    verdict says the host was crowded. Never the healthy node, and never on other grounds."""
    said = json.dumps({k: verdict[k] for k in ("exclude", "nodes", "health", "not_judged")},
                      indent=1)
    nodes = {n["node"]: n for n in verdict["nodes"]}
    assert nodes["node1"]["verdict"] in ("ok", "inconclusive"), said
    assert "node1" not in verdict["exclude"], said
    own = {(f["node"], f["metric"]): f for f in verdict["figures"] if f["metric"] in PER_NODE}
    named = [f for f in own.values() if f["node"] == slow_node and f["verdict"] == "slow"]
    if named:
        assert nodes[slow_node]["verdict"] == "slow", said
        reasons = nodes[slow_node]["reasons"]
        assert "best of" in reasons and "peers" in reasons, said
        for mine in named:
            assert mine["metric"] in reasons, said
            # below its peers: measured again before it was named
            assert mine["measurements"] >= 2 and mine["uncrowded"] >= 1, mine
            healthy = own.get(("node1", mine["metric"]))
            assert healthy is not None and mine["value"] < 0.85 * healthy["value"], own
        assert verdict["exclude"] == [slow_node], said
        return True
    assert slow_node not in verdict["exclude"], said
    gemm = {n: own[(n, "gemm_fp32")] for n in nodes}
    mine = gemm[slow_node]
    assert mine["verdict"] in ("ok", "inconclusive"), mine
    # only a crowded host hides it: a GEMM measured while other processes took the CPUs
    assert any(f["uncrowded"] < f["measurements"] for f in gemm.values()), gemm
    if mine["verdict"] == "inconclusive":
        left = {(u["where"], u["metric"]): u["why"] for u in verdict["not_judged"]}
        assert "crowded" in left[(f"{slow_node}/r{mine['rank']}", "gemm_fp32")], left
    return False


def test_grid_preflight_names_the_slow_node_and_skips_it(env: dict[str, str], slow_node: str,
                                                         tmp_path: Path) -> None:
    grid = tmp_path / "pf.yaml"
    # two CPU threads per rank, so that the slowed node's one thread shows
    grid.write_text("name: pf\nrepeats: 1\nbase:" + TINY.replace("cpu_threads: 1",
                                                                 "cpu_threads: 2") +
                    "  num_nodes: 2\n  slurm: {time_min: 5}\n"
                    "  preflight: {enabled: true, on_fail: skip_node}\n")
    res = tmp_path / "res"
    p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor", "slurm",
            "--wait", cwd=tmp_path)
    case = _only(list((res / "cases").iterdir()))
    pf = _only(list((case / "preflight").iterdir()))
    verdict = json.loads((pf / "verdict.json").read_text())
    if not _judged(verdict, slow_node):
        # a crowded host named nobody: the job trained, and says what was not judged
        assert "not judged" in "".join(p.read_text() for p in case.glob("slurm-*.out"))
        assert (case / "r0" / "status.json").exists(), p.stdout
        assert (pf / "exclude.txt").read_text().strip() == ""
        return
    # the job ended before training: its run is not ok, and says why
    assert p.returncode != 0, p.stdout + p.stderr
    assert re.search(r"│ preflight +│ +1 │", p.stdout), p.stdout  # the state table's row
    assert "stopped before training by its preflight" in p.stdout, p.stdout
    assert (pf / "exclude.txt").read_text().strip() == slow_node
    # the job stopped before training: its run is still to do
    assert not (case / "r0" / "status.json").exists()
    assert "not ok: node2" in "".join(p.read_text() for p in case.glob("slurm-*.out"))

    # the next submit gives Slurm the slow node to exclude
    p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor", "slurm",
            "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"--exclude={slow_node}" in p.stdout

    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    report = (res / "report.md").read_text()
    section = report[report.index("## Preflight"):]
    assert f"| {slow_node} | slow |" in section
    assert "nodes not ok in some: node2" in report
    assert (res / "plots" / "preflight.png").stat().st_size > 1000


def test_standalone_preflight_over_chosen_nodes(env: dict[str, str], slow_node: str,
                                                tmp_path: Path) -> None:
    res = tmp_path / "pf"
    p = _tb(env, "preflight", "--executor", "slurm", "--nodes", "2", "--device", "cpu",
            "--cpus-per-rank", "2", "--results", str(res), "--time-min", "5", cwd=tmp_path,
            timeout=300)
    pf = _only(list((res / "preflight").iterdir()))
    verdict = json.loads((pf / "verdict.json").read_text())
    if _judged(verdict, slow_node):
        assert p.returncode == 6, p.stdout + p.stderr
        assert f"--exclude={slow_node}" in p.stdout
        assert (pf / "exclude.txt").read_text().strip() == slow_node
    else:
        assert p.returncode == 7, p.stdout + p.stderr  # ok as far as judged
        assert "not judged" in p.stdout and "### Not judged" in (pf / "preflight.md").read_text()
    ranks = {f["node"] for f in verdict["figures"] if f["metric"] == "gemm_fp32"}
    assert ranks == {"node1", slow_node}
    # collectives ran over both nodes' ranks (gloo), and the link between them was tested
    assert any(f["metric"] == "all_reduce" and f["scope"] == "job" and f["value"]
               for f in verdict["figures"])
    assert verdict["links_tested"] == ["node1+node2"] and verdict["links_total"] == 1
    # two nodes: their link is judged against its floor, a tenth of its interface's speed
    # (namespaced nodes' veth report 10 Gbit/s), or listed as not judged where none is known
    (pair,) = [f for f in verdict["figures"] if f["scope"] == "pair"]
    assert pair["floor"] == 0.125 or any(
        u["where"] == "pair node1+node2" and "no interface speed" in u["why"]
        for u in verdict["not_judged"]), pair
