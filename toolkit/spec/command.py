"""A user's own training program as a case (`model: command`): its options block
(`CommandOptions`), the placeholders its arguments may use, and what is checked when a grid is
loaded (`resolve_command`: the program exists, the placeholders are known, a pattern compiles,
the program's file and the inputs the user declares are hashed).

The argument list is a list of words and is never given to a shell: a placeholder's value stays
one word, whatever characters it holds. Filling the placeholders happens on each rank
(`fill_argv`), where the rank, the run directory and the rendezvous are known.

What lives elsewhere: starting the program and reading what it prints
(`toolkit.workloads.command`), log families (`parsers`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import shutil
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.spec.convert import CaseError
from toolkit.spec.vocab import CommandLaunch, RateScope

#: Placeholders an argument may use, and what each is filled with.
PLACEHOLDERS: dict[str, str] = {
    "batch_size_per_device": "the case's samples per rank per step",
    "global_batch_size": "samples per step over all data-parallel ranks",
    "precision": "fp32, tf32, amp_bf16 or amp_fp16",
    "warmup_iterations": "iterations before the measured window",
    "measured_iterations": "iterations in the measured window",
    "total_iterations": "warmup_iterations + measured_iterations",
    "seed": "the case's seed",
    "num_nodes": "nodes of the run",
    "gpus_per_node": "ranks (GPUs) per node",
    "world_size": "ranks of the run (num_nodes x gpus_per_node)",
    "rank": "this process's global rank (per_node: the node's index)",
    "local_rank": "this process's rank on its node (per_node: 0)",
    "node_rank": "the index of this process's node",
    "master_addr": "the rendezvous host (rank 0's)",
    "master_port": "the rendezvous port",
    "run_dir": "the run directory r<k>/ (absolute)",
    "repeat": "the repeat index k",
    "case_id": "the case's id",
    "workdir": "the working directory the program starts in",
    "python": "the interpreter (command.interpreter, else the toolkit's own Python)",
}

#: `{total_iterations+N}`: N steps more than the window, for a program that does not log its
#: last steps (the window stays where the case puts it).
MORE_STEPS = re.compile(r"total_iterations\+([1-9][0-9]{0,8})")

#: Options that leave the config hash and the program's digest as they were while unset (a
#: case from before they existed keeps its hash); `stop_after_window` changes how long the
#: program runs, not what is measured, and is never hashed.
HASHED_WHEN_SET = ("rate", "inputs")
NEVER_HASHED = ("workdir", "stop_after_window")

STOP_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL when trainbench ends a program's process group."""
EXIT_GRACE_S = 2.0
"""Seconds the output of a program that has exited may stay open (a background child holding
it) before the program's process group is ended."""

MAX_HASHED_FILE_BYTES = 64 * 2**20
"""Files an argument names are hashed up to this size; a larger one is named, not read."""


@dataclass(frozen=True)
class CommandOptions:
    """The program a `model: command` case runs on every rank (or once per node)."""

    argv: tuple[str, ...] = ()
    """The program and its arguments, a list of words (never a shell string); placeholders
    such as `{batch_size_per_device}` are filled per rank (`{{` and `}}` are literal braces)."""
    name: str | None = None
    """What the program trains, for case ids and reports (`my_resnet`); default `command`."""
    workdir: str | None = None
    """Where the program starts; relative to the grid file; default the grid file's folder."""
    interpreter: str | None = None
    """A Python (or a virtual environment's folder) that runs the program: put in front of
    argv (argv then starts with the script), or named by argv[0] `{python}`; default none:
    argv[0] is the program. The way to give a program its own packages (`PYTHONPATH` is the
    job scripts' own)."""
    launch: CommandLaunch = CommandLaunch.PER_RANK
    """`per_rank`: one process per GPU with torchrun's environment; `per_node`: one per node,
    for programs that start their own workers (a script that calls torchrun itself)."""
    log_format: str = "auto"
    """The log family the program prints (`dllogger`, `megatron`, `pytorch_imagenet`, ...) or
    `auto` (detected from its output). Not used with `pattern`."""
    log_file: str | None = None
    """A file the program writes its log to (placeholders allowed, `{run_dir}/dll.json`),
    followed while it runs and read whole when it exits, instead of its output; default: its
    output."""
    pattern: str | None = None
    """A regular expression (RE2 syntax: linear time) for the lines that report a step, with
    a named group `samples_per_s`, `step_time_s` or `step_time_ms`, and optionally
    `iteration` and `loss`."""
    rate: RateScope | None = None
    """Whose samples a rate the program prints counts: `job` (all data-parallel ranks') or
    `rank` (its own process's, multiplied by the data-parallel ranks). Unset: `job`, and a
    figure timed by printed rates over several ranks says the scope was not stated."""
    stop_after_window: bool = False
    """End the program once it has printed the last step of the measured window (SIGTERM to
    its process group, SIGKILL after `STOP_GRACE_S`), for programs without a step limit; the
    run is judged on what it printed. Its steps are read as it writes them: from its output,
    its `trainbench.report` records or its `log_file`."""
    inputs: tuple[str, ...] = ()
    """Files the program reads whose content makes it another case (a model config, a data
    manifest), relative to the working directory; hashed with the program's own file. Other
    files argv names (outputs, logs the program writes) are not part of the case."""
    files: tuple[str, ...] = ()
    """Set when the grid is loaded, never by hand: `<sha256>  <path>` (as sha256sum prints
    it) of the program's file under the working directory (`program_file`) and of each of
    `inputs`, so that a changed script is a different case."""

    def __post_init__(self) -> None:
        for i, word in enumerate(self.argv):
            problem = placeholder_problem(word)
            if problem:
                raise CaseError(f"argv[{i}]", problem)
        if self.pattern is not None:
            problem = pattern_problem(self.pattern)
            if problem:
                raise CaseError("pattern", problem)
        if self.log_file is not None:
            problem = placeholder_problem(self.log_file)
            if problem:
                raise CaseError("log_file", problem)
        if self.interpreter is not None and self.argv and _PYTHON_NAME.fullmatch(
                os.path.basename(self.argv[0])):
            raise CaseError("argv[0]", f"{self.argv[0]!r} with `interpreter` set would run "
                            f"{self.interpreter} {self.argv[0]} ...: the interpreter is put in "
                            f"front of argv, so argv starts with the script ([train.py, ...]) "
                            f"or with '{{python}}', which names the interpreter")
        if self.name is not None and not self.name.replace("_", "").replace(".", "") \
                .replace("-", "").isalnum():
            raise CaseError("name", f"{self.name!r}: letters, digits, '_', '.' and '-' only")

    def label(self) -> str:
        return self.name or "command"


def hashed_options(plain: dict[str, object]) -> dict[str, object]:
    """A command block's plain form as it is hashed: without the options never hashed, and
    without those hashed only when set while they are unset."""
    out = {k: v for k, v in plain.items() if k not in NEVER_HASHED}
    for key in HASHED_WHEN_SET:
        if out.get(key) in (None, (), []):
            out.pop(key, None)
    return out


def placeholder_problem(word: str) -> str | None:
    """Why `word` is not a valid argument template, or None: an unknown placeholder (named),
    a field with an attribute, index, conversion or format, or unbalanced braces."""
    try:
        parts = list(string.Formatter().parse(word))
    except ValueError as err:
        return f"{word!r}: {err} (write {{{{ and }}}} for literal braces)"
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in PLACEHOLDERS and not MORE_STEPS.fullmatch(field):
            return (f"unknown placeholder {{{field}}} in {word!r}; known: "
                    + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                    + ", and {total_iterations+N} (N steps more than the window)")
        if spec or conversion:
            return f"{{{field}}} in {word!r}: placeholders take no format or conversion"
    return None


PATTERN_FIGURES = ("samples_per_s", "step_time_s", "step_time_ms")
PATTERN_GROUPS = (*PATTERN_FIGURES, "iteration", "loss")


def compile_pattern(pattern: str) -> object:
    """The RE2 object of a user's pattern (linear-time matching: a pattern cannot make the
    reading of a log take exponential time). Raises `re2.error` for one RE2 cannot compile."""
    import re2  # google-re2

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, with the grid's key
    return re2.compile(pattern, options)


def pattern_problem(pattern: str) -> str | None:
    """Why a user's pattern cannot be used, or None."""
    import re2

    try:
        compiled = compile_pattern(pattern)
    except re2.error as err:
        why = err.args[0] if err.args else err
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        return f"{pattern!r} does not compile (RE2 syntax): {why}"
    groups = set(getattr(compiled, "groupindex", {}))
    figures = [g for g in PATTERN_FIGURES if g in groups]
    if len(figures) != 1:
        return (f"{pattern!r}: expected exactly one named group for the figure, one of "
                + ", ".join(f"(?P<{g}>...)" for g in PATTERN_FIGURES)
                + (f"; it has {', '.join(figures)}" if figures else "; it has none"))
    unknown = sorted(groups - set(PATTERN_GROUPS))
    if unknown:
        return (f"{pattern!r}: unknown named group(s) {', '.join(unknown)}; valid: "
                + ", ".join(PATTERN_GROUPS))
    return None


def fill_argv(words: tuple[str, ...], values: Mapping[str, object],
              keep_unknown: bool = False) -> list[str]:
    """Each word with its placeholders filled; every word stays one argument. With
    `keep_unknown`, a placeholder without a value stays as it is written (`{rank}`)."""
    filled = _Values({k: str(v) for k, v in values.items()}, keep_unknown)
    return [word.format_map(filled) for word in words]


class _Values(dict[str, str]):
    """Placeholder values, and `{total_iterations+N}` computed from `total_iterations`."""

    def __init__(self, values: dict[str, str], keep_unknown: bool) -> None:
        super().__init__(values)
        self.keep_unknown = keep_unknown

    def __missing__(self, key: str) -> str:
        more = MORE_STEPS.fullmatch(key)
        if more is not None and "total_iterations" in self:
            return str(int(self["total_iterations"]) + int(more.group(1)))
        if self.keep_unknown:
            return "{" + key + "}"
        raise KeyError(key)


def interpreter_path(interpreter: str, workdir: str | Path) -> str:
    """A Python executable, or a virtual environment's folder -> its bin/python; a relative
    path is relative to the working directory. A bare name (`python3`) stays a name."""
    path = Path(interpreter)
    if not path.is_absolute() and (os.sep in interpreter or (Path(workdir) / path).exists()):
        path = Path(workdir) / path
    if path.is_dir():
        return str(path / "bin" / "python")
    return str(path) if path.is_absolute() else interpreter


def program_argv(options: CommandOptions, workdir: str | Path) -> tuple[str, ...]:
    """argv with the interpreter in front when one is set, unless argv already starts with
    `{python}` (which names the interpreter)."""
    if options.interpreter is not None and options.argv[:1] != ("{python}",):
        return (interpreter_path(options.interpreter, workdir), *options.argv)
    return options.argv


def resolve_command(options: CommandOptions, base_dir: Path) -> CommandOptions:
    """Checked against this machine when a grid is loaded: the working directory (absolute,
    relative to `base_dir`), the program (a file or on PATH), and the hashes of the files
    argv names under the working directory. Raises CaseError naming the key."""
    if not options.argv:
        raise CaseError("command.argv", "expected the program and its arguments as a list, "
                        "e.g. [python, train.py, --batch-size, '{batch_size_per_device}']")
    workdir = (base_dir / (options.workdir or ".")).absolute()
    if not workdir.is_dir():
        raise CaseError("command.workdir", f"{workdir} is not a directory")
    workdir = Path(os.path.normpath(workdir))
    if options.interpreter is not None:
        found = interpreter_path(options.interpreter, workdir)
        python = Path(found) if os.sep in found else Path(shutil.which(found) or found)
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise CaseError("command.interpreter", f"{python}: no executable Python there")
    else:
        program = options.argv[0]
        if "{" not in program and not _findable(program, workdir):
            raise CaseError("command.argv[0]", f"program {program!r} not found (neither a file "
                            f"under {workdir} nor a command on PATH)")
    files = []
    script = program_word(options, workdir)
    named: list[tuple[str, str]] = [("command.argv", script)] if script is not None else []
    named += [(f"command.inputs[{i}]", w) for i, w in enumerate(options.inputs)]
    for key, word in named:
        path = Path(word) if Path(word).is_absolute() else workdir / word
        try:
            inside = path.resolve().is_relative_to(workdir.resolve())
            if not (inside and path.is_file()):
                if key == "command.argv":
                    continue  # a program on PATH, or outside the working directory
                raise CaseError(key, f"{word!r}: no file under the working directory {workdir}")
            size = path.stat().st_size
            digest = (file_sha256(path) if size <= MAX_HASHED_FILE_BYTES
                      else f"size:{size}")
        except OSError as err:
            if key == "command.argv":
                continue
            raise CaseError(key, f"{word!r}: cannot read: {err.strerror or err}") from None
        files.append(f"{digest}  {os.path.relpath(path, workdir)}")
    return dataclasses.replace(options, workdir=str(workdir), files=tuple(sorted(set(files))))


#: Interpreters whose first word that is no option is the file they run.
_PYTHON = re.compile(r"(?:python|pypy)[\d.]*|\{python\}")
#: A Python interpreter's name, as argv[0] (not the `{python}` placeholder).
_PYTHON_NAME = re.compile(r"(?:python|pypy)[\d.]*")
_SHELL = re.compile(r"(?:ba|da|z|k)?sh")
#: Launchers that start the command after their options (`torchrun` runs a script: `_PYTHON`).
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "srun", "nohup", "numactl",
                        "taskset", "nice", "ionice", "stdbuf", "time", "chrt"})
_TORCHRUN = frozenset({"torchrun", "torch.distributed.run", "torch.distributed.launch"})
#: Python's options that take the next word as their value (`-X dev`, `-W ignore`).
_PYTHON_VALUE_OPTIONS = frozenset("XW")
#: Launchers' options that take no value; any other option without `=` takes the next word,
#: unless that word is itself an option or a program (`mpirun --oversubscribe python x.py`).
_FLAGS = frozenset({"--standalone", "--no-python", "--no_python", "--run-path", "--run_path",
                    "--oversubscribe", "--allow-run-as-root", "--tag-output", "-v",
                    "--verbose", "--report-bindings", "--display-map", "-q", "--quiet",
                    "-l", "--label", "-u", "--unbuffered", "--exclusive", "-p"})


@dataclasses.dataclass(frozen=True)
class ProgramTarget:
    """What argv runs as the program: a file (`train.py`, as written) or a Python module
    (`pkg.train` of `-m pkg.train`), found past the interpreter's and the launchers' options;
    `code` when the program is text in argv itself (`python -c ...`), hashed with argv."""

    kind: str
    """`file`, `module` or `code`."""
    word: str


def program_target(options: CommandOptions) -> ProgramTarget | None:
    """The program argv runs (`ProgramTarget`), or None where no word names it (a placeholder,
    an option no rule here reads)."""
    argv = list(options.argv)
    if options.interpreter is not None:
        # argv follows the interpreter; `{python}` first names that interpreter again
        return _python_target(argv[1:] if argv[:1] == ["{python}"] else argv)
    return _target(argv)


def _target(argv: list[str]) -> ProgramTarget | None:
    if not argv:
        return None
    word, rest = argv[0], argv[1:]
    if "{" in word and not _PYTHON.fullmatch(word):
        return None
    name = os.path.basename(word)
    if _PYTHON.fullmatch(name):
        return _python_target(rest)
    if name == "env":
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            skip = 2 if rest[0] in ("-u", "--unset", "-C", "--chdir") else 1
            rest = rest[skip:]
        return _target(rest)
    if _SHELL.fullmatch(name):
        while rest and rest[0].startswith("-"):
            if rest[0] == "-c":
                return ProgramTarget("code", " ".join(rest[1:2]))
            rest = rest[1:]
        return _target_file(rest)
    if name in _TORCHRUN:
        return _launched(rest, torchrun=True)
    if name in _LAUNCHERS:
        return _launched(rest, torchrun=False)
    return ProgramTarget("file", word)


def _target_file(argv: list[str]) -> ProgramTarget | None:
    if not argv or "{" in argv[0] or argv[0].startswith("-"):
        return None
    return ProgramTarget("file", argv[0])


def _python_target(argv: list[str]) -> ProgramTarget | None:
    """Past Python's own options (`-u`, `-X dev`, `-OO`, `-W ignore`): the script, the module
    of `-m`, or the code of `-c`."""
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        opt, rest = rest[0], rest[1:]
        if opt == "--":
            break
        if opt.startswith("--"):  # --check-hash-based-pycs takes a value; others none
            if opt == "--check-hash-based-pycs" and rest:
                rest = rest[1:]
            continue
        for i, letter in enumerate(opt[1:], start=1):
            if letter in "mc":
                value = opt[i + 1:] or (rest[0] if rest else "")
                if not value or "{" in value:
                    return None
                if letter == "m" and value in _TORCHRUN:
                    return _launched(rest[0 if opt[i + 1:] else 1:], torchrun=True)
                return ProgramTarget("module" if letter == "m" else "code", value)
            if letter in _PYTHON_VALUE_OPTIONS:
                if not opt[i + 1:]:
                    rest = rest[1:]
                break
    return _target_file(rest)


def _launched(argv: list[str], torchrun: bool) -> ProgramTarget | None:
    """The command a launcher starts after its options (`mpirun -np 1 python x.py`,
    `torchrun --nproc_per_node=8 train.py`, `torchrun -m pkg.train`)."""
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        opt, rest = rest[0], rest[1:]
        if torchrun and opt in ("-m", "--module") and rest:
            return _python_target(["-m", *rest])
        if torchrun and opt in ("--no-python", "--no_python"):
            return _target(rest)
        if "=" in opt or opt in _FLAGS or not rest:
            continue
        following = rest[0]
        if following.startswith("-") or _PYTHON.fullmatch(os.path.basename(following)) or \
                following.endswith((".py", ".sh")):
            continue
        rest = rest[1:]
    if torchrun:
        return _target_file(rest)
    return _target(rest)


def program_word(options: CommandOptions, workdir: Path) -> str | None:
    """The path (as argv writes it, or the module's file relative to `workdir`) of the file
    whose content is the program: what is hashed into the case."""
    target = program_target(options)
    if target is None or target.kind == "code":
        return None
    if target.kind == "module":
        return module_file(target.word, workdir)
    return target.word


def _under(word: str, workdir: Path) -> Path | None:
    path = Path(word) if Path(word).is_absolute() else workdir / word
    try:
        inside = path.resolve().is_relative_to(workdir.resolve())
        return path if inside and path.is_file() else None
    except OSError:
        return None


#: How many names a warning lists before "and N more".
_LISTED = 5


def load_warnings(options: CommandOptions) -> list[str]:
    """What an edit would change unseen, said when the grid is loaded (of a resolved command,
    `resolve_command`): a program whose file is not found under the working directory (so an
    edit to it serves the old results), and `.py` files beside the program that
    `command.inputs` does not list (modules it may import, not hashed)."""
    workdir = Path(options.workdir or ".")
    target = program_target(options)
    if target is not None and target.kind == "code":
        return []
    word = program_word(options, workdir)
    path = _under(word, workdir) if word is not None else None
    if path is None:
        if options.inputs:
            return []
        what = (f"module {target.word!r}" if target is not None and target.kind == "module"
                else f"{target.word!r}" if target is not None else "no word of argv")
        return [f"command.argv: the program's file is not found under {workdir} ({what}), so "
                "an edit to it would not make a new case and the old results would be served; "
                "list the files it runs in command.inputs"]
    listed = {os.path.normpath(workdir / i) for i in options.inputs}
    beside = sorted(p.name for p in path.parent.glob("*.py")
                    if p.is_file() and p.resolve() != path.resolve()
                    and os.path.normpath(p) not in listed)
    if not beside:
        return []
    more = f" and {len(beside) - _LISTED} more" if len(beside) > _LISTED else ""
    return [f"command.inputs: {', '.join(beside[:_LISTED])}{more} beside {word} "
            "are not listed: only the program's own file and command.inputs are hashed, so "
            "an edit to a module it imports would serve the old results; list those it "
            "imports in command.inputs"]


def program_file(options: CommandOptions) -> str | None:
    """The word of argv that names the program's own file (`program_target`), None for a
    module, code in argv, or no file found."""
    target = program_target(options)
    return target.word if target is not None and target.kind == "file" else None


def module_file(module: str, workdir: Path) -> str | None:
    """Where `python -m module` finds the module under `workdir` (`pkg/train.py`,
    `pkg/train/__main__.py`), relative to it; None when it is not there (installed)."""
    if not all(part.isidentifier() for part in module.split(".")):
        return None
    base = Path(*module.split("."))
    for rel in (base.with_suffix(".py"), base / "__main__.py"):
        if (workdir / rel).is_file():
            return str(rel)
    return None


def word_differences(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[str, str, str]]:
    """Where two argument lists (or any lists) differ, word by word: (position in `a`, the
    words of `a` there, those of `b`), each side's words as `repr`s separated by spaces, or
    `(none)` for words only one side has: `("[5]", "'256'", "'128'")`. Long lists that differ
    in a word or two are shown by those words alone."""
    matcher = difflib.SequenceMatcher(a=list(a), b=list(b), autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        at = f"[{i1}]" if i2 - i1 <= 1 and j2 - j1 <= 1 else f"[{i1}:{i2}]"
        out.append((at, " ".join(map(repr, a[i1:i2])) or "(none)",
                    " ".join(map(repr, b[j1:j2])) or "(none)"))
    return out


def _findable(program: str, workdir: Path) -> bool:
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else workdir / program
        return path.is_file()
    return shutil.which(program) is not None or (workdir / program).is_file()


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a MiB at a time."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
