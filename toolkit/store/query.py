"""Runs back out of the store as a DataFrame, filtered by case and provenance.

A filter is `KEY=VALUE` on a column of `schema.FILTER_COLUMNS` (`gpu` is short for
`gpu_model`, `case` for `case_id`, `commit` for `git_commit`, `image` for
`container_image`); the match is exact, so that the indexes serve it, unless VALUE has a `*`,
which matches any text and makes the whole match ignore case; a `gpu` VALUE also matches the
vendor's full name (`gpu=H200` matches `NVIDIA H200`). Several filters must all hold.
`since`/`until` bound the run's start time (an ISO date or date and time, UTC unless it says
otherwise). Every filter is one SQL condition (schema.py lists the indexes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from sqlalchemy import ColumnElement, Engine, Select, and_, func, or_, select

from toolkit.store.db import failures
from toolkit.store.schema import ALIASES, FILTER_COLUMNS, runs

GPU_VENDORS = ("NVIDIA ", "AMD ", "Intel ")


class QueryError(ValueError):
    """A filter that names no column or has no value; the message lists the valid keys."""


@dataclass(frozen=True)
class Query:
    where: tuple[tuple[str, str], ...] = ()
    """(column, value) pairs, all of which must match."""
    since_s: float | None = None
    until_s: float | None = None
    statuses: tuple[str, ...] = field(default=("ok",))
    """Run statuses to return (default: only runs with figures)."""

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.where]
        if self.since_s is not None:
            parts.append(f"since {_iso(self.since_s)}")
        if self.until_s is not None:
            parts.append(f"until {_iso(self.until_s)}")
        return " ".join(parts) or "every run"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M")


def parse_time(text: str, what: str) -> float:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError as err:
        raise QueryError(f"{what} {text!r}: expected an ISO date (2026-05-01) or date and "
                         "time (2026-05-01T12:00)") from err
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def parse_filters(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`KEY=VALUE` strings (or several joined by commas) -> (column, value) pairs."""
    out = []
    for item in items:
        for part in item.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            column = ALIASES.get(key.strip(), key.strip())
            if not sep or not value.strip():
                raise QueryError(f"filter {part!r}: expected KEY=VALUE")
            if column not in FILTER_COLUMNS:
                raise QueryError(f"filter {part!r}: no key {key.strip()!r}; valid keys: "
                                 f"{', '.join((*ALIASES, *FILTER_COLUMNS))}")
            out.append((column, value.strip()))
    return tuple(out)


def parse_query(text: str, since: str | None = None, until: str | None = None) -> Query:
    """A store query as written on the command line: `KEY=VALUE,...` plus optional
    `since=DATE` / `until=DATE` among the pairs (or given apart)."""
    pairs, since_s, until_s = [], None, None
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "since":
            since = value
        elif key.strip() == "until":
            until = value
        elif part.strip():
            pairs.append(part)
    if since:
        since_s = parse_time(since, "since")
    if until:
        until_s = parse_time(until, "until")
    return Query(where=parse_filters(pairs), since_s=since_s, until_s=until_s)


def _condition(column: str, value: str) -> ColumnElement[bool]:
    col = runs.c[column]
    if column in ("num_nodes", "gpus_per_node", "batch_size_per_device"):
        if not value.isdigit():
            raise QueryError(f"filter {column}={value}: expected a whole number")
        return col == int(value)
    if "*" in value:
        pattern = value.lower().replace("%", r"\%").replace("_", r"\_").replace("*", "%")
        match = func.lower(col).like(pattern, escape="\\")
        if column == "gpu_model":
            return or_(match, *(func.lower(col).like(vendor.lower() + pattern, escape="\\")
                                for vendor in GPU_VENDORS))
        return match
    if column == "gpu_model":  # an IN list: the index on gpu_model serves it
        return col.in_([value, *(vendor + value for vendor in GPU_VENDORS)])
    return col == value


def select_runs(query: Query, columns: Sequence[str] | None = None,
                case_ids: Sequence[str] | None = None) -> Select[Any]:
    cols = [runs.c[c] for c in columns] if columns else list(runs.c)
    conditions = [_condition(c, v) for c, v in query.where]
    if query.statuses:
        conditions.append(runs.c.status.in_(query.statuses))
    if query.since_s is not None:
        conditions.append(runs.c.started_s >= query.since_s)
    if query.until_s is not None:
        conditions.append(runs.c.started_s < query.until_s)
    if case_ids:
        conditions.append(runs.c.case_id.in_(list(case_ids)))
    return select(*cols).where(and_(True, *conditions))


def load_runs(engine: Engine, query: Query, columns: Sequence[str] | None = None,
              case_ids: Sequence[str] | None = None) -> pd.DataFrame:
    """The runs `query` selects, one row each, columns as in the table; `StoreError` when the
    store cannot be read."""
    statement = select_runs(query, columns, case_ids)
    url = engine.url.render_as_string(hide_password=False)
    with failures(url, "cannot read the runs"), engine.connect() as conn:
        result = conn.execute(statement)
        names = list(result.keys())
        # plain tuples: pandas probes SQLAlchemy's Row objects attribute by attribute (slow)
        records = [tuple(row) for row in result.fetchall()]
        return pd.DataFrame.from_records(records, columns=names)
