"""A program whose steady output holds no step record (a pattern with a typo) is ended after
`watchdog.unread_output_s` with a reason that counts its lines, instead of running until the
first-iteration watchdog; run on a real program with no step limit
(tests/data/command_scripts/endless.py, sources in its README)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from toolkit.rank.discovery import RankInfo
from toolkit.spec import Case
from toolkit.workloads import command

SCRIPTS = Path(__file__).resolve().parents[2] / "data" / "command_scripts"
INFO = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0, num_nodes=1,
                host="localhost", hosts=("localhost",), master_addr="127.0.0.1",
                master_port=29500)
TYPO = r"Epoch: \[0\]\[ *(?P<iteration>\d+)/\d+\]\tTme (?P<step_time_s>[\d.]+)"


def _case(pattern: str, unread_output_s: float) -> Case:
    return Case.from_dict({
        "model": "command", "warmup_iterations": 2, "measured_iterations": 5,
        "watchdog": {"unread_output_s": unread_output_s},
        "command": {"argv": ["endless.py", "--step-ms", "20"], "interpreter": sys.executable,
                    "workdir": str(SCRIPTS), "pattern": pattern, "stop_after_window": True}})


def test_a_pattern_that_reads_nothing_ends_the_program_with_that_reason(tmp_path):
    started = time.time()
    with pytest.raises(command.ProgramFailed) as info:
        command.run(_case(TYPO, 1.0), "c", INFO, tmp_path, 0, None, 0, lambda *_: None)
    assert time.time() - started < 30  # not the first-iteration watchdog's 30 minutes
    text = str(info.value)
    assert text.startswith("rank 0: the program printed ")
    assert f"line(s) in 1 s, none of which matched the pattern {TYPO!r}" in text
    assert "(watchdog.unread_output_s=1; 0 turns this off)" in text


def test_the_same_program_with_the_right_pattern_is_read(tmp_path):
    right = TYPO.replace("Tme", "Time")
    iterations, summary = command.run(_case(right, 1.0), "c", INFO, tmp_path, 0, None, 0,
                                      lambda *_: None)
    assert len(iterations) >= 7 and summary["command"]["ended"]["window_read"]


def test_the_hang_reason_counts_the_lines_and_names_what_read_them():
    options = _case(TYPO, 0).command
    assert command.printed_no_step(options, 44) == (
        f"the program printed 44 line(s), none of which matched the pattern {TYPO!r}")
    auto = Case.from_dict({"model": "command", "command": {"argv": ["x"]}}).command
    assert command.printed_no_step(auto, 3, 31.2).endswith(
        "3 line(s) in 31 s, none of which is a step line of a log family trainbench reads "
        "(log_format: auto)")


def test_a_rank_whose_peer_read_steps_is_not_ended(tmp_path):
    # Megatron prints its steps on the last rank: rank 0's program prints other lines only
    # (here for 3 s, past the limit). A peer that read a step says so in the run directory,
    # and rank 0's program runs to its end.
    from toolkit.results.layout import steps_read_file

    steps_read_file(tmp_path).write_text(f'{{"rank": 1, "time_s": {time.time() + 5}}}')
    case = Case.from_dict({
        "model": "command", "warmup_iterations": 2, "measured_iterations": 5,
        "watchdog": {"unread_output_s": 0.5},
        "command": {"argv": ["-c", "import time\nfor i in range(30):\n"
                             "    print('loading', i, flush=True); time.sleep(0.1)"],
                    "interpreter": sys.executable, "workdir": str(SCRIPTS),
                    "pattern": TYPO}})
    iterations, summary = command.run(case, "c", INFO, tmp_path, 0, None, 0, lambda *_: None)
    assert iterations == [] and summary["command"]["ended"] is None
    assert summary["command"]["output_lines"] == 30
