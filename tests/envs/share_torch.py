"""Lend this interpreter's torch to another virtual environment without copying it.

    python tests/envs/share_torch.py VENV

Run with the main venv's Python. Links every top-level file and folder of the `torch`
distribution and of the distributions it requires (recursively) into `VENV/shared-torch/`, and
appends that folder to VENV's `sys.path` with a `.pth` file, after VENV's own site-packages.
Only torch's closure is lent: a whole site-packages on the path would also lend packages that
VENV's programs detect and import as optional extras (torchmetrics imports transformers when it
finds one), at versions they were not installed with.
"""

from __future__ import annotations

import importlib.metadata as md
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(root: str) -> list[md.Distribution]:
    """`root` and every distribution it requires on this platform, without extras."""
    seen: dict[str, md.Distribution] = {}
    todo = [root]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = md.distribution(name)
        seen[name] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def top_level(dist: md.Distribution) -> set[str]:
    """The entries of site-packages that `dist` installed (its packages, modules, metadata)."""
    names = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first != ".." and not first.endswith(".pth") and first != "__pycache__":
            names.add(first)
    return names


def main(argv: list[str] | None = None) -> int:
    [venv] = argv if argv is not None else sys.argv[1:]
    target = Path(venv).absolute() / "shared-torch"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    site = Path(md.distribution("torch").locate_file("")).absolute()
    names = set().union(*(top_level(dist) for dist in closure("torch")))
    for name in sorted(names):  # a namespace folder (nvidia/) is shared by several
        if (site / name).exists():
            (target / name).symlink_to(site / name)
    purelib = subprocess.run(
        [str(Path(venv) / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "shared_torch.pth").write_text(f"{target}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
