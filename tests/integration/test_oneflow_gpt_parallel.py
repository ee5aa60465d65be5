"""OneFlow GPT with tensor, pipeline and data parallelism (global tensors / DDP) against the
same model on one rank: same initial weights, same samples, dropout off, three AdamW steps; the
losses must agree to float tolerance. Real ranks under mpirun, real OneFlow collectives on CPU;
then one tensor-parallel and one pipeline case through `toolkit.submit`.

Each rank also trains the unsharded model on the whole batch with local tensors (no
communication), which is the reference its parallel run is compared with.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit import collect, submit
from toolkit.launch.python_env import python_env
from toolkit.rank.discovery import free_port
from toolkit.spec import Case

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

DRIVER = r"""
import json, os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
dp, tp, pp, port = map(int, sys.argv[1:5])
out_dir = sys.argv[5]
os.environ.update(RANK=str(comm.rank), WORLD_SIZE=str(comm.size), LOCAL_RANK=str(comm.rank),
                  MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
from toolkit.spec import Case
from toolkit.workloads.oneflow import common as oc
flow = oc.import_oneflow()
from toolkit.workloads.oneflow import gpt as og
from toolkit.workloads.oneflow import gpt_parallel as par

ROW = 2  # samples per data-parallel row
mc = dict(hidden_size=32, num_layers=4, num_heads=4, intermediate_size=64, seq_len=16,
          vocab_size=256)
case = Case.from_dict({"framework": "oneflow", "model": "gpt", "gpus_per_node": comm.size,
                       "batch_size_per_device": ROW, "model_config": mc,
                       "parallel": {"tp": tp, "pp": pp,
                                    "micro_batch_size": 1 if pp > 1 else None}})
assert case.dp == dp
gen = flow.Generator(); gen.manual_seed(7)
tokens = flow.randint(0, mc["vocab_size"], (ROW * dp, mc["seq_len"] + 1), generator=gen)

def model():
    flow.manual_seed(1234)
    m = og.GPT(mc["vocab_size"], mc["hidden_size"], mc["num_layers"], mc["num_heads"],
               mc["intermediate_size"], mc["seq_len"])
    for sub in m.modules():
        if isinstance(sub, flow.nn.Dropout):
            sub.training = False  # dropout off: ranks would draw different masks
    return m

def train(trainer, steps=3):
    return [float(trainer.step().numpy()) for _ in range(steps)]

def runtime(distributed):
    return oc.OneFlowRuntime(flow=flow, device=flow.device("cpu"), device_type="cpu",
                             device_name="cpu", distributed=distributed, backend=None)

def adamw(m):
    return flow.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)

loss_fn = lambda m, b: m(b)
ref_model = model()
reference = train(oc.Trainer(Case.from_dict({"batch_size_per_device": ROW * dp}),
                             runtime(False), ref_model, adamw(ref_model), loss_fn, tokens))
row = par.dp_index(case, comm.rank)
mine = tokens[row * ROW:(row + 1) * ROW]
m = model()
if tp > 1 or pp > 1:
    meshes = par.stage_meshes(case, "cpu")
    info = par.shard(m, case, meshes)
    trainer = oc.Trainer(case, runtime(True), m, adamw(m), loss_fn,
                         par.global_batch(mine, meshes[0]), gpipe=pp > 1,
                         marker=par.world_marker("cpu", comm.size))
    # pipeline stages hold different layers: each rank reports its own parameters' placement
    info["w_sbp"] = str(m.blocks[-1].fc.weight.sbp)
else:
    info = {"ddp": True}
    trainer = oc.Trainer(case, runtime(True), oc.wrap_ddp(m, runtime(True)), adamw(m), loss_fn,
                         mine)
parallel = train(trainer)
if info.get("ddp"):  # each rank's loss is its own rows' mean: average them as DDP does grads
    parallel = [comm.allreduce(x) / comm.size for x in parallel]
with open(os.path.join(out_dir, f"rank{comm.rank}.json"), "w") as fh:
    json.dump({"rank": comm.rank, "reference": reference, "parallel": parallel, "info": info}, fh)
"""


def oneflow_python() -> tuple[str, dict[str, str]]:
    choice = python_env(Case.from_dict({"framework": "oneflow"}))
    if choice.problem:
        if os.environ.get("CI"):
            pytest.fail(choice.problem)
        pytest.skip(choice.problem)
    return choice.python, choice.env


@pytest.mark.parametrize(("dp", "tp", "pp"), [(1, 2, 1), (1, 1, 2), (2, 1, 1), (2, 2, 1)],
                         ids=["tp2", "pp2", "dp2-ddp", "dp2xtp2"])
def test_parallel_gpt_matches_one_rank(tmp_path, dp, tp, pp):
    python, env = oneflow_python()
    world = dp * tp * pp
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(world), "--bind-to", "none",
           "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [python, str(driver), str(dp), str(tp), str(pp), str(free_port()), str(tmp_path)]
    proc = subprocess.run(cmd, env={**os.environ, **env, "PYTHONPATH": str(ROOT),
                                    "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(r["rank"] for r in results) == list(range(world))
    for r in results:
        assert r["parallel"] == pytest.approx(r["reference"], rel=1e-4, abs=1e-5), r
        assert r["reference"][-1] < r["reference"][0]  # it trains
    info = results[0]["info"]
    if tp > 1:
        assert "split(dim=0)" in info["w_sbp"]  # column-parallel weight really is split
    if pp > 1:
        assert info["layers_per_stage"] == [2, 2] and info["pipeline_schedule"] == "gpipe"


GRID = """
name: oneflow_gpt_parallel
base:
  framework: oneflow
  model: gpt
  gpus_per_node: 2
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 3
  slurm: {time_min: 5}
  model_config: {hidden_size: 32, num_layers: 2, num_heads: 2, intermediate_size: 128,
                 seq_len: 32, vocab_size: 500}
sweep:
  parallel: [{tp: 2}, {pp: 2, micro_batch_size: 2}]
"""


def test_tensor_and_pipeline_parallel_cases_run_through_submit(tmp_path, capsys):
    oneflow_python()
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    out = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(out)]) == 0
    assert collect.main([str(out), "--quiet"]) == 0
    with (out / "runs.csv").open() as fh:
        runs = list(csv.DictReader(fh))
    assert {r["case_id"] for r in runs} == {"gpt-oneflow-fp32-1n2g-bs4-tp2",
                                            "gpt-oneflow-fp32-1n2g-bs4-pp2-mb2"}
    assert {r["status"] for r in runs} == {"ok"}, [r["error"] for r in runs]
    assert all(float(r["throughput_sps"]) > 0 for r in runs)
    assert {r["global_batch_size"] for r in runs} == {"4"}  # dp = 1: one copy of the batch
    meta = json.loads((out / "cases" / "gpt-oneflow-fp32-1n2g-bs4-pp2-mb2" / "r0" / "meta.json")
                      .read_text())
    assert meta["ranks"][0]["global_tensors"] is True
    assert meta["ranks"][0]["parallel"].startswith("dp1 x tp1 x pp2")


def test_parallel_layouts_the_model_cannot_take_are_refused_at_submit():
    from toolkit.workloads import unsupported_reason

    base = {"framework": "oneflow", "model": "gpt", "gpus_per_node": 4}
    assert "not divisible by parallel.tp 4" in unsupported_reason(Case.from_dict(
        {**base, "parallel": {"tp": 4}, "model_config": {"num_heads": 6, "hidden_size": 48}}))
    assert "only 1 layers" in unsupported_reason(Case.from_dict(
        {**base, "parallel": {"pp": 2}, "model_config": {"num_layers": 1}}))
    assert "dynamic loss scaling" in unsupported_reason(Case.from_dict(
        {**base, "precision": "amp_fp16", "parallel": {"tp": 2}}))
    assert unsupported_reason(Case.from_dict({**base, "parallel": {"tp": 2, "pp": 2}})) is None
    assert "only data parallelism" in unsupported_reason(Case.from_dict(
        {**base, "model": "bert_base", "parallel": {"tp": 2}}))
