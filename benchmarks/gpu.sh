#!/usr/bin/env bash
# The GPU runner: every GPU measurement of benchmarks/README.md, one part a call, each from the
# repository root with the same environment (the repository on PYTHONPATH, NVLink multicast
# off, the machine and its software appended to $OUT/versions.txt by gpu_common.py).
#
#   OUT=/path/to/out bash benchmarks/gpu.sh PART [options of the part]
#
# Parts (each part's options: bash benchmarks/gpu.sh PART --help):
#   table         one GPU: the toolkit's defaults beside the plain compiled scripts
#                 (gpu_table.py: --part cnn | gpt, --only, --with KEY=VALUE)
#   scaling       1 -> N GPUs and the GPT layouts, beside plain scripts on 1 and N ranks
#                 (gpu_scaling.py: --part dp | gpt | matrix, --gpus N, --only, --with)
#   variants      one change at a time to a plain compiled script (gpu_variants.py:
#                 --part resnet | gpt)
#   own-script    a user's own ResNet50 script (`model: command`) beside the built-in one
#                 (gpu_own_script.yaml; options go to toolkit.submit, e.g. --only 'rn50-*-eager')
#   startup       where a compiled plain ResNet50's start-up goes, cold and warm
#                 (bare_resnet50.py; arguments: untuned | tuned | threads1, default untuned tuned)
#   startup-grid  warm starts through toolkit.submit, with and without the grid's bytecode
#                 cache (startup_grid.py: --part ...)
#   startup-profile  where a toolkit run's start-up goes, cProfile and -X importtime
#                 (startup_profile.py)
#   preflight     the preflight on one GPU beside plain GEMM and copy loops (preflight_gpu.py)
#   nodes         the GPUs as nodes of a local Slurm cluster, one network namespace a node:
#                 ResNet50 DDP across them through Slurm and --hosts, NCCL's transport between
#                 nodes, the preflight with a node and a link throttled (gpu_nodes.py: --nodes,
#                 --gpus-per-node, --share-gpus, --steps); first unpacks what .carry/ holds
#                 (benchmarks/carry.sh fills it here; the call carries it) with bring.sh
#
# $OUT defaults to ./gpu_out/PART. Which part answers which question, and where its figures
# are: benchmarks/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

part=${1:-}
[ $# -gt 0 ] && shift
case $part in
  table|scaling|variants|own-script|startup|startup-grid|startup-profile|preflight|nodes) ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; echo "gpu.sh: unknown part '$part'" >&2; exit 2 ;;
esac
for arg in "$@"; do  # a part's --help needs no GPU and writes nothing
  if [[ $arg == -h || $arg == --help ]]; then
    case $part in
      table) exec python3 benchmarks/gpu_table.py --help ;;
      scaling) exec python3 benchmarks/gpu_scaling.py --help ;;
      variants) exec python3 benchmarks/gpu_variants.py --help ;;
      startup-grid) exec python3 benchmarks/startup_grid.py --help ;;
      startup-profile) exec python3 benchmarks/startup_profile.py --help ;;
      preflight) exec python3 benchmarks/preflight_gpu.py --help ;;
      nodes) exec python3 benchmarks/gpu_nodes.py --help ;;
      *) usage; exit 0 ;;
    esac
  fi
done

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/gpu_out/$part}"
mkdir -p "$OUT"
if [ "$part" = nodes ]; then  # Slurm, munge, iproute2 and the wheels, from .carry/
  export PREFIX="${PREFIX:-/opt/trainbench-carry}"
  bash benchmarks/bring.sh | tee "$OUT/brought.txt"
  # shellcheck source=/dev/null
  source "$PREFIX/env.sh"
fi
python3 benchmarks/gpu_common.py --versions "$OUT"

own_script() {  # a user's own ResNet50 script beside the built-in one, then collect
  local rc=0
  python3 -m toolkit.submit --grid benchmarks/gpu_own_script.yaml --results "$OUT/results" "$@" \
    || rc=$?
  python3 -m toolkit.collect "$OUT/results" --no-store --no-plots --quiet || rc=$?
  for f in runs.csv summary.csv report.md; do
    if [ -f "$OUT/results/$f" ]; then cp "$OUT/results/$f" "$OUT/$f"; fi
  done
  python3 - "$OUT/runs.csv" <<'PY' || true
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(f"{r['case_id']:24} {r['status']:10} {r['throughput_sps'] or '-':>12} samples/s "
          f"{r.get('measured_by') or 'built-in':22} {r.get('method', '')} {r['error'][:160]}")
PY
  return "$rc"
}

startup_run() {  # name cache timeout_s env... -- args...: one bare_resnet50.py run, a JSON line
  local name=$1 cache=$2 limit=$3; shift 3
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS rc=0
  env TORCHINDUCTOR_CACHE_DIR="$CACHES/$cache" "${envs[@]}" \
    timeout "$limit" python3 benchmarks/bare_resnet50.py --compile --batch-size 256 \
    --precision amp_bf16 "$@" >"$OUT/logs/$name.log" 2>&1 || rc=$?
  local line
  line=$(grep '^{"bare_throughput_sps"' "$OUT/logs/$name.log" | tail -1 || true)
  python3 - "$name" "$((SECONDS - t0))" "$rc" "${line:-null}" >>"$OUT/startup.jsonl" <<'PY'
import json, sys
name, wall, rc, line = sys.argv[1:]
print(json.dumps({"run": name, "wall_s": int(wall), "rc": int(rc), **(json.loads(line) or {})}))
PY
  tail -1 "$OUT/startup.jsonl"
}

startup() {  # the plain script over one Inductor cache, cold and warm: $OUT/startup.jsonl
  # untuned:  cold, warm, warm without cuDNN's algorithm timing (and its throughput beside)
  # tuned:    cold, warm, warm again with one compile thread (coordinate-descent tuning)
  # threads1: tuned cold and warm, both with one compile thread
  CACHES="${TMPDIR:-/tmp}/startup_cache.$$"
  mkdir -p "$OUT/logs" "$CACHES"
  trap 'rm -rf "$CACHES"' EXIT
  export PYTHONPATH="$PWD/benchmarks:$PYTHONPATH"
  local t1=TORCHINDUCTOR_COMPILE_THREADS=1 p
  for p in ${*:-untuned tuned}; do
    case $p in
      untuned)
        startup_run untuned-cold U 240 -- --warmup 5 --iters 30
        startup_run untuned-warm U 120 -- --warmup 20 --iters 100
        startup_run untuned-warm-no-cudnn-benchmark U 120 -- --warmup 20 --iters 100 \
          --no-cudnn-benchmark
        ;;
      tuned)
        startup_run tuned-cold T 330 -- --warmup 5 --iters 30 --coordinate-descent
        startup_run tuned-warm T 150 -- --warmup 5 --iters 30 --coordinate-descent
        startup_run tuned-warm-threads1 T 150 "$t1" -- --warmup 5 --iters 30 --coordinate-descent
        ;;
      threads1)
        startup_run tuned-cold-threads1 T1 400 "$t1" -- --warmup 5 --iters 30 --coordinate-descent
        startup_run tuned-warm-threads1 T1 150 "$t1" -- --warmup 5 --iters 30 --coordinate-descent
        ;;
      *) echo "gpu.sh startup: unknown run set '$p' (untuned, tuned, threads1)" >&2; exit 2 ;;
    esac
  done
}

case $part in
  table) exec python3 benchmarks/gpu_table.py --out "$OUT" "$@" ;;
  scaling) exec python3 benchmarks/gpu_scaling.py --out "$OUT" "$@" ;;
  variants) exec python3 benchmarks/gpu_variants.py --out "$OUT" "$@" ;;
  own-script) own_script "$@" ;;
  startup) startup "$@" ;;
  startup-grid)
    python3 -c 'import os, sys, torch, importlib.util as u; d = os.path.dirname(torch.__file__); print("torch bytecode beside its source:", os.path.exists(u.cache_from_source(torch.__file__)), "| torch dir writable:", os.access(d, os.W_OK), "| sys.dont_write_bytecode:", sys.dont_write_bytecode)' | tee -a "$OUT/versions.txt"
    exec python3 benchmarks/startup_grid.py --out "$OUT" "$@" ;;
  startup-profile) exec python3 benchmarks/startup_profile.py --out "$OUT" "$@" ;;
  preflight) exec python3 benchmarks/preflight_gpu.py --out "$OUT" "$@" ;;
  nodes) exec python3 benchmarks/gpu_nodes.py --out "$OUT" "$@" ;;
esac
