#!/usr/bin/env bash
# Warm starts through toolkit.submit with and without the grid's Python bytecode cache, in one
# device call (see benchmarks/startup_grid.py). Run from anywhere:
#
#   OUT=/path/to/out bash benchmarks/startup_grid.sh     # ~7 min on one H100
#   OUT=/path/to/out bash benchmarks/startup_grid.sh --part worker   # needs py-spy on PATH
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh startup_grid_out
python3 -c 'import os, sys, torch, importlib.util as u; d = os.path.dirname(torch.__file__); print("torch bytecode beside its source:", os.path.exists(u.cache_from_source(torch.__file__)), "| torch dir writable:", os.access(d, os.W_OK), "| sys.dont_write_bytecode:", sys.dont_write_bytecode)' | tee -a "$OUT/versions.txt"
exec python3 benchmarks/startup_grid.py --out "$OUT" "$@"
