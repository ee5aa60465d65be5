"""The results directory: `layout` (every path), `schema` (the events of a rank file), `runs`
(a run directory -> one row), `diagnose` (why a run failed), `scan` (a whole tree), `frame`
(runs as a pandas DataFrame), `importer` (logs of earlier benchmarks -> rows), `archive` (a
results directory as one checked `.tar.gz`, and read back).

`toolkit.results.load(dir)` returns one row per run as a DataFrame (pandas is imported only
then: the ranks import this package for its paths).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def load(root: str | Path, jobs: int = 0) -> pd.DataFrame:
    """Every run of the results directory `root`, one row each: `toolkit.results.frame.load`."""
    from toolkit.results.frame import load as load_frame

    return load_frame(root, jobs)
