"""Recorded nccl-tests outputs and nvidia-smi dumps (tests/data, with their sources) judged and
tabled as a preflight."""

from __future__ import annotations

from pathlib import Path

import pytest

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
