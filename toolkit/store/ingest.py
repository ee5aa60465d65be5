"""Finished runs -> the store, each once.

A run's identity (`run_key`) is a hash of its case's config hash, its case id and how the run
itself is known: the run's uuid when meta.json has one, else its repeat and start time
(recorded to the microsecond by rank 0), else (a foreign log) the resolved path of its log
file. The results directory is not part of it: a directory copied or moved elsewhere and
collected again adds nothing. `run_key` is unique in the table and rows go in with
`INSERT ... ON CONFLICT DO NOTHING` (PostgreSQL: after a COPY into a temporary table), so a
second ingest of the same runs, or two concurrent ones, store each run once.

Only finished runs go in (status ok, failed, or how the scheduler ended them); a run that is
still `incomplete` is left for a later collect, which would otherwise find it already stored.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import sqlite

from parsers.rows import STATUS_INCOMPLETE, RunRow
from toolkit.store.db import failures, writing
from toolkit.store.schema import runs

CHUNK_ROWS = 5000
"""Rows per INSERT statement batch (bounded memory for 100,000-run trees)."""


@dataclass(frozen=True)
class IngestResult:
    added: int
    already: int
    """Runs that were in the store before (this or another results directory)."""
    unfinished: int
    """Runs left out because they are still running (status incomplete)."""


def run_key(config_hash: str, case_id: str, identity: str) -> str:
    return hashlib.sha256(f"{config_hash}\0{case_id}\0{identity}".encode()).hexdigest()


def record(row: RunRow, results_dir: str, now: float) -> dict[str, Any]:
    """The store's row for one run row."""
    prov = row.provenance
    config_hash = str(prov.get("config_hash") or "")
    started = prov.get("started_s")
    if prov.get("run_uuid"):
        identity = f"uuid {prov['run_uuid']}"
    elif started is not None:
        identity = f"r{row.repeat} at {started!r}"
    else:
        identity = f"log {Path(row.source).resolve()} r{row.repeat}"
    return {
        "run_key": run_key(config_hash, row.case_id, identity),
        "origin": "trainbench" if prov else "imported",
        "config_hash": config_hash, "case_id": row.case_id, "repeat": row.repeat,
        "status": row.status, "framework": row.framework, "model": row.model,
        "precision": row.precision, "variant": row.variant, "num_nodes": row.num_nodes,
        "gpus_per_node": row.gpus_per_node, "batch_size_per_device": row.batch_size_per_device,
        "throughput_sps": row.throughput_sps, "step_time_median_s": row.step_time_median_s,
        "peak_memory_mib": row.peak_memory_mib, "loss_first": row.loss_first,
        "loss_last": row.loss_last,
        "gpu_model": prov.get("gpu_model") or row.extra.get("device"),
        **{k: prov.get(k) for k in ("driver", "cuda", "nccl", "framework_version",
                                    "container_image", "hosts", "clocks", "git_commit",
                                    "partition", "site")},
        "started_s": started if started is not None else now,
        "results_dir": results_dir, "source": row.source, "ingested_s": now,
    }


def ingest(engine: Engine, rows: Iterable[RunRow], results_dir: Path | str) -> IngestResult:
    """Store every finished run of `rows` (read from `results_dir`, or from imported logs) that
    the store does not hold yet; one transaction. `StoreError` when the store cannot take them."""
    now = time.time()
    where = str(Path(results_dir).resolve())
    records: dict[str, dict[str, Any]] = {}
    unfinished = 0
    for row in rows:
        if row.status == STATUS_INCOMPLETE:
            unfinished += 1
            continue
        rec = record(row, where, now)
        records.setdefault(rec["run_key"], rec)
    batch = list(records.values())
    added = 0
    url = engine.url.render_as_string(hide_password=False)
    with failures(url, "cannot store the runs"), writing(engine) as conn:
        if conn.dialect.name == "postgresql" and batch:
            added = _copy_in(conn, batch)
        else:
            statement = sqlite.insert(runs).on_conflict_do_nothing(index_elements=["run_key"])
            for start in range(0, len(batch), CHUNK_ROWS):
                chunk = batch[start:start + CHUNK_ROWS]
                added += len(conn.execute(statement.returning(runs.c.id), chunk).all())
    return IngestResult(added=added, already=len(batch) - added, unfinished=unfinished)


def _copy_in(conn: Connection, batch: list[dict[str, Any]]) -> int:
    """PostgreSQL: COPY the rows into a temporary table, then one INSERT ... SELECT ... ON
    CONFLICT DO NOTHING (several times faster than multi-row INSERTs); the rows added."""
    columns = list(batch[0])
    names = ", ".join(columns)
    conn.exec_driver_sql(f"CREATE TEMPORARY TABLE runs_in ON COMMIT DROP AS SELECT {names} "
                         "FROM runs WITH NO DATA")
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY runs_in ({names}) FROM STDIN") as copy:
        for record in batch:
            copy.write_row([record[c] for c in columns])
    result = conn.exec_driver_sql(
        f"INSERT INTO runs ({names}) SELECT {names} FROM runs_in "
        "ON CONFLICT (run_key) DO NOTHING")
    return int(result.rowcount)
