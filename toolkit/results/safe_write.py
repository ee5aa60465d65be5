"""Writing under a results directory without following a symbolic link.

Results directories can sit on group-writable project space, so anyone who can write there
could plant `plots -> /elsewhere` or `cases/<id>/r0 -> ~/.ssh`. Every write goes through this
module: it walks from the results root one component at a time (`O_NOFOLLOW`, `dir_fd`), refuses
a link or a file where a directory belongs (`UnsafePath`), replaces a link at the file itself
instead of writing through it, and writes atomically (write then rename). The root itself may be
a link: the user named it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


class ResultsConflict(Exception):
    """The results directory cannot take a write: it holds a different case under the same
    id, or (UnsafePath) a path that is not its own."""


class UnsafePath(ResultsConflict):
    """A path inside the results directory is a symbolic link or not a directory where one is
    expected: nothing is written through it."""


def parts_below(root: Path, path: Path) -> list[str]:
    """The components of `path` below `root` (both taken lexically, `..` refused); none for
    the root itself."""
    base = os.path.abspath(root)
    full = os.path.abspath(path)
    rel = os.path.relpath(full, base)
    if rel == os.curdir:
        return []
    parts = rel.split(os.sep)
    if parts[0] == os.pardir:
        raise UnsafePath(f"{full}: not inside the results directory {base}")
    return parts


def _fileparts_below(root: Path, path: Path) -> list[str]:
    parts = parts_below(root, path)
    if not parts:
        raise UnsafePath(f"{path}: is the results directory itself, not a file in it")
    return parts


def open_dir_below(root: Path, parts: list[str], create: bool) -> int:
    """A descriptor of root/parts..., every component a real directory (no symbolic link),
    made where missing when `create`. The root itself is opened as named."""
    if create:
        os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    done = Path(root)
    try:
        for part in parts:
            done = done / part
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                nfd = _open_subdir(fd, part, done)
            except OSError:  # ELOOP: a link; ENOTDIR: a file
                raise _unsafe(done) from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_subdir(fd: int, part: str, done: Path) -> int:
    try:
        return os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        raise _unsafe(done) from None


def _unsafe(path: Path) -> UnsafePath:
    what = "a symbolic link" if path.is_symlink() else "not a directory"
    return UnsafePath(f"{path} is {what} inside the results directory; nothing is written "
                      "through it (remove it, or use a new --results directory)")


def unsafe_below(root: Path, path: Path) -> str | None:
    """Why `path` (a directory, whether it exists yet or not) cannot be written into: a
    component below `root` is a symbolic link or a file. None when every existing one is a
    real directory. Reads only; the writers check again as they go."""
    done = Path(root)
    for part in parts_below(root, path):
        done = done / part
        try:
            st = os.lstat(done)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return str(_unsafe(done))
    return None


def make_dir(path: Path, *, root: Path) -> None:
    """`mkdir -p` of `path` under `root`, refusing symbolic links on the way."""
    os.close(open_dir_below(root, parts_below(root, path), create=True))


def open_file(path: Path, flags: int, *, root: Path, mode: int = 0o666) -> int:
    """`os.open` of `path` under `root` with `flags` (O_NOFOLLOW added): no component below
    `root`, the file included, may be a symbolic link. Parent directories are made."""
    parts = _fileparts_below(root, path)
    dfd = open_dir_below(root, parts[:-1], create=True)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=dfd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _unsafe(path) from None
        raise
    finally:
        os.close(dfd)


@contextlib.contextmanager
def atomic_writer(path: Path, *, root: Path, durable: bool = True,
                  replace: bool = True, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file to stream into; on a clean exit it becomes `path` at once (write then
    rename), on an exception it is removed and `path` is untouched. Every component of `path`
    below `root` must be a real directory (see `make_dir`), and a link at `path` itself is
    replaced, not followed.

    `durable` also fsyncs before the rename, so the new content survives a crash of this
    machine: status files and records of submitted jobs need that; files that are rewritten
    from the grid on every submit (case.json, scripts) do not, and skip its cost. With
    `replace=False` an existing `path` is never replaced: the file is published with a hard
    link, which fails (`FileExistsError`) if `path` appeared meanwhile. `mode`: the file's
    permission bits, whatever the umask (default: 0o666 less the umask).
    """
    parts = _fileparts_below(root, path)
    name = parts[-1]
    dfd = open_dir_below(root, parts[:-1], create=True)
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        # the umask applies, as for any file the user writes
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666,
                     dir_fd=dfd)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as fh:
                yield fh
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            if replace:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                os.unlink(tmp, dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True, *,
                       root: Path, mode: int | None = None) -> None:
    """`data` as `path`, atomically (`atomic_writer`)."""
    with atomic_writer(path, root=root, durable=durable, mode=mode) as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str, durable: bool = True, *, root: Path,
                      mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode(), durable, root=root, mode=mode)


def json_text(data: Any) -> str:
    """How the toolkit writes a JSON file."""
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def atomic_write_json(path: Path, data: Any, durable: bool = True, *, root: Path) -> None:
    atomic_write_text(path, json_text(data), durable, root=root)


def lexists_at(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True
