"""The run row: what every parser produces and what `toolkit.collect` consumes.

One row is one run (one repeat of one case). The toolkit's own rank files and every foreign log
family end up as rows with these columns, so native and imported results can share one table.
Column names carry their units (`_sps` samples per second, `_s` seconds, `_mib` MiB).

Arithmetic over rows (medians, speedups) lives in `toolkit.analysis.summary`; reading files lives in
the per-format modules of this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

#: How a throughput figure was obtained; a row always says which.
METHOD_TIMESTAMP_WINDOW = "timestamp_window"
METHOD_MEAN_OF_RATES = "mean_of_rates"
METHOD_LATENCY = "latency"

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_INCOMPLETE = "incomplete"


@dataclass
class RunRow:
    """One run's figures. Fields left `None` are unknown, never guessed."""

    case_id: str
    """Case identifier (native) or a name derived from the log path (imported)."""
    repeat: int
    """Repeat index within the case, 0-based for native runs; the log's own number if imported."""
    status: str
    """`ok`, `failed` or `incomplete`."""
    framework: str
    model: str
    precision: str
    num_nodes: int
    gpus_per_node: int
    batch_size_per_device: int
    global_batch_size: int | None = None
    """Samples per optimizer step over all ranks (accumulation included)."""
    dp: int | None = None
    """Data-parallel degree: ranks / (tp x pp); `None` where the ranks are not known."""
    tp: int = 1
    """Tensor-parallel degree (1: none, or a log that does not say)."""
    pp: int = 1
    """Pipeline-parallel degree (1: none, or a log that does not say)."""
    throughput_sps: float | None = None
    """Samples per second over the measured window."""
    method: str | None = None
    """One of the METHOD_* constants."""
    warmup_iterations: int | None = None
    measured_iterations: int | None = None
    step_time_median_s: float | None = None
    peak_memory_mib: float | None = None
    """Peak GPU memory (NVML, or nvidia-smi for imported logs); `None` where not measured."""
    loss_first: float | None = None
    loss_last: float | None = None
    variant: str = ""
    """Everything else that distinguishes cases which share the columns above (model size
    knobs, parallelism): runs are only compared within the same variant."""
    source: str = ""
    """Path of the file(s) the row was read from."""
    error: str = ""
    """Why a run failed or was incomplete."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Format-specific figures (latency, TFLOP/s, telemetry, ...), written as extra columns."""
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of this run's files that could not be read (a rank file cut short, a
    status.json half written, a directory where a file belongs). Listed in the report, not a
    column."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """Where and how the run ran, as recorded with it (the toolkit's meta.json: hosts, versions,
    devices, start time); empty for a foreign log. Read by the results store, not a column."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    """Where and when each rank ran (`host`, `start_s`, `end_s`, `cpus`: the CPUs it could run
    on or None, `host_cpus`), from the toolkit's rank files; empty for a foreign log. Read to
    find runs that shared their CPUs (`toolkit.analysis.sharing`), not a column."""

    profiles: list[dict[str, Any]] = field(default_factory=list)
    """One record per rank that profiled its steps (`profile:` grid option), lowest rank first:
    its rank, host and mesh coordinates and its profile figures, under the names runs.csv gives
    the lowest one's; empty for a foreign log. Written to profiles.csv, not a column."""

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in RUN_COLUMNS}
        for key, value in self.extra.items():
            d.setdefault(key, value)
        return d


RUN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RunRow)
                                     if f.name not in ("extra", "skipped_files", "provenance",
                                                           "spans", "profiles"))
