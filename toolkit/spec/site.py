"""Site profiles: where a grid runs. A grid says *what* to benchmark; a site profile, one small
YAML file per cluster, says *where*: the scheduler's defaults (partition, account, QoS,
constraint, time limit, launcher), how jobs ask for GPUs, the ranks' environment (NCCL/UCX),
modules to load, the container runtime and image, and the figures expected of its GPUs.

The profile is a layer beneath the grid's `base`: a key the grid sets wins, so one grid runs on
two sites unchanged. What a site sets never enters the config hash (`Case.slurm`,
`Case.container`, `Case.site` are left out of it): the same case has one id and one hash on
every site, and each run's meta.json records the site it ran on.

Chosen by `--site FILE` (or the name of a profile in the project's `sites/` folder), else
`$TRAINBENCH_SITE`, else none. Errors name the file, the key and what was expected, like the
grid's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import PROJECT_ROOT
from toolkit.spec.case import Case
from toolkit.spec.convert import CaseError, from_plain, key_hint, to_plain
from toolkit.spec.grid_source import GridError, GridIssue, at_line, load_yaml, read_grid_text
from toolkit.spec.placement import EXPECTED_METRICS, NAME_RE, SiteOptions

SITE_ENV = "TRAINBENCH_SITE"
"""The site profile used when no `--site` is given: a file, or a name in SITES_DIR."""

SITES_DIR = PROJECT_ROOT / "sites"
"""Profiles shipped with the project, found by name (`--site local-srun`)."""

SITE_KEYS = {
    "name": "the site's name, recorded with every run (default: the file's stem)",
    "description": "free text",
    "slurm": "scheduler defaults: any key of a case's slurm block (partition, account, qos, "
             "constraint, time_min, launcher, mpi, extra_sbatch, ...)",
    "gpu_request": "how jobs ask for GPUs: auto, gpus-per-node, gres or none",
    "env": "environment for every rank, NAME: value (NCCL/UCX settings)",
    "modules": "environment modules to load before the ranks start",
    "container": "the default container: runtime, image, mounts, workdir, env, python, "
                 "writable, mount_home, options",
    "expected": "figures expected per GPU model: {GPU name: {figure: value}}",
}

#: The block of a case that only a site profile sets.
SITE_ONLY = "site"
SITE_ONLY_WHY = "set by a site profile (--site FILE or $TRAINBENCH_SITE), not by a grid"



@dataclass(frozen=True)
class Site:
    """A loaded, validated site profile."""

    name: str
    source: str
    """The file it was read from."""
    slurm: dict[str, Any] = field(default_factory=dict)
    """Defaults of the case's `slurm` block, as written (validated)."""
    container: dict[str, Any] = field(default_factory=dict)
    """Defaults of the case's `container` block, as written (validated)."""
    options: SiteOptions = field(default_factory=SiteOptions)

    def layer(self) -> dict[str, Any]:
        """The case keys this site sets beneath a grid's `base` (the grid's keys win, one key
        at a time within `slurm` and `container`)."""
        return {"slurm": dict(self.slurm), "container": dict(self.container),
                SITE_ONLY: to_plain(self.options)}


def find_site(arg: str | None, environ: Mapping[str, str] | None = None) -> Site | None:
    """The site profile named by `--site` (a file, or a name in SITES_DIR), else by
    $TRAINBENCH_SITE, else None."""
    environ = os.environ if environ is None else environ
    chosen = arg if arg else environ.get(SITE_ENV, "").strip() or None
    if chosen is None:
        return None
    path = Path(chosen)
    if not path.exists() and NAME_RE.fullmatch(chosen) and "/" not in chosen:
        shipped = SITES_DIR / f"{chosen}.yaml"
        if shipped.exists():
            path = shipped
        else:
            names = sorted(p.stem for p in SITES_DIR.glob("*.yaml"))
            raise GridError(chosen, [GridIssue("", "no such file, and no site of that name in "
                                                   f"{SITES_DIR} (sites there: "
                                                   f"{', '.join(names) or 'none'})")])
    return load_site(path)


def load_site(path: str | Path) -> Site:
    """Read and validate a site profile. Raises GridError naming the file and the key."""
    path = Path(path)
    text, source = read_grid_text(path)
    raw, lines = load_yaml(text, source)
    try:
        return _build(raw, source, path.stem)
    except GridError as err:
        raise GridError(err.file, [at_line(i, lines, ()) for i in err.issues]) from None


def _build(raw: Any, source: str, stem: str) -> Site:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise GridError(source, [GridIssue("", "expected a mapping at the top level, got "
                                               f"{type(raw).__name__}")])
    issues = [GridIssue(str(k), "unknown key" + key_hint(k, SITE_KEYS, "valid keys: " + ", ".join(
                  f"{n} ({v})" for n, v in SITE_KEYS.items())))
              for k in raw if k not in SITE_KEYS]
    if issues:
        raise GridError(source, issues)
    slurm = _mapping(raw, "slurm", source)
    container = _mapping(raw, "container", source)
    options_plain = {"name": raw.get("name", stem), "env": raw.get("env") or {},
                     "modules": raw.get("modules") or [],
                     "gpu_request": raw.get("gpu_request", "auto"),
                     "expected": _expected(raw.get("expected"), source)}
    try:
        # The checks a case makes of these blocks, with the site's values alone.
        Case.from_dict({"slurm": slurm, "container": container})
        options = from_plain(SiteOptions, options_plain, "")
    except CaseError as err:
        raise GridError(source, [GridIssue(e.key, e.message) for e in err.all()]) from None
    assert options.name is not None
    return Site(name=options.name, source=source, slurm=slurm, container=container,
                options=options)


def _mapping(raw: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise GridError(source, [GridIssue(key, f"expected a mapping, got "
                                                f"{type(value).__name__}")])
    return value


def _expected(value: Any, source: str) -> list[dict[str, Any]]:
    """The `expected` mapping {GPU: {metric: value}} as ExpectedFigure entries (plain)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise GridError(source, [GridIssue("expected", "expected a mapping GPU name -> "
                                                       "{figure: value}")])
    out: list[dict[str, Any]] = []
    for gpu, figures in value.items():
        where = f"expected.{gpu}"
        if not isinstance(gpu, str) or not gpu.strip():
            raise GridError(source, [GridIssue(where, "expected a GPU name such as H200")])
        if not isinstance(figures, dict) or not figures:
            raise GridError(source, [GridIssue(where, "expected a mapping figure -> value, "
                                                      "e.g. gemm_bf16_tflops: 700")])
        for figure, number in figures.items():
            if figure not in EXPECTED_METRICS:
                raise GridError(source, [GridIssue(f"{where}.{figure}", "expected one of " + ", "
                                                   .join(f"{m} ({u})" for m, u in
                                                         EXPECTED_METRICS.items()))])
            if (isinstance(number, bool) or not isinstance(number, (int, float))
                    or not math.isfinite(number) or number <= 0):
                raise GridError(source, [GridIssue(f"{where}.{figure}", "expected a number > 0, "
                                                   f"got {number!r}")])
            out.append({"gpu": gpu, "metric": figure, "value": float(number)})
    return out


def merge_layer(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """`base` (a grid's) on top of a site's `layer`: the grid's keys win one at a time inside
    the mappings both have, and `container: {runtime: none}` drops the site's container; a
    base that is not a mapping there is left for the grid's own checks to report."""
    out = dict(base)
    for key, value in layer.items():
        if key == "container" and isinstance(out.get(key), dict) and out[key].get(
                "runtime") == "none":
            continue  # the grid runs without the site's container: none of its keys apply
        if key not in out:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = {**value, **out[key]}
    return out
