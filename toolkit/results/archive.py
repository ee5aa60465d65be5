"""One results directory as one `.tar.gz` that travels, and reading such an archive back.

    python -m toolkit.archive results/<grid>             -> results/<grid>.tar.gz
    python -m toolkit.collect --import-logs <grid>.tar.gz --out DIR

The archive holds `<grid>/...`: every regular file of the results directory (case files, run
directories, the resolved grid, exports), `<grid>/MANIFEST.json` (what is in it, each file's
size and sha256, what was left out and why) and `<grid>/SHA256SUMS` (the same checksums in the
form `sha256sum -c` reads). Left out: profiler traces (`TRACE_PATTERNS`: large, and not what
the figures are computed from), locks and half-written temporaries, symbolic links (never
followed: they may point anywhere) and anything that is not a regular file.

Reading one back trusts nothing in it: a member that is not a plain file or directory, an
absolute name, a `..`, a name outside `<grid>/`, a file missing from the manifest or one whose
checksum differs is refused (`ArchiveError` naming the member and the reason) before anything
is written; files are then written one by one through `results/safe_write` into a new
directory, so nothing lands outside it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from parsers.rows import RunRow
from toolkit.results.layout import COMPILE_CACHE_DIR, LOCK_FILE, PROFILE_FILES, is_results_dir
from toolkit.results.safe_write import atomic_write_bytes, make_dir
from toolkit.results.scan import collect_runs

MANIFEST_FILE = "MANIFEST.json"
SUMS_FILE = "SHA256SUMS"
ARCHIVE_FORMAT = "trainbench-archive"
ARCHIVE_VERSION = 1
SUFFIX = ".tar.gz"

TRACE_PATTERNS: tuple[str, ...] = (
    "*.pt.trace.json", "*.pt.trace.json.gz", "*.nsys-rep", "*.qdrep", "*.qdstrm",
    "*.ncu-rep", "*.pftrace", "*.trace.json", "*.trace.json.gz", PROFILE_FILES,
)
"""Profiler outputs (PyTorch profiler / Kineto, Nsight Systems and Compute, Perfetto)."""
TRACE_DIRS: tuple[str, ...] = ("profile", "profiles", "traces", "profiler")
"""Directories that hold profiler output as a whole."""
_TEMPORARY = ("*.tmp", ".*.lock", LOCK_FILE)


class ArchiveError(Exception):
    """An archive that cannot be made or read back; the message names the file and why."""


@dataclass
class ArchiveResult:
    path: Path
    files: int
    bytes: int
    excluded: list[tuple[str, str]] = field(default_factory=list)
    """(relative path, why) of what was left out."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _why_excluded(relative: PurePosixPath, mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "symbolic link (not followed)"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if relative.parts[0] == COMPILE_CACHE_DIR and len(relative.parts) > 1:
        return "torch.compile's cache (compiled again by the next run)"
    if any(part in TRACE_DIRS for part in relative.parts[:-1]):
        return "profiler traces"
    name = relative.name
    if any(fnmatch.fnmatch(name, p) for p in TRACE_PATTERNS):
        return "profiler trace"
    if any(fnmatch.fnmatch(name, p) for p in _TEMPORARY):
        return "lock or temporary file"
    if name in (MANIFEST_FILE, SUMS_FILE) and len(relative.parts) == 1:
        return "an earlier archive's manifest (written anew)"
    return None


def _walk(root: Path) -> Iterator[tuple[PurePosixPath, Path, int]]:
    """(relative path, path, lstat mode) of everything under `root`, sorted, links not
    followed."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        base = Path(dirpath)
        links = [d for d in dirnames if os.path.islink(base / d)]
        dirnames[:] = [d for d in dirnames if d not in links]
        for name in sorted([*filenames, *links]):
            path = base / name
            relative = PurePosixPath(path.relative_to(root).as_posix())
            yield relative, path, os.lstat(path).st_mode


def build_archive(root: Path) -> tuple[bytes, ArchiveResult]:
    """The `.tar.gz` bytes of results directory `root` and what went into it."""
    if not root.is_dir() or not is_results_dir(root):
        raise ArchiveError(f"{root}: not a results directory (no .trainbench-results, no "
                           "cases/<id>/case.json); nothing archived")
    top = root.resolve().name
    files: dict[str, dict[str, Any]] = {}
    excluded: list[tuple[str, str]] = []
    contents: list[tuple[str, bytes, float]] = []
    for relative, path, mode in _walk(root):
        why = _why_excluded(relative, mode)
        if why is not None:
            excluded.append((str(relative), why))
            continue
        try:
            data = path.read_bytes()
            mtime = os.lstat(path).st_mtime
        except OSError as err:
            excluded.append((str(relative), f"cannot read: {err.strerror or err}"))
            continue
        files[str(relative)] = {"bytes": len(data), "sha256": _sha256(data)}
        contents.append((str(relative), data, mtime))
    manifest = {
        "format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, "created_s": time.time(),
        "results_dir": top, "files": files,
        "excluded": [{"path": p, "why": w} for p, w in excluded],
    }
    sums = "".join(f"{v['sha256']}  {k}\n" for k, v in files.items())
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mtime in [
            (MANIFEST_FILE, json.dumps(manifest, indent=2).encode() + b"\n", now),
            (SUMS_FILE, sums.encode(), now), *contents,
        ]:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    total = sum(v["bytes"] for v in files.values())
    return data, ArchiveResult(path=Path(), files=len(files), bytes=total, excluded=excluded)


def default_archive_path(root: Path) -> Path:
    return root.resolve().parent / f"{root.resolve().name}{SUFFIX}"


def write_archive(root: Path, dest: Path | None = None) -> ArchiveResult:
    """Archive `root` into `dest` (default: `<root>.tar.gz` beside it); an existing file is
    never overwritten."""
    dest = dest or default_archive_path(root)
    if os.path.lexists(dest):
        raise ArchiveError(f"{dest}: exists; nothing overwritten (name another --out)")
    data, result = build_archive(root)
    atomic_write_bytes(dest, data, root=dest.parent)
    return replace(result, path=dest)


# ----------------------------------------------------------------------------------------
# Reading back.


def is_archive(path: Path) -> bool:
    """Whether `path` is a file that looks like a tar archive (gzip or not)."""
    try:
        return path.is_file() and tarfile.is_tarfile(path)
    except OSError:
        return False


def _checked_name(archive: Path, name: str, top: str | None) -> PurePosixPath:
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute():
        raise ArchiveError(f"{archive}: member {name!r} has an absolute name; nothing extracted")
    if any(part in ("..", "") for part in name.rstrip("/").split("/")):
        raise ArchiveError(f"{archive}: member {name!r} has '..' or an empty part; nothing "
                           "extracted")
    if top is not None and pure.parts[0] != top:
        raise ArchiveError(f"{archive}: member {name!r} is outside {top}/; nothing extracted")
    return pure


def _members(archive: Path) -> tuple[str | None, dict[str, bytes]]:
    """(top folder, {path below it: bytes}) of every member, each checked before it is read."""
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            return _read_members(archive, tar)
    except (OSError, tarfile.TarError, EOFError) as err:
        raise ArchiveError(f"{archive}: not a readable tar archive ({err})") from err


def _read_members(archive: Path, tar: tarfile.TarFile) -> tuple[str | None, dict[str, bytes]]:
    contents: dict[str, bytes] = {}
    top: str | None = None
    for member in tar.getmembers():
        pure = _checked_name(archive, member.name, top)
        top = top or pure.parts[0]
        if member.isdir():
            continue
        if not member.isreg():
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                    else "a device or FIFO")
            raise ArchiveError(f"{archive}: member {member.name!r} is {kind}; archives "
                               "hold regular files only, nothing extracted")
        if len(pure.parts) < 2:
            raise ArchiveError(f"{archive}: member {member.name!r} is not inside a "
                               "results directory folder; nothing extracted")
        relative = str(PurePosixPath(*pure.parts[1:]))
        if relative in contents:
            raise ArchiveError(f"{archive}: member {member.name!r} appears twice; nothing "
                               "extracted")
        handle = tar.extractfile(member)
        if handle is None:
            raise ArchiveError(f"{archive}: member {member.name!r} cannot be read")
        contents[relative] = handle.read()
    return top, contents


def read_archive(archive: Path) -> tuple[str, dict[str, bytes], dict[str, Any]]:
    """(results directory name, {relative path: bytes}, manifest), every check passed."""
    top, contents = _members(archive)
    if top is None:
        raise ArchiveError(f"{archive}: empty archive")
    manifest = _manifest(archive, contents)
    listed: dict[str, Any] = manifest["files"]
    for relative, data in contents.items():
        if relative in (MANIFEST_FILE, SUMS_FILE):
            continue
        entry = listed.get(relative)
        if entry is None:
            raise ArchiveError(f"{archive}: {top}/{relative} is not in {MANIFEST_FILE}; "
                               "nothing extracted")
        if _sha256(data) != entry.get("sha256"):
            raise ArchiveError(f"{archive}: {top}/{relative}: sha256 differs from "
                               f"{MANIFEST_FILE} (damaged or altered); nothing extracted")
    missing = sorted(set(listed) - set(contents))
    if missing:
        raise ArchiveError(f"{archive}: {len(missing)} file(s) of {MANIFEST_FILE} missing "
                           f"from the archive, e.g. {top}/{missing[0]}; nothing extracted")
    files = {k: v for k, v in contents.items() if k not in (MANIFEST_FILE, SUMS_FILE)}
    return top, files, manifest


def _manifest(archive: Path, contents: dict[str, bytes]) -> dict[str, Any]:
    raw = contents.get(MANIFEST_FILE)
    if raw is None:
        raise ArchiveError(f"{archive}: no {MANIFEST_FILE}; not a trainbench archive")
    try:
        manifest = json.loads(raw)
    except ValueError as err:
        raise ArchiveError(f"{archive}: {MANIFEST_FILE} is not JSON ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != ARCHIVE_FORMAT:
        raise ArchiveError(f"{archive}: {MANIFEST_FILE}: key 'format' is not "
                           f"{ARCHIVE_FORMAT!r}; not a trainbench archive")
    if manifest.get("version") != ARCHIVE_VERSION:
        raise ArchiveError(f"{archive}: {MANIFEST_FILE}: key 'version' is "
                           f"{manifest.get('version')!r}, expected {ARCHIVE_VERSION}")
    if not isinstance(manifest.get("files"), dict):
        raise ArchiveError(f"{archive}: {MANIFEST_FILE}: key 'files' is not an object")
    return manifest


def extract_archive(archive: Path, target: Path) -> Path:
    """Check `archive` whole, then write its files under `target/<name>/` (a new directory);
    returns that directory."""
    top, contents, _ = read_archive(archive)
    dest = target / top
    if os.path.lexists(dest):
        raise ArchiveError(f"{dest}: exists; an archive is only extracted into a new directory")
    make_dir(dest, root=target)
    for relative, data in sorted(contents.items()):
        atomic_write_bytes(dest / relative, data, durable=False, root=dest)
    return dest


def import_archive(archive: Path, jobs: int = 0) -> tuple[list[RunRow], list[tuple[str, str]]]:
    """The runs of an archived results directory, as `collect_runs` reads them, with their
    sources named inside the archive (`<archive>:<grid>/cases/<id>/r<k>`)."""
    with tempfile.TemporaryDirectory(prefix="trainbench-archive-") as tmp:
        root = extract_archive(archive, Path(tmp))
        rows, unread = collect_runs(root, jobs)
        base = str(root)

        def named(path: str) -> str:
            return f"{archive}:{root.name}{path[len(base):]}" if path.startswith(base) else path

        for row in rows:
            row.source = named(row.source)
            row.skipped_files = [(named(p), why) for p, why in row.skipped_files]
        return rows, [(named(p), why) for p, why in unread]
