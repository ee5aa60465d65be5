"""The local cluster's state directory: where it is by default, whether it can be trusted, and
how files are read from and written into it.

`up` and `down` run as root and act on the record they find there (`cluster.json`): they kill
the processes it names and delete the network it names, and `up` writes `slurm.conf`, the
TaskProlog and the nodes' hosts file into it. So, as ssh's StrictModes does for a user's keys,
a state directory is refused when it, or a directory above it, belongs to someone other than the
caller or root, when others can write it (a directory above it may be writable by others only
with the sticky bit, as /tmp is), or when a symbolic link on its path belongs to someone else;
the record is refused when it is not a plain file of the caller or root, or others can write it.
Every file is written beside its place and renamed over it (`toolkit.results.safe_write`), so no
write follows a symbolic link. Root's default is under /run (root's own, not world-writable),
made with mode 0700.

What lives elsewhere: what the record holds and the cluster's life (`daemons`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from toolkit.localslurm.config import ROOT_STATE_DIR, STATE_DIR_ENV, ClusterError
from toolkit.results.safe_write import UnsafePath, atomic_write_text

#: The most a record is read of: a real one is a few kB.
MAX_RECORD_BYTES = 1 << 20

LOCK_FILE = "up.lock"


class UnsafeStateDir(ClusterError):
    """A state directory or record that others could have written: nothing in it is acted on."""


def default_state_dir(uid: int | None = None) -> Path:
    """$TRAINBENCH_SLURM_DIR, else root's directory under /run, else one per user under /tmp
    (a user's own cluster can only be looked at: up and down need root)."""
    uid = os.geteuid() if uid is None else uid
    named = os.environ.get(STATE_DIR_ENV)
    if named:
        return Path(named)
    return Path(ROOT_STATE_DIR) if uid == 0 else Path(f"/tmp/trainbench-slurm-{uid}")


def _owner_ok(st: os.stat_result, uid: int) -> bool:
    return st.st_uid in (uid, 0)


def why_unsafe(state_dir: Path, uid: int | None = None) -> str | None:
    """Why an existing `state_dir` cannot be trusted by `uid` (default: this process's), in
    words; None when it can."""
    uid = os.geteuid() if uid is None else uid
    path = Path(os.path.abspath(state_dir))
    for p in [*reversed(path.parents), path]:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode) and not _owner_ok(st, uid):
            return f"{p} is a symbolic link of uid {st.st_uid}, who decides where it leads"
    real = Path(os.path.realpath(path))
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a directory"
    if not _owner_ok(st, uid):
        return f"{real} belongs to uid {st.st_uid}, not to uid {uid} (this process) or root"
    if st.st_mode & 0o022:
        return f"{real} can be written by others (mode {stat.S_IMODE(st.st_mode):04o})"
    for parent in real.parents:
        pst = os.stat(parent)
        if not _owner_ok(pst, uid):
            return f"{parent}, above it, belongs to uid {pst.st_uid}"
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            return (f"{parent}, above it, can be written by others without the sticky bit "
                    "(they could put another directory in its place)")
    return None


def check_state_dir(state_dir: Path, uid: int | None = None) -> None:
    """UnsafeStateDir when an existing `state_dir` cannot be trusted (`why_unsafe`)."""
    reason = why_unsafe(state_dir, uid)
    if reason is not None:
        raise UnsafeStateDir(f"refusing the state directory {state_dir}: {reason}; use a "
                             "directory of your own that only you can write (--state-dir)")


def make_state_dir(state_dir: Path, uid: int | None = None) -> None:
    """Make `state_dir` (mode 0700) where missing, then check it can be trusted."""
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        state_dir.mkdir(mode=0o700)
    check_state_dir(state_dir, uid)


def read_record(path: Path, uid: int | None = None) -> str | None:
    """The text of the record at `path` (None when there is none), read without following a
    symbolic link; UnsafeStateDir when it is not a plain file of `uid` or root that only they
    can write, or larger than any record."""
    uid = os.geteuid() if uid is None else uid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeStateDir(f"refusing the record {path}: a symbolic link") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeStateDir(f"refusing the record {path}: not a plain file")
        if not _owner_ok(st, uid):
            raise UnsafeStateDir(f"refusing the record {path}: it belongs to uid {st.st_uid}, "
                                 f"not to uid {uid} (this process) or root")
        if st.st_mode & 0o022:
            raise UnsafeStateDir(f"refusing the record {path}: others can write it (mode "
                                 f"{stat.S_IMODE(st.st_mode):04o})")
        data = fh.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise UnsafeStateDir(f"refusing the record {path}: over {MAX_RECORD_BYTES} bytes")
    return data.decode()


def write_file(state_dir: Path, name: str, text: str, mode: int = 0o644) -> Path:
    """`text` as `state_dir/name` with `mode`, written beside it and renamed over it: a link at
    its place (or on the way below `state_dir`) is never written through."""
    path = state_dir / name
    try:
        atomic_write_text(path, text, durable=False, root=state_dir, mode=mode)
    except UnsafePath as err:
        raise UnsafeStateDir(str(err)) from None
    return path


@contextlib.contextmanager
def up_lock(state_dir: Path) -> Iterator[None]:
    """Held while one `up` works on `state_dir`; a second one is refused, saying why."""
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise ClusterError(
                f"another up is starting the cluster in {state_dir}"
                + (f" (pid {holder})" if holder else "") + "; wait for it, then run status"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
