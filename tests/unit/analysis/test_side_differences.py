"""A scaling row whose two sides ran differently names each difference with both sides' values
(`toolkit.analysis.summary.side_differences`), from the run columns `toolkit.results.runs`
writes; tested on real recorded results directories (tests/data/results_*/SOURCE.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolkit.analysis.summary import SUPERLINEAR_CAUSES, SummaryRow, summarize
from toolkit.report.tables import per_batch_size
from toolkit.results.scan import collect_runs

DATA = Path(__file__).resolve().parents[2] / "data"
LOADED = DATA / "results_loaded"
QUICKSTART = DATA / "results_quickstart"


def run_dicts(root: Path) -> list[dict[str, Any]]:
    rows, unread = collect_runs(root, jobs=1)
    assert unread == []
    return [r.to_dict() for r in rows]


def two_ranks(runs: list[dict[str, Any]]) -> SummaryRow:
    return next(s for s in summarize(runs) if s.gpus_per_node == 2)


def test_the_runs_record_how_their_ranks_used_the_cpus() -> None:
    runs = {(r["gpus_per_node"], r["repeat"]): r for r in run_dicts(LOADED)}
    assert [runs[(1, k)]["threads_per_rank"] for k in (0, 1)] == [2, 2]
    assert [runs[(2, k)]["threads_per_rank"] for k in (0, 1)] == [1, 1]
    assert {r["cpus_per_rank"] for r in runs.values()} == {2}
    assert {r["binding"] for r in runs.values()} == {"unbound"}
    assert runs[(1, 0)]["host_crowded"].startswith("other processes took 57% of host vm's")
    assert runs[(2, 0)].get("host_crowded") is None
    # rank files written before the `threads` record: the device's `cpu (N threads)` says
    older = {r["gpus_per_node"]: r for r in run_dicts(QUICKSTART)}
    assert (older[1]["threads_per_rank"], older[2]["threads_per_rank"]) == (2, 1)
    assert "cpus_per_rank" not in older[1]  # not recorded then: not compared, never guessed


def test_a_crowded_baseline_at_other_threads_is_named_instead_of_cache_effects() -> None:
    # the quickstart's shape on a loaded machine: a speedup of 33 on 2 ranks
    two = two_ranks(run_dicts(LOADED))
    assert two.speedup == pytest.approx(33.0, abs=1.0)
    assert two.speedup_note == (
        "the 1-GPU side ran 2 threads per rank, the 2-GPU side 1; the 1-GPU side was crowded: "
        "other processes took up to 57% of its host's CPU time in 2 of 2 run(s) (runs.csv "
        "host_crowded), the 2-GPU side was not crowded (others took up to 2%)")
    assert two.superlinear.startswith(
        f"efficiency {two.scaling_efficiency:.3f} > 1 (superlinear); likely the sides ran "
        f"differently: {two.speedup_note}")
    assert not any(cause in two.superlinear for cause in SUPERLINEAR_CAUSES)
    (table,) = per_batch_size(summarize(run_dicts(LOADED))).tables
    assert table.rows[0][3] == "25.9 † ⚠" and table.rows[1][4].endswith(" ‡")
    assert f"bert_base torch fp32 1n2g bs8: {two.speedup_note}" in table.note


def test_a_row_below_linear_still_names_its_sides_other_threads() -> None:
    # the recorded quickstart: 1 rank with 2 threads, 2 ranks with 1 each; no host load then
    two = two_ranks(run_dicts(QUICKSTART))
    assert two.scaling_efficiency is not None and two.scaling_efficiency < 1
    assert two.superlinear == ""
    assert two.speedup_note == "the 1-GPU side ran 2 threads per rank, the 2-GPU side 1"
    one = next(s for s in summarize(run_dicts(QUICKSTART)) if s.gpus_per_node == 1)
    assert one.speedup_note == ""  # a baseline against itself ran alike


def test_binding_cpus_and_compile_are_named_with_both_values() -> None:
    # the recorded runs as a GPU node would have them: the 1-GPU side bound to 16 CPUs and
    # compiled, the 2-GPU side unbound, its ranks on 8 CPUs each, eager
    runs = run_dicts(LOADED)
    for r in runs:
        r.pop("host_crowded", None)
        r["threads_per_rank"] = 8
        one = r["gpus_per_node"] == 1
        r.update(binding="bound" if one else "unbound", cpus_per_rank=16 if one else 8,
                 compile="compiled (max-autotune)" if one else "eager")
    assert two_ranks(runs).speedup_note == (
        "the 1-GPU side's ranks could run on 16 CPUs each, the 2-GPU side's on 8; the 1-GPU "
        "side's ranks were bound, the 2-GPU side's unbound; the 1-GPU side ran compiled "
        "(max-autotune), the 2-GPU side eager")


def test_sides_that_ran_alike_keep_the_generic_causes() -> None:
    runs = run_dicts(LOADED)
    for r in runs:
        r.pop("host_crowded", None)
        r["threads_per_rank"] = 1
    two = two_ranks(runs)
    assert two.speedup_note == ""
    assert two.superlinear.endswith("; ".join(SUPERLINEAR_CAUSES))


def test_gpu_ranks_share_of_the_nodes_cpus_is_not_a_difference_binding_is() -> None:
    # the recorded runs as on a GPU node: one rank had all 64 CPUs, each of two ranks 32 (the
    # binding divides the node); only the binding, which differs here, is named
    runs = run_dicts(LOADED)
    for r in runs:
        r.pop("host_crowded", None)
        one = r["gpus_per_node"] == 1
        r.update(device="NVIDIA H100 80GB HBM3", threads_per_rank=64 if one else 32,
                 cpus_per_rank=64 if one else 32, binding="bound" if one else "unbound")
    assert two_ranks(runs).speedup_note == (
        "the 1-GPU side's ranks were bound, the 2-GPU side's unbound")


def test_a_data_parallel_case_at_the_one_gpu_global_batch_is_strong_scaling() -> None:
    # two ranks of 4 samples each: the one-GPU case's 8 samples split over them
    runs = run_dicts(LOADED)
    for r in runs:
        r.pop("host_crowded", None)
        r["threads_per_rank"] = 1
        if r["gpus_per_node"] == 2:
            r["batch_size_per_device"] = 4
    two = two_ranks(runs)
    one = next(s for s in summarize(runs) if s.gpus_per_node == 1)
    assert two.baseline_sps == one.throughput_median_sps
    assert two.speedup_note == ("strong scaling: against the 1-GPU case at the same global "
                                "batch (8)")
    # a one-GPU case at the per-device batch is the baseline where there is one (weak scaling)
    weak = [dict(r, batch_size_per_device=4, case_id="bs4-1g", throughput_sps=1.0)
            for r in runs if r["gpus_per_node"] == 1]
    two = two_ranks(runs + weak)
    assert two.baseline_sps == pytest.approx(1.0) and "strong scaling" not in two.speedup_note
    # not data parallel (dp 1, as a tp or pp case is): no strong-scaling baseline
    for r in runs:
        if r["gpus_per_node"] == 2:
            r["dp"] = 1
    two = two_ranks(runs)
    assert two.baseline_sps is None and two.speedup is None


def test_own_script_cpu_runs_name_their_threads_per_rank(monkeypatch) -> None:
    # an own-script (command) case records the device its worker knows: `cpu` on a node
    # without a GPU, nothing where the node has GPUs
    from toolkit.workloads import command
    from toolkit.workloads.command import program_device

    monkeypatch.setattr(command, "gpu_count", lambda: 0)
    runs = run_dicts(QUICKSTART)
    for r in runs:
        r["device"] = program_device(0)
    assert two_ranks(runs).speedup_note == (
        "the 1-GPU side ran 2 threads per rank, the 2-GPU side 1")
    monkeypatch.setattr(command, "gpu_count", lambda: 4)  # a GPU node, no GPU bound
    for r in runs:
        r["device"] = program_device(0)
    assert "threads" not in two_ranks(runs).speedup_note
