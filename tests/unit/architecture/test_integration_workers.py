"""tests/integration on two pytest-xdist workers (tests/integration/conftest.py): every module
that uses a local Slurm cluster is in the one `cluster` work unit, so no two clusters ever run
at once, and every other module is a unit of its own. Checked on the real collection, in a
pytest of its own (collection only: no test runs, no cluster boots)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: Prints `[nodeid, group]` of every collected integration test, in the order collected.
COLLECT = """
import json, sys
import pytest

class Groups:
    def pytest_collection_finish(self, session):
        print("GROUPS " + json.dumps([[i.nodeid, [m.args[0] for m in
                                       i.iter_markers("xdist_group")]] for i in session.items]))

sys.exit(pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", "tests/integration"],
                     plugins=[Groups()]))
"""

#: What a module that boots or uses a local cluster names in its source.
CLUSTER_WORDS = re.compile(r"\blocal_slurm\b|\bstart_cluster\b|toolkit\.localslurm|"
                           r"from toolkit import localslurm")


def _groups() -> list[tuple[str, list[str]]]:
    """The collection as an xdist worker sees it (PYTEST_XDIST_WORKER set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTEST_XDIST_WORKER"] = "gw0"
    p = subprocess.run([sys.executable, "-c", COLLECT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("GROUPS "))
    return [(nodeid, groups) for nodeid, groups in json.loads(line[len("GROUPS "):])]


def test_every_module_that_uses_a_cluster_is_in_the_one_cluster_unit_which_comes_first(
        ) -> None:
    items = _groups()
    assert len({nodeid.split("::")[0] for nodeid, _ in items}) > 20  # all of tests/integration
    for nodeid, groups in items:
        path = nodeid.split("::")[0]
        uses = CLUSTER_WORDS.search((ROOT / path).read_text()) is not None
        assert groups == (["cluster"] if uses else [path]), (nodeid, groups)
    # the cluster unit first, whole: a worker takes the units in order
    order = [groups[0] for _, groups in items]
    rest = order.index(next(g for g in order if g != "cluster"))
    assert set(order[:rest]) == {"cluster"} and "cluster" not in order[rest:]
