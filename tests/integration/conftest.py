"""How tests/integration shares out over pytest-xdist workers (`make test INTEGRATION_WORKERS=2`).

Every module that uses a local Slurm cluster (the session's `local_slurm`, or one it boots
itself) is one work unit, `xdist_group("cluster")`: one worker runs these modules one after
the other in file order. So no two clusters ever run at once (they would share one munged, and
a cluster stops the munged it started), the session cluster boots once, and the tests that
install Debian packages on first use (Slurm and munge, MariaDB, podman) never run two apt-gets
at once. Every other module is a work unit of its own (its module fixtures built once), run by
whichever worker is free, beside the cluster tests, many of which spend their time waiting on
Slurm (its timers, jobs queued behind others). Under xdist the cluster unit comes first (the
longest, it starts at once); without xdist the marks do nothing and the files run in order.
"""

from __future__ import annotations

import os
import types

import pytest

CLUSTER_GROUP = "cluster"


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
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    cluster: set[str] = set()
    for path, tests in modules.items():
        group = CLUSTER_GROUP if any(uses_a_cluster(t) for t in tests) else path
        if group == CLUSTER_GROUP:
            cluster.add(path)
        for item in tests:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The cluster unit first: it is the longest, and a worker takes the units in order.
        items.sort(key=lambda t: t.nodeid.split("::")[0] not in cluster)
