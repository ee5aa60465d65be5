"""Every command the documentation names runs: the README, the pages under docs/, the comments
of the grids and site profiles (jobs/, examples/, sites/) and the `--help` texts of the
commands themselves. Each named `python -m toolkit...`/`python -m topology...`, `trainbench ...`
and `make ...` is run with `--help` (`make -n` for a target), as a process, the way a reader
would type it; a `--help` text that names a command adds it to the list.

And `python -m` of a toolkit module that is not a command fails loudly instead of exiting 0
having done nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from toolkit import is_command, module_run_by_python_m
from toolkit.cli import VERBS

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

Command = tuple[str, ...]
"""What a reader would type, as words: ("python", "-m", "toolkit.collect"), ("trainbench",
"store", "upgrade"), ("make", "quickstart")."""

PYTHON_M = re.compile(r"\bpython3? -m ((?:toolkit|topology)(?:\.\w+)*)((?:[ \t]+[^\s`]+)*)")
# `from trainbench import report` is Python (the report API), not a command
TRAINBENCH = re.compile(r"(?<![\w/.$-])(?<!from )(?<!import )(trainbench(?:-[a-z][a-z-]*)?)"
                        r"((?:[ \t]+[^\s`]+)*)")
MAKE = re.compile(r"^make((?:[ \t]+[^\s`]+)+)")
BARE = re.compile(r"[a-z][a-z0-9_-]*")
SEPARATORS = re.compile(r"&&|\|\||;|\|| \\$|#")


def documents() -> list[Path]:
    """The README, the docs site's pages, and the grids' and site profiles' files."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("jobs", "examples", "sites"):
        found += sorted(p for p in (ROOT / folder).rglob("*")
                        if p.suffix in (".yaml", ".yml", ".md"))
    return found


def code_fragments(text: str, *, markdown: bool) -> Iterator[str]:
    """The text a reader would copy as a command: backtick spans, fenced and indented code
    lines, and for a grid file (`markdown=False`) every comment line whole."""
    fenced = False
    for line in text.splitlines():
        if markdown and line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not markdown:
            comment = line.partition("#")[2] if line.lstrip().startswith("#") else ""
            if comment:
                yield comment.strip()
            yield from re.findall(r"`([^`]+)`", comment)
            continue
        if fenced or line.startswith("    "):
            yield line.strip()
        else:
            yield from re.findall(r"`([^`]+)`", line)


def _words(tail: str) -> tuple[str, ...]:
    """The subcommand words after a command: leading bare lowercase words, up to the first
    option, path, placeholder or punctuation (a word followed by `)` or `,` is the last)."""
    words: list[str] = []
    for token in tail.split():
        stripped = token.rstrip("),.;:'\"")
        if not BARE.fullmatch(stripped):
            break
        words.append(stripped)
        if stripped != token:
            break
    return tuple(words)


def commands_in(fragment: str, *, code: bool = True) -> Iterator[Command]:
    """The commands a fragment names; `code=False` (prose, such as a help text's option lines)
    takes only `python -m ...`, since `trainbench` and `make` are also plain words there."""
    for piece in SEPARATORS.split(fragment):
        for m in PYTHON_M.finditer(piece):
            yield ("python", "-m", m.group(1).rstrip("."), *_words(m.group(2)))
        if not code:
            continue
        for m in TRAINBENCH.finditer(piece):
            yield (m.group(1), *_words(m.group(2)))
        m = MAKE.match(piece.strip())
        if m:
            yield ("make", *_words(m.group(1))[:1])


def named_in_documents() -> dict[Command, set[str]]:
    """Command -> the files that name it."""
    named: dict[Command, set[str]] = {}
    for path in documents():
        text = path.read_text(encoding="utf-8")
        for fragment in code_fragments(text, markdown=path.suffix == ".md"):
            for command in commands_in(fragment):
                named.setdefault(command, set()).add(str(path.relative_to(ROOT)))
    return named


def argv_of(command: Command) -> list[str]:
    """How the test runs a named command: with `--help`, or `make -n TARGET`."""
    if command[0] == "python":
        return [sys.executable, *command[1:], "--help"]
    if command[0] == "make":
        return ["make", "-n", *command[1:]]
    return [str(BIN / command[0]), *command[1:], "--help"]


def run(command: Command) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv_of(command), cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT),
                                            "COLUMNS": "100"})


def help_fragments(text: str) -> Iterable[tuple[str, bool]]:
    """(fragment, is code) of a --help text: backtick spans and indented example lines are
    code; every line is searched for `python -m ...`."""
    for line in text.splitlines():
        yield line, False
        yield from ((span, True) for span in re.findall(r"`([^`]+)`", line))
        if line.startswith("    ") and not line.lstrip().startswith("-"):
            yield line.strip(), True


def check_all() -> tuple[dict[Command, set[str]], list[str]]:
    """Run every named command, and every command their --help texts name; (what was run and
    where it was named, the failures)."""
    named = named_in_documents()
    for verb in VERBS:
        named.setdefault(("trainbench", verb), set()).add("toolkit/cli.py VERBS")
    done: set[Command] = set()
    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        while todo := sorted(set(named) - done):
            for command, result in zip(todo, pool.map(run, todo), strict=True):
                done.add(command)
                where = ", ".join(sorted(named[command]))
                if result.returncode != 0:
                    failures.append(f"{' '.join(argv_of(command)[-len(command) - 1:])} "
                                    f"(named in {where}): exit {result.returncode}: "
                                    f"{(result.stderr or result.stdout).strip()[:300]}")
                    continue
                if command[0] == "make":
                    continue
                for fragment, code in help_fragments(result.stdout):
                    for found in commands_in(fragment, code=code):
                        named.setdefault(found, set()).add(
                            f"the --help of {' '.join(command)}")
    return named, failures


@pytest.fixture(scope="module")
def checked() -> tuple[dict[Command, set[str]], list[str]]:
    return check_all()


def test_every_named_command_runs(checked: tuple[dict[Command, set[str]], list[str]]) -> None:
    _, failures = checked
    assert not failures, "commands named in the documentation that do not run:\n" + "\n".join(
        failures)


def test_the_documents_and_help_texts_are_all_read(
        checked: tuple[dict[Command, set[str]], list[str]]) -> None:
    """The search finds what it must: the quickstart's commands, the grids' comments, a
    subcommand, the make targets and a command only a --help text names."""
    named, _ = checked
    expected = {
        ("make", "quickstart"): "README.md",
        ("make", "test"): "README.md",
        ("python", "-m", "toolkit.submit"): "examples/quickstart.yaml",
        ("python", "-m", "toolkit.collect"): "examples/gpt_cpu.yaml",
        ("python", "-m", "toolkit.gpt_table"): "jobs/gpt.yaml",
        ("python", "-m", "toolkit.localslurm", "up"): "sites/local.yaml",
        ("python", "-m", "toolkit.archive"): "the --help of trainbench collect",
    }
    for command, where in expected.items():
        assert where in named.get(command, set()), (command, named.get(command))
    assert len(named) > 30


@pytest.mark.parametrize(("fragment", "commands"), [
    ("python -m toolkit.collect results/gpt_cpu && python -m toolkit.report.gpt results/x",
     [("python", "-m", "toolkit.collect"), ("python", "-m", "toolkit.report.gpt")]),
    ("python -m toolkit.preflight verdict results/preflight/<tag>   # judge one again",
     [("python", "-m", "toolkit.preflight", "verdict")]),
    ("(python -m toolkit.localslurm up) and podman.",
     [("python", "-m", "toolkit.localslurm", "up")]),
    ("trainbench store upgrade", [("trainbench", "store", "upgrade")]),
    ("trainbench VERB --help", [("trainbench",)]),
    ("from trainbench import report", []),
    ("make oneflow-env      # .venv-oneflow", [("make", "oneflow-env")]),
    ("mpirun -np 2 python -m toolkit.worker ...", [("python", "-m", "toolkit.worker")]),
])
def test_a_fragment_names_its_commands(fragment: str, commands: list[Command]) -> None:
    assert list(commands_in(fragment)) == commands


def test_a_grid_comment_and_a_markdown_code_span_are_fragments() -> None:
    grid = "# run it:\n#   python -m toolkit.submit --grid g.yaml\nname: g  # `make x`\n"
    assert list(code_fragments(grid, markdown=False)) == [
        "run it:", "python -m toolkit.submit --grid g.yaml"]
    page = "Run `make quickstart` to start.\n\n    trainbench collect results/q\n"
    assert list(code_fragments(page, markdown=True)) == [
        "make quickstart", "trainbench collect results/q"]


def test_python_m_of_a_module_that_is_not_a_command_fails_naming_the_commands() -> None:
    done = subprocess.run([sys.executable, "-m", "toolkit.report.gpt", "results/gpt"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert "toolkit.report.gpt is not a command" in done.stderr
    assert "python -m toolkit.gpt_table\n" in done.stderr and "trainbench --help" in done.stderr
    assert done.stdout == ""


def _python_m(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "dev", "-m", module, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize(("module", "commands"), [
    ("topology.cli", ["python -m topology`"]),
    ("topology.plan", ["python -m topology`"]),
    ("parsers", ["python -m toolkit.collect ", "python -m toolkit.preflight import "]),
    ("parsers.nccl_tests", ["python -m toolkit.collect ", "python -m toolkit.preflight import "]),
    ("parsers.logtext", ["python -m toolkit.collect ", "python -m toolkit.preflight import "]),
])
def test_python_m_of_a_reader_module_fails_naming_the_commands(module: str,
                                                               commands: list[str]) -> None:
    """topology/ and parsers/ import nothing from toolkit: each keeps the rule itself."""
    done = _python_m(module, "--help")
    assert done.returncode == 2, done.stderr
    assert f"{module} is not a command; `python -m {module}` runs nothing" in done.stderr
    assert all(c in done.stderr for c in commands), done.stderr
    assert done.stdout == ""


def test_the_topology_command_still_runs_and_unknown_readers_get_pythons_error() -> None:
    assert _python_m("topology", "--help").returncode == 0
    for module in ("topology.nosuch", "parsers.nosuch"):
        done = _python_m(module)
        assert done.returncode == 1 and f"No module named {module}" in done.stderr


@pytest.mark.parametrize(("module", "command"), [
    ("toolkit.submit", True), ("toolkit.worker", True), ("toolkit.localslurm", True),
    ("toolkit.workloads.pytorch.gpt_check", True), ("toolkit.report.gpt", False),
    ("toolkit.report", False), ("toolkit", False), ("toolkit.nosuch", False),
    ("topology", False), ("pytest", False),
])
def test_which_modules_are_commands(module: str, command: bool) -> None:
    assert is_command(module) is command


@pytest.mark.parametrize(("argv", "module"), [
    (["python", "-m", "toolkit.submit", "--grid", "g.yaml"], "toolkit.submit"),
    (["python3", "-X", "dev", "-u", "-mtoolkit.collect"], "toolkit.collect"),
    (["python", "script.py", "-m", "toolkit.x"], None),
    (["python", "-c", "import toolkit", "-m"], None),
    (["python"], None),
])
def test_the_module_python_m_runs_is_read_from_the_command_line(argv: list[str],
                                                               module: str | None) -> None:
    assert module_run_by_python_m(argv) == module
