"""A warm start reuses the kernel configurations an earlier run tuned.

Torch's own autotune cache (a real `.best_config` file written by `AutotuneCache.save`, read by
the real `check_autotune_cache`) is used throughout; the one stand-in is the autotuner whose
`recheck_autotune_cache` is under test: its loaded kernels and the build of a configuration.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from toolkit.workloads.pytorch import tuning_cache

pytest.importorskip("triton")
from torch._inductor.runtime.autotune_cache import AutotuneCache
from torch._inductor.runtime.runtime_utils import triton_config_to_hashable
from torch._inductor.runtime.triton_compat import Config
from torch._inductor.runtime.triton_heuristics import (
    CachingAutotuner,
    hash_configs,
)

META = {"coordinate_descent_tuning": True, "autotune_local_cache": True,
        "autotune_remote_cache": False}


class LoadedKernel:
    """The autotuner as the FX-graph cache hands it back: its built kernels (`compile_results`),
    each with the configuration it was built for; building another one is recorded."""

    def __init__(self, filename: str, configs: list[Any]) -> None:
        self.filename = filename
        self.inductor_meta = dict(META)
        self.compile_results = [SimpleNamespace(config=c) for c in configs]
        self.fn = SimpleNamespace(fn=None)
        self.built: list[Any] = []
        self.autotune_cache_info: dict[str, Any] = {}

    def _precompile_config(self, cfg: Any) -> Any:
        self.built.append(cfg)
        return SimpleNamespace(config=cfg)


def reloaded() -> Any:
    return SimpleNamespace(fn="the kernel's Triton function")


def store(filename: str, configs: list[Any], best: Any, *, tuned: bool) -> None:
    """What an earlier run's tuning left in the cache directory for this kernel."""
    cache = AutotuneCache.create(META, filename, hash_configs(configs))
    assert cache is not None
    cache.save(best, 1_000_000, found_by_coordesc=tuned)


def kernel_file(tmp_path) -> str:
    path = tmp_path / "ab" / "cabcdef0123.py"
    path.parent.mkdir()
    path.write_text("# a generated kernel\n")
    return str(path)


def rechecked(tmp_path, stored: dict[str, int], *, tuned: bool) -> tuple[LoadedKernel, list[Any]]:
    """A kernel built for two candidates (XBLOCK 128 with 4 warps, 256 with 8), after the
    recheck, with `stored` (8 warps) in the cache as an earlier run left it."""
    filename = kernel_file(tmp_path)
    candidates = [Config({"XBLOCK": 128}, num_warps=4, num_stages=1),
                  Config({"XBLOCK": 256}, num_warps=8, num_stages=1)]
    store(filename, candidates, Config(stored, num_warps=8, num_stages=1), tuned=tuned)
    kernel = LoadedKernel(filename, candidates)
    tuning_cache.recheck_autotune_cache(kernel, reloaded)
    return kernel, candidates


def test_a_tuned_configuration_among_the_loaded_ones_is_kept_and_not_tuned_again(tmp_path):
    filename = kernel_file(tmp_path)
    first = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    store(filename, [first], Config({"XBLOCK": 128}, num_warps=4, num_stages=1), tuned=True)
    kernel = LoadedKernel(filename, [first])
    tuning_cache.recheck_autotune_cache(kernel, reloaded)
    assert kernel.autotune_cache_info["autotune_cache_state"] == "hit"
    assert [r.config for r in kernel.compile_results] == [first]
    assert first.found_by_coordesc is True  # run() skips tuning for this kernel
    assert kernel.built == []


def test_a_tuned_configuration_no_candidate_had_is_built(tmp_path):
    kernel, _ = rechecked(tmp_path, stored={"XBLOCK": 512}, tuned=True)
    (built,) = kernel.built
    assert triton_config_to_hashable(built) == (("XBLOCK", 512), ("num_warps", 8),
                                                ("num_stages", 1))
    assert built.found_by_coordesc is True
    assert [r.config for r in kernel.compile_results] == [built]
    assert kernel.fn == "the kernel's Triton function"  # reloaded from source to build it


def test_nothing_stored_leaves_the_kernel_to_be_tuned(tmp_path):
    filename = kernel_file(tmp_path)
    only = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    kernel = LoadedKernel(filename, [only])
    tuning_cache.recheck_autotune_cache(kernel, reloaded)
    assert kernel.autotune_cache_info["autotune_cache_state"] == "miss"
    assert [r.config for r in kernel.compile_results] == [only]
    assert not getattr(only, "found_by_coordesc", False)
    assert kernel.built == []


def test_a_stored_choice_among_candidates_that_was_not_tuned_is_kept_unmarked(tmp_path):
    kernel, candidates = rechecked(tmp_path, stored={"XBLOCK": 256}, tuned=False)
    assert [r.config for r in kernel.compile_results] == [candidates[1]]
    assert not getattr(candidates[1], "found_by_coordesc", False)  # still to be tuned


def _defective(self, reload_kernel_from_src):  # the guard of the releases that re-tune
    configs = [result.config for result in self.compile_results]
    if len(configs) > 1:
        return configs
    return None


def _corrected(self, reload_kernel_from_src):
    configs = [result.config for result in self.compile_results]
    for result in self.compile_results:
        result.config.found_by_coordesc = True
    return configs


def test_the_defect_is_recognised_from_the_method_and_only_then_replaced(monkeypatch):
    assert tuning_cache.has_defect(_defective)
    assert not tuning_cache.has_defect(_corrected)
    assert not tuning_cache.has_defect(len)  # no Python source: left alone
    # this torch's own method reuses stored configurations: nothing to replace
    installed = CachingAutotuner.recheck_autotune_cache
    assert not tuning_cache.has_defect(installed)
    assert tuning_cache.reuse_tuned_configs() is False
    assert CachingAutotuner.recheck_autotune_cache is installed
    monkeypatch.setattr(CachingAutotuner, "recheck_autotune_cache", _defective)
    monkeypatch.setattr(tuning_cache, "_replaced", [])
    assert tuning_cache.reuse_tuned_configs() is True
    assert CachingAutotuner.recheck_autotune_cache is tuning_cache.recheck_autotune_cache
    assert tuning_cache.reuse_tuned_configs() is True  # twice is once


def test_kernel_tuning_sets_inductor_up_and_leaves_a_sound_torch_alone(monkeypatch):
    import torch._inductor.config as inductor_config

    from toolkit.workloads.pytorch.common import RunOptions, apply_compiler_settings

    # Inductor's own patch, not monkeypatch: monkeypatch's undo leaves the option deleted from
    # torch's config module, and a later compile in this process fails on it.
    with inductor_config.patch(coordinate_descent_tuning=False):
        installed = CachingAutotuner.recheck_autotune_cache
        apply_compiler_settings(RunOptions(compile=True, kernel_tuning=False))
        assert inductor_config.coordinate_descent_tuning is False
        apply_compiler_settings(RunOptions(compile=True, kernel_tuning=True))
        assert inductor_config.coordinate_descent_tuning is True
        assert CachingAutotuner.recheck_autotune_cache is installed  # this torch reuses them
        monkeypatch.setattr(CachingAutotuner, "recheck_autotune_cache", _defective)
        monkeypatch.setattr(tuning_cache, "_replaced", [])
        apply_compiler_settings(RunOptions(compile=True, kernel_tuning=True))
        assert CachingAutotuner.recheck_autotune_cache is tuning_cache.recheck_autotune_cache


def test_the_compile_cache_record_reads_dynamos_own_counters():
    from torch._dynamo.utils import counters

    from toolkit.workloads.pytorch.common import compile_cache_counts

    groups = ("inductor", "aot_autograd")
    saved = {g: counters[g].copy() for g in groups}
    try:
        for g in groups:
            counters[g].clear()
        assert compile_cache_counts() is None  # nothing compiled in this process
        counters["inductor"]["fxgraph_cache_hit"] += 2
        counters["aot_autograd"]["autograd_cache_hit"] += 1
        counters["inductor"]["coordesc_tuning_bench"] += 5
        counters["inductor"]["pattern_matcher_count"] += 40  # not a cache figure
        assert compile_cache_counts() == {
            "graph_hits": 2, "graph_misses": 0, "graph_bypasses": 0, "autograd_hits": 1,
            "autograd_misses": 0, "tuning_trials": 5}
    finally:
        for g in groups:
            counters[g].clear()
            counters[g].update(saved[g])


def test_a_kernel_the_correction_cannot_handle_gets_the_replaced_method(tmp_path, monkeypatch):
    calls = []

    def defective(self, reload_kernel_from_src):  # len(configs) > 1: the releases that re-tune
        calls.append(self)

    monkeypatch.setattr(CachingAutotuner, "recheck_autotune_cache", defective)
    monkeypatch.setattr(tuning_cache, "_replaced", [])
    assert tuning_cache.reuse_tuned_configs() is True
    odd = SimpleNamespace(compile_results=[SimpleNamespace()])  # no config: not as expected
    tuning_cache.recheck_autotune_cache(odd, reloaded)
    assert calls == [odd]
    # a kernel it can handle never reaches the replaced method
    kernel, _ = rechecked(tmp_path, stored={"XBLOCK": 256}, tuned=True)
    assert calls == [odd] and len(kernel.compile_results) == 1
