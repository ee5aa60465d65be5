"""Inductor's tuned kernel configurations, reused by every later process that finds them.

With kernel tuning on (`RunOptions.kernel_tuning`), Inductor tunes each Triton kernel it generated
at the kernel's first call and stores the configuration it found beside the kernel in the compile
cache. A later process that takes the compiled graph from the FX-graph cache loads its kernels
ready-built (statically launchable) and asks `CachingAutotuner.recheck_autotune_cache` for the
stored configuration. In some torch releases (2.11 among them) that method reuses nothing for
the common case: it only consults the stored configuration when the kernel was built with more
than one candidate, and when it keeps a built kernel it does not mark it as already tuned. Every
warm start then tunes every kernel again: ResNet50 `amp_bf16` on one H200 spent 67 s of its first
step re-tuning 815 kernel configurations with every graph taken from the cache.

`reuse_tuned_configs()` puts a corrected method in its place when, and only when, the installed
torch has that defect, recognised from the method's own source; a torch that reuses stored
configurations keeps its own method. The replacement changes nothing that runs: the kernel
launched is the configuration the earlier process chose by measuring it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_DEFECT = "len(configs) > 1"
"""The defective method's guard: a stored configuration counts only among several candidates."""


def has_defect(method: Callable[..., Any]) -> bool:
    """Whether `recheck_autotune_cache` is the version that re-tunes stored configurations: it
    needs more than one candidate and never marks the kept kernel as tuned."""
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError):
        return False
    return _DEFECT in source and "found_by_coordesc =" not in source


_replaced: list[Callable[..., Any]] = []
"""The method `reuse_tuned_configs` replaced: what a kernel falls back to if the correction
cannot handle it."""


def recheck_autotune_cache(self: Any, reload_kernel_from_src: Callable[[], Any]) -> None:
    """On a kernel loaded ready-built from the FX-graph cache: keep only the configuration the
    autotune cache holds for it, marked as found by tuning when it was, building it first if it
    is not among the loaded ones; with nothing stored, leave the kernel to be tuned. Where that
    fails (an internal of this torch not as expected), the replaced method does its own work:
    the kernel is tuned again, which costs time and changes no result."""
    try:
        _reuse_stored_config(self, reload_kernel_from_src)
    except Exception:
        if not _replaced:
            raise
        _replaced[0](self, reload_kernel_from_src)


def _reuse_stored_config(self: Any, reload_kernel_from_src: Callable[[], Any]) -> None:
    from torch._inductor.runtime.runtime_utils import triton_config_to_hashable
    from torch._inductor.runtime.triton_heuristics import check_autotune_cache

    configs = [result.config for result in self.compile_results]
    cached, _, info = check_autotune_cache(configs, self.filename, self.inductor_meta)
    self.autotune_cache_info = info
    if info.get("autotune_cache_state") != "hit" or len(cached) != 1:
        return
    best = cached[0]
    tuned = bool(getattr(best, "found_by_coordesc", False))
    wanted = triton_config_to_hashable(best)
    for result in self.compile_results:
        if triton_config_to_hashable(result.config) == wanted:
            result.config.found_by_coordesc = tuned
            self.compile_results = [result]
            return
    if tuned:  # tuning found a configuration none of the candidates had: build it
        if self.fn.fn is None:
            self.fn = reload_kernel_from_src().fn
        self.compile_results = [self._precompile_config(best)]


def reuse_tuned_configs() -> bool:
    """Make a warm start reuse the stored tuned configurations (see the module docstring).
    True when the corrected method was put in place, False when this torch needs none or has no
    such method."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        return False
    current = getattr(CachingAutotuner, "recheck_autotune_cache", None)
    if current is recheck_autotune_cache:
        return True
    if current is None or not has_defect(current):
        return False
    _replaced[:] = [current]
    CachingAutotuner.recheck_autotune_cache = recheck_autotune_cache
    return True
