"""Run a program under `mpirun` on this machine with each rank's output kept apart, so that a
failure shows what every rank printed, not only the tail of their interleaved streams (where
one rank's long traceback hides the line of the rank that died first)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

TAIL = 2500
"""Characters of each rank's stderr quoted in a failure."""


def mpirun_prefix(ranks: int, out_dir: Path) -> list[str]:
    """`mpirun` for `ranks` local CPU ranks writing each rank's stdout and stderr under
    `out_dir` (skips the test where Open MPI is not installed)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not installed")
    cmd = [mpirun, "--oversubscribe", "-np", str(ranks), "--bind-to", "none",
           "--output-filename", str(out_dir)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def rank_files(out_dir: Path, stream: str) -> dict[int, Path]:
    """Each rank's `stream` ("stdout" or "stderr") file, by rank."""
    found: dict[int, Path] = {}
    for path in sorted(out_dir.glob(f"**/rank.*/{stream}")):
        try:
            found[int(path.parent.name.split(".", 1)[1])] = path
        except ValueError:
            continue
    return found


def failure_text(proc: subprocess.CompletedProcess[str], out_dir: Path) -> str:
    """The launcher's exit status and own messages, then each rank's last stderr lines."""
    parts = [f"mpirun exited {proc.returncode}", proc.stdout[-TAIL:], proc.stderr[-TAIL:]]
    for rank, path in rank_files(out_dir, "stderr").items():
        text = path.read_text(errors="replace")
        parts.append(f"--- rank {rank} stderr ({len(text)} chars, last {TAIL}) ---")
        parts.append(text[-TAIL:])
    return "\n".join(parts)


def run_ranks(ranks: int, program: list[str], out_dir: Path, env: dict[str, str],
              cwd: Path | None = None, timeout: float = 600) -> dict[int, str]:
    """Run `program` on `ranks` ranks with every rank's Python fault handler on (a rank that
    aborts prints its Python stack); asserts it exits 0, quoting every rank's output if not.
    Returns each rank's stdout, by rank."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**env, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run(mpirun_prefix(ranks, out_dir) + program, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, failure_text(proc, out_dir)
    stdout = {rank: path.read_text() for rank, path in rank_files(out_dir, "stdout").items()}
    assert sorted(stdout) == list(range(ranks)), f"rank output files: {sorted(stdout)}"
    return stdout
