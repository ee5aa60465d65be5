"""exit_now: the process's exit code, output and atexit handlers survive; the interpreter's
teardown of modules does not run; MPI is finalized only where it was started."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
import atexit, sys
from pathlib import Path
from toolkit.rank.shutdown import exit_now

out = Path(sys.argv[1])

class Torn:
    def __del__(self):  # runs when the interpreter tears the module down
        (out / "torn-down").write_text("yes")

kept = Torn()
atexit.register(lambda: (out / "atexit").write_text("ran"))
atexit.register(lambda: print("printed by a handler"))
{before}
print("buffered, never flushed by hand", end="")
sys.stderr.write("to stderr")
exit_now(7)
print("after exit")
"""


def run(tmp_path: Path, before: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(PROGRAM.format(before=before)))
    return subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_exit_code_output_and_handlers_kept_teardown_skipped(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 7
    assert done.stdout == "buffered, never flushed by handprinted by a handler\n"
    assert done.stderr == "to stderr"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "torn-down").exists()


def test_mpi_started_is_finalized_after_the_handlers(tmp_path: Path) -> None:
    # The launcher reports a rank that ends without MPI_Finalize as an unclean end.
    before = textwrap.dedent("""
        from mpi4py import MPI
        atexit.register(lambda: (out / "in-handler").write_text(str(MPI.Is_finalized())))
        real = MPI.Finalize
        def finalize():
            real()
            (out / "finalized").write_text(str(MPI.Is_finalized()))
        MPI.Finalize = finalize
    """)
    done = run(tmp_path, before)
    assert done.returncode == 7, done.stderr
    assert (tmp_path / "in-handler").read_text() == "False"  # MPI still up for the handlers
    assert (tmp_path / "finalized").read_text() == "True"


def test_mpi_never_started_is_left_alone(tmp_path: Path) -> None:
    done = run(tmp_path, "atexit.register(lambda: print('mpi:', 'mpi4py.MPI' in sys.modules))")
    assert done.returncode == 7
    assert "mpi: False" in done.stdout
