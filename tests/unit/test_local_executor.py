"""The local executor's verdict: exit code 0 is not enough for a run to count as finished."""

from __future__ import annotations

import json

from toolkit.case import Case
from toolkit.executors.local import LocalExecutor
from toolkit.results import CaseDir


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
