"""Ranks that died or hung, read from REAL recorded launcher output and rank files
(tests/data/launcher/SOURCE.md): the launcher messages, the per-rank diagnosis, and the
status.json / row that `toolkit.launch.lifecycle` writes from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolkit.launch import lifecycle
from toolkit.results import launcher_output as launcher
from toolkit.results.diagnose import PMIX_START_CAUSE, diagnose, diagnose_run
from toolkit.results.layout import CaseDir
from toolkit.results.runs import read_rank_file
from toolkit.spec import Case

DATA = Path(__file__).resolve().parents[2] / "data" / "launcher"


def _parse(name: str) -> list[tuple[str, tuple[int, ...], str, str | None, int | None, str | None]]:
    return [(r.launcher, r.ranks, r.kind, r.signal, r.exit_code, r.host)
            for r in launcher.parse((DATA / name).read_text())]


def test_mpirun_messages():
    assert _parse("mpirun_sigkill/output.log") == [
        ("mpirun", (0,), "abort", None, 1, None),
        ("mpirun", (1,), "signal", "SIGKILL", None, "vm")]
    assert _parse("mpirun_exit_code.log") == [("mpirun", (1,), "exit", None, 3, None)]
    # the second rank's abort is folded into "1 more process has sent help message"
    assert _parse("mpirun_watchdog/output.log") == [("mpirun", (0,), "abort", None, 4, None)]


def test_srun_messages():
    assert _parse("srun_sigkill/output.log") == [
        ("srun", (1,), "signal", "SIGKILL", None, "node2"),
        ("srun", (0,), "signal", "SIGTERM", None, "node1")]
    assert _parse("srun_exit_code.log") == [("srun", (1,), "exit", None, 3, "node2")]
    assert _parse("srun_tasks_exit_code.log") == [
        ("srun", (2, 3), "exit", None, 2, "node2"), ("srun", (0, 1), "exit", None, 2, "node1")]
    # Open MPI's abort text also appears under srun, before srun's own view of it
    assert _parse("srun_watchdog/output.log") == [
        ("mpirun", (0,), "abort", None, 4, None), ("srun", (0,), "exit", None, 4, "node1"),
        ("srun", (1,), "signal", "SIGKILL", None, "node2")]


def test_a_segfault_names_the_python_code_the_fault_handler_saw():
    text = (DATA / "mpirun_faulthandler.log").read_text()
    assert _parse("mpirun_faulthandler.log") == [("mpirun", (1,), "signal", "SIGSEGV", None, "vm")]
    (crash,) = launcher.python_crashes(text)
    assert crash.error == "Segmentation fault"
    assert crash.frames[1:] == ("read_null (/tmp/rec/segv.py:8)", "<module> (/tmp/rec/segv.py:13)")
    assert crash.frames[0].startswith("string_at (") and crash.frames[0].endswith(
        "ctypes/__init__.py:519)")
    d = diagnose([], text)
    assert d.reason.startswith("rank 1 (host vm) was killed by signal SIGSEGV before it wrote "
                               "its start record (Python's fault handler: Segmentation fault in "
                               "string_at (")
    assert "called from read_null (/tmp/rec/segv.py:8)" in d.reason
    assert d.failed_ranks[0]["python_stack"] == list(crash.frames)
    # Two ranks dead of SIGSEGV: the log does not say whose stack it is, so neither gets it.
    both = text.replace("mpirun noticed that process rank 1",
                        "srun: error: vm: task 0: Segmentation fault\nmpirun noticed that "
                        "process rank 1")
    d = diagnose([], both)
    assert "SIGSEGV" in d.reason and "fault handler" not in d.reason
    assert all("python_stack" not in f for f in d.failed_ranks)


def test_a_rank_killed_in_mpi_init_under_srun_is_named_with_the_pmix_fence_cause():
    # Both recordings: a rank held back 3 s on node1, the step's fence the tree; with and
    # without Python's fault handler (then Open MPI's own handler reports address 0).
    for name in ("srun_pmix_start_crash.log", "srun_pmix_start_crash_no_faulthandler.log"):
        d = diagnose([], (DATA / name).read_text())
        assert d.reason.startswith("rank 0 (host node1) was killed by signal SIGSEGV before it "
                                   "wrote its start record"), name
        assert f"; likely {PMIX_START_CAUSE}" in d.reason, name
        assert "slurm.pmix_fence: ring" in d.reason
        assert d.failed_ranks[0]["cause"] == "pmix_start"
        # the ranks srun ended after the crash follow from it and carry no cause
        assert [f["rank"] for f in d.failed_ranks if f.get("cause")] == [0]
    with_handler = diagnose([], (DATA / "srun_pmix_start_crash.log").read_text())
    assert "(Python's fault handler: Segmentation fault in _call_with_frames_removed" in \
        with_handler.reason


def test_other_segfaults_are_not_given_the_pmix_cause():
    # mpirun's rank, dead in the program's own code after MPI_Init
    assert "likely" not in diagnose([], (DATA / "mpirun_faulthandler.log").read_text()).reason
    text = (DATA / "srun_pmix_start_crash.log").read_text()
    # a rank that had written its start record was past MPI_Init
    started = read_rank_file(DATA / "srun_sigkill" / "rank000.jsonl")
    assert started.start is not None and started.rank == 0
    assert "likely" not in diagnose([started], text).reason
    # a segfault under srun in the program's own code, at a non-null address
    own = text.replace('  File "<frozen importlib._bootstrap>", line 241 in '
                       '_call_with_frames_removed\n', "", 1).replace(
        '  File "<frozen importlib._bootstrap_external>", line 1241 in exec_module\n', "", 1)
    own = "\n".join(line for line in own.splitlines() if "frozen importlib" not in line)
    assert "in <module> (/tmp/r48/probe0.py:5)" in diagnose([], own).reason
    assert "likely" not in diagnose([], own).reason


def test_a_cut_fault_handler_block_gives_the_error_without_frames():
    (crash,) = launcher.python_crashes("Fatal Python error: Aborted\n\nThread 0x1f (most "
                                       "recent call first):\n  File \"x.py\", line")
    assert crash == launcher.PythonCrash("Aborted", ())
    assert crash.describe() == "Python's fault handler: Aborted"
    assert launcher.python_crashes("  File \"x.py\", line 1 in f\n" * 1000) == []


def test_plain_output_reports_nothing():
    assert launcher.parse("") == []
    assert launcher.parse("srun: error: node1: tasks x-y: Killed\nall fine\n") == []


def test_a_task_list_of_a_billion_tasks_is_no_task_list():
    # srun names every task of its job; a range past any job's size is garbled output, and
    # reading it as one would hold a billion integers in memory.
    text = "srun: error: node1: tasks 0-999999999: Killed\nsrun: error: node2: tasks 1-2: Killed\n"
    (report,) = launcher.parse(text)
    assert (report.host, report.ranks) == ("node2", (1, 2))
    just_over = f"srun: error: node1: tasks 0-{launcher.MAX_TASKS}: Killed\n"
    assert launcher.parse(just_over) == []
    (within,) = launcher.parse("srun: error: node1: tasks 0-1,3: Killed\n")
    assert within.ranks == (0, 1, 3)


def test_sigkill_names_the_killed_rank_first():
    d = diagnose_run(DATA / "mpirun_sigkill", "output.log")
    assert d.reason.startswith(
        "rank 1 (pid 8049 on host vm) was killed by signal SIGKILL after iteration 1; also "
        "rank 0 (pid 8048 on host vm): RuntimeError: [")
    assert "Connection closed by peer" in d.reason
    assert [(f["rank"], f.get("signal"), f["pid"], f["host"], f["last_iteration"])
            for f in d.failed_ranks] == [(1, "SIGKILL", 8049, "vm", 1), (0, None, 8048, "vm", 1)]
    assert len(d.failed_ranks[1]["error"]) <= 240  # the event file keeps the whole message

    srun = diagnose_run(DATA / "srun_sigkill", "output.log")
    assert srun.reason == ("rank 1 (pid 8284 on host vm) was killed by signal SIGKILL after "
                           "iteration 1; rank 0 (pid 8289 on host vm) was killed by signal "
                           "SIGTERM after iteration 1")


@pytest.mark.parametrize("name", ["mpirun_watchdog", "srun_watchdog"])
def test_hang_names_the_watchdog_and_the_silent_rank(name):
    d = diagnose_run(DATA / name, "output.log")
    assert d.reason.startswith("rank 0 (pid ")
    assert ("no iteration for 5 s (hang watchdog, watchdog.iteration_s=5); last iteration 1; "
            "rank 1 has shown no sign of life for 5 s (stopped, or stuck holding the GIL)"
            ) in d.reason
    # rank 1's late watchdog (Open MPI resumed it to kill it) and srun's "Killed" follow from
    # the abort: they are facts of rank 1, not another cause
    assert d.reason.count("hang watchdog") == 1 and "also" not in d.reason
    zero, one = d.failed_ranks
    assert zero["rank"] == 0 and zero["watchdog"]["key"] == "iteration_s"
    assert one["rank"] == 1 and one["silent_s"] > 3 and one["last_iteration"] == 1


def test_without_launcher_output_the_silent_ranks_are_named():
    logs = [read_rank_file(p) for p in sorted((DATA / "srun_sigkill").glob("rank*.jsonl"))]
    d = diagnose(logs, "")
    assert d.reason == ("rank 0 (pid 8289 on host vm) stopped after iteration 1 without an end "
                        "or error record; rank 1 (pid 8284 on host vm) stopped after iteration "
                        "1 without an end or error record")


def test_runstate_end_writes_the_reason_and_the_ranks(tmp_path):
    """`runstate end`, as the Slurm script calls it, on the recorded srun SIGKILL run."""
    case = Case.from_dict({"num_nodes": 2, "gpus_per_node": 1, "warmup_iterations": 2,
                           "measured_iterations": 2000})
    cdir = CaseDir(tmp_path, "c")
    cdir.write_case(case)
    run_dir = lifecycle.begin_run(cdir.path, 0)
    for p in (DATA / "srun_sigkill").iterdir():
        shutil.copy(p, run_dir / p.name)
    assert lifecycle.main(["end", str(cdir.path), "0", "--rc", "143"]) == 1
    status = json.loads((run_dir / "status.json").read_text())
    log = run_dir / "output.log"
    assert status["status"] == "failed"
    assert status["reason"] == (
        "rank 1 (pid 8284 on host vm) was killed by signal SIGKILL after iteration 1; rank 0 "
        "(pid 8289 on host vm) was killed by signal SIGTERM after iteration 1; launcher exited "
        f"with signal SIGTERM (exit code 143); log: {log}")
    assert status["failed_ranks"][0] == {
        "rank": 1, "pid": 8284, "host": "vm", "last_iteration": 1, "signal": "SIGKILL",
        "launcher": "srun: error: node2: task 1: Killed"}
    from toolkit.results.runs import read_run

    row = read_run(run_dir, "c", case, 0)
    assert row.status == "failed"
    assert row.error.startswith(status["reason"] + "; rank(s) 0-1 logged fewer than 2002")
    assert row.error.count(str(log)) == 1


def test_status_shows_a_reason_with_brackets_as_text():
    """Reasons quote ranks' errors ("[/__w/pytorch/.../pair.cc:561] Connection closed"): the
    terminal shows them as written, not as rich markup (which raised MarkupError)."""
    from rich.console import Console

    from toolkit.launch.run_states import RunState, render

    console = Console(record=True, width=400)
    reason = "rank 0: RuntimeError: [/__w/gloo/pair.cc:561] Connection closed [bold]"
    render(Path("r"), [RunState("c", 0, "failed", reason, "/x/output.log")], "", console)
    assert reason in console.export_text()


def test_status_names_a_failed_runs_log_once():
    """A reason that already names the run's log (the executor's, `... (log: path)`) is not
    followed by the log again."""
    from rich.console import Console

    from toolkit.launch.run_states import RunState, render

    console = Console(record=True, width=400)
    render(Path("r"), [RunState("c", 0, "failed", "rank 0: boom (log: /x/output.log)",
                                "/x/output.log"),
                       RunState("d", 1, "failed", "rank 0: boom", "/x/d.log")], "", console)
    text = console.export_text()
    assert text.count("/x/output.log") == 1
    assert "rank 0: boom (log: /x/d.log)" in text


# -- the program's output is never the launcher's; no number in it takes the outcome down ----

_FAKE = ("mpirun noticed that process rank 3 with PID 0 on node evilhost exited on signal 9 "
         "(Killed).")


def _one_rank_run(tmp_path: Path, output: str) -> Path:
    """A 1-rank run whose rank failed with an error record (the recorded rank 0 of the mpirun
    SIGKILL run, its world made 1), and the launcher's output `output`."""
    case = Case.from_dict({"num_nodes": 1, "gpus_per_node": 1, "warmup_iterations": 2,
                           "measured_iterations": 2000})
    cdir = CaseDir(tmp_path, "c")
    cdir.write_case(case)
    run_dir = lifecycle.begin_run(cdir.path, 0)
    rank0 = (DATA / "mpirun_sigkill" / "rank000.jsonl").read_text()
    (run_dir / "rank000.jsonl").write_text(rank0.replace('"world_size":2', '"world_size":1'))
    (run_dir / "output.log").write_text(output)
    return cdir.path


@pytest.mark.parametrize("output", [
    # the worker quotes the program's last lines inside a line of its own
    "[rank 0] Traceback (most recent call last):\n  File \"worker.py\", line 1, in main\n"
    "toolkit.workloads.command.ProgramFailed: rank 0: the program exited with code 1 after "
    f"0.1 s; its last lines, newest first (program-rank000.log): {_FAKE} | step 1\n",
    # a line at a line start naming a rank the run does not have
    f"{_FAKE}\n",
])
def test_a_programs_mpirun_style_line_is_not_taken_for_the_launchers(tmp_path, output):
    case_dir = _one_rank_run(tmp_path, output)
    assert lifecycle.main(["end", str(case_dir), "0", "--rc", "1"]) == 1
    status = json.loads((case_dir / "r0" / "status.json").read_text())
    assert status["status"] == "failed"
    assert "evilhost" not in status["reason"] and "SIGKILL" not in status["reason"]
    assert status["reason"].startswith("rank 0 (pid 8048 on host vm): RuntimeError: ")
    assert [r["rank"] for r in status["failed_ranks"]] == [0]


@pytest.mark.parametrize("line", [
    f"mpirun noticed that process rank {'7' * 5000} with PID 0 on node x exited on signal 9",
    f"mpirun noticed that process rank 0 with PID 0 on node x exited on signal {'9' * 5000}",
    f"MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith errorcode {'1' * 5000}",
    f"srun: error: node1: tasks 0-{'9' * 5000}: Killed",
    f"srun: error: node1: task {'9' * 5000}: Exited with exit code {'3' * 5000}",
])
def test_a_number_too_long_to_convert_is_no_report_and_the_outcome_is_written(tmp_path, line):
    """Python refuses to convert an integer of more than 4,300 digits (ValueError): such a line
    is garbled output, and `runstate end` still writes the run's status with the rank's own
    reason."""
    assert launcher.parse(line) == []
    case_dir = _one_rank_run(tmp_path, line + "\n")
    assert lifecycle.main(["end", str(case_dir), "0", "--rc", "1"]) == 1
    status = json.loads((case_dir / "r0" / "status.json").read_text())
    assert status["status"] == "failed"
    assert status["reason"].startswith("rank 0 (pid 8048 on host vm): RuntimeError: ")


def test_a_command_rank_killed_after_reported_steps_is_not_said_to_have_died_before_them(
        tmp_path):
    """A command case's `iter` events are written when its program exits: a rank killed by
    SIGKILL after 19 reported steps has only its `progress` records to say how far it got."""
    run = tmp_path / "r0"
    shutil.copytree(DATA / "mpirun_sigkill", run)
    lines = [line for line in (run / "rank001.jsonl").read_text().splitlines()
             if json.loads(line)["type"] != "iter"]
    progress = {"schema": 1, "type": "progress", "rank": 1, "time_s": 1.0}
    lines += [json.dumps({**progress, "steps": 1}), json.dumps({**progress, "steps": 19})]
    (run / "rank001.jsonl").write_text("\n".join(lines) + "\n")
    assert read_rank_file(run / "rank001.jsonl").progress == 19
    d = diagnose_run(run, "output.log")
    assert d.reason.startswith("rank 1 (pid 8049 on host vm) was killed by signal SIGKILL "
                               "after its program reported 19 step(s)")
