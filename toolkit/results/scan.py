"""Scanning a results tree: every run under `<root>/cases` -> one `RunRow` each, read in a process
pool for large trees, with the case files and run directories that could not be read.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from parsers.rows import RunRow
from toolkit.results.layout import CASE_FILE, RANK_FILES, RUN_DIR_RE, cases_dir
from toolkit.results.runs import (
    RankLog,
    mark_oversubscribed,
    read_json_object,
    read_run,
    read_run_rank_files,
)
from toolkit.spec import Case, CaseError, valid_case_id

PARALLEL_MIN_RUNS = 32
"""Below this many runs the tree is read in this process: a pool costs more than it saves."""
PARALLEL_MIN_RANKS = 64
"""A run of this many rank files or more has them read by the pool's workers together (a run
of 512 nodes x 8 GPUs is a third of a minute of decoding); smaller runs are each read whole by
one worker."""


def collect_runs(root: Path, jobs: int = 0) -> tuple[list[RunRow], list[tuple[str, str]]]:
    """Every run under `root/cases`; plus (path, why) of case files and run directories that
    could not be read (their runs are not counted; damaged files inside a run are in its row's
    `skipped_files`).

    Runs are independent, so large trees are read by a process pool (`jobs` processes; 0 = one
    per CPU this process may use, 1 = none): decoding the JSON lines is most of collect's work.
    A run of PARALLEL_MIN_RANKS rank files or more has its files shared out among the pool's
    workers instead, one such run at a time.
    Rows come back in the same order either way, each with its `oversubscribed` column set
    against the others (`runs.mark_oversubscribed`).
    """
    tasks: list[tuple[Path, str, Case, int]] = []
    problems: list[tuple[str, str]] = []
    for case_dir in sorted(cases_dir(root).glob("*")):
        if not case_dir.is_dir():
            continue
        try:
            entries = sorted(case_dir.iterdir())
        except OSError as err:
            problems.append((str(case_dir), f"cannot list: {err.strerror or err}"))
            continue
        runs = [p for p in entries if RUN_DIR_RE.fullmatch(p.name)]
        loaded, why = _load_case(case_dir / CASE_FILE)
        if loaded is None:
            problems.append((str(case_dir / CASE_FILE), f"{why}; its {len(runs)} run(s) are "
                                                        "not counted"))
            continue
        case_id, case = loaded
        for run_dir in sorted(runs, key=lambda p: int(p.name[1:])):
            if run_dir.is_dir():
                tasks.append((run_dir, case_id, case, int(run_dir.name[1:])))
            else:
                problems.append((str(run_dir), "not a directory (a run is a directory r<k>/)"))
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count() or 1)
    # a large run's rank files are shared out among the workers; the other runs are each
    # read whole by one worker
    files = {i: sorted(t[0].glob(RANK_FILES)) for i, t in enumerate(tasks)
             if t[2].launched_ranks >= PARALLEL_MIN_RANKS}
    large = {i: paths for i, paths in files.items() if len(paths) >= PARALLEL_MIN_RANKS}
    small = [i for i in range(len(tasks)) if i not in large]
    by_runs = min(jobs or usable, len(small) // (PARALLEL_MIN_RUNS // 2) or 1)
    if len(small) < PARALLEL_MIN_RUNS:
        by_runs = 1
    workers = jobs or usable if large else by_runs
    if workers <= 1:
        rows = [_read_task(t) for t in tasks]
        mark_oversubscribed(rows)
        return rows, problems
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_ignore_sigint)
    read: dict[int, RunRow] = {}
    try:
        with _sigint_deferred():  # submitting forks the workers
            small_tasks = [tasks[i] for i in small]
            results = pool.map(_read_task, small_tasks,
                               chunksize=max(1, len(small) // (4 * by_runs))) \
                if by_runs > 1 else map(_read_task, small_tasks)
            order = list(large)
            parts = _shares(pool, large[order[0]], tasks[order[0]][2], workers) \
                if order else iter(())
        # one large run at a time in memory, and the next one's files read while this one's
        # row is made
        for n, i in enumerate(order):
            run_dir, case_id, case, repeat = tasks[i]
            logs = [log for part in parts for log in part]
            if n + 1 < len(order):
                parts = _shares(pool, large[order[n + 1]], tasks[order[n + 1]][2], workers)
            read[i] = read_run(run_dir, case_id, case, repeat, rank_logs=logs)
            del logs
        read.update(zip(small, results, strict=True))
    except BaseException:
        # Ctrl-C (or a failure) stops the reading: queued chunks are dropped, not waited for
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    rows = [read[i] for i in range(len(tasks))]
    mark_oversubscribed(rows)
    return rows, problems


def _shares(pool: ProcessPoolExecutor, paths: list[Path], case: Case,
            workers: int) -> Iterator[list[tuple[Path, RankLog]]]:
    """The rank files `paths` of one run of `case`, read by the pool in four shares a worker
    (`runs.read_run_rank_files`), in order."""
    share = -(-len(paths) // (4 * workers))
    return pool.map(read_run_rank_files, [paths[k:k + share] for k in range(0, len(paths), share)],
                    itertools.repeat(case))


def _ignore_sigint() -> None:
    """In a pool worker: Ctrl-C reaches the whole process group, and only the parent answers
    it (the workers finish their chunk and exit, without a traceback each)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C while the workers are forked: raised inside fork's own handlers it would be
    printed and dropped. The workers start with it blocked (then ignore it); the parent gets
    it as KeyboardInterrupt when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def planned_runs(root: Path) -> tuple[int, int]:
    """(cases, runs) the grid planned: its readable `cases/<id>/case.json` files and the sum of
    their `repeats`, whether or not any run started (a damaged case.json is not counted; it is
    listed by `collect_runs`)."""
    cases = runs = 0
    for case_dir in sorted(cases_dir(root).glob("*")):
        loaded, _ = _load_case(case_dir / CASE_FILE) if case_dir.is_dir() else (None, "")
        if loaded is not None:
            cases += 1
            runs += loaded[1].repeats
    return cases, runs


def _load_case(path: Path) -> tuple[tuple[str, Case] | None, str]:
    """(case id, case) from case.json, or (None, why it cannot be used)."""
    data, why = read_json_object(path)
    if data is None:
        return None, why or "missing"
    case_id, plain = data.get("id"), data.get("case")
    if not isinstance(case_id, str) or not valid_case_id(case_id):
        return None, f"no case id (key `id`: expected a case id, got {case_id!r:.60})"
    if not isinstance(plain, dict):
        return None, f"no case (key `case`: expected a JSON object, got {type(plain).__name__})"
    try:
        return (case_id, Case.from_dict(plain)), ""
    except CaseError as err:
        return None, f"not a valid case (key `case.{err.key}`: {err.message})"


def _read_task(task: tuple[Path, str, Case, int]) -> RunRow:
    return read_run(*task)
