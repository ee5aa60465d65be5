"""The results directory: every path in it, atomic writes, and what counts as a finished run.

Every name below is the only spelling of that path in the toolkit::

    results/<grid>/grid.yaml                         resolved grid (GRID_FILE)
    results/<grid>/dry-run.json                      what a dry run would start (DRY_RUN_FILE)
    results/<grid>/slurm/jobs.jsonl                  ledger of submitted jobs (SLURM_DIR, JOBS_FILE)
    results/<grid>/slurm/array-<n>.sh                grid-level job arrays and their logs
    results/<grid>/cases/<id>/case.json              resolved case + config hash (CASE_FILE)
    results/<grid>/cases/<id>/submission.sh          sbatch script (SUBMISSION_SCRIPT)
    results/<grid>/cases/<id>/run_local.sh           local re-run script (LOCAL_SCRIPT)
    results/<grid>/cases/<id>/r<k>/meta.json         versions, hosts, devices, flags (rank 0)
    results/<grid>/cases/<id>/r<k>/rank<NNN>.jsonl   events of one rank (rank_file)
    results/<grid>/cases/<id>/r<k>/error-pid<P>.jsonl  a rank that failed before it knew its rank
    results/<grid>/cases/<id>/r<k>/status.json       written by the executor when the run ends
    results/<grid>/cases/<id>/r<k>/job.json          who runs it (host, Slurm job)
    results/<grid>/cases/<id>/r<k>/output.log        the launcher's stdout and stderr

and, where collect writes (the results directory or `--out`): runs.csv, summary.csv,
tables/*.csv, plots/*.png, report.md, report.html.

A run is finished when its status.json says `ok`. Finished runs are never overwritten; a failed
attempt is moved aside (`r<k>.attempt<n>`) before the run is tried again, so nothing is lost.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.spec import Case

GRID_FILE = "grid.yaml"
DRY_RUN_FILE = "dry-run.json"
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

RUNS_CSV = "runs.csv"
SUMMARY_CSV = "summary.csv"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
TABLES_DIR = "tables"
PLOTS_DIR = "plots"


def cases_dir(root: Path) -> Path:
    return root / CASES_DIR


def is_results_dir(path: Path) -> bool:
    """Whether `path` looks like a results directory (it has `cases/`)."""
    return (path / CASES_DIR).is_dir()


def run_dir_name(repeat: int | str) -> str:
    """`r<k>`; a job script passes its shell variable (`"$REPEAT"`) for k."""
    return f"r{repeat}"


def attempt_dir(run: Path, n: int) -> Path:
    """Where an interrupted attempt of a run is kept: `r<k>.attempt<n>`."""
    return run.with_name(f"{run.name}.attempt{n}")


def rank_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank{rank:03d}.jsonl"


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


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Write then rename, so readers see the old file or the new one, never half of one.

    `durable` also fsyncs before the rename, so the new content survives a crash of this
    machine: status files and records of submitted jobs need that; files that are rewritten
    from the grid on every submit (case.json, scripts) do not, and skip its cost.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(tmp, flags, 0o666)  # the umask applies, as for any file the user writes
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n", durable)


def read_json(path: Path) -> Any:
    with path.open() as fh:
        return json.load(fh)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unsafe_root(root: Path) -> str | None:
    """Why `root` cannot hold results, or None. Its absolute path goes into every script, and
    into `#SBATCH --output=` lines, which end at a newline: a path with a line break (or any
    control character) could put a line of its own into the script. sbatch reads a backslash
    in those lines as an escape, even inside quotes: no quoting carries one verbatim."""
    text = str(root.absolute())
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


class ResultsConflict(Exception):
    """The results directory already holds a different case under the same id."""


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

    def conflict(self, case: Case) -> str | None:
        """Why `case` must not be written here: case.json holds another configuration under
        this id, or cannot be read. None when the directory is free or holds this case."""
        p = self.path / CASE_FILE
        if not p.exists():
            return None
        try:
            old = read_json(p)
            old_hash = old.get("config_hash")
        except (OSError, ValueError, AttributeError) as err:
            return f"{p}: unreadable ({err})"
        if old_hash != case.config_hash():
            return (f"{p}: holds config {old_hash}, the grid resolves {self.case_id} to "
                    f"{case.config_hash()}")
        return None

    def write_case(self, case: Case) -> None:
        """Write case.json; refuse if a different configuration already lives under this id."""
        problem = self.conflict(case)
        if problem:
            raise ResultsConflict(problem)
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / CASE_FILE, {"id": self.case_id,
                                                  "config_hash": case.config_hash(),
                                                  "case": case.to_dict()}, durable=False)

    def prepare_run(self, repeat: int) -> Path:
        """A clean directory for one attempt; a previous unfinished attempt is moved aside."""
        run = self.run_dir(repeat)
        if self.finished(repeat):
            raise ResultsConflict(f"{run} already finished; it is never overwritten")
        if run.exists():
            n = 1
            while (aside := attempt_dir(run, n)).exists():
                n += 1
            run.rename(aside)
        run.mkdir(parents=True)
        return run


def load_case_file(path: Path) -> tuple[str, Case]:
    data = read_json(path)
    return str(data["id"]), Case.from_dict(data["case"])
