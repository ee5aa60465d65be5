"""Throughput, median and speedup arithmetic, checked against published benchmark tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.analysis.summary import summarize
from toolkit.analysis.throughput import MetricError, run_throughput, window_throughput

DATA = Path(__file__).resolve().parents[2] / "data" / "seeds"


def md_rows(path: Path) -> list[list[str]]:
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].isdigit():
            rows.append(cells)
    return rows


def test_window_drops_warmup_and_uses_end_of_last_warmup_iteration():
    # iteration i finishes at i seconds; warm-up 2 -> window from t=2 to t=5, 3 iterations
    elapsed = [1.0, 2.0, 3.0, 4.0, 5.0]
    tput, n = window_throughput(elapsed, samples_per_iter=10, warmup=2)
    assert n == 3
    assert tput == pytest.approx(10 * 3 / 3.0)
    # without warm-up the window starts at the common start (0)
    assert window_throughput(elapsed, 10, 0)[0] == pytest.approx(50 / 5.0)
    # a slow first iteration is excluded once it is warm-up
    slow_first = [10.0, 11.0, 12.0]
    assert window_throughput(slow_first, 4, 1)[0] == pytest.approx(4.0)


def test_window_errors():
    with pytest.raises(MetricError):
        window_throughput([1.0, 2.0], 8, warmup=2)
    with pytest.raises(MetricError):
        window_throughput([1.0, 1.0, 1.0], 8, warmup=1)


def test_run_takes_the_slowest_rank():
    fast = [1.0, 2.0, 3.0]
    slow = [1.0, 3.0, 5.0]
    assert run_throughput([fast, slow], 16, 1, 2) == pytest.approx(16 * 2 / 4.0)


def test_seed_all_results_reproduce_published_medians_and_speedups():
    runs = [{"framework": "oneflow", "model": "bert_base", "precision": "fp32", "variant": "",
             "num_nodes": int(r[0]), "gpus_per_node": int(r[1]),
             "batch_size_per_device": int(r[2]), "throughput_sps": float(r[3]), "status": "ok",
             "case_id": f"{r[0]}n{r[1]}g-bs{r[2]}"}
            for r in md_rows(DATA / "bert_base_fp32_0822_all_results.md")]
    assert len(runs) == 106
    summary = {(s.num_nodes, s.gpus_per_node, s.batch_size_per_device): s
               for s in summarize(runs)}
    published = md_rows(DATA / "bert_base_fp32_0822_published.md")
    assert len(published) == 15
    for nodes, gpn, bs, tput, speedup in published:
        s = summary[(int(nodes), int(gpn), int(bs))]
        assert s.runs_ok == 7
        assert s.throughput_median_sps == pytest.approx(float(tput), abs=0.05)
        assert round(s.speedup, 2) == pytest.approx(float(speedup), abs=0.005)
        assert s.scaling_efficiency == pytest.approx(s.speedup / (int(nodes) * int(gpn)))
    # the lone bs-48 run has no 1n1g baseline: missing, never 1.0
    odd = summary[(4, 8, 48)]
    assert odd.throughput_median_sps == pytest.approx(4103.6)
    assert odd.speedup is None and odd.baseline_sps is None and odd.scaling_efficiency is None


def test_speedup_only_within_same_variant_and_failed_runs_are_counted():
    def run(nodes, gpn, tput, variant="a", status="ok"):
        return {"framework": "torch", "model": "resnet50", "precision": "fp32",
                "variant": variant, "num_nodes": nodes, "gpus_per_node": gpn,
                "batch_size_per_device": 8, "throughput_sps": tput, "status": status,
                "case_id": "x"}

    rows = [run(1, 1, 100.0), run(1, 2, 190.0), run(1, 2, 210.0), run(1, 2, None, status="failed"),
            run(1, 2, 500.0, variant="b")]
    by = {(s.variant, s.gpus_per_node): s for s in summarize(rows)}
    assert by[("a", 2)].throughput_median_sps == pytest.approx(200.0)
    assert by[("a", 2)].speedup == pytest.approx(2.0)
    assert by[("a", 2)].runs_failed == 1
    assert by[("b", 2)].speedup is None
    assert by[("a", 2)].mean_utilization_pct is None  # not measured: empty, never 0


def test_telemetry_columns_are_medians_over_ok_runs():
    rows = [{"framework": "torch", "model": "m", "precision": "fp32", "variant": "",
             "num_nodes": 1, "gpus_per_node": 1, "batch_size_per_device": 8,
             "throughput_sps": 1.0, "status": "ok", "case_id": "c",
             "mean_utilization_pct": u, "energy_per_sample_j": e}
            for u, e in ((90.0, 2.0), (80.0, 4.0), (99.0, 3.0))]
    (s,) = summarize(rows)
    assert s.mean_utilization_pct == 90.0 and s.energy_per_sample_j == 3.0


def test_start_up_columns_and_how_the_model_ran():
    rows = [{"framework": "torch", "model": "m", "precision": "fp32", "variant": "",
             "num_nodes": 1, "gpus_per_node": 1, "batch_size_per_device": 8,
             "throughput_sps": 1.0, "status": "ok", "case_id": "c", "repeat": k,
             "compile": "compiled", "start_to_first_iteration_s": first, "compile_s": comp}
            for k, (first, comp) in enumerate(((70.0, 60.0), (12.0, 3.0), (11.0, 2.0)))]
    (s,) = summarize(rows)
    # the cold first repeat is the longest; the median is what later repeats pay
    assert s.start_to_first_iteration_s == 12.0 and s.start_to_first_iteration_max_s == 70.0
    assert s.compile_s == 3.0 and s.compile == "compiled"
    rows[1]["compile"] = "eager"  # runs of one case that ran differently: both are named
    rows[2]["compile"] = None
    assert summarize(rows)[0].compile == "compiled, eager"
    for r in rows:
        del r["compile"], r["start_to_first_iteration_s"]
    (s,) = summarize(rows)
    assert s.compile == "" and s.start_to_first_iteration_s is None


def _run(gpus: int, sps: float, repeat: int, oversubscribed: str = "") -> dict:
    return {"case_id": f"c{gpus}", "repeat": repeat, "status": "ok", "framework": "torch",
            "model": "resnet50", "precision": "fp32", "variant": "", "num_nodes": 1,
            "gpus_per_node": gpus, "batch_size_per_device": 4, "throughput_sps": sps,
            "oversubscribed": oversubscribed}


def test_efficiency_above_one_says_why_and_oversubscribed_runs_are_counted():
    # the local Slurm figures: the 1-GPU baseline shared its two cores with another
    # job (5.2 samples/s), the two-rank case did not (40.9): efficiency 3.93
    rows = [_run(1, 5.2, 0, "ran at the same time as c2 r0 on vm (CPUs 0-1, 9.0 s overlap)"),
            _run(1, 5.2, 1, "ran at the same time as c2 r1 on vm (CPUs 0-1, 9.0 s overlap)"),
            _run(2, 40.9, 0), _run(2, 40.9, 1)]
    base, two = summarize(rows)
    assert base.runs_oversubscribed == 2 and two.runs_oversubscribed == 0
    assert base.superlinear == ""
    assert two.scaling_efficiency == pytest.approx(3.93, abs=0.01)
    assert two.superlinear.startswith("efficiency 3.933 > 1 (superlinear); likely a slow "
                                      "baseline: 2 of the 1-GPU baseline's runs were "
                                      "oversubscribed; ")
    assert "cache effects" in two.superlinear and "different work per GPU" in two.superlinear


def test_efficiency_within_the_noise_and_at_most_one():
    noisy = summarize([_run(1, 10.0, 0), _run(1, 10.0, 1), _run(2, 19.0, 0), _run(2, 21.4, 1)])
    assert "noise: 1.0% above 1 is within the repeats' spread (11.9%)" in noisy[1].superlinear
    plain = summarize([_run(1, 10.0, 0), _run(2, 19.0, 0)])
    assert [r.superlinear for r in plain] == ["", ""]
