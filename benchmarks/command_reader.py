"""Does reading a program's output slow the program? A program that prints tens of thousands of
lines a second (tests/data/command_scripts/chatty.py: a busy step, then `--lines-per-step` lines
of chatter and one Megatron-LM step line) timed by itself, alone (its output to a file) and
under trainbench's reader (`toolkit.workloads.command.run`, what every rank of a `model:
command` case runs: the pump thread, the family prefilter, the parse), alternating. Prints each
pair, the medians, the ratio reader / alone and the lines per second; no MPI, no GPU.

    python benchmarks/command_reader.py --pairs 7 --out reader.json

The program's own loop time (it prints `chatty: N lines in T s`) is compared, not the process's
start-up: what a reader could slow is the program's printing. Both sides run it with
PYTHONUNBUFFERED=1, as trainbench does (each line is written when printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHATTY = ROOT / "tests" / "data" / "command_scripts" / "chatty.py"
_OWN_TIME = re.compile(r"chatty: (\d+) lines in ([\d.]+) s")


def _own_time(text: str) -> tuple[int, float]:
    match = _OWN_TIME.search(text)
    if match is None:
        raise SystemExit(f"the program printed no `chatty: ... lines in ... s` line: {text[-500:]}")
    return int(match[1]), float(match[2])


def _argv(args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(CHATTY), "--iters", str(args.iters), "--lines-per-step",
            str(args.lines_per_step), "--step-ms", str(args.step_ms)]


def alone(args: argparse.Namespace, work: Path) -> float:
    log = work / "alone.log"
    with log.open("wb") as out:  # unbuffered, as trainbench runs it: the reader is the change
        subprocess.run(_argv(args), stdout=out, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return _own_time(log.read_text())[1]


def under_reader(args: argparse.Namespace, work: Path, n: int) -> tuple[float, dict[str, object]]:
    from toolkit.rank.discovery import RankInfo
    from toolkit.spec import Case
    from toolkit.workloads import command

    case = Case.from_dict({
        "model": "command", "warmup_iterations": 1, "measured_iterations": args.iters - 1,
        "command": {"argv": _argv(args)[1:], "interpreter": sys.executable,
                    "workdir": str(work), "log_format": args.log_format}})
    info = RankInfo(rank=0, world_size=1, local_rank=0, local_size=1, node_index=0,
                    num_nodes=1, host="localhost", hosts=("localhost",),
                    master_addr="127.0.0.1", master_port=29500)
    run_dir = work / f"r{n}"
    run_dir.mkdir()
    cpu = time.process_time()
    _, summary = command.run(case, "bench", info, run_dir, n, None, 0, lambda *_: None)
    cpu = time.process_time() - cpu  # the reader's: its thread, the parse (not the child's)
    lines, own_s = _own_time((run_dir / "program-rank000.log").read_text())
    run = summary["command"]
    return own_s, {"lines": lines, "records": run["records"], "reader_cpu_s": round(cpu, 3),
                   "lines_not_parsed": run.get("lines_not_parsed"),
                   "measured_by": run["measured_by"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--iters", type=int, default=200, help="steps of the program")
    parser.add_argument("--lines-per-step", type=int, default=1000)
    parser.add_argument("--step-ms", type=float, default=19.0)
    parser.add_argument("--log-format", default="auto")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    pairs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trainbench-reader-") as tmp:
        work = Path(tmp)
        for n in range(args.pairs):
            a = alone(args, work)
            r, run = under_reader(args, work, n)
            pairs.append({"alone_s": a, "reader_s": r, **run})
            print(f"pair {n}: alone {a:.4f} s, under the reader {r:.4f} s "
                  f"(x{r / a:.4f}); {run}", flush=True)
    lines = int(pairs[0]["lines"])
    a_med = statistics.median(p["alone_s"] for p in pairs)
    r_med = statistics.median(p["reader_s"] for p in pairs)
    ratios = [p["reader_s"] / p["alone_s"] for p in pairs]
    result = {
        "program": " ".join(_argv(args)[1:]), "lines": lines, "pairs": pairs,
        "alone_median_s": a_med, "reader_median_s": r_med,
        "lines_per_s_alone": lines / a_med, "ratio_of_medians": r_med / a_med,
        "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
        "max_ratio": max(ratios), "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(), "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    print(f"{lines} lines, {lines / a_med:,.0f} lines/s alone: median alone {a_med:.4f} s, "
          f"under the reader {r_med:.4f} s; reader / alone: median of pairs "
          f"{result['median_ratio']:.4f} (range {min(ratios):.4f} .. {max(ratios):.4f})")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
