#!/bin/bash
# GPT with data, tensor and pipeline parallelism on the 2 x H200 machine, through the toolkit's
# local executor. The whole grid takes ~15 minutes (the max_autotune cases ~3 each), more than
# one device call: split it with ONLY (below), as docs/BENCHMARKS.md's commands do.
#   1. benchmarks/gpt_h200.yaml (h 1536, 16 layers, seq 2048, bf16, compiled): 1 GPU at
#      micro-batch 8, 2 x 8 and 16, tp = 2, pp = 2 and dp = 2 at the same global batch of 16,
#      pp = 2 and 1 GPU at global batches of 64 and 128, 1 GPU eager and with max_autotune;
#      prints the GPT table (TFLOP/s per GPU and % of peak by Megatron's 72-formula) and the
#      per-GPU TFLOP/s of each 2-GPU case against the 1-GPU case of its global batch;
#   2. the sharding check on the GPUs (NCCL): a tiny GPT with tp = 2, pp = 2 and dp = 2 must
#      give the single-GPU losses of its first steps;
#   3. while time is left, a profile of the 1-GPU and the tp = 2 step (GPU time by kernel kind).
# Usage (repository root, results under $OUT):
#   OUT=/some/dir bash benchmarks/gpu_gpt.sh
# Writes $OUT/gpt_h200/ (the toolkit's results directory: runs.csv, gpt_table.md, logs),
# $OUT/gpt_check*.json and $OUT/gpt_profile_*.md.
# GRID=<a grid with the same case names> DEVICE=cpu runs the same steps as a CPU smoke test.
# ONLY="PATTERN ..." runs only the matching cases (submit --only); PROFILES="1:CASE 2:CASE"
# names the profiled cases (GPUs:case id; "" for none).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to a directory for the results}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
MPIRUN=(mpirun --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
RES="$OUT/gpt_h200"
GRID=${GRID:-benchmarks/gpt_h200.yaml}
DEVICE=${DEVICE:-cuda}
BUDGET_S=${BUDGET_S:-450}   # start no profile after this many seconds

nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv,noheader \
    || echo "(no nvidia-smi)"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

echo "== 1. benchmark grid (each case: start, compile, 10 warm-up + 20 measured steps)"
ONLY_ARGS=()
for pattern in ${ONLY:-}; do ONLY_ARGS+=(--only "$pattern"); done
$PY -m toolkit.submit --grid "$GRID" --results "$RES" "${ONLY_ARGS[@]}" \
    || echo "(some cases failed: see below)"
$PY -m toolkit.collect "$RES" --quiet
$PY -m toolkit.gpt_table "$RES"
$PY - "$RES/gpt_table.csv" <<'EOF'
import csv, sys
rows = {r["case"]: r for r in csv.DictReader(open(sys.argv[1]))}
pairs = [("MP_1x2x1_16_1536x16", "DP_1x1x1_16_1536x16"),
         ("PP_1x1x2_16_1536x16", "DP_1x1x1_16_1536x16"),
         ("DP_2x1x1_16_1536x16", "DP_1x1x1_16_1536x16"),
         ("PP_1x1x2_64_1536x16", "DP_1x1x1_64_1536x16"),
         ("PP_1x1x2_64_1536x16-mb4", "DP_1x1x1_64_1536x16"),
         ("PP_1x1x2_128_1536x16", "DP_1x1x1_128_1536x16")]
print("per-GPU TFLOP/s of the 2-GPU cases against 1 GPU at the same global batch:")
for case, ref in pairs:
    got, base = (rows.get(c, {}).get("tflops_per_gpu") for c in (case, ref))
    if base and got:
        print(f"  {case}: {float(got):.1f} vs {ref} {float(base):.1f} -> "
              f"{100 * (float(got) / float(base) - 1):+.1f}%")
    else:
        print(f"  {case} vs {ref}: missing")
EOF
for log in "$RES"/cases/*/r*/output.log; do
    if grep -q "Traceback\|Error" "$log"; then echo "-- failed run, end of $log:"; tail -25 "$log"; fi
done
echo "elapsed ${SECONDS}s"

echo "== 2. sharding check on the GPUs (NCCL): losses of the first 3 steps"
$PY -m toolkit.workloads.pytorch.gpt_check --device "$DEVICE" --layout 1x1x1 \
    --out "$OUT/gpt_check_1gpu.json" > /dev/null
"${MPIRUN[@]}" -np 2 $PY -m toolkit.workloads.pytorch.gpt_check --device "$DEVICE" \
    --layout 1x2x1 --layout 1x1x2 --layout 1x1x2:gpipe --layout 2x1x1 --layout 2x1x1:fsdp \
    --out "$OUT/gpt_check_2gpu.json" > /dev/null
$PY - "$OUT/gpt_check_1gpu.json" "$OUT/gpt_check_2gpu.json" <<'EOF'
import json, sys
ref = json.load(open(sys.argv[1]))["1x1x1"]
print(f"  1x1x1 (reference): {ref}")
for layout, losses in json.load(open(sys.argv[2])).items():
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
    print(f"  {layout}: {losses}  max rel. diff {worst:.1e} "
          f"{'ok' if worst < 1e-4 else 'DIFFERENT'}")
EOF
echo "elapsed ${SECONDS}s"

echo "== 3. profiles (rank 0, 5 steps after warm-up)"
for spec in ${PROFILES-1:DP_1x1x1_16_1536x16 2:MP_1x2x1_16_1536x16}; do
    n=${spec%%:*}; case=${spec#*:}
    if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "skipped $case: time budget"; continue; fi
    "${MPIRUN[@]}" -np "$n" $PY -m toolkit.workloads.pytorch.gpt_profile \
        --grid "$GRID" --case "$case" --out "$OUT/gpt_profile_$case.md" \
        2>&1 | grep -v "^\(USDT\|ERROR\|STAGE\|W[0-9]\)" || echo "profile of $case failed"
done
echo "total ${SECONDS}s"
