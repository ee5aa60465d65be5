"""A preflight directory (`preflight/<tag>/rank<NNN>.jsonl`) -> one DataFrame row per figure, and
the verdict files written beside the rank files.

Columns: `tag`, `node` (the Slurm node name, else the host), `host`, `rank`, `local_rank`,
`device` (the name the driver reports, or `cpu (N threads)`), `gpu_uuid`, `gpu_bus_id`,
`probe`, `metric`, `value`, `unit`, `scope`, `group`, `bytes` (collectives and memory
probes), `detail` (dict), `reason`, `time_s`, `speed_mbps` (the link speed of the node's
interface to the other nodes, where its driver reports one). A rank that did not finish adds
one row with probe `rank`, metric `finished`, value None and the reason (its error, or that
its file is missing), so a dead rank is a finding, not a gap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.results.layout import (
    CASE_FILE,
    CASES_DIR,
    EXCLUDE_FILE,
    RANK_FILES,
    VERDICT_FILE,
    load_case_file,
    preflight_dirs,
)
from toolkit.results.runs import read_json_object, read_rank_file
from toolkit.results.safe_write import atomic_write_json, atomic_write_text
from toolkit.spec.placement import SiteOptions
from toolkit.spec.site import find_site

COLUMNS = ["tag", "node", "host", "rank", "local_rank", "device", "gpu_uuid", "gpu_bus_id",
           "probe", "metric", "value", "unit", "scope", "group", "bytes", "detail", "reason",
           "time_s", "speed_mbps"]


def read_preflight(directory: Path) -> pd.DataFrame:
    """Every figure of one preflight; a rank without an `end` event gives a `finished` row."""
    rows: list[dict[str, Any]] = []
    world = 0
    seen: set[int] = set()
    for path in sorted(directory.glob(RANK_FILES)):
        if path.is_symlink() or not path.is_file():
            continue
        log = read_rank_file(path)
        start = log.start or {}
        world = max(world, int(start.get("world_size") or 0))
        seen.add(log.rank)
        gpu = start.get("gpu") or {}
        base = {"tag": directory.name, "node": start.get("node") or start.get("host"),
                "host": start.get("host"), "rank": log.rank,
                "local_rank": start.get("local_rank"), "device": start.get("device"),
                "gpu_uuid": gpu.get("uuid"), "gpu_bus_id": gpu.get("bus_id"),
                "speed_mbps": _number((start.get("network") or {}).get("interface_speed_mbps"))}
        for rec in log.probes:
            detail: dict[str, Any] = rec["detail"] if isinstance(rec.get("detail"), dict) else {}
            rows.append({**base, "probe": rec.get("probe"), "metric": rec.get("metric"),
                         "value": _number(rec.get("value")), "unit": rec.get("unit"),
                         "scope": rec.get("scope"), "group": rec.get("group"),
                         "bytes": detail.get("bytes"), "detail": detail,
                         "reason": rec.get("reason"), "time_s": rec.get("time_s")})
        if log.end is None:
            why = (log.errors[-1].get("message") if log.errors else
                   log.unreadable or "no end event: the rank stopped during the preflight")
            rows.append({**base, "probe": "rank", "metric": "finished", "value": None,
                         "scope": "gpu", "reason": why})
    for rank in sorted(set(range(world)) - seen):
        rows.append({"tag": directory.name, "rank": rank, "probe": "rank", "metric": "finished",
                     "value": None, "scope": "gpu", "reason": "no rank file"})
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_earlier(base: Path, but: Path | None = None) -> pd.DataFrame:
    """Every preflight under a results root or case directory except `but`: the baselines."""
    frames = [read_preflight(d) for d in preflight_dirs(base)
              if but is None or d.resolve() != but.resolve()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


def write_verdict(directory: Path, verdict: dict[str, Any], exclude: list[str],
                  root: Path) -> None:
    """verdict.json and exclude.txt (one `--exclude` value; empty when every node is ok)."""
    atomic_write_json(directory / VERDICT_FILE, verdict, root=root)
    atomic_write_text(directory / EXCLUDE_FILE, ",".join(exclude) + "\n", root=root)


def results_root_of(directory: Path) -> Path:
    """The results root a preflight directory belongs to: `<root>/preflight/<tag>` or
    `<root>/cases/<id>/preflight/<tag>`."""
    base = directory.parent.parent
    if base.parent.name == CASES_DIR:
        return base.parent.parent
    return base


NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A Slurm node name as a preflight records it (a name that is not one is never passed on)."""


def excluded_nodes(root: Path) -> list[str]:
    """The nodes whose latest preflight under `root` found them not ok (standalone ones and
    every case's, latest by tag): a node a later preflight found ok is not excluded."""
    return node_exclusion(root).nodes


@dataclass(frozen=True)
class NodeExclusion:
    """What the preflights under a results root exclude (`node_exclusion`)."""

    nodes: list[str]
    """The nodes whose latest verdict is slow or fault, sorted."""
    judged: int
    """The nodes any preflight judged."""
    directories: list[Path]
    """The preflight directories whose verdicts exclude them."""

    def text(self) -> str:
        """`4 of 8 nodes excluded by the preflight in <dir> (n1, n2, ...)`."""
        where = ", ".join(map(str, self.directories))
        return (f"{len(self.nodes)} of {self.judged} node(s) excluded by the preflight"
                f"{'s' if len(self.directories) > 1 else ''} in {where} "
                f"({', '.join(self.nodes)})")


def node_exclusion(root: Path) -> NodeExclusion:
    """The nodes the preflights under `root` exclude (`excluded_nodes`), how many they judged
    and where the excluding verdicts are."""
    latest: dict[str, tuple[str, Path]] = {}
    for directory, data in verdicts(root):  # oldest first: a later verdict replaces one
        nodes = data.get("nodes")
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict):
                continue
            name = node.get("node")
            if isinstance(name, str) and NODE_NAME_RE.fullmatch(name):
                latest[name] = (str(node.get("verdict")), directory)
    bad = {n: d for n, (v, d) in latest.items() if v in ("slow", "fault")}
    return NodeExclusion(sorted(bad), len(latest), sorted(set(bad.values())))


#: The preflight GEMM a run's precision is compared with.
PRECISION_GEMM = {"amp_bf16": "gemm_bf16", "amp_fp16": "gemm_fp16", "tf32": "gemm_tf32",
                  "fp32": "gemm_fp32"}


def verdicts(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every judged preflight under a results root (those with a verdict.json), oldest first
    (tags begin with their UTC start), whichever case ran them."""
    out = []
    for directory in preflight_dirs(root):
        data, _ = read_json_object(directory / VERDICT_FILE)
        if data is not None:
            out.append((directory, data))
    return sorted(out, key=lambda found: found[0].name)


def case_of(directory: Path) -> str | None:
    """The case id of a job's preflight (`cases/<id>/preflight/<tag>`); None standalone."""
    base = directory.parent.parent
    return base.name if base.parent.name == CASES_DIR else None


def site_of(directory: Path, name: str | None) -> SiteOptions:
    """The site a preflight is judged for: the profile `name` (`--site`), else the site of the
    case whose preflight it is (its case.json), else none."""
    if name:
        site = find_site(name)
        return site.options if site else SiteOptions()
    case_json = directory.parent.parent / CASE_FILE
    if case_of(directory) is not None and case_json.is_file():
        return load_case_file(case_json)[1].site
    return SiteOptions()


def measured_peaks(found: list[tuple[Path, dict[str, Any]]]) -> dict[str | None, dict[str, float]]:
    """Case id (None: the latest standalone preflight) -> GEMM metric -> the median over the
    GPUs of that case's latest preflight. `found` oldest first, as `verdicts` gives it."""
    out: dict[str | None, dict[str, float]] = {}
    for directory, data in found:
        cid = case_of(directory)
        out.pop(cid, None)  # a later preflight of the case replaces an earlier one
        figs = pd.DataFrame(data.get("figures") or [])
        if figs.empty or "probe" not in figs:
            continue
        gemm = figs[(figs["probe"] == "gemm") & figs["value"].notna()]
        out[cid] = {str(m): float(v) for m, v in gemm.groupby("metric")["value"].median().items()}
    return out


def measured_bus_bandwidth(found: list[tuple[Path, dict[str, Any]]]) -> float | None:
    """The all-reduce bus bandwidth (GB/s) the latest preflight with one measured: the largest
    of its all-reduce figures (the largest message reaches the link's bandwidth); None
    without one."""
    for _, data in reversed(found):
        figs = pd.DataFrame(data.get("figures") or [])
        if figs.empty or "metric" not in figs or "value" not in figs:
            continue
        values = pd.to_numeric(figs.loc[figs["metric"] == "all_reduce", "value"],
                               errors="coerce").dropna()
        values = values[values > 0]
        if len(values):
            return float(values.max())
    return None


def attach_measured_mfu(run_dicts: list[dict[str, Any]],
                        peaks: dict[str | None, dict[str, float]]) -> int:
    """Add `measured_peak_tflops` and `mfu_measured` (TFLOP/s per GPU over the GEMM peak the
    preflight of the run's case measured, else the latest standalone one) to runs with a TFLOP/s
    figure; returns how many got one."""
    n = 0
    for run in run_dicts:
        tflops = run.get("tflops_per_gpu")
        metric = PRECISION_GEMM.get(str(run.get("precision")))
        if tflops is None or metric is None:
            continue
        peak = (peaks.get(run.get("case_id")) or {}).get(metric) or \
            (peaks.get(None) or {}).get(metric)
        if peak:
            run["measured_peak_tflops"] = peak
            run["mfu_measured"] = tflops / peak
            n += 1
    return n


def stopped_by_preflight(case_dir: Path, job: str) -> str | None:
    """Why a job of this case stopped before training, when its own preflight (tag ending in
    `-<job>`) found a node not ok; None otherwise."""
    for directory in preflight_dirs(case_dir):
        if not directory.name.endswith(f"-{job}"):
            continue
        data, _ = read_json_object(directory / VERDICT_FILE)
        if not data or data.get("ok", True):
            continue
        nodes = [n for n in data.get("nodes") or [] if isinstance(n, dict)
                 and n.get("verdict") in ("slow", "fault")]
        said = "; ".join(f"{n.get('node')} {n.get('verdict')}: {n.get('reasons')}"
                         for n in nodes)
        return f"stopped before training by its preflight {directory.name}: {said}"
    return None
