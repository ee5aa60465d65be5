"""The layout's rules, checked on the source: no import cycle, no stage importing a later one,
`parsers/` and `topology/` importing nothing from `toolkit`, executors told apart only inside
`launch/`.

Every import counts, at module level or inside a function. Those under `if TYPE_CHECKING:`
(annotations only, never run) count for the cycle check, where a type-only circle still ties two
modules together, and not for the stage order. That every module imports alone, in a fresh
interpreter, is tests/unit/architecture/test_import_alone.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("toolkit", "parsers", "topology")

#: The import order of toolkit's stages: a module may import its own stage and earlier ones.
#: It is not the order data flows in: the results layout is used by launch and by every rank
#: before any result exists, and reading a run uses analysis' arithmetic for its figures.
STAGES = ("spec", "analysis", "results", "store", "rank", "probes", "workloads", "launch", "report",
          "localslurm", "commands")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def runtime_imports(path: Path, type_only: bool = False) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every import that can run, and with `type_only` those under
    `if TYPE_CHECKING:` too."""
    tree = ast.parse(path.read_text())
    annotations_only: set[int] = set()
    for node in ast.walk(tree):
        if (not type_only and isinstance(node, ast.If)
                and "TYPE_CHECKING" in ast.unparse(node.test)):
            annotations_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                # `from pkg import module` imports pkg.module
                yield (f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base,
                       node.lineno)


def _is_module(name: str) -> bool:
    path = ROOT / Path(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def graph(type_only: bool = False) -> dict[str, set[str]]:
    """module -> the project's modules it imports (with `type_only`, under TYPE_CHECKING too)."""
    out: dict[str, set[str]] = {}
    for path in sources():
        out[module_name(path)] = {m for m, _ in runtime_imports(path, type_only)
                                  if m.split(".")[0] in PACKAGES and _is_module(m)}
    return out


def stage(module: str) -> str | None:
    """The stage of a toolkit module: its folder, or `commands` for the modules at the top."""
    parts = module.split(".")
    if parts[0] != "toolkit" or len(parts) == 1:
        return None
    return parts[1] if (ROOT / "toolkit" / parts[1]).is_dir() else "commands"


def test_every_toolkit_module_has_a_stage() -> None:
    unknown = {m for m in graph() if m.startswith("toolkit.") and stage(m) not in STAGES}
    assert not unknown, f"modules outside the stages {STAGES}: {sorted(unknown)}"


def test_no_stage_imports_a_later_one() -> None:
    wrong = []
    for module, imported in graph().items():
        here = stage(module)
        for other in imported:
            there = stage(other)
            if here and there and STAGES.index(there) > STAGES.index(here):
                wrong.append(f"{module} ({here}) imports {other} ({there})")
            if here == "commands" and there == "commands" and other not in ("toolkit",):
                wrong.append(f"command {module} imports command {other}")
    assert not wrong, "\n".join(sorted(wrong))


@pytest.mark.parametrize("package", ["parsers", "topology"])
def test_readers_import_nothing_from_toolkit(package: str) -> None:
    wrong = [f"{m} imports {o}" for m, imported in graph().items() if m.split(".")[0] == package
             for o in imported if o.split(".")[0] == "toolkit"]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    """Type-only imports included: a circle of annotations is still two modules that cannot be
    understood, or moved, one without the other."""
    g = graph(type_only=True)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                cycles.append(" -> ".join([*path[path.index(n):], n]))
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    # a package's __init__ re-exporting its own modules is not a cycle in the stage sense,
    # but a module importing its package back is: both are reported
    assert not cycles, "\n".join(cycles)


def test_executors_are_told_apart_only_inside_launch() -> None:
    wrong = []
    for path in sources():
        if stage(module_name(path)) == "launch":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance" and "Executor" in ast.unparse(node.args[1])):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not wrong, "\n".join(wrong)
