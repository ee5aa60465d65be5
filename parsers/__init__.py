"""Readers that turn a run's files into rows (`rows.RunRow`).

`events`: the toolkit's own rank files; `launcher` and `failure`: why a run failed, rank by
rank, from its rank files and mpirun's or srun's messages. The other modules read foreign
logs left by earlier benchmark efforts (DLLogger, OneFlow-Benchmark, Megatron-LM, Horovod,
...); `detect` picks one.
"""
