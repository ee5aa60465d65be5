"""Where the local cluster keeps its state when nothing names a directory: one per user."""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.localslurm.daemons import default_state_dir


def test_the_default_state_directory_is_the_users_own(monkeypatch):
    monkeypatch.delenv("TRAINBENCH_SLURM_DIR", raising=False)
    assert default_state_dir() == Path(f"/tmp/trainbench-slurm-{os.getuid()}")
    monkeypatch.setenv("TRAINBENCH_SLURM_DIR", "/tmp/mine")
    assert default_state_dir() == Path("/tmp/mine")
