"""The local executor's verdict: exit code 0 is not enough for a run to count as finished."""

from __future__ import annotations

import json

import pytest

from toolkit.launch.local import LocalExecutor
from toolkit.results.layout import CaseDir
from toolkit.spec import Case


def test_exit_zero_without_rank_data_is_failed_not_finished(tmp_path):
    case = Case.from_dict({"gpus_per_node": 2, "warmup_iterations": 1, "measured_iterations": 2})
    cdir = CaseDir(tmp_path, "c")
    cdir.write_case(case)
    run_dir = cdir.prepare_run(0)
    # a launcher that exits 0 but starts no rank (e.g. wired to the wrong MPI)
    executor = LocalExecutor(mpirun="/bin/true", gpus=0, cpus=2)
    status, row = executor.run(case, cdir.path / "case.json", run_dir, 0)
    assert status["returncode"] == 0
    assert status["status"] == "failed" and "no rank file for rank(s) 0-1" in status["reason"]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    assert row.status == "failed" and row.throughput_sps is None
    assert not cdir.finished(0)  # so a resubmit runs it again


@pytest.mark.parametrize("launcher_rc", [1, 0])
def test_sigterm_while_the_status_is_written_neither_kills_it_nor_loses_why(tmp_path,
                                                                           launcher_rc):
    """The job script's `runstate end` after a launcher that failed on its own, with Slurm's
    SIGTERM to every process of the job arriving while `end` runs (a node's slurmd died: the
    step ended, then Slurm ended the job). `end` must finish (it ignores SIGTERM), and after a
    failed launcher run once more with --terminated so that it asks Slurm why; a run that
    succeeded is left as written. Stand-ins for python and the launcher."""
    import os
    import signal
    import subprocess
    import time

    from toolkit.launch.local import run_block

    log = tmp_path / "calls.log"
    python = tmp_path / "python"
    python.write_text(f"""#!/bin/bash
# python -m toolkit.runstate begin|end CASE_DIR REPEAT ...
if [ "$3" = begin ]; then mkdir -p "$4/r$5"; exit 0; fi
echo "end-start $*" >> {log}
sleep 2
echo "end-done" >> {log}
""")
    launcher = tmp_path / "launcher"
    launcher.write_text(f"#!/bin/bash\nexit {launcher_rc}\n")
    for f in (python, launcher):
        f.chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text("\n".join(["#!/bin/bash", "set -uo pipefail", "REPEAT=0",
                                 *run_block(str(python), str(launcher), tmp_path / "case",
                                            "slurm")]) + "\n")
    proc = subprocess.Popen(["bash", str(script)], start_new_session=True)
    deadline = time.monotonic() + 20
    while not (log.exists() and "end-start" in log.read_text()):
        assert time.monotonic() < deadline, "end never started"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # as Slurm: every process of the job
    assert proc.wait(timeout=30) == 143  # terminated: no further repeat, exit 128 + TERM
    calls = log.read_text().splitlines()
    assert calls[0].startswith("end-start -m toolkit.runstate end")
    assert f"--rc {launcher_rc}" in calls[0] and "--terminated" not in calls[0]
    assert calls[1] == "end-done"  # the first `end` was not killed half-way
    if launcher_rc:
        assert calls[2].endswith("--executor slurm --terminated") and calls[3] == "end-done"
        assert len(calls) == 4
    else:
        assert len(calls) == 2
