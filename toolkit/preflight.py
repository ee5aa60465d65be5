"""`python -m toolkit.preflight`: is this node healthy and as fast as it should be?

Every rank measures its GPU (dense GEMM TFLOP/s per precision, memory and host<->device
bandwidth), the collectives over the job's ranks, each node's and pairs of nodes (busbw as
nccl-tests defines it), and reads the GPU's health from NVML; then each figure is judged
against earlier preflights of the same GPU model, its peers and the datasheet: ok, slow or fault
per GPU and per node, with the reason. On a CPU the same runs with gloo and tiny GEMMs.

  python -m toolkit.preflight [--results DIR]                  this machine (mpirun, one rank
                                                               per GPU, or --ranks N on a CPU)
  python -m toolkit.preflight --executor slurm --nodes 4 --gpus-per-node 8 [--partition P]
                              [--nodelist n[1-4]]              a Slurm job over chosen nodes
  python -m toolkit.preflight verdict DIR [--on-fail stop]     judge a preflight again
  python -m toolkit.preflight import FILE...                   nccl-tests / nvidia-smi -q output

A grid runs it in every job with `preflight: {enabled: true, on_fail: warn|skip_node|stop}`.
Each preflight is a directory `preflight/<tag>/` (rank files, verdict.json, exclude.txt: the
nodes not ok as one `--exclude` value, figures.csv, preflight.md, preflight.png). Exit status:
0 every figure judged and every node and link ok; 7 ok as far as judged (some figures could
not be judged: nothing to compare them with, or a host crowded while they were measured; they
are listed); 6 a node or a link not ok (0 or 7 under `--on-fail warn`); 2 bad arguments; 1 the
preflight itself failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from toolkit import interruptible
from toolkit.report import terminal

if TYPE_CHECKING:
    from toolkit.analysis.preflight import Verdict

SUBCOMMANDS = ("rank", "begin", "verdict", "import")


@interruptible
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return {"rank": _rank, "begin": _begin, "verdict": _verdict,
                "import": _import}[argv[0]](argv[1:])
    return _run(argv)


def _parser(sub: str, doc: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"trainbench preflight {sub}".strip(),
                                   description=doc)


def _run(argv: list[str]) -> int:
    from toolkit.launch import preflight as launch
    from toolkit.launch.local import visible_gpu_count
    from toolkit.launch.preflight_slurm import SlurmRun
    from toolkit.spec import Case, CaseError
    from toolkit.spec.grid_source import GridError
    from toolkit.spec.site import find_site, merge_layer

    p = _parser("", __doc__ or "")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--results", type=Path, default=Path("results/preflight"),
                   help="results directory; earlier preflights in it are the baselines "
                        "(default: results/preflight)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local")
    p.add_argument("--ranks", type=int, default=None,
                   help="local: ranks to start (default: one per GPU, or 1 without GPUs)")
    p.add_argument("--nodes", type=int, default=1, help="slurm: nodes to test")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="slurm: ranks per node, one per GPU (default 1)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="slurm: whether to ask for GPUs (auto: sinfo says)")
    p.add_argument("--partition", default=None)
    p.add_argument("--nodelist", default=None, help="slurm: the nodes to test (sbatch -w)")
    p.add_argument("--cpus-per-rank", type=int, default=None,
                   help="slurm: CPUs (and CPU threads) per rank (default: what Slurm gives, 1)")
    p.add_argument("--time-min", type=int, default=15)
    p.add_argument("--on-fail", choices=("warn", "stop"), default="stop",
                   help="stop: exit 6 when a node is not ok (default); warn: exit 0")
    p.add_argument("--site", default=None, metavar="FILE|NAME",
                   help="the site profile: its scheduler defaults, launcher, environment and "
                        "container for the Slurm job, and the figures it expects of its GPUs "
                        "(default $TRAINBENCH_SITE, else none)")
    args = p.parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    root = _results_root(args.results, err)
    if root is None:
        return 2
    try:
        site = find_site(args.site)
    except GridError as e:
        err.print(f"error: invalid site profile\n{e}", markup=False)
        return 2
    if args.executor == "slurm":
        slurm = {"time_min": args.time_min,
                 **({"partition": args.partition} if args.partition else {})}
        wanted = {"num_nodes": args.nodes, "gpus_per_node": args.gpus_per_node or 1,
                  "device": args.device, "cpu_threads": args.cpus_per_rank, "slurm": slurm}
        try:
            case = Case.from_dict(merge_layer(wanted, site.layer()) if site else wanted)
        except CaseError as e:
            err.print(f"error: {e}", markup=False)
            return 2
        directory = launch.begin(root, f"sbatch-{os.getpid()}")
        print(f"preflight {directory}: a Slurm job over {args.nodes} node(s) x "
              f"{case.gpus_per_node} rank(s)", flush=True)
        rc = SlurmRun(case, args.nodelist).run(directory)
    else:
        ranks = args.ranks or max(1, visible_gpu_count())
        directory = launch.begin(root)
        print(f"preflight {directory}: {ranks} rank(s) on this machine", flush=True)
        rc = launch.LocalRun(ranks).run(directory)
    if rc != 0:
        err.print(f"warning: the preflight's ranks exited with status {rc} (see "
                  f"{directory}/output.log); judging what they wrote", markup=False)
    return _verdict([str(directory), "--on-fail", args.on_fail,
                     *(["--site", site.source] if site else [])])


def _results_root(path: Path, err: Console) -> Path | None:
    """The results directory, made and marked ours; None (said on `err`) when it must not be
    written into (a directory of other files, or one reached through a link)."""
    from toolkit.results.layout import MARKER_FILE, MARKER_TEXT, foreign_dir, unsafe_root
    from toolkit.results.safe_write import atomic_write_text, make_dir

    root = Path(os.path.normpath(path))
    unsafe = unsafe_root(root) or foreign_dir(root)
    if unsafe:
        err.print(f"error: --results {unsafe}", soft_wrap=True, markup=False)
        return None
    make_dir(root, root=root)
    atomic_write_text(root / MARKER_FILE, MARKER_TEXT, durable=False, root=root)
    return root


def _rank(argv: list[str]) -> int:
    from toolkit.probes.runner import ProbeOptions, run

    p = _parser("rank", "What every rank of a preflight runs (started by mpirun or srun).")
    p.add_argument("--dir", type=Path, required=True, help="the preflight directory (begin)")
    p.add_argument("--seconds-per-shape", type=float, default=ProbeOptions.seconds_per_shape)
    p.add_argument("--memory-seconds", type=float, default=ProbeOptions.memory_seconds)
    p.add_argument("--no-collectives", action="store_true")
    args = p.parse_args(argv)
    return run(args.dir, ProbeOptions(args.seconds_per_shape, args.memory_seconds,
                                      not args.no_collectives))


def _begin(argv: list[str]) -> int:
    from toolkit.launch.preflight import begin

    p = _parser("begin", "Make a new preflight directory under a case (or results) directory "
                "and print its path.")
    p.add_argument("base", type=Path)
    args = p.parse_args(argv)
    print(begin(args.base))
    return 0


def _verdict(argv: list[str]) -> int:
    from toolkit.analysis.preflight import judge
    from toolkit.launch.preflight import exit_status
    from toolkit.results.preflight import read_earlier, read_preflight, results_root_of, site_of
    from toolkit.spec import CaseError
    from toolkit.spec.grid_source import GridError

    p = _parser("verdict", "Judge a preflight directory: verdict.json, exclude.txt, "
                "figures.csv, preflight.md, preflight.png beside its rank files.")
    p.add_argument("dir", type=Path)
    p.add_argument("--on-fail", choices=("warn", "skip_node", "stop"), default="stop")
    p.add_argument("--site", default=None, metavar="FILE|NAME",
                   help="judge against the figures this site profile expects of its GPUs "
                        "(default: the site of the case whose preflight this is, if any)")
    args = p.parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    directory = args.dir
    if not directory.is_dir():
        err.print(f"error: {directory} is not a preflight directory", markup=False)
        return 2
    try:
        site = site_of(directory, args.site)
    except (GridError, CaseError, OSError, ValueError) as e:
        err.print(f"error: {e}", markup=False)
        return 2
    current = read_preflight(directory)
    if current.empty:
        err.print(f"error: {directory} holds no preflight rank files", markup=False)
        return 1
    root = results_root_of(directory)
    verdict = judge(current, read_earlier(root, but=directory),
                    site.expected_for if site.expected else None)
    _write_and_show(directory, verdict)
    return exit_status(verdict, warn=args.on_fail == "warn")


def _write_and_show(directory: Path, verdict: Verdict) -> bool:
    """The verdict's files beside the rank files, its tables on the terminal and a last line
    saying which nodes and links are not ok, or what was not judged; whether every node and
    link is ok as far as judged."""
    from toolkit.report.preflight import preflight_tables, print_tables, write_preflight

    written = write_preflight(directory, verdict, directory)
    print_tables(preflight_tables(verdict, directory.name), terminal.console())
    print(f"wrote {', '.join(str(w.name) for w in written)} in {directory}")
    unjudged = len(verdict.unjudged)
    inconclusive = sum(u.get("verdict") == "inconclusive" for u in verdict.unjudged)
    left = (f"{unjudged} figure(s) not judged"
            + (f", {inconclusive} of them inconclusive (a crowded host)" if inconclusive else "")
            + ": see 'Not judged'") if unjudged else ""
    if verdict.ok:
        print("preflight: every node ok" + (f" as far as judged; {left}" if left else ""))
    else:
        bad = [*verdict.exclude, *(link.split(":")[0] for link in verdict.links)]
        print(f"preflight: not ok: {', '.join(bad)}"
              + (f" (--exclude={','.join(verdict.exclude)})" if verdict.exclude else "")
              + (f"; {left}" if left else ""))
    return verdict.ok


def _import(argv: list[str]) -> int:
    from toolkit.analysis.preflight import judge
    from toolkit.launch.preflight import begin, exit_status
    from toolkit.results.preflight_import import ImportError_, read_file

    p = _parser("import", "nccl-tests output (text or -J JSON) and nvidia-smi -q dumps (text "
                "or -x XML), judged and tabled like a preflight: a directory "
                "preflight/<tag>-import/ with verdict.json, exclude.txt, figures.csv, "
                "preflight.md and preflight.png.")
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("--results", type=Path, default=Path("results/preflight"))
    args = p.parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    frames = []
    for path in args.files:
        try:
            frame, note = read_file(path)
        except ImportError_ as e:
            err.print(f"error: {e}", markup=False, soft_wrap=True)
            return 2
        frames.append(frame)
        if note:
            err.print(f"warning: {path}: {note}", markup=False, soft_wrap=True)
    import pandas as pd

    current = pd.concat(frames, ignore_index=True)
    root = _results_root(args.results, err)
    if root is None:
        return 2
    directory = begin(root, "import")
    verdict = judge(current)
    _write_and_show(directory, verdict)
    return exit_status(verdict)


if __name__ == "__main__":
    sys.exit(main())
