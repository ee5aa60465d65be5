#!/bin/bash

# Parameters
#SBATCH --account=my-project
#SBATCH --array=0-0
#SBATCH --gres=gpu:4
#SBATCH --job-name=resnet50-torch-amp_bf16-2n4g-bs32
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --open-mode=append
#SBATCH --output=@RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32/slurm-%A_%a.out
#SBATCH --partition=gpu
#SBATCH --requeue
#SBATCH --time=60

# command
# trainbench case resnet50-torch-amp_bf16-2n4g-bs32: sbatch submission.sh runs its repeats into r<k>/ beside it
# (finished repeats are skipped, never overwritten); sbatch --array=K adds repeat K;
# inside an allocation: bash submission.sh "0 2" runs repeats 0 and 2.
REPEATS="${1:-${SLURM_ARRAY_TASK_ID:-0}}"
export PYTHONPATH=@PROJECT_ROOT@${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
export SLURM_PMIX_FENCE=ring
export TORCHINDUCTOR_CACHE_DIR=@RESULTS@/compile-cache
export TORCHINDUCTOR_FX_GRAPH_CACHE=1
export TORCHINDUCTOR_AUTOGRAD_CACHE=1
export TRAINBENCH_CONTAINER_RUNTIME=apptainer
export TRAINBENCH_CONTAINER_IMAGE=/shared/images/pytorch-24.05.sif
CASE_DIR=@RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32
TERMINATED=
FAILED=
trap 'TERMINATED=--terminated' TERM
PREFLIGHT=$(@PYTHON@ -m toolkit.preflight begin "$CASE_DIR") || exit $?
(timeout --kill-after=30 600 srun --mpi=pmix --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 --unbuffered apptainer exec --nv --bind=@PROJECT_ROOT@:@PROJECT_ROOT@:ro,@RESULTS@:@RESULTS@,/scratch:/scratch --pwd="$PREFLIGHT" /shared/images/pytorch-24.05.sif python3 -m toolkit.preflight rank --dir "$PREFLIGHT") > "$PREFLIGHT/output.log" 2>&1
@PYTHON@ -m toolkit.preflight verdict "$PREFLIGHT" --on-fail warn || { rc=$?; [ "$rc" -eq 7 ] || exit "$rc"; }
for REPEAT in $REPEATS; do
  if [ -n "$TERMINATED" ]; then break; fi
  CLAIM=$(@PYTHON@ -m toolkit.runstate begin "$CASE_DIR" "$REPEAT" --pid $$)
  rc=$?
  if [ $rc -eq 3 ]; then continue; elif [ $rc -eq 4 ]; then FAILED=1; continue; elif [ $rc -ne 0 ]; then exit $rc; fi
  RUN_DIR="$CASE_DIR/r$REPEAT"
  rc=0
  (cd "$RUN_DIR" && exec srun --mpi=pmix --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 --unbuffered apptainer exec --nv --bind=@PROJECT_ROOT@:@PROJECT_ROOT@:ro,@RESULTS@:@RESULTS@,/scratch:/scratch --pwd="$RUN_DIR" /shared/images/pytorch-24.05.sif python3 -m toolkit.worker @RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32/case.json --run-dir "$RUN_DIR" --repeat "$REPEAT") > "$RUN_DIR/output.log" 2>&1 || rc=$?
  ENDED_AS="$TERMINATED"
  (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor slurm $ENDED_AS) || FAILED=1
  if [ "$TERMINATED" != "$ENDED_AS" ] && [ "$rc" -ne 0 ]; then (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor slurm $TERMINATED) || FAILED=1; fi
done
if [ -n "$TERMINATED" ]; then exit 143; fi
exit "${FAILED:-0}"
