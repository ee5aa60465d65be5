"""The documentation: a README that fits one read, and the site in docs/ built strictly by
MkDocs (a broken link, a missing anchor or a page left out of the nav fails the build)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.cli import VERBS

ROOT = Path(__file__).resolve().parents[3]
MKDOCS = Path(sys.executable).parent / "mkdocs"
README = ROOT / "README.md"


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
                          cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    for page in ("index", "guide/grids/index", "verbs/submit/index", "RELIABILITY/index",
                 "BENCHMARKS/index", "guide/own-scripts/index"):
        assert (tmp_path / "site" / f"{page}.html").is_file(), page


BREAKAGES = [
    ("index.md", "[a page that is not there](guide/no-such-page.md)", "no-such-page.md"),
    ("verbs/submit.md", "[a section that is not there](../guide/grids.md#no-such-section)",
     "no-such-section"),
    ("guide/not-in-nav.md", "# A page the nav does not list", "not-in-nav.md"),
]


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """One strict build of a copy of the site with every fault of BREAKAGES: a strict build
    reports every warning before it aborts, so one build shows each."""
    top = tmp_path_factory.mktemp("broken")
    project = top / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project)
    for page, added, _ in BREAKAGES:
        target = project / "docs" / page
        target.write_text((target.read_text() if target.exists() else "") + f"\n\n{added}\n")
    return build(project, top / "site")


@pytest.mark.parametrize(("page", "added", "message"), BREAKAGES)
def test_a_broken_link_an_unknown_anchor_or_a_page_outside_the_nav_fails_the_build(
        broken_build: subprocess.CompletedProcess[str], page: str, added: str,
        message: str) -> None:
    """Each fault is a warning of its own (one per fault, so none hides behind another), and
    any warning fails a strict build."""
    assert broken_build.returncode != 0
    out = broken_build.stdout + broken_build.stderr
    assert f"Aborted with {len(BREAKAGES)} warnings in strict mode" in out, out
    warnings = out.split("WARNING")[1:]
    assert sum(message in w for w in warnings) == 1, (message, out)


def test_the_readme_fits_one_read_and_its_verb_table_is_complete() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 90
    table = {m.group(1) for m in re.finditer(r"^\| \[`([\w-]+)`\]\(docs/verbs/\1\.md\) \|",
                                             text, re.M)}
    assert table == set(VERBS)
    for verb in VERBS:
        assert (ROOT / "docs" / "verbs" / f"{verb}.md").is_file(), verb


def test_the_readme_links_point_at_files() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    missing = [link for link in links if not link.startswith("http")
               and not (ROOT / link).exists()]
    assert not missing


def test_the_readme_example_grid_is_a_valid_grid(tmp_path: Path) -> None:
    """The ten-line example, taken from the README as a reader would copy it, expands and
    writes its scripts in a dry run."""
    grid = re.search(r"^```yaml\n(.*?)^```", README.read_text(), re.M | re.S)
    assert grid is not None
    path = tmp_path / "bert_scaling.yaml"
    path.write_text(grid.group(1))
    assert len(grid.group(1).splitlines()) <= 10
    done = subprocess.run([sys.executable, "-m", "toolkit.submit", "--grid", str(path),
                           "--dry-run", "--executor", "local", "--results", str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "4 cases, 12 runs" in done.stdout + done.stderr
