"""Finished runs -> the store, each once.

A run's identity (`run_key`) is a hash of its case's config hash, its case id and how the run
itself is known: the run's uuid when meta.json has one, else its repeat and start time
(recorded to the microsecond by rank 0). A run read back from its own MLLOG export (collect's
`mllog/<case>/r<k>.log`) carries the same three in its `trainbench_run` event and gets the same
key. Any other foreign log is known by its repeat and the sha256 of its bytes. Neither the
results directory nor the log's path is part of it: a directory copied or moved elsewhere, a
copied log tree, or a run imported from its export adds nothing. A foreign log's run stored
under `legacy_key` (its resolved path: the key of stores written by earlier versions) is
recognised too. `run_key` is unique in the table and rows go in with `INSERT ... ON CONFLICT
DO NOTHING` (PostgreSQL: after a COPY into a temporary table), so a second ingest of the same
runs, or two concurrent ones, store each run once.

Only finished runs go in (status ok, failed, or how the scheduler ended them); a run that is
still `incomplete` is left for a later collect, which would otherwise find it already stored.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects import sqlite

from parsers import logtext, mllog
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


#: The fields of an MLLOG export's `trainbench_run` event that say which run it was.
IDENTITY_FIELDS = ("config_hash", "run_uuid", "started_s")
_READ_BYTES = 1 << 20


def _identity(config_hash: str, prov: dict[str, Any], repeat: int) -> str | None:
    if prov.get("run_uuid"):
        return f"uuid {prov['run_uuid']}"
    if prov.get("started_s") is not None:
        return f"r{repeat} at {prov['started_s']!r}"
    return None


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_BYTES):
            yield chunk


def log_identity(path: Path) -> tuple[str, dict[str, Any]]:
    """(sha256 of a foreign log's bytes, the run identity its MLLOG `trainbench_run` event
    carries, or {}); the file is streamed, and only a line holding that event is decoded."""
    digest = hashlib.sha256()
    found: dict[str, Any] = {}
    marker = f'"key": "{mllog.TRAINBENCH_RUN}"'.encode()
    tail = b""
    for chunk in _chunks(path):
        digest.update(chunk)
        if found:
            continue
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()[-_READ_BYTES:]
        for line in lines:
            if marker in line and mllog.TOKEN.encode() in line:
                found = _run_event(line)
                if found:
                    break
    if not found and marker in tail:
        found = _run_event(tail)
    return digest.hexdigest(), found


def _run_event(line: bytes) -> dict[str, Any]:
    text = line.decode("utf-8", "replace")
    try:
        event = logtext.json_value(text[text.index(mllog.TOKEN) + len(mllog.TOKEN):])
    except ValueError:
        return {}
    value = event.get("value") if isinstance(event, dict) else None
    if not isinstance(value, dict) or not isinstance(value.get("config_hash"), str):
        return {}
    return {k: value[k] for k in IDENTITY_FIELDS
            if isinstance(value.get(k), (str, int, float)) and not isinstance(value[k], bool)}


def legacy_key(row: RunRow) -> str | None:
    """The key an older trainbench gave a foreign log's run (its resolved path), or None."""
    if row.provenance:
        return None
    return run_key("", row.case_id, f"log {Path(row.source).resolve()} r{row.repeat}")


def record(row: RunRow, results_dir: str, now: float) -> dict[str, Any]:
    """The store's row for one run row."""
    prov = dict(row.provenance)
    origin = "trainbench" if prov else "imported"
    identity = _identity(str(prov.get("config_hash") or ""), prov, row.repeat)
    if identity is None and not prov:
        try:
            digest, carried = log_identity(Path(row.source))
        except OSError:
            digest, carried = "", {}
        prov.update(carried)
        identity = (_identity(str(carried.get("config_hash")), carried, row.repeat)
                    if carried else None)
        if identity is None and digest:
            identity = f"log sha256 {digest} r{row.repeat}"
    if identity is None:
        identity = f"log {Path(row.source).resolve()} r{row.repeat}"
    config_hash = str(prov.get("config_hash") or "")
    started = prov.get("started_s")
    return {
        "run_key": run_key(config_hash, row.case_id, identity),
        "origin": origin,
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
        "started_s": float(started) if isinstance(started, (int, float)) else now,
        "results_dir": results_dir, "source": row.source, "ingested_s": now,
        "executor": row.extra.get("executor") or None,
        "oversubscribed": row.extra.get("oversubscribed") or None,
        "host_crowded": row.extra.get("host_crowded") or None,
    }


def ingest(engine: Engine, rows: Iterable[RunRow], results_dir: Path | str) -> IngestResult:
    """Store every finished run of `rows` (read from `results_dir`, or from imported logs) that
    the store does not hold yet; one transaction. `StoreError` when the store cannot take them."""
    now = time.time()
    where = str(Path(results_dir).resolve())
    records: dict[str, dict[str, Any]] = {}
    legacy: dict[str, str] = {}
    unfinished = 0
    for row in rows:
        if row.status == STATUS_INCOMPLETE:
            unfinished += 1
            continue
        rec = record(row, where, now)
        records.setdefault(rec["run_key"], rec)
        old = legacy_key(row)
        if old is not None and old != rec["run_key"]:
            legacy[old] = rec["run_key"]
    added = 0
    url = engine.url.render_as_string(hide_password=False)
    with failures(url, "cannot store the runs"), writing(engine) as conn:
        held = _stored_keys(conn, list(legacy))
        batch = [rec for key, rec in records.items()
                 if key not in {legacy[old] for old in held}]
        if conn.dialect.name == "postgresql" and batch:
            added = _copy_in(conn, batch)
        else:
            statement = sqlite.insert(runs).on_conflict_do_nothing(index_elements=["run_key"])
            for start in range(0, len(batch), CHUNK_ROWS):
                chunk = batch[start:start + CHUNK_ROWS]
                added += len(conn.execute(statement.returning(runs.c.id), chunk).all())
    return IngestResult(added=added, already=len(records) - added, unfinished=unfinished)


def _stored_keys(conn: Connection, keys: list[str]) -> set[str]:
    """Those of `keys` the store holds."""
    held: set[str] = set()
    for start in range(0, len(keys), CHUNK_ROWS):
        chunk = keys[start:start + CHUNK_ROWS]
        held.update(conn.execute(select(runs.c.run_key).where(runs.c.run_key.in_(chunk)))
                    .scalars())
    return held


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
