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
    # a 60 s interval does not delay stop(): a loaded machine may take seconds, never 60
    assert time.monotonic() - started < 10.0
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


# A rank that stands for its node (a command case with `launch: per_node`) samples every GPU
# the binding would plan for the node's ranks. Seams: the topology source (`topology.discover`,
# given a recorded DGX-1 matrix, which names no bus ids: they are filled in here) and the
# opener of one GPU's sampler (the NVML reader replaced by a scripted one).

def _dgx1_with_bus_ids():
    import dataclasses
    from pathlib import Path

    from topology.smi import parse_topo_matrix

    topo = parse_topo_matrix((Path(__file__).resolve().parents[2] / "data" / "topo"
                              / "dgx1_v100_seed.txt").read_text())
    gpus = [dataclasses.replace(g, bus_id=f"0000:{0x10 + g.index:02x}:00.0") for g in topo.gpus]
    return dataclasses.replace(topo, gpus=gpus)


def _per_node_case(**kw):
    from toolkit.spec import Case

    return Case.from_dict({"model": "command", "num_nodes": 2, "gpus_per_node": 4,
                           "command": {"argv": ["x"], "launch": "per_node"}, **kw})


def _scripted_opener(opened: list[str]):
    def open_gpu(*, bus_id, interval_ms, callback):
        opened.append(bus_id)
        power = 100.0 * (1 + len(opened))  # each GPU draws its own power
        read, _ = scripted([sample(10.0, 1000 * len(opened), 50, power),
                            sample(12.0, 500, 70, power)])
        return GpuSampler(read, interval_ms=1, callback=callback, device=bus_id)
    return open_gpu


def test_a_per_node_rank_samples_every_gpu_of_its_node(tmp_path, monkeypatch) -> None:
    import json

    import topology
    from toolkit.rank.event_writer import EventWriter
    from toolkit.rank.telemetry import NodeSampler, open_rank_sampler

    monkeypatch.setattr(topology, "discover", _dgx1_with_bus_ids)
    opened: list[str] = []
    binding = {"applied": False, "reason": "launch: per_node: the program starts ..."}
    with EventWriter(tmp_path / "rank000.jsonl", 0) as writer:
        sampler, _ = open_rank_sampler(_per_node_case(), binding, writer,
                                       open_gpu=_scripted_opener(opened))
        assert isinstance(sampler, NodeSampler)
        sampler.start()
        deadline = time.monotonic() + 5
        while sum(s.summary().samples for s in sampler.samplers) < 8:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        summary = sampler.stop()
    # the 4 GPUs the binding plans for 4 local ranks of the DGX-1: GPUs 0-3
    assert opened == ["0000:10:00.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0"]
    assert summary.samples == 8 and summary.source == "nvml"
    assert summary.peak_memory_mib == 4000  # the largest GPU's
    assert summary.mean_utilization_pct == pytest.approx(60.0)
    assert summary.energy_j == pytest.approx(2.0 * (200 + 300 + 400 + 500))  # summed
    records = [json.loads(line) for line in (tmp_path / "rank000.jsonl").read_text().splitlines()]
    by_gpu: dict[str, int] = {}
    for r in records:
        assert r["type"] == "telemetry"
        by_gpu[r["gpu_bus_id"]] = by_gpu.get(r["gpu_bus_id"], 0) + 1
    assert by_gpu == {b: 2 for b in opened}


def test_a_per_rank_rank_samples_its_bound_gpu_only(tmp_path, monkeypatch) -> None:
    import topology
    from toolkit.rank.event_writer import EventWriter
    from toolkit.rank.telemetry import open_rank_sampler
    from toolkit.spec import Case

    monkeypatch.setattr(topology, "discover", _dgx1_with_bus_ids)
    opened: list[str] = []
    case = Case.from_dict({"model": "command", "gpus_per_node": 4, "command": {"argv": ["x"]}})
    binding = {"applied": True, "planned": {"gpu_bus_id": "0000:12:00.0"}}
    with EventWriter(tmp_path / "rank000.jsonl", 0) as writer:
        sampler, _ = open_rank_sampler(case, binding, writer, open_gpu=_scripted_opener(opened))
        assert isinstance(sampler, GpuSampler)
        sampler.stop()
        off, why = open_rank_sampler(_per_node_case(telemetry_interval_ms=0), {}, writer,
                                     open_gpu=_scripted_opener(opened))
    assert opened == ["0000:12:00.0"]
    assert off is None and why == "telemetry_interval_ms is 0"


@pytest.mark.skipif(_nvml_works(), reason="NVML is available on this machine")
def test_without_gpus_a_per_node_rank_records_why_nothing_was_sampled(tmp_path) -> None:
    from toolkit.rank.event_writer import EventWriter
    from toolkit.rank.telemetry import open_rank_sampler

    with EventWriter(tmp_path / "rank000.jsonl", 0) as writer:
        sampler, why = open_rank_sampler(_per_node_case(), {}, writer)
    assert sampler is None
    assert why in ("no NVIDIA GPU topology on this node", "no GPU bus id in this node's topology")
