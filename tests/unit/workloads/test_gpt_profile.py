"""The GPT profile's kernel classification and summary, on a Chrome trace in the profiler's
export format (kernel names as cuBLAS, flash attention, NCCL, fused AdamW and Inductor name
them)."""

from __future__ import annotations

from toolkit.workloads.pytorch.gpt_profile import kernel_kind, render, summarize_trace

TRACE = {"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "dur": 6000},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "dur": 4000},
    {"ph": "X", "cat": "kernel",
     "name": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128>>", "dur": 2000},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "dur": 1000},
    {"ph": "X", "cat": "kernel",
     "name": "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
     "dur": 500},
    {"ph": "X", "cat": "kernel", "name": "triton_per_fused_native_layer_norm_0", "dur": 400},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel",
     "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 99999},  # host op: not GPU time
]}


def test_kernels_are_classified_by_kind():
    assert kernel_kind("nvjet_tst_192x192") == "gemm"
    assert kernel_kind("cutlass3x_sm90_tensorop_gemm") == "gemm"
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90") == "attention"
    assert kernel_kind("ncclDevKernel_SendRecv") == "nccl"
    assert kernel_kind("triton_poi_fused_add_0") == "triton (compiled)"
    assert kernel_kind("void at::native::elementwise_kernel") == "other"


def test_summary_per_step_and_idle_time():
    by_kind, top = summarize_trace(TRACE, steps=2)
    assert by_kind == {"gemm": 5.0, "attention": 1.0, "nccl": 0.5, "optimizer": 0.25,
                       "triton (compiled)": 0.2, "other": 0.05}
    assert top[0] == ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", 3.0)
    text = render(by_kind, top, step_ms=10.0, title="t")
    assert "| gemm | 5.0 | 50.0 |" in text
    assert "| (no kernel: idle or overlapped) | 3.0 | 30.0 |" in text
