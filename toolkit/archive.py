"""`python -m toolkit.archive RESULTS [--out FILE]`: one results directory as one `.tar.gz`.

    python -m toolkit.archive results/bert                 # -> results/bert.tar.gz
    python -m toolkit.collect --import-logs results/bert.tar.gz --out bert-again/

The archive holds every regular file of the directory (the runs' rank files, meta.json,
status.json, case files, and collect's exports mllog/ and systems/ when collect has run),
MANIFEST.json (size and sha256 of each file, what was left out and why) and SHA256SUMS (for
`sha256sum -c`). Profiler traces, locks, temporaries and symbolic links are left out. An
existing archive is never overwritten. `collect --import-logs ARCHIVE` checks every member and
checksum before it reads the runs back. Exit status: 0 written; 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit import interruptible
from toolkit.results.archive import (
    MANIFEST_FILE,
    ArchiveError,
    default_archive_path,
    excluded_summary,
    write_archive,
)
from toolkit.results.safe_write import UnsafePath


@interruptible
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainbench archive", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of one grid")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="the archive to write (default: <results>.tar.gz beside it)")
    args = p.parse_args(argv)
    dest = args.out or default_archive_path(args.results)
    try:
        result = write_archive(args.results, dest)
    except (ArchiveError, UnsafePath) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in excluded_summary(result.excluded):
        print(line, file=sys.stderr)
    print(f"wrote {result.path} ({result.files} files, {result.bytes} bytes before "
          f"compression; {len(result.excluded)} left out"
          + (f", each listed in {MANIFEST_FILE}" if result.excluded else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
