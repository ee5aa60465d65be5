"""`nvidia-smi -q` dumps on recorded real outputs (tests/data/nvidia_smi/SOURCE.md says where
from). Expected values are what each dump prints for the GPU in question."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsers import nvidia_smi

DATA = Path(__file__).resolve().parents[2] / "data" / "nvidia_smi"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_h100_eight_gpus_with_power_brake_slowdown() -> None:
    gpus = nvidia_smi.parse(read("h100_8gpu_535.161.08.txt"))
    assert [g.bus_id for g in gpus] == [
        "00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
        "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0"]
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {(g.driver_version, g.cuda_version) for g in gpus} == {("535.161.08", "12.2")}
    first = gpus[0]
    assert first.uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert (first.serial, first.vbios) == ("1650124031592", "96.00.74.00.0D")
    assert (first.ecc_mode_current, first.ecc_mode_pending) == ("Enabled", "Enabled")
    # SRAM Correctable + DRAM Correctable; SRAM Uncorrectable Parity + SEC-DED + DRAM: all 0
    for g in gpus:
        assert (g.ecc_volatile_correctable, g.ecc_volatile_uncorrectable) == (0, 0)
        assert (g.ecc_aggregate_correctable, g.ecc_aggregate_uncorrectable) == (0, 0)
        assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable) == (0, 0)
        assert (g.remapped_rows_pending, g.remapped_rows_failure) == (False, False)
        # "HW Slowdown : Active" and, under it, "HW Power Brake Slowdown : Active"
        assert g.clock_event_reasons_active == ("HW Slowdown", "HW Power Brake Slowdown")
    # Retired Pages: N/A on Hopper (rows are remapped instead)
    assert (first.retired_pages_single_bit, first.retired_pages_double_bit,
            first.retired_pages_pending) == (None, None, None)
    assert [g.power_draw_w for g in gpus] == [67.74, 69.52, 70.55, 71.37, 70.33, 70.21, 71.05,
                                              72.27]
    assert (first.power_limit_current_w, first.power_limit_requested_w,
            first.power_limit_default_w, first.power_limit_min_w,
            first.power_limit_max_w) == (700.0, 700.0, 700.0, 200.0, 700.0)
    assert first.power_limit_enforced_w is None  # not printed by this driver
    assert (first.pcie_gen_current, first.pcie_gen_max, first.pcie_gen_device_max,
            first.pcie_gen_host_max) == (5, 5, 5, 5)
    assert (first.pcie_width_current, first.pcie_width_max) == (16, 16)
    assert (first.sm_clock_mhz, first.sm_clock_max_mhz) == (86.0, 1980.0)
    assert (first.memory_clock_mhz, first.memory_clock_max_mhz) == (2619.0, 2619.0)
    assert (first.gpu_temp_c, first.memory_temp_c) == (29.0, 39.0)


def test_a10_with_remapped_rows_pending() -> None:
    (gpu,) = nvidia_smi.parse(read("a10_remapped_rows_535.129.03.txt"))
    assert (gpu.name, gpu.bus_id, gpu.driver_version) == (
        "NVIDIA A10", "00000000:07:00.0", "535.129.03")
    assert gpu.remapped_rows_correctable == 0
    assert gpu.remapped_rows_uncorrectable == 4
    assert gpu.remapped_rows_pending is True
    assert gpu.remapped_rows_failure is False
    assert gpu.clock_event_reasons_active == ("Idle",)
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable) == (0, 0)
    assert gpu.pcie_gen_host_max is None  # "Host Max : N/A"
    assert (gpu.power_draw_w, gpu.power_limit_current_w) == (43.89, 150.0)


def test_v100_older_driver_with_throttle_reasons() -> None:
    (gpu,) = nvidia_smi.parse(read("v100_throttle_reasons_418.67.txt"))
    assert (gpu.name, gpu.bus_id) == ("Tesla V100-SXM2-32GB", "00000004:04:00.0")
    assert (gpu.driver_version, gpu.cuda_version) == ("418.67", "10.1")
    assert gpu.uuid == "GPU-fd2f54d7-d5ed-ea23-b43e-eb240a7c7193"
    assert gpu.clock_event_reasons_active == ("Idle",)  # under "Clocks Throttle Reasons"
    assert gpu.ecc_mode_current == "Enabled"  # spelled "Ecc Mode" by this driver
    # "Single Bit ... Total : 0" and "Double Bit ... Total : 0"
    assert (gpu.ecc_volatile_correctable, gpu.ecc_volatile_uncorrectable) == (0, 0)
    assert (gpu.ecc_aggregate_correctable, gpu.ecc_aggregate_uncorrectable) == (0, 0)
    assert (gpu.retired_pages_single_bit, gpu.retired_pages_double_bit,
            gpu.retired_pages_pending) == (0, 0, False)
    assert gpu.remapped_rows_uncorrectable is None  # no such section before Ampere
    assert (gpu.power_draw_w, gpu.power_limit_current_w, gpu.power_limit_enforced_w,
            gpu.power_limit_max_w) == (39.78, 300.0, 300.0, 300.0)
    assert gpu.power_limit_requested_w is None
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (3, 3)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (2, 16)  # a degraded link
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (135.0, 1530.0)
    assert (gpu.gpu_temp_c, gpu.memory_temp_c) == (38.0, 34.0)


def test_dumps_of_several_nodes_keep_each_header() -> None:
    text = read("v100_throttle_reasons_418.67.txt") + "\n" + read(
        "a10_remapped_rows_535.129.03.txt")
    gpus = nvidia_smi.parse(text)
    assert [(g.name, g.driver_version, g.cuda_version) for g in gpus] == [
        ("Tesla V100-SXM2-32GB", "418.67", "10.1"), ("NVIDIA A10", "535.129.03", "12.2")]


def test_xml_a100_in_mig_mode() -> None:
    (gpu,) = nvidia_smi.parse(read("a100_sxm4_mig_535.54.03.xml"))
    assert (gpu.name, gpu.bus_id) == ("NVIDIA A100-SXM4-80GB", "00000000:01:00.0")
    assert (gpu.driver_version, gpu.cuda_version) == ("535.54.03", "12.2")
    assert (gpu.uuid, gpu.serial, gpu.vbios) == (
        "GPU-513536b6-7d19-9063-b049-1e69664bb298", "1650522003820", "92.00.36.00.02")
    assert gpu.clock_event_reasons_active == ()  # every reason "Not Active"
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_correctable) == (0, 0)
    assert gpu.remapped_rows_pending is None  # <remapped_rows>N/A</remapped_rows>
    assert (gpu.power_draw_w, gpu.power_limit_current_w, gpu.power_limit_requested_w) == (
        67.03, 500.0, 500.0)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_host_max, gpu.pcie_width_current) == (4, 4, 16)
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz) == (1275.0, 1410.0)
    assert (gpu.gpu_temp_c, gpu.memory_temp_c) == (27.0, 44.0)


def test_xml_t4_with_throttle_reasons_and_retired_pages() -> None:
    (gpu,) = nvidia_smi.parse(read("t4_throttle_reasons_515.105.01.xml"))
    assert (gpu.name, gpu.driver_version) == ("Tesla T4", "515.105.01")
    assert gpu.clock_event_reasons_active == ()  # <clocks_throttle_reasons>, all Not Active
    assert (gpu.retired_pages_single_bit, gpu.retired_pages_double_bit,
            gpu.retired_pages_pending) == (0, 0, False)
    assert (gpu.power_limit_current_w, gpu.power_limit_enforced_w, gpu.power_limit_min_w) == (
        70.0, 70.0, 60.0)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert gpu.memory_temp_c is None


def test_xml_a10g_remapped_rows_and_reason_names_match_the_text() -> None:
    (gpu,) = nvidia_smi.parse(read("a10g_remapped_rows.xml"))
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable,
            gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (0, 0, False, False)
    # <clocks_throttle_reason_gpu_idle>Active</...> is the text dump's "Idle"
    assert gpu.clock_event_reasons_active == ("Idle",)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (1, 4)


def test_garbage_fails_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no GPU section"):
        nvidia_smi.parse("hello\nworld\n")
    with pytest.raises(ValueError, match="not nvidia-smi -q -x XML"):
        nvidia_smi.parse("<html><body/>")
    with pytest.raises(ValueError, match="not nvidia-smi -q -x XML"):
        nvidia_smi.parse("<nvidia_smi_log><gpu>")
    text = read("h100_8gpu_535.161.08.txt").replace("67.74 W", "lots W", 1)
    with pytest.raises(ValueError, match=r"GPU 00000000:19:00.0 \(line 9\): GPU Power Readings "
                                         r"> Power Draw: 'lots W' is not a number"):
        nvidia_smi.parse(text)
