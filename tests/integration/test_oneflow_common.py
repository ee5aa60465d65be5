"""`oneflow_common`'s own machinery, run for real under OneFlow (the Python 3.10 venv) on CPU:
the step marker that the timed loop reads, eager loss scaling, and the refusal of AMP on CPU.

Each check is a short script run by the OneFlow interpreter (this test process has torch, not
OneFlow); it prints one JSON line that the test asserts on.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from toolkit.launch.python_env import python_env
from toolkit.spec import Case

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import json, time
from toolkit.spec import Case
from toolkit.workloads.oneflow import common as oc
flow = oc.import_oneflow()

def runtime():
    return oc.OneFlowRuntime(flow=flow, device=flow.device("cpu"), device_type="cpu",
                             device_name="cpu", distributed=False, backend=None)

def tiny(case, seed=0):
    flow.manual_seed(seed)
    model = flow.nn.Sequential(flow.nn.Linear(64, 256), flow.nn.ReLU(), flow.nn.Linear(256, 8))
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    gen = flow.Generator(); gen.manual_seed(1)
    batch = (flow.randn(32, 64, generator=gen), flow.randint(0, 8, (32,), generator=gen))
    loss_fn = lambda m, b: flow.nn.functional.cross_entropy(m(b[0]), b[1])
    return model, oc.Trainer(case, runtime(), model, opt, loss_fn, batch)
"""


def run_in_oneflow(body: str) -> dict:
    env_choice = python_env(Case.from_dict({"framework": "oneflow"}))
    if env_choice.problem:
        if os.environ.get("CI"):
            pytest.fail(env_choice.problem)
        pytest.skip(env_choice.problem)
    env = {**os.environ, **env_choice.env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([env_choice.python, "-c", PRELUDE + textwrap.dedent(body)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_step_marker_is_ready_only_when_the_whole_step_is():
    """Queueing a step returns at once; reading its marker waits for the step, so a full sync
    right after has nothing left to wait for. Reading the forward's loss instead would return
    with backward and update still running (the counter-check shows the difference is real)."""
    out = run_in_oneflow("""
        flow.manual_seed(0)
        model = flow.nn.Sequential(*[flow.nn.Linear(512, 512) for _ in range(8)])
        opt = flow.optim.SGD(model.parameters(), lr=1e-3)
        x = flow.randn(256, 512)
        trainer = oc.Trainer(Case(), runtime(), model, opt, lambda m, b: m(b).pow(2).mean(), x)
        rows = []
        for _ in range(4):
            flow._oneflow_internal.eager.Sync()
            t0 = time.perf_counter(); marker = trainer.step(); t1 = time.perf_counter()
            float(marker.numpy()); t2 = time.perf_counter()
            flow._oneflow_internal.eager.Sync(); t3 = time.perf_counter()
            rows.append([t1 - t0, t2 - t1, t3 - t2])
        after_loss = []
        for _ in range(4):
            flow._oneflow_internal.eager.Sync()
            opt.zero_grad(True)
            loss = model(x).pow(2).mean(); loss.backward(); opt.step()
            float(loss.numpy()); t2 = time.perf_counter()
            flow._oneflow_internal.eager.Sync(); after_loss.append(time.perf_counter() - t2)
        print(json.dumps({"rows": rows[1:], "after_loss": after_loss[1:]}))
    """)
    for queue_s, marker_s, after_s in out["rows"]:
        assert marker_s > 5 * queue_s  # the step runs after being queued, not while
        assert after_s < 0.1 * marker_s  # nothing of the step is left once the marker is read
    # reading the forward's loss leaves backward + update to run: a sync then waits for real
    assert min(out["after_loss"]) > max(r[2] for r in out["rows"])


def test_eager_loss_scaling_gives_the_unscaled_update_and_skips_inf():
    out = run_in_oneflow("""
        def params_after(case, steps=3):
            model, trainer = tiny(case)
            losses = [float(trainer.step().numpy()) for _ in range(steps)]
            return [p.numpy().tolist() for p in model.parameters()], losses, trainer
        plain, plain_losses, _ = params_after(Case())
        # amp_fp16 on a CPU runtime: autocast is off (CPU), the scaling path runs as on a GPU
        dyn, dyn_losses, t = params_after(Case.from_dict({"precision": "amp_fp16"}))
        static, _, _ = params_after(Case.from_dict({"precision": "amp_fp16",
                                                    "loss_scaling": "static",
                                                    "static_loss_scale": 1024.0}))
        scaler = oc.DynamicLossScale(flow, init_scale=8.0, growth_interval=2)
        p = flow.nn.Parameter(flow.ones(3))
        (p * flow.tensor([1.0, float("inf"), 2.0])).sum().backward()
        skipped = not scaler.unscale_and_check([p]); scaler.update(False)
        after_inf = scaler.scale
        p.grad = None
        (p * flow.tensor([8.0, 16.0, 24.0])).sum().backward()
        finite = scaler.unscale_and_check([p]); unscaled = p.grad.numpy().tolist()
        scaler.update(True); scaler.update(True)
        print(json.dumps({"plain": plain, "dyn": dyn, "static": static, "losses": plain_losses,
                          "dyn_losses": dyn_losses, "dyn_scale": t.dynamic.scale,
                          "skipped": skipped, "after_inf": after_inf, "finite": finite,
                          "unscaled": unscaled, "grown": scaler.scale,
                          "skipped_steps": scaler.skipped_steps}))
    """)
    # scale 2**16 and 1024 are powers of two: scaling and unscaling is exact
    assert out["dyn"] == out["plain"] and out["static"] == out["plain"]
    assert out["dyn_losses"] == out["losses"] and out["losses"][-1] < out["losses"][0]
    assert out["dyn_scale"] == 2.0**16
    assert out["skipped"] is True and out["after_inf"] == 4.0 and out["skipped_steps"] == 1
    assert out["finite"] is True and out["unscaled"] == [2.0, 4.0, 6.0]  # divided by 4
    assert out["grown"] == 8.0  # doubled after growth_interval clean steps


def test_amp_on_a_cpu_rank_is_refused_with_the_reason():
    out = run_in_oneflow("""
        from toolkit.rank.discovery import RankInfo
        info = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0,
                        num_nodes=1, host="h", hosts=("h",), master_addr="127.0.0.1",
                        master_port=29555)
        try:
            oc.setup(Case.from_dict({"precision": "amp_bf16", "framework": "oneflow"}), info)
            print(json.dumps({"raised": None}))
        except oc.OneFlowUnavailable as err:
            print(json.dumps({"raised": str(err)}))
    """)
    assert out["raised"] is not None and "no CPU autocast" in out["raised"]
