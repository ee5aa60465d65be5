"""The program every rank runs: `python -m toolkit.worker CASE_JSON --run-dir DIR --repeat K`.

Order matters: discover the ranks (mpi4py), cross-check them, apply the case's environment and
bind before the framework starts its communicator, then train while writing events, and record
meta.json (rank 0, from everything gathered). A command case (`model: command`) trains by
running the user's program as this process's child (`toolkit.workloads.command`): its step
records become the rank's `iter` events, and each line it prints beats the watchdog. Any
failure writes an `error` event with the traceback and aborts the whole MPI job, so no rank
waits forever on a dead peer.

How a run fails, and what records it:

- An exception on a rank: its `error` event (message and traceback), then MPI_Abort.
- A hang: the rank's watchdog thread (`toolkit.rank.watchdog`, the case's `watchdog.iteration_s`
  between iterations and `watchdog.first_iteration_s` until the first) writes an `error` event
  such as "no iteration for 300 s (hang watchdog, watchdog.iteration_s=300); last iteration 12"
  with a `watchdog` field, prints it to stderr and aborts the job (os._exit if MPI_Abort does
  not return within 5 s). It guards a rank from the `start` event to its last barrier: the
  exchange of results after training (allgather, barrier) gets the limit of one iteration,
  and its message names it. A rank that is itself stopped writes nothing; its peers' watchdogs
  fire.
- A rank killed outright (SIGKILL, OOM killer, segfault) writes nothing: mpirun or srun notices
  and ends the job, and `toolkit.launch.lifecycle` names the rank and the signal from the launcher's
  output and the rank files (`toolkit.results.diagnose`).

Once its records are written the rank ends without the interpreter's teardown of the framework
(`toolkit.rank.shutdown`): seconds of every run on a GPU that measured nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from toolkit.analysis.sharing import GPUS_SHARED, GPUS_SHARED_VARIABLE, gpus_shared
from toolkit.rank.binding import applied_gpu, bind_rank, cpu_record
from toolkit.rank.bytecode import use_bytecode_cache
from toolkit.rank.discovery import RankInfo, RankMismatch, discover
from toolkit.rank.event_writer import EventWriter
from toolkit.rank.host_load import HostLoad
from toolkit.rank.meta import base_meta, check_distinct_devices, framework_versions, gpu_mismatch
from toolkit.rank.nccl_report import job_transports, report_environment, transports_record
from toolkit.rank.nccl_settings import job_nccl_settings, job_settings
from toolkit.rank.network import apply_network_environment
from toolkit.rank.profile_trace import save_trace
from toolkit.rank.shutdown import exit_now
from toolkit.rank.telemetry import open_rank_sampler
from toolkit.rank.watchdog import Hang, HangWatchdog, abort_job, beat_file, silent_ranks
from toolkit.results.layout import (
    CACHE_VARIABLE,
    META_FILE,
    bytecode_cache_dir,
    compile_cache_dir,
    compile_cache_problem,
    early_error_file,
    load_case_file,
    rank_file,
)
from toolkit.results.safe_write import atomic_write_json
from toolkit.results.schema import PROGRESS_EVERY_S, Event
from toolkit.spec import Case, Model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolkit.worker", description=__doc__)
    parser.add_argument("case_json", type=Path)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--repeat", type=int, required=True)
    args = parser.parse_args(argv)

    case_id, case = load_case_file(args.case_json)
    # The grid's environment first: it wins over anything derived later (setdefault there).
    for key, value in case.env:
        os.environ[key] = value
    started = time.time()
    unsafe_cache = compile_cache_problem(args.case_json, os.environ.get(CACHE_VARIABLE))
    if unsafe_cache is not None:
        _early_error(args.run_dir, unsafe_cache)
        return 2
    # before anything imports the framework (mpi4py's discovery included)
    bytecode = use_bytecode_cache(bytecode_cache_dir(args.case_json),
                                  compile_cache_dir(args.case_json).parent, case.framework.value)
    # before MPI starts: Open MPI reads its TCP interface at MPI_Init
    network = apply_network_environment(case.num_nodes)
    try:
        info, comm = discover(expected_world=case.launched_ranks,
                              expected_nodes=case.num_nodes)
    except RankMismatch as err:
        _early_error(args.run_dir, str(err))
        return 3
    writer = EventWriter(rank_file(args.run_dir, info.rank), info.rank)

    printed = [0]  # lines a command case's program printed so far, for a hang's reason

    def on_hang(hang: Hang) -> None:  # in the watchdog's thread; the main one is stuck
        peers = {r: rank_file(args.run_dir, r) for r in range(info.world_size)
                 if r != info.rank}
        hang = dataclasses.replace(hang, silent_ranks=silent_ranks(peers, time.time(),
                                                                   watchdog.stale_s))
        message = hang.message
        if case.model is Model.COMMAND and hang.last_iteration is None and printed[0]:
            from toolkit.workloads.command import printed_no_step

            message += f"; {printed_no_step(case.command, printed[0])}"
        writer.write(Event.ERROR, message=message, watchdog=hang.to_dict())
        sys.stderr.write(f"[rank {info.rank}] trainbench: {message}; aborting the MPI job\n")
        sys.stderr.flush()
        if case.model is Model.COMMAND:  # the program's children are not the worker's
            from toolkit.workloads.command import end_running_programs

            end_running_programs()
        abort_job(comm.abort)

    watchdog = HangWatchdog(case.watchdog.iteration_s, case.watchdog.first_iteration_s)
    try:
        rank_env: dict[str, object] = {
            "RANK": info.rank, "WORLD_SIZE": info.world_size, "LOCAL_RANK": info.local_rank,
            "LOCAL_WORLD_SIZE": info.local_size, "MASTER_ADDR": info.master_addr,
            "MASTER_PORT": info.master_port}
        for name, setting in rank_env.items():
            os.environ[name] = str(setting)
        writer.write(Event.START, world_size=info.world_size, local_rank=info.local_rank,
                     node_index=info.node_index, host=info.host, case_id=case_id,
                     config_hash=case.config_hash(), repeat=args.repeat, pid=os.getpid())

        # guards from here to the return of the workload; beats on the rank file
        watchdog.start(on_hang, beat=lambda: beat_file(writer.path))
        binding: dict[str, Any] = (
            bind_rank(case, info) if case.ranks_per_node == case.gpus_per_node else
            {"applied": False, "mode": case.binding.value,
             "reason": "launch: per_node: the program starts and places its own workers"})
        # before any communicator: NCCL reads its settings when the first one is made
        uses_nccl = info.world_size > 1 and applied_gpu(binding) is not None
        nccl = report_environment(os.environ, args.run_dir, info.rank, uses_nccl=uses_nccl)
        nccl_settings = job_nccl_settings(comm.allgather, network.get("interface"),
                                          case.num_nodes, uses_nccl, os.environ)
        run_meta = base_meta(case_id, case.config_hash(), case.to_dict(), args.repeat, info,
                               started)
        run_meta["bytecode_cache"] = bytecode
        run_meta["network"] = network
        if info.rank == 0:
            atomic_write_json(args.run_dir / META_FILE, run_meta, root=args.run_dir)

        from toolkit import workloads

        warmup = case.warmup_iterations
        samples = case.global_batch_size

        def on_iter(i: int, elapsed_s: float, step_s: float, loss: float | None,
                    wall_s: float) -> None:
            # time_s: when the device finished the iteration, on the wall clock (telemetry
            # samples are matched against it), not when the host wrote the line.
            writer.write(Event.ITER, iteration=i, elapsed_s=elapsed_s, step_time_s=step_s,
                         samples=samples, loss=loss, warmup=i <= warmup, time_s=wall_s)
            watchdog.iteration(i)

        sampler, no_telemetry = open_rank_sampler(case, binding, writer)
        if sampler is not None:
            sampler.start()
        host_load = HostLoad()
        host_load.start()
        # the profile: the last repeat only, after the timed window; every rank takes the
        # profiled steps (data parallelism: each waits for the others), the chosen ones record
        profile = case.profile.steps_in(args.repeat, case.repeats)
        recorded = case.profile.records(info.rank, args.repeat, case.repeats)
        try:
            if case.model is Model.COMMAND:
                summary = _run_command(case, case_id, info, args.run_dir, args.repeat, writer,
                                       watchdog, applied_gpu(binding), printed)
            else:
                summary = workloads.run(case, info, on_iter, gpu_index=applied_gpu(binding),
                                        profile=profile, record_profile=recorded,
                                        link_rate_gbs=nccl_settings["link_rate_gbs"])
        finally:
            telemetry = sampler.stop().to_dict() if sampler is not None else {
                "source": None, "reason": no_telemetry}
        summary["host_load"] = host_load.stop()
        trace = summary.pop("profile_trace", None)
        if trace is not None:
            summary["profile"] = save_trace(args.run_dir, info.rank, trace,
                                            summary.get("profile", {}))
        elif recorded:
            summary["profile"] = {"steps": 0, "reason": f"no profiler for {case.framework.value}"}
        binding["gpu_mismatch"] = gpu_mismatch(binding, summary.get("pci_bus_id"))
        summary["binding"] = binding
        summary["network"] = network
        summary["nccl_transports"] = transports_record(nccl, args.run_dir, info.hosts)
        summary["nccl_settings"] = nccl_settings
        summary.update(cpu_record())
        summary["telemetry"] = telemetry
        summary[GPUS_SHARED] = os.environ.get(GPUS_SHARED_VARIABLE) or None
        # A peer that stops now would leave this rank in the allgather or the barrier below.
        watchdog.phase("the exchange of results after training (allgather, barrier)")
        writer.write(Event.SUMMARY, **summary)
        gathered = comm.allgather({"rank": info.rank, "host": info.host, **summary})
        check_distinct_devices(gathered)
        if case.model is Model.COMMAND and info.rank == 0:
            from toolkit.workloads.command import ProgramFailed, no_records_reason

            why = no_records_reason(case, gathered)
            if why is not None:
                raise ProgramFailed(why)
        if info.rank == 0:
            meta = dict(run_meta)
            meta["ranks"] = gathered
            meta["nccl_transports"] = job_transports(gathered)
            meta.update(job_settings(gathered))
            meta[GPUS_SHARED] = gpus_shared(gathered)
            meta["telemetry"] = {"source": gathered[0].get("telemetry", {}).get("source"),
                                 "reason": gathered[0].get("telemetry", {}).get("reason")}
            meta["finished_s"] = time.time()
            meta["versions"] = {**meta["versions"], **framework_versions()}
            atomic_write_json(args.run_dir / META_FILE, meta, root=args.run_dir)
        writer.write(Event.END, wall_s=time.time() - started)
        comm.barrier()
        watchdog.stop()
        writer.close()
        return 0
    except BaseException as err:
        watchdog.stop()
        tb = traceback.format_exc()
        writer.write(Event.ERROR, message=f"{type(err).__name__}: {err}", traceback=tb)
        writer.close()
        sys.stderr.write(f"[rank {info.rank}] {tb}")
        sys.stderr.flush()
        if info.world_size > 1:
            comm.abort(1)
        return 1


def _run_command(case: Case, case_id: str, info: RankInfo, run_dir: Path, repeat: int,
                 writer: EventWriter, watchdog: HangWatchdog,
                 gpu_index: int | None, printed: list[int]) -> dict[str, Any]:
    """A command case on this rank: the program runs as the worker's child; each line it
    prints beats the watchdog, each step record counts as an iteration (`printed[0]`: the
    lines printed so far); its records become this rank's `iter` events when it has exited."""
    from toolkit.workloads import command

    seen = [0]
    written = [0, 0.0]  # steps in the last progress record, and when

    def on_output(records: int, lines: int) -> None:
        printed[0] = lines
        if records > seen[0]:
            seen[0] = records
            watchdog.iteration(records)
            now = time.monotonic()
            if written[0] == 0 or now - written[1] >= PROGRESS_EVERY_S:
                writer.write(Event.PROGRESS, steps=records)
                written[:] = [records, now]
        else:
            watchdog.output()

    iterations, summary = command.run(case, case_id, info, run_dir, repeat, gpu_index,
                                      command.gpu_count() if gpu_index is not None else 0,
                                      on_output)
    warmup = case.warmup_iterations
    for it in iterations:
        writer.write(Event.ITER, iteration=it.iteration, elapsed_s=it.elapsed_s,
                     step_time_s=it.step_time_s, samples=it.samples, loss=it.loss,
                     warmup=it.iteration <= warmup, time_s=it.time_s)
    return summary


def _early_error(run_dir: Path, message: str) -> None:
    """Before ranks are known: one error file per process, named by pid."""
    sys.stderr.write(f"trainbench worker: {message}\n")
    w = EventWriter(early_error_file(run_dir, os.getpid()), -1)
    w.write(Event.ERROR, message=message, host=socket.gethostname())
    w.close()


if __name__ == "__main__":
    exit_now(main())
