"""One results directory as one `.tar.gz` that travels, and reading such an archive back.

    python -m toolkit.archive results/<grid>             -> results/<grid>.tar.gz
    python -m toolkit.collect --import-logs <grid>.tar.gz --out DIR

The archive holds `<grid>/...`: every regular file of the results directory (case files, run
directories, the resolved grid, exports), `<grid>/MANIFEST.json` (what is in it, each file's
size and sha256, what was left out and why) and `<grid>/SHA256SUMS` (the same checksums in the
form `sha256sum -c` reads). Left out: profiler traces (`TRACE_PATTERNS`: large, and not what
the figures are computed from), locks and half-written temporaries, symbolic links (never
followed: they may point anywhere) and anything that is not a regular file.

Writing streams: files are hashed a chunk at a time for the manifest, then copied into the
compressed stream of a `safe_write.atomic_writer` file (a file rewritten in between fails the
archive; a failed archive leaves nothing behind; an existing one is never replaced).

Reading one back trusts nothing in it: a member that is not a plain file or directory, an
absolute name, a `..` or `.` part (`./x`: an archive made with `tar -C dir .`), a name outside
`<grid>/`, a file that is also a folder of another member, members adding up to more than
`MAX_UNPACKED_BYTES` uncompressed (a gzip bomb; checked from each header before its data is
read), an unpacked stream longer than that limit (headers count: GNU long names and pax
extended headers, checked before each read) or one header larger than `MAX_HEADER_BYTES`, a
manifest entry that is not `{bytes, sha256}`, a file missing from the manifest or one whose
checksum differs is refused (`ArchiveError` naming the archive, the member and the reason) in
a first pass that writes nothing; a second pass streams the files one by one through
`results/safe_write` into a new directory, so nothing lands outside it, each checked again
against the first pass's checksum.
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import hashlib
import io
import json
import lzma
import os
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from parsers import logtext
from parsers.rows import RunRow
from toolkit.results.layout import COMPILE_CACHE_DIR, LOCK_FILE, PROFILE_FILES, is_results_dir
from toolkit.results.safe_write import atomic_writer, make_dir
from toolkit.results.scan import collect_runs

MANIFEST_FILE = "MANIFEST.json"
SUMS_FILE = "SHA256SUMS"
ARCHIVE_FORMAT = "trainbench-archive"
ARCHIVE_VERSION = 1
SUFFIX = ".tar.gz"
CHUNK = 1 << 20
"""Bytes read or written at a time: an archive is never held in memory whole."""
MAX_UNPACKED_BYTES = 16 << 30
"""What the members of an archive may add up to, uncompressed, when it is read back (16 GiB:
far above any results directory without traces). More is refused before anything is written,
as a gzip bomb would be; `read_archive`/`extract_archive`/`import_archive` take another
`limit_bytes`."""
MAX_MEMBERS = 1_000_000
"""How many members an archive may have when it is read back."""
MAX_HEADER_BYTES = CHUNK
"""Bytes of one member's long-name (GNU) or extended (pax) header that reading back accepts:
tarfile reads such a header whole into memory, so a larger one is refused before it is read."""
MAX_MANIFEST_BYTES = 256 << 20
"""Bytes of the MANIFEST.json that reading back keeps in memory."""

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
        return ("the grid's compile cache (torch.compile's, and Python bytecode where used): "
                "compiled again by the next run")
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


def _open_no_follow(path: Path) -> BinaryIO:
    """`path` for reading, refused if it became a symbolic link since the walk."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb")


def _file_digest(path: Path) -> tuple[int, str]:
    """(bytes, sha256) of `path`, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with _open_no_follow(path) as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


@dataclass
class _Planned:
    relative: str
    path: Path
    size: int
    sha256: str
    mtime: float


class _CheckedReader:
    """A file read for the archive, hashed as tarfile reads it: what went in must be what the
    manifest says (a file rewritten meanwhile fails the archive, not the reader's import)."""

    def __init__(self, planned: _Planned) -> None:
        self.planned = planned
        self.handle = _open_no_follow(planned.path)
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data

    def check(self, root: Path) -> None:
        self.handle.close()
        if self.digest.hexdigest() != self.planned.sha256:
            raise ArchiveError(f"{root / self.planned.relative}: changed while being "
                               "archived; no archive written")


def _plan(root: Path) -> tuple[list[_Planned], list[tuple[str, str]]]:
    """What goes into the archive of `root` (sizes and checksums read in chunks) and what is
    left out and why."""
    planned: list[_Planned] = []
    excluded: list[tuple[str, str]] = []
    for relative, path, mode in _walk(root):
        why = _why_excluded(relative, mode)
        if why is not None:
            excluded.append((str(relative), why))
            continue
        try:
            size, sha = _file_digest(path)
            mtime = os.lstat(path).st_mtime
        except OSError as err:
            excluded.append((str(relative), f"cannot read: {err.strerror or err}"))
            continue
        planned.append(_Planned(str(relative), path, size, sha, mtime))
    return planned, excluded


def excluded_summary(excluded: list[tuple[str, str]]) -> list[str]:
    """One line per reason for what an archive left out: how many, and the first of them
    (MANIFEST.json lists every one)."""
    by_why: dict[str, list[str]] = {}
    for path, why in excluded:
        by_why.setdefault(why, []).append(path)
    return [f"left out {paths[0]}: {why}" if len(paths) == 1 else
            f"left out {len(paths)} files ({why}), e.g. {paths[0]}"
            for why, paths in by_why.items()]


def default_archive_path(root: Path) -> Path:
    return root.resolve().parent / f"{root.resolve().name}{SUFFIX}"


def write_archive(root: Path, dest: Path | None = None) -> ArchiveResult:
    """Archive `root` into `dest` (default: `<root>.tar.gz` beside it), streamed to disk a chunk
    at a time through `safe_write.atomic_writer`; an existing file is never overwritten, and a
    failed archive leaves nothing behind."""
    dest = dest or default_archive_path(root)
    if os.path.lexists(dest):
        raise ArchiveError(f"{dest}: exists; nothing overwritten (name another --out)")
    if not root.is_dir() or not is_results_dir(root):
        raise ArchiveError(f"{root}: not a results directory (no .trainbench-results, no "
                           "cases/<id>/case.json); nothing archived")
    top = root.resolve().name
    planned, excluded = _plan(root)
    files = {p.relative: {"bytes": p.size, "sha256": p.sha256} for p in planned}
    manifest = {
        "format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, "created_s": time.time(),
        "results_dir": top, "files": files,
        "excluded": [{"path": p, "why": w} for p, w in excluded],
    }
    sums = "".join(f"{v['sha256']}  {k}\n" for k, v in files.items()).encode()
    now = time.time()

    def info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
        entry = tarfile.TarInfo(f"{top}/{name}")
        entry.size, entry.mtime, entry.mode = size, mtime, 0o644
        return entry

    try:
        with atomic_writer(dest, root=dest.parent, replace=False) as fh, \
                tarfile.open(fileobj=fh, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for name, data in ((MANIFEST_FILE, json.dumps(manifest, indent=2).encode() + b"\n"),
                               (SUMS_FILE, sums)):
                tar.addfile(info(name, len(data), now), io.BytesIO(data))
            for item in planned:
                reader = _CheckedReader(item)
                try:
                    tar.addfile(info(item.relative, item.size, item.mtime), reader)
                finally:
                    reader.check(root)
    except FileExistsError as err:
        raise ArchiveError(f"{dest}: exists; nothing overwritten (name another --out)") from err
    return ArchiveResult(path=dest, files=len(planned), bytes=sum(p.size for p in planned),
                         excluded=excluded)


# ----------------------------------------------------------------------------------------
# Reading back.


def is_archive(path: Path) -> bool:
    """Whether `path` is a file that looks like a tar archive (gzip, bzip2, xz or none): its
    first member's header reads (within the limits of reading one back)."""
    try:
        if not path.is_file():
            return False
        with _open_tar(path):
            return True
    except ArchiveError as error:
        return "not a readable tar archive" not in str(error)
    except OSError:
        return False


def _checked_name(archive: Path, name: str, top: str | None) -> PurePosixPath:
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute():
        raise ArchiveError(f"{archive}: member {name!r} has an absolute name; nothing extracted")
    parts = name.rstrip("/").split("/")
    if parts[0] == ".":
        raise ArchiveError(f"{archive}: member {name!r} starts with '.' (an archive made with "
                           "`tar -C dir .`?); a trainbench archive holds one folder, <grid>/... "
                           "(python -m toolkit.archive makes one); nothing extracted")
    if any(part in ("..", "", ".") for part in parts):
        raise ArchiveError(f"{archive}: member {name!r} has '..', '.' or an empty part; "
                           "nothing extracted")
    if top is not None and pure.parts[0] != top:
        raise ArchiveError(f"{archive}: member {name!r} is outside {top}/; nothing extracted")
    return pure


def _limit_error(archive: Path, what: str, limit: int) -> ArchiveError:
    return ArchiveError(f"{archive}: {what}, more than the limit of {limit} bytes "
                        f"({limit / (1 << 30):.3g} GiB) uncompressed; refused as a possible "
                        "gzip bomb, nothing extracted")


def _regular_members(archive: Path, tar: tarfile.TarFile,
                     limit: int) -> Iterator[tuple[tarfile.TarInfo, str]]:
    """(member, path below the top folder) of each regular file; every member's name and kind,
    and the running total of sizes, checked before its data is read."""
    top: str | None = None
    total = count = 0
    seen: set[str] = set()
    folders: set[str] = set()
    for member in tar:
        count += 1
        if count > MAX_MEMBERS:
            raise ArchiveError(f"{archive}: more than {MAX_MEMBERS} members; refused, nothing "
                               "extracted")
        pure = _checked_name(archive, member.name, top)
        top = top or pure.parts[0]
        path = str(pure)
        if member.isdir():
            if path in seen:
                raise ArchiveError(f"{archive}: member {member.name!r} is a folder and a file "
                                   "of the same name comes before it; nothing extracted")
            folders.add(path)
            continue
        if path in folders:
            raise ArchiveError(f"{archive}: member {member.name!r} is a file and a folder of "
                               "the same name comes before it; nothing extracted")
        inside = next((str(parent) for parent in pure.parents if str(parent) in seen), None)
        if inside is not None:
            raise ArchiveError(f"{archive}: member {member.name!r} is inside {inside!r}, which "
                               "is a file of the archive; nothing extracted")
        if not member.isreg():
            kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk()
                    else "a device or FIFO")
            raise ArchiveError(f"{archive}: member {member.name!r} is {kind}; archives "
                               "hold regular files only, nothing extracted")
        if len(pure.parts) < 2:
            raise ArchiveError(f"{archive}: member {member.name!r} is not inside a "
                               "results directory folder; nothing extracted")
        total += member.size
        if total > limit:
            raise _limit_error(archive, f"members up to {member.name!r} add up to {total} "
                               "bytes", limit)
        relative = str(PurePosixPath(*pure.parts[1:]))
        if path in seen:
            raise ArchiveError(f"{archive}: member {member.name!r} appears twice; nothing "
                               "extracted")
        seen.add(path)
        folders.update(str(parent) for parent in pure.parents)
        yield member, relative


def _chunks(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    handle = tar.extractfile(member)
    if handle is None:
        raise ArchiveError(f"{archive}: member {member.name!r} cannot be read")
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk


_UNREADABLE = (OSError, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError)
"""What a damaged tar or compressed stream raises while it is read."""


class _Bounded:
    """The uncompressed tar stream, read through a count: the limit holds for everything in it
    (headers, GNU long names, pax extended headers, member data, padding), checked before each
    read or seek is made; a single read larger than `MAX_HEADER_BYTES` (tarfile reads a long
    name or an extended header whole) is refused before it is made."""

    def __init__(self, archive: Path, stream: io.BufferedIOBase, limit: int) -> None:
        self.archive, self.stream, self.limit = archive, stream, limit
        self.position = 0
        self.name = str(archive)

    def _check(self, end: int, what: str) -> None:
        if end > self.limit:
            raise _limit_error(self.archive, f"{what} reach byte {end} of the unpacked stream "
                               "(headers and members)", self.limit)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise ArchiveError(f"{self.archive}: a read to the end of the archive; refused")
        if size > MAX_HEADER_BYTES:
            raise ArchiveError(
                f"{self.archive}: a header of {size} bytes at byte {self.position} (a long name "
                f"or an extended header), more than the limit of {MAX_HEADER_BYTES} bytes for "
                "one; refused, nothing extracted")
        self._check(self.position + size, "the archive's contents would")
        data = self.stream.read(size)
        self.position += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self.position + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR):
            raise OSError("only seeks from the start or the current position")
        self._check(target, "the archive's contents would")
        self.position = self.stream.seek(target)
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        self.stream.close()


def _decompressed(archive: Path) -> io.BufferedIOBase:
    """`archive`'s tar stream, decompressed as its first bytes say (gzip, bzip2, xz, none)."""
    with open(archive, "rb") as fh:
        magic = fh.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(archive, "rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(archive, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(archive, "rb")
    return open(archive, "rb")


def _open_tar(archive: Path, limit: int = MAX_UNPACKED_BYTES) -> tarfile.TarFile:
    """`archive` for reading, every byte of its unpacked stream counted against `limit`."""
    try:
        stream = _Bounded(archive, _decompressed(archive), limit)
        try:
            return tarfile.open(fileobj=stream, mode="r:")  # type: ignore[call-overload]
        except BaseException:
            stream.close()
            raise
    except _UNREADABLE as err:
        raise ArchiveError(f"{archive}: not a readable tar archive ({err})") from err


def _scan(archive: Path, limit: int) -> tuple[str | None, dict[str, str], bytes | None]:
    """(top folder, {path below it: sha256}, the manifest's bytes), streamed: nothing but the
    manifest is kept."""
    sums: dict[str, str] = {}
    manifest: bytes | None = None
    top: str | None = None
    try:
        with _open_tar(archive, limit) as tar:
            for member, relative in _regular_members(archive, tar, limit):
                top = top or PurePosixPath(member.name).parts[0]
                if relative == MANIFEST_FILE and member.size > MAX_MANIFEST_BYTES:
                    raise ArchiveError(f"{archive}: member {member.name!r} has {member.size} "
                                       f"bytes, more than the limit of {MAX_MANIFEST_BYTES} "
                                       "for a manifest; nothing extracted")
                digest = hashlib.sha256()
                kept = []
                for chunk in _chunks(archive, tar, member):
                    digest.update(chunk)
                    if relative == MANIFEST_FILE:
                        kept.append(chunk)
                sums[relative] = digest.hexdigest()
                if relative == MANIFEST_FILE:
                    manifest = b"".join(kept)
    except _UNREADABLE as err:
        raise ArchiveError(f"{archive}: not a readable tar archive ({err})") from err
    return top, sums, manifest


def read_archive(archive: Path, limit_bytes: int = MAX_UNPACKED_BYTES
                 ) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(results directory name, {relative path: sha256}, manifest), every check passed: names,
    kinds, the size limit, the manifest, every checksum. Reads the archive once, in chunks."""
    top, sums, raw = _scan(archive, limit_bytes)
    if top is None:
        raise ArchiveError(f"{archive}: empty archive")
    manifest = _manifest(archive, raw)
    listed: dict[str, Any] = manifest["files"]
    for relative, sha in sums.items():
        if relative in (MANIFEST_FILE, SUMS_FILE):
            continue
        entry = listed.get(relative)
        if entry is None:
            raise ArchiveError(f"{archive}: {top}/{relative} is not in {MANIFEST_FILE}; "
                               "nothing extracted")
        if sha != entry.get("sha256"):
            raise ArchiveError(f"{archive}: {top}/{relative}: sha256 differs from "
                               f"{MANIFEST_FILE} (damaged or altered); nothing extracted")
    missing = sorted(set(listed) - set(sums))
    if missing:
        raise ArchiveError(f"{archive}: {len(missing)} file(s) of {MANIFEST_FILE} missing "
                           f"from the archive, e.g. {top}/{missing[0]}; nothing extracted")
    files = {k: v for k, v in sums.items() if k not in (MANIFEST_FILE, SUMS_FILE)}
    return top, files, manifest


def _manifest(archive: Path, raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise ArchiveError(f"{archive}: no {MANIFEST_FILE}; not a trainbench archive")
    try:
        manifest = logtext.json_value(raw)
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
    for name, entry in manifest["files"].items():
        size = entry.get("bytes") if isinstance(entry, dict) else None
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0
                or not isinstance(sha, str) or len(sha) != 64
                or not all(c in "0123456789abcdef" for c in sha)):
            shown = repr(entry) if len(repr(entry)) <= 80 else repr(entry)[:77] + "..."
            raise ArchiveError(f"{archive}: {MANIFEST_FILE}: the entry of {name!r} is {shown}, "
                               "not {'bytes': <size>, 'sha256': <64 hex digits>}; nothing "
                               "extracted")
    return manifest


def extract_archive(archive: Path, target: Path,
                    limit_bytes: int = MAX_UNPACKED_BYTES) -> Path:
    """Check `archive` whole (`read_archive`), then stream its files under `target/<name>/` (a
    new directory), each checked again against the checksum the first pass verified; returns
    that directory."""
    top, sums, _ = read_archive(archive, limit_bytes)
    dest = target / top
    if os.path.lexists(dest):
        raise ArchiveError(f"{dest}: exists; an archive is only extracted into a new directory")
    make_dir(dest, root=target)
    with _open_tar(archive, limit_bytes) as tar:
        for member, relative in _regular_members(archive, tar, limit_bytes):
            if relative in (MANIFEST_FILE, SUMS_FILE):
                continue
            if relative not in sums:
                raise ArchiveError(f"{archive}: changed while being extracted ({member.name!r} "
                                   f"is new); {dest} is incomplete")
            digest = hashlib.sha256()
            with atomic_writer(dest / relative, root=dest, durable=False) as fh:
                for chunk in _chunks(archive, tar, member):
                    digest.update(chunk)
                    fh.write(chunk)
                if digest.hexdigest() != sums[relative]:
                    raise ArchiveError(f"{archive}: {member.name!r} changed while being "
                                       f"extracted; {dest} is incomplete")
    return dest


def import_archive(archive: Path, jobs: int = 0, limit_bytes: int = MAX_UNPACKED_BYTES
                   ) -> tuple[list[RunRow], list[tuple[str, str]]]:
    """The runs of an archived results directory, as `collect_runs` reads them, with their
    sources named inside the archive (`<archive>:<grid>/cases/<id>/r<k>`)."""
    with tempfile.TemporaryDirectory(prefix="trainbench-archive-") as tmp:
        root = extract_archive(archive, Path(tmp), limit_bytes)
        rows, unread = collect_runs(root, jobs)
        base = str(root)

        def named(path: str) -> str:
            return f"{archive}:{root.name}{path[len(base):]}" if path.startswith(base) else path

        for row in rows:
            row.source = named(row.source)
            row.skipped_files = [(named(p), why) for p, why in row.skipped_files]
        return rows, [(named(p), why) for p, why in unread]
