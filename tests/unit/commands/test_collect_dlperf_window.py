"""`collect --import-logs` with DLPerf's window (`--warmup-batches W --train-batches T`)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from toolkit import collect

MXNET_BERT = (Path(__file__).resolve().parents[2] / "data" / "logs" / "mxnet_bert" / "1n1g"
              / "bert_b8_fp32_1.log")


def _imported_throughputs(out: Path) -> dict[str, float]:
    with (out / "runs.csv").open() as fh:
        return {r["source"].rsplit("/", 1)[-1]: float(r["throughput_sps"])
                for r in csv.DictReader(fh)}


def test_collect_takes_dlperfs_window_form(tmp_path: Path) -> None:
    tree = tmp_path / "logs" / "1n1g"
    tree.mkdir(parents=True)
    (tree / "bert_b8_fp32_1.log").write_bytes(MXNET_BERT.read_bytes())
    dlperf_form, plain_form = tmp_path / "a", tmp_path / "b"
    assert collect.main(["--import-logs", str(tmp_path / "logs"), "--out", str(dlperf_form),
                         "--warmup-batches", "960", "--train-batches", "990", "--no-plots",
                         "--quiet"]) == 0
    assert collect.main(["--import-logs", str(tmp_path / "logs"), "--out", str(plain_form),
                         "--warmup-iterations", "960", "--measured-iterations", "30",
                         "--no-plots", "--quiet"]) == 0
    figure = _imported_throughputs(dlperf_form)["bert_b8_fp32_1.log"]
    assert figure == _imported_throughputs(plain_form)["bert_b8_fp32_1.log"]
    # DLPerf's arithmetic over the last three lines: mean(1000 / latency x 8)
    assert round(figure, 2) == round(sum(1000 / x * 8 for x in (106.6, 106.5, 108.0)) / 3, 2)


@pytest.mark.parametrize(("args", "message"), [
    (["--warmup-batches", "20"], "--warmup-batches and --train-batches go together"),
    (["--warmup-batches", "20", "--train-batches", "20"],
     "--train-batches must be more than --warmup-batches"),
])
def test_collect_refuses_a_dlperf_window_that_means_nothing(tmp_path: Path, capsys,
                                                            args: list[str],
                                                            message: str) -> None:
    (tmp_path / "logs").mkdir()
    assert collect.main(["--import-logs", str(tmp_path / "logs"), "--out",
                         str(tmp_path / "o"), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_window_past_a_files_end_is_reported_for_that_file(tmp_path: Path, capsys) -> None:
    tree = tmp_path / "logs" / "1n1g"
    tree.mkdir(parents=True)
    (tree / "bert_b8_fp32_1.log").write_bytes(MXNET_BERT.read_bytes())
    (tree / "bert_b8_fp32_2.log").write_text(
        "\n".join(MXNET_BERT.read_text().splitlines()[:3]) + "\n")  # ends at step 970
    out = tmp_path / "o"
    assert collect.main(["--import-logs", str(tmp_path / "logs"), "--out", str(out),
                         "--warmup-iterations", "940", "--measured-iterations", "50",
                         "--no-plots", "--quiet"]) == 0
    err = capsys.readouterr().err
    with (out / "runs.csv").open() as fh:
        rows = {r["source"].rsplit("/", 1)[-1]: r for r in csv.DictReader(fh)}
    assert rows["bert_b8_fp32_1.log"]["window_warning"] == ""
    assert rows["bert_b8_fp32_2.log"]["window_warning"] == (
        "log ends at iteration 970, before the window end 990 (940 warm-up + 50 measured); "
        "measured up to 970")
    assert "bert_b8_fp32_2.log: log ends at iteration 970" in " ".join(err.split())
    assert "bert_b8_fp32_1.log" not in err
    assert "imported logs that do not fit the window: 1" in (out / "report.md").read_text()
