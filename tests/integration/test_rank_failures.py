"""A rank dies, a rank hangs: real mpirun, real mpi4py, real torch on CPU (2 ranks, a tiny
ResNet50). The job must end soon after, and status.json and the report must say which rank,
what happened to it and where the log is."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit import collect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TINY = "{image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}"


def _grid(name: str, body: str) -> str:
    return f"""
name: {name}
repeats: 1
base:
  framework: torch
  model: resnet50
  precision: fp32
  batch_size_per_device: 4
  warmup_iterations: 2
  slurm: {{time_min: 5}}
  model_config: {TINY}
{body}"""


class Submit:
    """`python -m toolkit.submit` of a grid with the local executor, in the background; every
    process it started is ended when the test ends, whatever happened."""

    def __init__(self, tmp: Path, grid: str) -> None:
        (tmp / "grid.yaml").write_text(grid)
        self.results = tmp / "results"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "toolkit.submit", "--grid", str(tmp / "grid.yaml"),
             "--results", str(self.results), "--executor", "local"],
            env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)

    def run_dir(self, case_id: str) -> Path:
        return self.results / "cases" / case_id / "r0"

    def rank_start_after_iterations(self, case_id: str, rank: int, timeout_s: float = 240
                                    ) -> dict[str, object]:
        """The rank's `start` record, once it has written an `iter` record."""
        path = self.run_dir(case_id) / f"rank{rank:03d}.jsonl"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                text = path.read_text()
                records = [json.loads(x) for x in text[:text.rfind("\n") + 1].splitlines()]
                start = next((r for r in records if r["type"] == "start"), None)
                if start and any(r["type"] == "iter" for r in records):
                    return start
            assert self.proc.poll() is None, self.proc.communicate()[0]
            time.sleep(0.2)
        raise AssertionError(f"rank {rank} of {case_id} wrote no iteration in {timeout_s} s")

    def wait_status(self, case_id: str, timeout_s: float) -> tuple[dict[str, object], float]:
        """status.json of the case's run, and when it appeared (monotonic)."""
        path = self.run_dir(case_id) / "status.json"
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            assert time.monotonic() < deadline, f"no status.json within {timeout_s} s"
            time.sleep(0.2)
        return json.loads(path.read_text()), time.monotonic()

    def close(self) -> None:
        """End what is left: the ranks (found by their start records, and only while their
        command line still names this test's results, so a reused pid is left alone), then
        the submit process (mpirun ends with its ranks)."""
        for path in self.results.glob("cases/*/r*/rank*.jsonl"):
            for line in path.read_text().splitlines()[:1]:
                pid = int(json.loads(line)["pid"])
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if str(self.results).encode() in cmdline:
                    os.kill(pid, signal.SIGKILL)  # a stopped process dies of it too
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.communicate(timeout=60)


@pytest.fixture
def submit(tmp_path: Path) -> Iterator[list[Submit]]:
    started: list[Submit] = []
    yield started
    for s in started:
        s.close()


def test_a_killed_rank_fails_its_run_with_the_rank_and_signal_and_the_grid_goes_on(
        tmp_path, submit):
    grid = _grid("killed", """zip:
  - gpus_per_node: [2, 1]
    measured_iterations: [100000, 4]
""")
    run = Submit(tmp_path, grid)
    submit.append(run)
    victim, other = "resnet50-torch-fp32-1n2g-bs4", "resnet50-torch-fp32-1n1g-bs4"
    start = run.rank_start_after_iterations(victim, 1)
    os.kill(int(start["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    killed = time.monotonic()
    status, ended = run.wait_status(victim, timeout_s=120)
    assert ended - killed < 60  # mpirun tears the job down; nobody waits for time_min
    out, _ = run.proc.communicate(timeout=300)
    assert run.proc.returncode == 1, out  # one run failed ...

    log = run.run_dir(victim) / "output.log"
    assert status["status"] == "failed"
    reason = str(status["reason"])
    assert reason.startswith(f"rank 1 (pid {start['pid']} on host {start['host']}) was killed "
                             "by signal SIGKILL after iteration "), reason
    assert reason.endswith(f"; log: {log}")
    first = status["failed_ranks"][0]  # type: ignore[index]
    assert {k: first[k] for k in ("rank", "signal", "pid", "host")} == {
        "rank": 1, "signal": "SIGKILL", "pid": start["pid"], "host": start["host"]}
    assert "exited on signal 9" in log.read_text()
    # ... and the other case of the grid still ran and finished
    assert json.loads((run.run_dir(other) / "status.json").read_text())["status"] == "ok"

    assert collect.main([str(run.results)]) == 0
    report = (run.results / "report.md").read_text()
    failed = report[report.index("Failed runs"):]
    assert f"| {victim} | 0 | failed | rank 1 (pid {start['pid']} on host {start['host']}) " \
           "was killed by signal SIGKILL" in failed
    assert other not in failed


def test_a_stopped_rank_is_caught_by_its_peers_watchdog(tmp_path, submit):
    grid = _grid("hung", """  gpus_per_node: 2
  measured_iterations: 100000
  watchdog: {iteration_s: 5, first_iteration_s: 120}
""")
    run = Submit(tmp_path, grid)
    submit.append(run)
    case_id = "resnet50-torch-fp32-1n2g-bs4"
    peer = run.rank_start_after_iterations(case_id, 0)
    start = run.rank_start_after_iterations(case_id, 1)
    os.kill(int(start["pid"]), signal.SIGSTOP)  # type: ignore[call-overload]
    stopped = time.monotonic()
    status, ended = run.wait_status(case_id, timeout_s=120)
    assert ended - stopped < 5 + 30  # the watchdog's limit plus start-up of the abort
    run.proc.communicate(timeout=120)

    assert status["status"] == "failed"
    reason = str(status["reason"])
    assert re.match(
        rf"rank 0 \(pid {peer['pid']} on host {peer['host']}\): no iteration for \d+ s \(hang "
        r"watchdog, watchdog.iteration_s=5\); last iteration \d+; rank 1 has shown no sign of "
        r"life for \d+ s \(stopped, or stuck holding the GIL\); ", reason), reason
    assert reason.endswith(f"; log: {run.run_dir(case_id) / 'output.log'}")
    ranks = {r["rank"]: r for r in status["failed_ranks"]}  # type: ignore[attr-defined]
    assert ranks[0]["watchdog"]["key"] == "iteration_s"
    assert ranks[1]["pid"] == start["pid"] and ranks[1]["silent_s"] > 3
    records = [json.loads(x) for x in
               (run.run_dir(case_id) / "rank000.jsonl").read_text().splitlines()]
    errors = [r for r in records if r["type"] == "error"]
    assert "hang watchdog" in errors[0]["message"] and errors[0]["watchdog"]["silent_ranks"]
    assert "aborting the MPI job" in (run.run_dir(case_id) / "output.log").read_text()
