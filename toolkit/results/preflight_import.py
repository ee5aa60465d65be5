"""Outputs people already have, as preflight rows (the columns of
`toolkit.results.preflight.read_preflight`), so they are judged and tabled like a preflight's:

- nccl-tests (`all_reduce_perf` ... text, or its `-J` JSON): one `collective` row per size and
  host, busbw of the out-of-place run (in-place where only that ran); scope `job` when the
  ranks span several hosts, else `node`; the group names the hosts, so several files (pairs of
  nodes, say) are peers of one another;
- `nvidia-smi -q` (text or `-x` XML): `health` rows per GPU. A dump is read at rest, so the PCIe
  generation it shows is not judged (GPUs lower it when idle) but the width is (a link keeps
  its width); an active hardware slowdown reason counts as slowdown in every sample.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from parsers import logtext, nccl_tests, nvidia_smi
from toolkit.results.preflight import COLUMNS

HW_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown")


class ImportError_(ValueError):
    """A file that is neither nccl-tests output nor an nvidia-smi dump (names the file)."""


def read_any(path: Path) -> pd.DataFrame:
    """Rows of one file, by what it holds; ImportError_ naming the file and why."""
    return read_file(path)[0]


def read_file(path: Path) -> tuple[pd.DataFrame, str | None]:
    """(rows of one file, a note that lines over the limit were skipped or `None`), read within
    the limits of `parsers.logtext`: a JSON or XML document whole, text line by line.
    ImportError_ naming the file and why."""
    note = None
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace").lstrip()
        document = (head.startswith(("{", "<?xml")) or "<nvidia_smi_log" in head)
        if document:
            text = logtext.read_document(path)
        else:
            read = logtext.read_lines(path)
            text = read.text
            if read.long_lines:
                note = logtext.long_lines_note(read.long_lines, read.max_line_chars)
    except OSError as err:
        raise ImportError_(f"{path}: cannot read: {err.strerror or err}") from None
    except logtext.ReadError as err:
        raise ImportError_(f"{path}: {err}") from None
    try:
        if "NVSMI LOG" in head or head.startswith("<?xml") or "<nvidia_smi_log" in head:
            return smi_rows(nvidia_smi.parse(text), path.stem), note
        if head.startswith("{"):
            return nccl_rows([nccl_tests.parse_json(text)], path.stem), note
        return nccl_rows(nccl_tests.parse_all(text), path.stem), note
    except ValueError as err:
        skipped = f" ({note})" if note else ""
        raise ImportError_(f"{path}: neither an nvidia-smi -q dump nor nccl-tests output "
                           f"that could be read: {err}{skipped}") from None


def nccl_rows(runs: list[nccl_tests.NcclTestsRun], name: str) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for run in runs:
        hosts = list(dict.fromkeys(r.host for r in run.ranks)) or [name]
        device = next((r.device_name for r in run.ranks if r.device_name), None)
        group = "+".join(hosts)
        for row in run.rows:
            result = row.out_of_place or row.in_place
            if result is None or not math.isfinite(result.busbw_gbps):
                continue  # nccl-tests writes "nan" for what it did not measure: no figure
            detail = {"bytes": row.size_bytes, "ranks": len(run.ranks) or None,
                      "algbw_gbps": result.algbw_gbps, "time_us": result.time_us,
                      "source": f"nccl-tests {name}", "dtype": row.dtype}
            for host in hosts:
                rows.append({"tag": name, "node": host, "host": host, "rank": None,
                             "device": device, "probe": "collective",
                             "metric": run.op or "collective", "value": result.busbw_gbps,
                             "unit": "GB/s", "scope": "job" if len(hosts) > 1 else "node",
                             "group": group, "bytes": row.size_bytes, "detail": detail})
    return pd.DataFrame(rows, columns=COLUMNS)


def smi_rows(gpus: list[nvidia_smi.NvidiaSmiGpu], name: str) -> pd.DataFrame:
    rows: list[dict[str, Any]] = []
    for index, g in enumerate(gpus):
        base = {"tag": name, "node": name, "host": name, "rank": index, "local_rank": index,
                "device": g.name, "gpu_uuid": g.uuid, "gpu_bus_id": g.bus_id,
                "probe": "health", "scope": "gpu"}
        reasons = g.clock_event_reasons_active
        values: dict[str, Any] = {
            "ecc_uncorrected_volatile": g.ecc_volatile_uncorrectable,
            "ecc_corrected_volatile": g.ecc_volatile_correctable,
            "ecc_uncorrected_aggregate": g.ecc_aggregate_uncorrectable,
            "ecc_corrected_aggregate": g.ecc_aggregate_correctable,
            "retired_pages_single_bit": g.retired_pages_single_bit,
            "retired_pages_double_bit": g.retired_pages_double_bit,
            "retired_pages_pending": g.retired_pages_pending,
            "remapped_rows_correctable": g.remapped_rows_correctable,
            "remapped_rows_uncorrectable": g.remapped_rows_uncorrectable,
            "remapped_rows_pending": g.remapped_rows_pending,
            "remapped_rows_failure": g.remapped_rows_failure,
            "pcie_gen_current": g.pcie_gen_current,
            "pcie_gen_max": min(v for v in (g.pcie_gen_max, g.pcie_gen_host_max) if v)
            if (g.pcie_gen_max or g.pcie_gen_host_max) else None,
            "pcie_width_under_load": g.pcie_width_current,
            "pcie_width_max": g.pcie_width_max,
            "sm_clock_max_mhz": g.sm_clock_max_mhz,
            "hw_slowdown_share": None if reasons is None else
            float(any(r in HW_REASONS for r in reasons)),
        }
        details: dict[str, dict[str, Any]] = {
            "hw_slowdown_share": {"reasons_seen": {r: 1.0 for r in reasons or ()},
                                  "snapshot": True},
            "power_limit_w": {"default_w": g.power_limit_default_w}}
        limit = g.power_limit_enforced_w or g.power_limit_current_w
        values["power_limit_w"] = limit
        for metric, value in values.items():
            rows.append({**base, "metric": metric,
                         "value": None if value is None else float(value),
                         "detail": details.get(metric, {})})
    return pd.DataFrame(rows, columns=COLUMNS)
