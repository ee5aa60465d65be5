"""A training loop that starts a helper process first (a logger, a telemetry daemon) which
inherits its stdout and outlives it, then trains, prints a step line each step
(`step i/N loss L speed S samples/s`) and exits 0: the helper keeps the program's output open.
It prints the helper's pid (`helper pid N`) and its own (`program pid N`) so that a test can
check they were ended. `--hang` makes it stop after its steps instead of exiting.
"""

import argparse
import os
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--hang", action="store_true")
    args = p.parse_args()
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"helper pid {helper.pid} program pid {os.getpid()}", flush=True)
    for i in range(args.iters):
        start = time.time()
        time.sleep(0.01)
        print(f"step {i + 1}/{args.iters} loss 1.0 speed "
              f"{args.batch_size / (time.time() - start):.1f} samples/s", flush=True)
    while args.hang:
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
