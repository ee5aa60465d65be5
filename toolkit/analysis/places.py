"""Where a run ran, in words, so that history and compare never mix runs of different
executors, sites and machines without saying so. Pure; reads the store's (or a results
directory's) run columns.

A run's place is its executor (`local`, `slurm`; `imported` for a foreign log), its site profile,
its machine (the hosts of a run outside Slurm; the partition of a Slurm run, whose nodes change
from job to job) and its device: `local on vm (cpu (1 threads))`, `slurm site dgx partition
batch (NVIDIA H100 80GB HBM3)`. A column a run does not have is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

PLACE_COLUMNS = ("executor", "site", "partition", "hosts", "gpu_model")


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) or \
        value is pd.NA else str(value)


def place_of(run: Mapping[str, Any]) -> str:
    """One run's place (see the module)."""
    executor = _text(run.get("executor")) or "imported"
    parts = [executor]
    site = _text(run.get("site"))
    if site:
        parts.append(f"site {site}")
    partition, hosts = _text(run.get("partition")), _text(run.get("hosts"))
    if executor == "slurm":
        if partition:
            parts.append(f"partition {partition}")
    elif hosts:
        parts.append(f"on {hosts}")
    device = _text(run.get("gpu_model"))
    return " ".join(parts) + (f" ({device})" if device else "")


def places(runs: pd.DataFrame) -> pd.Series:
    """Each run's place, as a string Series on `runs`' index."""
    columns = [c for c in PLACE_COLUMNS if c in runs]
    return pd.Series([place_of(r) for r in runs[columns].to_dict("records")],
                     index=runs.index, dtype="string")
