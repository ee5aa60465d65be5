"""NVML's view of one GPU's health, read at rest and sampled under load.

At rest: ECC mode and error counts (volatile: since the driver loaded; aggregate: lifetime),
retired pages (and whether a retirement waits for a reset), remapped rows (Ampere and later:
pending, failed), power limit versus its default, PCIe link generation and width versus the
maximum of the GPU and the link. Under load (`LoadSampler`, a thread started around the GEMM
and host<->device probes): the SM clock, the clock event (throttle) reasons seen, and the PCIe
link again, because GPUs lower the link's generation when idle to save power, so only a reading
under load says whether the link trains to its maximum.

A reading the GPU does not support is left out with the reason; a GPU without NVML (or a CPU)
gives one `health` measurement saying so. XID errors are not listed: NVML reports them only as
events to a listener registered before they happen, and the kernel log is not readable by jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from toolkit.probes.measurement import Measurement

#: Clock event reasons that mean the hardware slowed the GPU down (a fault or a cooling or
#: power-delivery problem), by NVML bit and the name nvidia-smi prints.
HW_SLOWDOWN_REASONS = {
    0x0000000000000008: "HW Slowdown",
    0x0000000000000040: "HW Thermal Slowdown",
    0x0000000000000080: "HW Power Brake Slowdown",
}
#: Reasons that are policy, not faults; reported, not judged (a power cap under a full GEMM is
#: normal on most boards).
SW_REASONS = {
    0x0000000000000002: "Applications Clocks Setting",
    0x0000000000000004: "SW Power Cap",
    0x0000000000000020: "SW Thermal Slowdown",
    0x0000000000000100: "Display Clock Setting",
    0x0000000000000010: "Sync Boost",
}


def reason_names(mask: int) -> list[str]:
    """The named reasons in an NVML clock-event mask (idle and unknown bits left out)."""
    return [name for bit, name in {**HW_SLOWDOWN_REASONS, **SW_REASONS}.items() if mask & bit]


def open_nvml(bus_id: str | None, index: int | None) -> tuple[Any, Any] | str:
    """(pynvml, handle) for the GPU with this PCI bus id (else NVML index), or why not."""
    from topology.sources import SourceUnavailable, nvml_init

    try:
        pynvml = nvml_init()
    except SourceUnavailable as err:
        return str(err)
    try:
        if bus_id:
            return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        if index is not None:
            return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as err:
        pynvml.nvmlShutdown()
        return f"NVML has no GPU {bus_id or index}: {err}"
    pynvml.nvmlShutdown()
    return "no GPU bus id or index for this rank"


def _read(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return fn(), None
    except Exception as err:  # NVMLError_NotSupported and friends: the reading is not there
        return None, f"{type(err).__name__}: {err}"


def at_rest(pynvml: Any, handle: Any) -> list[Measurement]:
    """The readings that do not need load, each one measurement (value None + reason when the
    GPU does not report it)."""
    out: list[Measurement] = []

    def add(metric: str, fn: Callable[[], Any], unit: str = "",
            detail: Callable[[Any], dict[str, Any]] | None = None) -> Any:
        value, why = _read(fn)
        out.append(Measurement("health", metric, None if value is None else float(value), unit,
                               detail=(detail(value) if detail and value is not None else {}),
                               reason=why))
        return value

    errs = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    add("ecc_mode", lambda: pynvml.nvmlDeviceGetEccMode(handle)[0])
    for counter, name in ((pynvml.NVML_VOLATILE_ECC, "volatile"),
                          (pynvml.NVML_AGGREGATE_ECC, "aggregate")):
        add(f"ecc_uncorrected_{name}",
            partial(pynvml.nvmlDeviceGetTotalEccErrors, handle, errs[0], counter))
        add(f"ecc_corrected_{name}",
            partial(pynvml.nvmlDeviceGetTotalEccErrors, handle, errs[1], counter))
    for cause, name in ((pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, "double_bit"),
                        (pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                         "single_bit")):
        add(f"retired_pages_{name}",
            partial(_count, pynvml.nvmlDeviceGetRetiredPages, handle, cause))
    add("retired_pages_pending", lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    rows, why = _read(lambda: pynvml.nvmlDeviceGetRemappedRows(handle))
    if rows is None:
        out.append(Measurement("health", "remapped_rows_pending", None, reason=why))
    else:
        corr, unc, pending, failure = rows
        out += [Measurement("health", "remapped_rows_correctable", float(corr)),
                Measurement("health", "remapped_rows_uncorrectable", float(unc)),
                Measurement("health", "remapped_rows_pending", float(bool(pending))),
                Measurement("health", "remapped_rows_failure", float(bool(failure)))]
    limit = add("power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
                "W")
    default, _ = _read(lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0)
    if limit is not None and default:
        out[-1] = Measurement("health", "power_limit_w", float(limit), "W",
                              detail={"default_w": default})
    add("pcie_gen_max", lambda: _link_max_gen(pynvml, handle))
    add("pcie_width_max", lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    add("sm_clock_max_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle,
                                                                     pynvml.NVML_CLOCK_SM), "MHz")
    return out


def _count(fn: Callable[..., Any], *args: Any) -> int:
    return len(fn(*args))


def _link_max_gen(pynvml: Any, handle: Any) -> int:
    """The generation the link can run at: the lower of the GPU's and the system's maximum."""
    link = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
    try:
        gpu = pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)
    except Exception:
        return int(link)
    return int(min(link, gpu))


class LoadSampler:
    """Samples SM clock, clock event reasons and the PCIe link in a thread while the probes
    load the GPU; `stop()` gives the readings under load."""

    def __init__(self, pynvml: Any, handle: Any, interval_s: float = 0.05) -> None:
        self._nvml, self._handle = pynvml, handle
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preflight-nvml", daemon=True)
        self.clocks: list[float] = []
        self.reasons: dict[int, int] = {}
        self.samples = 0
        self.gen: int | None = None
        self.width: int | None = None
        self.util: list[float] = []
        self.error: str | None = None

    def start(self) -> LoadSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        get_reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self._stop.wait(self._interval_s):
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h).gpu
                if util < 50:  # between probes: not under load
                    continue
                self.samples += 1
                self.util.append(float(util))
                self.clocks.append(float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
                mask = int(get_reasons(h))
                for bit in (*HW_SLOWDOWN_REASONS, *SW_REASONS):
                    if mask & bit:
                        self.reasons[bit] = self.reasons.get(bit, 0) + 1
                gen = int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))
                width = int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))
                self.gen = max(self.gen or 0, gen)
                self.width = max(self.width or 0, width)
            except Exception as err:
                self.error = f"{type(err).__name__}: {err}"
                return

    def stop(self) -> list[Measurement]:
        self._stop.set()
        self._thread.join(timeout=5)
        if not self.samples:
            why = self.error or "no sample found the GPU busy"
            return [Measurement("health", m, None, reason=why)
                    for m in ("sm_clock_under_load_mhz", "pcie_gen_under_load",
                              "pcie_width_under_load", "hw_slowdown_share")]
        clocks = sorted(self.clocks)
        seen = {HW_SLOWDOWN_REASONS.get(b) or SW_REASONS[b]: round(n / self.samples, 3)
                for b, n in self.reasons.items()}
        hw = max((n for b, n in self.reasons.items() if b in HW_SLOWDOWN_REASONS), default=0)
        return [
            Measurement("health", "sm_clock_under_load_mhz", clocks[len(clocks) // 2], "MHz",
                        detail={"min": clocks[0], "max": clocks[-1], "samples": self.samples}),
            Measurement("health", "pcie_gen_under_load", self.gen),
            Measurement("health", "pcie_width_under_load", self.width),
            Measurement("health", "hw_slowdown_share", hw / self.samples,
                        detail={"reasons_seen": seen, "samples": self.samples}),
        ]


def device_identity(pynvml: Any, handle: Any) -> dict[str, Any]:
    """Name, UUID, serial and PCI bus id, for the record and to key baselines."""
    out: dict[str, Any] = {}
    for key, fn in (("name", pynvml.nvmlDeviceGetName), ("uuid", pynvml.nvmlDeviceGetUUID),
                    ("serial", pynvml.nvmlDeviceGetSerial),
                    ("bus_id", lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId)):
        value, _ = _read(partial(fn, handle))
        out[key] = value.decode() if isinstance(value, bytes) else value
    out["driver"], _ = _read(pynvml.nvmlSystemGetDriverVersion)
    return out


