"""Strict conversion between plain data (JSON/YAML) and frozen dataclasses, for any dataclass of
the spec: an unknown key fails with the closest valid keys (or, where none is close, the list of
valid keys and their defaults), wrong types name the dotted key path, every problem of the data
is reported at once (`CaseErrors`), and `to_plain` gives the form that is hashed and written to
case.json.

`CaseError(key, message)` is the one error of the spec; the grid adds the file name.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar, Union


class CaseError(ValueError):
    """A case that cannot run. `key` is the dotted key path that is wrong; `unknown_key`: the
    key itself is the problem (it names no option), not its value."""

    def __init__(self, key: str, message: str, *, unknown_key: bool = False) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
        self.unknown_key = unknown_key

    def all(self) -> list[CaseError]:
        """Every problem this error reports: itself, or each of a CaseErrors."""
        return [self]


class CaseErrors(CaseError):
    """Several problems found in one piece of data, in the order written; `key` and `message`
    are the first one's."""

    def __init__(self, errors: list[CaseError]) -> None:
        super().__init__(errors[0].key, errors[0].message, unknown_key=errors[0].unknown_key)
        self.errors = errors
        self.args = ("\n".join(f"{e.key}: {e.message}" for e in errors),)

    def all(self) -> list[CaseError]:
        return list(self.errors)


def raise_all(errors: list[CaseError]) -> None:
    """Raise the problems found, if any: one CaseError, or a CaseErrors of several."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise CaseErrors(errors)


# -- plain conversion (strict) ---------------------------------------------------------------
T = TypeVar("T")

ENV_PAIRS = tuple[tuple[str, str], ...]
"""The type of an environment field: (NAME, value) pairs, sorted; a mapping in plain form."""


def describe_keys(cls: type) -> str:
    """`key (default)` for every field: what an unknown-key error lists."""
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default.value if isinstance(f.default, Enum) else f.default
            out.append(f"{f.name} (default {default!r})")
        else:
            out.append(f.name)
    return ", ".join(out)


def did_you_mean(word: object, choices: typing.Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the choice closest to a misspelt `word` (`'x' or 'y'` where
    another is about as close), else ``."""
    close = difflib.get_close_matches(str(word), sorted(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    score = [difflib.SequenceMatcher(None, str(word), c).ratio() for c in close]
    close = [c for c, s in zip(close, score, strict=True) if s >= score[0] - 0.1]
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"


def key_hint(word: object, choices: typing.Iterable[str], valid: str) -> str:
    """What follows `unknown key`: the closest choices (` (did you mean 'x'?)`) where some are
    close, else `; ` and `valid` (the list of valid keys): a long list helps only where no
    key is close to the one written."""
    return did_you_mean(word, choices) or f"; {valid}"


def key_problem(cls: type, dotted: str) -> str | None:
    """Why the dotted key `dotted` names no option of dataclass `cls` (an unknown part, with
    the closest keys or else the valid ones; or a part below a plain value), else None. The
    keys of an environment mapping are names, any of which is valid."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        fields = {f.name for f in dataclasses.fields(cls)}
        here = ".".join(parts[:i + 1])
        if part not in fields:
            under = f" under {'.'.join(parts[:i])}" if i else ""
            return f"unknown key {here!r}" + key_hint(part, fields, f"valid keys{under}: "
                                                                    f"{describe_keys(cls)}")
        tp = _type_hints(cls)[part]
        if typing.get_origin(tp) in (Union, types.UnionType):
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = inner[0] if len(inner) == 1 else tp
        rest = len(parts) - i - 1
        if tp == ENV_PAIRS:
            return None if rest <= 1 else f"{here} holds NAME: value pairs, one level deep"
        if dataclasses.is_dataclass(tp):
            cls = tp  # type: ignore[assignment]
        elif rest:
            return f"{here} is a single value, not a mapping of options"
    return None


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_plain(cls: type[T], data: Any, path: str) -> T:
    """Build dataclass `cls` from plain data, rejecting unknown keys and wrong types.

    Raises CaseError whose key is the dotted path below `path`: a CaseErrors naming every
    unknown key and wrong value where there are several. The cross-field checks of `cls`
    (`__post_init__`) run once every value converts.
    """
    if not isinstance(data, Mapping):
        raise CaseError(path or "<top>", f"expected a mapping, got {_kind(data)}")
    hints = _type_hints(cls)  # type: ignore[arg-type]
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    errors: list[CaseError] = []
    for key, value in data.items():
        sub = f"{path}.{key}" if path else str(key)
        if key not in names:
            errors.append(CaseError(sub, "unknown key" + key_hint(
                key, names, f"valid keys: {describe_keys(cls)}"), unknown_key=True))
            continue
        try:
            kwargs[key] = _convert(hints[key], value, sub)
        except CaseError as err:
            errors += err.all()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs and f.name not in data:
            sub = f"{path}.{f.name}" if path else f.name
            errors.append(CaseError(sub, f"missing; expected {f.name} in every entry"))
    raise_all(errors)
    try:
        return cls(**kwargs)
    except CaseError as err:
        if path:
            raise CaseError(f"{path}.{err.key}", err.message) from None
        raise


_INT_LIMIT = 2**63


def _text_problem(text: str) -> str | None:
    """Strings reach files, argument lists and the environment: no NUL (which none of them can
    hold) and nothing UTF-8 cannot write (a lone surrogate from a YAML `\\ud800` escape)."""
    if "\x00" in text:
        return "without NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "that UTF-8 can encode (no lone surrogates)"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}"


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _convert(inner[0], value, path)
        raise TypeError(f"unsupported union {tp}")  # pragma: no cover - programming error
    if dataclasses.is_dataclass(tp):
        return from_plain(tp, value, path)  # type: ignore[arg-type]
    if isinstance(tp, type) and issubclass(tp, Enum):
        values = [str(m.value) for m in tp]
        try:
            return tp(value)
        except ValueError:
            close = did_you_mean(value, values) if isinstance(value, str) else ""
            raise CaseError(path, f"expected one of {', '.join(values)}; got {_kind(value)}"
                                  f"{close}") from None
    if tp is bool:
        if not isinstance(value, bool):
            raise CaseError(path, f"expected true or false; got {_kind(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CaseError(path, f"expected an integer; got {_kind(value)}")
        if not -_INT_LIMIT <= value < _INT_LIMIT:  # what Slurm, MPI and torch can take
            raise CaseError(path, f"expected an integer of at most 64 bits; got {value}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CaseError(path, f"expected a number; got {_kind(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise CaseError(path, f"expected a string; got {_kind(value)}")
        problem = _text_problem(value)
        if problem:
            raise CaseError(path, f"expected text {problem}; got {value!r}")
        return value
    if tp == ENV_PAIRS:
        return _env_pairs(value, path)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, (list, tuple)):
            # a string is never split into words (as a shell would): say so
            hint = " (a list of words: a string is not split)" if isinstance(value, str) else ""
            raise CaseError(path, f"expected a list; got {_kind(value)}{hint}")
        items, errors = [], []
        for i, v in enumerate(value):
            try:
                items.append(_convert(args[0], v, f"{path}[{i}]"))
            except CaseError as err:
                errors += err.all()
        raise_all(errors)
        return tuple(items)
    raise TypeError(f"unsupported field type {tp}")  # pragma: no cover - programming error


def _env_pairs(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """Environment as a mapping NAME: value; numbers become strings, nothing else does."""
    if isinstance(value, (list, tuple)):  # the to_dict form: [[k, v], ...]
        try:
            value = {k: v for k, v in value}
        except (TypeError, ValueError):
            raise CaseError(path, "expected a mapping NAME: value") from None
    if not isinstance(value, Mapping):
        raise CaseError(path, f"expected a mapping NAME: value; got {_kind(value)}")
    out = []
    for k, v in value.items():
        if not isinstance(k, str) or not ENV_NAME_RE.fullmatch(k):
            raise CaseError(f"{path}.{k}", "not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise CaseError(f"{path}.{k}", f"expected a string or number; got {_kind(v)}")
        problem = _text_problem(str(v))
        if problem:
            raise CaseError(f"{path}.{k}", f"expected a value {problem}; got {v!r}")
        out.append((k, str(v)))
    return tuple(sorted(out))


def to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        hints = _type_hints(type(obj))
        # environment pairs are a mapping in plain form (NAME: value), as written in a grid
        return {f.name: (dict(getattr(obj, f.name)) if hints[f.name] == ENV_PAIRS
                         else to_plain(getattr(obj, f.name)))
                for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, tuple):
        return [to_plain(v) for v in obj]
    return obj


ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Variables the job scripts (`submission.sh`, `run_local.sh`: toolkit.launch.launcher) assign
#: and read themselves: a case's `env` is exported in those scripts before their loop runs.
SCRIPT_VARIABLES = frozenset({"REPEATS", "REPEAT", "CASE_DIR", "RUN_DIR", "CLAIM",
                              "TERMINATED", "ENDED_AS", "FAILED", "rc", "PREFLIGHT",
                              "RESULTS_DIR"})

#: Variables that change what the scripts' own lines do: how bash splits words, finds commands
#: and starts up, and where the scripts' Python finds this toolkit.
SHELL_VARIABLES = frozenset({"IFS", "PATH", "CDPATH", "BASH_ENV", "BASH_SOURCE", "ENV", "SHELLOPTS",
                             "BASHOPTS", "GLOBIGNORE", "POSIXLY_CORRECT", "PYTHONPATH",
                             "PYTHONHOME"})


def script_env_name(name: str) -> str | None:
    """Why a case's `env` may not set `name`, or None."""
    if name in SCRIPT_VARIABLES:
        return "the job scripts use this variable for their own loop"
    if name in ("PYTHONPATH", "PYTHONHOME"):
        return ("the job scripts' own Python relies on it; to give an own-script (command) "
                "case's program its packages, name the Python or virtual environment that has "
                "them as command.interpreter (`interpreter: .venv`)")
    if name in SHELL_VARIABLES:
        return "the job scripts' own shell and Python rely on it"
    if name.startswith(("SLURM_", "SRUN_")):
        return ("SLURM_* and SRUN_* variables are Slurm's: the job scripts read them (the array "
                "task, the CPUs per task) and srun takes options from them; set the case's "
                "slurm keys")
    return None


#: Variables the toolkit sets in each rank itself, after the job script has started it (the
#: worker's rank discovery, the command workload's torchrun-style environment and its GPU
#: order): a value passed in from the host would stand for the rank's own.
RANK_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                            "GROUP_RANK", "NODE_RANK", "NNODES", "NPROC_PER_NODE",
                            "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"})

#: The prefix of the toolkit's own variables (the container markers, the report API's file).
TOOLKIT_PREFIX = "TRAINBENCH_"


def container_env_name(name: str) -> str | None:
    """Why a container's `env` (host variables passed into the container by name) may not
    name `name`, or None: the names a case's `env` may not set (`script_env_name`), the ones
    the toolkit sets in each rank and its own `TRAINBENCH_*`."""
    why = script_env_name(name)
    if why:
        return why
    if name in RANK_VARIABLES:
        return ("the toolkit sets it in every rank (rank, world, rendezvous and GPU order); the "
                "host's value would stand for the rank's own")
    if name.startswith(TOOLKIT_PREFIX):
        return (f"{TOOLKIT_PREFIX}* variables are the toolkit's own (the container's markers, "
                "the report API's file)")
    return None


def check_env_names(env: tuple[tuple[str, str], ...], source: str) -> None:
    """The one check of every source of a rank's environment (a grid's `env`, a site's
    `env`): each name a valid variable name that neither the job scripts nor their shell own;
    `CaseError` at `env.NAME` saying that `source` cannot set it."""
    for k, _ in env:
        if not ENV_NAME_RE.fullmatch(k):
            raise CaseError(f"env.{k}", "not a valid environment variable name")
        why = script_env_name(k)
        if why:
            raise CaseError(f"env.{k}", f"cannot be set by {source}: {why}")
