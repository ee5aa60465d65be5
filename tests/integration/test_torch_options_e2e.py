"""The torch run options end to end, for real: grid -> mpirun -> worker -> torch on the CPU ->
rank files -> collect. fp16 with dynamic and static loss scaling, the image-folder pipeline over
two ranks with worker processes, LAMB over two ranks, channels_last, CUDA graphs asked for on a
CPU rank, gradients all-reduced in bf16 under DDP (ResNet50 and the GPT), and which buffers DDP
broadcasts. Tiny sizes; compilation is covered by the one slow unit test, not here."""

from __future__ import annotations

import csv
import json

import pytest

from toolkit import collect, submit

pytestmark = pytest.mark.integration

Image = pytest.importorskip("PIL.Image")

GRID = """
name: options
repeats: 1
base:
  framework: torch
  batch_size_per_device: 4
  warmup_iterations: 2
  measured_iterations: 6
  telemetry_interval_ms: 0
  slurm: {{time_min: 5}}
zip:
  - model: [resnet50, resnet50, resnet50, bert_base, gpt]
    precision: [amp_fp16, amp_fp16, fp32, tf32, fp32]
    loss_scaling: [dynamic, static, null, null, null]
    gpus_per_node: [1, 1, 2, 2, 2]
    data: [synthetic, synthetic, image_folder, synthetic, synthetic]
    data_path: [null, null, "{images}", null, null]
    data_workers: [null, null, 1, null, null]
    channels_last: [null, null, true, null, null]
    optimizer: [null, null, null, lamb, null]
    cuda_graphs: [false, false, false, true, false]
    grad_reduce: [null, null, bf16, null, bf16]
    model_config:
      - {{image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}}
      - {{image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}}
      - {{image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 10}}
      - {{hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, seq_len: 32,
          vocab_size: 500, masked_positions: 5}}
      - {{hidden_size: 32, num_layers: 2, num_heads: 2, seq_len: 16, vocab_size: 128}}
"""


def write_jpegs(root, classes=2, per_class=8):
    import random

    rnd = random.Random(0)
    for c in range(classes):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            img = Image.new("RGB", (48 + i, 40), tuple(rnd.randrange(256) for _ in range(3)))
            img.putpixel((i, i), (255, 255, 255))
            img.save(root / f"c{c}" / f"{i}.jpg", quality=90)


def summaries(run_dir):
    out = {}
    for path in sorted(run_dir.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["type"] == "summary":
                out[rec["rank"]] = rec
    return out


def test_options_run_for_real_and_are_recorded(tmp_path, capsys):
    images = tmp_path / "images"
    write_jpegs(images)
    grid = tmp_path / "options.yaml"
    grid.write_text(GRID.format(images=images))
    results = tmp_path / "results"
    assert submit.main(["--grid", str(grid), "--results", str(results)]) == 0
    assert collect.main([str(results), "--quiet"]) == 0
    capsys.readouterr()
    with (results / "runs.csv").open() as fh:
        runs = {r["case_id"]: r for r in csv.DictReader(fh)}
    assert {r["status"] for r in runs.values()} == {"ok"}, {k: r["error"] for k, r in
                                                            runs.items()}
    assert all(float(r["throughput_sps"]) > 0 for r in runs.values())
    # every torch run's start-up, cut into its phases, which add up to the whole
    phases = ("start_up_launch_s", "start_up_setup_s", "start_up_build_s",
              "start_up_first_iteration_s")
    for r in runs.values():
        parts = [float(r[k]) for k in phases]
        assert all(p >= 0 for p in parts) and parts[1] > 0 and parts[3] > 0, r
        assert sum(parts) == pytest.approx(float(r["start_to_first_iteration_s"]), abs=1e-3)

    cases = results / "cases"
    dynamic = summaries(cases / "resnet50-torch-amp_fp16-1n1g-bs4" / "r0")[0]
    static = summaries(cases / "resnet50-torch-amp_fp16-static-1n1g-bs4" / "r0")[0]
    assert dynamic["loss_scale_final"] > 0 and "loss_scale_final" not in static
    for rec in (dynamic, static):
        assert rec["loss_check"]["passed"] is True, rec["loss_check"]
        assert rec["data"] == {"source": "synthetic", "fixed_batch": True}
        assert rec["optimizer"] == "SGD(foreach)"

    real_dir = cases / "resnet50-torch-fp32-1n2g-bs4" / "r0"
    real = summaries(real_dir)
    assert sorted(real) == [0, 1]
    for rec in real.values():
        assert rec["data"]["source"] == "image_folder" and rec["data"]["images"] == 16
        assert rec["data"]["workers"] == 1 and rec["data"]["batches_loaded"] >= 8
        assert rec["run_options"]["channels_last"] is True and rec["channels_last"] is True
        assert rec["loss_check"]["passed"] is None
        # the gradients went through DDP's bf16 hook, as DDP itself reports
        assert rec["run_options"]["grad_reduce"] == "bf16"
        assert rec["ddp_comm_hook"] == "bf16_compress_hook"
    meta = json.loads((real_dir / "meta.json").read_text())
    assert meta["ranks"][1]["data"]["path"] == str(images)
    assert meta["ranks"][0]["precision_flags"]["torch.get_float32_matmul_precision"] == "highest"
    # cuDNN's heuristics choose unless a case asks for benchmark mode
    assert meta["ranks"][0]["precision_flags"]["torch.backends.cudnn.benchmark"] is False
    assert meta["ranks"][0]["run_options"]["cudnn_benchmark"] is False
    # this machine's torch came with its bytecode: the grid's bytecode cache stays unused
    assert meta["bytecode_cache"] == {"directory": None,
                                      "reason": "torch is installed with its bytecode"}

    bert_ranks = summaries(cases / "bert_base-torch-tf32-1n2g-bs4" / "r0")
    assert sorted(bert_ranks) == [0, 1]
    bert = bert_ranks[0]
    assert bert["optimizer"] == "LAMB(foreach)" and bert["mlm_head_positions"] == 5
    assert bert["run_options"]["cuda_graphs"] is False
    assert "not applied on a CPU" in bert["run_options"]["notes"][0]
    assert bert["precision_flags"]["torch.backends.cuda.matmul.allow_tf32"] is True

    gpt = summaries(next(cases.glob("gpt-*")) / "r0")
    assert sorted(gpt) == [0, 1]
    for rec in gpt.values():  # the GPT under DDP registers the same hook
        assert rec["parallel"]["data_parallel"] == "ddp"
        assert rec["ddp_comm_hook"] == "bf16_compress_hook"
    assert bert["run_options"]["grad_reduce"] == "fp32" and "ddp_comm_hook" not in bert
    # BERT's buffers (position and token-type ids) are constants: DDP does not broadcast them
    # before every forward; ResNet50's batch-norm statistics are
    assert bert["ddp_broadcast_buffers"] is False
    assert all(rec["ddp_broadcast_buffers"] is True for rec in real.values())

    # the report tells which input each case used
    with (results / "summary.csv").open() as fh:
        variants = {r["case_ids"]: r["variant"] for r in csv.DictReader(fh)}
    assert "data=image_folder" in variants["resnet50-torch-fp32-1n2g-bs4"]
    assert "data=synthetic" in variants["resnet50-torch-amp_fp16-1n1g-bs4"]
    assert "data=image_folder" in (results / "report.md").read_text()
