"""Results for other tools: each run as an MLPerf log (`:::MLLOG` lines) and as an MLPerf-style
system description (JSON), written by `python -m toolkit.collect` beside its report.

Exporting is presentation of results that are already computed (the row of a run, its rank-0
events and meta.json), so it lives with the other writers of collect's outputs; reading such a
log back is a foreign-log format like any other (`parsers.mllog`), and packing a whole results
directory is the results directory's business (`toolkit.results.archive`).

MLLOG: standard keys from `mlperf_logging.mllog.constants` (submission_*, init_start/stop,
run_start/stop, seed, global_batch_size, gradient_accumulation_steps, tensor/pipeline
parallelism (context and expert: 1), micro_batch_size, lowest_numerical_precision_in_linear,
train_samples), one `block_start`/`block_stop` pair per training step (metadata: `step_num`,
cumulative `samples_count`, `loss`, `warmup`), and trainbench's two keys of `parsers.mllog`;
`trainbench_run` also carries the run's identity (config hash, run uuid, start time), by which
the store knows the run when its log is imported back (`toolkit.store.ingest`).
Times are rank 0's wall clock in ms, so a figure computed from the blocks is rank 0's window;
the run's own figure (the slowest rank's window) is the `trainbench_throughput` value.
System description: every field `mlperf_logging.system_desc_checker` requires, from
meta.json; what the run did not record is "" (unknown), never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parsers import mllog
from parsers.foreign import LogParseError
from parsers.rows import STATUS_OK, RunRow
from toolkit.results.layout import META_FILE, MLLOG_DIR, SYSTEMS_DIR, rank_file
from toolkit.results.runs import RankLog, read_json_object, read_rank_file
from toolkit.results.safe_write import atomic_write_json, atomic_write_text
from toolkit.store.ingest import IDENTITY_FIELDS

DEFAULT_SUBMITTER = "trainbench"
RDI_STATUS = "Research, Development, or Internal (RDI)"
"""The system description's `status` for systems that are not products."""

_PRECISION = {"fp32": "fp32", "tf32": "tf32", "amp_bf16": "bfloat16", "amp_fp16": "fp16"}


def _benchmark(model: str) -> str:
    c = mllog.constants()
    return {"resnet50": c.RESNET, "bert_base": c.BERT, "gpt": c.GPT3}.get(model, model)


def system_name(row: RunRow, meta: dict[str, Any] | None) -> str:
    """`<nodes>x<GPUs per node>x<device>`, e.g. `1x8xNVIDIA H100 80GB HBM3`."""
    devices = sorted({str(r.get("device")) for r in (meta or {}).get("ranks", [])
                      if isinstance(r, dict) and r.get("device")})
    device = devices[0] if len(devices) == 1 else ("/".join(devices) or "unknown device")
    return f"{row.num_nodes}x{row.gpus_per_node}x{device}"


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, time_s: float, event_type: str, key: str, value: Any = None,
            metadata: dict[str, Any] | None = None) -> None:
        event = {"namespace": "", "time_ms": round(time_s * 1000.0, 3), "event_type": event_type,
                 "key": key, "value": value, "metadata": metadata or {}}
        self.lines.append(mllog.TOKEN + json.dumps(event, sort_keys=False))


def mllog_text(row: RunRow, rank0: RankLog, meta: dict[str, Any] | None, *,
               submitter: str = DEFAULT_SUBMITTER) -> str:
    """The `:::MLLOG` lines of one run, from its row, rank 0's events and meta.json."""
    c = mllog.constants()
    case = (meta or {}).get("case") or {}
    start = rank0.start or {}
    iterations = [rank0.iterations[k] for k in sorted(rank0.iterations)]
    t_run = float(start.get("time_s") or (iterations[0]["time_s"] if iterations else 0.0))
    t_init = float((meta or {}).get("started_s") or t_run)
    out = _Lines()
    point, begin, end = c.POINT_IN_TIME, c.INTERVAL_START, c.INTERVAL_END
    for key, value in ((c.SUBMISSION_ORG, submitter),
                       (c.SUBMISSION_PLATFORM, system_name(row, meta)),
                       (c.SUBMISSION_DIVISION, c.OPEN), (c.SUBMISSION_STATUS, c.RESEARCH),
                       (c.SUBMISSION_BENCHMARK, _benchmark(row.model))):
        out.add(t_init, point, key, value)
    out.add(t_init, point, mllog.TRAINBENCH_RUN, {
        "case_id": row.case_id, "repeat": row.repeat, "framework": row.framework,
        "model": row.model, "precision": row.precision, "num_nodes": row.num_nodes,
        "gpus_per_node": row.gpus_per_node, "batch_size_per_device": row.batch_size_per_device,
        "variant": row.variant,
        # the run's identity in the store: a log read back is recognised as this run
        **{k: row.provenance[k] for k in IDENTITY_FIELDS
           if row.provenance.get(k) not in (None, "")}})
    out.add(t_init, begin, c.INIT_START)
    samples = [int(it.get("samples") or 0) for it in iterations]
    settings: list[tuple[str, Any]] = [
        (c.SEED, case.get("seed")),
        (c.GLOBAL_BATCH_SIZE, row.global_batch_size or (samples[0] if samples else None)),
        (c.GRADIENT_ACCUMULATION_STEPS, case.get("accumulation") or 1),
        (c.TENSOR_PARALLELISM, row.tp), (c.PIPELINE_PARALLELISM, row.pp),
        # the workloads have neither context nor expert parallelism
        (c.CONTEXT_PARALLELISM, 1), (c.EXPERT_PARALLELISM, 1),
        (c.MICRO_BATCH_SIZE, row.batch_size_per_device),
        (c.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, _PRECISION.get(row.precision, row.precision)),
        (c.TRAIN_SAMPLES, sum(samples)),
    ]
    for key, value in settings:
        if value is not None:
            out.add(t_init, point, key, value)
    out.add(t_run, end, c.INIT_STOP)
    out.add(t_run, begin, c.RUN_START)
    done, previous = 0, t_run
    for it, count in zip(iterations, samples, strict=True):
        step, t = int(it["iteration"]), float(it["time_s"])
        out.add(previous, begin, c.BLOCK_START, metadata={c.STEP_NUM: step,
                                                          c.SAMPLES_COUNT: done})
        done += count
        meta_stop: dict[str, Any] = {c.STEP_NUM: step, c.SAMPLES_COUNT: done,
                                     "warmup": bool(it.get("warmup"))}
        if isinstance(it.get("loss"), (int, float)):
            meta_stop["loss"] = it["loss"]
        out.add(t, end, c.BLOCK_STOP, metadata=meta_stop)
        previous = t
    t_stop = float((rank0.end or {}).get("time_s") or previous)
    if row.throughput_sps is not None:
        out.add(t_stop, point, mllog.TRAINBENCH_THROUGHPUT, row.throughput_sps, {
            "unit": "samples/s", "method": row.method,
            "warmup_iterations": row.warmup_iterations,
            "measured_iterations": row.measured_iterations})
    out.add(t_stop, end, c.RUN_STOP,
            metadata={c.STATUS: c.SUCCESS if row.status == STATUS_OK else c.ABORTED})
    return "\n".join(out.lines) + "\n"


def system_description(row: RunRow, meta: dict[str, Any] | None, *,
                       submitter: str = DEFAULT_SUBMITTER) -> dict[str, Any]:
    """The run's system in the fields of an MLPerf system description: every value a string,
    as MLPerf's own descriptions and its checker have them ("" = not recorded)."""
    meta = meta or {}
    machine = meta.get("machine") or {}
    versions = meta.get("versions") or {}
    ranks = [r for r in meta.get("ranks", []) if isinstance(r, dict)]
    devices = sorted({str(r.get("device")) for r in ranks if r.get("device")})
    gpu = any(r.get("device_type") == "cuda" for r in ranks)
    framework = row.framework
    if versions.get(row.framework):
        framework = f"{row.framework} {versions[row.framework]}"
    memory = machine.get("memory_mib")
    return {
        "submitter": submitter,
        "division": "open",
        "status": RDI_STATUS,
        "system_name": system_name(row, meta),
        "number_of_nodes": str(row.num_nodes),
        "host_processors_per_node": "",
        "host_processor_model_name": machine.get("cpu_model") or "",
        "host_processor_core_count": "",
        "host_processor_vcpu_count": str(machine.get("logical_cpus") or ""),
        "host_processor_frequency": "",
        "host_processor_caches": "",
        "host_processor_interconnect": "",
        "host_memory_capacity": f"{memory / 1024:.0f} GiB" if memory else "",
        "host_storage_type": "",
        "host_storage_capacity": "",
        "host_networking": "",
        "host_networking_topology": "",
        "host_memory_configuration": "",
        "accelerators_per_node": str(row.gpus_per_node if gpu else 0),
        "accelerator_model_name": ", ".join(devices) if gpu else "",
        "accelerator_host_interconnect": "",
        "accelerator_frequency": "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": "",
        "accelerator_memory_capacity": "",
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
        "cooling": "",
        "hw_notes": "" if gpu else "ran on CPU: " + ", ".join(devices),
        "framework": framework,
        "other_software_stack": ", ".join(
            [f"{k} {v}" for k, v in versions.items() if k != row.framework]
            + _container(meta.get("container"))),
        "operating_system": str(meta.get("platform") or ""),
        "sw_notes": f"trainbench case {row.case_id}, repeat {row.repeat}; hosts: "
                    + ", ".join(meta.get("hosts") or [])
                    + (f"; site: {meta['site']}" if meta.get("site") else ""),
    }


def _container(container: Any) -> list[str]:
    """`container <runtime> <image>[@digest]` of meta.json's container, where the run had one."""
    if not isinstance(container, dict) or not container.get("runtime"):
        return []
    image = str(container.get("image") or "")
    digest = container.get("digest")
    if digest and not image.endswith(str(digest)):
        image = f"{image}@{digest}"
    return [f"container {container['runtime']} {image}".rstrip()]


@dataclass
class Export:
    written: list[Path]
    skipped: list[tuple[str, str]]
    """(run, why) of runs that gave no export."""


def write_exports(out: Path, rows: list[RunRow], *,
                  submitter: str = DEFAULT_SUBMITTER) -> Export:
    """`mllog/<case>/r<k>.log` and `systems/<case>/r<k>.json` under `out` for every run of the
    toolkit's own (imported rows have no events to export)."""
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    try:
        mllog.constants()
    except LogParseError as error:
        ours = [r for r in rows if "log_family" not in r.extra]
        return Export([], [(str(out / MLLOG_DIR), str(error))] if ours else [])
    for row in rows:
        run_dir = Path(row.source)
        rank0 = rank_file(run_dir, 0)
        if "log_family" in row.extra or not rank0.is_file():
            continue
        log = read_rank_file(rank0)
        timed = str(row.extra.get("timed_ranks") or "")
        if not log.unreadable and not log.iterations and timed[:1].isdigit():
            # a command case's program may print its steps on another rank than 0
            log = read_rank_file(rank_file(run_dir, int(timed.split(",")[0].split("-")[0])))
        meta, why = read_json_object(run_dir / META_FILE)
        if log.unreadable or not log.iterations:
            skipped.append((str(run_dir), log.unreadable or "rank 0 has no iterations"))
            continue
        name = f"r{row.repeat}"
        mllog_path = out / MLLOG_DIR / row.case_id / f"{name}.log"
        system_path = out / SYSTEMS_DIR / row.case_id / f"{name}.json"
        atomic_write_text(mllog_path, mllog_text(row, log, meta, submitter=submitter),
                          durable=False, root=out)
        atomic_write_json(system_path, system_description(row, meta, submitter=submitter),
                          durable=False, root=out)
        written += [mllog_path, system_path]
        if meta is None:
            skipped.append((str(run_dir / META_FILE),
                            f"{why or 'missing'}; system description incomplete"))
    return Export(written, skipped)
