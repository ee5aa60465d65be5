"""The results store on SQLite and on a real PostgreSQL: idempotent ingest (also of a copied
results directory), concurrent ingest by real processes, migrations, queries, and collect
storing its runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, inspect, select, text

from toolkit import collect
from toolkit.results.scan import collect_runs
from toolkit.store.db import HEAD, MIGRATIONS, default_path, open_store, resolve, revision, upgrade
from toolkit.store.ingest import ingest
from toolkit.store.query import QueryError, load_runs, parse_filters, parse_query
from toolkit.store.schema import metadata, runs

from .conftest import synthetic_rows

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "tests" / "data" / "results_quickstart"


def count(url: str) -> int:
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs)).scalar_one())
    finally:
        engine.dispose()


def test_ingest_is_idempotent_and_a_copied_directory_adds_nothing(store_url: str,
                                                                   tmp_path: Path) -> None:
    rows, _ = collect_runs(QUICKSTART, 1)
    engine = open_store(store_url)
    try:
        first = ingest(engine, rows, QUICKSTART)
        assert (first.added, first.already) == (4, 0)
        again = ingest(engine, rows, QUICKSTART)
        assert (again.added, again.already) == (0, 4)
        copy = tmp_path / "copy"
        shutil.copytree(QUICKSTART, copy)
        copied, _ = collect_runs(copy, 1)
        assert ingest(engine, copied, copy).added == 0
        stored = load_runs(engine, parse_query("case=bert_base-torch-fp32-1n2g-bs8"))
    finally:
        engine.dispose()
    assert count(store_url) == 4
    assert sorted(stored["repeat"]) == [0, 1]
    assert set(stored["config_hash"]) == {"d4cb019e038d"}
    assert set(stored["cuda"]) == {"13.0"} and set(stored["hosts"]) == {"vm"}
    assert set(stored["framework_version"]) == {"2.14.1+cu130"}
    assert stored["started_s"].notna().all()


def test_unfinished_runs_wait_and_provenance_is_kept(store_url: str) -> None:
    engine = open_store(store_url)
    try:
        done = ingest(engine, synthetic_rows("a", [100.0, 101.0], driver="550.54",
                                             gpu_model="NVIDIA H200", git_commit="1a2b3c",
                                             container_image="nvcr.io/pytorch:25.01",
                                             partition="gpu", site="dgx")
                      + synthetic_rows("b", [1.0], status="incomplete"), "/r")
        assert (done.added, done.unfinished) == (2, 1)
        frame = load_runs(engine, parse_query("gpu=H200,driver=550.54,commit=1a2b3c"))
    finally:
        engine.dispose()
    assert list(frame["case_id"]) == ["a", "a"]
    assert set(frame["container_image"]) == {"nvcr.io/pytorch:25.01"}
    assert set(frame["partition"]) == {"gpu"}
    assert set(frame["site"]) == {"dgx"}


def test_queries_filter_by_provenance_and_time(store_url: str) -> None:
    engine = open_store(store_url)
    try:
        ingest(engine, synthetic_rows("a", [1.0, 2.0], start_s=1.0e9, driver="550.54",
                                      gpu_model="NVIDIA H200")
               + synthetic_rows("b", [3.0], start_s=2.0e9, driver="560.35",
                                gpu_model="NVIDIA H100 80GB HBM3"), "/r")

        def cases(query: str) -> list[str]:
            return sorted(load_runs(engine, parse_query(query))["case_id"])

        assert cases("gpu=H200") == ["a", "a"]
        assert cases("gpu=nvidia h100*") == ["b"]
        assert cases("driver=5*") == ["a", "a", "b"]
        assert cases("driver=550") == []  # exact unless a * says otherwise
        assert cases("since=2020-01-01") == ["b"]  # 1.0e9 is 2001, 2.0e9 is 2033
        assert cases("until=2020-01-01,gpu=H200") == ["a", "a"]
        assert cases("num_nodes=1") == ["a", "a", "b"]
    finally:
        engine.dispose()
    with pytest.raises(QueryError, match="no key 'speed'; valid keys: gpu, case"):
        parse_filters(["speed=fast"])
    with pytest.raises(QueryError, match="expected KEY=VALUE"):
        parse_filters(["gpu"])
    with pytest.raises(QueryError, match="expected an ISO date"):
        parse_query("since=yesterday")


INGEST_SCRIPT = textwrap.dedent("""
    import sys
    from tests.unit.store.conftest import synthetic_rows
    from toolkit.store.db import open_store
    from toolkit.store.ingest import ingest
    values = [100.0 + i for i in range(50)]
    rows = [r for c in range(40) for r in synthetic_rows(f"case{c}", values)]
    sys.stdin.readline()  # both processes start ingesting together
    done = ingest(open_store(sys.argv[1]), rows, "/same/results")
    print(done.added, done.already)
""")


def test_concurrent_ingests_by_real_processes_store_each_run_once(store_url: str) -> None:
    """Two processes open a fresh store (both migrate it) and ingest the same 2000 runs at
    once: every run is stored once, and between them they report each run added once."""
    procs = [subprocess.Popen([sys.executable, "-c", INGEST_SCRIPT, store_url], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    added = [int(o.split()[0]) for o in outs]
    already = [int(o.split()[1]) for o in outs]
    assert sum(added) == 2000 and [a + b for a, b in zip(added, already, strict=True)] == \
        [2000, 2000]
    assert count(store_url) == 2000


def test_two_collects_of_one_directory_at_once_store_each_run_once(store_url: str,
                                                                    tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    procs = [subprocess.Popen([sys.executable, "-m", "toolkit.collect", str(results), "--quiet",
                               "--no-plots", "--store", store_url, "--out",
                               str(tmp_path / f"out{i}")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert count(store_url) == 4
    notes = [(tmp_path / f"out{i}" / "report.md").read_text() for i in range(2)]
    added = [int(re.search(r"\((\d+) run\(s\) added, (\d+) already", n)[1])  # type: ignore[index]
             for n in notes]
    assert sum(added) == 4  # between them, each run added once


def test_migration_from_the_first_revision_keeps_rows_and_matches_the_schema(
        store_url: str) -> None:
    engine = open_store(store_url, migrate=False)
    try:
        upgrade(engine, "0001")
        with engine.begin() as conn:
            assert revision(conn) == "0001"
            assert "partition" not in {c["name"] for c in inspect(conn).get_columns("runs")}
            conn.execute(text(
                "INSERT INTO runs (run_key, origin, config_hash, case_id, repeat, status, "
                "framework, model, precision, variant, num_nodes, gpus_per_node, "
                "batch_size_per_device, throughput_sps, results_dir, source, ingested_s) "
                "VALUES ('k1', 'trainbench', 'h', 'old-case', 0, 'ok', 'torch', 'gpt', "
                "'fp32', '', 1, 1, 8, 123.5, '/old', '/old/r0', 0)"))
    finally:
        engine.dispose()
    engine = open_store(store_url)  # opening migrates to the newest revision
    try:
        with engine.connect() as conn:
            assert revision(conn) == HEAD
            old = conn.execute(select(runs.c.case_id, runs.c.throughput_sps,
                                      runs.c.partition)).all()
            assert [tuple(r) for r in old] == [("old-case", 123.5, None)]
            # the migrated database is what schema.py describes: no difference
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
            assert diff == []
            assert {"ix_runs_driver", "ix_runs_results_dir", "ix_runs_case_started"} <= \
                {i["name"] for i in inspect(conn).get_indexes("runs")}
        ingest(engine, synthetic_rows("new", [1.0], partition="gpu", site="c1"), "/r")
        assert list(load_runs(engine, parse_query("partition=gpu"))["case_id"]) == ["new"]
        assert list(load_runs(engine, parse_query("site=c1"))["case_id"]) == ["new"]
    finally:
        engine.dispose()


def test_head_is_the_newest_revision() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD


def test_default_store_is_a_sqlite_file_in_the_xdg_data_directory(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert default_path(env) == tmp_path / "home/.local/share/trainbench/store.sqlite"
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    assert resolve(None, env) == f"sqlite:///{tmp_path}/xdg/trainbench/store.sqlite"
    env["TRAINBENCH_STORE"] = "postgresql://team@db/bench"
    assert resolve(None, env) == "postgresql+psycopg://team@db/bench"
    assert resolve("other.sqlite", env).endswith("/other.sqlite")


def test_collect_stores_into_the_default_store_unless_told_not_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINBENCH_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    assert collect.main([str(results), "--quiet", "--no-plots", "--no-store"]) == 0
    assert not (tmp_path / "xdg").exists()
    assert collect.main([str(results), "--quiet", "--no-plots"]) == 0
    store = tmp_path / "xdg" / "trainbench" / "store.sqlite"
    assert count(str(store)) == 4
    assert "(4 run(s) added, 0 already there)" in (results / "report.md").read_text()
    assert collect.main([str(results), "--quiet", "--no-plots"]) == 0
    assert "(0 run(s) added, 4 already there)" in (results / "report.md").read_text()


def test_a_store_that_cannot_be_opened_is_reported_and_the_report_still_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    bad = tmp_path / "a-directory"
    bad.mkdir()
    assert collect.main([str(results), "--quiet", "--no-plots", "--store", str(bad)]) == 4
    assert f"runs not stored: store {bad}: a directory, not a SQLite file" in \
        capsys.readouterr().err
    assert (results / "report.md").is_file()


def test_imported_logs_are_stored_once_too(store_url: str, tmp_path: Path) -> None:
    tree = ROOT / "tests" / "data" / "dlperf_tree"
    args = ["--import-logs", str(tree), "--out", str(tmp_path / "out"), "--quiet", "--no-plots",
            "--store", store_url]
    assert collect.main(args) == 0
    stored = count(store_url)
    assert stored == 23  # DLPerf's TensorFlow ResNet50 logs: 5 cases, 3-5 repeats each
    assert collect.main(args) == 0
    assert count(store_url) == stored
    engine = open_store(store_url)
    try:
        frame = load_runs(engine, parse_query("origin=imported,framework=tensorflow"))
    finally:
        engine.dispose()
    assert len(frame) == stored and set(frame["config_hash"]) == {""}


def test_trainbench_store_says_which_store_and_what_it_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit import store_cli

    url = str(tmp_path / "s.sqlite")
    engine = open_store(url)
    ingest(engine, synthetic_rows("a", [1.0, 2.0], start_s=1.78e9)
           + synthetic_rows("b", [3.0], start_s=1.79e9, status="failed"), "/r")
    engine.dispose()
    assert store_cli.main(["--store", url]) == 0
    out = capsys.readouterr().out
    assert f"store: sqlite:///{url} (schema revision {HEAD})" in out
    assert "runs: 3 (2 ok) of 2 case(s) from 1 results directory" in out
    assert "from 2026-05-28 20:26 UTC to 2026-09-21 14:13 UTC" in out
    assert store_cli.main(["--store", str(tmp_path)]) == 2
