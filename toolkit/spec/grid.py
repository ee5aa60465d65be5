"""Grid YAML -> validated, expanded list of cases. Pure: reads one file, writes nothing.

A grid is data only::

    name: bert                      # optional; default: the file's stem
    repeats: 7
    base: {model: bert_base, precision: fp32, batch_size_per_device: 96, ...}
    sweep:                          # Cartesian product, in the order written
      batch_size_per_device: [96, 64, 32, 24]
      model_config.seq_len: [128, 512]    # dotted keys reach nested options
    zip:                            # axes that move together (one list per key, same length)
      - {num_nodes: [1, 1, 2, 4], gpus_per_node: [1, 8, 8, 8]}
    exclude:                        # drop cases matching every key of one filter
      - {num_nodes: 4, batch_size_per_device: 24}

Every error names the file, the key path (`sweep.precision[2]`, `zip[0].num_nodes`) and what was
expected. Executor limits (local: one node, ranks <= GPUs) are checked by the executor, not here.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolkit.spec import (
    MAX_REPEATS,
    Case,
    CaseError,
    describe_keys,
    from_plain,
    resolve,
    valid_case_id,
)

TOP_KEYS = {
    "name": "grid name, used for the results directory (default: the file's stem)",
    "description": "free text",
    "repeats": "runs per case (default 1)",
    "base": "the case every sweep starts from",
    "sweep": "mapping key -> list of values (Cartesian product)",
    "zip": "list of mappings key -> list, lists of one mapping move together",
    "exclude": "list of mappings key -> value (or list of values) to drop",
}


@dataclass(frozen=True)
class GridIssue:
    path: str
    """Dotted key path in the YAML file, e.g. `sweep.precision[2]`."""
    message: str


class GridError(Exception):
    """One or more problems in a grid file; nothing has been run or written."""

    def __init__(self, file: str, issues: Sequence[GridIssue]) -> None:
        self.file = file
        self.issues = list(issues)
        # one line per issue, each naming the file (a message may quote a value with newlines)
        lines = [f"{file}: {i.path}: {i.message}" if i.path else f"{file}: {i.message}"
                 for i in self.issues]
        lines = [" ".join(line.splitlines()) for line in lines]
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class Grid:
    name: str
    source: str
    """The file the grid came from (or `<string>`)."""
    cases: tuple[Case, ...]
    case_ids: tuple[str, ...]
    """Unique, readable ids, parallel to `cases`."""
    raw: dict[str, Any]
    """The grid as loaded, with --set overrides applied (written next to the results)."""

    def items(self) -> list[tuple[str, Case]]:
        return list(zip(self.case_ids, self.cases, strict=True))

    def select(self, patterns: Sequence[str]) -> Grid:
        """The cases whose id matches one of the shell-style `patterns` (`DP_*`, `*-eager`), in
        grid order. A pattern that matches no case is a GridError (`--only`), listing the ids."""
        if not patterns:
            return self
        unmatched = [p for p in patterns
                     if not any(fnmatch.fnmatchcase(cid, p) for cid in self.case_ids)]
        if unmatched:
            shown = ", ".join(self.case_ids[:20]) + (" ..." if len(self.case_ids) > 20 else "")
            raise GridError(self.source, [GridIssue("--only", f"{p!r} matches no case id of "
                                                    f"this grid ({shown})") for p in unmatched])
        keep = [i for i, cid in enumerate(self.case_ids)
                if any(fnmatch.fnmatchcase(cid, p) for p in patterns)]
        return dataclasses.replace(self, cases=tuple(self.cases[i] for i in keep),
                                   case_ids=tuple(self.case_ids[i] for i in keep))


_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


def load_grid(path: str | Path, overrides: Sequence[str] = ()) -> Grid:
    """Read, validate and expand a grid file. Raises GridError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise GridError(str(path), [GridIssue("", f"cannot read: {err.strerror}")]) from None
    return parse_grid(text, source=str(path), default_name=path.stem, overrides=overrides)


def parse_grid(text: str, *, source: str = "<string>", default_name: str = "grid",
               overrides: Sequence[str] = ()) -> Grid:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = ""
        mark = getattr(err, "problem_mark", None)
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        problem = getattr(err, "problem", None) or str(err)
        if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow
            pos = err.position
            line, column = text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)
            where = f"line {line}, column {column}: "
            char = err.character
            problem = (f"character U+{char:04X} is not allowed in YAML" if isinstance(char, int)
                       else f"{err.reason}")
        raise GridError(source, [GridIssue("", f"not valid YAML: {where}{problem}")]) from None
    except (ValueError, RecursionError) as err:
        # PyYAML's constructors raise these for scalars it recognises but cannot build (an
        # integer of more than 4300 digits, a date like 2024-13-45) and for deep nesting.
        problem = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise GridError(source, [GridIssue("", f"not valid YAML: {problem}")]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise GridError(source, [GridIssue("", "expected a mapping at the top level, got "
                                               f"{type(raw).__name__}")])
    problem = _document_problem(raw)
    if problem is not None:
        raise GridError(source, [problem])
    recorded = None
    if _is_resolved_dump(raw):
        raw, recorded = _unwrap_dump(raw, source)
    raw = copy.deepcopy(raw)
    issues: list[GridIssue] = []
    for item in overrides:
        issue = _apply_override(raw, item)
        if issue:
            issues.append(issue)
    if issues:
        raise GridError(source, issues)
    problem = _document_problem(raw)  # again, with the overrides
    if problem is not None:
        raise GridError(source, [problem])
    grid = _expand(raw, source, default_name)
    if recorded is not None and not overrides:
        grid = _as_recorded(grid, recorded)
    return grid


_DUMP_KEYS = {"name", "source", "grid", "cases"}


def _is_resolved_dump(raw: dict[Any, Any]) -> bool:
    """Whether `raw` is what `dump_resolved` writes (a results directory's resolved grid)."""
    return {"grid", "cases"} <= set(raw) <= _DUMP_KEYS


def _unwrap_dump(raw: dict[Any, Any], source: str) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
    """The grid inside a resolved dump, and the (id, config hash) of every case it lists."""
    inner, listed = raw["grid"], raw["cases"]
    if not isinstance(inner, dict):
        raise GridError(source, [GridIssue("grid", "expected the grid as written (a mapping)")])
    if not isinstance(listed, list) or not all(
            isinstance(c, dict) and isinstance(c.get("id"), str) for c in listed):
        raise GridError(source, [GridIssue("cases", "expected a list of cases with an id")])
    inner = dict(inner)
    if "name" in raw:
        inner.setdefault("name", raw["name"])
    return inner, [(c["id"], str(c.get("config_hash"))) for c in listed]


def _as_recorded(grid: Grid, recorded: list[tuple[str, str]]) -> Grid:
    """The cases a resolved dump lists (a submit with --only lists some of the grid's), each
    checked to resolve to the configuration recorded for it."""
    by_id = dict(grid.items())
    issues = []
    for cid, config_hash in recorded:
        case = by_id.get(cid)
        if case is None:
            issues.append(GridIssue("cases", f"{cid}: not a case of the grid it was written "
                                             "with"))
        elif case.config_hash() != config_hash:
            issues.append(GridIssue("cases", f"{cid}: recorded with config {config_hash}, "
                                             f"resolves to {case.config_hash()} here"))
    if issues:
        raise GridError(grid.source, issues)
    keep = {cid for cid, _ in recorded}
    index = [i for i, cid in enumerate(grid.case_ids) if cid in keep]
    return dataclasses.replace(grid, cases=tuple(grid.cases[i] for i in index),
                               case_ids=tuple(grid.case_ids[i] for i in index))


MAX_DEPTH = 16
"""Nesting of a grid document (a case is at most 4 levels deep inside sweep or zip)."""


def _document_problem(raw: Any) -> GridIssue | None:
    """A value nested deeper than MAX_DEPTH, or text that cannot be written back as UTF-8 (a
    lone surrogate from a `\\ud800` escape; grid.yaml holds the document). Iterative: a
    self-referencing YAML alias makes the document infinitely deep."""
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return GridIssue(path, f"expected at most {MAX_DEPTH} levels of nesting (or a YAML "
                                   "alias inside its own anchor)")
        for text in (value, path) if isinstance(value, str) else (path,):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                where = path.encode("utf-8", "backslashreplace").decode("utf-8")
                return GridIssue(where, f"expected text UTF-8 can encode (no lone "
                                        f"surrogates); got {text!r}")
        if isinstance(value, dict):
            stack += [(v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    return None


def _apply_override(raw: dict[str, Any], item: str) -> GridIssue | None:
    """`--set key=value`: set a base key (dotted paths reach nested options) or `repeats`/`name`.

    A swept or zipped key that is overridden stops being an axis: the override fixes it.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        return GridIssue(f"--set {item}", "expected key=value")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except (yaml.YAMLError, ValueError, RecursionError):
        return GridIssue(f"--set {key}", f"expected a YAML value, got {text[:80]!r}")
    if key in ("repeats", "name", "description"):
        raw[key] = value
        return None
    base = raw.setdefault("base", {})
    if not isinstance(base, dict):
        return GridIssue("base", "expected a mapping")
    _set_dotted(base, key, value)
    sweep = raw.get("sweep")
    if isinstance(sweep, dict):
        sweep.pop(key, None)
    zips = raw.get("zip")
    if isinstance(zips, list):
        for group in zips:
            if isinstance(group, dict):
                group.pop(key, None)
        raw["zip"] = [g for g in zips if g != {}]
    return None


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    for part in parts[:-1]:
        nxt = target.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            target[part] = nxt
        target = nxt
    target[parts[-1]] = value


def _expand(raw: dict[str, Any], source: str, default_name: str) -> Grid:
    issues: list[GridIssue] = []

    def bad(path: str, message: str) -> None:
        issues.append(GridIssue(path, message))

    for key in raw:
        if key not in TOP_KEYS:
            bad(str(key), "unknown key; valid keys: " + ", ".join(
                f"{k} ({v})" for k, v in TOP_KEYS.items()))
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        bad("name", "expected letters, digits, '.', '_' or '-' (not starting with '.' or '-'); "
                    f"got {name!r}")
    repeats = raw.get("repeats", 1)
    if (isinstance(repeats, bool) or not isinstance(repeats, int)
            or not 1 <= repeats <= MAX_REPEATS):
        bad("repeats", f"expected an integer from 1 to {MAX_REPEATS}; got {repeats!r}")
    base = raw.get("base", {})
    if base is None:
        base = {}
    if not isinstance(base, dict):
        bad("base", "expected a mapping of case options")
        base = {}
    if "repeats" in base:
        bad("base.repeats", "set repeats at the top level of the grid")

    # Axes: each is a list of alternatives; an alternative is {dotted key: (value, yaml path)}.
    axes: list[list[dict[str, tuple[Any, str]]]] = []
    sweep = raw.get("sweep", {}) or {}
    if not isinstance(sweep, dict):
        bad("sweep", "expected a mapping key -> list of values")
        sweep = {}
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            bad(f"sweep.{key}", "expected a non-empty list of values")
            continue
        axes.append([{str(key): (v, f"sweep.{key}[{i}]")} for i, v in enumerate(values)])
    zips = raw.get("zip", []) or []
    if not isinstance(zips, list):
        bad("zip", "expected a list of mappings key -> list of values")
        zips = []
    for gi, group in enumerate(zips):
        if not isinstance(group, dict) or not group:
            bad(f"zip[{gi}]", "expected a mapping key -> list of values")
            continue
        lengths = {}
        for key, values in group.items():
            if not isinstance(values, list) or not values:
                bad(f"zip[{gi}].{key}", "expected a non-empty list of values")
            else:
                lengths[key] = len(values)
        if len(set(lengths.values())) > 1:
            bad(f"zip[{gi}]", "lists must have the same length; got "
                + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
            continue
        if len(lengths) != len(group):
            continue
        n = next(iter(lengths.values()))
        axes.append([{str(k): (group[k][i], f"zip[{gi}].{k}[{i}]") for k in group}
                     for i in range(n)])
    seen_keys: dict[str, str] = {}
    for axis in axes:
        for key, (_, ypath) in axis[0].items():
            axis_path = ypath.rsplit("[", 1)[0]
            if key in seen_keys:
                bad(axis_path, f"key also swept at {seen_keys[key]}")
            seen_keys[key] = axis_path
            if key == "repeats":
                bad(axis_path, "repeats is a grid-level setting, not an axis")
    excludes = raw.get("exclude", []) or []
    if not isinstance(excludes, list) or not all(isinstance(e, dict) and e for e in excludes):
        bad("exclude", "expected a list of non-empty mappings key -> value")
        excludes = []
    if issues:
        raise GridError(source, issues)

    assert isinstance(repeats, int)
    cases: list[Case] = []
    used_excludes: set[int] = set()
    for combo in itertools.product(*axes) if axes else [()]:
        merged = copy.deepcopy(base)
        provenance: dict[str, str] = {}
        for alt in combo:
            for key, (value, ypath) in alt.items():
                _set_dotted(merged, key, copy.deepcopy(value))
                provenance[key] = ypath
        merged["repeats"] = repeats
        try:
            case = resolve(from_plain(Case, merged, ""))
        except CaseError as err:
            where = _locate(err.key, provenance)
            context = [y for y in provenance.values() if not where.startswith(y)]
            message = err.message + (f" (in the case from {', '.join(context)})"
                                     if context and where.startswith("base.") else "")
            issues.append(GridIssue(where, message))
            continue
        hit = _excluded(case, excludes)
        if hit is not None:
            used_excludes.add(hit)
            continue
        cases.append(case)
    for i, filt in enumerate(excludes):
        problem = _check_exclude_keys(filt)
        if problem:
            issues.append(GridIssue(f"exclude[{i}].{problem[0]}", problem[1]))
    if issues:
        raise GridError(source, _dedupe(issues))
    if not cases:
        raise GridError(source, [GridIssue("exclude", "every case is excluded; nothing to run")])

    ids, id_issues = _assign_ids(cases, list(seen_keys))
    if id_issues:
        raise GridError(source, id_issues)
    return Grid(name=str(name), source=source, cases=tuple(cases), case_ids=tuple(ids), raw=raw)


def _locate(key: str, provenance: Mapping[str, str]) -> str:
    """Map a case key (`parallel.tp`) to where its value came from in the YAML."""
    probe = key
    while probe:
        if probe in provenance:
            return provenance[probe] + key[len(probe):]
        probe = probe.rpartition(".")[0]
    for pkey, ypath in provenance.items():  # a swept nested key inside a failing section
        if pkey.startswith(key + "."):
            return f"base.{key} (with {ypath})"
    return f"base.{key}"


def _dedupe(issues: list[GridIssue]) -> list[GridIssue]:
    out: list[GridIssue] = []
    for issue in issues:
        if issue not in out:
            out.append(issue)
    return out


def _lookup(case_dict: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    cur: Any = case_dict
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def _check_exclude_keys(filt: Mapping[str, Any]) -> tuple[str, str] | None:
    probe = Case().to_dict()
    for key in filt:
        found, _ = _lookup(probe, str(key))
        if not found:
            return str(key), f"unknown key; valid keys: {describe_keys(Case)}"
    return None


def _excluded(case: Case, excludes: list[dict[str, Any]]) -> int | None:
    d = case.to_dict()
    for i, filt in enumerate(excludes):
        if all(_matches(_lookup(d, str(k)), v) for k, v in filt.items()):
            return i
    return None


def _matches(found_value: tuple[bool, Any], wanted: Any) -> bool:
    found, value = found_value
    if not found:
        return False
    if isinstance(wanted, list) and not isinstance(value, list):
        return value in wanted
    return bool(value == wanted)


def _assign_ids(cases: list[Case], swept: list[str]) -> tuple[list[str], list[GridIssue]]:
    """Readable ids; where two different cases share one, append the swept keys that differ."""
    ids = [c.base_id() for c in cases]
    groups: dict[str, list[int]] = {}
    for i, cid in enumerate(ids):
        groups.setdefault(cid, []).append(i)
    issues: list[GridIssue] = []
    for cid, members in groups.items():
        if len(members) == 1:
            continue
        dicts = [_flatten(cases[i].to_dict()) for i in members]
        differing = [k for k in dicts[0] if k != "repeats"
                     and len({repr(d.get(k)) for d in dicts}) > 1]
        ordered = [k for k in swept if k in differing] + [k for k in differing if k not in swept]
        if not ordered:
            issues.append(GridIssue("sweep", f"case {cid} appears {len(members)} times with the "
                                             "same configuration; remove the duplicate values"))
            continue
        for i, d in zip(members, dicts, strict=True):
            suffix = "-".join(f"{k.rsplit('.', 1)[-1]}{_id_value(d[k])}" for k in ordered)
            ids[i] = f"{cid}-{suffix}"
    for i, cid in enumerate(ids):
        if not valid_case_id(cid):
            issues.append(GridIssue("base.name" if cases[i].name else "sweep",
                                    f"case id {cid!r} is not a valid directory name"))
    if len(set(ids)) != len(ids):  # pragma: no cover - guarded by the differing-keys logic
        issues.append(GridIssue("sweep", "case ids are not unique"))
    return ids, issues


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and k != "env":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _id_value(value: Any) -> str:
    if isinstance(value, list):
        value = "x".join(str(v) for v in value)
    text = re.sub(r"[^A-Za-z0-9._=-]+", "_", str(value))
    return text or "none"


def dump_resolved(grid: Grid) -> str:
    """The fully resolved grid, as YAML written next to the results: the grid as written, then
    every case with its id, one per line (a JSON flow mapping, which is YAML too)."""
    head = {"name": grid.name, "source": grid.source, "grid": grid.raw}
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(head, Dumper=dumper, sort_keys=False, default_flow_style=None, width=100)
    lines = [json.dumps({"id": cid, "config_hash": c.config_hash(), **c.to_dict()})
             for cid, c in grid.items()]
    return text + "cases:\n" + "".join(f"- {line}\n" for line in lines)
