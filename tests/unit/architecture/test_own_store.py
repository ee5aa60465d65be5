"""The test suite never writes into the user's own results store: a module-scoped fixture that
runs `collect` (set up before any per-test fixture) stores into the session's temporary store,
not into `$XDG_DATA_HOME/trainbench/`. Checked by running a real test module in a pytest of its
own, under a home directory made for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
#: A module whose module-scoped fixture calls collect.main without --no-store.
MODULE = "tests/unit/report/test_interchange.py"


def test_a_test_session_leaves_the_users_store_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    data = home / ".local" / "share"
    data.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(data)}
    env.pop("TRAINBENCH_STORE", None)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--basetemp", str(tmp_path / "basetemp"), MODULE],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                       check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert not (data / "trainbench").exists(), sorted(
        str(f.relative_to(data)) for f in data.rglob("*"))


def test_a_session_that_writes_the_users_store_fails(tmp_path: Path) -> None:
    # a test that writes straight into the user's store, under a home made for it
    home = tmp_path / "home"
    data = home / ".local" / "share"
    (data / "trainbench").mkdir(parents=True)
    rogue = tmp_path / "rogue" / "test_rogue.py"
    rogue.parent.mkdir()
    rogue.write_text("from pathlib import Path\n\n\ndef test_rogue() -> None:\n"
                     f"    Path({str(data / 'trainbench' / 'store.sqlite')!r}).write_text('x')\n")
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(data)}
    env.pop("TRAINBENCH_STORE", None)
    # the suite's conftest as a plugin: the file lives outside the tree
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "tests.conftest", "--rootdir", str(rogue.parent),
                        "--basetemp", str(tmp_path / "basetemp"), str(rogue)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                       check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the tests wrote into the user's own results store" in p.stdout + p.stderr
