#!/usr/bin/env bash
# A user's own ResNet50 script (`model: command`) beside the built-in ResNet50 on one GPU:
# benchmarks/gpu_own_script.yaml, compiled and eager, one run each, then collect. About 5
# minutes on one H100 (two cold torch.compile runs). Run from the repository root:
#
#   OUT=/path/to/out bash benchmarks/gpu_own_script.sh [submit options, e.g. --only 'rn50-*-eager']
#
# Writes under $OUT (default ./gpu_own_script_out): runs.csv, summary.csv, report.md (copied up
# from results/), versions.txt, and results/ with every run's rank events and program logs.
set -euo pipefail
cd "$(dirname "$0")/.."
source benchmarks/_gpu_env.sh gpu_own_script_out
rc=0
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
exit "$rc"
