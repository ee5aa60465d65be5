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

Every problem of a grid is reported in one pass (one GridError, a line each, in the order of the
file), and nothing is run. Each names the file, the key path (`sweep.precision[2]`,
`zip[0].num_nodes`), the line where YAML gives one, and what was expected; a misspelt key or value
gets the closest valid ones ("did you mean"), and the list of valid keys only where none is close;
a problem shared by many cases is one error saying how many, and an unknown key on an axis is one
error at the key, not one per value. Duplicate keys, an `exclude` filter that matches no case and
a base option that an axis replaces as a whole are errors. Limits, each raisable by an environment
variable: the file's size (grid_source.MAX_GRID_BYTES), the values the document expands to
through YAML aliases (grid_source.MAX_GRID_NODES) and the number of cases (MAX_CASES). Executor
limits (local: one node, ranks <= GPUs) are checked by the executor, not here.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import itertools
import json
import math
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
    from_plain,
    key_hint,
    key_problem,
    resolve,
    valid_case_id,
)
from toolkit.spec.command import load_warnings, resolve_command
from toolkit.spec.grid_source import (
    CASES_ENV,
    MAX_CASES,
    GridError,
    GridIssue,
    at_line,
    limit_from_env,
    load_yaml,
    read_grid_text,
    show_path,
)
from toolkit.spec.placement import NAME_RE
from toolkit.spec.site import SITE_ONLY, SITE_ONLY_WHY, Site, merge_layer
from toolkit.spec.vocab import Model

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
class Grid:
    name: str
    source: str
    """The file the grid came from (or `<string>`)."""
    cases: tuple[Case, ...]
    case_ids: tuple[str, ...]
    """Unique, readable ids, parallel to `cases`."""
    raw: dict[str, Any]
    """The grid as loaded, with --set overrides applied (written next to the results)."""
    site: dict[str, Any] | None = None
    """The layer of case keys the site profile set beneath `base` (`Site.layer`), if any."""
    warnings: tuple[str, ...] = ()
    """What the grid allows but may not mean, each once (a program whose edits would go
    unseen: `toolkit.spec.command.load_warnings`); `submit` prints them."""

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




def load_grid(path: str | Path, overrides: Sequence[str] = (),
              max_cases: int | None = None, site: Site | None = None) -> Grid:
    """Read, validate and expand a grid file, on `site` when one is given (its profile is a
    layer beneath the grid's base). Raises GridError naming the file.

    Reads at most MAX_GRID_BYTES (`$TRAINBENCH_MAX_GRID_BYTES`) and never waits for a FIFO
    that has no writer; the file must be UTF-8."""
    path = Path(path)
    text, source = read_grid_text(path)
    name = show_path(path.stem)
    return parse_grid(text, source=source, default_name=name, overrides=overrides,
                      max_cases=max_cases, site=site, base_dir=path.parent)


def parse_grid(text: str, *, source: str = "<string>", default_name: str = "grid",
               overrides: Sequence[str] = (), max_cases: int | None = None,
               site: Site | None = None, base_dir: Path | None = None) -> Grid:
    """`base_dir`: where a command case's relative `workdir` starts (the grid file's folder;
    default the current directory)."""
    duplicates: list[GridIssue] = []
    raw, lines = load_yaml(text, source, duplicates)
    keys = [item.partition("=")[0].strip() for item in overrides]
    overridden = [k if k in TOP_KEYS else f"base.{k}" for k in keys]
    try:
        grid = _build(raw, source, default_name, overrides, max_cases,
                      site.layer() if site is not None else None, base_dir or Path.cwd())
        issues = []
    except GridError as err:
        issues = [at_line(i, lines, overridden) for i in err.issues]
    if duplicates or issues:
        # every problem of the file, in the order of its lines (those without one last)
        raise GridError(source, sorted([*duplicates, *issues],
                                       key=lambda i: math.inf if i.line is None else i.line))
    return grid


def _build(raw: Any, source: str, default_name: str, overrides: Sequence[str],
           max_cases: int | None, layer: dict[str, Any] | None, base_dir: Path) -> Grid:
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
        if layer is None and isinstance(raw.get("site"), dict):
            layer = raw["site"]  # the site it was written with, unless another is given
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
    if max_cases is None:
        max_cases = limit_from_env(source, CASES_ENV, MAX_CASES)
    overridden = [item.partition("=")[0].strip() for item in overrides]
    grid = _expand(raw, source, default_name, max_cases, overridden, layer, base_dir)
    if recorded is not None and not overrides:
        grid = _as_recorded(grid, recorded)
    return grid


_DUMP_KEYS = {"name", "source", "grid", "site", "cases"}


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

    The key must name an option of a case. A key a sweep or zip moves is fixed to the value:
    it stops being an axis. A key inside a mapping that an axis sets as a whole
    (`model_config.seq_len` where a zip lists whole `model_config` mappings), or a mapping
    with a part that an axis moves, is refused naming that axis: the override would be
    overwritten in every case, or would not hold in any.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        return GridIssue(f"--set {item}", "expected key=value")
    try:
        value = load_yaml(text, f"--set {key}")[0] if text.strip() else ""
    except GridError as err:
        reason = err.issues[0].message if err.issues else ""
        return GridIssue(f"--set {key}", f"expected a YAML value, got {text[:80]!r} ({reason})")
    if key in ("repeats", "name", "description"):
        raw[key] = value
        return None
    problem = key_problem(Case, key)
    if problem:
        return GridIssue(f"--set {key}", problem)
    sweep = raw.get("sweep")
    zips = raw.get("zip")
    axes = [(str(k), f"sweep.{k}") for k in sweep] if isinstance(sweep, dict) else []
    if isinstance(zips, list):
        axes += [(str(k), f"zip[{i}].{k}") for i, g in enumerate(zips) if isinstance(g, dict)
                 for k in g]
    for axis_key, where in axes:
        if key.startswith(axis_key + "."):
            return GridIssue(f"--set {key}", f"{where} sets {axis_key} as a whole in every "
                                             "case, which would overwrite this value; change "
                                             f"the values listed at {where}, or fix all of it "
                                             f"with --set {axis_key}=...")
        if axis_key.startswith(key + "."):
            return GridIssue(f"--set {key}", f"{where} moves {axis_key}, a part of {key}, so "
                                             f"{key} would not be this value in any case; fix "
                                             f"that part with --set {axis_key}=...")
    base = raw.setdefault("base", {})
    if not isinstance(base, dict):
        return GridIssue("base", "expected a mapping")
    _set_dotted(base, key, value)
    if isinstance(sweep, dict):
        sweep.pop(key, None)
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


def _expand(raw: dict[str, Any], source: str, default_name: str, max_cases: int,
            overridden: Sequence[str] = (), layer: dict[str, Any] | None = None,
            base_dir: Path | None = None) -> Grid:
    issues: list[GridIssue] = []

    def bad(path: str, message: str) -> None:
        issues.append(GridIssue(path, message))

    for key in raw:
        if key not in TOP_KEYS:
            bad(str(key), "unknown key" + key_hint(key, TOP_KEYS, "valid keys: " + ", ".join(
                f"{k} ({v})" for k, v in TOP_KEYS.items())))
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        bad("name", "expected letters, digits, '.', '_' or '-' (not starting with '.' or '-'); "
                    f"got {name!r}")
    repeats = raw.get("repeats", 1)
    if (isinstance(repeats, bool) or not isinstance(repeats, int)
            or not 1 <= repeats <= MAX_REPEATS):
        bad("repeats", f"expected an integer from 1 to {MAX_REPEATS}; got {repeats!r}")
        repeats = 1  # the cases are still checked, with one repeat
    base = raw.get("base", {})
    if base is None:
        base = {}
    if not isinstance(base, dict):
        bad("base", "expected a mapping of case options")
        base = {}
    if "repeats" in base:
        bad("base.repeats", "set repeats at the top level of the grid")
    if SITE_ONLY in base:
        bad(f"base.{SITE_ONLY}", f"{SITE_ONLY_WHY}")
    if layer is not None:
        base = merge_layer(base, layer)

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
            if key == SITE_ONLY or key.startswith(SITE_ONLY + "."):
                bad(axis_path, SITE_ONLY_WHY)
            found, shadowed = _lookup(base, key)
            if found and isinstance(shadowed, dict) and shadowed:
                bad(f"base.{key}", f"{axis_path} sets {key} as a whole in every case, so these "
                                   f"base values would never be used; write them into the "
                                   f"values of {axis_path}")
    excludes = raw.get("exclude", []) or []
    if not isinstance(excludes, list) or not all(isinstance(e, dict) and e for e in excludes):
        bad("exclude", "expected a list of non-empty mappings key -> value")
        excludes = []
    exclude_issues = [GridIssue(f"exclude[{i}].{key}", problem)
                      for i, filt in enumerate(excludes) for key in filt
                      if (problem := key_problem(Case, str(key)))]
    total = math.prod(len(axis) for axis in axes)
    if total > max_cases:
        sizes = " x ".join(f"{len(a)} ({next(iter(a[0].values()))[1].rsplit('[', 1)[0]})"
                           for a in axes[:6]) + (" x ..." if len(axes) > 6 else "")
        raise GridError(source, [*issues, GridIssue(
            "", f"the sweeps and zips make {total:,} cases ({sizes}), more than the limit of "
                f"{max_cases:,}; split the grid, or raise the limit with --max-cases or "
                f"{CASES_ENV}")])

    # Every case is built, also after a problem above, so that one pass finds every problem.
    cases: list[Case] = []
    used_excludes: set[int] = set()
    failures: dict[tuple[str, str], list[str]] = {}
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
            if case.model is Model.COMMAND:  # the program, as this machine has it
                case = dataclasses.replace(case, command=resolve_command(
                    case.command, base_dir or Path.cwd()))
        except CaseError as err:
            for one in err.all():
                where = _locate(one.key, provenance)
                if one.unknown_key:  # the key is wrong in every case it is written in
                    failures.setdefault((_key_path(where), one.message), [])
                    continue
                context = [y for y in provenance.values() if not where.startswith(y)]
                failures.setdefault((where, one.message), []).append(", ".join(context))
            # an exclude filter may have been meant for this case: its values as written
            used_excludes.update(_may_exclude(merged, excludes))
            continue
        hits = _excluded(case, excludes)
        used_excludes.update(hits)
        if not hits:
            cases.append(case)
    for (where, message), contexts in failures.items():
        issues.append(GridIssue(where, message + _how_many(len(contexts), total, contexts)
                                if where.startswith("base.") and contexts else message))
    issues += exclude_issues
    misspelt = {int(i.path.split("]", 1)[0].removeprefix("exclude[")) for i in exclude_issues}
    for i, filt in enumerate(excludes):
        # a filter on a key that --set fixed may match nothing because of the --set; one on a
        # key no case has is reported as that
        if i not in used_excludes and i not in misspelt and not any(
                k == o or k.startswith(o + ".") or o.startswith(k + ".")
                for k in map(str, filt) for o in overridden):
            bad(f"exclude[{i}]", "matches no case of this grid; check its keys and values "
                                 "(a filter that matches nothing drops nothing)")
    if issues:
        raise GridError(source, issues)
    if not cases:
        raise GridError(source, [GridIssue("exclude", "every case is excluded; nothing to run")])

    ids, id_issues = _assign_ids(cases, list(seen_keys))
    if id_issues:
        raise GridError(source, id_issues)
    notes = dict.fromkeys(w for c in cases if c.model is Model.COMMAND
                          for w in load_warnings(c.command))
    return Grid(name=str(name), source=source, cases=tuple(cases), case_ids=tuple(ids), raw=raw,
                site=layer, warnings=tuple(notes))


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


def _key_path(where: str) -> str:
    """The key of a value's path (`sweep.x` of `sweep.x[1]`, `zip[0].x` of `zip[0].x[2]`):
    where an unknown key is written, once for all its values."""
    return re.sub(r"\[\d+\]$", "", where)


def _may_exclude(written: Mapping[str, Any], excludes: list[dict[str, Any]]) -> list[int]:
    """The exclude filters that may match a case that could not be built, judged on its values
    as written (base, sweeps and zips) and, for a key not written there, on the option's
    default; a default that the case fills in when it is built (None) may match anything."""
    if not excludes:
        return []
    defaults = Case().to_dict()

    def may_match(key: str, wanted: Any) -> bool:
        found, value = _lookup(written, key)
        if not found:
            found, value = _lookup(defaults, key)
            if value is None:
                return True
        return _matches((found, value), wanted)

    return [i for i, filt in enumerate(excludes)
            if all(may_match(str(k), v) for k, v in filt.items())]


def _how_many(n: int, total: int, contexts: list[str]) -> str:
    """` (all 10,000 cases)` or ` (in 3 of 12 cases: the case from sweep.x[0]; ...)`: where a
    problem of the base shows, said once for all the cases it affects."""
    if total == 1:
        return ""
    if n == total:
        return f" (all {total:,} cases)"
    shown = "; ".join(f"the case from {c}" for c in contexts[:3] if c)
    more = " ..." if n > 3 else ""
    return f" (in {n:,} of {total:,} cases: {shown}{more})" if shown else f" (in {n:,} of " \
        f"{total:,} cases)"


def _lookup(case_dict: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    cur: Any = case_dict
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def _excluded(case: Case, excludes: list[dict[str, Any]]) -> list[int]:
    """The exclude filters that match `case` (every one, so that each filter's use counts)."""
    d = case.to_dict()
    return [i for i, filt in enumerate(excludes)
            if all(_matches(_lookup(d, str(k)), v) for k, v in filt.items())]


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
    head: dict[str, Any] = {"name": grid.name, "source": grid.source, "grid": grid.raw}
    if grid.site is not None:
        head["site"] = grid.site
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(head, Dumper=dumper, sort_keys=False, default_flow_style=None, width=100)
    lines = [json.dumps({"id": cid, "config_hash": c.config_hash(), **c.to_dict()})
             for cid, c in grid.items()]
    return text + "cases:\n" + "".join(f"- {line}\n" for line in lines)
