"""Which store, and opening it: a SQLAlchemy engine whose schema is at the newest migration.

The store is, in this order: `--store PATH|URL`, the `TRAINBENCH_STORE` environment variable,
else one SQLite file per user, `$XDG_DATA_HOME/trainbench/store.sqlite` (`~/.local/share/...`
when XDG_DATA_HOME is unset). A PATH is a SQLite file; a URL is any SQLAlchemy URL, e.g.
`postgresql://user@host/db` (psycopg 3 is the driver) for a team's shared store.

Opening a store brings its schema to the newest Alembic revision (`migrations/versions/`),
under a lock, so that two processes opening a fresh or an old store at once migrate it once:
PostgreSQL's transaction-scoped advisory lock, SQLite's write lock (`BEGIN IMMEDIATE`). Every
SQLite transaction that writes begins with `BEGIN IMMEDIATE` and waits up to `BUSY_TIMEOUT_S`
for another writer, so concurrent ingests queue instead of failing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError

from toolkit.results.safe_write import make_dir

ENV_VAR = "TRAINBENCH_STORE"
FILE_NAME = "store.sqlite"
HEAD = "0003"
"""The newest revision in migrations/versions/ (a test keeps the two equal)."""
BUSY_TIMEOUT_S = 120.0
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_LOCK_ID = 0x7472_6E62  # "trnb": PostgreSQL advisory lock of the schema migration


class StoreError(Exception):
    """A store that cannot be opened or used; the message names it and says why."""


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/share")
    return Path(base) / "trainbench" / FILE_NAME


def resolve(store: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The store's SQLAlchemy URL from `--store`, the environment, or the default."""
    env = os.environ if environ is None else environ
    name = store or env.get(ENV_VAR) or str(default_path(env))
    if "://" not in name:
        return f"sqlite:///{Path(name).expanduser().resolve()}"
    scheme, rest = name.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return name


def describe(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def open_store(store: str | None = None, *, migrate: bool = True) -> Engine:
    """An engine on the store (see `resolve`), its schema migrated to HEAD."""
    url = resolve(store)
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise StoreError(f"store {url!r}: not a path or a database URL ({err})") from err
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url, parsed.database)
    else:
        try:
            engine = create_engine(url, pool_pre_ping=True)
        except (ArgumentError, ImportError, SQLAlchemyError) as err:
            raise StoreError(f"store {describe(url)}: {err}") from err
    if migrate:
        try:
            upgrade(engine)
        except OperationalError as err:
            engine.dispose()
            raise StoreError(f"store {describe(url)}: cannot open: {err.orig}") from err
    return engine


def _sqlite_engine(url: str, database: str | None) -> Engine:
    if database and database != ":memory:":
        path = Path(database)
        if path.is_dir():
            raise StoreError(f"store {path}: a directory, not a SQLite file")
        if not path.parent.is_dir():
            # the default store's folder; make_dir refuses symbolic links on the way
            anchor = next(p for p in path.parents if p.is_dir())
            make_dir(path.parent, root=anchor)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # transactions are begun by the listener below, not by the sqlite3 module
        dbapi_connection.isolation_level = None
        dbapi_connection.execute("PRAGMA foreign_keys=ON")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("store_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that may write (SQLite: holding the write lock from its
    first statement, so that concurrent writers queue and never deadlock)."""
    with engine.connect() as conn:
        conn.execution_options(store_write=True)
        with conn.begin():
            yield conn


def revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine, target: str = "head") -> None:
    """Migrate the store to `target` (default the newest revision), once, under the lock."""
    if target == "head":
        with engine.connect() as conn:
            if revision(conn) == HEAD:
                return  # the usual case: no Alembic import, no lock
    from alembic import command
    from alembic.config import Config

    with writing(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        command.upgrade(config, target)
