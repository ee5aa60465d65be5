"""Shared fixtures: one real local Slurm cluster per test session (started on first use), the
`--regen-golden` flag that rewrites the golden files under tests/data/golden/, and a results
store of each test's own."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.conftest_localslurm import local_slurm  # noqa: F401


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/data/golden/* from the code (review the diff!)")


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden"))


@pytest.fixture(autouse=True, scope="session")
def _session_results_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The same for what runs before any test's own fixtures: module- and session-scoped
    fixtures that collect (a function-scoped monkeypatch is not in force yet there)."""
    store = tmp_path_factory.mktemp("session-store")
    names = {"TRAINBENCH_STORE": str(store / "store.sqlite"), "XDG_DATA_HOME": str(store / "xdg")}
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _own_results_store(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every process it starts) stores runs in a throw-away store, never in the
    user's own (`collect` stores into $XDG_DATA_HOME/trainbench/ by default)."""
    store = tmp_path_factory.mktemp("store")
    monkeypatch.setenv("TRAINBENCH_STORE", str(store / "store.sqlite"))
    monkeypatch.setenv("XDG_DATA_HOME", str(store / "xdg"))
