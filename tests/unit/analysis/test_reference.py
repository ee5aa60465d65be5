"""The reference check: verdicts, matching, bad reference files, and the exit status."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pandas as pd
import pytest
from junitparser import Failure, JUnitXml

from toolkit import collect
from toolkit.analysis.reference import (
    IMPROVEMENT,
    NOT_MEASURED,
    REGRESSION,
    WITHIN,
    ReferenceError,
    compare,
    load_reference,
    loss_not_falling,
    make_reference,
)
from toolkit.analysis.summary import SummaryRow, summarize
from toolkit.report.reference import comparison_tables, gate_failures, reference_junit

ROOT = Path(__file__).resolve().parents[3]
REFERENCES = ROOT / "examples" / "reference"
SEEDS = ROOT / "tests" / "data" / "seeds"
TREE = ROOT / "tests" / "data" / "dlperf_tree"


def seed_000_summary(scale: float = 1.0) -> list[SummaryRow]:
    """The seed 000 All Results rows (OneFlow BERT-base fp32, 7 runs per case), summarised."""
    runs = []
    for line in (SEEDS / "bert_base_fp32_0822_all_results.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].isdigit():
            runs.append({"framework": "oneflow", "model": "bert_base", "precision": "fp32",
                         "variant": "", "num_nodes": int(cells[0]),
                         "gpus_per_node": int(cells[1]), "batch_size_per_device": int(cells[2]),
                         "throughput_sps": float(cells[3]) * scale, "status": "ok",
                         "case_id": f"{cells[0]}n{cells[1]}g-bs{cells[2]}"})
    return summarize(runs)


def test_every_shipped_reference_loads_and_names_its_seed() -> None:
    files = sorted(REFERENCES.glob("*.csv"))
    assert len(files) == 5
    readme = (REFERENCES / "README.md").read_text()
    for path in files:
        rows = load_reference(path)
        assert rows
        for row in rows:
            seed = row.source.split(":")[0]  # e.g. 000_c88e194518ecd5c0.txt
            assert re.fullmatch(r"\d{3}_[0-9a-f]{16}\.txt", seed), row.source
            assert seed.startswith(path.name[:3])
            assert f"`{path.name}` | `{seed}`" in readme


def test_seed_000_all_results_are_within_its_published_table() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    comparisons = compare(seed_000_summary(), reference, tolerance=0.01)
    assert len(comparisons) == 15
    assert {c.verdict for c in comparisons} == {WITHIN}
    for c in comparisons:
        assert c.measured is not None and c.ratio == pytest.approx(1.0, abs=0.0005)


def test_slower_and_faster_cases_are_regressions_and_improvements() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    slower = compare(seed_000_summary(0.9), reference, tolerance=0.05)
    assert {c.verdict for c in slower} == {REGRESSION}
    assert slower[0].ratio == pytest.approx(0.9, abs=0.001)
    faster = compare(seed_000_summary(1.04), reference, tolerance=0.05)
    assert {c.verdict for c in faster} == {WITHIN}
    assert {c.verdict for c in compare(seed_000_summary(1.06), reference, 0.05)} == \
        {IMPROVEMENT}


def test_unmatched_reference_rows_are_not_measured_and_framework_can_be_ignored() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    torch_rows = [SummaryRow(**{**s.__dict__, "framework": "torch"})
                  for s in seed_000_summary()]
    assert {c.verdict for c in compare(torch_rows, reference, 0.05)} == {NOT_MEASURED}
    assert {c.verdict for c in compare(torch_rows, reference, 0.05, ignore=["framework"])} == \
        {WITHIN}
    with pytest.raises(ReferenceError, match="cannot ignore speed"):
        compare(torch_rows, reference, 0.05, ignore=["speed"])


def test_variant_pairs_must_all_be_in_the_measured_variant(tmp_path: Path) -> None:
    reference = load_reference(REFERENCES / "004_ngc_pytorch_resnet50.csv")
    base = dict(framework="torch", model="resnet50", precision="amp_fp16", num_nodes=1,
                gpus_per_node=1, batch_size_per_device=256, runs_ok=1, runs_failed=0,
                throughput_min_sps=None, throughput_max_sps=None, baseline_sps=None,
                speedup=None, scaling_efficiency=None, peak_memory_mib=None, case_ids="c")
    static = SummaryRow(**base, variant="image_size=224,loss_scaling=static,data=synthetic",
                        throughput_median_sps=830.0)
    hits = [c for c in compare([static], reference, 0.05) if c.measured is not None]
    assert [c.reference.throughput_sps for c in hits] == [827.86]  # not the dynamic 802.9
    assert hits[0].verdict == WITHIN


def test_bad_reference_files_name_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "ref.csv"
    bad.write_text("framework,model,throughput_sps\noneflow,bert_base,1\n")
    with pytest.raises(ReferenceError, match=r"ref\.csv: missing column\(s\) precision, "
                                             r"num_nodes"):
        load_reference(bad)
    header = "framework,model,precision,num_nodes,gpus_per_node,batch_size_per_device,"
    bad.write_text(header + "throughput_sps\noneflow,bert_base,fp32,1,1,96,fast\n")
    with pytest.raises(ReferenceError, match=r"ref\.csv:2: column throughput_sps: expected a "
                                             r"positive number"):
        load_reference(bad)
    bad.write_text(header + "throughput_sps\noneflow,bert_base,fp32,one,1,96,10\n")
    with pytest.raises(ReferenceError, match=r"ref\.csv:2: column num_nodes: expected a whole"):
        load_reference(bad)
    with pytest.raises(ReferenceError, match=r"no summary\.csv"):
        load_reference(tmp_path)
    with pytest.raises(ReferenceError, match="no such file"):
        load_reference(tmp_path / "nope.csv")


def test_comparison_table_counts_verdicts() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    ts = comparison_tables(compare(seed_000_summary(0.9), reference, 0.05), 0.05, "ref.csv")
    (table,) = ts.tables
    assert table.header == ["case", "GPUs", "reference samples/s", "measured samples/s",
                            "ratio", "tolerance", "verdict", "reference source"]
    assert "15 regression(s)" in table.note and "±5.0%" in table.note
    assert ts.records[0]["verdict"] == REGRESSION and ts.records[0]["reference_sps"] == 149.8


# DLPerf's published medians of the TensorFlow tree, as a user would write a reference.
DLPERF_TF = [(1, 1, 321.8), (1, 8, 2458.74), (2, 8, 4849.68), (4, 8, 9418.44)]


def write_reference(path: Path, rows: list[tuple[int, int, float]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["framework", "model", "precision", "num_nodes", "gpus_per_node",
                    "batch_size_per_device", "throughput_sps", "source"])
        for n, g, t in rows:
            w.writerow(["tensorflow", "resnet50", "fp32", n, g, 128, t, "DLPerf readme"])
    return path


def test_collect_exit_status_is_3_on_a_regression(tmp_path: Path, capsys) -> None:
    ok = write_reference(tmp_path / "ok.csv", DLPERF_TF)
    out = tmp_path / "out"
    assert collect.main(["--import-logs", str(TREE), "--out", str(out), "--quiet",
                         "--no-plots", "--reference", str(ok), "--tolerance", "0.001"]) == 0
    report = (out / "report.md").read_text()
    assert "## Against the reference" in report
    assert "| resnet50-tensorflow-fp32-4n8g-bs128 | 32 | 9418.4 | 9418.4 | 1.000 | ±0.1% | " \
           "within tolerance | DLPerf readme |" in report
    # the 2n8g reference 10% higher than measured: a regression, and the exit status says so
    high = write_reference(tmp_path / "high.csv",
                           [(n, g, t * 1.1 if (n, g) == (2, 8) else t) for n, g, t in DLPERF_TF])
    assert collect.main(["--import-logs", str(TREE), "--out", str(out), "--quiet",
                         "--no-plots", "--reference", str(high)]) == 3
    err = capsys.readouterr().err
    assert "regression resnet50-tensorflow-fp32-2n8g-bs128" in err
    with (out / "tables" / "reference.csv").open() as fh:
        verdicts = {r["case"]: r["verdict"] for r in csv.DictReader(fh)}
    assert verdicts["resnet50-tensorflow-fp32-2n8g-bs128"] == REGRESSION
    assert list(verdicts.values()).count(REGRESSION) == 1


def test_a_results_directory_as_reference(tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert collect.main(["--import-logs", str(TREE), "--out", str(first), "--quiet",
                         "--no-plots"]) == 0
    second = tmp_path / "second"
    assert collect.main(["--import-logs", str(TREE), "--out", str(second), "--quiet",
                         "--no-plots", "--reference", str(first), "--tolerance", "0"]) == 0
    with (second / "tables" / "reference.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5 and {r["verdict"] for r in rows} == {WITHIN}
    assert {float(r["ratio"]) for r in rows} == {1.0}


def test_help_says_the_exit_status(capsys) -> None:
    with pytest.raises(SystemExit):
        collect.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "3 done, but a case failed the reference check (regressed, beyond its tolerance " \
           "faster, or its loss did not fall)" in out


def test_bad_reference_is_bad_input(tmp_path: Path, capsys) -> None:
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"),
                         "--reference", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unmatched_rows_are_labelled_by_their_keys() -> None:
    reference = load_reference(REFERENCES / "004_ngc_pytorch_resnet50.csv")
    ts = comparison_tables(compare([], reference, 0.05), 0.05, "004")
    labels = [row[0] for row in ts.tables[0].rows]
    assert labels[0] == "resnet50 torch fp32 1n1g bs128"
    assert labels[-1] == "resnet50 torch amp_fp16 1n8g bs256 [loss_scaling=static]"
    assert {row[6] for row in ts.tables[0].rows} == {NOT_MEASURED}


def test_a_results_directory_is_read_by_the_name_collect_writes() -> None:
    from toolkit.analysis.reference import SUMMARY_FILE
    from toolkit.results.layout import SUMMARY_CSV

    assert SUMMARY_FILE == SUMMARY_CSV


def test_a_reference_no_case_matches_exits_1_and_says_what_was_compared(
        tmp_path: Path, capsys) -> None:
    """A CI gate must not pass when the check compared nothing: the reference is for another
    batch size, so every reference row is `not measured`."""
    other = tmp_path / "other.csv"
    with other.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["framework", "model", "precision", "num_nodes", "gpus_per_node",
                    "batch_size_per_device", "throughput_sps"])
        w.writerow(["tensorflow", "resnet50", "fp32", 1, 1, 64, 300.0])
    out = tmp_path / "out"
    code = collect.main(["--import-logs", str(TREE), "--out", str(out), "--quiet",
                         "--no-plots", "--reference", str(other)])
    assert code == collect.EXIT_NOTHING_COMPARED == 1
    err = capsys.readouterr().err
    assert "no measured case matched any of its 1 reference row(s)" in err
    assert str(other) in err and "batch_size_per_device" in err
    assert "resnet50-tensorflow-fp32-1n1g-bs128" in err  # what was measured instead
    # the report is still written, with the unmatched row listed
    with (out / "tables" / "reference.csv").open() as fh:
        assert [r["verdict"] for r in csv.DictReader(fh)] == [NOT_MEASURED]
    # one matching case is enough for exit 0
    assert collect.main(["--import-logs", str(TREE), "--out", str(out), "--quiet", "--no-plots",
                         "--reference", str(write_reference(tmp_path / "one.csv",
                                                            DLPERF_TF[:1]))]) == 0


def test_make_reference_is_the_median_and_k_mad_with_a_floor(tmp_path: Path, capsys) -> None:
    made = tmp_path / "made.csv"
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"), "--quiet",
                         "--no-plots", "--make-reference", str(made)]) == 0
    assert "reference of 5 case(s) written" in capsys.readouterr().out
    with made.open() as fh:
        rows = {r["case_id"]: r for r in csv.DictReader(fh)}
    one_node = rows["resnet50-tensorflow-fp32-1n8g-bs128"]
    # DLPerf's five 1n8g runs: median 2458.738, MAD 17.67 -> 3 x 1.4826 x 17.67 / 2458.738
    assert float(one_node["throughput_sps"]) == pytest.approx(2458.738)
    assert float(one_node["tolerance"]) == pytest.approx(3 * 1.4826 * 17.67 / 2458.738,
                                                         abs=1e-6)
    assert one_node["repeats"] == "5"
    # a tight case gets the floor, never a tolerance narrower than 2%
    assert float(rows["resnet50-tensorflow-fp32-1n1g-bs128"]["tolerance"]) == 0.02
    # the reference checks its own runs: all within, per-row tolerances, exit 0
    junit = tmp_path / "check.xml"
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"), "--quiet",
                         "--no-plots", "--reference", str(made), "--tolerance", "0",
                         "--junit", str(junit)]) == 0
    suite = JUnitXml.fromfile(str(junit))
    assert suite.tests == 5 and suite.failures == 0


def test_the_verdict_line_says_the_tolerances_the_rows_used_even_when_quiet(
        tmp_path: Path, capsys) -> None:
    made = tmp_path / "made.csv"
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"), "--quiet",
                         "--no-plots", "--make-reference", str(made)]) == 0
    capsys.readouterr()
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"), "--quiet",
                         "--no-plots", "--reference", str(made), "--tolerance", "0.05"]) == 0
    out = capsys.readouterr().out
    # --quiet hides the table, never the verdict
    (line,) = [ln for ln in out.splitlines() if "regression(s)" in ln]
    assert "5 within tolerance" in line
    # every row has its own tolerance: --tolerance's 5% decided nothing and is not the headline
    assert "±5.0%" not in line
    assert "tolerance per row, ±2.0% to ±" in line
    report = (tmp_path / "o" / "report.md").read_text()
    # each row says the tolerance its verdict used: 1n8g's own 3 x 1.4826 x MAD / median
    assert "| resnet50-tensorflow-fp32-1n8g-bs128 | 8 | 2458.7 | 2458.7 | 1.000 | ±3.2% |" \
        in report
    assert "| resnet50-tensorflow-fp32-1n1g-bs128 | 1 |" in report
    with (tmp_path / "o" / "tables" / "reference.csv").open() as fh:
        tolerances = {r["case"]: float(r["tolerance"]) for r in csv.DictReader(fh)}
    assert tolerances["resnet50-tensorflow-fp32-1n1g-bs128"] == 0.02


def test_one_tolerance_for_all_rows_is_said_once() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    ts = comparison_tables(compare(seed_000_summary(), reference, 0.05), 0.05, "ref.csv")
    assert "; tolerance ±5.0%; " in ts.tables[0].note
    assert {row[5] for row in ts.tables[0].rows} == {"±5.0%"}


def test_too_few_repeats_make_no_reference_row() -> None:
    runs = pd.DataFrame({"case_id": ["a", "a", "b", "b", "b"], "status": "ok",
                         "throughput_sps": [10.0, 11.0, 100.0, 110.0, 90.0],
                         **{k: "x" for k in ("framework", "model", "precision", "variant")},
                         **{k: 1 for k in ("num_nodes", "gpus_per_node",
                                           "batch_size_per_device")}})
    made, skipped, contended = make_reference(runs, "src")
    assert list(made["case_id"]) == ["b"]
    assert float(made.loc[0, "tolerance"]) == pytest.approx(3 * 1.4826 * 10 / 100)
    assert skipped == ["a: 2 ok repeat(s), a reference needs at least 3"]
    assert contended == []


def test_runs_measured_under_contention_are_left_out_of_a_reference_and_said() -> None:
    # b: 5 repeats, one oversubscribed (and low), one crowded (and low): a reference of the
    # other 3; c: 3 repeats, all crowded: no reference
    runs = pd.DataFrame({"case_id": ["b"] * 5 + ["c"] * 3, "status": "ok",
                         "throughput_sps": [100.0, 110.0, 90.0, 40.0, 50.0, 10.0, 11.0, 12.0],
                         "oversubscribed": [None, None, None, "2 ranks on 1 CPU", None,
                                            None, None, None],
                         "host_crowded": [None, None, None, None, "others 40%",
                                          "others 30%", "others 30%", "others 35%"],
                         **{k: "x" for k in ("framework", "model", "precision", "variant")},
                         **{k: 1 for k in ("num_nodes", "gpus_per_node",
                                           "batch_size_per_device")}})
    made, skipped, contended = make_reference(runs, "src")
    assert list(made["case_id"]) == ["b"]
    assert float(made.loc[0, "throughput_sps"]) == 100.0  # median of 90, 100, 110
    assert made.loc[0, "repeats"] == 3
    assert made.loc[0, "source"] == "src (3 repeats)"
    assert contended == [
        "b: 2 of 5 ok repeat(s) left out of the reference (1 oversubscribed, 1 crowded by "
        "other processes; runs.csv columns `oversubscribed`, `host_crowded`): measured under "
        "contention, not the benchmark",
        "c: 3 of 3 ok repeat(s) left out of the reference (3 crowded by other processes; "
        "runs.csv columns `oversubscribed`, `host_crowded`): measured under contention, not "
        "the benchmark"]
    assert skipped == ["c: 0 ok repeat(s) without contention, a reference needs at least 3"]


def test_a_verdict_on_a_figure_measured_under_contention_carries_the_mark_and_why() -> None:
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    summary = seed_000_summary(scale=0.5)  # every case regressed
    summary[0] = dataclasses.replace(summary[0], runs_oversubscribed=2, runs_crowded=1)
    comparisons = [c for c in compare(summary, reference, 0.05) if c.measured is not None]
    flagged = next(c for c in comparisons if c.measured is summary[0])
    plain = next(c for c in comparisons if c.measured is summary[1])
    ts = comparison_tables(comparisons, 0.05, "ref.csv")
    rows = {row[0]: row for row in ts.tables[0].rows}
    assert rows[summary[0].case_ids][6] == (
        f"{REGRESSION} († of {summary[0].runs_ok} runs, 2 oversubscribed, 1 crowded by other "
        "processes)")
    assert rows[summary[1].case_ids][6] == REGRESSION
    records = {r["case"]: r for r in ts.records}
    assert records[summary[0].case_ids]["verdict"] == REGRESSION
    assert records[summary[0].case_ids]["contention"].startswith("† of ")
    failures = dict((line.split(":")[0], line) for _, line in gate_failures(comparisons, {}))
    assert failures[summary[0].case_ids].endswith("2 oversubscribed, 1 crowded by other "
                                                  "processes)")
    assert "†" not in failures[plain.measured.case_ids]
    junit = {c.name: c for c in reference_junit([flagged, plain], 0.05, {})}
    assert "verdict regression († of" in junit[summary[0].case_ids].output


def test_the_check_is_two_sided_a_large_speedup_fails_too(tmp_path: Path, capsys) -> None:
    # the 2n8g reference 10% lower than measured: faster beyond the tolerance -> fails
    low = write_reference(tmp_path / "low.csv",
                          [(n, g, t * 0.9 if (n, g) == (2, 8) else t) for n, g, t in DLPERF_TF])
    junit = tmp_path / "gate.xml"
    assert collect.main(["--import-logs", str(TREE), "--out", str(tmp_path / "o"), "--quiet",
                         "--no-plots", "--no-store", "--reference", str(low),
                         "--junit", str(junit)]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "too fast resnet50-tensorflow-fp32-2n8g-bs128: 4849.7 vs reference 4364.7" in err
    assert "refresh the reference" in err
    suite = JUnitXml.fromfile(str(junit))
    cases = {c.name: c for s in suite for c in s}
    assert suite.tests == 4 and suite.failures == 1
    (failure,) = cases["resnet50-tensorflow-fp32-2n8g-bs128"].result
    assert isinstance(failure, Failure) and "faster than the reference" in failure.message
    assert not cases["resnet50-tensorflow-fp32-4n8g-bs128"].result


def test_a_run_whose_loss_did_not_fall_fails_the_check() -> None:
    runs = pd.DataFrame({"case_id": ["a", "a", "b"], "status": ["ok", "ok", "ok"],
                         "repeat": [0, 1, 0], "loss_first": [7.5, 7.5, 7.5],
                         "loss_last": [7.4, 7.6, 7.0]})
    assert loss_not_falling(runs) == {"a": "loss did not fall in repeat(s) r1 (7.5 -> 7.6)"}
    reference = load_reference(REFERENCES / "000_oneflow_bert_base_fp32_0822.csv")
    comparisons = [c for c in compare(seed_000_summary(), reference, 0.01)
                   if c.measured is not None][:1]
    case = comparisons[0].measured.case_ids  # type: ignore[union-attr]
    assert gate_failures(comparisons, {}) == []
    ((kind, line),) = gate_failures(comparisons, {case: "loss did not fall in repeat(s) r0"})
    assert kind == "loss" and line == f"{case}: loss did not fall in repeat(s) r0"
    (junit,) = reference_junit(comparisons, 0.01, {case: "loss did not fall"})
    assert junit.failure == "loss: loss did not fall"


def test_a_reference_for_one_gpu_model_does_not_match_another(tmp_path: Path) -> None:
    ref = tmp_path / "ref.csv"
    ref.write_text("framework,model,precision,num_nodes,gpus_per_node,batch_size_per_device,"
                   "gpu_model,throughput_sps,tolerance\n"
                   "oneflow,bert_base,fp32,1,1,96,NVIDIA H200,149.8,0.03\n")
    (row,) = load_reference(ref)
    assert row.system == (("gpu_model", "NVIDIA H200"),) and row.tolerance == 0.03
    summary = seed_000_summary()
    case = next(s.case_ids for s in summary if s.gpus == 1)
    on_v100 = compare(summary, [row], 0.0, systems={case: {"gpu_model": "Tesla V100"}})
    assert [c.verdict for c in on_v100] == [NOT_MEASURED]
    on_h200 = compare(summary, [row], 0.0, systems={case: {"gpu_model": "NVIDIA H200"}})
    assert [c.verdict for c in on_h200] == [WITHIN]  # within its own 3%, not --tolerance 0


def test_names_kept_from_spreadsheets_read_back_as_they_were(tmp_path: Path) -> None:
    """collect writes a case or variant beginning with `=` as `'=...` (no spreadsheet runs it);
    a reference made from that summary.csv reads the name as it was, so it still matches."""
    from toolkit.report.outputs import to_csv

    columns = ["case_id", "framework", "model", "precision", "variant", "num_nodes",
               "gpus_per_node", "batch_size_per_device", "throughput_median_sps"]
    row = {"case_id": "=cmd|' /C calc'!A0", "framework": "torch", "model": "+evil",
           "precision": "fp32", "variant": "@x", "num_nodes": 1, "gpus_per_node": 1,
           "batch_size_per_device": 8, "throughput_median_sps": 100.5}
    text = to_csv([row], columns)
    assert "'=cmd" in text and "'+evil" in text and "'@x" in text
    (tmp_path / "summary.csv").write_text(text)
    [ref] = load_reference(tmp_path)
    assert ref.case_id == "=cmd|' /C calc'!A0" and ref.keys["model"] == "+evil"
    assert ref.variant == "=@x" and ref.throughput_sps == 100.5
