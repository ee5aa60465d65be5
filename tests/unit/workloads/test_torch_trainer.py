"""The shared training step on the CPU: fp16 loss scaling (static and dynamic), accumulation,
batch streams, the loss sanity check, and one small compiled case.

fp16 autocast runs on the CPU in the torch this project uses, so the scaling is exercised for
real; what differs on a GPU is only the speed.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from toolkit.spec import Case, resolve  # noqa: E402
from toolkit.workloads.pytorch.common import (  # noqa: E402
    BatchStream,
    RunOptions,
    TorchRuntime,
    Trainer,
    loss_check,
    profile_steps,
    resolve_options,
)


def case_for(**fields):
    return resolve(Case.from_dict({"model": "resnet50", "batch_size_per_device": 4,
                                   "warmup_iterations": 1, "measured_iterations": 3,
                                   "model_config": {"image_size": 32,
                                                    "resnet_layers": [1, 1, 1, 1],
                                                    "num_classes": 10}, **fields}))


def runtime(case, options=None):
    return TorchRuntime(device=torch.device("cpu"), device_name="cpu", distributed=False,
                        backend=None, options=options or resolve_options(case, "cpu"))


def linear_setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    return model, opt, loss_fn, (x, y)


def test_static_and_dynamic_scaling_take_the_same_unscaled_step():
    after = {}
    for scaling in ("static", "dynamic"):
        case = case_for(precision="amp_fp16", loss_scaling=scaling, static_loss_scale=1024.0)
        model, opt, loss_fn, batch = linear_setup()
        trainer = Trainer(case, runtime(case), model, opt, loss_fn, batch)
        assert (trainer.scaler is None) == (scaling == "static")
        trainer.step()
        after[scaling] = model.weight.detach().clone()
    model, opt, loss_fn, batch = linear_setup()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = loss_fn(model, batch)
    loss.backward()
    opt.step()
    for scaling, weight in after.items():  # both equal the unscaled fp16 step
        torch.testing.assert_close(weight, model.weight.detach(), rtol=2e-3, atol=2e-4,
                                   msg=scaling)


def test_overflow_dynamic_skips_and_backs_off_static_applies_it():
    """The difference the seed measures: dynamic scaling checks for inf and skips the step;
    static scaling never looks (cheaper) and pays with a broken model on overflow."""
    def exploding(m, b):
        return torch.nn.functional.cross_entropy(m(b[0]), b[1]) * 1e4  # x 65536 > fp16 max

    results = {}
    for scaling in ("dynamic", "static"):
        case = case_for(precision="amp_fp16", loss_scaling=scaling, static_loss_scale=65536.0)
        model, opt, _, batch = linear_setup()
        before = model.weight.detach().clone()
        trainer = Trainer(case, runtime(case), model, opt, exploding, batch)
        trainer.step()
        results[scaling] = (model.weight.detach(), before, trainer)
    weight, before, trainer = results["dynamic"]
    assert torch.equal(weight, before)
    assert trainer.scaler.get_scale() == 65536.0 / 2
    weight, before, _ = results["static"]
    assert not torch.isfinite(weight).all()


def test_accumulation_averages_micro_batches_and_streams_feed_each_one():
    class Counting(BatchStream):
        def __init__(self, batches):
            self.batches, self.calls = batches, 0

        def next_batch(self):
            self.calls += 1
            return self.batches[(self.calls - 1) % len(self.batches)]

        def summary(self):
            return {"source": "test", "calls": self.calls}

    model, opt, loss_fn, (x, y) = linear_setup()
    halves = [(x[:8], y[:8]), (x[8:], y[8:])]
    case = case_for(batch_size_per_device=16, parallel={"micro_batch_size": 8})
    assert case.accumulation_steps == 2
    stream = Counting(halves)
    trainer = Trainer(case, runtime(case), model, opt, loss_fn, stream)
    with torch.no_grad():
        expected = sum(float(loss_fn(model, b)) for b in halves) / 2
    assert float(trainer.step()) == pytest.approx(expected, rel=1e-5)
    summary = trainer.run(4, lambda *a: None)
    assert stream.calls == 2 + 4 * 2
    assert summary["data"] == {"source": "test", "calls": 10}
    assert summary["loss_check"]["passed"] is None  # real data: nothing asserted


def test_run_records_options_losses_and_scale():
    case = case_for(precision="amp_fp16")
    model, opt, loss_fn, batch = linear_setup()
    seen = []
    summary = Trainer(case, runtime(case), model, opt, loss_fn, batch).run(
        12, lambda i, e, s, loss, w: seen.append((i, loss)))
    assert [i for i, _ in seen] == list(range(1, 13))
    assert all(isinstance(v, float) and math.isfinite(v) for _, v in seen)
    assert summary["loss_check"]["passed"] is True
    assert summary["loss_check"]["iterations"] == 12
    assert summary["run_options"]["compile"] is False
    assert summary["loss_scale_final"] == 65536.0


def test_profile_runs_after_the_timed_window():
    case = case_for()
    model, opt, loss_fn, batch = linear_setup()
    seen = []
    summary = Trainer(case, runtime(case), model, opt, loss_fn, batch).run(
        4, lambda i, e, s, loss, w: seen.append(i), profile=3)
    assert seen == [1, 2, 3, 4]  # the profiled steps are not iterations of the run
    prof = summary["profile"]
    assert prof["steps"] == 3 and prof["step_ms"] > 0
    # a CPU rank runs no GPU kernel: every kind 0, the whole step idle
    assert prof["kernel_ms"]["GEMM/conv"] == 0.0 and prof["kernel_ms"]["idle"] == prof["step_ms"]
    trace = summary["profile_trace"]
    assert any("aten::" in str(ev.get("name")) for ev in trace["traceEvents"])
    plain = Trainer(case, runtime(case), model, opt, loss_fn, batch).run(2, lambda *a: None)
    assert "profile" not in plain and "profile_trace" not in plain
    # a rank that is not profiled still takes the steps (its data-parallel peers wait for it)
    calls = []

    def counting(m, b):
        calls.append(1)
        return loss_fn(m, b)

    other = Trainer(case, runtime(case), model, opt, counting, batch).run(
        2, lambda *a: None, profile=3, record_profile=False)
    assert len(calls) == 2 + 1 + 3 and "profile" not in other  # the same steps as a recorder
    assert len(steps_taken(profile_steps, record=True)) == 1 + 3


def steps_taken(profile_steps, record):
    """The steps one rank takes in `profile_steps(..., 3, ...)`, each an `aten::mm` on the CPU."""
    taken = []

    def step():
        taken.append(1)
        return torch.ones(4, 4) @ torch.ones(4, 4)

    summary, trace = profile_steps(step, 3, torch.device("cpu"), record)
    if record:  # the trace holds the three recorded steps, not the profiler's warm-up step
        assert summary["steps"] == 3
        assert sum(ev.get("name") == "aten::mm" for ev in trace["traceEvents"]
                   if ev.get("ph") == "X") == 3
    return taken


def _late_peer(rank, init, out):
    """Rank 1 reaches the profiled steps a second late (as a rank whose profiler is slow to
    start); rank 0 records its steps. Rank 0 writes its profiled step time to `out`."""
    import time

    import torch.distributed as dist

    from toolkit.workloads.pytorch.common import profile_steps

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        def step():
            t = torch.ones(1)
            dist.all_reduce(t)
            return t

        step()
        if rank == 1:
            time.sleep(1.0)
        summary, _ = profile_steps(step, 3, torch.device("cpu"), record=rank == 0)
        if rank == 0:
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(str(summary["step_ms"]))
    finally:
        dist.destroy_process_group()


def test_no_recorded_step_holds_a_late_ranks_wait(tmp_path):
    """Ranks reach the profiler at different times; the unrecorded first step's collective
    waits for the late one, so rank 0's three recorded steps do not hold its second."""
    import torch.multiprocessing as mp

    out = tmp_path / "step_ms"
    mp.spawn(_late_peer, args=(f"file://{tmp_path}/pg", str(out)), nprocs=2)
    assert float(out.read_text()) < 150.0  # recorded from the first step: over 1000 / 3 ms a step


@pytest.mark.parametrize("losses,passed", [
    ([5.0, 4.0, 3.0, 2.0], True),
    ([2.0, 3.0, 4.0, 5.0], False),
    ([5.0, 4.0, float("nan"), 2.0], False),
    ([5.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 5.5], True),  # means of the first and last 2
])
def test_loss_check(losses, passed):
    assert loss_check(losses, fixed_batch=True)["passed"] is passed


def test_loss_check_without_enough_losses_or_with_real_data():
    assert loss_check([None, 3.0], fixed_batch=True)["passed"] is None
    real = loss_check([5.0, 4.0, 3.0], fixed_batch=False)
    assert real["passed"] is None and "real data" in real["reason"]
    assert loss_check([5.0, float("inf")], fixed_batch=False)["passed"] is False


@pytest.mark.slow
def test_compiled_step_with_cuda_graph_bookkeeping_on_cpu():
    """The one compiled case (Inductor on the CPU, about a minute): a tiny BERT through
    torch.compile in reduce-overhead mode. On the CPU Inductor captures no graph, but the step's
    graph bookkeeping (step marks, copied losses across accumulated micro-steps) runs."""
    pytest.importorskip("transformers")
    from toolkit.workloads.pytorch import bert as torch_bert

    case = resolve(Case.from_dict({
        "model": "bert_base", "batch_size_per_device": 4, "parallel": {"micro_batch_size": 2},
        "precision": "amp_bf16", "compile": True, "cuda_graphs": True,
        "model_config": {"hidden_size": 32, "num_layers": 1, "num_heads": 2,
                         "intermediate_size": 64, "seq_len": 16, "vocab_size": 200,
                         "masked_positions": 3}}))
    options = RunOptions(compile=True, cuda_graphs=True)
    rt = runtime(case, options)
    model, opt, loss_fn, batch, _ = torch_bert.build(case, rt, rank=0)
    trainer = Trainer(case, rt, model, opt, loss_fn, batch)
    assert isinstance(trainer.model, torch._dynamo.eval_frame.OptimizedModule)
    summary = trainer.run(10, lambda *a: None)
    assert summary["run_options"]["torch_compile_mode"] == "reduce-overhead"
    assert summary["loss_check"]["passed"] is True, summary["loss_check"]
