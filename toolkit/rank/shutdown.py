"""How a rank process ends once everything it records is written.

A normal interpreter exit tears down every module and runs the C++ destructors of the framework
(the CUDA context, the caching allocator's blocks, the compiled graphs) one by one: seconds per
run on a GPU, paid by every run of a grid after its results exist. `exit_now` keeps what a
process owes the outside: buffered output is flushed, the `atexit` handlers run (the
framework's own shutdown, Inductor's compile workers told to stop, the event files closed), MPI
is finalized so the launcher sees a clean end; then the process ends at once, and the operating
system and the GPU driver release its memory as they do for any process that ends.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing reaches it
            stream.flush()


def exit_now(code: int) -> NoReturn:
    """End the process with `code` after its output, `atexit` handlers and MPI are done,
    skipping the interpreter's teardown of the modules."""
    _flush()
    atexit._run_exitfuncs()
    mpi = sys.modules.get("mpi4py.MPI")  # never initialise MPI only to finalise it
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    _flush()  # what the handlers printed
    os._exit(code)
