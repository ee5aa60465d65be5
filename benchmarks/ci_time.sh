#!/bin/bash
# How long the test suite takes from a fresh clone, as CI runs it: clones this checkout's REV
# (default HEAD) into DIR (default /tmp/trainbench-ci), runs .ci/run there and prints its time.
# With LOAD=1 a load runs beside it for its whole length: a busy loop, and a loop of
# `python -c 'import torch, numpy'` (the load under which ranks once died at MPI start).
# As root (the suite boots the local Slurm cluster); never beside another local cluster.
#
#   bash benchmarks/ci_time.sh              # idle
#   LOAD=1 bash benchmarks/ci_time.sh HEAD /tmp/ci-load
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-HEAD}
dir=${2:-/tmp/trainbench-ci}
commit=$(git -C "$here" rev-parse "$rev") || exit 2
rm -rf "$dir" && git clone -q "$here" "$dir" && git -C "$dir" checkout -q "$commit" || exit 2
echo "ci_time: $(git -C "$dir" log --oneline -1) in $dir, load ${LOAD:-0}"
load_pids=()
if [ "${LOAD:-0}" = 1 ]; then
  ( while :; do :; done ) & load_pids+=($!)
  ( while :; do "$here/.venv/bin/python" -c 'import torch, numpy' >/dev/null 2>&1; sleep 1
    done ) & load_pids+=($!)
fi
start=$SECONDS
(cd "$dir" && .ci/run); rc=$?
took=$((SECONDS - start))
for pid in "${load_pids[@]}"; do pkill -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
echo "ci_time: .ci/run exit $rc after ${took} s ($((took / 60)) min $((took % 60)) s)"
exit $rc
