"""Executors run (case, repeat) pairs: `local` (mpirun on this machine, the embedded default)
and, with a real scheduler, `slurm`. Each checks its own limits before anything runs."""

EXECUTORS = ("auto", "local", "slurm")
