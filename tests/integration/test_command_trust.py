"""Figures from a user's own program that can be trusted, for real: grid -> mpirun -> worker ->
the unmodified program (tests/data/command_scripts, sources in its README) -> collect. Whose
samples a printed rate counts, a figure from fewer ranks than ran, a program that prints far
more than its steps, a program whose helper keeps its output open, and a program with no step
limit ended once its window is read."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from toolkit import collect, submit

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "command_scripts"


def _run(tmp_path: Path, monkeypatch, grid: str, ok: bool = True) -> dict[str, dict[str, str]]:
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, tmp_path)
    (tmp_path / "own.yaml").write_text(grid)
    monkeypatch.chdir(tmp_path)
    assert (submit.main(["--grid", "own.yaml", "--results", "results"]) == 0) is ok
    collect.main(["results", "--quiet", "--no-plots"])
    with (tmp_path / "results" / "runs.csv").open() as fh:
        return {r["case_id"]: r for r in csv.DictReader(fh)}


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    return not os.path.exists(f"/proc/{pid}")


def test_a_rank_rate_is_the_jobs_only_when_the_case_says_so(tmp_path, capsys, monkeypatch):
    # rank 0 prints its own img/s: 8 samples a 20 ms step, 400/s; the job of 2 ranks does 800
    rows = _run(tmp_path, monkeypatch, """
name: tv
base:
  model: command
  gpus_per_node: 2
  batch_size_per_device: 8
  warmup_iterations: 5
  measured_iterations: 40
zip:
  - name: [unstated, rank]
    command:
      - {argv: ["{python}", torchvision_style.py, --batch-size, "{batch_size_per_device}",
                --iters, "{total_iterations}"],
         pattern: '\\[\\s*\\d+/\\d+\\].* img/s: (?P<samples_per_s>[\\d.]+) '}
      - {argv: ["{python}", torchvision_style.py, --batch-size, "{batch_size_per_device}",
                --iters, "{total_iterations}"],
         pattern: '\\[\\s*\\d+/\\d+\\].* img/s: (?P<samples_per_s>[\\d.]+) ', rate: rank}
""")
    err = capsys.readouterr().err
    unstated, rank = rows["unstated"], rows["rank"]
    assert unstated["status"] == rank["status"] == "ok", (unstated["error"], rank["error"])
    # the rank's rate, with its flag; the same rate times the 2 data-parallel ranks
    assert float(rank["throughput_sps"]) == pytest.approx(
        2 * float(unstated["throughput_sps"]), rel=0.1)
    assert 300 < float(unstated["throughput_sps"]) < 420  # 8 / 20 ms, a little less
    assert unstated["rate_scope"] == "job (default)"
    assert unstated["figure_flag"].startswith(
        "the samples/s printed on rank 0 taken as the whole job's (command.rate unset: job)")
    assert "timed on 1 of 2 ranks (rank 0 printed steps)" in unstated["figure_flag"]
    assert rank["rate_scope"].startswith("rank: each timed rank's samples/s x 2")
    assert rank["figure_flag"] == "timed on 1 of 2 ranks (rank 0 printed steps)"
    # the threads each program was given: the machine's CPUs over the node's 2 ranks
    assert rank["threads_per_rank"] == str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert "figure unstated r0: the samples/s printed on rank 0" in " ".join(err.split())
    report = (tmp_path / "results" / "report.md").read_text()
    assert "job (default)" in report and "timed on 1 of 2 ranks" in report


def test_a_program_printing_thousands_of_lines_a_step_is_read_whole(tmp_path, capsys,
                                                                    monkeypatch):
    rows = _run(tmp_path, monkeypatch, """
name: chatty
base:
  model: command
  warmup_iterations: 5
  measured_iterations: 20
  command: {argv: ["{python}", chatty.py, --iters, "{total_iterations}",
                   --lines-per-step, "2000", --step-ms, "5"]}
""")
    capsys.readouterr()
    [row] = rows.values()
    assert row["status"] == "ok", row["error"]
    assert row["measured_by"] == "log:megatron" and not row.get("figure_flag")
    run = tmp_path / "results" / "cases" / row["case_id"] / "r0"
    log = (run / "program-rank000.log").read_text()
    assert "chatty: 50025 lines in" in log  # every line reached the log
    [summary] = [json.loads(line) for line in (run / "rank000.jsonl").read_text().splitlines()
                 if '"summary"' in line]
    assert (summary["command"]["output_lines"], summary["command"]["lines_not_parsed"],
            summary["command"]["records"]) == (50026, 0, 25)


def test_a_helper_holding_the_output_is_ended_and_the_run_judged(tmp_path, capsys,
                                                                 monkeypatch):
    started = time.time()
    rows = _run(tmp_path, monkeypatch, """
name: helper
base:
  model: command
  batch_size_per_device: 8
  warmup_iterations: 2
  measured_iterations: 6
  watchdog: {iteration_s: 60}
  command: {argv: ["{python}", background_child.py, --batch-size, "{batch_size_per_device}",
                   --iters, "{total_iterations}"],
            pattern: 'step (?P<iteration>\\d+)/\\d+ loss \\S+ speed (?P<samples_per_s>[\\d.]+)'}
""")
    capsys.readouterr()
    assert time.time() - started < 50  # not the watchdog's minute
    [row] = rows.values()
    assert row["status"] == "ok", row["error"]
    assert row["program_end"] == (
        "rank 0: its output was still open 2 s after it exited with code 0 (a child of it held "
        "it) (SIGTERM to its process group)")
    log = next((tmp_path / "results").rglob("program-rank000.log")).read_text()
    assert _gone(int(log.split("helper pid ")[1].split()[0]))


def test_a_program_without_a_step_limit_is_ended_after_its_window(tmp_path, capsys,
                                                                  monkeypatch):
    rows = _run(tmp_path, monkeypatch, """
name: endless
base:
  model: command
  gpus_per_node: 2
  warmup_iterations: 3
  measured_iterations: 10
  command: {argv: ["{python}", endless.py], stop_after_window: true}
""")
    capsys.readouterr()
    [row] = rows.values()
    assert row["status"] == "ok", row["error"]
    assert row["measured_by"] == "log:pytorch_imagenet"
    ends = row["program_end"].split("; ")
    # read within a poll of the parser (0.2 s: a few 10 ms steps more)
    read = re.fullmatch(r"rank 0: stop_after_window: iteration (\d+) read, the measured window "
                        r"ends at 13 \(SIGTERM to its process group\)", ends[0])
    assert read is not None and 13 <= int(read[1]) < 60, ends[0]
    assert ends[1].startswith("rank 1: ")  # no steps of its own: ended after rank 0's window
    for log in (tmp_path / "results").rglob("program-rank*.log"):
        assert _gone(int(log.read_text().split(" pid ")[1].split()[0]))


def test_a_hung_program_and_its_children_end_with_the_job(tmp_path, capsys, monkeypatch):
    # the hang watchdog aborts the job: the program and the helper it started are both ended
    # (the helper is no child of the worker, and the parent-death signal reaches the program
    # alone)
    rows = _run(tmp_path, monkeypatch, """
name: hung
base:
  model: command
  batch_size_per_device: 8
  warmup_iterations: 2
  measured_iterations: 6
  watchdog: {iteration_s: 5}
  command: {argv: ["{python}", background_child.py, --batch-size, "{batch_size_per_device}",
                   --iters, "{total_iterations}", --hang],
            pattern: 'step (?P<iteration>\\d+)/\\d+ loss \\S+ speed (?P<samples_per_s>[\\d.]+)'}
""", ok=False)
    capsys.readouterr()
    [row] = rows.values()
    assert row["status"] == "failed" and "no iteration for" in row["error"], row["error"]
    log = next((tmp_path / "results").rglob("program-rank000.log")).read_text()
    words = log.split()
    helper, program = (int(words[words.index(k) + 2]) for k in ("helper", "program"))
    assert _gone(program) and _gone(helper)
