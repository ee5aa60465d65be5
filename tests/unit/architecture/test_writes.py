"""Every write of the toolkit under a results directory goes through results/safe_write.py (no
symbolic link followed, atomic where a reader may look). A plain `write_text`, `mkdir`, `open(...,
"w")`, `os.open(..., O_CREAT)`, rename or savefig anywhere else in toolkit/ fails this test,
unless it is listed below with why it cannot reach a results directory or is safe there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

WRITES = {"write_text", "write_bytes", "mkdir", "makedirs", "rename", "replace", "rmtree",
          "move", "copy", "copyfile", "copytree", "savefig", "symlink", "link", "touch"}

#: file -> the write calls allowed there, and why.
ALLOWED: dict[str, tuple[set[str], str]] = {
    "toolkit/results/safe_write.py": (WRITES | {"open"}, "the primitive itself"),
    "toolkit/results/layout.py": ({"rename", "mkdir"},
                                  "CaseDir.prepare_run: os.rename/os.mkdir relative to a "
                                  "descriptor from open_dir_below"),
    "toolkit/localslurm/daemons.py": (WRITES | {"open"}, "the local cluster's own state "
                                      "directory, never a results directory"),
    "toolkit/localslurm/accounting.py": (WRITES | {"open"}, "the local cluster's state"),
    "toolkit/localslurm/processes.py": ({"open", "mkdir"}, "daemon logs in the cluster's "
                                        "state; the empty cgroup slice slurmd's scopes need"),
    "toolkit/localslurm/statedir.py": ({"mkdir", "open"}, "the cluster's state directory "
                                       "(checked before use) and its lock, O_NOFOLLOW"),
    "toolkit/workloads/pytorch/gpt_check.py": ({"write_text"}, "--out FILE of a standalone "
                                               "check, named by the user, not under results"),
    "toolkit/workloads/pytorch/gpt_profile.py": ({"write_text"}, "--out FILE, as gpt_check"),
    "toolkit/submit.py": ({"rmtree"}, "the dry run's own dry-run/ folder; shutil.rmtree "
                          "refuses a link and removes with descriptors"),
    "toolkit/report/plots.py": ({"savefig"}, "into a BytesIO, then atomic_write_bytes"),
    "toolkit/analysis/summary.py": ({"rename"}, "pandas Series.rename, no file"),
    "toolkit/results/archive.py": ({"open"}, "tarfile.open onto the file of "
                                   "safe_write.atomic_writer"),
    "toolkit/store/ingest.py": ({"copy"}, "psycopg's COPY into a database table, no file"),
    "toolkit/store/pgserver.py": ({"rmtree"}, "its own temporary directory (mkdtemp), never "
                                  "a results directory"),
}

WRITE_MODE = re.compile(r"['\"][^'\"]*[wax+][^'\"]*['\"]")


def write_calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        text = ast.unparse(node)
        if name in ("replace", "rename"):
            # os.replace/os.rename, or Path.replace/rename(target): one argument, no keywords
            # (str.replace takes two, dataclasses.replace takes keywords)
            owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            if owner == "os" or (owner and len(node.args) == 1 and not node.keywords):
                found.append((node.lineno, name, text))
        elif name in WRITES:
            found.append((node.lineno, name, text))
        elif name == "open" and isinstance(func, ast.Attribute) and ast.unparse(
                func.value) == "os":
            if re.search(r"O_(CREAT|WRONLY|RDWR|APPEND|TRUNC)", text):
                found.append((node.lineno, "open", text))
        elif name in ("open", "fdopen") and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str)
                and WRITE_MODE.fullmatch(repr(a.value)) for a in [*_mode_args(node),
                                                                  *(k.value for k in node.keywords
                                                                    if k.arg == "mode")]):
            if name == "fdopen":  # of a descriptor: where it came from is what counts
                continue
            found.append((node.lineno, "open", text))
    return found


def _mode_args(node: ast.Call) -> list[ast.expr]:
    """Where an open call's mode is: `open(f, MODE)`, `os.fdopen(fd, MODE)`, or a path's own
    `path.open(MODE)`."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "open" and ast.unparse(
            func.value) not in ("io", "builtins", "codecs", "gzip", "tarfile"):
        return node.args[0:1]
    return node.args[1:2]


def test_the_check_sees_every_kind_of_plain_write():
    code = ("p.write_text('x')\nd.mkdir()\nopen(f, 'w')\nos.open(f, os.O_WRONLY | os.O_CREAT)\n"
            "os.replace(a, b)\ntmp.rename(final)\nfig.savefig(path)\nopen(f)\n"
            "os.open(f, os.O_RDONLY)\ns.replace('a', 'b')\ndataclasses.replace(c, x=1)\n"
            "log_path.open('wb')\nlog_path.open()")
    found = sorted(write_calls(ast.parse(code)))
    assert [name for _, name, _ in found] == [
        "write_text", "mkdir", "open", "open", "replace", "rename", "savefig", "open"]


def test_no_plain_write_outside_the_safe_primitive():
    offenders = []
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = ALLOWED.get(rel, (set(), ""))[0]
        for line, name, text in write_calls(ast.parse(path.read_text())):
            if name not in allowed:
                offenders.append(f"{rel}:{line}: {text}")
    assert not offenders, ("write through toolkit.results.safe_write (or list the call in "
                           f"ALLOWED with why it is safe): {offenders}")
