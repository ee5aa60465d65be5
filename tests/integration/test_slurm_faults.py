"""What clusters do to a benchmark campaign, on a real local Slurm of its own (toolkit.localslurm:
slurmctld + 2 slurmd, SlurmdTimeout=10 s so a dead node is noticed quickly): a node that goes
away, a controller restart, a time limit, a preemption, two submits at once and hostile strings.
Each scenario is listed in docs/RELIABILITY.md with what the toolkit promises.

These tests kill and restart daemons, so they boot their own cluster (module scope) rather than
share the session's. They take minutes: marked slow (the default `pytest tests` runs them)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import client_env, skip_without_local_slurm, slurm_submit
from tests.integration.conftest_localslurm import jobs as _jobs
from tests.integration.conftest_localslurm import run as _run
from tests.integration.conftest_localslurm import tb as _tb
from toolkit.localslurm import LocalCluster, free_port_base, start_cluster

pytestmark = pytest.mark.slow

#: A CPU case of about 0.15 s per iteration on 2 ranks of a 2-core machine.
CASE = """
  model: resnet50
  device: cpu
  batch_size_per_device: 4
  warmup_iterations: 2
  cpu_threads: 1
  telemetry_interval_ms: 0
  model_config: {image_size: 32, num_classes: 10, resnet_layers: [1, 1, 1, 1]}
"""

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "command_scripts"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    skip_without_local_slurm()
    # Jobs share nodes here: the faults need several jobs on a node at once (a 2-node run
    # beside a 1-node one, a preempting job beside the one it preempts); no figure is judged.
    c = start_cluster(tmp_path_factory.mktemp("faults"), nodes=2, cpus_per_node=4,
                      port_base=free_port_base(2, start=19817), slurmd_timeout_s=10,
                      shared_nodes=True)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture()
def env(cluster: LocalCluster) -> dict[str, str]:
    return client_env(cluster, columns=250)


def _submitted(res: Path) -> list[tuple[str, int | None, str, tuple[int, ...]]]:
    """(job id, array task, case, repeats) of every run recorded as submitted."""
    return [(rec["job_id"], t["task"], t["case"], tuple(t["repeats"]))
            for rec in _jobs(res) if rec.get("type") == "submit" for t in rec["tasks"]]


def _wait(what: str, ready: Callable[[], bool], timeout_s: float, poll_s: float = 1.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def _status(run_dir: Path) -> dict:
    p = run_dir / "status.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _iterations(run_dir: Path, rank: int = 0) -> int:
    p = run_dir / f"rank{rank:03d}.jsonl"
    if not p.exists():
        return 0
    n = 0
    for line in p.read_text().splitlines():
        try:
            n += json.loads(line).get("type") == "iter"
        except ValueError:
            continue  # the line being written
    return n


def _squeue(env: dict[str, str]) -> dict[str, str]:
    p = _run(env, "squeue", "-h", "-r", "-o", "%i|%T", cwd=Path("/"))
    return dict(line.split("|") for line in p.stdout.split())


def _start_now(env: dict[str, str], job: str) -> None:
    """Slurm holds a requeued job for about two minutes (BeginTime); an admin's nudge."""
    _run(env, "scontrol", "update", f"JobId={job}", "StartTime=now", cwd=Path("/"))


@contextlib.contextmanager
def _restores_node(cluster: LocalCluster, node: str) -> Iterator[None]:
    """A test that fails between killing `node` and starting it again must not leave the shared
    cluster a node short: every later test would be refused its allocation."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            cluster.start_node(node)
        raise


def _runs_now(env: dict[str, str], res: Path) -> str:
    """What an assertion message needs to tell a flake from a bug: every run's status (or its
    absence) with the reason, and what squeue says of the results' jobs right now."""
    lines = []
    for run in sorted(res.glob("cases/*/r*")):
        st = _status(run)
        lines.append(f"  {run.parent.name}/{run.name}: {st.get('status', 'no status.json')}"
                     f" {st.get('reason', '')[:300]}")
    q = _run(env, "squeue", "-h", "-r", "--states=all", "-o", "%i|%T|%r", cwd=Path("/"))
    return "\nruns:\n" + "\n".join(lines) + f"\nsqueue (rc {q.returncode}):\n{q.stdout}{q.stderr}"


def _status_states(env: dict[str, str], res: Path, cwd: Path) -> str:
    p = _tb(env, "status", str(res), cwd=cwd)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _holding(run_dir: Path, ranks: int) -> bool:
    """Every rank's program has printed that it holds (train_tiny.py --hang-at)."""
    logs = [run_dir / f"program-rank{k:03d}.log" for k in range(ranks)]
    return all(p.exists() and "stops at iteration" in p.read_text(errors="replace")
               for p in logs)


def test_node_failure_requeue_or_fail_per_policy_then_resubmit_completes(
        cluster: LocalCluster, env: dict[str, str], tmp_path: Path) -> None:
    """Two 2-node runs (requeue: true / false) and a finished 1-node run; node2's slurmd is
    killed mid-run. The requeue run goes back to pending and completes once the node is back;
    the other is recorded node_fail; a resubmit runs only that one; nothing is duplicated.
    The runs are a DDP script (`model: command`) that holds at its 5th step until a file
    exists: the first attempts are still running whenever Slurm notices the node is gone, and
    the attempts after it run through at once."""
    shutil.copy(SCRIPTS / "train_tiny.py", tmp_path)
    release = tmp_path / "release"
    grid = tmp_path / "nodefail.yaml"
    grid.write_text(f"""
name: nodefail
repeats: 1
base:
  model: command
  warmup_iterations: 2
  telemetry_interval_ms: 0
  slurm: {{time_min: 10}}
  command:
    name: hold
    argv: ["{{python}}", train_tiny.py, --batch-size, "{{batch_size_per_device}}",
           --iters, "{{total_iterations}}", --log-style, megatron, --hang-at, "5",
           --hold-until, {json.dumps(str(release))}]
zip:
  - {{num_nodes: [2, 2, 1], batch_size_per_device: [4, 2, 3],
     measured_iterations: [6, 6, 2],
     slurm.requeue: [true, false, false]}}
""")
    res = tmp_path / "res"
    slurm_submit(env, grid, res, cwd=tmp_path)
    try:
        _node_failure(cluster, env, tmp_path, grid, res, release)
    except BaseException:
        release.touch()  # nothing of this test holds the shared cluster's nodes
        _run(env, "scancel", *{job for job, _, _, _ in _submitted(res)}, cwd=tmp_path)
        raise


def _node_failure(cluster: LocalCluster, env: dict[str, str], tmp_path: Path, grid: Path,
                  res: Path, release: Path) -> None:
    requeue, fail, quick = (res / "cases" / f"hold-torch-fp32-{n}-bs{b}" / "r0"
                            for n, b in (("2n1g", 4), ("2n1g", 2), ("1n1g", 3)))
    _wait("the 2-node runs to hold at their 5th step and the 1-node run to finish",
          lambda: _holding(requeue, 2) and _holding(fail, 2)
          and _status(quick).get("status") == "ok", 240)
    jobs = {case: job for job, _, case, _ in _submitted(res)}

    cluster.kill_node("node2")
    with _restores_node(cluster, "node2"):
        _wait("both 2-node runs to be ended by Slurm",
              lambda: bool(_status(fail)) and (requeue.with_name("r0.attempt1").exists()
                                               or bool(_status(requeue))), 120)
        st = _status(fail)
        assert st["status"] == "node_fail", st
        assert "a node of the job failed (node2)" in st["reason"] and "requeued" not in st
        _wait("the requeue run's status", lambda: bool(_status(requeue)), 30)
        st = _status(requeue)
        assert st["status"] == "node_fail" and st["requeued"] is True, st
        out = _status_states(env, res, tmp_path)
        assert "requeued: a node of the job failed (node2)" in out, out

    release.touch()
    cluster.start_node("node2")
    _start_now(env, jobs[requeue.parent.name])
    # Resubmit while the requeued job waits or runs: only the failed run is submitted again.
    p = slurm_submit(env, grid, res, "--wait", cwd=tmp_path, timeout=600)
    assert "1 runs to do, 1 already finished, 1 already queued" in p.stdout, p.stdout
    per_case: dict[str, int] = {}
    for _, _, case, _ in _submitted(res):
        per_case[case] = per_case.get(case, 0) + 1
    assert per_case == {requeue.parent.name: 1, fail.parent.name: 2, quick.parent.name: 1}
    _wait("the requeued run to finish", lambda: _status(requeue).get("status") == "ok", 240)
    for run in (requeue, fail, quick):
        assert _status(run)["status"] == "ok"
    assert _status(requeue.with_name("r0.attempt1"))["status"] == "node_fail"
    assert "requeue" in (requeue.parent / "submission.sh").read_text()

    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = (res / "runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 3  # header + one row per run: the kept attempt is not a run


def test_controller_restart_loses_and_double_counts_nothing(
        cluster: LocalCluster, env: dict[str, str], tmp_path: Path) -> None:
    """slurmctld restarts while one job runs and others wait: meanwhile status says unknown (not
    lost) and submit refuses to guess; afterwards every run finishes exactly once."""
    grid = tmp_path / "restart.yaml"
    grid.write_text("name: restart\nrepeats: 2\nbase:" + CASE +
                    "  measured_iterations: 40\n  num_nodes: 2\n  gpus_per_node: 2\n"
                    "  slurm: {time_min: 10, repeats_as: array}\n"
                    "sweep: {batch_size_per_device: [2, 4]}\n")
    res = tmp_path / "res"
    p = slurm_submit(env, grid, res, cwd=tmp_path)
    # 4 runs, each taking 2 of a node's 4 CPUs on both nodes: two run, two wait.
    _wait("a run to iterate", lambda: any(_iterations(r) > 2 for r in res.glob("cases/*/r*")),
          180)
    down = threading.Event()

    def restart() -> None:
        # Down longer than status's one query (Slurm's client tries to connect for ~9 s).
        cluster.restart_controller(down_s=22.0)
        down.set()

    t = threading.Thread(target=restart)
    t.start()
    try:
        time.sleep(2.0)  # slurmctld is down now
        out = _status_states(env, res, tmp_path)
        assert "lost" not in out and "unknown" in out, out
        # A submit now retries, then refuses to guess (exit 2), or, if the controller came
        # back meanwhile, finds every run queued: either way it submits nothing. `auto` (the
        # default executor) does not fall back to running the grid here.
        for executor in ("slurm", "auto"):
            p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor",
                    executor, cwd=tmp_path)
            assert (p.returncode == 2 and "nothing is submitted" in p.stderr) or (
                p.returncode == 0 and "0 runs to do" in p.stdout), (
                    p.stdout + p.stderr + _runs_now(env, res))
    finally:
        t.join()  # the cluster must be whole again before the next test, failed or not
    assert down.is_set()
    p = _tb(env, "status", str(res), "--watch", "--interval", "2", "--timeout", "400",
            cwd=tmp_path, timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr + _runs_now(env, res)
    assert len(_submitted(res)) == 4, _runs_now(env, res)  # the two arrays' tasks, once
    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = (res / "runs.csv").read_text().splitlines()[1:]
    assert len(rows) == 4 and all(",ok," in r for r in rows), rows


def test_time_limit_is_recorded_as_timeout_and_stops_the_sequence(
        env: dict[str, str], tmp_path: Path) -> None:
    """A job killed at its 1-minute limit: its run is `timeout` (status.json, status, collect)
    and the job's second repeat never starts."""
    grid = tmp_path / "tl.yaml"
    grid.write_text("name: tl\nrepeats: 2\nbase:" + CASE +
                    "  measured_iterations: 100000\n"
                    "  slurm: {time_min: 1, repeats_as: sequence}\n")
    res = tmp_path / "res"
    p = _tb(env, "submit", "--grid", str(grid), "--results", str(res), "--executor", "slurm",
            "--wait", cwd=tmp_path, timeout=400)
    assert p.returncode == 1, p.stdout + p.stderr  # not every run finished
    case = next((res / "cases").iterdir())
    st = _status(case / "r0")
    assert st["status"] == "timeout" and "time limit" in st["reason"], st
    assert st["slurm"]["Reason"] == "TimeLimit"
    assert not (case / "r1").exists()
    out = _status_states(env, res, tmp_path)
    assert "timeout" in out and "time limit" in out
    p = _tb(env, "collect", str(res), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ",timeout," in (res / "runs.csv").read_text()


def test_preemption_requeues_the_run_and_keeps_the_interrupted_attempt(
        cluster: LocalCluster, env: dict[str, str], tmp_path: Path) -> None:
    """A job of the urgent partition (higher PriorityTier) preempts a benchmark run: Slurm
    requeues it (PreemptMode=REQUEUE), the interrupted attempt is kept as r0.attempt1 with
    status `preempted`, and the rerun finishes."""
    grid = tmp_path / "pre.yaml"
    grid.write_text("name: pre\nrepeats: 1\nbase:" + CASE +
                    "  measured_iterations: 60\n  num_nodes: 2\n"
                    "  slurm: {time_min: 10}\n")
    res = tmp_path / "res"
    p = slurm_submit(env, grid, res, cwd=tmp_path)
    run = next((res / "cases").iterdir()) / "r0"
    _wait("the run to iterate", lambda: _iterations(run) > 2, 180)
    p = _run(env, "sbatch", "--parsable", "-p", "urgent", "-N2", "--exclusive", "--wrap",
             "sleep 2", "-o", str(tmp_path / "urgent-%j.out"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    attempt = run.with_name("r0.attempt1")
    job = _submitted(res)[0][0]
    _wait("the preempted attempt's status", lambda: _status(run).get("status") == "preempted"
          or _status(attempt).get("status") == "preempted", 60)
    out = _status_states(env, res, tmp_path)
    assert "requeued: the job was preempted" in out or "running" in out, out
    _start_now(env, job)
    p = _tb(env, "status", str(res), "--watch", "--interval", "2", "--timeout", "300",
            cwd=tmp_path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _status(run)["status"] == "ok"
    first = _status(attempt)
    assert first["status"] == "preempted" and first["requeued"] is True, first


def test_two_submits_at_once_submit_each_run_once(env: dict[str, str], tmp_path: Path) -> None:
    grid = tmp_path / "twice.yaml"
    grid.write_text("name: twice\nrepeats: 2\nbase:" + CASE +
                    "  measured_iterations: 2\n  slurm: {time_min: 5}\n"
                    "sweep: {batch_size_per_device: [2, 3, 4]}\n")
    res = tmp_path / "res"
    cmd = [sys.executable, "-m", "toolkit.submit", "--grid", str(grid),
           "--results", str(res), "--executor", "slurm"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    # Either one waits out the other's lock and finds everything queued, or it is refused.
    assert codes in ([0, 0], [0, 2]), outs
    if codes == [0, 2]:
        assert any("another toolkit.submit is running" in err for _, err in outs), outs
    keys = [(case, repeats) for _, _, case, repeats in _submitted(res)]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 6, keys
    p = _tb(env, "status", str(res), "--watch", "--interval", "2", "--timeout", "300",
            cwd=tmp_path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr


def test_an_sbatch_that_times_out_after_slurm_queued_its_job_submits_it_once(
        cluster: LocalCluster, env: dict[str, str], tmp_path: Path) -> None:
    """slurmctld stops (SIGSTOP) just as the submit's sbatch starts and goes on 14 s later:
    sbatch gives up after MessageTimeout (10 s) saying "Socket timed out", yet the controller
    then queues the job (tests/data/slurm/README.md). The submit finds that job by its tag
    instead of submitting a second one; every run runs once."""
    ctld = next(d for d in cluster.daemons if d.name == "slurmctld" and d.alive())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = subprocess.run(["which", "sbatch"], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()
    once = tmp_path / "stopped-once"
    # Fault injection only: the real sbatch runs, against the real (stopped) controller.
    (bin_dir / "sbatch").write_text(f"""#!/bin/bash
case " $* " in *" --test-only "*) exec {real} "$@" ;; esac
if [ ! -e {once} ]; then
  touch {once}
  kill -STOP {ctld.pid}
  (sleep 14; kill -CONT {ctld.pid}) >/dev/null 2>&1 &
fi
{real} "$@"
rc=$?
echo "$rc" >> {tmp_path / "sbatch-rcs"}
exit "$rc"
""")
    (bin_dir / "sbatch").chmod(0o755)
    grid = tmp_path / "slow.yaml"
    grid.write_text("name: slow\nrepeats: 2\nbase:" + CASE +
                    "  measured_iterations: 2\n"
                    "  slurm: {time_min: 5, extra_sbatch: ['--comment=site-42']}\n")
    res = tmp_path / "res"
    slow_env = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}
    try:
        p = slurm_submit(slow_env, grid, res, cwd=tmp_path, timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(ctld.pid, signal.SIGCONT)  # whatever happened, the controller goes on
    rcs = (tmp_path / "sbatch-rcs").read_text().split()
    assert rcs[0] == "1", rcs  # the first sbatch did time out: the case under test happened
    records = [r for r in _jobs(res) if r.get("type") in ("intent", "submit", "void")]
    assert [r["type"] for r in records] == ["intent", "submit"], records
    assert records[1]["token"] == records[0]["token"]
    job = records[1]["job_id"]
    case = next((res / "cases").iterdir())
    q = _run(env, "squeue", "-h", "--states=all", "-o", "%F|%T|%k", cwd=Path("/"))
    tagged = [ln.split("|") for ln in q.stdout.split("\n")
              if ln.endswith(f"site-42 trainbench:{records[0]['token']}")]
    # The recorded job is the only one that may run; a held retry raced by the late first
    # job was cancelled before it ran (finished tasks may have left the queue).
    assert {i for i, state, _ in tagged if state != "CANCELLED"} <= {job}, q.stdout
    p = _tb(env, "status", str(res), "--watch", "--interval", "2", "--timeout", "300",
            cwd=tmp_path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr + _runs_now(env, res)
    for k in (0, 1):
        st = _status(case / f"r{k}")
        assert st.get("status") == "ok" and st.get("slurm_array_job_id") == job, st
        assert not (case / f"r{k}.attempt1").exists()  # no second job ever began a run


def test_hostile_strings_reach_slurm_and_ranks_verbatim_and_execute_nothing(
        env: dict[str, str], tmp_path: Path) -> None:
    """Shell metacharacters in every grid string that reaches a script or sbatch: the job runs,
    the rank sees the env value byte for byte, sbatch got the comment as one option, and the
    marker file the strings try to create never appears."""
    marker = Path("/tmp") / f"tb-pwned-{os.getpid()}"  # short: the value fits sbatch's 200
    marker.unlink(missing_ok=True)
    evil = f"$(touch {marker}); `touch {marker}` ' \" ; touch {marker} ../../x"
    grid = tmp_path / "evil.yaml"
    doc = {"name": "evil", "repeats": 1,
           "base": {"model": "resnet50", "device": "cpu", "batch_size_per_device": 2,
                    "warmup_iterations": 1, "measured_iterations": 2, "cpu_threads": 1,
                    "telemetry_interval_ms": 0, "name": "evil-case",
                    "model_config": {"image_size": 32, "num_classes": 10,
                                     "resnet_layers": [1, 1, 1, 1]},
                    "env": {"TB_EVIL": evil},
                    "slurm": {"time_min": 5, "extra_sbatch": [f"--comment={evil}"]}}}
    grid.write_text(json.dumps(doc))  # JSON is YAML
    res = tmp_path / "res"
    slurm_submit(env, grid, res, "--wait", cwd=tmp_path, timeout=400)
    run = res / "cases" / "evil-case" / "r0"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["env"]["TB_EVIL"] == evil
    job = _submitted(res)[0][0]
    info = _run(env, "scontrol", "show", "job", job, cwd=tmp_path).stdout
    assert f"Comment={evil}" in info, info  # one option, verbatim (MinJobAge keeps the job 60 s)
    assert not marker.exists()
    assert not list(tmp_path.parent.glob("x"))
