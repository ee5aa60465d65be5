"""A preflight's verdict as report tables (`TableSet`, for markdown, HTML and the terminal) and
one plot: the best GEMM TFLOP/s of every GPU and the busbw of every group, coloured by verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.analysis.preflight import FAULT, INCONCLUSIVE, SLOW, Verdict
from toolkit.report.plots import Plot, png_bytes
from toolkit.report.tables import Table, TableSet
from toolkit.report.text import console_text, csv_frame, md_cell, plot_text, terminal_text
from toolkit.results.safe_write import atomic_write_bytes

VERDICT_COLOURS = {"ok": "#2ca02c", SLOW: "#ff7f0e", FAULT: "#d62728", "n/a": "#7f7f7f",
                   INCONCLUSIVE: "#17becf"}


def _f(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "-"
    return f"{v:,.{digits}f}"


def _s(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def _pct(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{100 * v:.0f}%"


def preflight_tables(verdict: Verdict, title: str = "") -> TableSet:
    """Nodes with their verdict and reasons; every figure with its reference; health findings."""
    where = f" ({title})" if title else ""
    nodes = Table(f"Nodes{where}", ["node", "verdict", "device", "ranks", "why"],
                  [[str(r.node), str(r.verdict), _s(r.device), str(r.ranks),
                    _s(r.reasons)] for r in verdict.nodes.itertuples()],
                  note=("exclude: --exclude=" + ",".join(verdict.exclude)) if verdict.exclude
                  else "every node ok" + (" as far as judged (see 'Not judged')"
                                          if verdict.unjudged else ""))
    figs = verdict.figures
    # the site's expected figures, where its profile gives any (an older verdict has none)
    site = "expected" in figs and bool(figs["expected"].notna().any())
    rows = []
    for r in figs.sort_values(["probe", "metric", "scope", "node", "rank"]).itertuples() \
            if not figs.empty else []:
        where_ = f"{r.node}/r{r.rank}" if r.scope == "gpu" else f"{r.scope} {r.group}"
        rows.append([where_, str(r.metric), _f(r.value), str(r.unit or ""), _pct(r.pct_datasheet),
                     *([_f(r.expected)] if site else []), _f(r.reference),
                     _s(r.reference_kind), _pct(r.ratio),
                     _s(getattr(r, "measurements", None) and int(r.measurements)),
                     str(r.verdict)])
    rules = sorted({str(r) for r in figs["rule"].dropna()}) if not figs.empty else []
    measured = Table(f"Measured{where}", ["where", "metric", "value", "unit", "of datasheet",
                                          *(["site expects"] if site else []), "reference",
                                          "from", "of reference", "measured", "verdict"],
                     rows,
                     note="; ".join(rules))
    tables = [nodes, measured]
    readings = _readings_table(verdict.readings, where)
    if readings is not None:
        tables.append(readings)
    if not verdict.health.empty:
        tables.append(Table(f"Health{where}", ["node", "rank", "reading", "value", "verdict",
                                               "why"],
                            [[str(r.node), str(r.rank), str(r.metric), _f(r.value, 0),
                              str(r.verdict), str(r.reason)]
                             for r in verdict.health.itertuples()]))
    if verdict.links:
        tables.append(Table(f"Slow links{where}", ["link"], [[link] for link in verdict.links]))
    if verdict.unjudged:
        tables.append(Table(f"Not judged{where}", ["where", "metric", "verdict", "why"],
                            [[str(u.get("where")), str(u.get("metric")), str(u.get("verdict")),
                              str(u.get("why"))] for u in verdict.unjudged],
                            note="inconclusive: below its reference, but measured while the "
                                 "host was crowded (never slow, never excluded); not judged: "
                                 "nothing to judge it against"))
    if verdict.links_total:
        tested = verdict.links_tested
        tables.append(Table(f"Links tested{where}", ["links"], [[", ".join(tested) or "none"]],
                            note=f"{len(tested)} of the {verdict.links_total} pairs of nodes "
                                 "(all-reduce over each pair's ranks)"))
    records = [{k: v for k, v in rec.items() if k not in ("detail", "nodes")}
               for rec in verdict.to_dict()["figures"]]
    return TableSet("preflight", "Preflight", tables, records)


def _pair(a: Any, b: Any, fmt: str = "{:.0f}") -> str:
    def one(v: Any) -> str:
        return "-" if v is None or (isinstance(v, float) and pd.isna(v)) else fmt.format(v)
    return f"{one(a)} / {one(b)}"


def _readings_table(df: pd.DataFrame, where: str) -> Table | None:
    """NVML's readings per GPU, judged or not, so a healthy GPU shows what was checked; the
    ranks without a reading (a CPU rank: no NVML) left out, and no table where none has one."""
    rows = []
    for r in df.to_dict(orient="records"):
        def g(k: str, r: dict[Any, Any] = r) -> Any:
            return r.get(k)
        cells = [_pair(g("ecc_uncorrected_volatile"), g("ecc_uncorrected_aggregate")),
                 _pair(g("remapped_rows_pending"), g("retired_pages_pending")),
                 _pair(g("pcie_gen_under_load"), g("pcie_gen_max")),
                 _pair(g("pcie_width_under_load"), g("pcie_width_max")),
                 _pair(g("sm_clock_under_load_mhz"), g("sm_clock_max_mhz")),
                 _f(g("power_limit_w"), 0), _pct(g("hw_slowdown_share"))]
        if any(c not in ("-", "- / -") for c in cells):
            rows.append([f"{g('node')}/r{g('rank')}", *cells])
    if not rows:
        return None
    return Table(f"GPU health{where}", ["gpu", "uncorrected ECC (volatile / lifetime)",
                                        "pending remap / retirement", "PCIe gen (load / max)",
                                        "PCIe width (load / max)", "SM MHz (load / max)",
                                        "power limit W", "HW slowdown"], rows,
                 note="NVML; under load: sampled while the GEMM and host<->device probes ran")


def report_section(found: list[tuple[str, str | None, Verdict]]) -> TableSet:
    """The report's preflight section over every preflight of a results directory ((tag, case
    id or None, verdict), oldest first): one row per node and preflight, then the latest
    preflight's figures."""
    rows, records = [], []
    for tag, case, verdict in found:
        for r in verdict.nodes.itertuples():
            rows.append([tag, case or "(standalone)", str(r.node), str(r.verdict),
                         str(r.reasons or "")])
            records.append({"tag": tag, "case": case, "node": r.node, "verdict": r.verdict,
                            "reasons": r.reasons})
    bad = sorted({str(r[2]) for r in rows if r[3] in (SLOW, FAULT)})
    nodes = Table("Nodes per preflight", ["preflight", "case", "node", "verdict", "why"], rows,
                  note=(f"not ok in some preflight: {', '.join(bad)}" if bad else
                        "every node ok in every preflight"))
    tables = [nodes]
    if found:
        tag, _, latest = found[-1]
        tables += [t for t in preflight_tables(latest, f"latest: {tag}").tables[1:]]
    return TableSet("preflight", "Preflight", tables, records)


def preflight_plot(verdict: Verdict, path: Path, root: Path, title: str = "") -> Plot | None:
    """Best GEMM per GPU (left) and the busbw of each collective group at its largest size
    (right), one bar each, coloured by verdict; None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = verdict.figures
    if figs.empty:
        return None
    gemm = figs[(figs["probe"] == "gemm") & figs["value"].notna()]
    if not gemm.empty:
        # the precision with the highest figures: bf16 on GPUs, fp32 on CPUs
        top = gemm.groupby("metric")["value"].median().idxmax()
        gemm = gemm[gemm["metric"] == top]
    bus = figs[(figs["metric"] == "all_reduce") & figs["value"].notna()]
    panels = [p for p in (("gemm", gemm), ("busbw", bus)) if not p[1].empty]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.4), dpi=100,
                             squeeze=False)
    try:
        for ax, (kind, df) in zip(axes[0], panels, strict=True):
            if kind == "gemm":
                labels = [plot_text(f"{n}/r{r}")
                          for n, r in zip(df["node"], df["rank"], strict=True)]
                ax.set_ylabel(plot_text(f"{df['metric'].iloc[0]} TFLOP/s"))
                ax.set_title("GEMM per GPU (best shape)")
            else:
                labels = [plot_text(f"{s} {g}")
                          for s, g in zip(df["scope"], df["group"], strict=True)]
                ax.set_ylabel("all-reduce busbw GB/s (largest size)")
                ax.set_title("Collectives per group")
            colours = [VERDICT_COLOURS.get(v, "#7f7f7f") for v in df["verdict"]]
            ax.bar(range(len(df)), df["value"], color=colours)
            ax.set_xticks(range(len(df)), labels, rotation=45, ha="right", fontsize=8)
            refs = df["reference"].dropna()
            if not refs.empty:
                ax.axhline(float(refs.median()), color="#000000", linestyle="--", linewidth=1,
                           label="reference")
                ax.legend(fontsize=8)
        fig.suptitle(plot_text(f"Preflight {title}".strip()))
        fig.tight_layout()
        atomic_write_bytes(path, png_bytes(fig), durable=False, root=root)
    finally:
        plt.close(fig)
    return Plot(path, f"Preflight {title}".strip(), "preflight", dict(VERDICT_COLOURS))


def write_preflight(directory: Path, verdict: Verdict, root: Path) -> list[Path]:
    """Beside the rank files: verdict.json, exclude.txt, figures.csv, preflight.md and
    preflight.png; returns what was written."""
    from toolkit.report.markdown import _md_table
    from toolkit.results.layout import EXCLUDE_FILE, VERDICT_FILE
    from toolkit.results.preflight import write_verdict
    from toolkit.results.safe_write import atomic_write_text

    write_verdict(directory, verdict.to_dict(), verdict.exclude, root)
    ts = preflight_tables(verdict, directory.name)
    columns = list(dict.fromkeys(k for r in ts.records for k in r))
    csv = csv_frame(pd.DataFrame(ts.records, columns=columns))
    atomic_write_text(directory / "figures.csv", csv, root=root)
    lines = [f"# Preflight {md_cell(directory.name)}", ""]
    for t in ts.tables:
        lines += _md_table(t)
    atomic_write_text(directory / "preflight.md", "\n".join(lines) + "\n", root=root)
    plot = preflight_plot(verdict, directory / "preflight.png", root, directory.name)
    return [directory / VERDICT_FILE, directory / EXCLUDE_FILE, directory / "figures.csv",
            directory / "preflight.md", *([plot.path] if plot else [])]


FREE_TEXT = ("why", "links")
"""Columns of the preflight tables that hold sentences (wrapped between words on a terminal);
every other column holds names and figures, each kept on one line."""


def print_tables(ts: TableSet, console: Any) -> None:
    """The tables on a terminal or in a log (rich, `toolkit.report.terminal`), verdicts
    coloured; each table's note as a line under it."""
    from toolkit.report.terminal import print_table, table

    styles = {"ok": "green", SLOW: "yellow", FAULT: "bold red", INCONCLUSIVE: "cyan"}
    for t in ts.tables:
        shown = table(console_text(t.title), t.header, text=FREE_TEXT)
        shown.title_justify = "left"
        for row in t.rows:
            shown.add_row(*(f"[{styles[c]}]{c}[/]" if c in styles else console_text(c)
                            for c in row))
        print_table(console, shown)
        if t.note:
            console.print(terminal_text(t.note), markup=False, soft_wrap=True)
