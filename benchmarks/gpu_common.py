"""What the parts of the GPU runner (`benchmarks/gpu.sh`) share: the ranks' environment and the
record of the machine, running a command with its output in a log, reading a plain script's JSON
line and profile, reading the toolkit's runs.csv, building a grid's `zip`, and the number
formats of the tables.

The parts themselves (which cases, which plain scripts, which table) live in `gpu_table.py`,
`gpu_scaling.py`, `gpu_variants.py`, `startup_grid.py` and `preflight_gpu.py`; `gpu.sh` is the
one command that runs any of them.

    python benchmarks/gpu_common.py --versions OUT   # the machine and software: OUT/versions.txt
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from toolkit.analysis.kernels import kind_key  # noqa: E402
from toolkit.results.runs import START_UP_PHASES as RUN_START_UP_PHASES  # noqa: E402
from toolkit.spec import Case  # noqa: E402

ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
       "NVSHMEM_DISABLE_NVLS": "1"}
"""Every GPU run's environment (`gpu.sh` exports it, grids set it on every case): NVLink
multicast off, which the lent machines do not allow."""
START_UP_PHASES = tuple(name for name, _ in RUN_START_UP_PHASES)
"""runs.csv's phases of a run's launch to its first iteration, in order."""
GPT_SIZE = {"hidden_size": 1536, "num_layers": 16, "num_heads": 16, "seq_len": 2048,
            "vocab_size": 50304}
"""The seeds' GPT (DLPerf's report): every GPT row of every part."""
SMOKE_SIZES: dict[str, dict[str, Any]] = {
    "resnet50": {"image_size": 32, "resnet_layers": [1, 1, 1, 1], "num_classes": 10},
    "bert_base": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                  "seq_len": 32, "vocab_size": 500, "masked_positions": 5},
    "gpt": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "seq_len": 16,
            "vocab_size": 128},
}
"""Tiny models for `--smoke` (CPU ranks: checks a part's flow, measures nothing)."""


def versions() -> str:
    """The machine and its software, as the head of a part's versions.txt: a dated line, the
    GPUs (nvidia-smi) and the Python packages the workloads use."""
    lines = [f"# {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} {os.uname().nodename}"]
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,"
                              "clocks.max.sm", "--format=csv,noheader"], capture_output=True,
                             text=True, check=False, timeout=60)
        lines.append(smi.stdout.strip() or f"nvidia-smi: {smi.stderr.strip()}")
    except (OSError, subprocess.TimeoutExpired) as err:
        lines.append(f"nvidia-smi: {err}")
    try:
        import torch
        import torchvision
        import transformers
    except ImportError as err:
        lines.append(f"python {sys.version.split()[0]} without the workloads' packages ({err})")
    else:
        lines.append(f"python {sys.version.split()[0]} torch {torch.__version__} cuda "
                     f"{torch.version.cuda} cudnn {torch.backends.cudnn.version()} torchvision "
                     f"{torchvision.__version__} transformers {transformers.__version__}")
    return "\n".join(lines)


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None,
        timeout: float | None = None) -> tuple[int, float]:
    """Run `cmd` with its output (after a `$ cmd` line) in `log`: its exit status (124 when
    it ran past `timeout` seconds and was killed) and its wall seconds."""
    t0 = time.time()
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, check=False,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            fh.write(f"\ntimed out after {timeout:.0f} s\n")
            rc = 124
    return rc, time.time() - t0


def last_json(log: Path) -> dict[str, Any]:
    """The last JSON object line of a log (a plain script's result), {} when there is none."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                out: dict[str, Any] = json.loads(line)
                return out
            except ValueError:
                continue
    return {}


def read_runs(results: Path) -> dict[str, list[dict[str, str]]]:
    """runs.csv of a results directory: each case's rows, by repeat."""
    out: dict[str, list[dict[str, str]]] = {}
    path = results / "runs.csv"
    if not path.exists():
        return out
    with path.open() as fh:
        for r in csv.DictReader(fh):
            out.setdefault(r["case_id"], []).append(r)
    for runs in out.values():
        runs.sort(key=lambda r: int(r["repeat"]))
    return out


def plain_profile(log: Path) -> dict[str, float | None]:
    """A plain script's `--profile` table (`_profile.py`, rank 0) in the toolkit's terms: `step`
    the wall ms per step under the profiler, each kind's kernel ms per step, and `idle` the step
    less its kernel time (one stream: kernels do not overlap). Empty when the log has none."""
    out: dict[str, float | None] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("-- rank ") and out:
            break  # rank 0's table only
        if m := re.match(r"profile: \d+ iterations, ([\d.]+) ms wall per iteration.*?, "
                         r"([\d.]+) ms GPU kernel time per iteration", line):
            out.update(step=float(m[1]), idle=max(0.0, float(m[1]) - float(m[2])))
        elif out and (m := re.match(r"\s*[\d.]+%\s+([\d.]+)\s+([A-Za-z/ ]+)$", line)):
            out[kind_key(m[2].strip())] = float(m[1])
    return out


def zip_of(cases: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """A grid's `zip` entry with one case per position (each a mapping with its `name`): a key
    no case sets is left out, and a key a case does not set is given as the case default
    (model_config and parallel: empty, each field at its default)."""
    names = sorted({k for c in cases for k in c} - {"name"})
    zipped = {"name": [c["name"] for c in cases]}
    for key in names:
        zipped[key] = [c.get(key) for c in cases]
    for key, values in list(zipped.items()):
        if key != "name" and all(v is None for v in values):
            del zipped[key]
    defaults: dict[str, Any] = {**Case.from_dict({"model": "resnet50"}).to_dict(),
                                "model_config": {}, "parallel": {}}
    for key, values in zipped.items():
        zipped[key] = [defaults.get(key) if v is None else v for v in values]
    return zipped


def num(value: Any) -> float | None:
    """A runs.csv cell as a number, None when empty or not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def fmt(value: float | None, spec: str = ",.0f") -> str:
    """A table cell: the number in `spec`, `-` for none."""
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--versions", type=Path, metavar="OUT", required=True,
                   help="append the machine and its software to OUT/versions.txt and print them")
    args = p.parse_args(argv)
    text = versions()
    args.versions.mkdir(parents=True, exist_ok=True)
    with (args.versions / "versions.txt").open("a") as fh:
        fh.write(text + "\n")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
