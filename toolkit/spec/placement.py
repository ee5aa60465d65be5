"""Where a case runs, as parts of the case: the site it was planned for (`SiteOptions`) and the
container its ranks run in (`ContainerOptions`). Neither changes what is measured, so neither is
part of the config hash: the same case on two clusters, or in two images, has one id and one
hash, and the run's meta.json records where it ran.

What lives elsewhere: reading a site profile file (`toolkit.spec.site`), turning these options
into srun, mpirun, apptainer and podman command lines (`toolkit.launch.container`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.spec.convert import ENV_NAME_RE, CaseError, check_env_names, container_env_name

RUNTIMES = ("none", "podman", "pyxis", "apptainer")
"""Container runtimes: `podman` on this machine (local executor), `pyxis` (srun
--container-image, enroot) and `apptainer` (apptainer exec, also Singularity's) on Slurm."""

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
"""A grid's or a site's name: it names a directory (results/<grid>) or a file (sites/<site>)."""

#: Environment variables the ranks get in a container; the worker records them in meta.json.
RUNTIME_VAR = "TRAINBENCH_CONTAINER_RUNTIME"
IMAGE_VAR = "TRAINBENCH_CONTAINER_IMAGE"
DIGEST_VAR = "TRAINBENCH_CONTAINER_DIGEST"

GPU_REQUESTS = ("auto", "gpus-per-node", "gres", "none")
"""How a site's jobs ask Slurm for GPUs: `auto` asks sinfo whether the partition has GPU GRES
(device auto) and requests `--gpus-per-node`; `gpus-per-node` always requests it; `gres` asks
with `--gres=gpu:N` (clusters without the gpus-per-node option); `none` never asks (the site
gives whole nodes with their GPUs)."""


#: Preflight figures a site may say it expects of a GPU model (or of a CPU, for CPU nodes), and
#: their units. `pair_all_reduce`: the busbw of an all-reduce over the ranks of two nodes of
#: that model, what their link reaches when healthy.
EXPECTED_METRICS = {"gemm_bf16": "TFLOP/s", "gemm_fp16": "TFLOP/s", "gemm_tf32": "TFLOP/s",
                    "gemm_fp8": "TFLOP/s", "hbm_copy": "GB/s", "hbm_triad": "GB/s",
                    "h2d": "GB/s", "d2h": "GB/s", "pair_all_reduce": "GB/s"}

PAIR_ALL_REDUCE = "pair_all_reduce"


@dataclass(frozen=True)
class ExpectedFigure:
    """What a healthy GPU of one model measures on this site (a preflight figure)."""

    gpu: str
    """The GPU model, matched case-insensitively inside the driver's name (`H200` matches
    `NVIDIA H200`)."""
    metric: str
    """One of EXPECTED_METRICS."""
    value: float

    def __post_init__(self) -> None:
        if not self.gpu.strip():
            raise CaseError("gpu", "expected a GPU model name such as H200")
        if self.metric not in EXPECTED_METRICS:
            raise CaseError(self.gpu, f"{self.metric!r}: expected one of "
                                      + ", ".join(f"{m} ({u})" for m, u in
                                                  EXPECTED_METRICS.items()))
        if not (self.value > 0 and self.value != float("inf")):
            raise CaseError(f"{self.gpu}.{self.metric}",
                            f"expected a number > 0, got {self.value!r}")


@dataclass(frozen=True)
class SiteOptions:
    """The site profile a case was planned with (`--site`); set by the profile, not the grid."""

    name: str | None = None
    """The profile's name (`None`: no profile)."""
    env: tuple[tuple[str, str], ...] = ()
    """The site's environment for every rank (NCCL/UCX settings); the case's own `env` wins."""
    modules: tuple[str, ...] = ()
    """Environment modules loaded (`module load`) before the ranks start, in this order."""
    gpu_request: str = "auto"
    """How jobs ask for GPUs: one of GPU_REQUESTS."""
    expected: tuple[ExpectedFigure, ...] = ()
    """Figures a healthy GPU of a model measures here (the preflight judges against them)."""

    def expected_for(self, device: str | None) -> dict[str, float]:
        """metric -> expected value for a GPU of this driver-reported name (the first model
        whose name it contains), or {}."""
        lowered = (device or "").lower()
        for e in self.expected:
            if e.gpu.lower() in lowered:
                return {x.metric: x.value for x in self.expected if x.gpu == e.gpu}
        return {}

    def __post_init__(self) -> None:
        if self.name is not None and not NAME_RE.fullmatch(self.name):
            raise CaseError("name", f"{self.name!r}: expected letters, digits, '.', '_' or '-'")
        if self.gpu_request not in GPU_REQUESTS:
            raise CaseError("gpu_request", f"expected one of {', '.join(GPU_REQUESTS)}, got "
                                           f"{self.gpu_request!r}")
        for i, module in enumerate(self.modules):
            if not _MODULE_RE.fullmatch(module):
                raise CaseError(f"modules[{i}]", f"{module!r}: expected a module name like "
                                                 "cuda/12.4 or nccl (letters, digits, . _ + - /)")
        check_env_names(self.env, "a site")


@dataclass(frozen=True)
class ContainerOptions:
    """The container every rank runs in. The project and the results directory are mounted at
    their own paths, so the worker inside reads its case and writes its run directory on the
    host."""

    runtime: str = "none"
    """One of RUNTIMES; `none` runs on the host."""
    image: str | None = None
    """The image: a registry reference (`nvcr.io#nvidia/pytorch:24.05-py3` for pyxis,
    `localhost/name:tag` for podman), or a file (`.sqsh`, `.sif`)."""
    mounts: tuple[str, ...] = ()
    """Further host paths to mount, each `/host/path[:/container/path[:ro]]`."""
    workdir: str | None = None
    """The ranks' working directory inside; `None` = the run directory."""
    env: tuple[str, ...] = ()
    """Host environment variables passed into the container by name (podman passes none but
    these and the ranks' own; pyxis makes these win over the image's)."""
    python: str = "python3"
    """The interpreter inside the image that runs the worker."""
    writable: bool = False
    """A writable container filesystem: pyxis `--container-writable`, apptainer
    `--writable-tmpfs` (podman's is always writable)."""
    mount_home: bool = True
    """`false`: pyxis `--no-container-mount-home`, apptainer `--no-home`."""
    options: tuple[str, ...] = ()
    """Further options of the runtime, each one `--name=value` argument: after `podman run`,
    after `apptainer exec`, or srun's `--container-*` options for pyxis."""

    @property
    def enabled(self) -> bool:
        return self.runtime != "none"

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise CaseError("runtime", f"expected one of {', '.join(RUNTIMES)}, got "
                                       f"{self.runtime!r}")
        if not self.enabled:
            if self.image is not None:
                raise CaseError("image", "runtime is none: set runtime (podman, pyxis or "
                                         "apptainer) to run in an image")
            return
        if self.image is None:
            raise CaseError("image", f"runtime {self.runtime} needs an image")
        if not _IMAGE_RE.fullmatch(self.image):
            raise CaseError("image", f"{self.image!r}: expected an image reference or file "
                                     "path (no spaces, commas or control characters)")
        for i, mount in enumerate(self.mounts):
            if not _MOUNT_RE.fullmatch(mount):
                raise CaseError(f"mounts[{i}]", f"{mount!r}: expected /host/path, "
                                                "/host/path:/container/path or "
                                                "/host/path:/container/path:ro (absolute paths "
                                                "without spaces, commas or colons)")
        if self.workdir is not None and not _PATH_RE.fullmatch(self.workdir):
            raise CaseError("workdir", f"{self.workdir!r}: expected an absolute path without "
                                       "spaces, commas or colons")
        for i, name in enumerate(self.env):
            if not ENV_NAME_RE.fullmatch(name):
                raise CaseError(f"env[{i}]", f"{name!r}: expected an environment variable name")
            why = container_env_name(name)
            if why:
                raise CaseError(f"env[{i}]", f"{name!r} is a reserved name and cannot be passed "
                                             f"into the container: {why}")
        if not _PYTHON_RE.fullmatch(self.python):
            raise CaseError("python", f"{self.python!r}: expected an interpreter name or "
                                      "absolute path (letters, digits, . _ + - /)")
        for i, opt in enumerate(self.options):
            why = self.option_problem(opt)
            if why:
                raise CaseError(f"options[{i}]", f"{opt!r}: {why}")

    def option_problem(self, opt: str) -> str | None:
        """Why one of `options` cannot be given to this runtime, or None."""
        if not _OPTION_RE.fullmatch(opt):
            return ("expected one long option like --name=value (printable, no spaces, at most "
                    "200 characters)")
        name = opt[2:].partition("=")[0]
        if self.runtime == "pyxis" and not name.startswith(("container-", "no-container-")):
            return "pyxis options are srun's --container-* options"
        owned = OWNED_OPTIONS.get(self.runtime, {})
        for full, key in owned.items():
            if full.startswith(name):
                return f"--{full} is set from container.{key}"
        return None


#: Runtime options the toolkit sets from ContainerOptions keys (and abbreviations of them).
OWNED_OPTIONS: dict[str, dict[str, str]] = {
    "pyxis": {"container-image": "image", "container-mounts": "mounts",
              "container-workdir": "workdir", "container-env": "env",
              "container-writable": "writable", "container-readonly": "writable",
              "container-mount-home": "mount_home", "no-container-mount-home": "mount_home"},
    "apptainer": {"bind": "mounts", "pwd": "workdir", "writable-tmpfs": "writable",
                  "no-home": "mount_home"},
    "podman": {"volume": "mounts", "workdir": "workdir", "env": "env", "name": "the run",
               "rm": "the run"},
}

_MODULE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+/-]{0,199}")
_IMAGE_RE = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9._/:@#+=~-]{0,299}")
_PATH_RE = re.compile(r"/[^\s,:\x00-\x1f\x7f]{0,299}")
_MOUNT_RE = re.compile(r"/[^\s,:\x00-\x1f\x7f]{0,299}(:/[^\s,:\x00-\x1f\x7f]{0,299}(:ro|:rw)?)?")
_PYTHON_RE = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9._+/-]{0,299}")
_OPTION_RE = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[^\s\x00-\x1f\x7f]{1,200})?")
