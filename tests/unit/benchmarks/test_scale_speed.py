"""The trees `benchmarks/scale_speed.py` times collect and status on: a run of many ranks as
collect reads it, and a grid of array jobs as status sees it (a small shape of each)."""

from __future__ import annotations

import pytest

from benchmarks.scale_speed import write_collect_tree, write_status_tree
from toolkit.launch.run_states import run_states
from toolkit.results.scan import PARALLEL_MIN_RANKS, collect_runs


def test_collect_reads_the_synthetic_run_of_many_ranks(tmp_path):
    case, size = write_collect_tree(tmp_path, nodes=8, gpus_per_node=8, repeats=2,
                                    iterations=30, processes=1)
    assert case.world_size == 64 >= PARALLEL_MIN_RANKS  # read by the pool's workers together
    rows, problems = collect_runs(tmp_path, jobs=2)
    assert problems == [] and size > 0
    assert [(r.repeat, r.status) for r in rows] == [(0, "ok"), (1, "ok")], rows[0].error
    for row in rows:
        # every step is 0.3 s within 2 %: the run's figure is the slowest rank's window
        per_step = case.global_batch_size / row.throughput_sps
        assert 0.3 * 0.98 <= per_step <= 0.3 * 1.02
        assert row.skipped_files == []
        assert 90 <= row.extra["mean_utilization_pct"] <= 100
        assert row.extra["oversubscribed"] == ""  # the repeats ran one after another
        assert len(row.spans) == 64 and {s["host"] for s in row.spans} == {
            f"node{n:03d}" for n in range(8)}
    serial, _ = collect_runs(tmp_path, jobs=1)
    assert [r.to_dict() for r in serial] == [r.to_dict() for r in rows]


def test_status_sees_the_grid_of_array_jobs(tmp_path):
    counts = write_status_tree(tmp_path, jobs=3, repeats=4)
    assert counts == {"finished": 6, "failed": 3, "started": 3}
    states, note = run_states(tmp_path, None)
    assert len(states) == 12
    by_state = {s: sum(1 for x in states if x.state == s) for s in {x.state for x in states}}
    # no Slurm client: a run whose job has written no status yet cannot be called lost
    assert by_state == {"finished": 6, "failed": 3, "unknown": 3}
    assert "no Slurm client" in note
    failed = next(s for s in states if s.state == "failed")
    assert failed.reason == "rank 17: RuntimeError: NCCL error" and failed.job.endswith("_2")


@pytest.mark.parametrize("nodes", [1, 3])
def test_the_tree_has_a_rank_file_per_rank_and_a_meta_per_run(tmp_path, nodes):
    case, _ = write_collect_tree(tmp_path, nodes=nodes, gpus_per_node=2, repeats=1,
                                 iterations=22, processes=1)
    run = tmp_path / "cases" / case.base_id() / "r0"
    assert sorted(p.name for p in run.iterdir()) == [
        "meta.json", *(f"rank{r:03d}.jsonl" for r in range(2 * nodes)), "status.json"]
    rows, _ = collect_runs(tmp_path, jobs=1)
    assert rows[0].status == "ok", rows[0].error
    assert rows[0].provenance.get("hosts")
