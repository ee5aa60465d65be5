"""The tests on two pytest-xdist workers (tests/integration/conftest.py): every integration
module that uses a local Slurm cluster is in the one `cluster` work unit, so no two clusters
ever run at once, every other module is a unit of its own, and the units are handed out
cluster first, then integration, then unit modules. Checked by real xdist runs of small test
directories that use the integration conftest's hooks (sleeps, no cluster), and on the real
collection (collection only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: A conftest that takes the integration conftest's hooks, with a stand-in session cluster.
CONFTEST = """
import pytest
from tests.integration.conftest import *  # noqa: F403 (the hooks under test)

@pytest.fixture(scope="session")
def local_slurm():
    return "a stand-in"

@pytest.fixture()
def through_a_helper(local_slurm):
    return local_slurm
"""

#: One test module: each test sleeps and records its module, worker and interval.
MODULE = """
import json, os, time
{imports}

def _record(name):
    start = time.monotonic()
    time.sleep(0.4)
    with open({log!r}, "a") as f:
        f.write(json.dumps([__name__, name, os.environ.get("PYTEST_XDIST_WORKER"), start,
                            time.monotonic()]) + "\\n")

def test_one({fixture}):
    _record("one")

def test_two():
    _record("two")
"""


def _pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(where), *args, str(where)], cwd=where, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _tree(where: Path, modules: dict[str, tuple[str, str]]) -> Path:
    """`modules`: `integration/test_x` or `unit/test_y` -> (imports, fixture of test_one)."""
    log = where / "ran.jsonl"
    tests = where / "suite"
    for part in ("integration", "unit"):
        (tests / part).mkdir(parents=True)
    (tests / "integration" / "conftest.py").write_text(CONFTEST)
    for name, (imports, fixture) in modules.items():
        (tests / f"{name}.py").write_text(MODULE.format(imports=imports, fixture=fixture,
                                                        log=str(log)))
    return tests


def test_the_modules_that_use_a_cluster_run_on_one_worker_one_after_the_other(
        tmp_path: Path) -> None:
    tests = _tree(tmp_path, {
        "integration/test_fixture": ("", "local_slurm"),
        "integration/test_imports": ("from toolkit.localslurm import start_cluster", ""),
        "integration/test_plain_a": ("", ""), "integration/test_plain_b": ("", ""),
        "unit/test_unit_a": ("", ""),
        "unit/test_unit_localslurm": ("from toolkit.localslurm import start_cluster", "")})
    p = _pytest(tests, "-n", "2", "--dist", "loadgroup", "unit", "integration")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ran = [json.loads(line) for line in (tmp_path / "ran.jsonl").read_text().splitlines()]
    assert len(ran) == 12
    cluster = [r for r in ran if r[0] in ("test_fixture", "test_imports")]
    assert len({r[2] for r in cluster}) == 1, cluster  # one worker
    for i, a in enumerate(cluster):  # one after the other
        for b in cluster[i + 1:]:
            assert a[4] <= b[3] or b[4] <= a[3], (a, b)
    assert min(r[3] for r in cluster) == min(r[3] for r in cluster if r[0] == "test_fixture")
    others = [r for r in ran if r[2] != cluster[0][2]]
    assert others, "nothing ran beside the cluster unit"
    for module in {r[0] for r in ran}:  # a module stays whole
        assert len({r[2] for r in ran if r[0] == module}) == 1, (module, ran)
    # beside the cluster unit: the integration modules first, then the unit ones
    first = min(others, key=lambda r: r[3])
    assert first[0].startswith("test_plain"), others


def test_a_module_that_uses_a_cluster_without_naming_it_stops_the_run(tmp_path: Path) -> None:
    tests = _tree(tmp_path, {"integration/test_hidden": ("", "through_a_helper")})
    p = _pytest(tests, "--collect-only")
    assert p.returncode != 0
    assert "integration/test_hidden.py use(s) a local cluster without naming it" in \
        p.stdout + p.stderr
    assert not (tmp_path / "ran.jsonl").exists()


def test_the_real_collection_names_its_clusters() -> None:
    """Collecting the tests runs the check above on every real integration module; the units
    it makes put the cluster suites in one and leave the mpirun-only ones and every unit test
    module (those of the local cluster's package too) apart."""
    code = ("import json, sys, pytest\n"
            "from tests.integration.conftest import scope, turn\n"
            "class Units:\n"
            "    def pytest_collection_finish(self, session):\n"
            "        root = session.config.rootpath\n"
            "        print('UNITS ' + json.dumps(sorted({(i.nodeid.split('::')[0],\n"
            "              scope(root, i.nodeid), turn(root, i.nodeid))\n"
            "              for i in session.items})))\n"
            "sys.exit(pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider',\n"
            "                      'tests/unit', 'tests/integration'], plugins=[Units()]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("UNITS "))
    units = {path: (unit, turn) for path, unit, turn in json.loads(line[len("UNITS "):])}
    assert len(units) > 100
    for module in ("test_cluster_shape.py", "test_slurm_faults.py", "test_hosts_launch.py",
                   "test_command_thirdparty.py"):
        assert units[f"tests/integration/{module}"] == ("cluster", 0), module
    for module in ("test_bare_gpt_parallel.py", "test_rank_failures.py"):
        path = f"tests/integration/{module}"
        assert units[path] == (path, 1), module
    local = [path for path in units if path.startswith("tests/unit/localslurm/")]
    assert local and all(units[path] == (path, 2) for path in local)
