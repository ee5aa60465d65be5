"""Store fixtures: `store_url`, parametrised over SQLite (a file in the test's directory) and
PostgreSQL (a database of its own on one throw-away server per session, started from Debian's
packages by `toolkit.store.pgserver`, installed with apt-get when missing). PostgreSQL skips
only where it cannot exist (not root and not installed); with CI=true it fails instead."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from parsers.rows import RunRow
from toolkit.store.pgserver import PostgresUnavailable, Server, throwaway_server

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    try:
        with throwaway_server() as server:
            yield server
    except PostgresUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no PostgreSQL: {error}")
        pytest.skip(str(error))


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite")
    server: Server = request.getfixturevalue("postgres_server")
    return server.create_database(f"t{os.getpid()}_{next(_names)}")


def synthetic_rows(case: str, values: list[float], *, start_s: float = 1.78e9,
                   status: str = "ok", **provenance: object) -> list[RunRow]:
    """Run rows of one case as a results directory would give them (one per value)."""
    return [RunRow(case_id=case, repeat=i, status=status, framework="torch", model="resnet50",
                   precision="fp32", num_nodes=1, gpus_per_node=1, batch_size_per_device=64,
                   throughput_sps=v, step_time_median_s=64 / v, source=f"/r/{case}/r{i}",
                   provenance={"config_hash": "c0ffee", "started_s": start_s + i,
                               **provenance})
            for i, v in enumerate(values)]
