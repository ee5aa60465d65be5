"""A throw-away PostgreSQL server, for the store's tests and for trying a team store on one
machine: Debian's `postgresql` package (installed with apt-get when missing, as root), a data
directory made by `initdb` in a temporary directory, a free TCP port on 127.0.0.1 and a unix
socket directory of its own, `trust` authentication, stopped and removed when done.

PostgreSQL refuses to run as root: as root the server runs as the `postgres` user the Debian
package creates (or `PG_USER`); otherwise as the calling user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("postgresql",)
PG_USER = "postgres"
START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server programs here, and no way to install them (the message says why)."""


def bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/<v>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def ensure_installed() -> Path:
    """The bin directory, installing Debian's postgresql with apt-get when it is missing."""
    found = bin_dir()
    if found is not None:
        return found
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        raise PostgresUnavailable("PostgreSQL is not installed (no initdb) and it cannot be "
                                  "installed here (needs root and apt-get): apt-get install "
                                  + " ".join(PACKAGES))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "update", "-qq"], check=True, env=env)
    subprocess.run([apt, "install", "-y", "-qq", *PACKAGES], check=True, env=env)
    found = bin_dir()
    if found is None:
        raise PostgresUnavailable(f"still no initdb after apt-get install {' '.join(PACKAGES)}")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Server:
    bin: Path
    data: Path
    port: int
    user: str

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        _run([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
              "-U", self.user, name], self.user)
        return self.url(name)


def _run(argv: list[str], user: str) -> subprocess.CompletedProcess[str]:
    if os.geteuid() == 0 and user != "root":
        argv = ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/")
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done


@contextmanager
def throwaway_server() -> Iterator[Server]:
    """Start a server in a temporary directory; stop it and remove the directory after."""
    binaries = ensure_installed()
    user = PG_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    entry = pwd.getpwnam(user)
    top = Path(tempfile.mkdtemp(prefix="trainbench-pg-"))
    os.chown(top, entry.pw_uid, entry.pw_gid)
    data, sockets = top / "data", top / "socket"
    port = free_port()
    try:
        _run([str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
              "--no-sync", "-E", "UTF8"], user)
        _run(["mkdir", str(sockets)], user)
        options = (f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=50")
        _run([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(top / "server.log"),
              "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start"], user)
        try:
            yield Server(binaries, data, port, user)
        finally:
            _run([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                  "stop"], user)
    finally:
        for _ in range(3):
            try:
                shutil.rmtree(top)
                break
            except OSError:
                time.sleep(0.5)
