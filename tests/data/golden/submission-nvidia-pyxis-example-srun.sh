#!/bin/bash

# Parameters
#SBATCH --account=my-project
#SBATCH --array=0-0
#SBATCH --constraint=h100
#SBATCH --exclusive
#SBATCH --gpus-per-node=4
#SBATCH --job-name=resnet50-torch-amp_bf16-2n4g-bs32
#SBATCH --mem=0
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --open-mode=append
#SBATCH --output=@RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32/slurm-%A_%a.out
#SBATCH --partition=batch
#SBATCH --qos=normal
#SBATCH --requeue
#SBATCH --time=60

# command
# trainbench case resnet50-torch-amp_bf16-2n4g-bs32: sbatch submission.sh runs its repeats into r<k>/ beside it
# (finished repeats are skipped, never overwritten); sbatch --array=K adds repeat K;
# inside an allocation: bash submission.sh "0 2" runs repeats 0 and 2.
REPEATS="${1:-${SLURM_ARRAY_TASK_ID:-0}}"
if ! command -v module >/dev/null 2>&1; then echo 'site dgx-example: cannot load modules nccl/2.21: the job'"'"'s shell has no module command' >&2; exit 2; fi
module load nccl/2.21 || exit $?
export PYTHONPATH=@PROJECT_ROOT@${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1
export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
export SLURM_PMIX_FENCE=ring
export TORCHINDUCTOR_CACHE_DIR=@RESULTS@/compile-cache
export TORCHINDUCTOR_FX_GRAPH_CACHE=1
export TORCHINDUCTOR_AUTOGRAD_CACHE=1
export TRAINBENCH_CONTAINER_RUNTIME=pyxis
export TRAINBENCH_CONTAINER_IMAGE='nvcr.io#nvidia/pytorch:24.05-py3'
export NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9
export NCCL_NVLS_ENABLE=0
export NCCL_SOCKET_IFNAME==bond0
export UCX_TLS=rc,sm,self
CASE_DIR=@RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32
TERMINATED=
FAILED=
trap 'TERMINATED=--terminated' TERM
PREFLIGHT=$(@PYTHON@ -m toolkit.preflight begin "$CASE_DIR") || exit $?
(timeout --kill-after=30 600 srun --mpi=pmix --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 --unbuffered '--container-image=nvcr.io#nvidia/pytorch:24.05-py3' --container-mounts=@PROJECT_ROOT@:@PROJECT_ROOT@:ro,@RESULTS@:@RESULTS@,/shared/datasets:/datasets:ro --container-workdir="$PREFLIGHT" --container-env=NCCL_IB_HCA,NCCL_SOCKET_IFNAME --no-container-mount-home python -m toolkit.preflight rank --dir "$PREFLIGHT") > "$PREFLIGHT/output.log" 2>&1
@PYTHON@ -m toolkit.preflight verdict "$PREFLIGHT" --on-fail warn || { rc=$?; [ "$rc" -eq 7 ] || exit "$rc"; }
for REPEAT in $REPEATS; do
  if [ -n "$TERMINATED" ]; then break; fi
  CLAIM=$(@PYTHON@ -m toolkit.runstate begin "$CASE_DIR" "$REPEAT" --pid $$)
  rc=$?
  if [ $rc -eq 3 ]; then continue; elif [ $rc -eq 4 ]; then FAILED=1; continue; elif [ $rc -ne 0 ]; then exit $rc; fi
  RUN_DIR="$CASE_DIR/r$REPEAT"
  rc=0
  (cd "$RUN_DIR" && exec srun --mpi=pmix --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 --unbuffered '--container-image=nvcr.io#nvidia/pytorch:24.05-py3' --container-mounts=@PROJECT_ROOT@:@PROJECT_ROOT@:ro,@RESULTS@:@RESULTS@,/shared/datasets:/datasets:ro --container-workdir="$RUN_DIR" --container-env=NCCL_IB_HCA,NCCL_SOCKET_IFNAME --no-container-mount-home python -m toolkit.worker @RESULTS@/cases/resnet50-torch-amp_bf16-2n4g-bs32/case.json --run-dir "$RUN_DIR" --repeat "$REPEAT") > "$RUN_DIR/output.log" 2>&1 || rc=$?
  ENDED_AS="$TERMINATED"
  (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor slurm $ENDED_AS) || FAILED=1
  if [ "$TERMINATED" != "$ENDED_AS" ] && [ "$rc" -ne 0 ]; then (trap '' TERM; exec @PYTHON@ -m toolkit.runstate end "$CASE_DIR" "$REPEAT" --claim "$CLAIM" --rc "$rc" --executor slurm $TERMINATED) || FAILED=1; fi
done
if [ -n "$TERMINATED" ]; then exit 143; fi
exit "${FAILED:-0}"
