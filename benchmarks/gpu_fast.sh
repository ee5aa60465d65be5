#!/usr/bin/env bash
# Issue 8's GPU measurements: ResNet50 amp_bf16 / tf32 / amp_fp16 (dynamic and static loss
# scaling), BERT-base seq 128 amp_bf16, and the 2-GPU ResNet50 speedup when two GPUs are visible,
# through the toolkit at the fastest expected settings; prints a table with TFLOP/s and MFU.
# About 8 minutes on one H200 or the 2 x H200 machine. Run from the repository root:
#
#   OUT=/path/to/out bash benchmarks/gpu_fast.sh [--budget-s 480] [--eager] [--no-profile]
#
# Writes under $OUT (default ./gpu_fast_out): table.md, gpu_fast.json, results/ (runs.csv,
# summary.csv, report.md, rank events), logs/. See benchmarks/gpu_fast.py for the cases.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_fast_out}"
mkdir -p "$OUT"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
  python3 -c 'import sys, torch, torchvision, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__, "transformers", transformers.__version__)'
} | tee "$OUT/versions.txt"
exec python3 benchmarks/gpu_fast.py --out "$OUT" "$@"
