"""`python -m toolkit.store_cli` (`trainbench store`): which results store, and what is in it.

    trainbench store                      # the store in use, its schema revision, what it holds
    trainbench store --store postgresql://bench@db/bench upgrade   # migrate a shared store now

The store is `--store PATH|URL`, else $TRAINBENCH_STORE, else
$XDG_DATA_HOME/trainbench/store.sqlite (~/.local/share/... without XDG_DATA_HOME).
`collect` fills it (every finished run, once); `compare` and `history` read it. Opening a store
migrates it to the newest schema; `upgrade` does only that.
Exit status: 0 done; 2 the store cannot be opened or read (the error names it and says why:
not a database, locked, unreachable, or written by a newer trainbench).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone

from sqlalchemy import func, select

from toolkit import interruptible
from toolkit.report import terminal
from toolkit.report.text import console_text
from toolkit.store.db import (
    ENV_VAR,
    FILE_NAME,
    StoreError,
    describe,
    failures,
    open_store,
    resolve,
    revision,
)
from toolkit.store.schema import runs

EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainbench store", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=None, metavar="PATH|URL",
                   help=f"the results store (default: ${ENV_VAR}, else "
                        f"$XDG_DATA_HOME/trainbench/{FILE_NAME})")
    p.add_argument("action", nargs="?", default="info", choices=("info", "upgrade"))
    return p


def _date(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    err = terminal.console(stderr=True, soft_wrap=True)
    try:
        engine = open_store(args.store)
    except StoreError as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    url = resolve(args.store)
    try:
        with failures(url, "cannot read"), engine.connect() as conn:
            rev = revision(conn)
            if args.action == "upgrade":
                print(f"{describe(url)}: schema at revision {rev}")
                return 0
            total, cases, first, last = conn.execute(select(
                func.count(), func.count(runs.c.case_id.distinct()), func.min(runs.c.started_s),
                func.max(runs.c.started_s))).one()
            dirs = conn.execute(select(func.count(runs.c.results_dir.distinct()))).scalar_one()
            ok = conn.execute(select(func.count()).where(runs.c.status == "ok")).scalar_one()
    except StoreError as error:
        err.print(f"error: {console_text(error)}")
        return EXIT_BAD_INPUT
    finally:
        engine.dispose()
    print(f"store: {describe(url)} (schema revision {rev})\n"
          f"runs: {total} ({ok} ok) of {cases} case(s) from {dirs} results "
          f"director{'y' if dirs == 1 else 'ies'}\n"
          f"from {_date(first)} to {_date(last)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
