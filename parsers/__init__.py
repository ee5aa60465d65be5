"""Readers that turn a run's files into rows (`rows.RunRow`).

`events`: the toolkit's own rank files. The other modules read foreign logs left by earlier
benchmark efforts (DLLogger, OneFlow-Benchmark, Megatron-LM, Horovod, ...); `detect` picks one.
"""
