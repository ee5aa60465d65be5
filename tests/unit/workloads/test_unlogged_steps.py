"""A real program that logs every 10 steps and not its last ones (as DeepLearningExamples'
`main.py --prof N` does), read as a command case reads it: the window's advice, followed,
gives a window that is read (tests/data/command_scripts/train_tiny.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.analysis.throughput import MetricError, logged_window
from toolkit.spec.command import fill_argv, placeholder_problem
from toolkit.workloads.command_output import read_log_text, timeline

TINY = Path(__file__).resolve().parents[2] / "data" / "command_scripts" / "train_tiny.py"


def _start(steps_word: str) -> subprocess.Popen[str]:
    """The program run with `--iters steps_word` for a window of 20 + 80 iterations."""
    assert placeholder_problem(steps_word) is None
    argv = fill_argv((sys.executable, str(TINY), "--batch-size", "8", "--iters", steps_word,
                      "--log-style", "dllogger", "--log-interval", "10", "--unlogged-last",
                      "15", "--sleep-ms", "0"), {"total_iterations": 100})
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _logged(proc: subprocess.Popen[str]) -> dict[int, tuple[float, float]]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    _, records, _ = read_log_text(out, "dllogger", time.time())
    its, _, _ = timeline(records, 8, 0.0)
    return {it.iteration: (it.elapsed_s, float(it.samples)) for it in its}


def test_more_steps_than_the_window_is_advice_that_works():
    runs = [_start("{total_iterations}"), _start("{total_iterations+20}")]
    short, more = (_logged(p) for p in runs)
    assert sorted(short) == list(range(10, 90, 10))
    with pytest.raises(MetricError, match=r"\{total_iterations\+20\}$"):
        logged_window(short, 20, 100)
    assert max(more) == 100
    figure, end = logged_window(more, 20, 100)
    assert end == 100 and figure > 0
