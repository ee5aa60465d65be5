"""A/B verdicts on constructed repeat sets whose answer is known, and on random ones whose
answer is known in rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from toolkit.analysis.ab import (
    FASTER,
    LARGER,
    METRICS,
    NO_CHANGE,
    SLOWER,
    TOO_FEW,
    compare_runs,
    compare_samples,
    config_differences,
    defaulted_settings,
    min_repeats_reachable,
)
from toolkit.spec.case import Case

QUICKSTART_CASE = (Path(__file__).resolve().parents[3] / "tests" / "data" / "results_quickstart"
                   / "cases" / "bert_base-torch-fp32-1n1g-bs8")

#: 7 evenly spread standard normal quantiles: a repeat set with exactly the intended noise
Z7 = norm.ppf((np.arange(7) + 0.5) / 7)


def repeats(median: float, noise: float, z: np.ndarray = Z7) -> np.ndarray:
    return median * (1 + noise * z)


def test_a_3_percent_shift_at_1_percent_noise_with_7_repeats_is_faster() -> None:
    result = compare_samples(repeats(100, 0.01), repeats(103, 0.01, Z7[::-1]))
    assert result.verdict == FASTER
    assert result.ratio == pytest.approx(1.03)
    assert 1 < result.ci_low < 1.03 < result.ci_high
    assert result.p_value < 0.001


def test_a_1_percent_shift_at_3_percent_noise_is_no_significant_change() -> None:
    result = compare_samples(repeats(100, 0.03), repeats(101, 0.03))
    assert result.verdict == NO_CHANGE
    assert result.ratio == pytest.approx(1.01)
    assert result.ci_low < 1 < result.ci_high and result.p_value > 0.5
    # detecting 1% at 3% noise takes far more than 7 repeats
    assert result.repeats_needed > 100


def test_the_rates_over_random_repeat_sets() -> None:
    rng = np.random.default_rng(7)
    shifted = [compare_samples(100 * (1 + 0.01 * rng.standard_normal(7)),
                               103 * (1 + 0.01 * rng.standard_normal(7))).verdict
               for _ in range(200)]
    assert shifted.count(FASTER) >= 190
    noisy = [compare_samples(100 * (1 + 0.03 * rng.standard_normal(7)),
                             101 * (1 + 0.03 * rng.standard_normal(7))).verdict
             for _ in range(200)]
    assert noisy.count(NO_CHANGE) >= 170 and noisy.count(SLOWER) <= 5
    same = [compare_samples(100 * (1 + 0.02 * rng.standard_normal(7)),
                            100 * (1 + 0.02 * rng.standard_normal(7))).verdict
            for _ in range(400)]
    assert (same.count(FASTER) + same.count(SLOWER)) / 400 <= 0.06  # false alarms ~ alpha


def test_too_few_repeats_says_how_many_are_needed_at_the_observed_spread() -> None:
    assert not min_repeats_reachable(3, 3) and min_repeats_reachable(4, 4)
    result = compare_samples([100.0, 101.0, 99.0], [90.0, 91.0, 89.0])
    assert result.verdict == TOO_FEW and result.repeats_needed == 4  # 10% at 1%: 4 suffice
    wide = compare_samples([100.0, 110.0, 90.0], [98.0, 108.0, 88.0])
    assert wide.verdict == TOO_FEW and wide.repeats_needed > 50  # 2% at 10% spread


def test_direction_of_better_per_metric() -> None:
    low, high = repeats(100, 0.01), repeats(110, 0.01)
    assert compare_samples(low, high, METRICS["throughput"]).verdict == FASTER
    assert compare_samples(low, high, METRICS["step_time"]).verdict == SLOWER
    assert compare_samples(low, high, METRICS["memory"]).verdict == LARGER


def test_compare_runs_matches_cases_present_on_both_sides_and_ok_runs_only() -> None:
    def frame(case: str, values: np.ndarray, status: str = "ok") -> pd.DataFrame:
        return pd.DataFrame({"case_id": case, "status": status, "throughput_sps": values,
                             "model": "gpt"})

    a = pd.concat([frame("x", repeats(100, 0.01)), frame("only-a", repeats(1, 0.01)),
                   frame("x", np.array([5.0]), "failed")])
    b = pd.concat([frame("x", repeats(97, 0.01)), frame("only-b", repeats(1, 0.01))])
    out = compare_runs(a, b)
    assert list(out["case_id"]) == ["x"] and list(out["verdict"]) == [SLOWER]
    assert out.loc[0, "n_a"] == 7 and out.loc[0, "model"] == "gpt"


def test_bootstrap_medians_are_the_medians_of_real_resamples() -> None:
    from toolkit.analysis.ab import bootstrap_medians

    x = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 9.0])
    fast = bootstrap_medians(x, np.random.default_rng(1), 500)
    rng = np.random.default_rng(1)
    positions = rng.integers(0, len(x), (500, len(x)), dtype=np.int16)
    slow = np.median(np.sort(x)[positions], axis=1)
    assert np.array_equal(fast, slow)


def test_a_setting_an_older_record_lacks_is_a_difference_only_off_its_default() -> None:
    # the recorded quickstart case (no `async_tp`, `command`) against itself with them added
    recorded = json.loads((QUICKSTART_CASE / "case.json").read_text())["case"]
    defaults = Case().to_dict()
    at_default = {**recorded, "async_tp": False, "command": defaults["command"]}
    assert config_differences(recorded, at_default, defaults) == []
    assert defaulted_settings(recorded, at_default, defaults) == ["async_tp", "command"]
    assert config_differences(recorded, at_default) == [  # without defaults: every one named
        "async_tp: None vs False", f"command: None vs {defaults['command']!r}"]
    changed = {**at_default, "async_tp": True}
    assert config_differences(recorded, changed, defaults) == ["async_tp: None vs True"]
    assert defaulted_settings(recorded, changed, defaults) == ["command"]
