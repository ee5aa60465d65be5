"""A store that cannot be used costs the store, never the report; and never shows a password.

Each fault is real: a file that is not a database, a SQLite store another process holds
locked, a PostgreSQL port nobody listens on, a store (SQLite and a real PostgreSQL) whose schema
a newer trainbench migrated. `collect` writes every table, plot and page, then says in one line
why the runs were not stored and exits 4; `store`, `compare` and `history` exit 2 with one
line naming the store and the reason, no traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text

from toolkit import collect, compare, history, store_cli
from toolkit.store import db
from toolkit.store.db import open_store, resolve
from toolkit.store.ingest import ingest
from toolkit.store.pgserver import Server, free_port
from toolkit.store.schema import runs

from .conftest import synthetic_rows

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "tests" / "data" / "results_quickstart"
REPORT_FILES = ("report.md", "report.html", "runs.csv", "summary.csv",
                "tables/per_batch_size.csv", "plots/bert_base_fp32_throughput.png")


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(QUICKSTART, results)
    return results


def _collect_keeps_the_report(results: Path, store: str, capsys: pytest.CaptureFixture[str],
                              why: str) -> str:
    """collect with `store`: exit 4, every output written, one last line saying why."""
    assert collect.main([str(results), "--quiet", "--store", store]) == collect.EXIT_STORE
    err = capsys.readouterr().err
    for name in REPORT_FILES:
        assert (results / name).is_file(), name
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "runs not stored" in line]
    assert len(lines) == 1 and lines[0] == err.splitlines()[-1], err
    assert lines[0].startswith("error: runs not stored: store ") and why in lines[0], lines[0]
    assert why in (results / "report.md").read_text()
    return lines[0]


def _readers_refuse(store: str, capsys: pytest.CaptureFixture[str], why: str,
                    tmp_path: Path, *, upgrade: bool = True) -> None:
    """store, compare and history: exit 2, one line with the reason, no traceback (`store
    upgrade` too, unless the store is at the newest schema and so needs nothing of it)."""
    calls = [(store_cli.main, ["--store", store]),
             *([(store_cli.main, ["--store", store, "upgrade"])] if upgrade else []),
             (compare.main, ["case=a", "case=b", "--store", store, "--quiet"]),
             (history.main, ["--store", store, "--out", str(tmp_path / "hist")])]
    for command, argv in calls:
        assert command(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1, err
        assert err.startswith("error: store ") and why in err, err


def test_a_store_file_that_is_not_a_database(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store.sqlite"
    store.write_bytes(b"these are my notes, not a database\n" * 200)
    _collect_keeps_the_report(_results(tmp_path), str(store), capsys, "file is not a database")
    _readers_refuse(str(store), capsys, "file is not a database", tmp_path)
    assert store.read_bytes() == b"these are my notes, not a database\n" * 200


def test_a_sqlite_database_trainbench_did_not_make_is_left_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--store ~/notes.sqlite` by mistake: someone's own database gets no tables added."""
    import sqlite3

    store = tmp_path / "notes.sqlite"
    with sqlite3.connect(store) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = store.read_bytes()
    why = "a SQLite database that trainbench did not make (tables notes)"
    _collect_keeps_the_report(_results(tmp_path), str(store), capsys, why)
    _readers_refuse(str(store), capsys, why, tmp_path)
    assert store.read_bytes() == before


def test_a_store_locked_by_another_process(store_url: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite: another process holds the database's exclusive lock; PostgreSQL: another
    session holds the runs table's. Both past the wait (BUSY_TIMEOUT_S, here 0.5 s)."""
    open_store(store_url).dispose()
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.5)
    if "://" in store_url:
        lock = f"""
            import psycopg, sys
            conn = psycopg.connect({store_url!r})
            conn.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            """
        why = "lock timeout"
    else:
        lock = f"""
            import sqlite3, sys
            conn = sqlite3.connect({store_url!r}, isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            """
        why = "database is locked"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(lock) + textwrap.dedent("""
        print("locked", flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        _collect_keeps_the_report(_results(tmp_path), store_url, capsys, why)
        # PostgreSQL: the lock is on the runs table; the schema's revision is readable
        _readers_refuse(store_url, capsys, why, tmp_path, upgrade="://" not in store_url)
    finally:
        holder.communicate("")
    # once the other process lets go, the same store takes the runs
    assert collect.main([str(tmp_path / "results"), "--quiet", "--no-plots",
                         "--store", store_url]) == 0


def test_an_unreachable_postgresql_store(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = f"postgresql://bench@127.0.0.1:{free_port()}/bench"
    line = _collect_keeps_the_report(_results(tmp_path), store, capsys, "127.0.0.1")
    assert "connection" in line.lower()
    _readers_refuse(store, capsys, "127.0.0.1", tmp_path)


def _stored(url: str) -> tuple[str, int]:
    """The store's revision and run count, read without trainbench's opening (no migration)."""
    engine = create_engine(resolve(url))
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
            count = conn.execute(select(func.count()).select_from(runs)).scalar_one()
            return str(version), int(count)
    finally:
        engine.dispose()


def test_a_store_written_by_a_newer_trainbench_is_refused_never_downgraded(
        store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = open_store(store_url)
    ingest(engine, synthetic_rows("a", [1.0, 2.0]), "/r")
    with db.writing(engine) as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0042'"))
    engine.dispose()
    why = "its schema is at revision 0042, written by a newer trainbench"
    _collect_keeps_the_report(_results(tmp_path), store_url, capsys, why)
    _readers_refuse(store_url, capsys, why, tmp_path)
    assert _stored(store_url) == ("0042", 2)


def test_passwords_in_a_store_url_never_reach_a_report_a_message_or_the_terminal(
        postgres_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The password of the URL's user info and one in its query string: in the note of a
    report whose runs were stored, and in the errors of a store that cannot be reached, read
    or even parsed."""
    secrets = ("s3cret-user-pw", "s3cret-query-pw")
    results = _results(tmp_path)
    db_url = postgres_server.create_database("secrets")
    good = db_url.replace(f"//{postgres_server.user}@",
                          f"//{postgres_server.user}:{secrets[0]}@") + f"?password={secrets[1]}"
    assert collect.main([str(results), "--store", good]) == 0
    assert "(4 run(s) added" in (results / "report.md").read_text()
    seen = capsys.readouterr()
    port = free_port()
    bad = [f"postgresql://bench:{secrets[0]}@127.0.0.1:{port}/x?password={secrets[1]}",
           f"postgresql://bench:{secrets[0]}@127.0.0.1:{port}/x?sslpassword={secrets[1]}",
           f"postgresql://bench:{secrets[0]}@127.0.0.1:not-a-port/x?password={secrets[1]}",
           f"postgresql://bench:{secrets[0]}@[::1/x?password={secrets[1]}"]
    out, err = seen.out, seen.err
    for url in bad:
        assert collect.main([str(results), "--quiet", "--no-plots", "--store", url]) == 4
        assert store_cli.main(["--store", url]) == 2
        assert compare.main(["case=a", "case=b", "--store", url]) == 2
        assert history.main(["--store", url]) == 2
        seen = capsys.readouterr()
        assert "runs not stored" in seen.err and "Traceback" not in seen.err
        out, err = out + seen.out, err + seen.err
        for name in ("report.md", "report.html"):
            page = (results / name).read_text()
            assert "runs not stored: store postgresql" in page, name
            assert not any(s in page for s in secrets), name
    assert "***" in err and not any(s in out + err for s in secrets), err
