"""Ctrl-C ends every command with one line on stderr and exit status 130, never a traceback.

Real processes: the command runs in a session of its own and SIGINT goes to its whole process
group, as a terminal's Ctrl-C does (pool workers included).
"""

from __future__ import annotations

import importlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit import EXIT_INTERRUPTED
from toolkit.cli import VERBS
from toolkit.rank.event_writer import EventWriter
from toolkit.results.layout import JOB_FILE, CaseDir, rank_file
from toolkit.spec import Case, resolve

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}


def start(args: list[str], stdout: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], stdout=stdout, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=ROOT, env=ENV, start_new_session=True)


def ctrl_c(proc: subprocess.Popen[bytes]) -> tuple[int, list[str]]:
    """SIGINT to the process group; (exit status, stderr lines)."""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode(errors="replace").splitlines()


def case_dir(root: Path, bs: int, repeats: int = 1) -> CaseDir:
    case = resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": bs,
                                   "repeats": repeats, "warmup_iterations": 1,
                                   "measured_iterations": 3}))
    cdir = CaseDir(root, case.base_id())
    cdir.write_case(case)
    return cdir


@pytest.mark.parametrize("entry", [["-m", "toolkit.status"], ["-m", "toolkit.cli", "status"]],
                         ids=["status", "trainbench status"])
def test_ctrl_c_ends_status_watch_with_one_line(tmp_path: Path, entry: list[str]) -> None:
    # a run that started (job.json) and has no status yet: --watch waits for it forever
    run = case_dir(tmp_path, 8).prepare_run(0)
    (run / JOB_FILE).write_text(json.dumps({"host": "here"}))
    master, slave = pty.openpty()  # a terminal: the live view draws at once
    try:
        proc = start([*entry, str(tmp_path), "--watch", "--interval", "0.1"], stdout=slave)
        os.close(slave)
        ready, _, _ = select.select([master], [], [], 120)
        assert ready, "status --watch drew nothing in 120 s"
        os.read(master, 65536)  # it is watching
        code, err = ctrl_c(proc)
    finally:
        os.close(master)
    assert code == EXIT_INTERRUPTED == 130, err
    assert err == ["interrupted"]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _ignores_sigint(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    line = next(x for x in status.splitlines() if x.startswith("SigIgn:"))
    return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="needs Linux /proc children lists")
def test_ctrl_c_ends_collect_and_its_pool_with_one_line(tmp_path: Path) -> None:
    # 320 runs of 3000 iterations: long enough to be interrupted while the pool reads
    template = tmp_path / "template.jsonl"
    with EventWriter(template, 0) as w:
        for i in range(1, 3001):
            w.write("iter", iteration=i, elapsed_s=i * 0.1, step_time_s=0.1, samples=8,
                    loss=1.0, time_s=10.0 + i)
    results = tmp_path / "results"
    for bs in range(1, 41):
        cdir = case_dir(results, bs, repeats=8)
        for repeat in range(8):
            run = cdir.prepare_run(repeat)
            shutil.copyfile(template, rank_file(run, 0))
            (run / "status.json").write_text(json.dumps({"status": "ok"}))
    proc = start(["-m", "toolkit.collect", str(results), "--jobs", "2", "--no-plots"],
                 stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    seen_pool = None
    while time.monotonic() < deadline and proc.poll() is None:
        workers = _children(proc.pid)
        if workers:
            seen_pool = seen_pool or time.monotonic()
            # both workers set up (Ctrl-C is the parent's), or long enough after the first fork
            ready = len(workers) == 2 and all(_ignores_sigint(w) for w in workers)
            if ready or time.monotonic() - seen_pool > 5:
                break
        time.sleep(0.02)
    assert proc.poll() is None and seen_pool, "collect ended before its pool was seen"
    code, err = ctrl_c(proc)
    assert code == EXIT_INTERRUPTED, err
    assert err == ["interrupted"]
    assert not (results / "report.md").exists()  # nothing half written


def test_every_command_answers_ctrl_c_the_same_way() -> None:
    """Each verb's main is wrapped by `toolkit.interruptible` (topology has its own copy)."""
    for verb, v in VERBS.items():
        main = importlib.import_module(v.module).main
        if v.module.startswith("toolkit."):
            assert getattr(main, "__wrapped__", None) is not None, verb


def test_topology_ctrl_c(monkeypatch: pytest.MonkeyPatch,
                         capfd: pytest.CaptureFixture[str]) -> None:
    import topology.cli

    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(topology.cli, "probe", interrupted)
    assert topology.cli.main(["--json"]) == 130
    assert capfd.readouterr().err == "interrupted\n"
