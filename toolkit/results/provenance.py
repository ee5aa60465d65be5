"""A run's provenance, from its `meta.json`: where and with what it ran (hosts, GPU model, driver,
CUDA, NCCL, framework version, container image, clocks, the benchmarked code's git commit,
partition, site profile, start time), as flat text fields for the results store.

The git commit comes from meta.json's `git_commit`, else from a grid `env` variable recorded
with the run (GIT_COMMIT_ENV, e.g. `env: {GIT_COMMIT: 1a2b3c}`). Only what the run recorded is
kept; a field it did not record is `None`, never guessed. A
foreign log has no meta.json: its provenance is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Environment variables (a grid's `env`, recorded in meta.json) naming the benchmarked code's
#: git commit, where meta.json has no `git_commit` of its own.
GIT_COMMIT_ENV = ("TRAINBENCH_GIT_COMMIT", "GIT_COMMIT", "CI_COMMIT_SHA", "GITHUB_SHA")

#: The provenance fields, in the store's column order.
FIELDS = ("config_hash", "gpu_model", "driver", "cuda", "nccl", "framework_version",
          "container_image", "hosts", "clocks", "git_commit", "partition", "site", "started_s",
          "run_uuid")


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _text(value: Any) -> str | None:
    if value is None or value == "" or (isinstance(value, (dict, list)) and not value):
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


def _first(*values: Any) -> str | None:
    for value in values:
        text = _text(value)
        if text is not None:
            return text
    return None


def provenance(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The FIELDS of one run's meta.json (rank 0's record of the whole run)."""
    rank0: Mapping[str, Any] = next(
        (r for r in meta.get("ranks") or [] if isinstance(r, Mapping)), {})
    found = meta.get("versions")
    versions: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    framework = _get(meta, "case", "framework")
    started = meta.get("started_s")
    return {
        "config_hash": _first(meta.get("config_hash")),
        "gpu_model": _first(_get(rank0, "gpu_name"), rank0.get("device")),
        "driver": _first(versions.get("driver"), _get(rank0, "driver_version"),
                         _get(rank0, "telemetry", "driver")),
        "cuda": _first(versions.get("cuda")),
        "nccl": _first(versions.get("nccl")),
        "framework_version": _first(versions.get(str(framework))) if framework else None,
        "container_image": _first(_get(meta, "container", "image"), meta.get("container_image")),
        "hosts": _first(meta.get("hosts")),
        "clocks": _first(rank0.get("clocks"), meta.get("clocks")),
        "git_commit": _first(meta.get("git_commit"), versions.get("git_commit"),
                             *(_get(meta, "env", k) for k in GIT_COMMIT_ENV)),
        "partition": _first(_get(meta, "case", "slurm", "partition"),
                            _get(meta, "env", "SLURM_JOB_PARTITION")),
        "site": _first(meta.get("site")),
        "started_s": float(started) if isinstance(started, (int, float)) else None,
        "run_uuid": _first(meta.get("run_uuid"), meta.get("uuid")),
    }
