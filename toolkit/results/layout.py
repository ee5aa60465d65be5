"""The results directory: every path in it, atomic writes, and what counts as a finished run.

Every name below is the only spelling of that path in the toolkit::

    results/<grid>/.trainbench-results               marks the directory as ours (MARKER_FILE)
    results/<grid>/grid.resolved.yaml                resolved grid (GRID_FILE; `--grid` reads it)
    results/<grid>/dry-run.json                      what a dry run would start (DRY_RUN_FILE)
    results/<grid>/dry-run/...                       a dry run's files that differ from those
                                                     in place (DRY_RUN_DIR; same relative paths)
    results/<grid>/slurm/jobs.jsonl                  ledger of submitted jobs (SLURM_DIR, JOBS_FILE)
    results/<grid>/slurm/array-<n>.sh                grid-level job arrays and their logs
    results/<grid>/cases/<id>/case.json              resolved case + config hash (CASE_FILE)
    results/<grid>/cases/<id>/submission.sh          sbatch script (SUBMISSION_SCRIPT)
    results/<grid>/cases/<id>/run_local.sh           local re-run script (LOCAL_SCRIPT)
    results/<grid>/cases/<id>/r<k>/meta.json         versions, hosts, devices, flags (rank 0)
    results/<grid>/cases/<id>/r<k>/rank<NNN>.jsonl   events of one rank (rank_file)
    results/<grid>/cases/<id>/r<k>/error-pid<P>.jsonl  a rank that failed before it knew its rank
    results/<grid>/cases/<id>/r<k>/status.json       written by the executor when the run ends
    results/<grid>/cases/<id>/r<k>/job.json          its owner (host, pid, Slurm job, claim)
    results/<grid>/cases/<id>/.r<k>.lock             two starts of one repeat take turns
    results/<grid>/cases/<id>/r<k>/output.log        the launcher's stdout and stderr
    results/<grid>/cases/<id>/r<k>/profile-rank<NNN>.json  a profiled rank's trace (profile_file)
    results/<grid>/compile-cache/                    torch.compile's caches (Inductor's FX
                                                     graphs, AOTAutograd, Triton kernels),
                                                     shared by every run of the grid; written
                                                     by torch itself (COMPILE_CACHE_DIR)
    results/<grid>/compile-cache/python-bytecode/    Python's compiled modules, where the
                                                     framework was installed without them
                                                     (BYTECODE_DIR, `toolkit.rank.bytecode`)

and, where collect writes (the results directory or `--out`): runs.csv, summary.csv,
profiles.csv (one row per profiled rank of each run), tables/*.csv, plots/*.png, report.md,
report.html, and per run of the toolkit's own mllog/<case>/r<k>.log (MLPerf logging lines) and
systems/<case>/r<k>.json (system description).

Every write under a results directory goes through `results/safe_write.py` (or `CaseDir`,
built on it), which never follows a symbolic link planted inside the tree.

A run is finished when its status.json says `ok`. Finished runs are never overwritten; a failed
attempt is moved aside (`r<k>.attempt<n>`) before the run is tried again, so nothing is lost.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parsers import logtext
from toolkit.results.safe_write import (
    ResultsConflict,
    atomic_write_text,
    json_text,
    lexists_at,
    open_dir_below,
    parts_below,
    unsafe_below,
)
from toolkit.spec import Case, valid_case_id
from toolkit.spec.command import word_differences

GRID_FILE = "grid.resolved.yaml"
LEGACY_GRID_FILE = "grid.yaml"
"""Where results directories of older versions kept the resolved grid (read, never written)."""
MARKER_FILE = ".trainbench-results"
"""Written by submit into every results directory it makes: only such a directory (or one an
older version made, recognised by its `cases/<id>/case.json`) is written into."""
MARKER_TEXT = "trainbench results directory\n"
REPORT_MARKER_FILE = ".trainbench-report"
"""Written by collect into an `--out` directory that is not a results directory: only such a
directory (or one an older collect wrote, with runs.csv and report.md) is written into again."""
REPORT_MARKER_TEXT = "trainbench report directory\n"
DRY_RUN_FILE = "dry-run.json"
DRY_RUN_DIR = "dry-run"
PREFLIGHT_DIR = "preflight"
"""Preflights: `<root>/preflight/<tag>/` standalone, `cases/<id>/preflight/<tag>/` in a job."""
VERDICT_FILE = "verdict.json"
"""A preflight's verdicts, beside its rank files."""
EXCLUDE_FILE = "exclude.txt"
"""The nodes a preflight found not ok, as one Slurm `--exclude` value."""
CASES_DIR = "cases"
SLURM_DIR = "slurm"
"""Grid-level array scripts, their job logs and the ledger of submitted jobs."""
JOBS_FILE = "jobs.jsonl"
LOCK_FILE = ".submit.lock"
CASE_FILE = "case.json"
SUBMISSION_SCRIPT = "submission.sh"
LOCAL_SCRIPT = "run_local.sh"
STATUS_FILE = "status.json"
META_FILE = "meta.json"
JOB_FILE = "job.json"
LOG_FILE = "output.log"
RANK_FILES = "rank*.jsonl"
JOB_LOG_PREFIX = "slurm"
EARLY_ERROR_FILES = "error-pid*.jsonl"
RUN_DIR_RE = re.compile(r"r[0-9]+")
"""Run directories: `r<k>`; `r<k>.attempt<n>` (attempts moved aside) are not counted."""

COMPILE_CACHE_DIR = "compile-cache"
"""torch.compile's on-disk caches for every torch run of the grid (`compile_cache_dir`)."""
BYTECODE_DIR = "python-bytecode"
"""Below the compile cache: Python's bytecode of every module the ranks import, for ranks whose
framework was installed without it (`bytecode_cache_dir`)."""
CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
"""The environment variable that tells torch.compile where its on-disk caches are."""

RUNS_CSV = "runs.csv"
SUMMARY_CSV = "summary.csv"
PROFILES_CSV = "profiles.csv"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
TABLES_DIR = "tables"
PLOTS_DIR = "plots"
MLLOG_DIR = "mllog"
SYSTEMS_DIR = "systems"


def cases_dir(root: Path) -> Path:
    return root / CASES_DIR


def compile_cache_dir(case_json: Path) -> Path:
    """The grid's compile cache, from a case's `cases/<id>/case.json` (absolute: the ranks
    run with their run directory as working directory)."""
    return case_json.absolute().parent.parent.parent / COMPILE_CACHE_DIR


def bytecode_cache_dir(case_json: Path) -> Path:
    """The grid's Python bytecode cache, from a case's `cases/<id>/case.json` (absolute)."""
    return compile_cache_dir(case_json) / BYTECODE_DIR


def compile_cache_problem(case_json: Path, cache: str | None) -> str | None:
    """Why the ranks must not compile into `cache` (their TORCHINDUCTOR_CACHE_DIR): when it is
    the grid's compile cache and something below the results directory on the way to it is a
    symbolic link or a file (torch would write through it). None otherwise: another cache is
    the grid `env`'s choice."""
    ours = compile_cache_dir(case_json)
    if cache is None or Path(cache) != ours:
        return None
    problem = unsafe_below(ours.parent, ours)
    return None if problem is None else f"the grid's compile cache {problem}"


def is_results_dir(path: Path) -> bool:
    """Whether `path` is a results directory: it holds our marker, or (made by an older
    version) a `cases/<id>/case.json`."""
    marker = path / MARKER_FILE
    if marker.is_file() and not marker.is_symlink():
        return True
    return any(True for _ in path.glob(f"{CASES_DIR}/*/{CASE_FILE}"))


def foreign_dir(path: Path) -> str | None:
    """Why results must not be written into `path`, or None: an existing directory with files
    in it that is not a results directory (`--results .` must never overwrite a user's own
    files). An absent or empty directory is fine, and so is one that holds only what a submit
    starting there writes first (its lock, its marker being written)."""
    if not path.is_dir() or is_results_dir(path):
        return None
    if all(_ours_while_starting(p.name) for p in path.iterdir()):
        return None
    return (f"{path} is a directory with files in it but not a results directory (no "
            f"{MARKER_FILE}, no {CASES_DIR}/<id>/{CASE_FILE}); nothing is written into it. "
            "Name a new or empty directory")


def _ours_while_starting(name: str) -> bool:
    """What a submit that has just begun in a new directory has put there before its marker
    (its lock, the marker being written): another submit starting at the same moment must
    find the directory ours, and be told that a submit is running."""
    return name == LOCK_FILE or (name.startswith(f".{MARKER_FILE}.") and name.endswith(".tmp"))


#: What each command that writes a report into `--out DIR` leaves there, so that it knows the
#: directory for its own next time: its marker, and the pair of its files by which it knows a
#: directory an older version wrote (before markers).
OUT_MARKERS: dict[str, tuple[str, tuple[str, str]]] = {
    "collect": (REPORT_MARKER_FILE, (RUNS_CSV, REPORT_MD)),
    "compare": (".trainbench-compare", ("compare.md", "compare.csv")),
    "history": (".trainbench-history", ("history.md", "history.csv")),
}


def out_marker(command: str) -> tuple[str, str]:
    """(file name, text) of the marker `command` writes into its `--out` directory."""
    name = OUT_MARKERS[command][0]
    return name, REPORT_MARKER_TEXT if command == "collect" else f"trainbench {command}\n"


def foreign_out_dir(path: Path, command: str = "collect") -> str | None:
    """Why `command` (collect, compare, history) must not write into `path` (`--out`), or
    None: only a new or empty directory, or one the same command wrote before (its marker, or
    its two files an older version wrote), is written into. Collect may also write into a
    results directory (like `foreign_dir`)."""
    if path.exists() and not path.is_dir():
        return f"{path} exists and is not a directory"
    marker, (first, second) = OUT_MARKERS[command]
    if (path / marker).is_file() or ((path / first).is_file() and (path / second).is_file()):
        return None
    if command == "collect" and foreign_dir(path) is None:
        return None
    if not path.exists() or not any(path.iterdir()):
        return None
    return (f"{path} is a directory with files in it that {command} did not write (no "
            f"{marker}, no {first} beside {second}"
            + (", not a results directory" if command == "collect" else "")
            + "); nothing is written into it. Name a new or empty directory")


def grid_file(root: Path) -> Path:
    """The resolved grid of a results directory (an older version's name where it has one)."""
    legacy = root / LEGACY_GRID_FILE
    return legacy if not (root / GRID_FILE).exists() and legacy.exists() else root / GRID_FILE


def run_dir_name(repeat: int | str) -> str:
    """`r<k>`; a job script passes its shell variable (`"$REPEAT"`) for k."""
    return f"r{repeat}"


def attempt_dir(run: Path, n: int) -> Path:
    """Where an interrupted attempt of a run is kept: `r<k>.attempt<n>`."""
    return run.with_name(f"{run.name}.attempt{n}")


def attempt_dirs(run: Path) -> list[Path]:
    """The attempts of a run moved aside so far, oldest first."""
    out = []
    n = 1
    while (aside := attempt_dir(run, n)).exists():
        out.append(aside)
        n += 1
    return out


def begin_lock_file(case_dir: Path, repeat: int) -> Path:
    """The lock that two starts of one repeat take turns on (beside its run directory, which
    a start may move aside)."""
    return case_dir / f".{run_dir_name(repeat)}.lock"


def preflight_dir(base: Path, tag: str) -> Path:
    """The rank files and verdict of one preflight under a results root or a case directory."""
    return base / PREFLIGHT_DIR / tag


def preflight_dirs(base: Path) -> list[Path]:
    """Every preflight under `base` (a results root: standalone ones and those of every case),
    oldest first by name within each place."""
    found = sorted(p for p in (base / PREFLIGHT_DIR).glob("*") if p.is_dir())
    found += sorted(p for p in base.glob(f"{CASES_DIR}/*/{PREFLIGHT_DIR}/*") if p.is_dir())
    return [p for p in found if not p.is_symlink()]


def dry_run_dir(root: Path) -> Path:
    """Where a dry run writes a file that would change one in place (a queued job may run
    the one in place): the same relative path under `dry-run/`."""
    return root / DRY_RUN_DIR


def rank_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank:03d}.jsonl"


def program_log_file(run_dir: Path, rank: int) -> Path:
    """What a command case's program printed on this rank (stdout and stderr, as printed)."""
    return run_dir / f"program-rank{rank:03d}.log"


def report_events_file(run_dir: Path, rank: int) -> Path:
    """Where a command case's program writes its steps through `trainbench.report`."""
    return run_dir / f"report-rank{rank:03d}.jsonl"


def window_read_file(run_dir: Path) -> Path:
    """Written by the first rank of a command case with `stop_after_window` that read the end
    of the measured window and ended its program: the other ranks end theirs when they see it."""
    return run_dir / "window-read.json"


def steps_read_file(run_dir: Path) -> Path:
    """Written by the first rank of a command case that read a step of its program: a rank
    whose own program prints no steps (Megatron prints them on its last rank) is then not
    ended for output without steps (`watchdog.unread_output_s`)."""
    return run_dir / "steps-read.json"


REPORT_EVENTS_VARIABLE = "TRAINBENCH_REPORT_FILE"
"""The environment variable that tells `trainbench.report` its file (`report_events_file`)."""


PROFILE_FILES = "profile-rank*.json"
"""The profiled ranks' traces of a run (`profile_file`)."""


def profile_file(run_dir: Path, rank: int) -> Path:
    """A rank's torch.profiler trace (Chrome trace format; `profile:` grid option)."""
    return run_dir / f"profile-rank{rank:03d}.json"


def rank_of_file(path: Path) -> int:
    """The rank a `rank<NNN>.jsonl` file belongs to; -1 for a name not of that form."""
    digits = path.stem.removeprefix("rank")
    return int(digits) if path.stem.startswith("rank") and digits.isdigit() else -1


def array_script(root: Path, n: int) -> Path:
    """The n-th grid-level job array script: `slurm/array-<nnnn>.sh`."""
    return root / SLURM_DIR / f"array-{n:04d}.sh"


def array_script_numbers(root: Path) -> list[int]:
    """The numbers of the grid-level array scripts written so far."""
    folder = root / SLURM_DIR
    if not folder.is_dir():
        return []
    stems = (p.stem.split("-", 1)[1] for p in folder.glob("array-*.sh"))
    return [int(s) for s in stems if s.isdigit()]


def job_log_pattern(folder: Path, array: bool) -> str:
    """sbatch's `--output` for a job whose script lies in `folder`: `slurm-%A_%a.out` for an
    array task, `slurm-%j.out` for a job (Slurm's own naming). A `%` of the folder itself is
    written `%%`, so that Slurm does not read it as one of its replacement symbols."""
    where = str(folder / JOB_LOG_PREFIX).replace("%", "%%")
    return f"{where}-{'%A_%a' if array else '%j'}.out"


def job_log(folder: Path, job_id: str, task: int | None) -> Path:
    """The log `job_log_pattern` gives a job (or its array task) once Slurm fills it in."""
    suffix = f"{job_id}_{task}" if task is not None else job_id
    return folder / f"{JOB_LOG_PREFIX}-{suffix}.out"


def early_error_file(run_dir: Path, pid: int) -> Path:
    """A rank's error before it knew its rank (MPI discovery failed)."""
    return run_dir / f"error-pid{pid}.jsonl"


def dry_run_target(root: Path, path: Path, text: str) -> Path | None:
    """Where a dry run writes `text`, which a real submit writes to `path` (inside `root`):
    `path` itself while it does not exist yet; None (nothing to write) when it already holds
    exactly this text; else the same relative path under `dry-run/`, so that a file a queued
    job will read (its case.json, a case script an array job runs) never changes."""
    if path.is_symlink():  # not ours, and never read through: replaced in place
        return path
    differs = content_differs(path, text)
    if differs is None:
        return path
    return dry_run_dir(root) / path.relative_to(root) if differs else None


def content_differs(path: Path, text: str) -> bool | None:
    """Whether writing `text` to `path` would change it: None when there is no file yet; a file
    that cannot be read counts as different."""
    try:
        return path.read_bytes() != text.encode()
    except FileNotFoundError:
        return None
    except OSError:
        return True


def read_json(path: Path) -> Any:
    return logtext.json_value(path.read_bytes())


@dataclass(frozen=True)
class Conflict:
    """A case.json that holds another configuration than the grid's case, or cannot be read."""

    file: Path
    problem: str
    differing: str
    """The keys that differ, stored -> grid (`config_difference`); empty when unknown."""

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}" + (f"; differing: {self.differing}"
                                                 if self.differing else "")


def config_difference(old: Any, new: dict[str, Any], limit: int = 8) -> str:
    """The keys whose values differ between a stored case (`case` of case.json) and `new`, as
    `key: stored -> new`, dotted for nested options, lists (argv) by the words that differ
    (`command.argv[5]: '256' -> '128'`); at most `limit`, then how many more."""
    if not isinstance(old, dict):
        return "case.json has no readable case"
    flat_old, flat_new = _flatten(old), _flatten(new)
    missing = object()
    keys = list(flat_new) + [k for k in flat_old if k not in flat_new]
    diffs = []
    for k in keys:
        was, now = flat_old.get(k, missing), flat_new.get(k, missing)
        if isinstance(was, list) and isinstance(now, list) and was != now:
            diffs += [f"{k}{at}: {old} -> {new}" for at, old, new in word_differences(was, now)]
        elif was != now:
            diffs.append(f"{k}: {_show(was)} -> {_show(now)}")
    more = len(diffs) - limit
    return "; ".join(diffs[:limit]) + (f"; and {more} more" if more > 0 else "")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "env":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(value: Any) -> str:
    if not isinstance(value, (str, int, float, bool, list, dict, type(None))):
        return "(absent)"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unsafe_root(root: Path) -> str | None:
    """Why `root` cannot hold results, or None. Its absolute path goes into every script, and
    into `#SBATCH --output=` lines, which end at a newline: a path with a line break (or any
    control character) could put a line of its own into the script. sbatch reads a backslash
    in those lines as an escape, even inside quotes: no quoting carries one verbatim. Scripts
    and results files are UTF-8, so the path must be too."""
    text = str(root.absolute())
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        return (f"'{shown}' is not UTF-8 text (the scripts and results files that name it are "
                "UTF-8); choose a path without such bytes")
    found = _CONTROL.search(text)
    if found:
        return (f"{text!r} contains the control character {found.group()!r} (a newline "
                "would break the #SBATCH lines of the scripts); choose a path without one")
    if "\\" in text:
        return (f"{text!r} contains a backslash, which sbatch would read as an escape in the "
                "scripts' #SBATCH --output line; choose a path without one")
    for parent in (root, *root.parents):  # the first that exists must be a directory
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                return f"{text}: {parent} exists and is not a directory"
            break
    return None


@dataclass(frozen=True)
class CaseDir:
    root: Path
    case_id: str

    @property
    def path(self) -> Path:
        return cases_dir(self.root) / self.case_id

    def run_dir(self, repeat: int) -> Path:
        return self.path / run_dir_name(repeat)

    def run_status(self, repeat: int) -> dict[str, Any] | None:
        p = self.run_dir(repeat) / STATUS_FILE
        try:
            data = read_json(p)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def finished(self, repeat: int) -> bool:
        status = self.run_status(repeat)
        return bool(status and status.get("status") == "ok")

    def repeats_present(self) -> list[int]:
        if not self.path.is_dir():
            return []
        out = []
        for p in self.path.iterdir():
            if p.is_dir() and p.name.startswith("r") and p.name[1:].isdigit():
                out.append(int(p.name[1:]))
        return sorted(out)

    def conflict(self, case: Case) -> Conflict | None:
        """Why `case` must not be written here: case.json holds another configuration under
        this id, or cannot be read. None when the directory is free or holds this case."""
        p = self.path / CASE_FILE
        if not p.exists():
            return None
        try:
            old = read_json(p)
            old_hash = old.get("config_hash")
        except (OSError, ValueError, AttributeError) as err:
            return Conflict(p, f"unreadable ({err})", "")
        if old_hash != case.config_hash():
            return Conflict(p, f"holds config {old_hash}, the grid resolves {self.case_id} to "
                               f"{case.config_hash()}",
                            config_difference(old.get("case"), case.to_dict()))
        return None

    def case_text(self, case: Case) -> str:
        """The text of case.json for `case`."""
        return json_text({"id": self.case_id, "config_hash": case.config_hash(),
                          "case": case.to_dict()})

    def write_case(self, case: Case) -> None:
        """Write case.json; refuse if a different configuration already lives under this id."""
        problem = self.conflict(case)
        if problem:
            raise ResultsConflict(str(problem))
        atomic_write_text(self.path / CASE_FILE, self.case_text(case), durable=False,
                          root=self.root)

    def write(self, name: str, text: str, durable: bool = True) -> None:
        """Write a file of this case (a script, status.json, job.json) atomically."""
        atomic_write_text(self.path / name, text, durable, root=self.root)

    def prepare_run(self, repeat: int) -> Path:
        """A clean directory for one attempt; a previous unfinished attempt is moved aside.
        A symbolic link where the run directory belongs is moved aside too (never followed),
        and the case directory itself must be a real directory under the root."""
        run = self.run_dir(repeat)
        cfd = open_dir_below(self.root, parts_below(self.root, self.path), create=True)
        try:
            try:
                st = os.lstat(run.name, dir_fd=cfd)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode) and self.finished(repeat):
                raise ResultsConflict(f"{run} already finished; it is never overwritten")
            if st is not None:
                n = 1
                while lexists_at(attempt_dir(run, n).name, cfd):
                    n += 1
                os.rename(run.name, attempt_dir(run, n).name, src_dir_fd=cfd, dst_dir_fd=cfd)
            os.mkdir(run.name, 0o777, dir_fd=cfd)
        finally:
            os.close(cfd)
        return run


def load_case_file(path: Path) -> tuple[str, Case]:
    data = read_json(path)
    return str(data["id"]), Case.from_dict(data["case"])


def case_config(root: Path, case_id: str) -> dict[str, Any] | None:
    """The case `case_id` of the results directory `root` as its case.json holds it (its
    resolved settings), or None where there is none to read."""
    if not valid_case_id(case_id):  # a name from a store is no path to follow
        return None
    try:
        data = read_json(cases_dir(root) / case_id / CASE_FILE)
    except (OSError, ValueError):
        return None
    case = data.get("case") if isinstance(data, dict) else None
    return case if isinstance(case, dict) else None
