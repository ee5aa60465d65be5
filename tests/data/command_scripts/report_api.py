"""A user's training loop that reports its steps through `trainbench.report` (exact figures:
samples of each step and its loss), and prints nothing the importer reads."""

import os
import sys
import time

from trainbench import report


def main() -> int:
    batch, iters = int(sys.argv[1]), int(sys.argv[2])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    print("training without a log format of any framework", flush=True)
    for i in range(iters):
        time.sleep(0.005)
        report.step(samples=batch * world, loss=1.0 / (i + 1))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
