# Sourced by the GPU benchmark scripts (gpu_table.sh, gpu_variants.sh, gpu_scaling.sh): the repository on
# PYTHONPATH, NVLink multicast off, OUT made, and the machine and software versions appended to
# $OUT/versions.txt. Expects to be sourced from the repository root.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-$PWD/${1:-gpu_out}}"
mkdir -p "$OUT"
{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  python3 -c 'import sys, torch, torchvision, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__, "transformers", transformers.__version__)' || echo "python3 without torch: versions not known"
} | tee -a "$OUT/versions.txt"
