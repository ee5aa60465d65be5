"""How the tests share out over pytest-xdist workers (`make test`: tests/unit and
tests/integration in one run on two workers).

Every integration module that uses a local Slurm cluster (the session's `local_slurm`, or one
it boots itself) is one work unit, `cluster`: one worker runs these modules one after the other
in file order. So no two clusters ever run at once (they would share one munged, and a cluster
stops the munged it started), the session cluster boots once, and the tests that install Debian
packages on first use (Slurm and munge, MariaDB, podman) never run two apt-gets at once. Every
other module, integration or unit, is a work unit of its own (its module fixtures built once),
run by the other worker beside the cluster tests, many of which spend their time waiting on
Slurm (its timers, jobs queued behind others). The cluster unit, the longest, is handed out
first, then the other integration modules, then the unit tests (`turn`).

The units are made by the scheduler below (`--dist loadgroup` asks for it), from each
module's source, which the controller can read: xdist's own `xdist_group` marks reach its
scheduler only through a suffix on the node ids, which pytest 9.2 no longer lets a plugin
write, and without it every test was a unit of its own, so two clusters ran at once. Each
worker checks that every integration module that uses a cluster (its fixtures, its imports)
says so in its source; a module that does not stops the run before any test starts.
"""

from __future__ import annotations

import functools
import os
import re
import types
from pathlib import Path
from typing import Any

import pytest

CLUSTER_GROUP = "cluster"

#: What a module that boots or uses a local cluster names in its source: the session fixture,
#: the local cluster's package or the tests' helpers for it.
CLUSTER_WORDS = re.compile(r"\blocal_slurm\b|localslurm")


@functools.cache
def names_a_cluster(path: Path) -> bool:
    """The module at `path` names a local cluster in its source (CLUSTER_WORDS)."""
    return CLUSTER_WORDS.search(path.read_text(encoding="utf-8")) is not None


def in_integration(path: str) -> bool:
    """The test module at `path` (relative to the root) is an integration test's."""
    return "integration" in Path(path).parts[:-1]


def scope(root: Path, nodeid: str) -> str:
    """The work unit of a test: `cluster` for an integration module that names a cluster, else
    its module."""
    path = nodeid.split("::")[0]
    return CLUSTER_GROUP if in_integration(path) and names_a_cluster(root / path) else path


def turn(root: Path, nodeid: str) -> int:
    """When a test's unit is handed out: the cluster unit first (the longest), then the other
    integration modules (long ones: none left to run after the cluster unit), then the rest
    (short ones, to fill the last minutes)."""
    if scope(root, nodeid) == CLUSTER_GROUP:
        return 0
    return 1 if in_integration(nodeid.split("::")[0]) else 2


def uses_a_cluster(item: pytest.Item) -> bool:
    """The test uses the session cluster, or its module imports the local cluster's package
    (start_cluster, LocalCluster, ...), as every module that boots a cluster does."""
    if "local_slurm" in getattr(item, "fixturenames", ()):
        return True
    for value in vars(getattr(item, "module", None) or types.ModuleType("none")).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else \
            getattr(value, "__module__", None)
        if isinstance(name, str) and name.startswith("toolkit.localslurm"):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    unsaid = sorted({item.nodeid.split("::")[0] for item in items
                     if in_integration(item.nodeid.split("::")[0]) and uses_a_cluster(item)
                     and scope(root, item.nodeid) != CLUSTER_GROUP})
    if unsaid:
        raise pytest.UsageError(
            f"{', '.join(unsaid)} use(s) a local cluster without naming it in the source "
            f"({CLUSTER_WORDS.pattern}): under xdist it would run beside another cluster")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the order the scheduler hands the units out in (`turn`), each part in file order
        items.sort(key=lambda item: turn(root, item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: xdist's load-by-scope scheduler with `scope` as the unit, the units
    handed out in the order the workers collected them (`turn`). A worker is given its next
    unit once two tests of its own are left, so the cluster unit's worker takes no other while
    it runs."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    root = config.rootpath
    config.option.loadscopereorder = False

    class ClusterScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(root, nodeid)

    return ClusterScheduling(config, log)
