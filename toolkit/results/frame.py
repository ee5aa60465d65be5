"""Runs as a pandas DataFrame: one row per run, typed columns, for collect and for notebooks.

    import toolkit.results
    runs = toolkit.results.load("results/bert")
    runs[runs.status == "ok"].groupby("gpus_per_node").throughput_sps.median()

The columns are `parsers.rows.RUN_COLUMNS` in that order (integers as pandas' nullable Int64,
figures as Float64, text as string), then the extra figures the runs carry (TFLOP/s, MFU,
telemetry, device), sorted by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from parsers.rows import RUN_COLUMNS, RunRow
from toolkit.results.scan import collect_runs

INT_COLUMNS = ("repeat", "num_nodes", "gpus_per_node", "batch_size_per_device",
               "global_batch_size", "dp", "tp", "pp", "warmup_iterations",
               "measured_iterations")
FLOAT_COLUMNS = ("throughput_sps", "step_time_median_s", "peak_memory_mib", "loss_first",
                 "loss_last")


def runs_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Run rows (`RunRow.to_dict()`) as a typed DataFrame."""
    records = [dict(r) for r in rows]
    extra = sorted({k for r in records for k in r} - set(RUN_COLUMNS))
    frame = pd.DataFrame.from_records(records, columns=[*RUN_COLUMNS, *extra])
    types: dict[str, str] = {c: "Int64" for c in INT_COLUMNS}
    types.update({c: "Float64" for c in FLOAT_COLUMNS})
    types.update({c: "string" for c in RUN_COLUMNS if c not in types})
    for column, dtype in types.items():
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
        frame[column] = frame[column].astype(dtype)
    return frame


def load(root: str | Path, jobs: int = 0) -> pd.DataFrame:
    """Every run of the results directory `root`, one row each (finished, failed and still
    running ones; `status` tells them apart). Result files that cannot be read are left out of
    the figures as collect leaves them out; `toolkit.collect` lists them."""
    rows, _ = collect_runs(Path(root), jobs)
    return runs_frame(r.to_dict() for r in rows)


SYSTEM_COLUMNS = ("gpu_model", "partition")


def system_frame(rows: Sequence[RunRow]) -> pd.DataFrame:
    """`runs_frame` of run rows plus where each ran: `gpu_model` (meta.json's device, else the
    row's `device`), `partition` and `hosts` (blank where unknown)."""
    frame = runs_frame(r.to_dict() for r in rows)
    frame["gpu_model"] = pd.Series(
        [r.provenance.get("gpu_model") or r.extra.get("device") or "" for r in rows],
        dtype="string", index=frame.index)
    frame["partition"] = pd.Series([r.provenance.get("partition") or "" for r in rows],
                                   dtype="string", index=frame.index)
    frame["hosts"] = pd.Series([r.provenance.get("hosts") or "" for r in rows],
                               dtype="string", index=frame.index)
    return frame
