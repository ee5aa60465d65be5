"""Grid loading: expansion, ids, overrides, and every validation error naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.spec import Case, Precision
from toolkit.spec.grid import GridError, load_grid, parse_grid

ROOT = Path(__file__).resolve().parents[3]


def errors(text: str, overrides=()) -> str:
    with pytest.raises(GridError) as info:
        parse_grid(text, source="g.yaml", overrides=overrides)
    msg = str(info.value)
    assert all(line.startswith("g.yaml: ") for line in msg.splitlines()), msg
    return msg


def test_sweep_zip_exclude_and_ids():
    g = parse_grid("""
repeats: 3
base: {model: resnet50, batch_size_per_device: 16}
sweep:
  precision: [fp32, amp_bf16]
zip:
  - {num_nodes: [1, 1, 2], gpus_per_node: [1, 4, 4]}
exclude:
  - {num_nodes: 2, precision: fp32}
""")
    assert g.case_ids == (
        "resnet50-torch-fp32-1n1g-bs16", "resnet50-torch-fp32-1n4g-bs16",
        "resnet50-torch-amp_bf16-1n1g-bs16", "resnet50-torch-amp_bf16-1n4g-bs16",
        "resnet50-torch-amp_bf16-2n4g-bs16")
    assert all(c.repeats == 3 for c in g.cases)
    assert g.cases[-1].precision is Precision.AMP_BF16 and g.cases[-1].world_size == 8
    # model defaults are resolved into the case
    assert g.cases[0].model_config.image_size == 224
    assert g.cases[0].model_config.resnet_layers == (3, 4, 6, 3)


def test_ids_disambiguate_by_swept_key_and_hash_differs():
    g = parse_grid("""
base: {model: bert_base}
sweep: {model_config.seq_len: [128, 512]}
""")
    assert g.case_ids == ("bert_base-torch-fp32-1n1g-bs32-seq_len128",
                          "bert_base-torch-fp32-1n1g-bs32-seq_len512")
    assert g.cases[0].config_hash() != g.cases[1].config_hash()


def test_set_overrides_base_and_fixes_swept_axis():
    text = "base: {model: resnet50}\nsweep: {batch_size_per_device: [8, 16]}\n"
    g = parse_grid(text, overrides=["batch_size_per_device=4", "repeats=2",
                                    "model_config.image_size=64"])
    assert [c.batch_size_per_device for c in g.cases] == [4]
    assert g.cases[0].repeats == 2 and g.cases[0].model_config.image_size == 64


def test_case_roundtrip_through_json_dict():
    g = parse_grid("base: {model: bert_base, precision: amp_fp16, loss_scaling: static, "
                   "env: {NCCL_DEBUG: INFO, X: 1}}")
    case = g.cases[0]
    assert Case.from_dict(case.to_dict()) == case
    assert case.base_id() == "bert_base-torch-amp_fp16-static-1n1g-bs32"
    assert dict(case.env) == {"NCCL_DEBUG": "INFO", "X": "1"}


@pytest.mark.parametrize("text, expected", [
    ("bogus: 1", "g.yaml: bogus: unknown key; valid keys: name"),
    ("base: {precison: fp32}", "g.yaml: base.precison: unknown key (did you mean 'precision'?) "
                                "(line 1)"),
    ("base: {precision: fp64}", "g.yaml: base.precision: expected one of fp32, tf32, "
                                "amp_bf16, amp_fp16; got str 'fp64'"),
    ("sweep: {precision: [fp32, fp64]}", "g.yaml: sweep.precision[1]: expected one of"),
    ("base: {batch_size_per_device: '8'}", "g.yaml: base.batch_size_per_device: expected an "
                                           "integer; got str '8'"),
    ("base: {batch_size_per_device: true}", "expected an integer; got bool True"),
    ("base: {gpus_per_node: 0}", "g.yaml: base.gpus_per_node: expected an integer >= 1"),
    ("zip: [{num_nodes: [1, 2], gpus_per_node: [1]}]",
     "g.yaml: zip[0]: lists must have the same length; got num_nodes: 2, gpus_per_node: 1"),
    ("sweep: {precision: fp32}", "g.yaml: sweep.precision: expected a non-empty list"),
    ("base: {parallel: {tp: 2}}\nsweep: {gpus_per_node: [1, 2]}",
     "g.yaml: base.parallel: tp x pp = 2 x 1 = 2 does not divide the world size num_nodes x "
     "gpus_per_node = 1 x 1 = 1 (in 1 of 2 cases: the case from sweep.gpus_per_node[0])"),
    ("base: {batch_size_per_device: 10, parallel: {micro_batch_size: 4}}",
     "g.yaml: base.parallel.micro_batch_size: 4 does not divide batch_size_per_device 10"),
    ("base: {precision: fp32, loss_scaling: static}",
     "g.yaml: base.loss_scaling: only applies to amp_fp16, not fp32"),
    ("base: {model: resnet50, model_config: {seq_len: 128}}",
     "g.yaml: base.model_config.seq_len: does not apply to model resnet50"),
    ("base: {model: bert_base, model_config: {hidden_size: 100, num_heads: 12}}",
     "g.yaml: base.model_config.num_heads: 12 does not divide hidden_size 100"),
    ("sweep: {precision: [fp32, fp32]}", "appears 2 times with the same configuration"),
    ("exclude: [{nodes: 1}]", "g.yaml: exclude[0].nodes: unknown key"),
    ("exclude: [{model: resnet50}]", "g.yaml: exclude: every case is excluded"),
    ("name: ../evil", "g.yaml: name: expected letters"),
    ("base: {name: ../x}", "g.yaml: base.name: '../x' is not a valid case id"),
    ("base: {env: {'BAD NAME': 1}}", "g.yaml: base.env.BAD NAME: not a valid environment"),
    ("base: {env: {A: [1]}}", "g.yaml: base.env.A: expected a string or number"),
    ("repeats: 0", "g.yaml: repeats: expected an integer from 1 to 1000; got 0"),
    ("base: {repeats: 2}", "g.yaml: base.repeats: set repeats at the top level"),
    ("sweep: {repeats: [1, 2]}", "repeats is a grid-level setting"),
    ("sweep: {precision: [fp32]}\nzip: [{precision: [tf32]}]", "key also swept at sweep.precision"),
    ("- 1\n- 2", "g.yaml: expected a mapping at the top level"),
    ("base: {a: [1, 2}", "g.yaml: not valid YAML: line 1"),
    ("base: {slurm: {launcher: ssh}}", "g.yaml: base.slurm.launcher: expected srun or mpirun"),
    ("base: {slurm: {partitoin: gpu}}", "g.yaml: base.slurm.partitoin: unknown key (did you mean "
                                        "'partition'?) (line 1)"),
])
def test_validation_errors_name_file_key_and_expectation(text, expected):
    assert expected in errors(text)


def test_several_errors_reported_together():
    msg = errors("sweep: {precision: [fp64, fp32]}\nbase: {model_config: {seq_len: 3}}\n"
                 "exclude: [{nodes: 1}]")
    assert "sweep.precision[0]" in msg and "exclude[0].nodes" in msg


def test_bad_override():
    assert "--set nonsense: expected key=value" in errors("{}", overrides=["nonsense"])
    assert "base.precision: expected one of" in errors("{}", overrides=["precision=fp64"])


def test_missing_file_is_a_grid_error(tmp_path):
    with pytest.raises(GridError, match="cannot read"):
        load_grid(tmp_path / "nope.yaml")


@pytest.mark.parametrize("path, cases, repeats", [
    ("jobs/bert.yaml", 30, 7),
    ("jobs/resnet50.yaml", 18, 5),
    ("examples/quickstart.yaml", 4, 2),
])
def test_shipped_grids_expand(path, cases, repeats):
    g = load_grid(ROOT / path)
    assert len(g.cases) == cases
    assert {c.repeats for c in g.cases} == {repeats}
    assert len(set(g.case_ids)) == cases


def test_bert_grid_is_the_seed_matrix():
    g = load_grid(ROOT / "jobs/bert.yaml")
    fp32 = {(c.num_nodes, c.gpus_per_node, c.batch_size_per_device) for c in g.cases
            if c.precision is Precision.FP32}
    shapes = ((1, 1), (1, 8), (2, 8), (4, 8))
    expected = {(n, gp, bs) for bs in (96, 64, 32, 24) for n, gp in shapes}
    expected.discard((4, 8, 24))
    assert fp32 == expected
    assert all(c.warmup_iterations == 20 and c.measured_iterations == 100 for c in g.cases)
