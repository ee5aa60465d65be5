"""A grid means what it says: `--set` takes effect or is refused with the reason, duplicate keys
and excludes that match nothing are errors, a problem shared by many cases is one error with
"did you mean" and the line, and text that is not UTF-8 is a clear GridError."""

from __future__ import annotations

import pytest

from toolkit.spec.grid import GridError, load_grid, parse_grid

QUICKSTART_ZIP = """
base: {framework: torch}
sweep:
  gpus_per_node: [1, 2]
zip:
  - model: [resnet50, bert_base]
    model_config:
      - {image_size: 32, resnet_layers: [1, 1, 1, 1], num_classes: 100}
      - {hidden_size: 64, num_layers: 2, num_heads: 2, seq_len: 64, masked_positions: 10}
"""


def errors(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(GridError) as info:
        parse_grid(text, source="g.yaml", overrides=overrides)
    return str(info.value)


# -- --set ------------------------------------------------------------------------------------
def test_set_inside_a_mapping_that_a_zip_sets_whole_is_refused_naming_the_zip():
    msg = errors(QUICKSTART_ZIP, ("model_config.seq_len=512",))
    assert msg.startswith("g.yaml: --set model_config.seq_len: zip[0].model_config sets "
                          "model_config as a whole in every case")
    assert "--set model_config=..." in msg


def test_set_of_a_mapping_whose_part_a_sweep_moves_is_refused_naming_the_sweep():
    text = "base: {model: bert_base}\nsweep: {model_config.seq_len: [128, 512]}\n"
    msg = errors(text, ("model_config={hidden_size: 64}",))
    assert "--set model_config: sweep.model_config.seq_len moves model_config.seq_len" in msg


def test_set_of_exactly_a_swept_or_zipped_key_still_fixes_it():
    g = parse_grid(QUICKSTART_ZIP, overrides=["gpus_per_node=1"])
    assert [c.gpus_per_node for c in g.cases] == [1, 1]


@pytest.mark.parametrize("key, close", [
    ("model_config.seqlen", "seq_len"),
    ("precison", "precision"),
    ("slurm.partiton", "partition"),
])
def test_set_of_an_unknown_key_is_refused_with_did_you_mean(key, close):
    for text in (QUICKSTART_ZIP, "base: {model: bert_base}\n"):
        msg = errors(text, (f"{key}=3",))
        assert f"g.yaml: --set {key}: unknown key '{key}' (did you mean '{close}'?)" in msg


def test_set_below_a_plain_value_is_refused():
    assert "--set seed.x: seed is a single value" in errors("{}", ("seed.x=1",))


def test_base_values_under_a_key_an_axis_sets_whole_are_an_error():
    text = "base: {model_config: {seq_len: 512}}\n" + QUICKSTART_ZIP.replace("base:", "x:", 1)
    text = text.replace("x: {framework: torch}\n", "")
    msg = errors(text)
    assert ("g.yaml: base.model_config: zip[0].model_config sets model_config as a whole in "
            "every case, so these base values would never be used") in msg


# -- duplicate keys, excludes -----------------------------------------------------------------
def test_duplicate_keys_are_errors_naming_both_lines():
    msg = errors("base:\n  seed: 1\n  precision: fp32\n  seed: 2\nsweep: {}\nsweep: {}\n")
    assert msg.splitlines() == [
        "g.yaml: base.seed: duplicate key (first at line 2); keep one (line 4)",
        "g.yaml: sweep: duplicate key (first at line 5); keep one (line 6)",
    ]


def test_keys_equal_as_values_are_duplicates_and_merge_keys_are_not():
    assert "base.env.1: duplicate key" in errors("base: {env: {1: a, 0x1: b}}\n")
    g = parse_grid("defaults: &d {seed: 5, precision: fp32}\n"
                   "base: {<<: *d, seed: 6}\n".replace("defaults", "description"))
    assert g.cases[0].seed == 6


def test_an_exclude_that_matches_no_case_is_an_error():
    text = ("sweep: {precision: [fp32, amp_bf16]}\n"
            "exclude:\n  - {precision: fp16}\n  - {precision: amp_bf16}\n")
    msg = errors(text)
    assert msg == "g.yaml: exclude[0]: matches no case of this grid; check its keys and " \
                  "values (a filter that matches nothing drops nothing) (line 3)"


def test_overlapping_excludes_each_count_as_used():
    g = parse_grid("sweep: {precision: [fp32, amp_bf16, tf32]}\n"
                   "exclude: [{precision: [fp32, tf32]}, {precision: fp32}]\n")
    assert [c.precision.value for c in g.cases] == ["amp_bf16"]


def test_an_unknown_exclude_key_gets_did_you_mean():
    assert "exclude[0].precison: unknown key 'precison' (did you mean 'precision'?)" in \
        errors("exclude: [{precison: fp32}]")


# -- one error per problem, did you mean, lines ----------------------------------------------
def test_a_base_typo_on_a_10000_case_grid_is_one_error():
    values = ", ".join(str(i) for i in range(10_000))
    msg = errors(f"base: {{precison: fp32}}\nsweep:\n  seed: [{values}]\n")
    assert len(msg.splitlines()) == 1
    assert msg == "g.yaml: base.precison: unknown key (did you mean 'precision'?) (line 1)"


def test_a_problem_in_some_cases_says_how_many_and_which():
    msg = errors("base: {model: bert_base, model_config: {num_heads: 5}}\n"
                 "sweep:\n  seed: [1, 2]\n  model_config.hidden_size: [64, 60, 66]\n")
    lines = msg.splitlines()
    assert len(lines) == 2  # 64 and 66 are not divisible by 5; 60 is
    assert "(in 2 of 6 cases: the case from sweep.seed[0], sweep.model_config.hidden_size[0]; " \
           "the case from sweep.seed[1], sweep.model_config.hidden_size[0])" in lines[0]


def test_unknown_top_level_key_gets_did_you_mean_and_line():
    msg = errors("name: x\n\nsweeep: {seed: [1]}\n")
    assert msg.startswith("g.yaml: sweeep: unknown key (did you mean 'sweep'?)")
    assert msg.endswith("(line 3)")


def test_errors_in_sweeps_name_the_line_of_the_value():
    msg = errors("sweep:\n  precision:\n    - fp32\n    - fp64\n")
    assert msg.startswith("g.yaml: sweep.precision[1]: expected one of")
    assert msg.endswith("(line 4)")


# -- text that is not UTF-8 -------------------------------------------------------------------
def test_a_grid_that_is_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_bytes(b"name: x\nbase: {precision: fp32}  # caf\xe9\n")
    with pytest.raises(GridError) as info:
        load_grid(path)
    assert str(info.value) == (f"{path}: not UTF-8: byte 0xe9 at line 2, column 31; save the "
                               "file as UTF-8")


def test_a_grid_path_that_is_not_utf8_is_shown_with_escapes(tmp_path):
    path = tmp_path / "g\udcff.yaml"  # the byte 0xff in a file name
    path.write_bytes(b"base: {precision: fp64}\n")
    with pytest.raises(GridError) as info:
        load_grid(path)
    msg = str(info.value)
    msg.encode("utf-8")  # printable
    assert f"{tmp_path}/g\\xff.yaml: name: expected letters" in msg


def test_a_value_from_set_gets_no_line_of_the_file():
    msg = errors("name: x\nbase:\n  precision: fp32\n", ("precision=fp64",))
    assert msg.startswith("g.yaml: base.precision: expected one of")
    assert "(line" not in msg


def test_an_exclude_on_a_key_that_set_fixes_may_match_nothing():
    text = "sweep: {precision: [fp32, amp_bf16]}\nexclude: [{precision: fp32}]\n"
    g = parse_grid(text, overrides=["precision=amp_bf16"])
    assert [c.precision.value for c in g.cases] == ["amp_bf16"]
    unused = "sweep: {precision: [fp32]}\nexclude: [{precision: tf32}]\n"
    assert "exclude[0]: matches no case" in errors(unused, ("seed=3",))


# -- every problem of a grid at once ---------------------------------------------------------
EVERY_PROBLEM = """\
name: all-at-once
base:
  model: bert_bse
  precision: fp33
  batch_size_per_device: eight
  precision: tf32
  warmup_iters: 5
sweep:
  gpu_per_node: [1, 2]
  wibble: [1, 2, 3]
exclude:
  - {num_nodes: 4}
"""


def test_every_problem_of_a_grid_is_reported_in_one_pass_with_its_line():
    """A duplicate key, two bad values, an unknown model, misspelt keys (in the base and on an
    axis) and an exclude that matches nothing: one GridError, one line each, in file order."""
    lines = errors(EVERY_PROBLEM).splitlines()
    assert lines[:6] == [
        "g.yaml: base.model: expected one of resnet50, bert_base, gpt, command; got str "
        "'bert_bse' (did you mean 'bert_base'?) (all 6 cases) (line 3)",
        "g.yaml: base.batch_size_per_device: expected an integer; got str 'eight' (all 6 cases) "
        "(line 5)",
        "g.yaml: base.precision: duplicate key (first at line 4); keep one (line 6)",
        "g.yaml: base.warmup_iters: unknown key (did you mean 'warmup_iterations'?) (line 7)",
        "g.yaml: sweep.gpu_per_node: unknown key (did you mean 'gpus_per_node'?) (line 9)",
        "g.yaml: sweep.wibble: unknown key; valid keys: framework (default 'torch'), model "
        "(default 'resnet50'), " + lines[5].split("model (default 'resnet50'), ", 1)[1],
    ]
    assert lines[5].endswith(" (line 10)")
    assert lines[6:] == [
        "g.yaml: exclude[0]: matches no case of this grid; check its keys and values (a filter "
        "that matches nothing drops nothing) (line 12)"]


def test_a_misspelt_key_lists_the_valid_keys_only_where_none_is_close():
    close = errors("base: {batch_size: 8}\n")
    assert close == ("g.yaml: base.batch_size: unknown key (did you mean "
                     "'batch_size_per_device'?) (line 1)")
    far = errors("base: {colour: blue}\n")
    assert far.startswith("g.yaml: base.colour: unknown key; valid keys: framework (default "
                          "'torch'), model (default 'resnet50'),")
    top = errors("sweeps: {seed: [1]}\nbogus: 1\n").splitlines()
    assert top[0] == "g.yaml: sweeps: unknown key (did you mean 'sweep'?) (line 1)"
    assert top[1].startswith("g.yaml: bogus: unknown key; valid keys: name (grid name")


@pytest.mark.parametrize("text, expected", [
    ("sweep:\n  seed: [1, 2]\n  modle: [resnet50, bert_base]\n",
     "g.yaml: sweep.modle: unknown key (did you mean 'model'?) (line 3)"),
    ("zip:\n  - gpus_per_node: [1, 2]\n    batch_size_per_dev: [8, 16]\n",
     "g.yaml: zip[0].batch_size_per_dev: unknown key (did you mean 'batch_size_per_device'?) "
     "(line 3)"),
    ("sweep:\n  model_config.seqlen: [64, 128]\n",
     "g.yaml: sweep.model_config.seqlen: unknown key (did you mean 'seq_len'?) (line 2)"),
])
def test_an_unknown_key_on_an_axis_is_one_error_at_the_key(text, expected):
    assert errors(text) == expected


def test_an_exclude_meant_for_cases_that_failed_is_not_called_unmatched():
    """The cases fail for another reason; a filter on their values as written (or on a default
    filled in when a case is built) may still be meant for them, so only the filters that
    match none of those values are reported."""
    lines = errors("base: {model: bert_bse}\nsweep: {gpus_per_node: [1, 2]}\n"
                   "exclude:\n  - {gpus_per_node: 2}\n  - {gpus_per_node: 4}\n"
                   "  - {cpu_threads: 4}\n  - {seed: 7}\n").splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["base.model", "exclude[1]",
                                                              "exclude[3]"]
    assert lines[1] == ("g.yaml: exclude[1]: matches no case of this grid; check its keys and "
                        "values (a filter that matches nothing drops nothing) (line 5)")


def test_an_exclude_on_a_misspelt_key_is_one_error():
    assert errors("exclude: [{nodes: 1}, {num_nodes: 3}]").splitlines() == [
        "g.yaml: exclude[0].nodes: unknown key 'nodes' (did you mean 'num_nodes'?) (line 1)",
        "g.yaml: exclude[1]: matches no case of this grid; check its keys and values (a filter "
        "that matches nothing drops nothing) (line 1)"]


def test_did_you_mean_names_every_choice_about_as_close():
    from toolkit.spec import did_you_mean

    assert did_you_mean("iteration", ["iteration_s", "iterations", "seed"]) == \
        " (did you mean 'iterations' or 'iteration_s'?)"
    assert did_you_mean("nodes", ["num_nodes", "model"]) == " (did you mean 'num_nodes'?)"
    assert did_you_mean("colour", ["num_nodes", "model"]) == ""
