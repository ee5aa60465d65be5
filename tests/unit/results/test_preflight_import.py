"""Recorded nccl-tests outputs and nvidia-smi dumps (tests/data, with their sources) judged and
tabled as a preflight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.parsers.test_nccl_tests import _json_document
from toolkit.analysis.preflight import judge
from toolkit.preflight import main
from toolkit.results.preflight_import import ImportError_, read_any

DATA = Path(__file__).resolve().parents[2] / "data"
NCCL = DATA / "nccl_tests"
SMI = DATA / "nvidia_smi"


def test_nccl_tests_busbw_at_the_largest_size_is_the_published_one() -> None:
    v = judge(read_any(NCCL / "a3mega_allreduce_2n8g_h100.txt"))
    fig = v.figures
    assert fig["metric"].tolist() == ["all_reduce"]
    # the file's last row: 8589934592 B, out-of-place busbw 338.82 GB/s over 2 hosts x 8 GPUs
    assert fig["value"].iloc[0] == 338.82 and fig["bytes"].iloc[0] == 8589934592
    assert fig["scope"].iloc[0] == "job" and sorted(fig["nodes"].iloc[0]) == [
        "ztan-mig-235z", "ztan-mig-gq73"]
    assert v.ok


def test_several_nccl_tests_files_are_peers() -> None:
    import pandas as pd

    frames = [read_any(NCCL / name) for name in ("a3mega_allreduce_2n8g_h100.txt",
                                                 "eks_efa_v100_allreduce_2n1g_nccl_info.txt")]
    v = judge(pd.concat(frames, ignore_index=True))
    # different GPUs and rank counts: not compared with one another
    assert set(v.figures["reference_kind"].dropna()) == set()


def test_dumps_name_their_faults() -> None:
    import pandas as pd

    frame = pd.concat([read_any(SMI / "a10_remapped_rows_535.129.03.txt"),
                       read_any(SMI / "v100_throttle_reasons_418.67.txt"),
                       read_any(SMI / "h100_8gpu_535.161.08.txt")], ignore_index=True)
    nodes = judge(frame).nodes.set_index("node")
    assert nodes.loc["a10_remapped_rows_535.129.03", "verdict"] == "fault"
    assert "row remapping waits for a GPU reset" in nodes.loc["a10_remapped_rows_535.129.03",
                                                               "reasons"]
    assert nodes.loc["v100_throttle_reasons_418.67", "verdict"] == "slow"
    assert "runs at x2 of x16" in nodes.loc["v100_throttle_reasons_418.67", "reasons"]
    h100 = nodes.loc["h100_8gpu_535.161.08"]
    assert h100["verdict"] == "slow" and h100["ranks"] == 8
    assert "hardware slowdown active in the dump" in h100["reasons"]
    assert "HW Power Brake Slowdown" in h100["reasons"]


def test_xml_dumps_read_like_text_ones() -> None:
    # an A10G whose link trained to x8 of its x16 (no rows pending a remap): slow, for the link
    v = judge(read_any(SMI / "a10g_remapped_rows.xml"))
    assert v.nodes["verdict"].tolist() == ["slow"]
    assert v.nodes["reasons"].tolist() == ["PCIe link runs at x8 of x16"]
    assert judge(read_any(SMI / "a100_sxm4_mig_535.54.03.xml")).ok


def test_a_file_of_neither_kind_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\nworld\n")
    with pytest.raises(ImportError_, match=r"notes\.txt"):
        read_any(bad)


def test_a_row_that_is_no_measurement_refuses_the_file_naming_file_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SOURCE.md, "Edited copies": the A3 Mega output with one busbw replaced by `inf`.
    bad = NCCL / "a3mega_allreduce_2n8g_h100_busbw_inf.txt"
    with pytest.raises(ImportError_, match=r"a3mega_allreduce_2n8g_h100_busbw_inf\.txt: .*"
                                           r"line 49: 'inf' in column busbw is not a "
                                           r"measurement"):
        read_any(bad)
    res = tmp_path / "res"
    assert main(["import", str(bad), "--results", str(res)]) == 2
    assert "line 49: 'inf' in column busbw" in capsys.readouterr().err
    assert not res.exists()


def test_the_import_command_writes_a_judged_preflight(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "res"
    rc = main(["import", str(SMI / "a10_remapped_rows_535.129.03.txt"),
               str(NCCL / "a3mega_allreduce_2n8g_h100.txt"), "--results", str(res)])
    assert rc == 6
    (directory,) = (res / "preflight").iterdir()
    assert directory.name.endswith("-import")
    assert (directory / "exclude.txt").read_text().strip() == "a10_remapped_rows_535.129.03"
    assert (directory / "preflight.png").stat().st_size > 1000
    assert "338.8" in (directory / "preflight.md").read_text()
    bad = tmp_path / "x.txt"
    bad.write_text("nothing\n")
    assert main(["import", str(bad), "--results", str(res)]) == 2
    assert "x.txt" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", ["txt", "xml"])
def test_a_healthy_h200_recorded_here_is_ok(suffix: str) -> None:
    frame = read_any(SMI / f"h200_device_580.159.04.{suffix}")
    v = judge(frame)
    assert v.ok and v.nodes["device"].tolist() == ["NVIDIA H200"]
    (gpu,) = v.readings.to_dict(orient="records")
    assert gpu["pcie_width_under_load"] == gpu["pcie_width_max"] == 16
    assert gpu["power_limit_w"] == 700 and gpu["hw_slowdown_share"] == 0
    assert gpu["ecc_uncorrected_volatile"] == 0 and gpu["sm_clock_max_mhz"] == 1980


def test_results_that_are_not_ours_are_refused_and_left_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me\n")
    rc = main(["import", str(SMI / "h200_device_580.159.04.txt"), "--results", str(mine)])
    assert rc == 2 and "not a results directory" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]


def _set(doc: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    node: object = doc
    for part in parents:
        name, _, index = part.partition("[")
        node = node[name] if name else node  # type: ignore[index]
        if index:
            node = node[int(index.rstrip("]"))]  # type: ignore[index]
    name, _, index = last.partition("[")
    if index:
        node[name][int(index.rstrip("]"))] = value  # type: ignore[index]
    else:
        node[name] = value  # type: ignore[index]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("results[0].size", "8", r"results\[0\]\.size: '8' is not an integer"),
    ("results[0].size", -8, r"results\[0\]\.size: -8 is out of range"),
    ("results[1].count", 1e300, r"results\[1\]\.count: 1e\+300 is out of range"),
    ("results[0].size", 8.5, r"results\[0\]\.size: 8\.5 is not an integer"),
    ("results[0].root", [1], r"results\[0\]\.root: \[1\] is not an integer"),
    ("results[0].root", "  -1e3", r"results\[0\]\.root: '  -1e3' is not an integer"),
    ("results[0].type", 7, r"results\[0\]\.type: 7 is not a string"),
    ("results[1].out_of_place.bus_bw", -3.5, r"out_of_place\.bus_bw: -3\.5 is out of range"),
    ("results[1].out_of_place.bus_bw", "fast", r"out_of_place\.bus_bw: 'fast' is not a number"),
    ("results[1].out_of_place.bus_bw", 1e12, r"bus_bw: 1000000000000\.0 is out of range"),
    ("results[1].in_place.time", float("inf"), r"in_place\.time: inf is out of range"),
    ("results[0].out_of_place.nwrong", float("inf"), r"out_of_place\.nwrong: inf is not an"),
    ("results[0].out_of_place.nwrong", True, r"out_of_place\.nwrong: True is not an integer"),
    ("results[0].in_place", [], r"results\[0\]\.in_place: expected an object"),
    ("config", [], r"config: expected an object, found \[\]"),
    ("config.devices", 5, r"config\.devices: expected a list, found 5"),
    ("config.devices[0].rank", -1, r"config\.devices\[0\]\.rank: -1 is out of range"),
    ("config.devices[1].pid", "x", r"config\.devices\[1\]\.pid: 'x' is not an integer"),
    ("config.devices[0].hostname", 42, r"config\.devices\[0\]\.hostname: 42 is not a string"),
    ("config.devices[0].device", 10**9, r"config\.devices\[0\]\.device: 1000000000 is out of"),
    ("args", 7, r"args: expected a list, found 7"),
    ("args[0]", {"a": 1}, r"args\[0\]: \{'a': 1\} is not a string"),
    ("average_bus_bandwidth", 5, r"average_bus_bandwidth: expected an object, found 5"),
    ("average_bus_bandwidth.bandwidth", -1.0, r"bandwidth: -1\.0 is out of"),
    ("out_of_bounds", [], r"out_of_bounds: expected an object"),
    ("out_of_bounds.count", -1, r"out_of_bounds\.count: -1 is out of range"),
    ("nccl_version", "2.20", r"nccl_version: '2\.20' is not an integer"),
])
def test_nccl_tests_json_with_a_field_of_the_wrong_type_or_range_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object,
        message: str) -> None:
    doc = json.loads(_json_document())
    _set(doc, field, value)
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportError_, match=rf"allreduce\.json: .*{message}"):
        read_any(path)
    assert main(["import", str(path), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err
    assert "allreduce.json" in err and "Traceback" not in err
    assert not (tmp_path / "res").exists()


def test_the_json_document_of_the_tests_reads(tmp_path: Path) -> None:
    path = tmp_path / "allreduce.json"
    path.write_text(_json_document())
    assert read_any(path)["value"].max() == 338.82


def test_an_unmeasured_json_bandwidth_is_no_figure(tmp_path: Path) -> None:
    # nccl-tests' JSON writer prints "nan" for a value it did not measure: that row gives no
    # preflight figure, never a NaN one
    doc = json.loads(_json_document())
    doc["results"][1]["out_of_place"]["bus_bw"] = "nan"
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps(doc))
    figures = read_any(path)
    assert figures["value"].notna().all()
    assert set(figures["bytes"]) == {8}  # the 8-byte row, on each of the two hosts
