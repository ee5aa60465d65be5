"""Reading a grid file safely: the file's size, its encoding, YAML without duplicate keys or
alias bombs, and the line of every key for error messages. GridIssue and GridError are the
errors every grid check raises."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class GridIssue:
    path: str
    """Dotted key path in the YAML file, e.g. `sweep.precision[2]`."""
    message: str
    line: int | None = None
    """The line of the file the path is written on, where known."""


class GridError(Exception):
    """One or more problems in a grid file; nothing has been run or written."""

    def __init__(self, file: str, issues: Sequence[GridIssue]) -> None:
        self.file = file
        self.issues = list(issues)
        # one line per issue, each naming the file (a message may quote a value with newlines)
        lines = [(f"{file}: {i.path}: {i.message}" if i.path else f"{file}: {i.message}")
                 + (f" (line {i.line})" if i.line else "") for i in self.issues]
        lines = [" ".join(line.splitlines()) for line in lines]
        super().__init__("\n".join(lines))


MAX_GRID_BYTES = 2**20
"""Largest grid file read: a grid is a few KiB, and 1 MiB of YAML takes seconds to parse
(`/dev/zero` is refused at once)."""
MAX_GRID_NODES = 1_000_000
"""Most values (scalars, lists, mappings) a document may expand to through YAML aliases."""
MAX_CASES = 100_000
"""Most cases a grid may expand to, counted before expanding (the product of the axes)."""
BYTES_ENV, NODES_ENV, CASES_ENV = ("TRAINBENCH_MAX_GRID_BYTES", "TRAINBENCH_MAX_GRID_NODES",
                                   "TRAINBENCH_MAX_CASES")


def limit_from_env(source: str, env: str, default: int) -> int:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise GridError(source, [GridIssue(f"${env}", f"expected a positive integer; got "
                                                      f"{text[:40]!r}")])
    return int(text)


def show_path(path: str | Path) -> str:
    """A path as text that can be printed: bytes that are not UTF-8 as `\xff` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_grid_text(path: Path) -> tuple[str, str]:
    """The text of a grid file and its name as printed. Reads at most MAX_GRID_BYTES
    (`$TRAINBENCH_MAX_GRID_BYTES`), never waits for a FIFO that has no writer, and requires
    UTF-8; any problem is a GridError naming the file."""
    source = show_path(path)
    limit = limit_from_env(source, BYTES_ENV, MAX_GRID_BYTES)
    data = bytearray()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO does not wait
        try:
            os.set_blocking(fd, True)
            while len(data) <= limit:
                chunk = os.read(fd, min(2**20, limit + 1 - len(data)))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
    except OSError as err:
        raise GridError(source, [GridIssue("", f"cannot read: {err.strerror}")]) from None
    if len(data) > limit:
        raise GridError(source, [GridIssue("", f"larger than the limit of {limit:,} bytes for a "
                                               f"grid file; set {BYTES_ENV} to raise it")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - data.rfind(b"\n", 0, err.start)
        raise GridError(source, [GridIssue("", f"not UTF-8: byte 0x{data[err.start]:02x} at "
                                               f"line {line}, column {column}; save the file "
                                               "as UTF-8")]) from None
    return text, source


class _GridLoader(yaml.SafeLoader):
    """PyYAML's safe loader; the grid checks the composed node graph before building values."""


def load_yaml(text: str, source: str,
              duplicates: list[GridIssue] | None = None) -> tuple[Any, dict[str, int]]:
    """The document, and the line of every key and list item by its path (`sweep.x[2]`).

    Refuses duplicate keys (naming both lines), a document that expands to more than
    MAX_GRID_NODES values through aliases (a billion-laughs document is refused before any
    value is built) and an alias inside its own anchor. With a `duplicates` list, duplicate
    keys are added to it instead of raised, and the document is built with the last value
    of each (so that the caller can check the rest of it in the same pass)."""
    try:
        loader = _GridLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None, {}
            _check_expansion(node, source)
            lines, found = _check_keys(loader, node)
            if found and duplicates is None:
                raise GridError(source, found)
            if duplicates is not None:
                duplicates += found
            return loader.construct_document(node), lines
        finally:
            loader.dispose()
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


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the values the node graph expands to (an alias repeats its anchor's values), one
    visit per node, and refuse past the limit or on a cycle."""
    limit = limit_from_env(source, NODES_ENV, MAX_GRID_NODES)
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            open_nodes.discard(nid)
            size[nid] = min(limit + 1, 1 + sum(size[id(c)] for c in _children(node)))
            continue
        if nid in size:
            continue
        if nid in open_nodes:
            line = node.start_mark.line + 1
            raise GridError(source, [GridIssue("", f"a YAML alias inside its own anchor (the "
                                                   f"value at line {line} contains itself)")])
        open_nodes.add(nid)
        stack.append((node, True))
        stack += [(c, False) for c in _children(node) if id(c) not in size]
    if size[id(root)] > limit:
        raise GridError(source, [GridIssue("", f"the document expands to more than {limit:,} "
                                               "values through YAML aliases (*name repeats "
                                               f"&name); set {NODES_ENV} to raise the limit")])


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_keys(loader: _GridLoader, root: yaml.Node) -> tuple[dict[str, int], list[GridIssue]]:
    """The line of each key path, and each duplicate key as an issue naming both lines. Each
    node is visited once (an aliased value keeps the paths of its anchor)."""
    lines: dict[str, int] = {}
    issues: list[GridIssue] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault(f"{path}[{i}]", item.start_mark.line + 1)
                stack.append((item, f"{path}[{i}]"))
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key: Any = key_node.value
                if isinstance(key_node, yaml.ScalarNode):
                    try:
                        key = loader.construct_object(key_node)
                        hash(key)
                    except Exception:  # an unbuildable key is reported when building
                        key = key_node.value
                else:
                    key = id(key_node)
                kpath = f"{path}.{key}" if path else str(key)
                line = key_node.start_mark.line + 1
                if key in first:
                    issues.append(GridIssue(kpath, f"duplicate key (first at line {first[key]}); "
                                                   "keep one", line))
                    continue
                first[key] = line
                lines.setdefault(kpath, line)
                stack.append((value_node, kpath))
    return lines, issues


def at_line(issue: GridIssue, lines: Mapping[str, int], overridden: Sequence[str]) -> GridIssue:
    """The issue with the line of its path, or of the nearest enclosing key written in the
    file; none for a value that came from --set (the `overridden` key paths)."""
    if issue.line is not None or not issue.path:
        return issue
    probe = issue.path.split(" (", 1)[0]
    if any(probe == k or probe.startswith((k + ".", k + "[")) for k in overridden):
        return issue
    while probe:
        if probe in lines:
            return dataclasses.replace(issue, line=lines[probe])
        cut = max(probe.rfind("."), probe.rfind("["))
        probe = probe[:cut] if cut > 0 else ""
    return issue
