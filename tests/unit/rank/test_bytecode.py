"""The grid's Python bytecode cache: used only where the framework was installed without
bytecode, with real imports in a fresh interpreter (the prefix is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit import PROJECT_ROOT
from toolkit.rank.bytecode import installed_without_bytecode, use_bytecode_cache

SCRIPT = """
import json, os, sys
from pathlib import Path
from toolkit.rank.bytecode import use_bytecode_cache
record = use_bytecode_cache(Path(sys.argv[1]), Path(sys.argv[2]), "fakefw")
import fakefw.layers
print(json.dumps({"record": record, "prefix": sys.pycache_prefix,
                  "env": os.environ.get("PYTHONPYCACHEPREFIX"),
                  "value": fakefw.layers.VALUE}))
"""


def package(site: Path, with_bytecode: bool = False) -> Path:
    """A framework package `fakefw` (two modules) under `site`, installed without bytecode
    unless `with_bytecode`."""
    pkg = site / "fakefw"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("NAME = 'fakefw'\n")
    (pkg / "layers.py").write_text("VALUE = 42\n")
    if with_bytecode:
        import py_compile

        for source in pkg.glob("*.py"):
            py_compile.compile(str(source), doraise=True)
    return pkg


def rank(site: Path, results: Path, *env: tuple[str, str]) -> dict:
    cache = results / "compile-cache" / "python-bytecode"
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    environ.update(PYTHONPATH=os.pathsep.join([str(site), str(PROJECT_ROOT)]), **dict(env))
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(cache), str(results)], env=environ,
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def mirrored(cache: Path, source: Path) -> list[Path]:
    """The bytecode files Python wrote for `source` under the prefix `cache`."""
    below = cache / source.parent.absolute().relative_to("/")
    return sorted(below.glob(f"{source.stem}.*.pyc"))


def test_a_framework_without_bytecode_gets_the_grids_cache_and_children_inherit_it(tmp_path):
    pkg = package(tmp_path / "site")
    pkg.chmod(0o555)  # a read-only installation, as in a container image
    try:
        results = tmp_path / "res"
        cache = results / "compile-cache" / "python-bytecode"
        # PYTHONDONTWRITEBYTECODE keeps the installation clean; the grid's cache is ours
        out = rank(tmp_path / "site", results, ("PYTHONDONTWRITEBYTECODE", "1"))
        assert out["record"] == {"directory": str(cache),
                                 "reason": "fakefw is installed without bytecode"}
        assert out["prefix"] == out["env"] == str(cache) and out["value"] == 42
        assert mirrored(cache, pkg / "__init__.py") and mirrored(cache, pkg / "layers.py")
        assert not (pkg / "__pycache__").exists()
        # the next run reads what the first wrote: the files are not written again
        first = {p: p.stat().st_mtime_ns for p in mirrored(cache, pkg / "layers.py")}
        out = rank(tmp_path / "site", results)
        assert out["value"] == 42
        assert {p: p.stat().st_mtime_ns for p in mirrored(cache, pkg / "layers.py")} == first
    finally:
        pkg.chmod(0o755)


def test_a_framework_with_its_bytecode_is_left_alone(tmp_path):
    package(tmp_path / "site", with_bytecode=True)
    results = tmp_path / "res"
    out = rank(tmp_path / "site", results)
    assert out["record"] == {"directory": None, "reason": "fakefw is installed with its bytecode"}
    assert out["prefix"] is None and out["env"] is None
    assert not results.exists()


def test_a_prefix_the_user_set_wins(tmp_path):
    package(tmp_path / "site")
    mine = tmp_path / "my-pycache"
    out = rank(tmp_path / "site", tmp_path / "res", ("PYTHONPYCACHEPREFIX", str(mine)))
    assert out["record"] == {"directory": None, "reason": f"PYTHONPYCACHEPREFIX is set: {mine}"}
    assert out["prefix"] == str(mine) and not (tmp_path / "res").exists()


def test_a_link_planted_in_the_results_directory_is_not_written_through(tmp_path):
    package(tmp_path / "site")
    results, outside = tmp_path / "res", tmp_path / "outside"
    results.mkdir()
    outside.mkdir()
    (results / "compile-cache").symlink_to(outside)
    out = rank(tmp_path / "site", results)
    assert out["record"]["directory"] is None
    assert "symbolic link" in out["record"]["reason"] and out["prefix"] is None
    assert list(outside.iterdir()) == []


def test_what_is_not_python_source_is_not_judged(tmp_path, monkeypatch):
    assert installed_without_bytecode("no_such_package_anywhere") is None
    assert installed_without_bytecode("sys") is None  # built in: no source
    before = sys.pycache_prefix
    record = use_bytecode_cache(tmp_path / "c", tmp_path, "no_such_package_anywhere")
    assert record == {"directory": None,
                      "reason": "no_such_package_anywhere is not installed as Python source"}
    assert sys.pycache_prefix == before


@pytest.mark.parametrize("with_bytecode", [False, True])
def test_the_check_reads_the_installation_not_a_prefix(tmp_path, monkeypatch, with_bytecode):
    package(tmp_path / "site", with_bytecode=with_bytecode)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "elsewhere"))
    assert installed_without_bytecode("fakefw") is (not with_bytecode)
    assert sys.pycache_prefix == str(tmp_path / "elsewhere")
