#!/usr/bin/env bash
# The toolkit at its fastest expected settings on the GPU: ResNet50 amp_bf16 / tf32 / amp_fp16
# (dynamic and static loss scaling), BERT-base seq 128 amp_bf16, and the 2-GPU ResNet50 speedup
# when two GPUs are visible, with a table of TFLOP/s and MFU.
# About 8 minutes on one H200 or the 2 x H200 machine. Run from the repository root:
#
#   OUT=/path/to/out bash benchmarks/gpu_fast.sh [--budget-s 480] [--eager] [--no-profile]
#
# Writes under $OUT (default ./gpu_fast_out): table.md, gpu_fast.json, results/ (runs.csv,
# summary.csv, report.md, rank events), logs/. See benchmarks/gpu_fast.py for the cases.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh gpu_fast_out
exec python3 benchmarks/gpu_fast.py --out "$OUT" "$@"
