#!/usr/bin/env bash
# One change at a time to the plain compiled scripts, each alone, side by side in one device
# call: see benchmarks/gpu_variants.py.
#
#   OUT=/path/to/out bash benchmarks/gpu_variants.sh --part resnet
#   OUT=/path/to/out bash benchmarks/gpu_variants.sh --part gpt
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh gpu_variants_out
exec python3 benchmarks/gpu_variants.py --out "$OUT" "$@"
