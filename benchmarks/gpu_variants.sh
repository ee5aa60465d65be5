#!/usr/bin/env bash
# One change at a time to the plain compiled scripts, each alone, side by side in one device
# call: see benchmarks/gpu_variants.py.
#
#   OUT=/path/to/out bash benchmarks/gpu_variants.sh --part resnet
#   OUT=/path/to/out bash benchmarks/gpu_variants.sh --part gpt
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_variants_out}"
mkdir -p "$OUT"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  python3 -c 'import sys, torch, torchvision, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__, "transformers", transformers.__version__)'
} | tee -a "$OUT/versions.txt"
exec python3 benchmarks/gpu_variants.py --out "$OUT" "$@"
