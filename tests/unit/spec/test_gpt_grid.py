"""jobs/gpt.yaml expresses the seed's GPT matrix, and the GPT options of a Case are checked
with errors that name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolkit import submit
from toolkit.spec import Case, CaseError, from_plain, resolve
from toolkit.spec.grid import GridError, load_grid, parse_grid

ROOT = Path(__file__).resolve().parents[3]

# The "Test Case" table of seeds/001 (OneFlow GPT report), in its order.
SEED_CASES = [
    "DP_1x1x1_2_1536x16", "DP_8x1x1_16_1536x16", "DP_16x1x1_32_1536x16", "DP_32x1x1_64_1536x16",
    "MP_1x1x1_8_768x12", "MP_1x8x1_16_1536x16", "MP_1x16x1_16_3072x16", "MP_1x32x1_16_3072x32",
    "2D_8x1x1_16_1536x16", "2D_1x8x1_16_1536x16", "2D_2x4x1_16_1536x16", "2D_4x2x1_16_1536x16",
    "2D_2x8x1_16_2304x24", "2D_4x8x1_32_2304x24",
    "DP_PP_8x1x4_512_1536x16", "MP_PP_1x8x4_512_2304x24", "2D_PP_2x4x4_512_2304x24",
    "2D_PP_2x8x2_512_2304x24",
]
# Seed columns the names do not carry: micro-batch size and heads.
SEED_MICRO_BATCH = [2, 2, 2, 2, 8, 16, 16, 16, 2, 16, 8, 4, 8, 8, 2, 16, 8, 8]
SEED_HEADS = [16, 16, 16, 16, 12, 16, 32, 32, 16, 16, 16, 16, 24, 24, 16, 24, 24, 24]


def test_gpt_grid_has_every_seed_case_and_each_matches_its_name():
    grid = load_grid(ROOT / "jobs" / "gpt.yaml")
    assert list(grid.case_ids) == SEED_CASES
    for (cid, case), mbs, heads in zip(grid.items(), SEED_MICRO_BATCH, SEED_HEADS, strict=True):
        m = re.fullmatch(r"\w+?_(\d+)x(\d+)x(\d+)_(\d+)_(\d+)x(\d+)", cid)
        assert m, cid
        dp, tp, pp, gbs, hidden, layers = map(int, m.groups())
        assert (case.dp, case.parallel.tp, case.parallel.pp) == (dp, tp, pp), cid
        assert case.global_batch_size == gbs, cid
        assert case.micro_batch_size == mbs, cid
        mc = case.model_config
        assert (mc.hidden_size, mc.num_layers, mc.num_heads) == (hidden, layers, heads), cid
        assert mc.intermediate_size == 4 * hidden and mc.seq_len == 2048, cid
        assert case.activation_checkpointing  # the seed's TFLOP/s use the 96-formula
    pp_case = dict(grid.items())["2D_PP_2x4x4_512_2304x24"]
    assert pp_case.accumulation_steps == 32  # the seed's num-accumulation-steps


def test_gpt_grid_dry_run_lists_all_cases(capsys, tmp_path):
    assert submit.main(["--grid", str(ROOT / "jobs" / "gpt.yaml"), "--dry-run",
                        "--executor", "local", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "18 cases, 54 runs" in out
    for cid in SEED_CASES:
        assert cid in out


def gpt(**kw) -> Case:
    plain = {"model": "gpt", "gpus_per_node": 2, "batch_size_per_device": 4,
             "model_config": {"hidden_size": 64, "num_heads": 4, "num_layers": 2,
                              "vocab_size": 128, "seq_len": 16}}
    for key, value in kw.items():
        target = plain
        *parents, leaf = key.split("__")
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return resolve(from_plain(Case, plain, ""))


@pytest.mark.parametrize("kw, key, text", [
    ({"parallel__tp": 2, "data_parallel": "ddp", "gpus_per_node": 4}, "data_parallel",
     "with tp = 2 and dp = 2 use fsdp"),
    ({"parallel__pp": 2, "parallel__micro_batch_size": 4}, "parallel.micro_batch_size",
     "1f1b needs at least pp = 2 micro-batches per step; batch_size_per_device / "
     "micro_batch_size = 4 / 4 = 1"),
    ({"parallel__tp": 2, "model_config__num_heads": 3, "model_config__hidden_size": 63},
     "model_config.num_heads", "3 is not divisible by the tensor-parallel degree tp = 2"),
    ({"parallel__tp": 2, "model_config__vocab_size": 127}, "model_config.vocab_size",
     "127 is not divisible"),
    ({"parallel__pp": 2, "parallel__micro_batch_size": 1, "model_config__num_layers": 1},
     "model_config.num_layers", "1 layers cannot fill pp = 2 pipeline stages"),
])
def test_gpt_options_are_checked_with_the_key(kw, key, text):
    with pytest.raises(CaseError) as err:
        gpt(**kw)
    assert err.value.key == key and text in err.value.message


def test_gpt_only_options_are_refused_on_other_models():
    with pytest.raises(CaseError) as err:
        from_plain(Case, {"model": "resnet50", "activation_checkpointing": True}, "")
    assert err.value.key == "activation_checkpointing" and "only model gpt" in err.value.message
    with pytest.raises(GridError) as gerr:
        parse_grid("base: {model: bert_base}\nsweep: {pipeline_schedule: [gpipe]}\n",
                   source="g.yaml")
    assert "g.yaml: sweep.pipeline_schedule[0]: only model gpt" in str(gerr.value)
    with pytest.raises(GridError) as gerr:
        parse_grid("base: {model: gpt, pipeline_schedule: zigzag}\n", source="g.yaml")
    assert "base.pipeline_schedule: expected one of gpipe, 1f1b" in str(gerr.value)


def test_gpt_defaults_and_variant_separate_layouts():
    plain = gpt()
    assert plain.model_config.intermediate_size == 4 * 64
    assert plain.pipeline_schedule.value == "1f1b" and plain.data_parallel.value == "auto"
    tp = gpt(parallel__tp=2)
    pp = gpt(parallel__pp=2, parallel__micro_batch_size=2, pipeline_schedule="gpipe")
    assert plain.variant() != tp.variant() != pp.variant()
    assert "tp=2" in tp.variant() and "pp=2" in pp.variant() and "schedule=gpipe" in pp.variant()
    assert "recompute=True" in gpt(activation_checkpointing=True).variant()
    # an explicit MLP width is kept
    assert gpt(model_config__intermediate_size=100).model_config.intermediate_size == 100


def test_compile_is_refused_where_the_workload_lacks_it_and_examples_load():
    from toolkit.workloads import unsupported_reason

    resnet = resolve(from_plain(Case, {"model": "resnet50", "compile": True}, ""))
    assert unsupported_reason(resnet) is None  # the torch workloads all compile
    oneflow = resolve(from_plain(Case, {"model": "resnet50", "framework": "oneflow",
                                        "compile": True}, ""))
    assert unsupported_reason(oneflow) == "compile: torch options, not available with oneflow"
    assert unsupported_reason(gpt(compile=True, parallel__tp=2)) is None
    # asked for, never silently dropped: OneFlow runs eagerly, the GPT compiles layer by layer
    for extra, named in (({"compile_mode": "max_autotune"}, "compile_mode"),
                         ({"channels_last": True}, "channels_last")):
        of = resolve(from_plain(Case, {"model": "resnet50", "framework": "oneflow", **extra},
                                ""))
        assert unsupported_reason(of) == f"{named}: torch options, not available with oneflow"
    assert "cuda_graphs" in unsupported_reason(gpt(compile=True, cuda_graphs=True))
    assert unsupported_reason(gpt(compile=True, compile_mode="max_autotune")) is None
    for path in ("examples/gpt_cpu.yaml", "benchmarks/gpt_h200.yaml"):
        grid = load_grid(ROOT / path)
        assert all(c.model.value == "gpt" and unsupported_reason(c) is None
                   for c in grid.cases), path


@pytest.mark.parametrize("kw, key, text", [
    ({"pipeline_stages_per_rank": 2}, "pipeline_stages_per_rank",
     "only applies to pipeline_schedule: interleaved_1f1b, not 1f1b"),
    ({"parallel__pp": 2, "pipeline_schedule": "interleaved_1f1b",
      "pipeline_stages_per_rank": 1}, "pipeline_stages_per_rank",
     "expected an integer >= 2 (one stage per rank is pipeline_schedule: 1f1b), got 1"),
    # torch splits m = 5 micro-batches at pp = 2 into 2 rounds, which 5 does not divide
    ({"parallel__pp": 2, "pipeline_schedule": "interleaved_1f1b", "batch_size_per_device": 5,
      "parallel__micro_batch_size": 1}, "parallel.micro_batch_size",
     "5 / 1 = 5 micro-batches do not divide into 2 rounds at pp = 2"),
    ({"parallel__pp": 2, "pipeline_schedule": "interleaved_1f1b",
      "parallel__micro_batch_size": 1, "model_config__num_layers": 3},
     "model_config.num_layers",
     "3 layers cannot fill pp x pipeline_stages_per_rank = 2 x 2 = 4 pipeline stages"),
    ({"parallel__pp": 2, "pipeline_schedule": "interleaved_1f1b", "framework": "oneflow",
      "parallel__micro_batch_size": 1}, "pipeline_schedule",
     "interleaved_1f1b applies to torch only, not oneflow"),
])
def test_interleaved_schedule_is_checked_with_the_key(kw, key, text):
    kw.setdefault("model_config__num_layers", 4)
    with pytest.raises(CaseError) as err:
        gpt(**kw)
    assert err.value.key == key and text in err.value.message


def test_interleaved_schedule_stages_per_rank_variant_and_hash():
    base = {"parallel__pp": 2, "parallel__micro_batch_size": 1, "model_config__num_layers": 8}
    unset = gpt(pipeline_schedule="interleaved_1f1b", **base)
    two = gpt(pipeline_schedule="interleaved_1f1b", pipeline_stages_per_rank=2, **base)
    four = gpt(pipeline_schedule="interleaved_1f1b", pipeline_stages_per_rank=4, **base)
    assert (unset.stages_per_rank, two.stages_per_rank, four.stages_per_rank) == (2, 2, 4)
    # unset is 2: the same run, the same hash and variant; 4 is another run
    assert unset.config_hash() == two.config_hash() != four.config_hash()
    assert "schedule=interleaved_1f1b,vstages=2" in unset.variant()
    assert "vstages=4" in four.variant()
    # a non-interleaved pipeline and a case without one hold one stage per rank, and their
    # variant and hash do not carry the new key
    plain = gpt(**base)
    assert plain.stages_per_rank == 1 and "vstages" not in plain.variant()
    assert "pipeline_stages_per_rank" not in plain.to_dict() or \
        plain.to_dict()["pipeline_stages_per_rank"] is None
    # micro-batches fewer than pp: torch runs them in one round
    assert gpt(pipeline_schedule="interleaved_1f1b", **{**base, "batch_size_per_device": 1}
               ).accumulation_steps == 1
    # on one pipeline rank the schedule does not run: nothing is interleaved
    assert gpt(pipeline_schedule="interleaved_1f1b").stages_per_rank == 1
    with pytest.raises(CaseError) as err:
        from_plain(Case, {"model": "resnet50", "pipeline_stages_per_rank": 2}, "")
    assert err.value.key == "pipeline_stages_per_rank" and "only model gpt" in err.value.message
