"""NVML telemetry for one rank's GPU: a sampler thread and the summary it ends with.

What belongs here: finding the rank's GPU in NVML by PCI bus id or UUID (NVML enumerates every
GPU and ignores CUDA_VISIBLE_DEVICES, so an index would name the wrong one), sampling it in a
daemon thread (memory used, utilisation, power, SM clock, temperature), and the summary (peak
memory, mean utilisation, energy). Where NVML is absent the sampler says so and does nothing.
What lives elsewhere: writing `telemetry` events (the worker passes a callback), node topology
(`topology`), framework-side peak memory (the workloads).

A rank that stands for its whole node (a command case with `launch: per_node`, whose program
starts its own workers) samples every GPU of the node: `NodeSampler` holds one `GpuSampler` per
GPU, writes each sample with its GPU's `gpu_bus_id`, and sums them up as one summary.

One seam for tests: `GpuSampler(read_sample, ...)` takes the function that reads one sample;
`GpuSampler.open()` gives it the NVML one (`open_node_sampler` takes the opener).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.rank.binding import node_gpu_bus_ids
from toolkit.rank.event_writer import EventWriter
from toolkit.results.schema import Event
from toolkit.spec import Case

DEFAULT_INTERVAL_MS = 100


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of the GPU; NaN for a figure the GPU does not report."""

    time_s: float
    """`time.monotonic()` when read."""
    memory_used_mib: float
    """Device memory in use (all processes on the GPU), MiB."""
    utilization_pct: float
    """Share of the last sample period in which a kernel ran, percent."""
    power_w: float
    """Board power draw, watts."""
    sm_clock_mhz: float
    """SM clock, MHz."""
    temperature_c: float
    """GPU temperature, degrees Celsius."""

    def to_dict(self) -> dict[str, float | None]:
        """Plain data for a `telemetry` event (NaN becomes None, which JSON can hold)."""
        return {
            "time_s": self.time_s,
            "memory_used_mib": _none_if_nan(self.memory_used_mib),
            "utilization_pct": _none_if_nan(self.utilization_pct),
            "power_w": _none_if_nan(self.power_w),
            "sm_clock_mhz": _none_if_nan(self.sm_clock_mhz),
            "temperature_c": _none_if_nan(self.temperature_c),
        }


@dataclass(frozen=True)
class TelemetrySummary:
    """What a sampling run amounts to."""

    samples: int
    """Number of samples taken."""
    duration_s: float
    """Time between the first and the last sample, seconds."""
    peak_memory_mib: float | None
    """Largest memory in use seen, MiB; None without samples."""
    mean_utilization_pct: float | None
    """Mean of the utilisation samples, percent; None without samples."""
    energy_j: float | None
    """Power integrated over time (trapezoids between samples), joules; None with fewer than
    two power readings."""
    source: str
    """`nvml`, or `none` when nothing was sampled."""
    reason: str | None = None
    """Why nothing (or not everything) was sampled, when that happened."""

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "samples": self.samples,
            "duration_s": self.duration_s,
            "peak_memory_mib": self.peak_memory_mib,
            "mean_utilization_pct": self.mean_utilization_pct,
            "energy_j": self.energy_j,
            "source": self.source,
            "reason": self.reason,
        }


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


class GpuSampler:
    """Samples one GPU every `interval_ms` in a daemon thread, keeping running figures only.

    Per sample it keeps a handful of floats (no list of samples), so sampling for hours costs
    no memory. `stop()` wakes the thread at once (it waits on an Event, not in sleep()).
    """

    def __init__(
        self,
        read_sample: Callable[[], GpuSample] | None,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        callback: Callable[[GpuSample], None] | None = None,
        reason: str | None = None,
        close: Callable[[], None] | None = None,
        device: str | None = None,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        self._read = read_sample
        self.interval_ms = interval_ms
        """Sampling period, milliseconds."""
        self._callback = callback
        self._close = close
        self.reason = reason
        """Why this sampler cannot sample (or stopped sampling early); None while all is well."""
        self.device = device
        """The GPU sampled, as asked for (bus id or UUID)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read_failed = False
        self._lock = threading.Lock()
        self._samples = 0
        self._first_s = math.nan
        self._last_s = math.nan
        self._last_power_w = math.nan
        self._last_power_s = math.nan
        self._peak_memory_mib = math.nan
        self._util_sum = 0.0
        self._util_count = 0
        self._energy_j = 0.0
        self._power_pairs = 0
        self._summary: TelemetrySummary | None = None

    @property
    def available(self) -> bool:
        """True when there is a GPU to sample."""
        return self._read is not None

    @classmethod
    def open(
        cls,
        *,
        bus_id: str | None = None,
        uuid: str | None = None,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        callback: Callable[[GpuSample], None] | None = None,
    ) -> GpuSampler:
        """A sampler for the GPU with this PCI bus id or UUID (bus id wins when both given).

        Never raises for a missing NVML or GPU: the sampler is then not `available` and its
        `reason` says why.
        """
        device = bus_id or uuid
        if device is None:
            return cls(None, interval_ms=interval_ms, reason="no GPU bus id or UUID given")
        try:
            read, close = _nvml_reader(bus_id=bus_id, uuid=uuid)
        except _NvmlUnavailable as err:
            return cls(None, interval_ms=interval_ms, reason=str(err), device=device)
        return cls(read, interval_ms=interval_ms, callback=callback, close=close, device=device)

    def start(self) -> None:
        """Take a first sample now and keep sampling in a daemon thread."""
        if self._read is None or self._thread is not None:
            return
        self._sample_once()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s = self.interval_ms / 1000.0
        while not self._stop.wait(interval_s):
            if not self._sample_once():
                return

    def _sample_once(self) -> bool:
        assert self._read is not None
        try:
            sample = self._read()
        except Exception as err:  # an NVML error mid-run ends sampling, never the training
            self.reason = f"sampling stopped: {type(err).__name__}: {err}"
            self._read_failed = True
            return False
        with self._lock:
            self._add(sample)
        if self._callback is not None:
            try:
                self._callback(sample)
            except Exception as err:
                self.reason = f"callback failed, no longer called: {type(err).__name__}: {err}"
                self._callback = None
        return True

    def _add(self, s: GpuSample) -> None:
        if self._samples == 0:
            self._first_s = s.time_s
        self._samples += 1
        self._last_s = s.time_s
        if not math.isnan(s.memory_used_mib) and not (s.memory_used_mib <= self._peak_memory_mib):
            self._peak_memory_mib = s.memory_used_mib  # `not <=` also replaces the NaN start
        if not math.isnan(s.utilization_pct):
            self._util_sum += s.utilization_pct
            self._util_count += 1
        if not math.isnan(s.power_w):
            if not math.isnan(self._last_power_w):
                dt_s = s.time_s - self._last_power_s
                self._energy_j += 0.5 * (self._last_power_w + s.power_w) * dt_s
                self._power_pairs += 1
            self._last_power_w = s.power_w
            self._last_power_s = s.time_s

    def stop(self) -> TelemetrySummary:
        """Stop sampling (one last sample closes the window) and return the summary."""
        if self._summary is not None:
            return self._summary
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=max(1.0, 5 * self.interval_ms / 1000.0))
            if not self._read_failed:
                self._sample_once()
        if self._close is not None:
            self._close()
        self._summary = self.summary()
        return self._summary

    def summary(self) -> TelemetrySummary:
        """The figures so far (while running, or after `stop()`)."""
        with self._lock:
            n = self._samples
            return TelemetrySummary(
                samples=n,
                duration_s=(self._last_s - self._first_s) if n else 0.0,
                peak_memory_mib=_none_if_nan(self._peak_memory_mib),
                mean_utilization_pct=(
                    self._util_sum / self._util_count if self._util_count else None
                ),
                energy_j=self._energy_j if self._power_pairs else None,
                source="nvml" if n else "none",
                reason=self.reason,
            )


class _NvmlUnavailable(RuntimeError):
    pass


def _nvml_reader(
    *, bus_id: str | None, uuid: str | None
) -> tuple[Callable[[], GpuSample], Callable[[], None]]:
    """The NVML read function for one GPU, and the function that releases NVML."""
    from topology.sources import SourceUnavailable, nvml_init

    try:
        pynvml = nvml_init()
    except SourceUnavailable as err:
        raise _NvmlUnavailable(f"NVML unavailable: {err}") from None
    try:
        if bus_id is not None:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except pynvml.NVMLError as err:
        pynvml.nvmlShutdown()
        what = f"bus id {bus_id}" if bus_id is not None else f"UUID {uuid}"
        raise _NvmlUnavailable(f"no GPU with {what} in NVML: {err}") from None

    # Probe each figure once; one the GPU does not report reads as NaN ever after, instead of
    # raising (and costing an exception) every sample.
    def supported(read: Callable[[], float]) -> Callable[[], float]:
        try:
            read()
        except pynvml.NVMLError:
            return lambda: math.nan
        return read

    memory = supported(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used / 1048576.0)
    util = supported(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    power = supported(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    clock = supported(lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)))
    temp = supported(
        lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
    )

    def read_sample() -> GpuSample:
        return GpuSample(time.monotonic(), memory(), util(), power(), clock(), temp())

    return read_sample, pynvml.nvmlShutdown


def telemetry_record(sample: dict[str, Any], now_wall_s: float,
                     now_monotonic_s: float) -> dict[str, Any]:
    """A sampler reading as a `telemetry` event: its monotonic stamp moved to the wall clock
    (`time_s`, comparable with `iter` records) and kept as `monotonic_s`."""
    out = dict(sample)
    mono = out.pop("time_s", None)
    if isinstance(mono, (int, float)):
        out["monotonic_s"] = mono
        out["time_s"] = now_wall_s - (now_monotonic_s - mono)
    return out


def open_sampler(bus_id: str | None, writer: EventWriter, interval_ms: int,
                 open_gpu: Callable[..., GpuSampler] = GpuSampler.open) -> GpuSampler | None:
    """An NVML sampler for this rank's GPU writing `telemetry` events, or None without NVML
    (or with sampling turned off). `open_gpu`: `GpuSampler.open`."""
    if not bus_id or interval_ms <= 0:
        return None

    def on_sample(sample: Any) -> None:
        writer.write(Event.TELEMETRY, **telemetry_record(sample.to_dict(), time.time(),
                                                     time.monotonic()))

    sampler = open_gpu(bus_id=bus_id, interval_ms=interval_ms, callback=on_sample)
    return sampler if sampler.available else None


class NodeSampler:
    """One `GpuSampler` per GPU of a node, started and stopped together; `stop()` gives one
    summary: samples summed, the longest duration, the largest peak memory, the mean of the
    GPUs' mean utilisations, the energy summed (None unless every GPU has one)."""

    def __init__(self, samplers: list[GpuSampler]) -> None:
        self.samplers = samplers
        self._summary: TelemetrySummary | None = None

    def start(self) -> None:
        for sampler in self.samplers:
            sampler.start()

    def stop(self) -> TelemetrySummary:
        if self._summary is None:
            self._summary = combined([s.stop() for s in self.samplers],
                                     [s.device for s in self.samplers])
        return self._summary


def combined(summaries: list[TelemetrySummary],
             devices: list[str | None]) -> TelemetrySummary:
    """The summaries of several GPUs of one node as one (see `NodeSampler`); reasons name
    their GPU."""
    peaks = [s.peak_memory_mib for s in summaries if s.peak_memory_mib is not None]
    utils = [s.mean_utilization_pct for s in summaries if s.mean_utilization_pct is not None]
    energies = [s.energy_j for s in summaries if s.energy_j is not None]
    reasons = [f"{device}: {s.reason}" for s, device in zip(summaries, devices, strict=True)
               if s.reason]
    samples = sum(s.samples for s in summaries)
    return TelemetrySummary(
        samples=samples,
        duration_s=max((s.duration_s for s in summaries), default=0.0),
        peak_memory_mib=max(peaks) if peaks else None,
        mean_utilization_pct=sum(utils) / len(utils) if utils else None,
        energy_j=sum(energies) if energies and len(energies) == len(summaries) else None,
        source="nvml" if samples else "none",
        reason="; ".join(reasons) or None,
    )


def open_node_sampler(bus_ids: list[str], writer: EventWriter, interval_ms: int,
                      open_gpu: Callable[..., GpuSampler] = GpuSampler.open) -> NodeSampler | None:
    """A sampler of every GPU in `bus_ids` (a node's, for a rank that stands for the node)
    writing `telemetry` events that name their GPU (`gpu_bus_id`); None where no GPU can be
    sampled (no NVML, no GPU, sampling turned off). `open_gpu`: `GpuSampler.open`."""
    if not bus_ids or interval_ms <= 0:
        return None

    def on_sample(bus_id: str) -> Callable[[GpuSample], None]:
        def write(sample: GpuSample) -> None:
            writer.write(Event.TELEMETRY, gpu_bus_id=bus_id,
                         **telemetry_record(sample.to_dict(), time.time(), time.monotonic()))
        return write

    samplers = [open_gpu(bus_id=b, interval_ms=interval_ms, callback=on_sample(b))
                for b in bus_ids]
    return NodeSampler(samplers) if any(s.available for s in samplers) else None


def open_rank_sampler(case: Case, binding: dict[str, Any], writer: EventWriter,
                      open_gpu: Callable[..., GpuSampler] = GpuSampler.open,
                      ) -> tuple[GpuSampler | NodeSampler | None, str]:
    """(the sampler of what this rank runs on, why there is none): the GPU its binding planned;
    for a rank that stands for its node (a command case with `launch: per_node`, whose program
    starts its own workers) every GPU of the node as the binding would plan them for
    `gpus_per_node` ranks (`node_gpu_bus_ids`). `open_gpu`: `GpuSampler.open`."""
    interval_ms = case.telemetry_interval_ms
    if interval_ms <= 0:
        return None, "telemetry_interval_ms is 0"
    if case.ranks_per_node == case.gpus_per_node:
        bus_id = (binding.get("planned") or {}).get("gpu_bus_id")
        sampler = open_sampler(bus_id, writer, interval_ms, open_gpu)
        return sampler, "no NVML GPU for this rank"
    bus_ids, why = node_gpu_bus_ids(case)
    node = open_node_sampler(bus_ids, writer, interval_ms, open_gpu)
    return node, why or "no NVML GPU on this node"
