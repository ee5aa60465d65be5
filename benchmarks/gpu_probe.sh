#!/bin/bash
# Where the remaining gaps to the fast-settings targets come from, with the bare scripts
# (nothing of the toolkit) on the 2 x H200 machine, in about 6 minutes:
#   1. the 2-GPU ResNet50 speedup (amp_bf16, bs 256, compiled): one GPU alone, then two
#      independent one-GPU runs at once (GPU 0 and GPU 1, no communication at all), then DDP over
#      two ranks, then the two independent runs and the one GPU again (drift check). If the two
#      independent runs already lose what DDP loses, it is the machine running two GPUs (power,
#      clocks, host), not the all-reduce, that costs the speedup;
#   2. profiles (every rank, after the measured window): the 1-GPU and the 2-rank DDP step, then
#      ResNet50 tf32 bs 256 and BERT-base seq 128 bs 256 on one GPU; BERT beside the same
#      script with transformers' own "sdpa" attention (--sdpa-mask) on the other GPU.
# Usage (repository root, results under $OUT): OUT=/some/dir bash benchmarks/gpu_probe.sh
# Writes $OUT/probe.jsonl (one line per run) and $OUT/logs/*.log; prints a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to a directory for the results}"
mkdir -p "$OUT/logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
PY=${PYTHON:-python3}
MPIRUN=(mpirun --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
ITERS=${ITERS:-200}
RN50=(benchmarks/bare_resnet50.py --compile --precision amp_bf16 --batch-size 256
      --warmup 30 --iters "$ITERS")
: > "$OUT/probe.jsonl"

nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv,noheader \
    || echo "(no nvidia-smi)"

record() {  # record LABEL LOG: the bare script's JSON line, labelled, into probe.jsonl
    local line
    line=$(grep -m1 '^{"bare_throughput_sps"' "$2") || { echo "$1: no result (see $2)"; return; }
    echo "{\"label\": \"$1\", \"result\": $line}" >> "$OUT/probe.jsonl"
    echo "$1: $line"
}

one() {  # one LABEL GPU ARGS...: a one-GPU run on GPU number GPU
    local label=$1 gpu=$2; shift 2
    CUDA_VISIBLE_DEVICES=$gpu "${MPIRUN[@]}" -np 1 $PY "$@" > "$OUT/logs/$label.log" 2>&1
    record "$label" "$OUT/logs/$label.log"
}

pair() {  # pair LABEL: two independent one-GPU runs at once, GPU 0 and GPU 1
    CUDA_VISIBLE_DEVICES=0 "${MPIRUN[@]}" -np 1 $PY "${RN50[@]}" > "$OUT/logs/$1-gpu0.log" 2>&1 &
    CUDA_VISIBLE_DEVICES=1 "${MPIRUN[@]}" -np 1 $PY "${RN50[@]}" > "$OUT/logs/$1-gpu1.log" 2>&1 &
    wait
    record "$1-gpu0" "$OUT/logs/$1-gpu0.log"
    record "$1-gpu1" "$OUT/logs/$1-gpu1.log"
}

echo "== 1. ResNet50 amp_bf16 bs 256, compiled ($ITERS measured iterations per run)"
one rn50-1gpu-warm 0 "${RN50[@]}"            # compiles; fills the caches for what follows
one rn50-1gpu-a 0 "${RN50[@]}" --profile 10
pair rn50-2x1gpu-a
"${MPIRUN[@]}" -np 2 $PY "${RN50[@]}" --profile 10 > "$OUT/logs/rn50-ddp2.log" 2>&1
record rn50-ddp2 "$OUT/logs/rn50-ddp2.log"
pair rn50-2x1gpu-b
one rn50-1gpu-b 0 "${RN50[@]}"
echo "elapsed ${SECONDS}s"

echo "== 2. one-GPU profiles: ResNet50 tf32 bs 256, BERT-base seq 128 amp_bf16 bs 256"
one rn50-tf32-1gpu 0 benchmarks/bare_resnet50.py --compile --precision tf32 --batch-size 256 \
    --warmup 30 --iters 100 --profile 10
# BERT: attention without a mask (flash kernel; the default, as the toolkit's) on GPU 0 beside
# transformers' own "sdpa" (an all-True mask under torch.compile: math path) on GPU 1
BERT=(benchmarks/bare_bert.py --compile --precision amp_bf16 --batch-size 256 --warmup 30
      --iters 100)
CUDA_VISIBLE_DEVICES=0 "${MPIRUN[@]}" -np 1 $PY "${BERT[@]}" --profile 10 \
    > "$OUT/logs/bert128-1gpu.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 "${MPIRUN[@]}" -np 1 $PY "${BERT[@]}" --sdpa-mask \
    > "$OUT/logs/bert128-1gpu-sdpa-mask.log" 2>&1 &
wait
record bert128-1gpu "$OUT/logs/bert128-1gpu.log"
record bert128-1gpu-sdpa-mask "$OUT/logs/bert128-1gpu-sdpa-mask.log"
echo "elapsed ${SECONDS}s"

echo "== summary"
$PY - "$OUT/probe.jsonl" <<'EOF'
import json, sys
runs = {}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    runs[rec["label"]] = rec["result"]["bare_throughput_sps"] / rec["result"]["world"]
one = [runs[k] for k in ("rn50-1gpu-a", "rn50-1gpu-b") if k in runs]
if one:
    base = sum(one) / len(one)
    print(f"1 GPU alone: {', '.join(f'{v:,.0f}' for v in one)} img/s (mean {base:,.0f})")
    for label in ("rn50-2x1gpu-a", "rn50-2x1gpu-b"):
        both = [runs.get(f"{label}-gpu{g}") for g in (0, 1)]
        if all(both):
            print(f"{label}: GPU0 {both[0]:,.0f}, GPU1 {both[1]:,.0f} img/s -> "
                  f"{sum(both) / base:.3f} x one GPU (no communication)")
    if "rn50-ddp2" in runs:
        print(f"DDP 2 ranks: {runs['rn50-ddp2']:,.0f} img/s per GPU -> speedup "
              f"{2 * runs['rn50-ddp2'] / base:.3f}")
for k in ("rn50-tf32-1gpu", "bert128-1gpu", "bert128-1gpu-sdpa-mask"):
    if k in runs:
        print(f"{k}: {runs[k]:,.0f} samples/s")
EOF
for log in "$OUT"/logs/*.log; do
    grep -q "Traceback" "$log" && { echo "-- failed: $log"; tail -20 "$log"; }
done
echo "== profiles"
for label in rn50-1gpu-a rn50-ddp2 rn50-tf32-1gpu bert128-1gpu; do
    echo "--- $label"; sed -n '/^-- rank/,$p' "$OUT/logs/$label.log"
done
echo "total ${SECONDS}s"
