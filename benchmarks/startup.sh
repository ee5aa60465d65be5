#!/usr/bin/env bash
# Where a compiled ResNet50's start-up goes, cold and warm, on one GPU: the plain script
# (bare_resnet50.py) run several times over the same Inductor cache, each run printing its
# import time, its time to the end of the first step, the first step alone, and what
# torch.compile found in its caches and tuned (Dynamo's counters). One JSON line per run in
# $OUT/startup.jsonl, each run's log in $OUT/logs/.
#
#   OUT=/path/to/out bash benchmarks/startup.sh [tuned|untuned|threads1 ...]
#
# untuned:  cold, warm, warm without cuDNN's algorithm timing (and its throughput beside)
# tuned:    cold, warm, warm again with one compile thread (Inductor's coordinate-descent tuning)
# threads1: tuned cold and warm, both with one compile thread
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh startup_out
CACHES="${TMPDIR:-/tmp}/startup_cache.$$"
mkdir -p "$OUT/logs" "$CACHES"
trap 'rm -rf "$CACHES"' EXIT
export PYTHONPATH="$PWD/benchmarks:$PYTHONPATH"

one() {  # name cache timeout_s env... -- args...
  local name=$1 cache=$2 limit=$3; shift 3
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS rc=0
  env TORCHINDUCTOR_CACHE_DIR="$CACHES/$cache" "${envs[@]}" \
    timeout "$limit" python3 benchmarks/bare_resnet50.py --compile --batch-size 256 \
    --precision amp_bf16 "$@" >"$OUT/logs/$name.log" 2>&1 || rc=$?
  local line
  line=$(grep '^{"bare_throughput_sps"' "$OUT/logs/$name.log" | tail -1 || true)
  python3 - "$name" "$((SECONDS - t0))" "$rc" "${line:-null}" >>"$OUT/startup.jsonl" <<'EOF'
import json, sys
name, wall, rc, line = sys.argv[1:]
print(json.dumps({"run": name, "wall_s": int(wall), "rc": int(rc), **(json.loads(line) or {})}))
EOF
  tail -1 "$OUT/startup.jsonl"
}

for part in "${@:-untuned tuned}"; do
  for p in $part; do
    case $p in
      untuned)
        one untuned-cold U 240 -- --warmup 5 --iters 30
        one untuned-warm U 120 -- --warmup 20 --iters 100
        one untuned-warm-no-cudnn-benchmark U 120 -- --warmup 20 --iters 100 --no-cudnn-benchmark
        ;;
      tuned)
        one tuned-cold T 330 -- --warmup 5 --iters 30 --coordinate-descent
        one tuned-warm T 150 -- --warmup 5 --iters 30 --coordinate-descent
        one tuned-warm-threads1 T 150 TORCHINDUCTOR_COMPILE_THREADS=1 -- --warmup 5 --iters 30 \
          --coordinate-descent
        ;;
      threads1)
        one tuned-cold-threads1 T1 400 TORCHINDUCTOR_COMPILE_THREADS=1 -- --warmup 5 --iters 30 \
          --coordinate-descent
        one tuned-warm-threads1 T1 150 TORCHINDUCTOR_COMPILE_THREADS=1 -- --warmup 5 --iters 30 \
          --coordinate-descent
        ;;
      *) echo "startup.sh: unknown part '$p' (untuned, tuned, threads1)" >&2; exit 2 ;;
    esac
  done
done
