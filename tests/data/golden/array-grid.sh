#!/bin/bash

# Parameters
#SBATCH --account=bench
#SBATCH --array=0-1
#SBATCH --comment='nightly run'
#SBATCH --cpus-per-task=4
#SBATCH --exclusive
#SBATCH --job-name=golden
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output=@RESULTS@/slurm/slurm-%A_%a.out
#SBATCH --partition=gpu
#SBATCH --requeue
#SBATCH --time=30

# command
case "${SLURM_ARRAY_TASK_ID:?run this script with sbatch}" in
  0) exec bash @RESULTS@/cases/bert_base-torch-amp_bf16-1n1g-bs32/submission.sh 0 ;;
  1) exec bash @RESULTS@/cases/bert_base-torch-amp_bf16-1n1g-bs32/submission.sh 2 ;;
  *) echo "no task $SLURM_ARRAY_TASK_ID in this array" >&2; exit 2 ;;
esac
