"""The words that put a case's ranks in its container (`Case.container`), for every runtime:

- pyxis (enroot, on Slurm): `srun ... --container-image=IMG --container-mounts=...
  --container-workdir=... python -m toolkit.worker ...`: srun's own options, one container per
  rank.
- Apptainer (or Singularity) on Slurm: `srun ... apptainer exec [--nv] --bind=... --pwd=... IMG
  python -m toolkit.worker ...`, under srun or mpirun: one container per rank, the host's MPI
  starts them.
- podman (local executor): `podman run ... IMG mpirun -np N python -m toolkit.worker ...`: one
  container on this machine holds the launcher and every rank, so MPI needs nothing from the
  host.

The project and the results directory are mounted at their own paths (the project read-only):
the worker inside imports this toolkit, reads case.json and writes its run directory on the
host. The ranks' environment markers (`TRAINBENCH_CONTAINER_*`) tell the worker inside what it
runs in, for meta.json.

Values reach a shell only quoted; a `ShellWord` (a variable of the job script, such as
`"$RUN_DIR"`) is the one unquoted part.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from toolkit import PROJECT_ROOT
from toolkit.launch.shell import concat
from toolkit.spec import Case
from toolkit.spec.placement import DIGEST_VAR, IMAGE_VAR, RUNTIME_VAR


def markers(case: Case, digest: str | None = None) -> dict[str, str]:
    """The ranks' environment that records the container (none without one)."""
    c = case.container
    if not c.enabled:
        return {}
    assert c.image is not None
    out = {RUNTIME_VAR: c.runtime, IMAGE_VAR: c.image}
    if digest:
        out[DIGEST_VAR] = digest
    return out


def mounts(case: Case, results_root: str) -> list[str]:
    """`host:container[:ro]` of every mount: the project (read-only), the results directory,
    then the case's own (a path alone is mounted at itself)."""
    out = [concat(str(PROJECT_ROOT), ":", str(PROJECT_ROOT), ":ro"),
           concat(results_root, ":", results_root)]
    for mount in case.container.mounts:
        src, _, rest = mount.partition(":")
        dst, _, mode = rest.partition(":")
        out.append(concat(src, ":", dst or src, *([":ro"] if mode == "ro" else [])))
    return out


def pyxis_options(case: Case, results_root: str, workdir: str) -> list[str]:
    """srun's pyxis options (comma-separated mounts: the paths have no commas, the case
    checks them, and the toolkit's own are checked by `path_problem`)."""
    c = case.container
    assert c.image is not None
    out = [f"--container-image={c.image}",
           concat("--container-mounts=", *_joined(mounts(case, results_root), ",")),
           concat("--container-workdir=", c.workdir or workdir)]
    if c.env:
        out.append(f"--container-env={','.join(c.env)}")
    if c.writable:
        out.append("--container-writable")
    if not c.mount_home:
        out.append("--no-container-mount-home")
    return out + list(c.options)


def apptainer_words(case: Case, results_root: str, workdir: str, gpus: bool) -> list[str]:
    """`apptainer exec ... IMAGE`, before the rank's python."""
    c = case.container
    assert c.image is not None
    out = ["apptainer", "exec"]
    if gpus:
        out.append("--nv")
    out += [concat("--bind=", *_joined(mounts(case, results_root), ",")),
            concat("--pwd=", c.workdir or workdir)]
    if c.writable:
        out.append("--writable-tmpfs")
    if not c.mount_home:
        out.append("--no-home")
    return [*out, *c.options, c.image]


def podman_words(case: Case, results_root: str, workdir: str, gpus: bool,
                 env_names: Sequence[str], name: str | None = None) -> list[str]:
    """`podman run ... IMAGE`, before the launcher: host networking and IPC (MPI's shared
    memory), the host's values of `env_names` and the case's `container.env`."""
    c = case.container
    assert c.image is not None
    out = ["podman", "run", "--rm", "--network=host", "--ipc=host",
           "--security-opt=label=disable"]
    if name:
        out.append(f"--name={name}")
    if gpus:
        out.append("--device=nvidia.com/gpu=all")  # the NVIDIA CDI spec (nvidia-ctk)
    out += [concat("--volume=", m) for m in mounts(case, results_root)]
    out.append(concat("--workdir=", c.workdir or workdir))
    out += [f"--env={n}" for n in dict.fromkeys([*env_names, *c.env])]
    return [*out, *c.options, c.image]


def rank_command(case: Case, launcher: Sequence[str], python_argv: Sequence[str], *,
                 results_root: str, workdir: str, gpus: bool,
                 env_names: Sequence[str] = (), name: str | None = None) -> list[str]:
    """`launcher` + the container's words + `python_argv` (its interpreter replaced by the
    image's): the whole command that starts the case's ranks."""
    c = case.container
    if not c.enabled:
        return [*launcher, *python_argv]
    inside = [c.python, *python_argv[1:]]
    if c.runtime == "pyxis":
        return [*launcher, *pyxis_options(case, results_root, workdir), *inside]
    if c.runtime == "apptainer":
        return [*launcher, *apptainer_words(case, results_root, workdir, gpus), *inside]
    return [*podman_words(case, results_root, workdir, gpus, env_names, name), *launcher,
            *inside]


def path_problem(path: str) -> str | None:
    """Why a path the toolkit mounts itself cannot be written into a runtime's mount list."""
    if any(ch in path for ch in ",:") or any(ch.isspace() for ch in path):
        return (f"{path} holds a comma, colon or space, which container mount lists cannot "
                "carry: move it, or run without a container")
    return None


def podman_image_digest(image: str) -> tuple[str | None, str | None]:
    """(digest, problem): the image's digest as podman knows it, or why it cannot be read
    (podman missing, no such image)."""
    try:
        done = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}", "--",
                               image], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        return None, "podman not found (Debian: apt-get install podman)"
    except subprocess.TimeoutExpired:
        return None, "podman image inspect did not answer within 60 s"
    if done.returncode != 0:
        return None, (f"podman has no image {image} ({done.stderr.strip()[-200:]}); build one "
                      "with python -m toolkit.container build")
    return done.stdout.strip() or None, None


def _joined(words: Sequence[str], sep: str) -> list[str]:
    out: list[str] = []
    for i, w in enumerate(words):
        if i:
            out.append(sep)
        out.append(w)
    return out
