"""trainbench: YAML grids of training benchmarks -> Slurm/MPI jobs -> result tables.

Modules: `case` (the Case dataclass), `grid` (YAML -> cases), `submit` (CLI), `executors`
(local mpirun, Slurm), `worker` and `ranks` (on the compute nodes), `workloads`, `events`,
`results` (directory layout), `metrics` (throughput arithmetic), `collect` and `report`.
"""

__version__ = "0.1.0"
