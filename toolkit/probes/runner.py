"""The preflight program of one rank: `python -m toolkit.preflight rank --dir DIR`.

Order: discover the ranks (mpi4py), bind this rank like a benchmark rank (GPU, CPUs, NIC), read
the GPU's health at rest, run the compute probes under an NVML load sampler, then the
collectives, and write everything as `probe` events to `DIR/rank<NNN>.jsonl`
between a `start` and an `end` event (an `error` event and a non-zero exit on failure).

GPUs measure at the same time, as they train (power and cooling are shared). CPU ranks measure
one at a time: they share their host's cores (the local test cluster even puts its nodes on one
host), so measuring together would measure the contention.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.analysis.preflight import ROUNDS_AGAIN, Attempts, attempts_of, measure_again
from toolkit.probes import collectives, compute, health
from toolkit.probes.measurement import Measurement, best_of, with_host_load
from toolkit.rank.binding import applied_gpu, bind_rank, cuda_index
from toolkit.rank.discovery import discover
from toolkit.rank.event_writer import EventWriter
from toolkit.rank.nccl_settings import job_nccl_settings
from toolkit.rank.network import apply_network_environment, interface_speed_mbps
from toolkit.results.layout import rank_file
from toolkit.results.schema import Event
from toolkit.spec import Case


@dataclass(frozen=True)
class ProbeOptions:
    """How long the probes run; the defaults keep one GPU's preflight under a minute."""

    seconds_per_shape: float = 0.25
    """Timed seconds per GEMM shape (after warm-up calls)."""
    memory_seconds: float = 0.5
    """Timed seconds per memory probe (copy, triad, h2d, d2h)."""
    collectives: bool = True


def run(out: Path, options: ProbeOptions, case: Case | None = None) -> int:
    """One rank's preflight into the directory `out` (made by `begin`); 0 when it finished."""
    started = time.time()
    tag = out.name
    # before MPI starts, as a benchmark rank does: the node's own interface between nodes
    network = apply_network_environment(
        int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1))
    network["interface_speed_mbps"] = interface_speed_mbps(network.get("interface"))
    info, comm = discover()
    writer = EventWriter(rank_file(out, info.rank), info.rank)
    node = os.environ.get("SLURMD_NODENAME") or info.host
    nodes = comm.allgather(node)

    def progress(what: str) -> None:
        if info.rank == 0:
            print(f"preflight: {what} ({time.time() - started:.0f} s)", flush=True)

    try:
        case = case or Case(gpus_per_node=info.local_size, num_nodes=info.num_nodes)
        binding = bind_rank(case, info)
        device, device_name, gpu_index = _device(info, binding)
        # the collectives between nodes run with a benchmark rank's NCCL settings
        network["nccl_settings"] = job_nccl_settings(
            comm.allgather, network.get("interface"), info.num_nodes,
            info.world_size > 1 and device.type == "cuda", os.environ)
        bus_id = (binding.get("planned") or {}).get("gpu_bus_id")
        nv = health.open_nvml(bus_id, gpu_index) if device.type == "cuda" else \
            "no GPU: a CPU rank"
        identity = health.device_identity(*nv) if isinstance(nv, tuple) else {}
        writer.write(Event.START, world_size=info.world_size, local_rank=info.local_rank,
                     node=node, node_index=info.node_index, host=info.host,
                     device=identity.get("name") or device_name, gpu=identity,
                     binding=binding, network=network, tag=tag, pid=os.getpid(),
                     threads=None if device.type == "cuda" else _torch_threads())
        found: list[Measurement] = []
        if isinstance(nv, tuple):
            found += health.at_rest(*nv)
        else:
            found.append(Measurement("health", "nvml", None, reason=nv))
        progress("GEMM and memory bandwidth" + ("" if device.type == "cuda" else
                                                ", one CPU rank at a time"))
        producers = _producers(device, options)
        measured: dict[int, list[Measurement]] = {}

        def first() -> None:
            each, readings = _compute(device, producers, nv)
            measured.update(enumerate(each))
            found.extend(readings)

        _in_turns(info, comm, device, first, identity.get("uuid"))
        for _ in range(ROUNDS_AGAIN):
            again = _compute_again(info, comm, node, identity.get("name") or device_name,
                                   measured)
            if not comm.allgather(bool(again)).count(True):
                break
            progress("measuring again the figures below their peers'")

            def remeasure(again: list[int] = again) -> None:
                for i in again:
                    measured[i] = _merge(measured[i], _compute(device, [producers[i]],
                                                               None)[0][0])

            _in_turns(info, comm, device, remeasure, identity.get("uuid"))
        found += [m for ms in measured.values() for m in ms]
        if options.collectives and info.world_size > 1:
            found += _collectives(info, nodes, device, progress, _turn(out, comm, info.rank),
                                  comm.allgather(network["interface_speed_mbps"]))
        for m in found:
            writer.write(Event.PROBE, **m.to_event())
        writer.write(Event.END, wall_s=time.time() - started)
        comm.barrier()
        progress("done")
        writer.close()
        return 0
    except BaseException as err:
        tb = traceback.format_exc()
        writer.write(Event.ERROR, message=f"{type(err).__name__}: {err}", traceback=tb)
        writer.close()
        sys.stderr.write(f"[rank {info.rank}] {tb}")
        if info.world_size > 1:
            comm.abort(1)
        return 1


def _device(info: Any, binding: dict[str, Any]) -> tuple[Any, str, int | None]:
    """(torch device, its name, its NVML index) for this rank, as the workloads choose it."""
    import torch

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        planned = applied_gpu(binding)
        # more ranks than GPUs share them (a preflight still says what each GPU does)
        index = cuda_index(planned, info.local_rank % count, count)
        torch.cuda.set_device(index)
        return torch.device("cuda", index), torch.cuda.get_device_name(index), planned
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or \
        max(1, (os.cpu_count() or 1) // max(1, info.local_size))
    torch.set_num_threads(threads)
    return torch.device("cpu"), cpu_model(), None


def cpu_model() -> str:
    """`cpu: <model name>` from /proc/cpuinfo (the threads a rank uses are a setting, not the
    hardware: CPU ranks of one model are peers whatever their threads)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _producers(device: Any, options: ProbeOptions) -> list[Callable[[], list[Measurement]]]:
    """The compute probes, each a call that measures its figures once."""
    gpu = device.type == "cuda"
    shapes = compute.GPU_SHAPES if gpu else compute.CPU_SHAPES
    out: list[Callable[[], list[Measurement]]] = [
        lambda p=p: [compute.gemm(device, p, shapes, options.seconds_per_shape)]  # type: ignore[misc]
        for p in compute.gemm_precisions(device)]
    out.append(lambda: compute.memory(device, compute.GPU_MEMORY_BYTES if gpu
                                      else compute.CPU_MEMORY_BYTES, options.memory_seconds))
    if gpu:
        out.append(lambda: compute.host_device(device, compute.H2D_BYTES,
                                               options.memory_seconds))
    return out


def _in_turns(info: Any, comm: Any, device: Any, step: Callable[[], Any],
              gpu_id: str | None = None) -> None:
    """`step` on every rank: at once on GPUs (as they train), one rank at a time on CPUs (they
    share their host's cores: measuring together would measure the contention). Ranks whose
    GPU is one GPU (`gpu_id`, its UUID: nodes that take turns on a machine's GPUs) take turns
    on it as CPU ranks do, each the k-th turn of the ranks on its GPU."""
    if device.type == "cuda":
        turn_of = gpu_turns(comm.allgather(gpu_id))
        for turn in range(max(turn_of, default=0) + 1):
            if turn == turn_of[info.rank]:
                step()
            if len(set(turn_of)) > 1:
                comm.quiet_barrier()
        return
    for turn in range(info.world_size):
        if turn == info.rank:
            step()
        comm.quiet_barrier()


def gpu_turns(gpu_ids: list[str | None]) -> list[int]:
    """Each rank's turn on its GPU (`gpu_ids` by rank): 0 for a rank alone on its GPU (or of
    an unknown one), k for the k-th rank (by rank) of those that share one."""
    return [0 if g is None else gpu_ids[:rank].count(g) for rank, g in enumerate(gpu_ids)]


def _compute(device: Any, producers: list[Callable[[], list[Measurement]]],
             nv: tuple[Any, Any] | str | None
             ) -> tuple[list[list[Measurement]], list[Measurement]]:
    """Each producer's figures with the host's load while it ran, and the NVML readings under
    load when `nv` is a GPU's handle."""
    sampler = health.LoadSampler(*nv).start() if isinstance(nv, tuple) else None
    found: list[list[Measurement]] = []
    readings: list[Measurement] = []
    try:
        for produce in producers:
            found.append(with_host_load(produce))
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()  # the probes' buffers, for the collectives' own
    finally:
        if sampler is not None:
            readings = sampler.stop()
    return found, readings


def _merge(before: list[Measurement], now: list[Measurement]) -> list[Measurement]:
    """The figures of one producer measured again: the best of both for each metric."""
    latest = {m.metric: m for m in now}
    return [best_of([m, latest[m.metric]]) if m.metric in latest and m.probe != "health"
            else m for m in before]


def _compute_again(info: Any, comm: Any, node: str, device_name: str,
                   measured: dict[int, list[Measurement]]) -> list[int]:
    """The producers this rank measures again: those with a figure below its peers' (the
    alike figures of every rank: same device, same metric), after every rank's are known."""
    mine = {(i, m.metric): m.detail.get("attempts", []) for i, ms in measured.items()
            for m in ms if m.probe != "health" and m.detail.get("attempts")}
    everyone = comm.allgather((info.rank, node, device_name, mine))
    alike: dict[tuple[str, str], dict[tuple[int, int], Attempts]] = {}
    for rank, host, name, figures in everyone:
        for (i, metric), attempts in figures.items():
            alike.setdefault((name, metric), {})[(rank, i)] = attempts_of([(host, attempts)])
    again = {i for group in alike.values() for rank, i in measure_again(group)
             if rank == info.rank}
    return sorted(again)


def _turn(out: Path, comm: Any, rank: int) -> int:
    """Which preflight of its directory this is (0 for the first): the pairs of nodes of the
    rotation it tests (`collectives.link_rounds`). Rank 0's count, for every rank."""
    turn = 0
    if rank == 0:
        try:
            turn = sorted(p.name for p in out.parent.iterdir() if p.is_dir()).index(out.name)
        except (OSError, ValueError):
            turn = 0
    return int(comm.allgather(turn)[0])


def _collectives(info: Any, nodes: list[str], device: Any, progress: Any, turn: int,
                 speed_mbps: list[int | None]) -> list[Measurement]:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR=info.master_addr, MASTER_PORT=str(info.master_port))
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, rank=info.rank, world_size=info.world_size, **kwargs)
    try:
        return collectives.run_all(dist, info.rank, collectives.node_indices(nodes), nodes,
                                   device, progress, turn, list(speed_mbps))
    finally:
        dist.destroy_process_group()
