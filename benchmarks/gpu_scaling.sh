#!/usr/bin/env bash
# The multi-GPU table (toolkit at its defaults on 1 and N GPUs beside plain scripts on 1 and N
# ranks, speedups and ratios) in one device call per part; see benchmarks/gpu_scaling.py.
#
#   OUT=/path/to/out bash benchmarks/gpu_scaling.sh --part dp     # ResNet50 + BERT, DDP
#   OUT=/path/to/out bash benchmarks/gpu_scaling.sh --part gpt    # GPT dp, tp = 2, pp = 2
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh gpu_scaling_out
exec python3 benchmarks/gpu_scaling.py --out "$OUT" "$@"
