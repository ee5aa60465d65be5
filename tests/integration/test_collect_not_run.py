"""`collect` names the runs that did not run, on the real local Slurm cluster: a grid cancelled
while its first repeat ran and its second waited (array_parallelism 1) leaves a report that
says which repeat never started and why."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import TINY, client_env, slurm_submit, submits
from tests.integration.conftest_localslurm import run as _run
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster


@pytest.fixture()
def env(local_slurm: LocalCluster) -> dict[str, str]:
    return client_env(local_slurm)


def test_a_cancelled_repeat_that_never_started_is_named(env: dict[str, str],
                                                        tmp_path: Path) -> None:
    grid = tmp_path / "long.yaml"
    grid.write_text("name: long\nrepeats: 2\nbase:" + TINY.replace(
        "measured_iterations: 3", "measured_iterations: 100000") +
        "  slurm: {time_min: 10, array_parallelism: 1}\n")
    res = tmp_path / "res"
    slurm_submit(env, grid, res, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        st = _tb(env, "status", str(res), cwd=tmp_path)
        if "running" in st.stdout:
            break
        time.sleep(2)
    assert "running" in st.stdout, st.stdout
    p = _tb(env, "cancel", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    job_id = submits(res)[0]["job_id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        q = _run(env, "squeue", "-h", "-r", "-j", job_id, cwd=tmp_path)
        if not q.stdout.strip():
            break
        time.sleep(1)
    p = _tb(env, "collect", str(res), "--no-store", "--no-plots", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    case = "resnet50-torch-fp32-1n1g-bs4"
    report = (res / "report.md").read_text()
    assert "the grid plans 2 in 1 case(s);" in report and "did not run" in report
    assert "## Runs that did not run" in report
    # the second repeat never started: its array task was cancelled while it waited
    assert f"| {case} | 1 | cancelled | job {job_id}_1 cancelled by toolkit.cancel |" in report
    assert f"cancelled {case} r1: job {job_id}_1 cancelled by toolkit.cancel" in \
        " ".join(p.stderr.split())
