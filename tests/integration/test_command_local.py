"""Users' own training scripts (`model: command`) on this machine, for real: grid -> mpirun ->
worker -> the unmodified script with torchrun's environment (DDP over gloo at 2 ranks) -> its
printed log -> rank files -> collect. The scripts are tests/data/command_scripts/, written in the
shapes Megatron-LM, pytorch/examples ImageNet and DeepLearningExamples' DLLogger print."""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from toolkit import collect, compare, history, submit

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "command_scripts"

TINY = ('["{python}", train_tiny.py, --batch-size, "{batch_size_per_device}", '
        '--iters, "{total_iterations}"')

GRID = f"""
name: own
base:
  model: command
  batch_size_per_device: 8
  warmup_iterations: 3
  measured_iterations: 6
  slurm: {{time_min: 5}}
zip:
  - name: [megatron-2g, megatron-1g, imagenet, dll-json, pattern, report, own-workers]
    gpus_per_node: [2, 1, 1, 1, 1, 1, 2]
    command:
      - {{name: tiny, argv: {TINY}, --log-style, megatron]}}
      - {{name: tiny, argv: {TINY}, --log-style, megatron]}}
      - {{argv: {TINY}, --log-style, imagenet, --log-interval, "2"]}}
      - {{argv: {TINY}, --log-style, dllogger, --raport-file, "{{run_dir}}/dll.json"],
         log_file: "{{run_dir}}/dll.json"}}
      - {{argv: {TINY}, --log-style, plain],
         pattern: 'step (?P<iteration>\\d+)/\\d+ loss \\S+ speed (?P<samples_per_s>[\\d.]+)'}}
      - {{argv: ["{{python}}", report_api.py, "{{batch_size_per_device}}",
                 "{{total_iterations}}"]}}
      - {{argv: ["{{python}}", own_workers.py, "{{total_iterations}}", "4"], launch: per_node}}
"""


def _grid_dir(tmp_path: Path, text: str) -> Path:
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, tmp_path)
    (tmp_path / "own.yaml").write_text(text)
    return tmp_path


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "runs.csv").open() as fh:
        return {r["case_id"]: r for r in csv.DictReader(fh)}


def test_scripts_run_under_mpirun_and_land_in_the_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(_grid_dir(tmp_path, GRID))
    assert submit.main(["--grid", "own.yaml", "--results", "results"]) == 0
    out = tmp_path / "results"
    run = out / "cases" / "megatron-2g" / "r0"
    # torchrun's environment reached the script on both ranks
    assert "rank 1/2 local_rank 1 master" in (run / "program-rank001.log").read_text()
    assert "rank 0/2 local_rank 0 master" in (run / "program-rank000.log").read_text()
    iters = [json.loads(x) for x in (run / "rank001.jsonl").read_text().splitlines()
             if '"iter"' in x]
    assert [r["iteration"] for r in iters] == list(range(1, 10))
    assert all(r["samples"] == 16 for r in iters)  # the global batch of 2 ranks

    assert collect.main([str(out), "--quiet"]) == 0
    capsys.readouterr()
    rows = _rows(out)
    assert {r["status"] for r in rows.values()} == {"ok"}, {
        k: r["error"] for k, r in rows.items()}
    how = {k: (r["measured_by"], r["method"]) for k, r in rows.items()}
    assert how == {
        "megatron-2g": ("log:megatron", "latency"),
        "megatron-1g": ("log:megatron", "latency"),
        "imagenet": ("log:pytorch_imagenet", "latency"),
        "dll-json": ("log:dllogger", "mean_of_rates"),
        "pattern": ("pattern", "mean_of_rates"),
        "report": ("report", "timestamp_window"),
        "own-workers": ("log:megatron", "latency"),
    }
    assert rows["megatron-2g"]["timed_ranks"] == "1"  # Megatron prints on its last rank
    assert rows["megatron-2g"]["model"] == "tiny"
    assert all(float(r["throughput_sps"]) > 0 for r in rows.values())
    with (out / "summary.csv").open() as fh:
        summary = {(r["model"], r["gpus_per_node"]): r for r in csv.DictReader(fh)
                   if r["model"] == "tiny"}
    two, one = summary[("tiny", "2")], summary[("tiny", "1")]
    assert float(two["speedup"]) == pytest.approx(
        float(two["throughput_median_sps"]) / float(one["throughput_median_sps"]))
    assert "measured_by" in (out / "report.md").read_text()


@pytest.mark.parametrize("argv, extra, expected", [
    (f'{TINY}, --log-style, megatron, --fail-at, "5"]', "",
     ["rank 0: the program exited with code 3", "simulated failure at iteration 5"]),
    (f"{TINY}, --log-style, plain]", "pattern: 'throughput (?P<samples_per_s>[0-9.]+)'",
     ["matched none of the", "no step was measured"]),
])
def test_failed_script_fails_the_run_and_says_why(tmp_path, capsys, monkeypatch, argv, extra,
                                                   expected):
    grid = f"""
name: bad
base:
  model: command
  warmup_iterations: 2
  measured_iterations: 4
  command: {{argv: {argv}{", " + extra if extra else ""}}}
"""
    monkeypatch.chdir(_grid_dir(tmp_path, grid))
    assert submit.main(["--grid", "own.yaml", "--results", "results"]) != 0
    collect.main(["results", "--quiet"])
    capsys.readouterr()
    [row] = _rows(tmp_path / "results").values()
    assert row["status"] == "failed"
    for text in expected:
        assert text in row["error"], row["error"]


def test_hung_script_is_stopped_by_the_watchdog(tmp_path, capsys, monkeypatch):
    grid = f"""
name: hang
base:
  model: command
  warmup_iterations: 2
  measured_iterations: 4
  watchdog: {{iteration_s: 8}}
  command: {{argv: {TINY}, --log-style, megatron, --hang-at, "4"]}}
"""
    monkeypatch.chdir(_grid_dir(tmp_path, grid))
    assert submit.main(["--grid", "own.yaml", "--results", "results"]) != 0
    collect.main(["results", "--quiet"])
    capsys.readouterr()
    [row] = _rows(tmp_path / "results").values()
    assert row["status"] == "failed" and "no iteration for" in row["error"], row["error"]
    log = next((tmp_path / "results").rglob("program-rank000.log")).read_text()
    pid = int(log.split("pid ")[1].split()[0])
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}"), "the script outlived its worker"


def test_command_case_is_stored_compared_and_in_history(tmp_path, capsys, monkeypatch):
    grid = """
name: ab
repeats: 3
base:
  model: command
  batch_size_per_device: 16
  warmup_iterations: 3
  measured_iterations: 10
  command: {name: mine, argv: ["{python}", report_api.py, "{batch_size_per_device}",
                               "{total_iterations}"]}
"""
    monkeypatch.chdir(_grid_dir(tmp_path, grid))
    store = str(tmp_path / "store.sqlite")
    for side in ("a", "b"):
        assert submit.main(["--grid", "own.yaml", "--results", side]) == 0
        assert collect.main([side, "--quiet", "--no-plots", "--store", store]) == 0
    assert compare.main(["a", "b", "--out", "dirs", "--quiet"]) == 0
    assert compare.main([f"results_dir={tmp_path / 'a'}", f"results_dir={tmp_path / 'b'}",
                         "--store", store, "--out", "store", "--quiet"]) == 0
    capsys.readouterr()
    with open("dirs/compare.csv") as fh:
        (from_dirs,) = list(csv.DictReader(fh))
    with open("store/compare.csv") as fh:
        (from_store,) = list(csv.DictReader(fh))
    assert from_dirs["case_id"] == "mine-torch-fp32-1n1g-bs16"
    assert (from_dirs["n_a"], from_dirs["n_b"]) == ("3", "3")
    assert from_store["ratio"] == from_dirs["ratio"] and float(from_dirs["ratio"]) > 0
    assert history.main(["--store", store, "--out", "hist", "--quiet"]) == 0
    with open("hist/history.csv") as fh:
        assert [p["repeats"] for p in csv.DictReader(fh)] == ["3", "3"]


def test_per_node_case_run_through_torchrun(tmp_path, capsys, monkeypatch):
    # torch's own launcher (the `torchrun` entry point, torch.distributed.run, as pip installed
    # it) as the per-node program: it starts the 2 workers of the node itself, with the
    # rendezvous trainbench gives it, and the workers' Megatron-style lines are read.
    grid = """
name: torchrun
base:
  model: command
  gpus_per_node: 2
  batch_size_per_device: 8
  warmup_iterations: 3
  measured_iterations: 6
  command:
    name: tiny
    launch: per_node
    argv: ["{python}", -m, torch.distributed.run, --nnodes, "{num_nodes}",
           --node-rank, "{node_rank}", --nproc-per-node, "{gpus_per_node}",
           --master-addr, "{master_addr}", --master-port, "{master_port}",
           train_tiny.py, --batch-size, "{batch_size_per_device}",
           --iters, "{total_iterations}", --log-style, megatron]
"""
    monkeypatch.chdir(_grid_dir(tmp_path, grid))
    assert submit.main(["--grid", "own.yaml", "--results", "results"]) == 0
    collect.main(["results", "--quiet", "--no-plots"])
    capsys.readouterr()
    [row] = _rows(tmp_path / "results").values()
    assert row["status"] == "ok", row["error"]
    assert row["measured_by"] == "log:megatron" and row["global_batch_size"] == "16"
    log = next((tmp_path / "results").rglob("program-rank000.log")).read_text()
    assert "rank 1/2 local_rank 1" in log  # torchrun's second worker on the node
