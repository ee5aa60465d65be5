"""A real third-party training program from PyPI as a `model: command` case: litgpt's
`finetune_lora` (LoRA fine-tuning of a GPT with Lightning Fabric), run from its installed venv,
never copied into the tree (a launcher in tests/data/litgpt calls litgpt's command line as its
console script does, then ends the process group, which litgpt leaves out): grid -> local
executor -> mpirun -> worker -> litgpt with torchrun's environment -> its printed iteration
lines -> the grid's pattern -> rank files -> collect.

At 2 ranks Fabric takes its ranks from the environment the toolkit gives each process (torchrun's)
and trains over gloo. `finetune_lora` rather than `finetune_full` or `pretrain`: on more than one
device those two use Fabric's FSDPStrategy, which Fabric allows on GPUs only, while
`finetune_lora` shards with ModelParallelStrategy (FSDP2 on a device mesh), which runs on CPU;
`pretrain` also needs litdata for any data set.

On the local 2-node Slurm cluster Lightning reads Slurm's per-task variables before torchrun's
(its SLURMEnvironment): under srun they are each task's own, and under mpirun inside the
allocation the toolkit makes them each rank's (`command.slurm_task_variables`), where every
process would otherwise have inherited the batch step's and believed itself rank 0.

litgpt is installed in `.venv-litgpt` (`make litgpt-env`; `make test` builds it first), whose
own packages pin litgpt's dependencies and whose torch is the main venv's. Without it these tests
skip on a developer's machine and fail under CI (CI=true), where the Makefile must have built it.
Nothing is downloaded: the model is a tiny randomly initialised GPT saved with litgpt's own API,
its tokenizer is trained on the samples (tests/data/litgpt/make_checkpoint.py), and the hub is
offline (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest_localslurm import client_env, slurm_submit
from toolkit import collect, submit
from toolkit.localslurm import LocalCluster

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-litgpt"
DATA = ROOT / "tests" / "data" / "litgpt"

# litgpt's line per optimizer step (gradient accumulation 1), printed by rank 0:
# `Epoch 1 | iter 3 step 3 | loss train: 4.281, val: n/a | iter time: 14.77 ms (step)`;
# tests/unit/workloads/test_command_output.py reads the recorded log with the same pattern.
PATTERN = (DATA / "pattern.re2").read_text().strip()
# litgpt's `main`, then `destroy_process_group()`, which litgpt leaves out: without it a rank
# can abort in the interpreter's teardown after its last step (recorded in DATA).
LAUNCHER = DATA / "litgpt_then_destroy.py"


@pytest.fixture(scope="module")
def litgpt_venv() -> Path:
    if not (VENV / ".installed").is_file():
        problem = f"{VENV} is missing or incomplete: build it with `make litgpt-env`"
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    return VENV


@pytest.fixture(scope="module")
def checkpoint(litgpt_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("litgpt")
    subprocess.run([str(litgpt_venv / "bin" / "python"), str(DATA / "make_checkpoint.py"),
                    str(out)], check=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


def grid(venv: Path, made: Path) -> str:
    args = [
        "finetune_lora", str(made / "checkpoint"),
        "--data", "JSON", "--data.json_path", str(made / "data.json"),
        "--data.val_split_fraction", "0.1", "--data.num_workers", "0",
        "--out_dir", "{run_dir}/litgpt", "--precision", "32-true", "--logger_name", "csv",
        "--devices", "{gpus_per_node}", "--num_nodes", "{num_nodes}", "--seed", "{seed}",
        "--train.micro_batch_size", "{batch_size_per_device}",
        "--train.global_batch_size", "{global_batch_size}",
        "--train.max_steps", "{total_iterations}", "--train.epochs", "1000",
        "--train.lr_warmup_steps", "1", "--train.save_interval", "1000",
        "--eval.interval", "1000", "--eval.final_validation", "false",
    ]
    # The venv as `interpreter`, running litgpt's command line as its installed console script
    # does, then ending the process group (LAUNCHER says why).
    command = {"name": "litgpt", "interpreter": str(venv),
               "argv": [str(LAUNCHER), *args], "pattern": PATTERN}
    return f"""
name: litgpt
base:
  model: command
  precision: fp32
  batch_size_per_device: 4
  warmup_iterations: 3
  measured_iterations: 6
  env: {{HF_HUB_OFFLINE: "1"}}
  slurm: {{time_min: 5}}
  command: {json.dumps(command)}
sweep:
  gpus_per_node: [1, 2]
"""


def test_litgpt_finetune_runs_as_a_command_case_at_1_and_2_ranks(litgpt_venv, checkpoint,
                                                                 tmp_path, capsys):
    (tmp_path / "litgpt.yaml").write_text(grid(litgpt_venv, checkpoint))
    out = tmp_path / "results"
    assert submit.main(["--grid", str(tmp_path / "litgpt.yaml"), "--results", str(out)]) == 0
    assert collect.main([str(out), "--quiet"]) == 0
    capsys.readouterr()
    with (out / "runs.csv").open() as fh:
        rows = {int(r["gpus_per_node"]): r for r in csv.DictReader(fh)}
    assert sorted(rows) == [1, 2]
    for gpus, row in rows.items():
        assert row["status"] == "ok", row["error"]
        assert (row["measured_by"], row["method"]) == ("pattern", "latency")
        run = next((out / "cases").glob(f"*{gpus}g*")) / "r0"
        printed = (run / "program-rank000.log").read_text()
        step_ms = {int(i): float(ms) for i, ms in
                   re.findall(r"\| iter (\d+) step .* iter time: ([\d.]+) ms", printed)}
        assert sorted(step_ms) == list(range(1, 10)), printed[-2000:]
        # the figure is litgpt's step times of iterations 4..9: warm-up (1..3) excluded
        measured_s = sum(step_ms[i] for i in range(4, 10)) / 1000
        assert float(row["throughput_sps"]) == pytest.approx(4 * gpus * 6 / measured_s, rel=0.02)
        records = [json.loads(x) for x in (run / "rank000.jsonl").read_text().splitlines()]
        [ran] = [r["command"]["argv"] for r in records if r["type"] == "summary"]
        # the venv's own Python ran litgpt's command line
        assert ran[:3] == [str(litgpt_venv / "bin" / "python"), str(LAUNCHER), "finetune_lora"]
        iters = [r for r in records if r["type"] == "iter"]
        assert [r["iteration"] for r in iters] == list(range(1, 10))
        assert all(r["samples"] == 4 * gpus for r in iters)
        assert row["timed_ranks"] == "0"  # litgpt prints on rank 0 only
        # litgpt prints no rate per step (its closing `Tok/sec` is the whole run's tokens): its
        # step times time the job's step on whichever rank prints them, so no rate scope applies
        assert row.get("rate_scope", "") == ""
    # one rank's window is the job's under data parallelism, but it is one rank's: flagged
    assert rows[2]["figure_flag"] == "timed on 1 of 2 ranks (rank 0 printed steps)"
    assert rows[1].get("figure_flag", "") == ""
    two = next((out / "cases").glob("*2g*")) / "r0"
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in (
        two / "program-rank001.log").read_text()
    with (out / "summary.csv").open() as fh:
        summary = {int(r["gpus_per_node"]): r for r in csv.DictReader(fh)}
    assert float(summary[2]["speedup"]) == pytest.approx(
        float(summary[2]["throughput_median_sps"]) / float(summary[1]["throughput_median_sps"]))


def test_litgpt_on_the_local_slurm_under_srun_and_mpirun(local_slurm: LocalCluster, litgpt_venv,
                                                        checkpoint, tmp_path):
    text = grid(litgpt_venv, checkpoint).replace("  slurm: {time_min: 5}\n", "").replace(
        "sweep:\n  gpus_per_node: [1, 2]\n",
        "zip:\n  - {num_nodes: [1, 1, 2], gpus_per_node: [2, 2, 1],\n"
        "     slurm: [{time_min: 5}, {time_min: 5, launcher: mpirun}, {time_min: 5}]}\n")
    (tmp_path / "litgpt.yaml").write_text(text)
    out = tmp_path / "results"
    slurm_submit(client_env(local_slurm), tmp_path / "litgpt.yaml", out, "--wait",
                 cwd=tmp_path, timeout=900)
    assert collect.main([str(out), "--quiet"]) == 0
    with (out / "runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3
    for row in rows:
        assert row["status"] == "ok", (row["case_id"], row["error"])
        assert row["measured_by"] == "pattern" and float(row["throughput_sps"]) > 0
        second = Path(row["source"]) / "program-rank001.log"
        # Lightning took rank 1 of 2 from the variables it read, on one node or two
        assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in second.read_text()
