"""benchmarks/README.md is where a newcomer finds every measurement: each file of benchmarks/ is
named in it, each question's figure link points at a table of today's figures in
docs/BENCHMARKS.md, every link to that page at an anchor that exists, and each `gpu.sh` part it
gives is one the runner has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "benchmarks" / "README.md"


def test_every_file_of_benchmarks_is_named():
    text = README.read_text()
    files = sorted(p.name for p in (ROOT / "benchmarks").iterdir()
                   if p.is_file() and p.name not in ("README.md", "__init__.py"))
    assert len(files) > 20
    missing = [name for name in files if f"`{name}" not in text]
    assert not missing, f"benchmarks/README.md does not name {missing}"


def test_every_figure_link_points_at_a_table_of_today():
    text = README.read_text()
    page = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    anchors = set(re.findall(r"\{ #([\w-]+) \}", page))
    link = r"\(\.\./docs/BENCHMARKS\.md#([\w-]+)\)"
    figures = re.findall(r"^Figure: \[[^]]+\]" + link, text, re.M)
    assert len(figures) >= 9
    assert all(anchor.startswith("today-") for anchor in figures), figures
    # and each of today's tables is some question's figure
    assert {a for a in anchors if a.startswith("today-")} <= set(figures)
    missing = sorted(set(re.findall(link, text.replace("\n", " "))) - anchors)
    assert not missing, f"no such anchor in docs/BENCHMARKS.md: {missing}"


def test_every_gpu_part_named_is_one_the_runner_has():
    text = README.read_text()
    parts = set(re.findall(r"gpu\.sh ([a-z][a-z-]+)", text))
    assert {"table", "scaling", "own-script", "preflight", "startup-grid"} <= parts
    runner = (ROOT / "benchmarks" / "gpu.sh").read_text()
    # the runner's one list of parts: `  table|scaling|...) ;;`
    (known,) = re.findall(r"^  ([a-z|-]+)\) ;;$", runner, re.M)
    assert not sorted(parts - set(known.split("|")))


def test_the_runner_refuses_an_unknown_part():
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "tabel"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert run.returncode == 2 and "unknown part 'tabel'" in run.stderr
    assert "table" in run.stderr  # the usage, with every part
