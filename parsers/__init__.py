"""Readers that turn a run's files into rows (`rows.RunRow`).

`events`: the toolkit's own rank files; `launcher` and `failure`: why a run failed, rank by
rank, from its rank files and mpirun's or srun's messages. The other modules read foreign
logs left by earlier benchmark efforts (DLLogger, OneFlow-Benchmark, Megatron-LM, Horovod,
PaddlePaddle BERT, HugeCTR, MXNet BERT, OneFlow InsightFace, MLPerf logging, ...); `detect`
picks one. `nccl_tests` (collective bus bandwidth tables) and `nvidia_smi` (GPU
health from `nvidia-smi -q` dumps) read what a preflight measures, from files people already
have, into records of their own rather than run rows. `logtext` is how all of them read a file:
line by line within stated limits, with RE2 patterns whose time is linear in the text.
"""
