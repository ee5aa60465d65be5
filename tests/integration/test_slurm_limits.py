"""Submission limits on a real local cluster with accounting (MariaDB + slurmdbd, limits
enforced): sacct reports jobs, MaxSubmitJobs refuses what exceeds it, and `toolkit.submit`
queues client-side and submits as slots free: a 1,000-case load test (slow) and 8 real trainings
at MaxSubmitJobs=3. Boots its own cluster for this module (its own state dir under /tmp and a
free port range from 21817, never the default ports); the last test takes it down and proves
that MariaDB and slurmdbd went with it. Tests run in file order."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import TINY, client_env, skip_without_local_slurm
from tests.integration.conftest_localslurm import submits as _submits
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.launch.run_states import run_states
from toolkit.launch.slurm_client import SchedulerError, SlurmClient
from toolkit.localslurm import LocalCluster, free_port_base, start_cluster
from toolkit.localslurm import cli as localslurm_cli
from toolkit.localslurm.accounting import enforced_max_submit_jobs, set_max_submit_jobs

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    skip_without_local_slurm()
    # Short: slurmd's step sockets and MariaDB's socket live under it.
    state = Path(tempfile.mkdtemp(prefix="tbacct-", dir="/tmp"))
    nodes = 2
    found = start_cluster(state, nodes=nodes, cpus_per_node=max(2, os.cpu_count() or 1),
                          # slurmctld, 2 slurmd, slurmdbd, MariaDB: nodes + 3 ports.
                          port_base=free_port_base(nodes + 2, start=21817), accounting=True)
    try:
        yield found
    finally:
        found.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture()
def env(cluster: LocalCluster) -> dict[str, str]:
    return client_env(cluster)


def _slurm(env: dict[str, str]) -> SlurmClient:
    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60,
                              check=False)
    return SlurmClient(runner=runner)


def _our_queue(env: dict[str, str]) -> list[str]:
    """Ids (`<job>_<task>` for array tasks) of our jobs that count against MaxSubmitJobs."""
    out = subprocess.run(["squeue", "-h", "-r", "--me", "-t", "PENDING,RUNNING,SUSPENDED",
                          "-o", "%i"], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return out.split()


def test_sacct_reports_jobs_and_max_submit_jobs_is_enforced(cluster: LocalCluster,
                                                           env: dict[str, str],
                                                           tmp_path: Path) -> None:
    assert cluster.accounting
    assert {"mariadb", "slurmdbd"} <= {d.name for d in cluster.alive()}
    slurm = _slurm(env)
    job = subprocess.run(["sbatch", "--parsable", "--wait", "-o", str(tmp_path / "o"), "--wrap",
                          "true"], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip()
    deadline = time.monotonic() + 30
    acct = slurm.accounting([job])
    while time.monotonic() < deadline and (acct or {}).get(job, ("",))[0] != "COMPLETED":
        time.sleep(0.5)  # slurmctld sends job records to slurmdbd in the background
        acct = slurm.accounting([job])
    assert acct == {job: ("COMPLETED", "0:0")}

    set_max_submit_jobs(cluster, 2)
    assert set(v.split("(")[0] for v in enforced_max_submit_jobs(cluster)) == {"2"}
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    held = [slurm.sbatch(str(script), ["--hold", "-o", "/dev/null"]) for _ in range(2)]
    with pytest.raises(SchedulerError) as err:
        slurm.sbatch(str(script), ["--hold", "-o", "/dev/null"])
    assert err.value.limit and "AssocMaxSubmitJobLimit" in err.value.message
    assert slurm.active_jobs() == 2
    slurm.cancel(held)
    set_max_submit_jobs(cluster, None)
    assert set(v.split("(")[0] for v in enforced_max_submit_jobs(cluster)) == {""}


def test_ctrl_c_at_the_limit_then_a_second_submit_continues(cluster: LocalCluster,
                                                            env: dict[str, str],
                                                            tmp_path: Path) -> None:
    """20 held one-task jobs against MaxSubmitJobs=5: submit waits at the limit; a real SIGINT
    stops it with the 5 accepted jobs recorded; with the limit lifted, a second submit submits
    the other 15 and nothing twice. Then toolkit.status, through sacct, names how the jobs that
    were cancelled behind its back ended (cancelled, not lost)."""
    set_max_submit_jobs(cluster, 5)
    grid = tmp_path / "held.yaml"
    grid.write_text("name: held\nrepeats: 1\nbase:" + TINY +
                    "  slurm: {time_min: 5, extra_sbatch: ['--hold']}\n"
                    "sweep: {batch_size_per_device: [" + ", ".join(map(str, range(2, 22))) +
                    "]}\n")
    res = tmp_path / "res"
    argv = [sys.executable, "-m", "toolkit.submit", "--grid", str(grid), "--results", str(res),
            "--executor", "slurm"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_our_queue(env)) < 5:
        time.sleep(0.5)
    time.sleep(2)  # now it polls squeue, waiting for a slot
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted: 5 of 20 runs (5 jobs) were submitted and recorded" in err, err
    assert len(_submits(res)) == 5 and len(_our_queue(env)) == 5

    set_max_submit_jobs(cluster, None)
    p = _tb(env, "submit", *argv[3:], cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "15 runs to do, 5 already queued" in p.stdout, p.stdout
    cases = [t["case"] for s in _submits(res) for t in s["tasks"]]
    assert len(cases) == 20 and len(set(cases)) == 20

    queued = _our_queue(env)
    assert len(queued) == 20
    subprocess.run(["scancel", *queued], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states, _ = run_states(res, _slurm(env))
        if all("ended CANCELLED" in s.reason for s in states):
            break
        time.sleep(1)  # slurmctld sends the end of each job to slurmdbd in the background
    # Accounting names the end, so the runs are cancelled, not lost.
    assert len(states) == 20 and {s.state for s in states} == {"cancelled"}, states
    assert all("ended CANCELLED" in s.reason for s in states), [s.reason for s in states]
    st = _tb(env, "status", str(res), cwd=tmp_path)
    assert re.search(r"cancelled\W+20\b", st.stdout), st.stdout


class Drainer(threading.Thread):
    """Stands in for jobs finishing: every `period_s` it reads our queue (recording the most
    jobs ever seen at once and every id seen) and scancels the `batch` oldest."""

    def __init__(self, env: dict[str, str], batch: int, period_s: float) -> None:
        super().__init__(daemon=True)
        self.env, self.batch, self.period_s = env, batch, period_s
        self.max_seen = 0
        self.seen: set[str] = set()
        self.stop_when_empty = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while True:
                ids = _our_queue(self.env)
                self.max_seen = max(self.max_seen, len(ids))
                self.seen.update(ids)
                if not ids and self.stop_when_empty.is_set():
                    return
                oldest = sorted(ids, key=lambda i: tuple(int(x) for x in i.split("_")))
                if oldest:
                    subprocess.run(["scancel", *oldest[:self.batch]], env=self.env,
                                   capture_output=True, timeout=60, check=True)
                time.sleep(self.period_s)
        except BaseException as e:  # reported by the test
            self.error = e


@pytest.mark.slow
def test_load_1000_cases_at_max_submit_jobs_50(cluster: LocalCluster, env: dict[str, str],
                                               tmp_path: Path) -> None:
    """A 1,000-case grid (one grid-scope job array of 1,000 tasks) against MaxSubmitJobs=50.
    The jobs are submitted with --hold (slurm.extra_sbatch), so none trains: 1,000 real trainings
    would take half an hour on 2 cores. The Drainer's scancel of the oldest stands in for jobs
    finishing, and its squeue polls check that we never had more than 50 queued."""
    limit = 50
    set_max_submit_jobs(cluster, limit)
    grid = tmp_path / "load.yaml"
    grid.write_text("name: load\nrepeats: 1\nbase:" + TINY +
                    "  slurm: {time_min: 5, array_scope: grid, extra_sbatch: ['--hold']}\n"
                    "sweep:\n"
                    "  batch_size_per_device: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                    "  warmup_iterations: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                    "  measured_iterations: [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n")
    res = tmp_path / "res"
    drainer = Drainer(env, batch=10, period_s=0.3)
    drainer.start()
    t0 = time.monotonic()
    try:
        p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor",
                "slurm", cwd=tmp_path, timeout=600)
    finally:
        submit_s = time.monotonic() - t0
        drainer.stop_when_empty.set()
        drainer.join(timeout=120)
    print(f"load test: 1000 runs submitted in {submit_s:.1f} s", file=sys.stderr)
    assert drainer.error is None, drainer.error
    assert not drainer.is_alive()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert "1000 cases, 1000 runs to do" in p.stdout
    assert "Slurm's submission limit reached" in p.stdout, p.stdout[-3000:]
    assert "waiting for a submission slot (" in p.stdout
    assert "of yours queued at the limit" in p.stdout and "left to submit)" in p.stdout
    assert f"at the submission limit ({limit} jobs)" in p.stdout, p.stdout[-2000:]

    assert 0 < drainer.max_seen <= limit
    submits = _submits(res)
    assert len(submits) > 1000 // limit  # the one array of 1,000 tasks was cut into pieces
    tasks = [(s["job_id"], t["task"], t["case"], tuple(t["repeats"]))
             for s in submits for t in s["tasks"]]
    cases = [(case, reps) for _, _, case, reps in tasks]
    assert len(cases) == 1000 and len(set(cases)) == 1000  # every case exactly once
    assert sorted(t for _, t, _, _ in tasks) == list(range(1000))
    # What Slurm really queued is what the manifest says: every recorded array task was seen
    # by the drainer, and nothing else of ours was.
    assert drainer.seen == {f"{job}_{task}" for job, task, _, _ in tasks}
    for s in submits:
        (array,) = [o for o in s["options"] if o.startswith("--array=")]
        assert len(s["tasks"]) <= limit, array


def test_eight_real_runs_at_max_submit_jobs_3(cluster: LocalCluster, env: dict[str, str],
                                              tmp_path: Path) -> None:
    """Real trainings, nothing cancelled: 8 cases, each a job (case-scope arrays) and MaxSubmitJobs
    3, so submit waits for real jobs to finish before it can submit the rest."""
    limit = 3
    set_max_submit_jobs(cluster, limit)
    grid = tmp_path / "eight.yaml"
    grid.write_text("name: eight\nrepeats: 1\nbase:" + TINY + "  slurm: {time_min: 5}\n"
                    # From 2: BatchNorm cannot train on one sample.
                    "sweep: {batch_size_per_device: [2, 3, 4, 5, 6, 7, 8, 9]}\n")
    res = tmp_path / "res"
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(len(_our_queue(env)))
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor",
                "slurm", "--wait", cwd=tmp_path, timeout=600)
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert "waiting for a submission slot (3 of yours queued at the limit" in p.stdout, p.stdout
    assert "submitted 8 job(s), 8 run(s)" in p.stdout
    assert max(seen) <= limit and max(seen) > 0, seen
    assert len(_submits(res)) == 8

    st = _tb(env, "status", str(res), cwd=tmp_path)
    assert st.returncode == 0, st.stdout + st.stderr
    assert re.search(r"finished\W+8\b", st.stdout), st.stdout
    for run in res.glob("cases/*/r0"):
        assert json.loads((run / "status.json").read_text())["status"] == "ok"
    assert len(list(res.glob("cases/*/r0/status.json"))) == 8

    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    with (res / "runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 8 and all(float(r["throughput_sps"]) > 0 for r in rows), rows
    set_max_submit_jobs(cluster, None)


def test_cli_limit_status_and_down_stops_mariadb_and_slurmdbd(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    started = list(cluster.daemons)
    assert [d.name for d in started if d.name in ("mariadb", "slurmdbd")] == ["mariadb",
                                                                              "slurmdbd"]
    state = ["--state-dir", str(cluster.state_dir)]
    assert localslurm_cli.main(["limit", "--max-submit-jobs", "7", *state]) == 0
    assert "MaxSubmitJobs=7 for root, enforced" in capsys.readouterr().out
    assert {v.split("(")[0] for v in enforced_max_submit_jobs(cluster)} == {"7"}
    assert localslurm_cli.main(["status", *state]) == 0
    out = capsys.readouterr().out
    assert "mariadb" in out and "slurmdbd" in out and "stopped" not in out
    # The same state dir without accounting is another cluster: refused, not silently reused.
    assert localslurm_cli.main(["up", *state]) == 1
    assert "accounting on" in capsys.readouterr().err
    assert localslurm_cli.main(["down", *state]) == 0
    cluster.stop()  # reaps our own children (the CLI can only signal them)
    for daemon in started:
        assert not daemon.alive(), daemon
    assert localslurm_cli.main(["status", *state]) == 1
