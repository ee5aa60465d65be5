"""The versions rank 0 records in meta.json: the NVIDIA driver where NVML is loaded (the store
keeps it as the run's `driver`), nothing where NVML cannot answer."""

from __future__ import annotations

import sys
import types

import pytest

from toolkit.rank.meta import framework_versions
from toolkit.results.provenance import provenance


def fake_nvml(driver: str | None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    calls: list[str] = []

    def get() -> str:
        if driver is None:
            raise RuntimeError("NVML Shared Library Not Found")
        return driver

    module.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = get  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def test_the_driver_is_recorded_where_nvml_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml("580.159.04")
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    versions = framework_versions()
    assert versions["driver"] == "580.159.04"
    assert nvml.calls == ["init", "shutdown"]  # type: ignore[attr-defined]
    assert provenance({"versions": versions})["driver"] == "580.159.04"


def test_no_driver_where_nvml_cannot_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(None))
    assert "driver" not in framework_versions()
    monkeypatch.delitem(sys.modules, "pynvml")
    assert "driver" not in framework_versions()
