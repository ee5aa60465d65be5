"""Runs as a pandas DataFrame: one row per run, typed columns, for collect and for notebooks.

    import toolkit.results
    runs = toolkit.results.load("results/bert")
    runs[runs.status == "ok"].groupby("gpus_per_node").throughput_sps.median()

The columns are `parsers.rows.RUN_COLUMNS` in that order (integers as pandas' nullable Int64,
figures as Float64, text as string), then the extra figures the runs carry (TFLOP/s, MFU,
telemetry, device), sorted by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from parsers.rows import RUN_COLUMNS, RunRow
from toolkit.analysis.ab import (
    SOURCE_CASE,
    ConfigDifference,
    config_differences,
    defaulted_settings,
)
from toolkit.results.layout import case_config
from toolkit.results.scan import collect_runs
from toolkit.spec.case import Case

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
    row's `device`), `partition`, `hosts` and the case's `config_hash` (blank where unknown)."""
    frame = runs_frame(r.to_dict() for r in rows)
    frame["gpu_model"] = pd.Series(
        [r.provenance.get("gpu_model") or r.extra.get("device") or "" for r in rows],
        dtype="string", index=frame.index)
    frame["partition"] = pd.Series([r.provenance.get("partition") or "" for r in rows],
                                   dtype="string", index=frame.index)
    frame["hosts"] = pd.Series([r.provenance.get("hosts") or "" for r in rows],
                               dtype="string", index=frame.index)
    frame["config_hash"] = pd.Series([r.provenance.get("config_hash") or "" for r in rows],
                                     dtype="string", index=frame.index)
    return frame


#: Settings of a case.json that are not what is measured (the config hash leaves them out).
UNHASHED_SETTINGS = ("repeats", "slurm", "name", "watchdog", "preflight", "profile",
                     "container", "site", "command.workdir", "command.stop_after_window")


def config_differences_of(
        a: pd.DataFrame, b: pd.DataFrame
) -> Callable[[str, frozenset[str], frozenset[str]], ConfigDifference]:
    """For `compare_runs`: how a case's configuration differs between the runs `a` and `b`,
    from the case.json of the results directory (`results_dir` column) each side's first run
    of the case came from: `config <hash> vs <hash>: key: A vs B; ...`, or the hashes alone
    where a side's case.json is not at hand. Where the only measured settings that differ are
    absent from one case.json and at their `Case` default in the other (a record made before
    they existed), the same configuration, with a note naming them."""

    def where(runs: pd.DataFrame, case_id: str) -> tuple[str, str] | None:
        """(results directory, the id its case.json is under) of the case's first run."""
        if "results_dir" not in runs:
            return None
        mine = runs[runs["case_id"] == case_id].dropna(subset=["results_dir"])
        if mine.empty:
            return None
        first = mine.iloc[0]
        source = first.get(SOURCE_CASE) if SOURCE_CASE in mine else None
        return str(first["results_dir"]), str(source) if isinstance(source, str) else case_id

    def measured(keys: list[str]) -> list[str]:
        return [k for k in keys if not k.split(":")[0].startswith(UNHASHED_SETTINGS)]

    def describe(case_id: str, hashes_a: frozenset[str],
                 hashes_b: frozenset[str]) -> ConfigDifference:
        head = f"config {', '.join(sorted(hashes_a))} vs {', '.join(sorted(hashes_b))}"
        at_a, at_b = where(a, case_id), where(b, case_id)
        config_a = case_config(Path(at_a[0]), at_a[1]) if at_a else None
        config_b = case_config(Path(at_b[0]), at_b[1]) if at_b else None
        if config_a is None or config_b is None:
            return ConfigDifference(
                f"{head}; the settings that differ are unknown (no case.json at hand)")
        defaults = Case().to_dict()
        keys = measured(config_differences(config_a, config_b, defaults))
        defaulted = measured(defaulted_settings(config_a, config_b, defaults))
        if not keys and defaulted:
            return ConfigDifference(
                "same configuration (settings absent from one record are at their defaults "
                f"in the other: {', '.join(defaulted)})", same=True)
        return ConfigDifference(f"{head}: {'; '.join(keys) or 'no setting in case.json differs'}")

    return describe
