"""`benchmarks/gpu_common.py`, what the parts of the GPU runner share: a command past its time
is ended and says so, a log without a profile gives none, and the record of the machine is
written on a machine without a GPU too."""

from __future__ import annotations

import sys

import pytest

from tests.unit.workloads.conftest import benchmark_module


@pytest.fixture(scope="module")
def gpu_common():
    yield from benchmark_module("gpu_common")


def test_a_command_past_its_time_is_killed_and_says_so(gpu_common, tmp_path):
    log = tmp_path / "slow.log"
    rc, secs = gpu_common.run([sys.executable, "-c", "import time; print('started', flush=True);"
                               " time.sleep(30)"], log, timeout=2)
    text = log.read_text()
    assert rc == 124 and secs < 20
    assert text.startswith(f"$ {sys.executable} -c") and "started" in text
    assert "timed out after 2 s" in text


def test_a_log_without_a_profile_gives_an_empty_one(gpu_common, tmp_path):
    log = tmp_path / "plain.log"
    log.write_text('$ python3 bare_resnet50.py\n{"bare_throughput_sps": 1.0}\n')
    assert gpu_common.plain_profile(log) == {}
    assert gpu_common.last_json(log) == {"bare_throughput_sps": 1.0}


def test_versions_are_appended_without_a_gpu(gpu_common, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert gpu_common.main(["--versions", str(tmp_path / "out")]) == 0
    assert gpu_common.main(["--versions", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "versions.txt").read_text()
    assert text.count("\n# ") == 1 and text.startswith("# ")
    assert "nvidia-smi:" in text and f"python {sys.version.split()[0]}" in text
