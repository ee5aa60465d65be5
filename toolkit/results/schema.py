"""The event schema of the rank files: one JSON object per line, imported by the worker that
writes them and by the reader that turns them into rows. No event name is spelled elsewhere.

Every record has `schema` (SCHEMA), `type` (an `Event`), `rank` and `time_s` (wall clock, Unix
seconds). The fields of each type are listed in FIELDS; a reader takes what it needs and
ignores the rest, so adding a field does not change SCHEMA.
"""

from __future__ import annotations

from enum import Enum

SCHEMA = 1
"""Bumped when a field changes meaning or goes away; readers check it."""

COMMON_FIELDS = ("schema", "type", "rank", "time_s")

PROGRESS_EVERY_S = 10.0
"""Seconds between a command case rank's `progress` records, at most."""


class Event(str, Enum):
    START = "start"
    """The rank is about to train: world, local rank, node, host, device, case id, config hash,
    repeat, binding."""
    ITER = "iter"
    """One training iteration: `iteration` (1-based), `elapsed_s` (monotonic seconds from one
    synchronised start to when the device finished it), `step_time_s`, `samples` (global
    samples in the step), `loss`, `warmup` (bool)."""
    TELEMETRY = "telemetry"
    """One sample of the rank's GPU (memory, utilisation, power, clocks); a rank that samples
    its node's GPUs (`launch: per_node`) names each sample's GPU in `gpu_bus_id`."""
    PROGRESS = "progress"
    """A command case's program has reported `steps` step records so far (written as they are
    read, at most every `PROGRESS_EVERY_S`; its `iter` events come when it exits), so a rank
    killed before then is known to have trained."""
    SUMMARY = "summary"
    """Figures the rank computed at the end (framework peak memory, telemetry summary, what the
    run options resolved to)."""
    PROBE = "probe"
    """A preflight figure (`toolkit.probes.measurement.Measurement`): `probe`, `metric`,
    `value`, `unit`, `scope`, `group`, `detail`, `reason`."""
    END = "end"
    """The rank finished normally (`wall_s`)."""
    ERROR = "error"
    """It did not: `message`, `traceback`; a hang watchdog's error has `watchdog` instead
    (limit, idle seconds, last iteration, silent peers)."""


FIELDS: dict[Event, tuple[str, ...]] = {
    Event.START: ("world_size", "local_rank", "node", "host", "device", "case_id",
                  "config_hash", "repeat"),
    Event.ITER: ("iteration", "elapsed_s", "step_time_s", "samples", "loss", "warmup"),
    Event.TELEMETRY: (),
    Event.PROGRESS: ("steps",),
    Event.SUMMARY: (),
    Event.PROBE: ("probe", "metric", "value", "unit", "scope", "group"),
    Event.END: ("wall_s",),
    Event.ERROR: ("message",),
}
"""The fields a reader may rely on, beyond COMMON_FIELDS (telemetry and summary records carry
what the sampler and the workload measured)."""
