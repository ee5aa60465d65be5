"""A profiled rank's Chrome trace, written beside its events: `profile-rank<NNN>.json` in the
run directory, unless it is larger than the limit (a long GPT step can trace to hundreds of
MB), in which case only the kernel-time breakdown stays, with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.results.layout import profile_file
from toolkit.results.safe_write import atomic_write_text, json_text

TRACE_LIMIT_BYTES = 256 * 2**20
"""Largest trace kept on disk; the breakdown in the rank's summary is kept whatever the size."""


def save_trace(run_dir: Path, rank: int, trace: Any, profile: dict[str, Any],
               limit: int = TRACE_LIMIT_BYTES) -> dict[str, Any]:
    """Write the trace (within `limit` bytes) and return the rank's `profile` summary with
    `trace` (the file's name) or `trace_skipped` (why it was not written)."""
    text = json_text(trace)
    size = len(text.encode("utf-8"))
    if size > limit:
        return {**profile, "trace": None,
                "trace_skipped": f"{size / 2**20:.0f} MiB trace over the {limit / 2**20:.0f} "
                                 "MiB limit: not written (the breakdown is kept)"}
    path = profile_file(run_dir, rank)
    atomic_write_text(path, text, root=run_dir)
    return {**profile, "trace": path.name}
