"""Each parallel layout's throughput over data parallelism's at the same GPU count, beside the
same ratio in a reference table (DLPerf's OneFlow GPT report by default), and whether the layout
lost more than the reference's did. Pure functions over plain objects; the GPT table shows them
(`toolkit.report.gpt`), the reference rows come from `toolkit.analysis.reference`.

The rules, each stated with the table:

- vs dp: a case's median throughput over that of the data-parallel-only case (layout
  `dp x 1 x 1`) of the same framework, precision, model size (the variant's model keys), number
  of nodes and GPUs per node; of several such cases, the one of the same global batch, else
  the fastest (a layout never meets an easier baseline), then the first by name. None where
  no such case ran.
- reference vs dp: the same ratio within the reference table, for each of its rows whose
  variant gives `dp`, `tp` and `pp`, against its fastest dp-only row of the same framework,
  precision, model keys, nodes and GPUs per node (the table gives one figure per case, so
  its noise is unknown). A case is matched to one such row: of the same `dp x tp x pp`
  (`MATCH_LAYOUT`), else of the same kind (`kind`: which of dp, tp and pp exceed 1;
  `MATCH_KIND`), else, for a pipelined case, any pipelined row (`MATCH_PIPELINED`); within the
  first rule that finds any, the row of the same model size where one is, then the nearest
  GPU count, tensor- and pipeline-parallel degree (by ratio), then the table's order.
- verdict: `KEPT` where vs dp >= the reference's; `LOST_MORE` where vs dp x (1 + noise) is
  still below it, the noise being the two cases' repeat spreads ((max - min) / median of
  their ok runs' throughputs) added; `WITHIN_NOISE` where it is below but within that noise;
  `LOST_MORE_NOISE_UNKNOWN` where it is below and a side has fewer than two ok repeats.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit import PROJECT_ROOT
from toolkit.analysis.reference import ReferenceRow, load_reference
from toolkit.spec.models import ModelConfig

DLPERF_GPT_REFERENCE = PROJECT_ROOT / "examples" / "reference" / "001_oneflow_gpt_dlperf.csv"
"""DLPerf's OneFlow GPT report (8 x V100 per node) as a reference CSV: the default reference
of the GPT table."""

LAYOUT_REFERENCE_HELP = (
    "the reference of the GPT table's `reference vs dp` column: a reference CSV whose variant "
    "gives dp, tp and pp (default: examples/reference/001_oneflow_gpt_dlperf.csv, DLPerf's "
    "OneFlow GPT report)")

MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig))
"""The variant's keys that say the model's size."""

Layout = tuple[int, int, int]
"""(dp, tp, pp)."""

MATCH_LAYOUT = "same dp x tp x pp"
MATCH_KIND = "same kind"
MATCH_PIPELINED = "both pipelined"

KEPT = "kept as much as the reference"
LOST_MORE = "lost more than the reference"
LOST_MORE_NOISE_UNKNOWN = "below the reference, noise unknown"
WITHIN_NOISE = "below the reference within the noise"
BASELINE = "dp baseline"
NO_DP = "no dp case"
NO_RUN = "no ok run"
NO_REFERENCE = "no reference"


def kind(layout: Layout) -> str:
    """Which parallelisms a layout uses: `dp`, `tp`, `pp`, `dp x tp` (2D), `dp x pp`,
    `tp x pp` or `dp x tp x pp`; `dp` for one GPU."""
    used = [name for name, degree in zip(("dp", "tp", "pp"), layout, strict=True) if degree > 1]
    return " x ".join(used) or "dp"


KIND_NAMES = {"dp": "dp only", "tp": "tp only", "pp": "pp only", "dp x tp": "2D"}
"""How the table names a kind where it has a shorter name."""


def kind_name(layout: Layout) -> str:
    name = kind(layout)
    return KIND_NAMES.get(name, name)


def layout_text(layout: Layout) -> str:
    return "x".join(map(str, layout))


def variant_pairs(variant: str) -> dict[str, str]:
    """`key=value` pairs of a variant (`Case.variant`, or a reference CSV's `variant`)."""
    out = {}
    for pair in variant.split(","):
        key, sep, value = pair.strip().partition("=")
        if sep and key:
            out[key.strip()] = value.strip()
    return out


def model_keys(variant: str) -> tuple[tuple[str, str], ...]:
    """The model-size pairs of a variant, sorted."""
    return tuple(sorted((k, v) for k, v in variant_pairs(variant).items() if k in MODEL_KEYS))


def _same_model(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...]) -> bool:
    """The keys both state agree (a reference table leaves out what it does not say)."""
    theirs = dict(b)
    return all(theirs[k] == v for k, v in a if k in theirs)


@dataclass(frozen=True)
class LayoutCase:
    """One measured case, as the ratios need it."""

    case: str
    framework: str
    precision: str
    num_nodes: int
    gpus_per_node: int
    layout: Layout
    model: tuple[tuple[str, str], ...]
    """`model_keys` of its variant."""
    global_batch_size: int | None
    throughput_sps: float | None
    """Median of its ok runs; None where none."""
    spread: float | None
    """(max - min) / median of its ok runs' throughputs; None with fewer than two."""

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


def dp_baseline(case: LayoutCase, cases: Sequence[LayoutCase]) -> LayoutCase | None:
    """The data-parallel-only case `case` is measured against (the module's rule)."""
    found = [c for c in cases if c.throughput_sps is not None
             and c.layout == (c.gpus, 1, 1) and c.framework == case.framework
             and c.precision == case.precision and c.num_nodes == case.num_nodes
             and c.gpus_per_node == case.gpus_per_node and c.model == case.model]
    same_batch = [c for c in found if case.global_batch_size is not None
                  and c.global_batch_size == case.global_batch_size]
    pool = same_batch or found
    return min(pool, key=lambda c: (-(c.throughput_sps or 0.0), c.case), default=None)


@dataclass(frozen=True)
class ReferenceRatio:
    """A reference row's throughput over its dp-only row's."""

    name: str
    """The row's case name (the last word of the CSV's `name`), else its layout and GPUs."""
    layout: Layout
    gpus: int
    model: tuple[tuple[str, str], ...]
    ratio: float
    dp_name: str
    source: str
    index: int
    """Its place in the table."""


def _ref_name(row: ReferenceRow, layout: Layout, gpus: int) -> str:
    words = row.name.split()
    return words[-1] if words else f"{layout_text(layout)} at {gpus} GPUs"


def _ref_layout(row: ReferenceRow) -> Layout | None:
    pairs = variant_pairs(row.variant.lstrip("="))
    try:
        layout = tuple(int(pairs[k]) for k in ("dp", "tp", "pp"))
    except (KeyError, ValueError):
        return None
    return (layout[0], layout[1], layout[2]) if min(layout) >= 1 else None


def _ref_gpus(row: ReferenceRow) -> int | None:
    nodes, per_node = row.keys.get("num_nodes", ""), row.keys.get("gpus_per_node", "")
    return int(nodes) * int(per_node) if nodes.isdigit() and per_node.isdigit() else None


def reference_ratios(rows: Sequence[ReferenceRow]) -> list[ReferenceRatio]:
    """Each reference row with a layout other than dp only, over the fastest dp-only row of
    its framework, precision, model keys, nodes and GPUs per node; rows without one are left
    out. Rows whose variant does not give dp, tp and pp are not layouts and are skipped."""
    parsed = []
    for index, row in enumerate(rows):
        layout, gpus = _ref_layout(row), _ref_gpus(row)
        if layout is not None and gpus is not None and math.prod(layout) == gpus:
            parsed.append((index, row, layout, gpus, model_keys(row.variant.lstrip("="))))
    out = []
    for index, row, layout, gpus, model in parsed:
        if layout == (gpus, 1, 1):
            continue
        dps = [(r, lay, g) for _, r, lay, g, m in parsed
               if lay == (g, 1, 1) and g == gpus and m == model
               and all(r.keys.get(k) == row.keys.get(k)
                       for k in ("framework", "precision", "num_nodes", "gpus_per_node"))]
        if not dps:
            continue
        dp, dp_layout, dp_gpus = max(dps, key=lambda d: d[0].throughput_sps)
        out.append(ReferenceRatio(
            name=_ref_name(row, layout, gpus), layout=layout, gpus=gpus, model=model,
            ratio=row.throughput_sps / dp.throughput_sps,
            dp_name=_ref_name(dp, dp_layout, dp_gpus), source=row.source, index=index))
    return out


@dataclass(frozen=True)
class ReferenceMatch:
    ratio: ReferenceRatio
    rule: str
    """MATCH_LAYOUT, MATCH_KIND or MATCH_PIPELINED."""
    same_model: bool


def _distance(a: int, b: int) -> float:
    return abs(math.log2(a / b))


def match_reference(layout: Layout, model: tuple[tuple[str, str], ...],
                    ratios: Sequence[ReferenceRatio]) -> ReferenceMatch | None:
    """The reference ratio a case of `layout` is held against (the module's rule); None where
    the reference has none of its kind (or the case is dp only)."""
    if kind(layout) == "dp":
        return None
    rules = ((MATCH_LAYOUT, lambda r: r.layout == layout),
             (MATCH_KIND, lambda r: kind(r.layout) == kind(layout)),
             (MATCH_PIPELINED, lambda r: r.layout[2] > 1 and layout[2] > 1))
    gpus = math.prod(layout)
    for rule, fits in rules:
        found = [r for r in ratios if fits(r)]
        if found:
            best = min(found, key=lambda r: (not _same_model(model, r.model),
                                             _distance(r.gpus, gpus),
                                             _distance(r.layout[1], layout[1]),
                                             _distance(r.layout[2], layout[2]), r.index))
            return ReferenceMatch(best, rule, _same_model(model, best.model))
    return None


@dataclass(frozen=True)
class LayoutRatio:
    """One case's ratio to data parallelism, its reference's, and the verdict."""

    vs_dp: float | None
    dp_case: LayoutCase | None
    noise: float | None
    """The ratio's noise: the two cases' spreads added; None where a side has fewer than two
    ok repeats."""
    reference: ReferenceMatch | None
    verdict: str


def verdict(vs_dp: float, noise: float | None, reference: float) -> str:
    """The module's rule."""
    if vs_dp >= reference:
        return KEPT
    if noise is None:
        return LOST_MORE_NOISE_UNKNOWN
    return LOST_MORE if vs_dp * (1 + noise) < reference else WITHIN_NOISE


def layout_ratios(cases: Sequence[LayoutCase],
                  reference: Sequence[ReferenceRow]) -> dict[str, LayoutRatio]:
    """Case name -> its ratio, reference and verdict (`BASELINE` for a dp-only case, `NO_RUN`
    for a case without an ok run, `NO_DP` where no dp-only case ran beside it,
    `NO_REFERENCE` where the reference has no layout of its kind)."""
    ratios = reference_ratios(reference)
    out = {}
    for case in cases:
        if kind(case.layout) == "dp":
            out[case.case] = LayoutRatio(None, None, None, None, BASELINE)
            continue
        match = match_reference(case.layout, case.model, ratios)
        base = dp_baseline(case, cases)
        if case.throughput_sps is None:
            out[case.case] = LayoutRatio(None, base, None, match, NO_RUN)
            continue
        if base is None or not base.throughput_sps:
            out[case.case] = LayoutRatio(None, None, None, match, NO_DP)
            continue
        vs_dp = case.throughput_sps / base.throughput_sps
        noise = (case.spread + base.spread
                 if case.spread is not None and base.spread is not None else None)
        out[case.case] = LayoutRatio(
            vs_dp, base, noise, match,
            verdict(vs_dp, noise, match.ratio.ratio) if match is not None else NO_REFERENCE)
    return out


@dataclass(frozen=True)
class LayoutReference:
    """A reference table for the ratios, and how the report names it."""

    rows: tuple[ReferenceRow, ...]
    name: str
    """Its path, as the notes give it."""
    about: str = ""
    """What it is, where that is known."""


def load_layout_reference(path: Path | None) -> LayoutReference | None:
    """The reference CSV at `path` (`load_reference`; its errors are ReferenceError's); without
    a path, DLPERF_GPT_REFERENCE where this checkout has it (an installed package has no
    examples/), else None."""
    if path is None:
        if not DLPERF_GPT_REFERENCE.is_file():
            return None
        return LayoutReference(tuple(load_reference(DLPERF_GPT_REFERENCE)),
                               str(DLPERF_GPT_REFERENCE.relative_to(PROJECT_ROOT)),
                               "DLPerf's GPT report, OneFlow on 8 x V100 per node")
    return LayoutReference(tuple(load_reference(path)), str(path))
