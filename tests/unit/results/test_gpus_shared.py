"""A run on GPUs other nodes used too (the local cluster's `up --share-gpus`): meta.json says
why, the run's `oversubscribed` column carries it, and every table marks the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.analysis.sharing import GPUS_SHARED, gpus_shared
from toolkit.analysis.summary import summarize
from toolkit.rank.event_writer import EventWriter
from toolkit.rank.meta import check_distinct_devices
from toolkit.report.markdown import build_sections
from toolkit.results.layout import rank_file
from toolkit.results.scan import collect_runs
from toolkit.spec import Case, resolve

WHY = "node2 takes turns on GPU(s) 0 with node1 (localslurm up --share-gpus)"
BUS = "00000000:00:06.0"

CASE = resolve(Case.from_dict({"model": "resnet50", "num_nodes": 2, "gpus_per_node": 1,
                               "batch_size_per_device": 4, "warmup_iterations": 1,
                               "measured_iterations": 3}))


def summaries(shared: bool) -> list[dict[str, object]]:
    """Two ranks on two nodes of one machine, each bound to its one GPU."""
    return [{"rank": r, "host": f"node{r + 1}", "machine": "boot-1", "pci_bus_id": BUS,
             GPUS_SHARED: WHY.replace("node2", f"node{r + 1}").replace(
                 "with node1", f"with node{2 - r}") if shared else None}
            for r in range(2)]


def test_the_reasons_come_from_the_nodes_and_from_ranks_on_one_gpu() -> None:
    reasons = gpus_shared(summaries(shared=True))
    assert reasons[0].startswith("node1 takes turns on GPU(s) 0 with node2")
    assert reasons[-1] == f"ranks 0 (node1), 1 (node2) used the same GPU {BUS.lower()} of one " \
                          "machine"
    # told by nobody, found all the same: two ranks on one machine's GPU
    assert gpus_shared(summaries(shared=False)) == [
        f"ranks 0 (node1), 1 (node2) used the same GPU {BUS.lower()} of one machine"]
    own = [{"rank": r, "host": "n", "machine": "boot-1", "pci_bus_id": f"0000:0{r}:00.0"}
           for r in range(2)]
    assert gpus_shared(own) == []


def test_ranks_of_one_host_on_one_gpu_stop_the_run_unless_their_node_shares_it() -> None:
    one_host = [dict(s, host="vm") for s in summaries(shared=False)]
    with pytest.raises(RuntimeError, match="ranks 0 and 1 both use GPU"):
        check_distinct_devices(one_host)
    check_distinct_devices([dict(s, host="vm") for s in summaries(shared=True)])


def write_run(run_dir: Path, meta: dict[str, object], t0: float) -> None:
    """Two ranks, one a node, from `t0` (runs apart in time share no CPU)."""
    run_dir.mkdir(parents=True)
    for rank in range(CASE.world_size):
        with EventWriter(rank_file(run_dir, rank), rank) as w:
            w.write("start", world_size=CASE.world_size, host=f"node{rank + 1}", time_s=t0)
            for i in range(1, 5):
                w.write("iter", iteration=i, elapsed_s=i * 0.5, step_time_s=0.5, samples=8,
                        loss=9.0 - i, warmup=i <= 1, time_s=t0 + 1 + i * 0.5)
            w.write("summary", device="cuda", cpus=[rank], host_cpus=4)
            w.write("end", time_s=t0 + 4)
    (run_dir / "status.json").write_text(json.dumps({"status": "ok", "log": "output.log"}))
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_a_run_on_shared_gpus_is_marked_in_its_row_and_every_table(tmp_path: Path) -> None:
    case_dir = tmp_path / "cases" / "c"
    case_dir.mkdir(parents=True)
    (case_dir / "case.json").write_text(json.dumps({"id": "c", "case": CASE.to_dict()}))
    write_run(case_dir / "r0", {GPUS_SHARED: [WHY]}, t0=100.0)
    write_run(case_dir / "r1", {GPUS_SHARED: []}, t0=1000.0)
    rows, _ = collect_runs(tmp_path, jobs=1)
    by_repeat = {r.repeat: r for r in rows}
    assert by_repeat[0].extra["oversubscribed"] == f"its GPUs were shared: {WHY}"
    assert not by_repeat[1].extra.get("oversubscribed")
    runs = [r.to_dict() for r in rows]
    first, rest = build_sections(summarize(runs), runs)
    tables = [t for ts in (*first, *rest) for t in ts.tables]
    all_results = next(t for t in tables if t.title.startswith("All Results"))
    marked = [row for row in all_results.rows if any("†" in cell for cell in row)]
    assert len(marked) == 1
    assert f"c r0: its GPUs were shared: {WHY}" in all_results.note
    per_batch = next(t for ts in first if ts.key == "per_batch_size" for t in ts.tables)
    assert per_batch.rows[0][3].endswith("†")
    assert "† oversubscribed: ranks shared their CPUs (or their GPUs)" in per_batch.note
