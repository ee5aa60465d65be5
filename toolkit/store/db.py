"""Which store, and opening it: a SQLAlchemy engine whose schema is at the newest migration.

The store is, in this order: `--store PATH|URL`, the `TRAINBENCH_STORE` environment variable,
else one SQLite file per user, `$XDG_DATA_HOME/trainbench/store.sqlite` (`~/.local/share/...`
when XDG_DATA_HOME is unset). A PATH is a SQLite file; a URL is any SQLAlchemy URL, e.g.
`postgresql://user@host/db` (psycopg 3 is the driver) for a team's shared store.

Opening a store brings its schema to the newest Alembic revision (`migrations/versions/`),
under a lock, so that two processes opening a fresh or an old store at once migrate it once:
PostgreSQL's transaction-scoped advisory lock, SQLite's write lock (`BEGIN IMMEDIATE`). Every
SQLite transaction that writes begins with `BEGIN IMMEDIATE` and waits up to `BUSY_TIMEOUT_S`
for another writer, so concurrent ingests queue instead of failing; a PostgreSQL session waits
as long for a lock (`lock_timeout`), and as long as `CONNECT_TIMEOUT_S` for the server.

A store that cannot be used is a `StoreError` whose message names the store and says why, from
every operation on it (opening, migrating, `failures` around ingest and queries): a file that is
not a database, a store locked past the wait or not reachable, a schema at a revision this code
does not have (written by a newer trainbench: refused, never downgraded), a SQLite database
that trainbench did not make (tables, no schema revision: nothing is added to it). Messages and
the names `describe` gives never hold a password: neither the URL's nor one in its query string
(`?password=...`), nor those words where a driver's message repeats them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from toolkit.results.safe_write import UnsafePath, make_dir

ENV_VAR = "TRAINBENCH_STORE"
FILE_NAME = "store.sqlite"
HEAD = "0005"
"""The newest revision in migrations/versions/ (a test keeps the two equal)."""
BUSY_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 15
"""How long a PostgreSQL store may take to answer a connection (unless its URL says)."""
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_LOCK_ID = 0x7472_6E62  # "trnb": PostgreSQL advisory lock of the schema migration


class StoreError(Exception):
    """A store that cannot be opened or used; the message names it and says why."""


#: Query-string keys whose values are secrets (psycopg's `password`, `sslpassword`, ...).
_SECRET_KEY = re.compile(r"pass|secret|token|key", re.IGNORECASE)
HIDDEN = "***"


def _secrets(url: str) -> list[str]:
    """The secrets written in `url`: its password and secret query values, longest first; read
    with a plain pattern too, so that a URL SQLAlchemy cannot parse gives them up as well."""
    found = set(re.findall(r"://[^/@?#:]*:([^/@?#]*)@", url))
    found.update(m.group(2) for m in re.finditer(r"[?&;]([^=&;#]+)=([^&;#]*)", url)
                 if _SECRET_KEY.search(m.group(1)))
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        pass
    else:
        if parsed.password:
            found.add(str(parsed.password))
        for key, value in parsed.query.items():
            if _SECRET_KEY.search(key):
                found.update([value] if isinstance(value, str) else value)
    return sorted((s for s in found if s and s != HIDDEN), key=len, reverse=True)


def redact(text: str, url: str) -> str:
    """`text` with every secret of `url` (and its percent-decoded form) replaced by ***."""
    from urllib.parse import unquote

    for secret in _secrets(url):
        for form in {secret, unquote(secret)}:
            text = text.replace(form, HIDDEN)
    return text


def describe(url: str) -> str:
    """The store's URL for messages and reports: its password and secret query values ***."""
    try:
        text = make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        text = url
    return redact(text, url)


def _reason(error: BaseException) -> str:
    """The first line of a database error: the driver's own words, without SQLAlchemy's SQL."""
    cause = getattr(error, "orig", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


@contextmanager
def failures(url: str, doing: str = "") -> Iterator[None]:
    """Any database error inside becomes a `StoreError` naming the store (no password)."""
    try:
        yield
    except SQLAlchemyError as error:
        what = f"{doing}: " if doing else ""
        raise StoreError(redact(f"store {describe(url)}: {what}{_reason(error)}", url)) from None


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


def open_store(store: str | None = None, *, migrate: bool = True) -> Engine:
    """An engine on the store (see `resolve`), its schema migrated to HEAD; `StoreError` when
    it cannot be opened (the message names the store, never its password)."""
    url = resolve(store)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(redact(f"store {describe(url)}: not a path or a database URL",
                                url)) from None
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(url, parsed.database)
        else:
            engine = create_engine(url, pool_pre_ping=True, connect_args=_timeouts(parsed))
    except (ArgumentError, ImportError, SQLAlchemyError, OSError, UnsafePath) as err:
        raise StoreError(redact(f"store {describe(url)}: {_reason(err)}", url)) from None
    if migrate:
        try:
            with failures(url, "cannot open"):
                upgrade(engine)
        except StoreError:
            engine.dispose()
            raise
    return engine


def _timeouts(parsed: URL) -> dict[str, Any]:
    """PostgreSQL: how long to wait for the server (CONNECT_TIMEOUT_S) and for a lock another
    session holds (BUSY_TIMEOUT_S, as SQLite waits), unless the URL sets them."""
    if parsed.get_backend_name() != "postgresql":
        return {}
    out: dict[str, Any] = {}
    if "connect_timeout" not in parsed.query:
        out["connect_timeout"] = CONNECT_TIMEOUT_S
    if "options" not in parsed.query:
        out["options"] = f"-c lock_timeout={max(1, round(BUSY_TIMEOUT_S * 1000))}"
    return out


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


class NewerSchema(StoreError):
    """The store's schema is at a revision this code does not know."""


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
    from alembic.script import ScriptDirectory

    with writing(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _LOCK_ID})
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = conn
        current = revision(conn)
        scripts = ScriptDirectory.from_config(config)
        known = {script.revision for script in scripts.walk_revisions()}
        if current is not None and current not in known:
            # a newer trainbench migrated it: going on would be a downgrade or a guess
            raise NewerSchema(
                f"store {describe(str(engine.url))}: its schema is at revision {current}, "
                f"written by a newer trainbench (this one knows revisions up to {HEAD}); "
                "open it with that version, or use another store (--store)")
        if current is None and conn.dialect.name == "sqlite":
            others = sorted(inspect(conn).get_table_names())
            if others:
                # someone's own SQLite file (a typo in --store): never add tables to it
                raise StoreError(
                    f"store {describe(str(engine.url))}: a SQLite database that trainbench did "
                    f"not make (tables {', '.join(others[:5])}"
                    + (", ..." if len(others) > 5 else "") + "); nothing is written into it. "
                    "Name a new file or a trainbench store")
        command.upgrade(config, target)
