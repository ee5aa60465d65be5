"""MLLOG and system-description exports of real recorded runs (tests/data/results_quickstart),
read back by the mlperf-logging package (its parser, its compliance checker on the keys that
apply to a throughput benchmark, its system description checker) and by our own importer."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from parsers.detect import parse_path
from parsers.foreign import LogHints
from toolkit import collect
from toolkit.results.importer import import_logs

pytest.importorskip("mlperf_logging")
from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser
from mlperf_logging.system_desc_checker import system_desc_checker

DATA = Path(__file__).resolve().parents[2] / "data" / "results_quickstart"
RULESET = "6.1.0"
ONE_GPU = "bert_base-torch-fp32-1n1g-bs8"
TWO_GPUS = "bert_base-torch-fp32-1n2g-bs8"
#: common.yaml keys that a throughput benchmark has; not: cache_clear (no cache is dropped),
#: eval_* (no evaluation), precision in attention/communication (not recorded),
#: config_filename (no MLPerf config file)
THROUGHPUT_KEYS = {
    "submission_org", "submission_platform", "submission_division", "init_start", "init_stop",
    "run_start", "run_stop", "block_start", "block_stop", "epoch_start", "epoch_stop",
    "train_samples", "lowest_numerical_precision_in_linear", "tensor_parallelism",
    "pipeline_parallelism", "context_parallelism", "expert_parallelism", "micro_batch_size",
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export") / "quickstart"
    shutil.copytree(DATA, root)
    assert collect.main([str(root), "--no-plots", "--quiet"]) == 0
    return root


def _runs(root: Path) -> dict[tuple[str, int], dict[str, str]]:
    with (root / "runs.csv").open() as fh:
        return {(r["case_id"], int(r["repeat"])): r for r in csv.DictReader(fh)}


def _throughput_rules(tmp_path: Path) -> Path:
    """The package's own training rules, limited to THROUGHPUT_KEYS. The division's rule is
    kept without the open-division rules it enqueues (those name MLPerf's benchmark list)."""
    common = Path(mlp_compliance.__file__).parent / f"training_{RULESET}" / "common.yaml"
    rules = yaml.safe_load(common.read_text())
    kept = []
    for rule in rules:
        if "BEGIN" in rule:
            kept.append(rule)
        elif rule["KEY"]["NAME"] in THROUGHPUT_KEYS:
            if rule["KEY"]["NAME"] == "submission_division":
                rule["KEY"]["POST"] = (" s['compile_time_mins'] = 240 if v['value'] == 'open' "
                                       "else 30 ")
            kept.append(rule)
    assert {r["KEY"]["NAME"] for r in kept if "KEY" in r} == THROUGHPUT_KEYS
    path = tmp_path / "throughput_rules.yaml"
    path.write_text(yaml.safe_dump(kept))
    return path


def test_every_run_is_exported(exported: Path) -> None:
    for folder, suffix in (("mllog", "log"), ("systems", "json")):
        found = sorted(p.relative_to(exported / folder).as_posix()
                       for p in (exported / folder).rglob(f"*.{suffix}"))
        assert found == [f"{c}/r{k}.{suffix}" for c in (ONE_GPU, TWO_GPUS) for k in (0, 1)]


def test_the_package_reader_reads_every_line(exported: Path) -> None:
    path = exported / "mllog" / TWO_GPUS / "r1.log"
    lines, errors = mlp_parser.parse_file(str(path), ruleset=RULESET)
    assert errors == []
    keys = [line.key for line in lines]
    assert keys[0] == "submission_org" and keys[-1] == "run_stop"
    assert keys.count("block_stop") == 13  # 3 warm-up + 10 measured iterations
    first = next(line for line in lines if line.key == "block_stop")
    assert first.value["metadata"]["samples_count"] == 16  # 2 ranks x 8
    gbs = next(line for line in lines if line.key == "global_batch_size")
    assert gbs.value["value"] == 16


def test_compliance_checker_passes_on_the_throughput_keys(exported: Path,
                                                          tmp_path: Path) -> None:
    rules = _throughput_rules(tmp_path)
    for log in sorted((exported / "mllog").rglob("*.log")):
        checker = mlp_compliance.make_checker("training", RULESET, False, False)
        assert checker.check_file(str(log), str(rules)), log


def test_compliance_checker_fails_a_log_without_run_stop(exported: Path,
                                                         tmp_path: Path) -> None:
    text = (exported / "mllog" / ONE_GPU / "r0.log").read_text()
    broken = tmp_path / "broken.log"
    broken.write_text("".join(line + "\n" for line in text.splitlines()
                              if '"key": "run_stop"' not in line))
    checker = mlp_compliance.make_checker("training", RULESET, False, False)
    assert not checker.check_file(str(broken), str(_throughput_rules(tmp_path)))


@pytest.mark.parametrize("repeat", [0, 1])
def test_our_importer_reads_it_back_to_the_runs_figure(exported: Path, repeat: int) -> None:
    # One rank: the blocks' timestamp window over iterations 3 -> 13 is the run's own window
    # (wall clock instead of the monotonic clock: equal to 1e-5).
    native = _runs(exported)[(ONE_GPU, repeat)]
    parsed = parse_path(exported / "mllog" / ONE_GPU / f"r{repeat}.log",
                        hints=LogHints(warmup_iterations=3, measured_iterations=10))
    assert parsed.family == "mllog"
    assert parsed.throughput_sps == pytest.approx(float(native["throughput_sps"]), rel=1e-5)
    assert parsed.extra["reported_summary_sps"] == float(native["throughput_sps"])
    assert parsed.loss_first == float(native["loss_first"])


def test_import_of_the_exports_lands_in_the_same_cases(exported: Path) -> None:
    result = import_logs(exported / "mllog",
                         hints=LogHints(warmup_iterations=3, measured_iterations=10))
    assert result.skipped == []
    native = _runs(exported)
    assert {(r.case_id, r.repeat) for r in result.rows} == set(native)
    for row in result.rows:
        original = native[(row.case_id, row.repeat)]
        assert (row.framework, row.model, row.precision, row.num_nodes, row.gpus_per_node,
                row.batch_size_per_device) == (
            original["framework"], original["model"], original["precision"],
            int(original["num_nodes"]), int(original["gpus_per_node"]),
            int(original["batch_size_per_device"]))
        assert row.variant == original["variant"]
        # two ranks: the blocks are rank 0's; the run's figure (slowest rank) travels as is
        assert row.extra["reported_summary_sps"] == float(original["throughput_sps"])


def test_system_description_passes_the_package_checker(exported: Path) -> None:
    path = exported / "systems" / TWO_GPUS / "r0.json"
    valid, name, _, _ = system_desc_checker.check_system_desc(str(path), "training", RULESET)
    assert valid
    system = json.loads(path.read_text())
    meta = json.loads((exported / "cases" / TWO_GPUS / "r0" / "meta.json").read_text())
    assert name == system["system_name"] == "1x2xcpu (1 threads)"
    assert system["number_of_nodes"] == "1"
    assert system["accelerators_per_node"] == "0"  # a CPU run has no accelerator
    assert all(isinstance(v, str) for v in system.values())
    assert system["framework"] == f"torch {meta['versions']['torch']}"
    assert meta["platform"] == system["operating_system"]
    assert "vm" in system["sw_notes"]


def test_no_export_writes_none(tmp_path: Path) -> None:
    root = tmp_path / "quickstart"
    shutil.copytree(DATA, root)
    assert collect.main([str(root), "--no-plots", "--quiet", "--no-export"]) == 0
    assert not os.path.exists(root / "mllog") and not os.path.exists(root / "systems")


def test_without_the_package_collect_says_so_and_writes_the_rest(tmp_path: Path, monkeypatch,
                                                                  capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mlperf_logging.mllog", None)  # import fails
    root = tmp_path / "quickstart"
    shutil.copytree(DATA, root)
    assert collect.main([str(root), "--no-plots", "--quiet"]) == 0
    assert "needs the mlperf-logging package" in capsys.readouterr().err
    assert (root / "summary.csv").is_file() and not (root / "mllog").exists()


def test_system_description_names_the_container_and_site() -> None:
    from parsers.rows import RunRow
    from toolkit.report.interchange import system_description

    row = RunRow(case_id="c", repeat=0, status="ok", framework="torch", model="gpt",
                 precision="amp_bf16", num_nodes=2, gpus_per_node=8, batch_size_per_device=4)
    meta = {"versions": {"torch": "2.4.0", "python": "3.11.7"}, "site": "mycluster",
            "container": {"runtime": "pyxis", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                          "digest": "sha256:abc", "seen": []},
            "ranks": [{"device": "NVIDIA H100 80GB HBM3", "device_type": "cuda"}] * 16,
            "machine": {"cpu_model": "AMD EPYC 9654", "logical_cpus": 384,
                        "memory_mib": 2 * 1024 * 1024}}
    system = system_description(row, meta)
    assert system["framework"] == "torch 2.4.0"
    assert system["other_software_stack"] == (
        "python 3.11.7, container pyxis nvcr.io/nvidia/pytorch:24.05-py3@sha256:abc")
    assert system["sw_notes"].endswith("; site: mycluster")
    assert (system["accelerators_per_node"], system["accelerator_model_name"]) == (
        "8", "NVIDIA H100 80GB HBM3")
    assert system["system_name"] == "2x8xNVIDIA H100 80GB HBM3"
    assert (system["host_processor_model_name"], system["host_processor_vcpu_count"],
            system["host_memory_capacity"]) == ("AMD EPYC 9654", "384", "2048 GiB")
    assert system["hw_notes"] == ""
