"""A training loop with no step limit, as pytorch/examples' ImageNet `main.py --dummy` runs
1.28 M images an epoch whatever is asked: it prints that script's progress line
(`Epoch: [0][ i/N]\tTime t ( avg)\tData ...\tLoss ...`, i 0-based) on rank 0 every step,
forever. `--ignore-term` makes it ignore SIGTERM (only SIGKILL ends it). It prints its pid.
"""

import argparse
import os
import signal
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--ignore-term", action="store_true")
    args = p.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rank = int(os.environ.get("RANK", "0"))
    print(f"rank {rank} pid {os.getpid()}", flush=True)
    total, i = 0.0, 0
    while True:
        start = time.time()
        time.sleep(args.step_ms / 1000.0)
        step = time.time() - start
        total += step
        if rank == 0:
            print(f"Epoch: [0][{i:5d}/10010]\tTime {step:.3f} ({total / (i + 1):.3f})\t"
                  "Data 0.000 (0.000)\tLoss 6.9078e+00 (6.9078e+00)\tAcc@1   0.00 (  0.00)\t"
                  "Acc@5   0.00 (  0.00)", flush=True)
        i += 1


if __name__ == "__main__":
    sys.exit(main())
