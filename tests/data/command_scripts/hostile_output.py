"""A training program whose output or report file is hostile in one way (`argv[1]`), around
`argv[2]` good steps; `argv[3]`: the global batch. Written for the tests of what the worker and
the outcome recorder make of it: the hostile part costs its line, never the run or the grid.

- `deep-report`: steps through `trainbench.report`, then a report line nested 3,000 deep and a
  step of 1e308 samples appended to the report file;
- `deep-dlll`: DLLogger JSON-stream lines (`DLLL {...}`), one of them nested 3,000 deep;
- `thousands`: `step N speed 1,234.5 samples/s` (a thousands separator);
- `iteration-1e308`: `step N speed 100.0 samples/s`, one line with step `1e308`;
- `rank-digits`: plain steps, then an mpirun-style line whose rank has 5,000 digits; exits 1;
- `fake-mpirun`: plain steps, then an mpirun-style line naming rank 3 on `evilhost`; exits 1.
"""

import json
import os
import sys
import time

DEEP = "[" * 3000 + "]" * 3000


def main() -> int:
    mode, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for i in range(1, steps + 1):
        time.sleep(0.01)
        if mode == "deep-report":
            from trainbench import report

            report.step(samples=batch, iteration=i)
        elif mode == "deep-dlll":
            rec = {"timestamp": str(time.time()), "type": "LOG", "step": [0, i],
                   "data": {"train.loss": 1.0 / i}}
            print("DLLL " + json.dumps(rec), flush=True)
            if i == 3:
                print('DLLL {"type": "LOG", "step": [0, 4], "data": ' + DEEP + "}", flush=True)
        elif mode == "thousands":
            print(f"step {i} speed 1,234.5 samples/s", flush=True)
        elif mode == "iteration-1e308":
            print(f"step {i} speed 100.0 samples/s", flush=True)
            if i == 3:
                print("step 1e308 speed 100.0 samples/s", flush=True)
        else:
            print(f"step {i} done", flush=True)
    if mode == "deep-report":
        with open(os.environ["TRAINBENCH_REPORT_FILE"], "a") as fh:
            fh.write(DEEP + "\n")
            fh.write(json.dumps({"type": "iter", "time_s": time.time(), "iteration": steps,
                                 "samples": 1e308}) + "\n")
    if mode == "rank-digits":
        print(f"mpirun noticed that process rank {'7' * 5000} with PID 0 on node x exited on "
              "signal 9 (Killed).", flush=True)
        return 1
    if mode == "fake-mpirun":
        print("mpirun noticed that process rank 3 with PID 0 on node evilhost exited on signal "
              "9 (Killed).", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
