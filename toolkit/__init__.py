"""trainbench: YAML grids of training benchmarks -> Slurm/MPI jobs -> result tables.

The commands sit at the top (`submit`, `collect`, `status`, `cancel`, `gpt_table`, and `worker`
and `runstate`, which the generated job scripts call); the stages are folders, in the order
they may import each other: `spec` (case and grid), `analysis` (arithmetic over runs),
`results` (the results directory: layout, event schema, reading runs), `rank` (what one rank
does about itself), `workloads`, `launch` (executors, launcher, Slurm), `report` (tables, plots,
HTML), and `localslurm` (a local cluster for tests and laptops).
"""

from pathlib import Path

__version__ = "0.1.0"

PROJECT_ROOT = Path(__file__).resolve().parents[1]
"""The directory that holds `toolkit/`: on PYTHONPATH of every rank the executors start."""
