"""What a preflight measures on one rank before a benchmark trusts its hardware.

- `compute`: dense GEMM TFLOP/s over a small shape sweep per precision, device-memory bandwidth
  (copy, triad) and host<->device bandwidth, each timed on the device itself.
- `collectives`: all-reduce, all-gather, reduce-scatter and all-to-all over the job's ranks,
  over each node's ranks and over pairs of nodes, with algbw and busbw as nccl-tests defines
  them; send/receive between the GPUs of a node.
- `health`: NVML's view of the GPU: ECC errors, retired pages and remapped rows, clock event
  (throttle) reasons, power limit, PCIe link versus its maximum, SM clock under load.
- `runner`: the program every rank runs (`python -m toolkit.preflight rank`), which writes
  `probe` events to its rank file.

Every measurement is one `Measurement`: plain data a `probe` event carries and
`toolkit.results.preflight` reads back into a DataFrame.
"""
