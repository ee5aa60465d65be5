"""What a run records about itself in meta.json (rank 0 writes it for all ranks): versions of
Python, MPI and the frameworks, hosts, the environment variables that change what runs, the
binding each rank planned and got, and the checks that no two ranks share a GPU and that each
rank's GPU is the one its binding named.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Mapping
from typing import Any

from toolkit import __version__
from toolkit.rank.discovery import RankInfo
from toolkit.spec.placement import DIGEST_VAR, IMAGE_VAR, RUNTIME_VAR

#: Environment variables worth recording with a run (values only, for the reader of meta.json).
RECORDED_ENV_PREFIXES = ("NCCL_", "UCX_", "OMP_", "CUDA_VISIBLE_DEVICES", "SLURM_JOB",
                         "SLURM_NTASKS", "SLURM_NNODES", "MASTER_", "TORCH_", "NVSHMEM_")


def gpu_mismatch(binding: dict[str, Any], actual_bus_id: str | None) -> str | None:
    """A message when the GPU the framework used is not the one the binding planned."""
    planned = (binding.get("planned") or {}).get("gpu_bus_id")
    if not binding.get("applied") or not planned or not actual_bus_id:
        return None
    from topology.model import normalize_bus_id

    if normalize_bus_id(planned) != normalize_bus_id(actual_bus_id):
        return f"planned GPU {planned}, framework used {actual_bus_id}"
    return None


def check_distinct_devices(gathered: list[dict[str, Any]]) -> None:
    """RuntimeError where two ranks of one host use the same GPU, unless their node said its
    GPUs are shared (`gpus_shared`: the local cluster's nodes taking turns on them, whose
    figures are marked so)."""
    seen: dict[tuple[str, str], int] = {}
    for entry in gathered:
        bus = entry.get("pci_bus_id")
        if not bus:
            continue
        key = (str(entry["host"]), str(bus))
        if key in seen and not entry.get("gpus_shared"):
            raise RuntimeError(f"ranks {seen[key]} and {entry['rank']} both use GPU {bus} on "
                               f"host {entry['host']}")
        seen[key] = int(entry["rank"])


def base_meta(case_id: str, config_hash: str, case: dict[str, Any], repeat: int, info: RankInfo,
               started: float) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "config_hash": config_hash,
        "repeat": repeat,
        "case": case,
        "started_s": started,
        "world": info.to_dict(),
        "hosts": sorted(set(info.hosts)),
        "versions": {"trainbench": __version__, "python": platform.python_version(),
                     **mpi_version()},
        "platform": platform.platform(),
        "machine": machine_description(),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(RECORDED_ENV_PREFIXES) or k in case.get("env", {})},
        "telemetry": {"source": None, "reason": "not sampled by this version"},
        "site": (case.get("site") or {}).get("name"),
        "container": container_meta(os.environ),
    }


def machine_description() -> dict[str, Any]:
    """Rank 0's host: CPU model, logical CPUs and memory (Linux /proc; `None` where unknown)."""
    model = None
    memory_mib = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8", errors="replace") as fh:
            total = next((line.split()[1] for line in fh if line.startswith("MemTotal:")), None)
        memory_mib = int(total) // 1024 if total and total.isdigit() else None
    except OSError:
        pass
    return {"cpu_model": model, "logical_cpus": os.cpu_count(), "memory_mib": memory_mib,
            "machine": platform.machine()}


#: What a process sees of the container it runs in: podman sets `container`, Apptainer (and
#: Singularity) their `*_CONTAINER`, enroot `ENROOT_ROOTFS`; podman and docker leave a file.
CONTAINER_EVIDENCE_ENV = ("container", "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER",
                          "ENROOT_ROOTFS")
CONTAINER_EVIDENCE_FILES = ("/run/.containerenv", "/.dockerenv")


def container_meta(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The container this rank was started in (runtime, image, digest where known: podman's
    as the launcher asked it, else an image pinned by `@sha256:`), and what the rank itself
    sees of it (`seen`: an empty list means it found no sign of a container). None: started
    without one."""
    runtime = environ.get(RUNTIME_VAR)
    if not runtime:
        return None
    image = environ.get(IMAGE_VAR, "")
    digest = environ.get(DIGEST_VAR) or (image.split("@", 1)[1] if "@sha256:" in image
                                         else None)
    seen = [f"{k}={environ[k]}" for k in CONTAINER_EVIDENCE_ENV if environ.get(k)]
    seen += [path for path in CONTAINER_EVIDENCE_FILES if os.path.exists(path)]
    return {"runtime": runtime, "image": image, "digest": digest, "seen": seen}


def mpi_version() -> dict[str, str]:
    import mpi4py
    from mpi4py import MPI

    library = MPI.Get_library_version().replace("\x00", "").splitlines()[0].strip()
    return {"mpi4py": mpi4py.__version__, "mpi": library}


def framework_versions() -> dict[str, str]:
    out = {}
    for name in ("torch", "torchvision", "transformers", "oneflow", "flowvision"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = str(getattr(module, "__version__", "?"))
    pynvml = sys.modules.get("pynvml")  # imported by the telemetry sampler where a GPU has NVML
    if pynvml is not None:
        with contextlib.suppress(Exception):  # no driver, or NVML broken: not recorded
            pynvml.nvmlInit()  # reference-counted: harmless where the sampler holds it
            try:
                out["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
            finally:
                pynvml.nvmlShutdown()
    torch = sys.modules.get("torch")
    if torch is not None:
        out["cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return out
