"""`python -m toolkit.status results/<grid> [--watch]`: where every run of a grid stands.

Each (case, repeat) is in one state, decided from the run files first (they are the truth and
survive a controller restart), then the scheduler:

- `finished` / `failed` / `timeout`: its `status.json` says so (failed runs give the reason:
  the program's error, a killed rank, a node failure, a preemption; and the log);
- `running` / `pending`: its latest job is in `squeue` (pending shows Slurm's reason), also
  when the last attempt failed and Slurm requeued the job (node failure, preemption);
- `cancelled`: `toolkit.cancel` or `scancel` cancelled its job;
- `lost`: its job left the queue without writing a status (killed before its script could);
  `sacct` names the job's end state when accounting is on. A run started outside Slurm (the
  local executor, `run_local.sh`) is lost when the process that started it on this host has
  ended (or its pid now belongs to another process) without writing a status; a run started
  on another host stays `running`, with a note that this host cannot check it;
- `preflight`: its job ended before training because the job's preflight found a node not ok
  (`preflight: {on_fail: stop | skip_node}`); the reason names the node and the figure;
- `unknown`: its job has no status yet and Slurm did not answer (controller down or
  restarting): not called lost, since it may still be running;
- `not submitted`: nothing ran or was submitted for it yet.

`--watch` redraws the counts with a progress bar until nothing is pending or running (a lost
run is done).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from toolkit import interruptible
from toolkit.launch.run_states import render, run_states, watch
from toolkit.launch.slurm_client import SlurmClient
from toolkit.report import terminal
from toolkit.results.layout import is_results_dir


@interruptible
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainbench status", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of a grid")
    p.add_argument("--watch", action="store_true", help="refresh until no run is pending or "
                                                        "running; exit 0 if all finished")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between refreshes")
    p.add_argument("--timeout", type=float, default=None, help="stop watching after S seconds")
    args = p.parse_args(argv)
    console = terminal.console()
    if not is_results_dir(args.results):
        print(f"{args.results}: not a results directory (no .trainbench-results marker, no "
              "cases/<id>/case.json)", file=sys.stderr)
        return 2
    # Ask Slurm whenever its client is here: a controller that does not answer makes runs
    # `unknown` (run_states), never `lost`.
    # No retries of our own: a silent controller already costs each call Slurm's own ~10 s
    # of connecting (MessageTimeout), and status should answer, not wait out an outage.
    slurm = SlurmClient(retries=0) if shutil.which("squeue") else None
    if args.watch:
        return watch(args.results, slurm, console, args.interval, args.timeout)
    states, note = run_states(args.results, slurm)
    render(args.results, states, note, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
