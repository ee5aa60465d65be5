#!/usr/bin/env bash
# The one-GPU table (toolkit default vs plain compiled scripts, ratios, time to a table) in one
# device call per part; see benchmarks/gpu_table.py. Run from anywhere:
#
#   OUT=/path/to/out bash benchmarks/gpu_table.sh --part cnn    # over 10 min on one H200:
#   ... --part cnn --only rn50-bf16-bs256                       # ~6-7 min (tuned kernels)
#   ... --part cnn --only rn50-tf32-bs256,bert128-bf16-bs256    # ~4-6 min
#   OUT=/path/to/out bash benchmarks/gpu_table.sh --part gpt    # ~6 min on one H200
#   ... --with cuda_graphs=false                                # and each row without graphs
# An H100 takes longer (ResNet50 amp_bf16 alone ~7.5 min; the GPT's max_autotune compile does
# not fit beside the default repeats): split its GPT part, one call each:
#   ... --part gpt --only gpt-mb16-default                      # ~3 min on one H100
#   ... --part gpt --only gpt-mb16-autotune
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh gpu_table_out
exec python3 benchmarks/gpu_table.py --out "$OUT" "$@"
