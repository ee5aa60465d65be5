"""A training loop that prints its progress as torchvision's classification reference
(`references/classification/train.py`, its `MetricLogger.log_every`) does: on rank 0 only, with
`img/s` the rate of its own process (`batch_size / (time.time() - start_time)`), as
`Epoch: [0]  [ 10/100]  eta: 0:00:05  lr: 0.1  img/s: 27.6412 (27.1034)  loss: 6.9 (6.9) ...`.

Each step sleeps `--step-ms`; no framework is imported (each rank is on its own, as data-parallel
ranks in step are). Run unchanged by trainbench's tests under `model: command`.
"""

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--step-ms", type=float, default=20.0)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    rates: list[float] = []
    for i in range(args.iters):
        start = time.time()
        time.sleep(args.step_ms / 1000.0)
        rates.append(args.batch_size / (time.time() - start))
        if rank == 0:
            median = sorted(rates)[len(rates) // 2]
            print(f"Epoch: [0]  [{i:3d}/{args.iters}]  eta: 0:00:01  lr: 0.1  "
                  f"img/s: {median:.4f} ({sum(rates) / len(rates):.4f})  loss: 6.9 (6.9)  "
                  f"acc1: 0.0 (0.0)  acc5: 0.0 (0.0)  time: {args.step_ms / 1000:.4f}  "
                  "data: 0.0001  max mem: 0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
