"""Importing a DLPerf-style log tree: DLPerf's own published figures come out, two-digit node
counts stay apart, and files that give no row are listed with the reason."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from parsers.foreign import LogHints
from toolkit import collect
from toolkit.analysis.summary import summarize
from toolkit.results.importer import import_logs, normalize_model, normalize_precision

TREE = Path(__file__).resolve().parents[2] / "data" / "dlperf_tree"
LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"

# Oneflow-Inc/DLPerf Tensorflow/resnet50v1.5/readme.md: its extractor's value per log
# (repeat 1..5), median and speedup (tests/data/dlperf_tree/SOURCE.md).
PUBLISHED = {
    (1, 1): ([323.9, 321.8, 320.18, 322.25, 321.22], 321.8, 1.00),
    (1, 8): ([2494.22, 2441.07, 2458.74, 2480.44, 2455.28], 2458.74, 7.64),
    (2, 8): ([4864.58, 4918.45, 4829.93, 4849.68, 4789.87], 4849.68, 15.07),
    (4, 8): ([9369.06, 9402.51, 9418.44, 9420.23, 9454.31], 9418.44, 29.27),
}


def test_tree_reproduces_dlperfs_values_medians_and_speedups() -> None:
    result = import_logs(TREE)
    assert result.skipped == []
    assert result.ignored == 1  # SOURCE.md, not a *.log
    assert len(result.rows) == 23
    by_topology: dict[tuple[int, int], dict[int, float]] = {}
    for row in result.rows:
        assert row.status == "ok" and row.method == "mean_of_rates"
        assert (row.framework, row.model, row.precision) == ("tensorflow", "resnet50", "fp32")
        assert row.extra["log_model"] == "rn50"
        by_topology.setdefault((row.num_nodes, row.gpus_per_node), {})[row.repeat] = \
            row.throughput_sps or 0.0
    summary = {(s.num_nodes, s.gpus_per_node): s
               for s in summarize([r.to_dict() for r in result.rows])}
    for topology, (values, median, speedup) in PUBLISHED.items():
        got = by_topology[topology]
        assert [round(got[k], 2) for k in range(1, 6)] == values
        s = summary[topology]
        assert s.runs_ok == 5
        assert s.throughput_median_sps == pytest.approx(median, abs=0.005)
        assert round(s.speedup or 0, 2) == speedup


def test_two_digit_node_count_is_its_own_case() -> None:
    rows = import_logs(TREE).rows
    sixteen = [r for r in rows if r.num_nodes == 16]
    assert len(sixteen) == 3
    assert {r.case_id for r in sixteen} == {"resnet50-tensorflow-fp32-16n8g-bs128"}
    assert {r.global_batch_size for r in sixteen} == {16 * 8 * 128}
    assert not [r for r in rows if r.num_nodes == 6]
    summary = {s.num_nodes: s for s in summarize([r.to_dict() for r in rows])}
    s16, s4 = summary[16], summary[4]
    assert s16.gpus == 128 and s16.runs_ok == 3 and s4.runs_ok == 5  # not merged with 4n8g
    assert s16.throughput_median_sps == pytest.approx(9402.506)  # median of its three
    assert s16.speedup == pytest.approx(9402.506 / 321.802, rel=1e-5)
    assert s16.scaling_efficiency == pytest.approx(s16.speedup / 128)


def _bad_tree(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    for topology in ("1n1g", "1n8g"):
        shutil.copytree(TREE / topology, root / topology)
    (root / "1n8g" / "rn50_b128_fp32_9.log").write_bytes(b"\x7fELF\x02\x01\x01\x00" * 64)
    (root / "1n8g" / "rn50_b128_fp32_8.log").write_text("\n\n", encoding="utf-8")
    (root / "1n8g" / "rn50_b128_fp32_7.log").write_text("Segmentation fault (core dumped)\n",
                                                        encoding="utf-8")
    # a Megatron log outside the layout: no topology anywhere
    shutil.copy(LOGS / "megatron/epfllm_issue11.log", root / "megatron_run.log")
    # the same run twice (a copied file)
    (root / "again" / "1n1g").mkdir(parents=True)
    shutil.copy(root / "1n1g" / "rn50_b128_fp32_1.log", root / "again" / "1n1g")
    (root / "notes.txt").write_text("not a log\n", encoding="utf-8")
    return root


def test_unreadable_files_are_listed_with_the_reason(tmp_path: Path) -> None:
    result = import_logs(_bad_tree(tmp_path))
    reasons = {Path(s.path).relative_to(tmp_path / "logs").as_posix(): s.reason
               for s in result.skipped}
    assert len(result.rows) == 10
    assert "binary file" in reasons["1n8g/rn50_b128_fp32_9.log"]
    assert "empty file" in reasons["1n8g/rn50_b128_fp32_8.log"]
    assert "no known log format" in reasons["1n8g/rn50_b128_fp32_7.log"]
    assert "num_nodes, gpus_per_node, batch_size_per_device unknown" in \
        reasons["megatron_run.log"]
    assert "the same log of resnet50-tensorflow-fp32-1n1g-bs128 as" in \
        reasons["again/1n1g/rn50_b128_fp32_1.log"]
    assert len(reasons) == 5
    assert result.ignored == 1  # notes.txt


def test_defaults_fill_what_neither_path_nor_log_says(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    shutil.copy(LOGS / "megatron/epfllm_issue11.log", root / "run.log")
    shutil.copytree(TREE / "1n8g", root / "1n8g")
    shutil.copy(LOGS / "oneflow_gpt/dlperf_readme_2d_pp_2x4x4.log", root / "gpt.log")
    defaults = LogHints(num_nodes=16, gpus_per_node=8, batch_size_per_device=1)
    result = import_logs(root, hints=LogHints(framework="megatron"), defaults=defaults)
    assert result.skipped == []
    rows = {Path(r.source).name if r.num_nodes != 1 or r.gpus_per_node != 8 else "1n8g": r
            for r in result.rows}
    megatron = rows["run.log"]
    assert (megatron.framework, megatron.model, megatron.num_nodes) == ("megatron", "gpt", 16)
    assert megatron.throughput_sps == pytest.approx(4096 / 352.9668)
    # the path's 1n8g and the argument table's 4 x 8, micro batch 8 stay what they say
    assert rows["1n8g"].batch_size_per_device == 128
    gpt = rows["gpt.log"]
    assert (gpt.num_nodes, gpt.gpus_per_node, gpt.batch_size_per_device) == (4, 8, 8)
    # the framework hint does override the formats' own
    assert {r.framework for r in result.rows} == {"megatron"}


@pytest.mark.parametrize(("given", "model"), [
    ("rn50", "resnet50"), ("r50", "resnet50"), ("resnet50", "resnet50"),
    ("ResNet50_v1.5", "resnet50"), ("bert-base-adam-training", "bert_base"),
    ("bert", "bert_base"), ("gpt_2", "gpt"), ("vgg16", "vgg16"), (None, None)])
def test_model_names(given: str | None, model: str | None) -> None:
    assert normalize_model(given) == model


@pytest.mark.parametrize(("given", "precision"), [
    ("fp32", "fp32"), ("amp", "amp_fp16"), ("fp16", "amp_fp16"), ("bf16", "amp_bf16"),
    ("TF32", "tf32"), ("int8", "int8")])
def test_precision_names(given: str, precision: str) -> None:
    assert normalize_precision(given) == precision


def test_collect_import_logs_writes_the_native_outputs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    root = _bad_tree(tmp_path)
    assert collect.main(["--import-logs", str(root), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "not imported" in captured.err and "binary file" in captured.err
    with (out / "runs.csv").open() as fh:
        runs = list(csv.DictReader(fh))
    assert len(runs) == 10 and {r["log_family"] for r in runs} == {"tf2_official"}
    with (out / "summary.csv").open() as fh:
        summary = {(r["num_nodes"], r["gpus_per_node"]): r for r in csv.DictReader(fh)}
    assert float(summary[("1", "8")]["speedup"]) == pytest.approx(2458.738 / 321.802, rel=1e-5)
    report = (out / "report.md").read_text()
    assert "| num_nodes | gpu_num_per_node | batch_size_per_device | throughput | speedup |" \
        in report
    assert "| 1 | 8 | 128 | 2458.7 | 7.64 |" in report
    assert "## Log files not imported" in report
    assert "rn50_b128_fp32_9.log | binary file" in report
    assert "other files under the import directory, not read: 1" in report
    with (out / "tables" / "skipped_files.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 5
    assert (out / "report.html").is_file()
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "resnet50_fp32_efficiency.png", "resnet50_fp32_speedup.png",
        "resnet50_fp32_throughput.png"]


def test_collect_import_needs_out_and_a_directory(tmp_path: Path, capsys) -> None:
    assert collect.main(["--import-logs", str(TREE)]) == 2
    assert "--out DIR is needed" in capsys.readouterr().err
    assert collect.main(["--import-logs", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert collect.main([]) == 2
    assert not list(tmp_path.iterdir())


def test_collect_explicit_window_for_the_short_dllogger_sample(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert collect.main(["--import-logs", str(LOGS / "dllogger"),
                         "--pattern", "2n8g/*.log", "--warmup-iterations", "6",
                         "--measured-iterations", "6", "--out", str(out), "--quiet",
                         "--no-plots"]) == 0
    with (out / "runs.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert round(float(row["throughput_sps"]), 1) == 5137.3
    assert row["framework"] == "torch" and row["method"] == "timestamp_window"


def _native_run(root: Path, gpus: int, step_s: float) -> None:
    """One finished run of the toolkit's own, as the worker writes it (events + status)."""
    import json

    from toolkit.rank.event_writer import EventWriter
    from toolkit.results.layout import CaseDir, rank_file
    from toolkit.spec import Case, resolve

    case = resolve(Case.from_dict({"model": "resnet50", "precision": "fp32",
                                   "batch_size_per_device": 128, "gpus_per_node": gpus,
                                   "warmup_iterations": 2, "measured_iterations": 4}))
    cdir = CaseDir(root, case.base_id())
    cdir.write_case(case)
    run_dir = cdir.prepare_run(0)
    for rank in range(gpus):
        with EventWriter(rank_file(run_dir, rank), rank) as w:
            w.write("start", world_size=gpus)
            for i in range(1, 7):
                w.write("iter", iteration=i, elapsed_s=i * step_s, step_time_s=step_s,
                        samples=128 * gpus, loss=7.0, warmup=i <= 2, time_s=100.0 + i)
            w.write("end")
    (run_dir / "status.json").write_text(json.dumps({"status": "ok"}))


def test_native_runs_and_imported_logs_in_one_table(tmp_path: Path) -> None:
    native = tmp_path / "results"
    _native_run(native, 1, 128 / 350.0)  # 350 samples/s on one GPU
    _native_run(native, 8, 128 / 340.0)  # 8 x 340
    out = tmp_path / "both"
    assert collect.main([str(native), "--import-logs", str(TREE), "--out", str(out),
                         "--quiet", "--no-plots"]) == 0
    with (out / "tables" / "frameworks.csv").open() as fh:
        pivot = {(r["num_nodes"], r["gpus_per_node"]): r for r in csv.DictReader(fh)}
    one_eight = pivot[("1", "8")]
    assert float(one_eight["torch throughput_sps"]) == pytest.approx(8 * 340.0)
    assert float(one_eight["tensorflow throughput_sps"]) == pytest.approx(2458.738)
    assert float(one_eight["torch speedup"]) == pytest.approx(8 * 340 / 350)
    assert pivot[("4", "8")]["torch throughput_sps"] == ""
    report = (out / "report.md").read_text()
    assert "### resnet50 fp32, batch size = 128" in report
    assert "tensorflow samples/s | torch samples/s" in report


def test_collect_shape_options_import_a_bare_megatron_log(tmp_path: Path, capsys) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    shutil.copy(LOGS / "megatron/epfllm_issue11.log", root / "run.log")
    out = tmp_path / "out"
    assert collect.main(["--import-logs", str(root), "--out", str(out), "--no-plots"]) == 0
    assert "pass them as hints (collect --import-logs: --nodes, --gpus-per-node, --batch-size)" \
        in capsys.readouterr().err
    assert collect.main(["--import-logs", str(root), "--out", str(out), "--no-plots", "--quiet",
                         "--nodes", "16", "--gpus-per-node", "8", "--batch-size", "1"]) == 0
    with (out / "runs.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert (row["num_nodes"], row["gpus_per_node"], row["method"]) == ("16", "8", "latency")
    assert float(row["throughput_sps"]) == pytest.approx(4096 / 352.9668)
    assert collect.main(["--import-logs", str(root), "--out", str(out), "--nodes", "0"]) == 2


def test_two_different_logs_of_one_case_are_two_repeats_a_copy_is_one(tmp_path: Path) -> None:
    # two DLLogger JSON-stream logs of one configuration, names without a repeat number: the
    # recorded one, and the same configuration run again 100 s later (other timestamps)
    recorded = LOGS / "dllogger" / "dllogger_example_resnet_json.log"
    root = tmp_path / "logs" / "1n1g"
    root.mkdir(parents=True)
    text = recorded.read_text(encoding="utf-8")
    (root / "first.log").write_text(text, encoding="utf-8")
    (root / "second.log").write_text(
        text.replace('"timestamp": "15707', '"timestamp": "15708'), encoding="utf-8")
    (root / "third_copy.log").write_text(text, encoding="utf-8")
    result = import_logs(tmp_path / "logs", hints=LogHints(batch_size_per_device=256))
    assert [(r.case_id == result.rows[0].case_id, r.repeat) for r in result.rows] == [
        (True, 0), (True, 1)]
    assert "another run of" in result.rows[1].extra["repeat_note"]
    assert "first.log" in result.rows[1].extra["repeat_note"]
    [copy] = result.skipped
    assert copy.path.endswith("third_copy.log") and "(identical bytes)" in copy.reason
