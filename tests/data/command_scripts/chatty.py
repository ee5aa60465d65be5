"""A training loop that prints far more than its step lines, as programs with per-layer or
per-metric logging do (a DLLogger-style run printing thousands of lines a step): each step does
`--step-ms` of work (a busy loop: it measures the CPU it gets, not a sleep), prints
`--lines-per-step` lines of chatter and one Megatron-LM step line
(` iteration N/ T | consumed samples: ... | elapsed time per iteration (ms): ... |`).

At its end it prints `chatty: <lines> lines in <seconds> s`, the wall time of its own loop, so
that its time alone and under a reader can be compared (`benchmarks/command_reader.py`).
"""

import argparse
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--lines-per-step", type=int, default=1000)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    out = sys.stdout
    lines = 0
    began = time.perf_counter()
    for i in range(args.iters):
        start = time.perf_counter()
        while time.perf_counter() - start < args.step_ms / 1000.0:
            pass
        for k in range(args.lines_per_step):
            out.write(f"[layer {k:5d}] grad_norm=0.{k:06d} act_mean=1.{i:06d} "
                      "weight_norm=12.345678 update_ratio=0.001234\n")
        step_ms = (time.perf_counter() - start) * 1000.0
        out.write(f" iteration {i + 1:8d}/{args.iters:8d} | consumed samples: "
                  f"{(i + 1) * args.batch_size:12d} | elapsed time per iteration (ms): "
                  f"{step_ms:.1f} | learning rate: 1.000E-02 | global batch size: "
                  f"{args.batch_size:5d} | lm loss: 1.000000E+00 |\n")
        lines += args.lines_per_step + 1
    out.flush()
    print(f"chatty: {lines} lines in {time.perf_counter() - began:.4f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
