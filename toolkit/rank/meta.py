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
from typing import Any

from toolkit import __version__
from toolkit.rank.discovery import RankInfo

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
    seen: dict[tuple[str, str], int] = {}
    for entry in gathered:
        bus = entry.get("pci_bus_id")
        if not bus:
            continue
        key = (str(entry["host"]), str(bus))
        if key in seen:
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
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(RECORDED_ENV_PREFIXES) or k in case.get("env", {})},
        "telemetry": {"source": None, "reason": "not sampled by this version"},
    }


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
