"""One run, one row in the store, whichever form it arrives in: its results directory, the
MLLOG export collect wrote of it (in either order), a copy of a foreign log tree, a foreign
log stored under the key an earlier version gave it. On SQLite and on a real PostgreSQL."""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import func, select, text, update

from toolkit import collect
from toolkit.results.importer import import_logs
from toolkit.store.db import open_store, writing
from toolkit.store.ingest import ingest, legacy_key, log_identity, record
from toolkit.store.query import load_runs, parse_query
from toolkit.store.schema import runs

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "tests" / "data" / "results_quickstart"
DLPERF = ROOT / "tests" / "data" / "dlperf_tree"


def count(url: str) -> int:
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs)).scalar_one())
    finally:
        engine.dispose()


def _report(out: Path) -> str:
    return (out / "report.md").read_text()


def _exported(tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the quickstart results, collected without a store (so with its MLLOG
    export), and the arguments that import that export into a store."""
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    assert collect.main([str(results), "--quiet", "--no-plots", "--no-store"]) == 0
    exported = sorted((results / "mllog").rglob("*.log"))
    assert len(exported) == 4
    _, carried = log_identity(exported[0])
    assert carried["config_hash"] and carried["started_s"] > 1.7e9
    return results, ["--import-logs", str(results / "mllog"), "--quiet", "--no-plots"]


def test_an_mllog_export_imported_after_its_runs_adds_nothing(store_url: str,
                                                               tmp_path: Path) -> None:
    results, imported = _exported(tmp_path)
    assert collect.main([str(results), "--quiet", "--no-plots", "--store", store_url]) == 0
    assert "(4 run(s) added, 0 already there)" in _report(results)
    assert collect.main([*imported, "--store", store_url, "--out", str(tmp_path / "o")]) == 0
    assert "(0 run(s) added, 4 already there)" in _report(tmp_path / "o")
    assert count(store_url) == 4


def test_runs_collected_after_their_mllog_export_add_nothing(store_url: str,
                                                             tmp_path: Path) -> None:
    results, imported = _exported(tmp_path)
    # the export first: its four runs are stored, with their figures...
    assert collect.main([*imported, "--store", store_url, "--out", str(tmp_path / "o")]) == 0
    assert "(4 run(s) added, 0 already there)" in _report(tmp_path / "o")
    # ...then the results directory they came from adds nothing
    assert collect.main([str(results), "--quiet", "--no-plots", "--store", store_url]) == 0
    assert "(0 run(s) added, 4 already there)" in _report(results)
    assert count(store_url) == 4


def test_a_copied_foreign_log_tree_adds_nothing(store_url: str, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "logs"
    shutil.copytree(DLPERF, copy)
    engine = open_store(store_url)
    try:
        first = ingest(engine, import_logs(DLPERF).rows, DLPERF)
        assert (first.added, first.already) == (23, 0)
        again = ingest(engine, import_logs(copy).rows, copy)
        assert (again.added, again.already) == (0, 23)
    finally:
        engine.dispose()
    assert count(store_url) == 23


def test_a_foreign_log_stored_under_its_earlier_key_is_recognised(store_url: str) -> None:
    """Stores written before runs were known by their content hold a foreign log's run under
    the hash of its path: ingesting the same log again adds nothing."""
    rows = [r for r in import_logs(DLPERF).rows if r.status == "ok"]
    engine = open_store(store_url)
    try:
        assert ingest(engine, rows, DLPERF).added == len(rows)
        with writing(engine) as conn:
            for row in rows:
                key = record(row, str(DLPERF), 0.0)["run_key"]
                conn.execute(update(runs).where(runs.c.run_key == key)
                             .values(run_key=legacy_key(row)))
        again = ingest(engine, rows, DLPERF)
        assert (again.added, again.already) == (0, len(rows))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM runs")).scalar_one() == len(rows)
        assert len(load_runs(engine, parse_query("origin=imported"))) == len(rows)
    finally:
        engine.dispose()
