"""`model: command` in a grid: the argument list, its placeholders, the program, the pattern and
the files it names are checked when the grid is loaded, and the config hash follows the script's
contents, not where it lies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolkit.spec import Case, CommandLaunch, RateScope
from toolkit.spec.grid import GridError, load_grid

SCRIPT = "print('training')\n"


def grid(tmp_path: Path, command: str, extra: str = "", script: str = SCRIPT) -> Path:
    (tmp_path / "train.py").write_text(script)
    path = tmp_path / "g.yaml"
    path.write_text(f"""
name: own
base:
  model: command
  warmup_iterations: 2
  measured_iterations: 4
  command:
{command}
{extra}
""")
    return path


ARGV = '    argv: [python3, train.py, --batch-size, "{batch_size_per_device}"]'


def error(path: Path) -> str:
    with pytest.raises(GridError) as info:
        load_grid(path)
    return str(info.value)


def test_a_command_case_loads_with_its_files_hashed(tmp_path):
    g = load_grid(grid(tmp_path, ARGV + "\n    name: mine",
                       "sweep:\n  batch_size_per_device: [8, 16]"))
    assert g.case_ids == ("mine-torch-fp32-1n1g-bs8", "mine-torch-fp32-1n1g-bs16")
    case = g.cases[0]
    assert case.command.workdir == str(tmp_path)
    assert case.command.argv[-1] == "{batch_size_per_device}"  # filled per rank, not here
    [entry] = case.command.files
    assert entry.endswith("  train.py") and len(entry.split()[0]) == 64
    # one program at every batch size: one variant, so speedups compare like with like
    assert g.cases[0].variant() == g.cases[1].variant()
    assert case.variant() == f"command=mine,program={case.command_digest()}"


def test_changed_script_is_another_case_moved_script_is_not(tmp_path):
    first = load_grid(grid(tmp_path, ARGV)).cases[0]
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(tmp_path / "train.py", moved)
    shutil.copy(tmp_path / "g.yaml", moved)
    assert load_grid(moved / "g.yaml").cases[0].config_hash() == first.config_hash()
    changed = load_grid(grid(tmp_path, ARGV, script=SCRIPT + "# faster\n")).cases[0]
    assert changed.config_hash() != first.config_hash()
    assert changed.variant() != first.variant()


def test_argv_as_a_shell_string_is_an_error(tmp_path):
    msg = error(grid(tmp_path, '    argv: "python3 train.py --batch-size 8"'))
    assert "command.argv" in msg and "expected a list" in msg
    assert "a string is not split" in msg


def test_unknown_placeholder_is_named(tmp_path):
    msg = error(grid(tmp_path, '    argv: [python3, train.py, "--bs={batch_size}"]'))
    assert "command.argv[2]" in msg and "unknown placeholder {batch_size}" in msg
    assert "{batch_size_per_device}" in msg  # the known ones are listed


def test_placeholder_with_format_or_attribute_is_an_error(tmp_path):
    assert "no format" in error(grid(tmp_path, '    argv: [python3, "{seed:04d}"]'))
    assert "unknown placeholder {seed.real}" in error(
        grid(tmp_path, '    argv: [python3, "{seed.real}"]'))
    assert "literal braces" in error(grid(tmp_path, '    argv: [python3, "{oops"]'))


def test_missing_program_is_an_error(tmp_path):
    msg = error(grid(tmp_path, "    argv: [no-such-trainer-xyz, train.py]"))
    assert "command.argv[0]" in msg and "'no-such-trainer-xyz' not found" in msg
    msg = error(grid(tmp_path, "    argv: [./missing.sh]"))
    assert "'./missing.sh' not found" in msg


def test_missing_interpreter_is_an_error(tmp_path):
    msg = error(grid(tmp_path, "    argv: [train.py]\n    interpreter: venv/bin/python"))
    assert "command.interpreter" in msg and "no executable Python" in msg


def test_pattern_that_does_not_compile_is_an_error(tmp_path):
    msg = error(grid(tmp_path, ARGV + "\n    pattern: 'speed (?P<samples_per_s>[0-9.]+'"))
    assert "command.pattern" in msg and "does not compile" in msg and "missing )" in msg


def test_pattern_needs_one_figure_group(tmp_path):
    msg = error(grid(tmp_path, ARGV + "\n    pattern: 'speed ([0-9.]+)'"))
    assert "exactly one named group" in msg and "(?P<samples_per_s>...)" in msg
    msg = error(grid(tmp_path, ARGV + "\n    pattern: '(?P<samples_per_s>\\d+) (?P<speed>\\d)'"))
    assert "unknown named group(s) speed" in msg


def test_backreference_is_refused_by_the_linear_time_engine(tmp_path):
    msg = error(grid(tmp_path, ARGV + "\n    pattern: '(?P<samples_per_s>a)\\1'"))
    assert "does not compile" in msg


def test_command_options_only_with_model_command():
    with pytest.raises(ValueError, match="only model command runs a program"):
        Case.from_dict({"model": "resnet50", "command": {"argv": ["x"]}})
    with pytest.raises(ValueError, match=r"command\.argv: model command needs"):
        Case.from_dict({"model": "command"})
    with pytest.raises(ValueError, match="compile: an option of the built-in workloads"):
        Case.from_dict({"model": "command", "compile": True, "command": {"argv": ["x"]}})


def test_per_node_launches_one_process_a_node():
    case = Case.from_dict({"model": "command", "num_nodes": 2, "gpus_per_node": 4,
                           "command": {"argv": ["x"], "launch": "per_node"}})
    assert case.command.launch is CommandLaunch.PER_NODE
    assert (case.ranks_per_node, case.launched_ranks, case.world_size) == (1, 2, 8)
    per_rank = Case.from_dict({"model": "command", "num_nodes": 2, "gpus_per_node": 4,
                               "command": {"argv": ["x"]}})
    assert (per_rank.ranks_per_node, per_rank.launched_ranks) == (4, 8)


def test_built_in_cases_keep_their_hash():
    # the command block at its default is not hashed: results of earlier cases still match
    assert Case().config_hash() == Case.from_dict({"command": {}}).config_hash()


def test_interpreter_is_a_python_or_a_venv_folder(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    case = load_grid(grid(tmp_path, "    argv: [train.py, --seed, '{seed}']\n"
                                    "    interpreter: venv")).cases[0]
    from toolkit.spec.command import program_argv

    assert program_argv(case.command, tmp_path) == (
        str(tmp_path / "venv" / "bin" / "python"), "train.py", "--seed", "{seed}")
    assert case.command.files[0].endswith("  train.py")


def _own(**command: object) -> Case:
    return Case.from_dict({"model": "command", "gpus_per_node": 2, "command": {
        "argv": ["python3", "train.py"], "name": "mine",
        "pattern": r"(?P<samples_per_s>\d+)", **command}})


def test_new_command_options_unset_keep_the_hash_a_stated_rate_changes_it():
    # recorded from the code before `rate` and `stop_after_window` existed
    assert (_own().config_hash(), _own().command_digest()) == ("08e91f55857e", "76504ca5")
    assert _own(stop_after_window=True).config_hash() == "08e91f55857e"  # not what is measured
    assert _own(rate="rank").config_hash() != "08e91f55857e"
    assert _own(rate="job").config_hash() != _own(rate="rank").config_hash()


def test_rate_scope_is_job_or_rank():
    assert _own(rate="rank").command.rate is RateScope.RANK
    with pytest.raises(ValueError, match=r"command\.rate: expected one of job, rank"):
        _own(rate="process")


def test_stop_after_window_takes_steps_from_a_log_file_followed_while_the_program_runs():
    assert _own(stop_after_window=True, log_file="{run_dir}/dll.json").command.stop_after_window


def test_an_output_file_named_in_argv_is_not_part_of_the_case(tmp_path, capsys):
    """A program that writes `metrics.json` under its working directory: the file exists at
    the second submit of the same grid, which must not refuse with "different cases under the
    same ids". Only the program's file and the inputs the user declares are hashed."""
    from toolkit import submit

    path = grid(tmp_path, '    argv: [python3, train.py, --out, metrics.json, --log, out.log]')
    args = ["--grid", str(path), "--results", str(tmp_path / "results"), "--executor",
            "local", "--dry-run"]
    assert submit.main(args) == 0
    (tmp_path / "metrics.json").write_text('{"loss": 1.0}')  # what the run wrote
    (tmp_path / "out.log").write_text("step 1\n")
    capsys.readouterr()
    assert submit.main(args) == 0, capsys.readouterr().err
    [entry] = load_grid(path).cases[0].command.files
    assert entry.endswith("  train.py")


def test_declared_inputs_are_hashed_and_a_missing_one_is_an_error(tmp_path):
    (tmp_path / "model.yaml").write_text("layers: 2\n")
    path = grid(tmp_path, ARGV + "\n    inputs: [model.yaml]")
    first = load_grid(path).cases[0]
    assert sorted(e.split("  ")[1] for e in first.command.files) == ["model.yaml", "train.py"]
    (tmp_path / "model.yaml").write_text("layers: 4\n")
    assert load_grid(path).cases[0].config_hash() != first.config_hash()
    (tmp_path / "model.yaml").unlink()
    assert "command.inputs[0]: 'model.yaml': no file under the working directory" in error(path)


@pytest.mark.parametrize(("argv", "program"), [
    ("[python3, train.py, out.json]", "train.py"), ("['{python}', train.py]", "train.py"),
    ("[bash, run.sh, train.py]", "run.sh"), ("[./train.py, data.bin]", "./train.py"),
    ("[torchrun, --nproc-per-node, '2', train.py]", "train.py"), ("[ls, train.py]", "ls"),
])
def test_the_program_file_is_the_word_a_runner_runs(argv, program):
    import yaml

    from toolkit.spec.command import CommandOptions, program_file

    assert program_file(CommandOptions(argv=tuple(yaml.safe_load(argv)))) == program


@pytest.mark.parametrize(("argv", "interpreter", "hashed"), [
    ("['{python}', -u, train.py]", None, "train.py"),
    ("[python3, -X, dev, train.py]", None, "train.py"),
    ("[python3, -OO, -Wignore, -X, 'faulthandler', train.py]", None, "train.py"),
    ("['{python}', -m, train]", None, "train.py"),
    ("[-m, pkg.train]", "venv", "pkg/train.py"),
    ("['{python}', -u, train.py]", "venv", "train.py"),
    ("[-m, pkg]", "venv", "pkg/__main__.py"),
    ("[torchrun, --nproc_per_node=8, train.py]", None, "train.py"),
    ("[torchrun, --standalone, --nnodes, '1', train.py, --lr, '3']", None, "train.py"),
    ("[python3, -m, torch.distributed.run, --nproc_per_node=2, train.py]", None, "train.py"),
    ("[torchrun, -m, pkg.train]", None, "pkg/train.py"),
    ("[/usr/bin/env, python3, train.py]", None, "train.py"),
    ("[env, -u, HOME, OMP_NUM_THREADS=1, python3, train.py]", None, "train.py"),
    ("[mpirun, -np, '1', python, train.py]", None, "train.py"),
    ("[mpirun, --oversubscribe, -x, FOO, python3, -u, train.py]", None, "train.py"),
])
def test_an_edit_to_a_program_past_options_and_launchers_is_a_new_case(
        tmp_path, argv, interpreter, hashed):
    """The program's file is found past the interpreter's and the launchers' options (with
    `-m`, the module's file): an edit to it is another case, never an old result served."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "torchrun").write_text("#!/bin/sh\n")  # where PATH has none
    (tmp_path / "torchrun").chmod(0o755)
    (tmp_path / "pkg" / "__main__.py").write_text("print('pkg')\n")
    (tmp_path / "pkg" / "train.py").write_text("print('pkg.train')\n")
    extra = f"\n    interpreter: {interpreter}" if interpreter else ""
    path = grid(tmp_path, f"    argv: {argv}{extra}")
    first = load_grid(path)
    assert [e.split("  ")[1] for e in first.cases[0].command.files] == [hashed]
    target = tmp_path / hashed
    target.write_text(target.read_text() + "# edited\n")
    assert load_grid(path).cases[0].config_hash() != first.cases[0].config_hash()


def test_a_program_whose_file_is_not_found_is_said_at_load_pointing_to_inputs(tmp_path):
    (tmp_path / "helper.sh").write_text("exit 0\n")
    loaded = load_grid(grid(tmp_path, "    argv: [python3, -m, installed_trainer]"))
    [warning] = loaded.warnings
    assert "installed_trainer" in warning and "command.inputs" in warning
    listed = load_grid(grid(tmp_path, "    argv: [python3, -m, installed_trainer]\n"
                                      "    inputs: [helper.sh]"))
    assert listed.warnings == ()
    assert load_grid(grid(tmp_path, "    argv: [python3, -c, 'print(1)']")).warnings == ()


def test_modules_beside_the_program_that_inputs_do_not_list_are_said_at_load(tmp_path, capsys):
    (tmp_path / "model.py").write_text("LAYERS = 2\n")
    (tmp_path / "data.py").write_text("\n")
    path = grid(tmp_path, ARGV)
    [warning] = load_grid(path).warnings
    assert warning.startswith("command.inputs: data.py, model.py beside train.py")
    from toolkit import submit

    assert submit.main(["--grid", str(path), "--results", str(tmp_path / "r"), "--executor",
                        "local", "--dry-run"]) == 0
    assert "warning: command.inputs: data.py, model.py" in capsys.readouterr().err
    path = grid(tmp_path, ARGV + "\n    inputs: [model.py, data.py]")
    assert load_grid(path).warnings == ()


def test_more_steps_than_the_window_is_a_placeholder(tmp_path):
    from toolkit.spec.command import fill_argv

    case = load_grid(grid(tmp_path, '    argv: [python3, train.py, "{total_iterations+20}"]')
                     ).cases[0]
    assert fill_argv(case.command.argv, {"total_iterations": 6}) == ["python3", "train.py", "26"]
    msg = error(grid(tmp_path, '    argv: [python3, train.py, "{total_iterations+x}"]'))
    assert "unknown placeholder {total_iterations+x}" in msg
    assert "{total_iterations+N} (N steps more than the window)" in msg


def _venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")


def test_interpreter_with_python_as_argv0_is_refused_in_plain_words(tmp_path):
    _venv(tmp_path)
    msg = error(grid(tmp_path, "    argv: [python3, train.py]\n    interpreter: venv"))
    assert "command.argv[0]" in msg and "would run venv python3 ..." in msg
    assert "argv starts with the script ([train.py, ...])" in msg


def test_interpreter_named_by_python_placeholder_is_not_put_in_front_twice(tmp_path):
    from toolkit.spec.command import program_argv
    from toolkit.workloads.command import planned_command_line

    _venv(tmp_path)
    case = load_grid(grid(tmp_path, "    argv: ['{python}', train.py, --bs, "
                                    "'{batch_size_per_device}', --rank, '{rank}']\n"
                                    "    interpreter: venv")).cases[0]
    assert program_argv(case.command, tmp_path) == case.command.argv
    assert case.command.files[0].endswith("  train.py")  # the script is still hashed
    python = tmp_path / "venv" / "bin" / "python"
    assert planned_command_line(case, "c") == f"{python} train.py --bs 32 --rank '{{rank}}'"


def test_pythonpath_in_env_is_refused_naming_the_interpreter(tmp_path):
    msg = error(grid(tmp_path, ARGV, extra="  env: {PYTHONPATH: src}"))
    assert "env.PYTHONPATH" in msg and "command.interpreter" in msg
