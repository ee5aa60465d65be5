"""`nvidia-smi -q` dumps, as text (`Key : Value` lines indented by section) or XML (`-q -x`).

One record per `GPU 00000000:XX:00.0` section, with what a health check before a benchmark
needs: identity, ECC mode and error counts, retired pages and remapped rows, the active clock
event (throttle) reasons, power, PCIe link, SM and memory clocks, temperatures, and the driver
and CUDA versions of the dump's header. Names are nvidia-smi's across driver generations:

- ECC counts are printed per `Single Bit` / `Double Bit` with a `Total` (older drivers), as
  `SRAM/DRAM Correctable/Uncorrectable` (Ampere), or with SRAM uncorrectable split into
  `Parity` and `SEC-DED` (Hopper); correctable and uncorrectable are the sums of what is printed.
- `Clocks Throttle Reasons` became `Clocks Event Reasons` in 535; the reasons keep their printed
  names (`HW Power Brake Slowdown`), and XML tags map to the same names.
- Power readings are `Power Readings` with `Power Limit` and `Enforced Power Limit` in older
  drivers, `GPU Power Readings` with `Current` and `Requested Power Limit` in newer ones.

`N/A`, `Not Supported`, `[Unknown Error]` and the like read as `None`; a value that should be a
number and is none of those raises `ValueError`, as does text with no GPU section. Running
nvidia-smi or NVML is the toolkit's business; this module reads files only.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from parsers import logtext

_ABSENT = {"n/a", "not supported", "unknown error", "insufficient permissions", "none",
           "not available", "unknown"}


@dataclass(frozen=True)
class NvidiaSmiGpu:
    """One GPU of a dump. `None` where the dump does not print a value or prints N/A."""

    bus_id: str
    name: str | None = None
    uuid: str | None = None
    minor_number: int | None = None
    """The N of the GPU's device file, /dev/nvidiaN."""
    serial: str | None = None
    vbios: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    """The CUDA version the driver supports, from the dump's header."""
    ecc_mode_current: str | None = None
    """`Enabled` or `Disabled`."""
    ecc_mode_pending: str | None = None
    ecc_volatile_correctable: int | None = None
    """Since the driver loaded; SRAM + DRAM, or the `Single Bit` total."""
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_correctable: int | None = None
    """Over the GPU's life."""
    ecc_aggregate_uncorrectable: int | None = None
    retired_pages_single_bit: int | None = None
    """Pages retired for multiple single-bit errors (before Ampere; Ampere on remaps rows)."""
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    """A retirement waits for the next driver reload."""
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    """A remap waits for a GPU reset."""
    remapped_rows_failure: bool | None = None
    """A remap failed: the GPU needs service."""
    clock_event_reasons_active: tuple[str, ...] | None = None
    """Reasons printed `Active`, as nvidia-smi names them (`Idle`, `SW Power Cap`,
    `HW Power Brake Slowdown`, ...); `None` where the section is absent or N/A."""
    power_draw_w: float | None = None
    power_limit_current_w: float | None = None
    """`Current Power Limit`, or `Power Limit` in drivers that print `Enforced` beside it."""
    power_limit_enforced_w: float | None = None
    """`Enforced Power Limit` (older drivers only)."""
    power_limit_requested_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    """The highest generation this GPU in this host can run (the lower of the two maxima)."""
    pcie_gen_device_max: int | None = None
    pcie_gen_host_max: int | None = None
    pcie_width_current: int | None = None
    """Lanes (`16x` -> 16)."""
    pcie_width_max: int | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_clock_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None


def parse(text: str) -> list[NvidiaSmiGpu]:
    """Read every GPU of an `nvidia-smi -q` dump, text or `-x` XML (told apart by the leading
    `<`); several dumps one after another (one per node) are read in order."""
    if text.lstrip().startswith("<"):
        return _parse_xml(text)
    return _parse_text(text)


# ---------------------------------------------------------------------------------------------
# Values

def _present(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or value.strip("[]").lower() in _ABSENT:
        return None
    return value


def _number(value: str | None, where: str) -> float | None:
    """`67.74 W`, `1980 MHz`, `29 C`, `16x` -> the number."""
    value = _present(value)
    if value is None:
        return None
    match = _NUMBER.fullmatch(value)
    if match is None:
        raise ValueError(f"{where}: {value!r} is not a number")
    return float(match.group(1))


def _integer(value: str | None, where: str) -> int | None:
    number = _number(value, where)
    return None if number is None else int(number)


def _yes(value: str | None, where: str) -> bool | None:
    value = _present(value)
    if value is None:
        return None
    if value.lower() in ("yes", "no"):
        return value.lower() == "yes"
    raise ValueError(f"{where}: {value!r} is not Yes or No")


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# ---------------------------------------------------------------------------------------------
# Text dumps

@dataclass
class _Node:
    """One line of the dump and the lines indented under it."""

    key: str
    value: str | None
    line: int
    children: list[_Node] = field(default_factory=list)

    def get(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for name in path:
            if node is None:
                return None
            wanted = " ".join(name.lower().split())  # "Ecc Mode" in older drivers
            node = next((c for c in node.children if c.key.lower() == wanted), None)
        return node

    def value_of(self, *path: str) -> str | None:
        node = self.get(*path)
        return None if node is None else node.value


_NUMBER = logtext.compile(r"(-?\d+(?:\.\d+)?)\s*[A-Za-z%]*")
_REASON_PREFIX = logtext.compile(r"^clocks_(?:event|throttle)_reason_")
_LINE = logtext.compile(r"^( *)(\S.*?)(?:\s+:\s?(.*))?\s*$")
_GPU = logtext.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")


def _tree(text: str) -> list[tuple[_Node, dict[str, str]]]:
    """The GPU sections, each with the header (`Driver Version`, ...) of its dump."""
    gpus: list[tuple[_Node, dict[str, str]]] = []
    header: dict[str, str] = {}
    stack: list[tuple[int, _Node]] = []
    for lineno, raw in enumerate(text.expandtabs(4).splitlines(), start=1):
        match = _LINE.match(raw)
        if match is None or raw.strip().startswith("====="):
            continue
        indent, key, value = len(match.group(1)), " ".join(match.group(2).split()), match.group(3)
        node = _Node(key=key, value=value, line=lineno)
        if indent == 0:
            stack = []
            if _GPU.fullmatch(key):
                gpus.append((node, dict(header)))
                stack = [(indent, node)]
            elif key == "Timestamp":  # a new dump starts
                header = {}
            if value is not None:
                header[key] = value.strip()
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            stack[-1][1].children.append(node)
            stack.append((indent, node))
    return gpus


def _ecc_pair(bits: tuple[str | None, str | None] | None,
              counters: list[tuple[str, str | None]], where: str) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of one ECC section, from either dump: its Single Bit and
    Double Bit totals where it has them (older drivers; None for one it lacks), else the sums
    of its counters whose names say correctable or uncorrectable."""
    if bits is not None:
        return _integer(bits[0], where), _integer(bits[1], where)
    correctable: list[int | None] = []
    uncorrectable: list[int | None] = []
    for name, value in counters:
        if "uncorrectable" in name.lower():
            uncorrectable.append(_integer(value, f"{where} {name}"))
        elif "correctable" in name.lower():
            correctable.append(_integer(value, f"{where} {name}"))
    return _sum(correctable), _sum(uncorrectable)


def _ecc_counts(section: _Node | None, where: str) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of a `Volatile` or `Aggregate` section of the text dump."""
    if section is None:
        return None, None
    single, double = section.get("Single Bit"), section.get("Double Bit")
    bits = (None if single is None else single.value_of("Total"),
            None if double is None else double.value_of("Total")) \
        if single is not None or double is not None else None
    return _ecc_pair(bits, [(c.key, c.value) for c in section.children], where)


def _active(section: _Node) -> list[str]:
    found = []
    for child in section.children:
        if (child.value or "").strip().lower() == "active":
            found.append(child.key)
        found.extend(_active(child))
    return found


def _gpu_from_text(gpu: _Node, header: dict[str, str]) -> NvidiaSmiGpu:
    bus_id = gpu.key.split(" ", 1)[1]

    def where(*path: str) -> str:
        return f"GPU {bus_id} (line {gpu.line}): {' > '.join(path)}"

    def number(*path: str) -> float | None:
        return _number(gpu.value_of(*path), where(*path))

    def integer(*path: str) -> int | None:
        return _integer(gpu.value_of(*path), where(*path))

    def text(*path: str) -> str | None:
        return _present(gpu.value_of(*path))

    ecc = gpu.get("ECC Errors")
    volatile = _ecc_counts(None if ecc is None else ecc.get("Volatile"), where("ECC Volatile"))
    aggregate = _ecc_counts(None if ecc is None else ecc.get("Aggregate"),
                            where("ECC Aggregate"))
    reasons = gpu.get("Clocks Event Reasons") or gpu.get("Clocks Throttle Reasons")
    power = ("GPU Power Readings" if gpu.get("GPU Power Readings") is not None
             else "Power Readings")
    link = ("PCI", "GPU Link Info")
    retired_pending = (gpu.value_of("Retired Pages", "Pending Page Blacklist")
                       or gpu.value_of("Retired Pages", "Pending"))
    draw = number(power, "Power Draw")
    if draw is None:
        draw = number(power, "Instantaneous Power Draw")
    limit = number(power, "Current Power Limit")
    if limit is None:
        limit = number(power, "Power Limit")
    return NvidiaSmiGpu(
        bus_id=bus_id,
        name=text("Product Name"),
        uuid=text("GPU UUID"),
        minor_number=integer("Minor Number"),
        serial=text("Serial Number"),
        vbios=text("VBIOS Version"),
        driver_version=_present(header.get("Driver Version")),
        cuda_version=_present(header.get("CUDA Version")),
        ecc_mode_current=text("ECC Mode", "Current"),
        ecc_mode_pending=text("ECC Mode", "Pending"),
        ecc_volatile_correctable=volatile[0],
        ecc_volatile_uncorrectable=volatile[1],
        ecc_aggregate_correctable=aggregate[0],
        ecc_aggregate_uncorrectable=aggregate[1],
        retired_pages_single_bit=integer("Retired Pages", "Single Bit ECC"),
        retired_pages_double_bit=integer("Retired Pages", "Double Bit ECC"),
        retired_pages_pending=_yes(retired_pending, where("Retired Pages", "Pending")),
        remapped_rows_correctable=integer("Remapped Rows", "Correctable Error"),
        remapped_rows_uncorrectable=integer("Remapped Rows", "Uncorrectable Error"),
        remapped_rows_pending=_yes(gpu.value_of("Remapped Rows", "Pending"),
                                   where("Remapped Rows", "Pending")),
        remapped_rows_failure=_yes(gpu.value_of("Remapped Rows", "Remapping Failure Occurred"),
                                   where("Remapped Rows", "Remapping Failure Occurred")),
        clock_event_reasons_active=(None if reasons is None or not reasons.children
                                    else tuple(_active(reasons))),
        power_draw_w=draw,
        power_limit_current_w=limit,
        power_limit_enforced_w=number(power, "Enforced Power Limit"),
        power_limit_requested_w=number(power, "Requested Power Limit"),
        power_limit_default_w=number(power, "Default Power Limit"),
        power_limit_min_w=number(power, "Min Power Limit"),
        power_limit_max_w=number(power, "Max Power Limit"),
        pcie_gen_current=integer(*link, "PCIe Generation", "Current"),
        pcie_gen_max=integer(*link, "PCIe Generation", "Max"),
        pcie_gen_device_max=integer(*link, "PCIe Generation", "Device Max"),
        pcie_gen_host_max=integer(*link, "PCIe Generation", "Host Max"),
        pcie_width_current=integer(*link, "Link Width", "Current"),
        pcie_width_max=integer(*link, "Link Width", "Max"),
        sm_clock_mhz=number("Clocks", "SM"),
        sm_clock_max_mhz=number("Max Clocks", "SM"),
        memory_clock_mhz=number("Clocks", "Memory"),
        memory_clock_max_mhz=number("Max Clocks", "Memory"),
        gpu_temp_c=number("Temperature", "GPU Current Temp"),
        memory_temp_c=number("Temperature", "Memory Current Temp"),
    )


def _parse_text(text: str) -> list[NvidiaSmiGpu]:
    gpus = _tree(text)
    if not gpus:
        raise ValueError("no GPU section (a line 'GPU 00000000:19:00.0' with 'Key : Value' lines "
                         f"indented under it) in {len(text.splitlines())} lines of "
                         "nvidia-smi -q text")
    return [_gpu_from_text(gpu, header) for gpu, header in gpus]


# ---------------------------------------------------------------------------------------------
# XML dumps (`nvidia-smi -q -x`)

#: XML tag of a clock event reason (after the `clocks_event_reason_` or `clocks_throttle_reason_`
#: prefix) -> the name the text dump prints, so both forms give one vocabulary.
_REASON_NAMES = {
    "gpu_idle": "Idle",
    "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap",
    "hw_slowdown": "HW Slowdown",
    "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown",
    "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown",
    "display_clocks_setting": "Display Clock Setting",
}


def _xml_ecc(section: ET.Element | None, where: str) -> tuple[int | None, int | None]:
    """(correctable, uncorrectable) of a `volatile` or `aggregate` element of the XML dump."""
    if section is None:
        return None, None
    single, double = section.find("single_bit"), section.find("double_bit")
    bits = (None if single is None else single.findtext("total"),
            None if double is None else double.findtext("total")) \
        if single is not None or double is not None else None
    return _ecc_pair(bits, [(c.tag, c.text) for c in section], where)


def _gpu_from_xml(gpu: ET.Element, root: ET.Element) -> NvidiaSmiGpu:
    bus_id = gpu.get("id") or gpu.findtext("pci/pci_bus_id") or "?"

    def where(path: str) -> str:
        return f"GPU {bus_id}: {path}"

    def number(*paths: str) -> float | None:
        for path in paths:
            value = _number(gpu.findtext(path), where(path))
            if value is not None:
                return value
        return None

    def integer(path: str) -> int | None:
        return _integer(gpu.findtext(path), where(path))

    def text(path: str) -> str | None:
        return _present(gpu.findtext(path))

    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    active = None
    if reasons is not None and len(reasons):
        active = tuple(
            _REASON_NAMES.get(name, name)
            for child in reasons
            if (child.text or "").strip().lower() == "active"
            for name in [_REASON_PREFIX.sub("", child.tag)]
        )
    power = "gpu_power_readings" if gpu.find("gpu_power_readings") is not None \
        else "power_readings"
    link = "pci/pci_gpu_link_info"
    volatile = _xml_ecc(gpu.find("ecc_errors/volatile"), where("ecc_errors/volatile"))
    aggregate = _xml_ecc(gpu.find("ecc_errors/aggregate"), where("ecc_errors/aggregate"))
    pending = text("retired_pages/pending_blacklist") or text("retired_pages/pending_retirement")
    return NvidiaSmiGpu(
        bus_id=bus_id,
        name=text("product_name"),
        uuid=text("uuid"),
        minor_number=integer("minor_number"),
        serial=text("serial"),
        vbios=text("vbios_version"),
        driver_version=_present(root.findtext("driver_version")),
        cuda_version=_present(root.findtext("cuda_version")),
        ecc_mode_current=text("ecc_mode/current_ecc"),
        ecc_mode_pending=text("ecc_mode/pending_ecc"),
        ecc_volatile_correctable=volatile[0],
        ecc_volatile_uncorrectable=volatile[1],
        ecc_aggregate_correctable=aggregate[0],
        ecc_aggregate_uncorrectable=aggregate[1],
        retired_pages_single_bit=integer("retired_pages/multiple_single_bit_retirement/"
                                         "retired_count"),
        retired_pages_double_bit=integer("retired_pages/double_bit_retirement/retired_count"),
        retired_pages_pending=_yes(pending, where("retired_pages/pending_blacklist")),
        remapped_rows_correctable=integer("remapped_rows/remapped_row_corr"),
        remapped_rows_uncorrectable=integer("remapped_rows/remapped_row_unc"),
        remapped_rows_pending=_yes(gpu.findtext("remapped_rows/remapped_row_pending"),
                                   where("remapped_rows/remapped_row_pending")),
        remapped_rows_failure=_yes(gpu.findtext("remapped_rows/remapped_row_failure"),
                                   where("remapped_rows/remapped_row_failure")),
        clock_event_reasons_active=active,
        power_draw_w=number(f"{power}/power_draw", f"{power}/instant_power_draw"),
        power_limit_current_w=number(f"{power}/current_power_limit", f"{power}/power_limit"),
        power_limit_enforced_w=number(f"{power}/enforced_power_limit"),
        power_limit_requested_w=number(f"{power}/requested_power_limit"),
        power_limit_default_w=number(f"{power}/default_power_limit"),
        power_limit_min_w=number(f"{power}/min_power_limit"),
        power_limit_max_w=number(f"{power}/max_power_limit"),
        pcie_gen_current=integer(f"{link}/pcie_gen/current_link_gen"),
        pcie_gen_max=integer(f"{link}/pcie_gen/max_link_gen"),
        pcie_gen_device_max=integer(f"{link}/pcie_gen/max_device_link_gen"),
        pcie_gen_host_max=integer(f"{link}/pcie_gen/max_host_link_gen"),
        pcie_width_current=integer(f"{link}/link_widths/current_link_width"),
        pcie_width_max=integer(f"{link}/link_widths/max_link_width"),
        sm_clock_mhz=number("clocks/sm_clock"),
        sm_clock_max_mhz=number("max_clocks/sm_clock"),
        memory_clock_mhz=number("clocks/mem_clock"),
        memory_clock_max_mhz=number("max_clocks/mem_clock"),
        gpu_temp_c=number("temperature/gpu_temp"),
        memory_temp_c=number("temperature/memory_temp"),
    )


def _parse_xml(text: str) -> list[NvidiaSmiGpu]:
    try:
        # The DOCTYPE names a DTD file that ElementTree neither fetches nor needs.
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi -q -x XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi -q -x XML: the root element is <{root.tag}>, "
                         "not <nvidia_smi_log>")
    gpus = root.findall("gpu")
    if not gpus:
        raise ValueError("no <gpu> element in the nvidia-smi -q -x XML")
    return [_gpu_from_xml(gpu, root) for gpu in gpus]
