#!/usr/bin/env bash
# The one-GPU table (toolkit default vs plain compiled scripts, ratios, time to a table) in one
# device call per part; see benchmarks/gpu_table.py. Run from anywhere:
#
#   OUT=/path/to/out bash benchmarks/gpu_table.sh --part cnn    # ~8 min on one H200
#   OUT=/path/to/out bash benchmarks/gpu_table.sh --part gpt    # ~6 min
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_table_out}"
mkdir -p "$OUT"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  python3 -c 'import sys, torch, torchvision, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__, "transformers", transformers.__version__)'
} | tee -a "$OUT/versions.txt"
exec python3 benchmarks/gpu_table.py --out "$OUT" "$@"
