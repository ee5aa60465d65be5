"""`python -m toolkit.gpt_table RESULTS [--out DIR] [--layout-reference CSV]`: the GPT table of one
grid (latency, memory, samples/s, TFLOP/s per GPU, MFU, and each layout's throughput over data
parallelism's at its GPU count beside the reference's ratio) as gpt_table.md and gpt_table.csv.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit import interruptible
from toolkit.analysis.layouts import LAYOUT_REFERENCE_HELP, load_layout_reference
from toolkit.analysis.reference import ReferenceError
from toolkit.report.gpt import CSV_COLUMNS, gpt_table, grid_order
from toolkit.report.outputs import to_csv
from toolkit.results.layout import is_results_dir
from toolkit.results.safe_write import UnsafePath, atomic_write_text
from toolkit.results.scan import collect_runs


@interruptible
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainbench gpt-table", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of one grid")
    p.add_argument("--out", type=Path, default=None, help="where to write (default: results)")
    p.add_argument("--layout-reference", type=Path, default=None, metavar="CSV",
                   help=LAYOUT_REFERENCE_HELP)
    args = p.parse_args(argv)
    if not is_results_dir(args.results):
        print(f"error: {args.results} is not a results directory (no .trainbench-results "
              "marker, no cases/<id>/case.json)", file=sys.stderr)
        return 2
    try:
        reference = load_layout_reference(args.layout_reference)
    except ReferenceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows, problems = collect_runs(args.results)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    table = gpt_table([r.to_dict() for r in rows], grid_order(args.results), reference)
    if not table.records:
        print(f"error: {args.results} holds no GPT runs", file=sys.stderr)
        return 2
    out = args.out or args.results
    try:
        atomic_write_text(out / "gpt_table.md", table.markdown, root=out)
        atomic_write_text(out / "gpt_table.csv", to_csv(table.records, CSV_COLUMNS), root=out)
    except UnsafePath as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table.markdown)
    for r in table.records:
        if r["error"]:
            print(f"{r['case']}: {r['runs_failed']} run(s) not ok: {r['error']}",
                  file=sys.stderr)
    print(f"wrote {out / 'gpt_table.md'}, {out / 'gpt_table.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
