"""`trainbench VERB`: every verb reaches its command, says what it does in `trainbench --help`
and names itself `trainbench VERB` in its own help; every console script of setup.cfg names a
`main` that exists."""

from __future__ import annotations

import configparser
import importlib
from pathlib import Path

import pytest

from toolkit import cli

ROOT = Path(__file__).resolve().parents[3]


def test_a_verb_runs_its_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # collect refuses a directory that is not a results directory, naming it
    assert cli.main(["collect", str(tmp_path)]) == 2
    assert "not a results directory" in capsys.readouterr().err


def test_an_unknown_verb_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sbumit"]) == 2
    err = capsys.readouterr().err
    assert all(verb in err for verb in cli.VERBS)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_the_installed_one(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert cli.main([flag]) == 0
    assert capsys.readouterr().out == f"trainbench {version('trainbench')}\n"


def test_every_console_script_names_a_main() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = [line.split("=", 1) for line in
               config["options.entry_points"]["console_scripts"].strip().splitlines()]
    targets = {name.strip(): target.strip() for name, target in scripts}
    assert {f"trainbench-{v}" for v in cli.VERBS} | {"trainbench"} == set(targets)
    for target in targets.values():
        module, _, func = target.partition(":")
        assert callable(getattr(importlib.import_module(module), func))
    for verb, v in cli.VERBS.items():
        assert targets[f"trainbench-{verb}"] == f"{v.module}:main"


def test_help_lists_each_verb_with_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for verb, v in cli.VERBS.items():
        line = next((x for x in lines if x.split()[:1] == [verb]), None)
        assert line is not None, f"{verb} has no line in trainbench --help:\n{out}"
        assert line.split(None, 1)[1] == v.summary and len(v.summary) > 20
        assert len(line) <= 100, line


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_a_verbs_help_names_it_trainbench_verb(verb: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([verb, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trainbench {verb} "), out[:200]
