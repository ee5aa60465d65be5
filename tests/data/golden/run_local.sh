#!/bin/bash
# Re-run one repeat of this case on this machine (local executor):
#   bash run_local.sh [REPEAT]    (default 0; writes r<REPEAT>/ beside it;
#   a finished repeat is never overwritten: pick a new number)
set -uo pipefail
REPEAT="${1:-0}"
export PYTHONPATH=@PROJECT_ROOT@${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1
export OMP_NUM_THREADS=4
export TORCHINDUCTOR_CACHE_DIR="$(dirname -- "$(dirname -- "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)")")/compile-cache"
export TORCHINDUCTOR_FX_GRAPH_CACHE=1
export TORCHINDUCTOR_AUTOGRAD_CACHE=1
export NCCL_DEBUG=WARN
export QUOTED='it'"'"'s a $HOME'
CASE_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
TERMINATED=
FAILED=
trap 'TERMINATED=--terminated' TERM
for REPEAT in $REPEAT; do
  if [ -n "$TERMINATED" ]; then break; fi
  CLAIM=$(@PYTHON@ -m toolkit.runstate begin "$CASE_DIR" "$REPEAT" --pid $$)
  rc=$?
  if [ $rc -eq 3 ]; then continue; elif [ $rc -eq 4 ]; then FAILED=1; continue; elif [ $rc -ne 0 ]; then exit $rc; fi
  RUN_DIR="$CASE_DIR/r$REPEAT"
  rc=0
  (cd "$RUN_DIR" && exec /usr/bin/mpirun -np 1 --bind-to none --allow-run-as-root @PYTHON@ -m toolkit.worker "$CASE_DIR"/case.json --run-dir "$RUN_DIR" --repeat "$REPEAT") 2>&1 | tee "$RUN_DIR/output.log" || rc=$?
  ENDED_AS="$TERMINATED"
  (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor local $ENDED_AS) || FAILED=1
  if [ "$TERMINATED" != "$ENDED_AS" ] && [ "$rc" -ne 0 ]; then (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor local $TERMINATED) || FAILED=1; fi
done
if [ -n "$TERMINATED" ]; then exit 143; fi
exit "${FAILED:-0}"
