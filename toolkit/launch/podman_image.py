"""A container image for the podman path, made on this machine from Debian's packages alone (no
registry): `mmdebstrap` writes a minimal Debian root filesystem with Open MPI as a tar stream,
and `podman import` makes it an image. The toolkit's own Python environment is not copied in:
a case mounts it (`container.mounts`) and names its interpreter (`container.python`), so the
image stays small and the ranks run the very code and packages of the host.

Podman, mmdebstrap and runc come from Debian with apt-get when missing (root only), as the local
Slurm cluster's packages do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_IMAGE = "localhost/trainbench-debian:12"
SUITE = "bookworm"

#: Debian packages of the image: Open MPI (the image's mpirun starts the ranks) and the shared
#: libraries a CPython built on Debian 12 (such as pyenv's) loads.
IMAGE_PACKAGES = ("openmpi-bin", "libopenmpi3", "python3", "ca-certificates", "libssl3",
                  "libffi8", "libsqlite3-0", "libbz2-1.0", "liblzma5", "libreadline8",
                  "libncursesw6", "zlib1g", "procps")

#: Host packages the build and the runs need, by the program each provides.
HOST_PACKAGES = {"podman": "podman", "mmdebstrap": "mmdebstrap", "runc": "runc"}


class ImageError(RuntimeError):
    """The image cannot be built; the message says what is missing."""


@dataclass(frozen=True)
class Built:
    image: str
    digest: str
    seconds: float


def ensure_host_packages(programs: Sequence[str] = tuple(HOST_PACKAGES)) -> None:
    """Install the Debian packages of `programs` that are missing (as root, with apt-get)."""
    missing = [p for p in programs if shutil.which(p, path=_path()) is None]
    if not missing:
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise ImageError(f"missing {', '.join(missing)}: install the Debian packages "
                         f"{' '.join(HOST_PACKAGES[p] for p in missing)} (as root: apt-get "
                         "install ...)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"container: installing {' '.join(HOST_PACKAGES[p] for p in missing)}", flush=True)
    subprocess.run([apt, "update", "-qq"], check=True, env=env)
    subprocess.run([apt, "install", "-y", "-qq", *(HOST_PACKAGES[p] for p in missing)],
                   check=True, env=env)


def image_exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], capture_output=True,
                          check=False).returncode == 0


def build(image: str = DEFAULT_IMAGE, packages: Sequence[str] = IMAGE_PACKAGES,
          suite: str = SUITE, rebuild: bool = False) -> Built | None:
    """Build `image` (None when it exists and `rebuild` is off): mmdebstrap streams the root
    filesystem straight into `podman import`, so nothing lands on disk but the image."""
    import time

    ensure_host_packages()
    if image_exists(image) and not rebuild:
        return None
    start = time.monotonic()
    debstrap = subprocess.Popen(
        ["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, "-"],
        stdout=subprocess.PIPE)
    assert debstrap.stdout is not None
    try:
        imported = subprocess.run(
            ["podman", "import", "--change", "CMD=/bin/bash", "--message",
             f"trainbench: Debian {suite} minbase + {' '.join(packages)}", "-", image],
            stdin=debstrap.stdout, capture_output=True, text=True, check=False)
    finally:
        debstrap.stdout.close()
        rc = debstrap.wait()
    if rc != 0:
        raise ImageError(f"mmdebstrap exited with {rc} (see its output above)")
    if imported.returncode != 0:
        raise ImageError(f"podman import failed: {imported.stderr.strip()[-500:]}")
    from toolkit.launch.container import podman_image_digest

    digest, problem = podman_image_digest(image)
    if problem:
        raise ImageError(problem)
    return Built(image, digest or "", time.monotonic() - start)


def _path() -> str:
    """PATH with the system directories (apt's programs land in /usr/sbin too)."""
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin",
                            "/bin"])


def host_python_mounts() -> list[str]:
    """The mounts that make this interpreter run inside the image: its installation prefix
    (a venv's base interpreter lives outside the venv), read-only."""
    prefixes = {os.path.realpath(sys.base_prefix)}
    return [f"{p}:{p}:ro" for p in sorted(prefixes) if p not in ("/usr", "/")]
