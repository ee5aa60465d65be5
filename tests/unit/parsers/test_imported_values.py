"""Imported values are checked: a field of a foreign log or an MLLOG file that is not of the type
or range a run has fails that file, with the reason, before any arithmetic.

Each hostile file is a real recorded log (`tests/data/logs/`) with one field changed: a node
count given as text or as a float, a billion GPUs, a negative, infinite or NaN time, a
negative or zero rate, a step number that is a list. `collect --import-logs` lists it under
"Log files not imported" with the field and the reason, keeps the good file's run, and never
stores a run as `ok` with a throughput that is not a positive finite number.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from parsers.detect import parse_path
from parsers.foreign import LogHints, LogParseError
from toolkit import collect
from toolkit.report.text import md_cell

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
MLLOG = LOGS / "mllog" / "quickstart_1n1g_r0.log"
TOKEN = ":::MLLOG "


def _mllog(change: Callable[[dict], None], key: str, which: int = 0) -> str:
    """The recorded MLLOG export with `change` applied to the `which`-th event of `key`."""
    lines, seen = [], 0
    for line in MLLOG.read_text().splitlines():
        event = json.loads(line.removeprefix(TOKEN))
        if event["key"] == key:
            if seen == which:
                change(event)
            seen += 1
        lines.append(TOKEN + json.dumps(event))
    return "\n".join(lines) + "\n"


def _run_field(name: str, value: object) -> Callable[[dict], None]:
    return lambda event: event["value"].__setitem__(name, value)


def _event_field(name: str, value: object) -> Callable[[dict], None]:
    return lambda event: event.__setitem__(name, value)


def _metadata_field(name: str, value: object) -> Callable[[dict], None]:
    return lambda event: event["metadata"].__setitem__(name, value)


MLLOG_CASES = [
    ("nodes_text", _mllog(_run_field("num_nodes", "2"), "trainbench_run"),
     "num_nodes: '2' is not an integer"),
    ("nodes_float", _mllog(_run_field("num_nodes", 2.5), "trainbench_run"),
     "num_nodes: 2.5 is not an integer"),
    ("billion_gpus", _mllog(_run_field("gpus_per_node", 10**9), "trainbench_run"),
     "gpus_per_node: 1000000000 is out of range (1..1024)"),
    ("batch_huge_text", _mllog(_run_field("batch_size_per_device", "8" * 10_000),
                               "trainbench_run"), "batch_size_per_device: '8888"),
    ("model_object", _mllog(_run_field("model", {"x": 1}), "trainbench_run"),
     "model: {'x': 1} is not a name"),
    ("case_id_list", _mllog(_run_field("case_id", [1]), "trainbench_run"),
     "case_id [1] is not a name"),
    ("batch_true", _mllog(_event_field("value", True), "global_batch_size"),
     "global_batch_size: True is not an integer"),
    ("time_negative", _mllog(_event_field("time_ms", -5.0), "block_stop", 3),
     "time_ms: -5.0 is out of range"),
    ("time_infinite", _mllog(_event_field("time_ms", float("inf")), "block_stop", 3),
     "time_ms: inf is out of range"),
    ("time_nan", _mllog(_event_field("time_ms", float("nan")), "block_stop", 3),
     "time_ms: nan is out of range"),
    ("time_text", _mllog(_event_field("time_ms", "1795401766605"), "block_stop", 3),
     "time_ms: '1795401766605' is not a number"),
    ("step_list", _mllog(_metadata_field("step_num", [4]), "block_stop", 3),
     "block_stop: step: [4] is not an integer"),
    ("step_exponent", _mllog(_metadata_field("step_num", 1e300), "block_stop", 3),
     "block_stop: step: 1e+300 is not an integer"),
    ("metadata_list", _mllog(_event_field("metadata", [1]), "block_stop", 3),
     "metadata is not an object"),
    ("throughput_negative", _mllog(_event_field("value", -3.0), "trainbench_throughput"),
     "trainbench_throughput: value: -3.0 is out of range"),
]


def _text_case(source: str, old: str, new: str, drop: str | None = None) -> str:
    """The recorded log with `old` replaced by `new`, and its lines holding `drop` left out."""
    text = "".join(line for line in (LOGS / source).read_text().splitlines(keepends=True)
                   if drop is None or drop not in line)
    changed = re.sub(old, new, text)
    assert changed != text
    return changed


TEXT_CASES = [
    # DeepSpeed's CurrSamplesPerSec negative, and no global batch: the mean of the rates
    # would be stored as a negative throughput. (Its Megatron lines left out, so that the
    # timer lines are what is read.)
    ("deepspeed_negative_rate", "deepspeed/deepspeed_issue3742_gptneox.log",
     _text_case("deepspeed/deepspeed_issue3742_gptneox.log",
                r"CurrSamplesPerSec=(\d)", r"CurrSamplesPerSec=-\1",
                drop="elapsed time per iteration"),
     r"iteration \d+: rate_sps: -\d"),
    # A node count or batch that is not a whole number, in an argument dump: never guessed.
    ("oneflow_nodes_float", "oneflow_bert/1n1g/bert_b24_fp32_1.log",
     _text_case("oneflow_bert/1n1g/bert_b24_fp32_1.log", r"(?m)^num_nodes = 1$",
                "num_nodes = 2.5"),
     r"num_nodes: '2\.5' is not a whole number"),
    ("oneflow_batch_exponent", "oneflow_bert/1n1g/bert_b24_fp32_1.log",
     _text_case("oneflow_bert/1n1g/bert_b24_fp32_1.log", r"(?m)^batch_size_per_device = 24$",
                "batch_size_per_device = 2.4e1"),
     r"batch_size_per_device: '2\.4e1' is not a whole number"),
    ("gpt_micro_batch_text", "oneflow_gpt/dlperf_readme_2d_pp_2x4x4.log",
     _text_case("oneflow_gpt/dlperf_readme_2d_pp_2x4x4.log",
                r"(micro_batch_size \.+) 8", r"\1 eight"),
     r"micro_batch_size: 'eight' is not a whole number"),
    # Every printed rate zero: a throughput of 0 is no run.
    ("insightface_zero_rate", "oneflow_insightface/1n8g/fmobilefacenet_b64_fp32_1.log",
     _text_case("oneflow_insightface/1n8g/fmobilefacenet_b64_fp32_1.log",
                r"throughput: [\d.]+", "throughput: 0.0"),
     r"throughput 0\.0 samples/s \(mean_of_rates .*\) is not a positive finite number"),
]


@pytest.mark.parametrize(("name", "text", "reason"), MLLOG_CASES,
                         ids=[c[0] for c in MLLOG_CASES])
def test_an_mllog_field_of_the_wrong_type_or_range_fails_the_file(tmp_path: Path, name: str,
                                                                    text: str,
                                                                    reason: str) -> None:
    path = tmp_path / f"{name}.log"
    path.write_text(text)
    with pytest.raises(LogParseError, match=re.escape(reason)):
        parse_path(path)


@pytest.mark.parametrize(("name", "source", "text", "reason"), TEXT_CASES,
                         ids=[c[0] for c in TEXT_CASES])
def test_a_foreign_log_whose_values_no_run_has_fails_the_file(tmp_path: Path, name: str,
                                                               source: str, text: str,
                                                               reason: str) -> None:
    path = tmp_path / Path(source).parent.name / f"{name}.log"
    path.parent.mkdir()
    path.write_text(text)
    assert parse_path(LOGS / source, Path(source).parts[0]).throughput_sps  # the log reads
    with pytest.raises(LogParseError, match=reason):
        parse_path(path)


def test_a_billion_gpus_in_the_path_fails_the_file(tmp_path: Path) -> None:
    path = tmp_path / "1n1000000000g" / "r50_b128_fp32_1.log"
    path.parent.mkdir()
    path.write_text((LOGS / "dllogger/2n8g/r50_b128_fp32_1.log").read_text())
    with pytest.raises(LogParseError, match=re.escape(
            "gpus_per_node: 1000000000 is out of range (1..1024)")):
        parse_path(path)


def test_a_time_in_exponent_notation_is_read_with_its_exponent(tmp_path: Path) -> None:
    # `batch_cost 1.35808 sec` written as `batch_cost 13.58080e-1 sec`: the same time.
    source = LOGS / "paddle" / "models_pr4882_ips.log"
    text = source.read_text()
    exponent = re.sub(r"batch_cost (\d+\.\d+)", lambda m: f"batch_cost {float(m[1]) * 10:.5f}e-1",
                      text)
    assert "batch_cost 13.58080e-1 sec" in exponent
    path = tmp_path / "models_pr4882_ips.log"
    path.write_text(exponent)
    hints = LogHints(num_nodes=1, gpus_per_node=1, batch_size_per_device=128)
    plain, written = parse_path(source, hints=hints), parse_path(path, hints=hints)
    assert plain.throughput_sps is not None and written.throughput_sps is not None
    assert written.throughput_sps == pytest.approx(plain.throughput_sps, rel=1e-6)


def test_collect_lists_each_hostile_file_with_its_reason_and_keeps_the_good_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.log").write_text(MLLOG.read_text())
    for name, text, _ in MLLOG_CASES:
        (logs / f"{name}.log").write_text(text)
    for name, source, text, _ in TEXT_CASES:
        (logs / Path(source).parent.name).mkdir(exist_ok=True)
        (logs / Path(source).parent.name / f"{name}.log").write_text(text)
    out = tmp_path / "out"
    assert collect.main(["--import-logs", str(logs), "--out", str(out), "--no-plots",
                         "--quiet"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    with (out / "runs.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["source"].rsplit("/", 1)[-1] for r in rows] == ["good.log"]
    assert rows[0]["status"] == "ok" and float(rows[0]["throughput_sps"]) > 0
    report = (out / "report.md").read_text()
    section = report[report.index("## Log files not imported"):]
    for name, _, reason in MLLOG_CASES:
        line = next(ln for ln in section.splitlines() if f"{name}.log" in ln)
        assert md_cell(reason) in line, line
    for name, *_ in TEXT_CASES:
        assert f"{name}.log" in section


def test_collect_refuses_a_billion_nodes_on_its_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs").mkdir()
    assert collect.main(["--import-logs", str(tmp_path / "logs"), "--out", str(tmp_path / "o"),
                         "--nodes", str(10**9)]) == 2
    assert "num_nodes: 1000000000 is out of range (1..65536)" in capsys.readouterr().err
