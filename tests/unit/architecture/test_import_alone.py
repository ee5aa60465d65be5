"""Every module of the project imports alone, as the first module of a fresh interpreter: an
import circle that works in one order and fails in another (a name not yet defined half way
round the circle) fails here, whatever order the rest of the suite happens to import in.

One interpreter imports the third-party packages the modules use, then forks once per project
module; each child imports that module and nothing else of the project's, and exits. A fork
starts with none of the project imported, as a fresh interpreter does, and costs milliseconds
where a new interpreter would import torch and pandas again for every module.
`__main__` modules are left out (importing one runs its command), and so is the store's
Alembic `env.py` (a script Alembic runs with its own context, not a module). A module that
needs a package this interpreter lacks (the OneFlow workloads, which run in their own venv) is
reported as skipped, not failed.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.architecture.test_imports import ROOT, module_name, sources

PRELOAD = ("numpy", "pandas", "yaml", "rich", "sqlalchemy", "re2", "orjson", "statistics",
           "torch")
"""Third-party packages imported once before forking, where installed (not the project's)."""

CHILD = r"""
import importlib, json, os, sys, traceback
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
names = json.loads(sys.argv[2])
assert not [m for m in sys.modules if m.split(".")[0] in ("toolkit", "parsers", "topology")]
report = {"failed": {}, "skipped": {}}
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            message = ""
        except ModuleNotFoundError as err:
            top = (err.name or "").split(".")[0]
            message = ("skip:" if top not in ("toolkit", "parsers", "topology") else "fail:") \
                + traceback.format_exc(limit=-3)
        except BaseException:
            message = "fail:" + traceback.format_exc(limit=-3)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        message = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    if message.startswith("skip:"):
        report["skipped"][name] = message[5:]
    elif message or status:
        report["failed"][name] = message[5:] or f"exit status {status}"
print(json.dumps(report))
"""


def modules() -> list[str]:
    return [module_name(p) for p in sources()
            if p.name != "__main__.py" and p.parent.name != "migrations"]


def test_every_module_imports_alone() -> None:
    names = modules()
    assert len(names) > 150
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(PRELOAD), json.dumps(names)], cwd=ROOT,
        capture_output=True, text=True, check=False, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    failed = report["failed"]
    assert not failed, "\n\n".join(f"{name}:\n{text}" for name, text in sorted(failed.items()))
    # only the OneFlow workloads may need what this interpreter lacks
    assert all(".oneflow" in name for name in report["skipped"]), report["skipped"]
