"""`benchmarks/startup_grid.py` gets one run on a GPU machine: its grids must be valid case sets
that vary only what each part says, and its py-spy summary must read py-spy's raw output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.workloads.conftest import ROOT, benchmark_module
from toolkit.spec.grid import parse_grid

RECORDED = ROOT / "tests" / "data" / "logs" / "pyspy" / "worker_warm_resnet50_h200.txt"


@pytest.fixture(scope="module")
def startup_grid():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "benchmarks"))  # it imports gpu_common beside it
        yield from benchmark_module("startup_grid")


def cases(module, part, smoke):
    import yaml

    text = yaml.safe_dump(module.GRIDS[part](smoke))
    return dict(parse_grid(text, source="g.yaml").items())


@pytest.mark.parametrize("smoke", [False, True])
def test_grids_vary_what_their_part_measures(startup_grid, smoke):
    cudnn = cases(startup_grid, "cudnn", smoke)
    assert len(cudnn) == 4 and {c.model.value for c in cudnn.values()} == {"resnet50"}
    assert sorted((c.precision.value, c.cudnn_benchmark) for c in cudnn.values()) == [
        ("amp_bf16", False), ("amp_bf16", True), ("tf32", False), ("tf32", True)]
    table = cases(startup_grid, "table", smoke)
    untuned = cases(startup_grid, "table-untuned", smoke)
    assert sorted((c.model.value, c.precision.value) for c in table.values()) == [
        ("bert_base", "amp_bf16"), ("resnet50", "amp_bf16"), ("resnet50", "tf32")]
    # the table at the defaults: nothing set that a user would not set
    assert all(c.kernel_tuning is None and c.cudnn_benchmark is None for c in table.values())
    assert all(c.kernel_tuning is False for c in untuned.values())
    assert all(c.repeats == 2 for c in [*table.values(), *untuned.values()])


def test_a_recorded_py_spy_profile_is_summed_up_for_the_rank(startup_grid):
    lines = startup_grid.stack_summary(RECORDED, top=12)
    text = "\n".join(lines)
    # the rank's main thread only: 534 samples at 50 per second in these lines
    assert lines[0].startswith("Rank main thread: 10.7 s sampled")
    assert "| 10.7 | `Trainer.step (toolkit/workloads/pytorch/common.py)` |" in text
    assert "| 9.8 | `_engine_run_backward (torch/autograd/graph.py)` |" in text
    innermost = lines[lines.index("Innermost frames (where the main thread was), by seconds:")
                      + 2]
    assert innermost == "- 9.8 s `_engine_run_backward (torch/autograd/graph.py:869)`"
    # the rank's other threads and Inductor's workers are listed apart, idle time included
    others = text.split("Other processes and threads")[1]
    assert "trainbench-watchdog" in others and "MainThread" in others
    assert "18.0 s process 1355" in others


def test_a_missing_profile_says_so(startup_grid, tmp_path: Path):
    assert startup_grid.stack_summary(tmp_path / "none.txt") == [
        "(no profile: none.txt was not written)"]
