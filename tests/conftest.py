"""Shared fixtures: one real local Slurm cluster per test session (started on first use), the
`--regen-golden` flag that rewrites the golden files under tests/data/golden/, and results
stores that are never the user's own.

The whole session (every fixture of any scope, every process a test starts) stores runs in a
throw-away store: `pytest_configure` points TRAINBENCH_STORE and XDG_DATA_HOME at a temporary
directory before any test module is imported, and each test gets a store of its own on top. At
the end of the session the store the user's environment names (`$TRAINBENCH_STORE`, else
`$XDG_DATA_HOME/trainbench/store.sqlite`) must be as it was: a session that wrote there fails.

SIGINT and SIGHUP start at the dispositions a terminal gives: a runner started in the
background (`nohup`, `&` without job control) hands them down ignored, and the tests that send
them to toolkit processes (or check the handler a command installs) would test the runner.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import local_slurm  # noqa: F401

_SESSION_STORE: dict[str, object] = {}
"""`dir`: the session's temporary store directory; `user`: the user's own store directory
(`Path`) and `before`: its fingerprint when the session began."""


def user_store_dir(environ: dict[str, str]) -> Path | None:
    """The directory of the user's own SQLite store under `environ` (None: a database URL)."""
    from toolkit.store.db import ENV_VAR, default_path

    named = environ.get(ENV_VAR)
    if named and "://" in named:
        return None
    return (Path(named).expanduser() if named else default_path(environ)).resolve().parent


def fingerprint(directory: Path | None) -> dict[str, tuple[int, int]]:
    """name -> (size, mtime ns) of every file in the directory (empty when there is none)."""
    if directory is None or not directory.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()
            if p.is_file()}


def terminal_signals() -> None:
    """SIGINT raises KeyboardInterrupt and SIGHUP ends the process, here and in every process a
    test starts, where the runner was started with either ignored."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    terminal_signals()
    user = user_store_dir(dict(os.environ))
    _SESSION_STORE.update(user=user, before=fingerprint(user))
    session = Path(tempfile.mkdtemp(prefix="trainbench-test-store-"))
    _SESSION_STORE["dir"] = session
    os.environ["TRAINBENCH_STORE"] = str(session / "store.sqlite")
    os.environ["XDG_DATA_HOME"] = str(session / "xdg")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    temporary = _SESSION_STORE.get("dir")
    if isinstance(temporary, Path):
        shutil.rmtree(temporary, ignore_errors=True)
    user = _SESSION_STORE.get("user")
    if isinstance(user, Path) and fingerprint(user) != _SESSION_STORE.get("before"):
        session.config.get_terminal_writer().line(
            f"error: the tests wrote into the user's own results store ({user}); every test "
            "must use a temporary store", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/data/golden/* from the code (review the diff!)")


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden"))


@pytest.fixture(autouse=True)
def _own_results_store(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every process it starts) stores runs in a throw-away store of its own
    (`collect` stores into $TRAINBENCH_STORE, else $XDG_DATA_HOME/trainbench/)."""
    store = tmp_path_factory.mktemp("store")
    monkeypatch.setenv("TRAINBENCH_STORE", str(store / "store.sqlite"))
    monkeypatch.setenv("XDG_DATA_HOME", str(store / "xdg"))
