"""GpuSampler: its arithmetic through the one seam (the read-one-sample function), and the
no-NVML path for real on a machine without NVIDIA GPUs."""

from __future__ import annotations

import math
import threading
import time

import pytest

from toolkit.rank.telemetry import GpuSample, GpuSampler

NAN = math.nan


def scripted(samples: list[GpuSample]):
    """A reader that plays `samples`, then fails (which ends sampling); `done` is set then."""
    it = iter(samples)
    done = threading.Event()

    def read() -> GpuSample:
        try:
            return next(it)
        except StopIteration:
            done.set()
            raise RuntimeError("script finished") from None

    return read, done


def sample(t: float, mem: float, util: float, power: float) -> GpuSample:
    return GpuSample(t, mem, util, power, 1980.0, 60.0)


def run_to_end(samples: list[GpuSample], **kwargs):
    read, done = scripted(samples)
    sampler = GpuSampler(read, interval_ms=1, **kwargs)
    sampler.start()
    assert done.wait(5)
    return sampler.stop()


def test_peak_mean_and_trapezoid_energy() -> None:
    summary = run_to_end(
        [
            sample(10.0, 1000, 0, 100),
            sample(10.5, 4000, 50, 300),  # 0.5 s at mean 200 W = 100 J
            sample(11.5, 3000, 100, 300),  # 1.0 s at 300 W = 300 J
            sample(13.5, 2000, 90, 100),  # 2.0 s at mean 200 W = 400 J
        ]
    )
    assert summary.samples == 4
    assert summary.duration_s == pytest.approx(3.5)
    assert summary.peak_memory_mib == 4000
    assert summary.mean_utilization_pct == pytest.approx(60.0)
    assert summary.energy_j == pytest.approx(800.0)
    assert summary.source == "nvml"
    assert summary.reason == "sampling stopped: RuntimeError: script finished"


def test_figures_the_gpu_does_not_report_are_skipped() -> None:
    summary = run_to_end(
        [
            sample(0.0, NAN, NAN, 100),
            sample(1.0, NAN, 40, NAN),  # no power: the next trapezoid spans 0 s -> 2 s
            sample(2.0, 500, NAN, 300),
        ]
    )
    assert summary.peak_memory_mib == 500
    assert summary.mean_utilization_pct == 40
    assert summary.energy_j == pytest.approx(400.0)


def test_no_power_readings_means_no_energy() -> None:
    summary = run_to_end([sample(0.0, 1, 1, NAN), sample(1.0, 2, 2, NAN)])
    assert summary.energy_j is None and summary.peak_memory_mib == 2


def test_callback_gets_every_sample_and_its_failure_does_not_stop_sampling() -> None:
    seen: list[GpuSample] = []
    script = [sample(float(t), 1, 1, 1) for t in range(5)]
    summary = run_to_end(script, callback=seen.append)
    assert seen == script and summary.samples == 5

    def broken(_: GpuSample) -> None:
        raise OSError("disk full")

    read, _ = scripted(script)
    sampler = GpuSampler(read, interval_ms=60_000, callback=broken)
    sampler.start()
    summary = sampler.stop()
    assert summary.samples == 2  # the start sample and the closing one
    assert summary.reason == "callback failed, no longer called: OSError: disk full"


def test_stop_is_prompt_and_closes_the_window() -> None:
    t = iter(range(100))
    closed: list[bool] = []
    sampler = GpuSampler(
        lambda: sample(float(next(t)), 1, 1, 10), interval_ms=60_000,
        close=lambda: closed.append(True),
    )  # fmt: skip
    assert sampler.available
    sampler.start()
    started = time.monotonic()
    summary = sampler.stop()
    assert time.monotonic() - started < 1.0  # a 60 s interval does not delay stop()
    assert summary.samples == 2 and summary.energy_j == pytest.approx(10.0)
    assert summary.reason is None and closed == [True]
    assert sampler.stop() is summary  # idempotent


def test_sample_to_dict_turns_nan_into_none() -> None:
    d = GpuSample(1.0, 2.0, NAN, 3.0, NAN, 4.0).to_dict()
    assert d == {"time_s": 1.0, "memory_used_mib": 2.0, "utilization_pct": None,
                 "power_w": 3.0, "sm_clock_mhz": None, "temperature_c": 4.0}  # fmt: skip


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_works(), reason="NVML is available on this machine")
def test_without_nvml_the_sampler_is_unavailable_and_harmless() -> None:
    sampler = GpuSampler.open(bus_id="0000:18:00.0", callback=lambda s: None)
    assert not sampler.available
    assert sampler.reason is not None and "NVML" in sampler.reason
    sampler.start()
    summary = sampler.stop()
    assert (summary.samples, summary.source, summary.energy_j) == (0, "none", None)
    assert summary.reason == sampler.reason
    assert summary.to_dict()["peak_memory_mib"] is None


def test_open_needs_a_device_and_interval_must_be_positive() -> None:
    sampler = GpuSampler.open()
    assert not sampler.available and sampler.reason == "no GPU bus id or UUID given"
    with pytest.raises(ValueError, match="interval_ms must be positive"):
        GpuSampler(None, interval_ms=0)
