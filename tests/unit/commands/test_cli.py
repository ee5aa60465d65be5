"""`trainbench VERB`: every verb reaches its command, and every console script of setup.cfg
names a `main` that exists."""

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
    for verb, module in cli.VERBS.items():
        assert targets[f"trainbench-{verb}"] == f"{module}:main"
