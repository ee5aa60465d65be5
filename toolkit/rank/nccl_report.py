"""Which transports NCCL used, from NCCL's own report: a rank whose job spans several GPU ranks
asks NCCL (before any communicator exists) to write its `NCCL_DEBUG=INFO` report into a file of
its own in the run directory, and after training reads the transports of its connections out of
it (`parsers.nccl_debug`): between nodes (`NET/Socket`, `NET/IB`) and within a node
(`P2P/CUMEM`, `SHM`). Rank 0 records every rank's in meta.json (`nccl_transports`), and runs.csv
has those between nodes (`nccl_between_nodes`), so a "multi-node" figure that
went over NVLink, or an InfiniBand cluster whose NCCL fell back to sockets, shows in the record.

The report goes to that file only: the run's output is unchanged. Where the grid, the site or
the job set `NCCL_DEBUG` or `NCCL_DEBUG_FILE` themselves, their setting stands and the record
says that the transports are not known.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from parsers import logtext
from parsers.nccl_debug import read_transports

REPORT_FILE = "nccl.rank{rank:03d}.log"
"""A rank's NCCL report, in the run directory."""
OWN_SETTINGS = ("NCCL_DEBUG", "NCCL_DEBUG_FILE")


def report_environment(environ: MutableMapping[str, str], run_dir: Path, rank: int,
                       uses_nccl: bool) -> dict[str, Any]:
    """Set NCCL's report file in `environ` where nobody else chose; the record of what was
    done: `{"file", "reason"}`."""
    if not uses_nccl:
        return {"file": None, "reason": "no NCCL: one rank, or ranks without GPUs"}
    kept = [k for k in OWN_SETTINGS if environ.get(k)]
    if kept:
        return {"file": None, "reason": f"{' and '.join(kept)} set by the grid, the site or "
                                        "the job: NCCL reports where they say"}
    path = run_dir.absolute() / REPORT_FILE.format(rank=rank)
    if "%" in str(path):  # NCCL expands %h and %p in the name
        return {"file": None, "reason": f"{path}: a '%' in the path, which NCCL would expand"}
    environ["NCCL_DEBUG"] = "INFO"
    environ["NCCL_DEBUG_FILE"] = str(path)
    return {"file": path.name, "reason": None}


def transports_record(setting: Mapping[str, Any], run_dir: Path,
                      hosts: Sequence[str]) -> dict[str, Any]:
    """`setting` (from `report_environment`) with the transports NCCL reported, read from its
    file after training."""
    record = dict(setting)
    if not setting.get("file"):
        return record
    path = run_dir / str(setting["file"])
    if not path.exists():
        record["reason"] = "NCCL wrote no report: the ranks made no NCCL communicator"
        return record
    try:
        record.update(read_transports(path, hosts).to_dict())
    except logtext.ReadError as err:
        record["reason"] = f"{path.name}: {err}"
    return record


def job_transports(ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank's transports together (meta.json's `nccl_transports`), and how many ranks
    reported."""
    between: set[str] = set()
    within: set[str] = set()
    reported = 0
    reasons: list[str] = []
    for r in ranks:
        nccl = r.get("nccl_transports") or {}
        if "between_nodes" in nccl:
            reported += 1
            between.update(nccl.get("between_nodes") or [])
            within.update(nccl.get("within_node") or [])
        elif nccl.get("reason"):
            reasons.append(str(nccl["reason"]))
    out: dict[str, Any] = {"between_nodes": sorted(between), "within_node": sorted(within),
                           "ranks_reporting": reported}
    if not reported and reasons:
        out["reason"] = reasons[0]
    return out
