"""A run's provenance from its meta.json: what the toolkit records today (the recorded
quickstart), and the fields a run records only on some machines."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.results.provenance import FIELDS, provenance

ROOT = Path(__file__).resolve().parents[3]
META = ROOT / "tests/data/results_quickstart/cases/bert_base-torch-fp32-1n2g-bs8/r1/meta.json"


def test_the_recorded_quickstart_run() -> None:
    found = provenance(json.loads(META.read_text()))
    assert set(found) == set(FIELDS)
    assert found["config_hash"] == "d4cb019e038d" and found["hosts"] == "vm"
    assert found["gpu_model"] == "cpu (1 threads)" and found["cuda"] == "13.0"
    assert found["framework_version"] == "2.14.1+cu130"
    assert found["started_s"] == 1795401817.8052413
    assert found["driver"] is None and found["git_commit"] is None  # not recorded: never guessed


def test_fields_recorded_on_gpu_machines_and_by_the_grid() -> None:
    meta = {"versions": {"driver": "580.159.04", "nccl": "2.28.9", "torch": "2.14.1"},
            "case": {"framework": "torch", "slurm": {"partition": "gpu"}},
            "env": {"GIT_COMMIT": "1a2b3c"}, "site": "dgx",
            "container": {"runtime": "pyxis", "image": "nvcr.io/pytorch:25.01"},
            "ranks": [{"rank": 0, "device": "NVIDIA H200", "clocks": {"sm_mhz": 1980}}]}
    found = provenance(meta)
    assert (found["driver"], found["nccl"], found["framework_version"]) == \
        ("580.159.04", "2.28.9", "2.14.1")
    assert (found["partition"], found["git_commit"], found["container_image"]) == \
        ("gpu", "1a2b3c", "nvcr.io/pytorch:25.01")
    assert found["gpu_model"] == "NVIDIA H200" and found["clocks"] == "sm_mhz=1980"
    assert found["site"] == "dgx"
    assert provenance({"ranks": "garbage", "versions": None}) == dict.fromkeys(FIELDS)
