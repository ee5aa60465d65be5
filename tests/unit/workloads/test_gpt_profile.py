"""The GPT profile's kernel classification and summary, on a Chrome trace in the profiler's
export format (kernel names as cuBLAS, flash attention, NCCL, fused AdamW and Inductor name
them)."""

from __future__ import annotations

from toolkit.workloads.pytorch.gpt_profile import render, summarize_trace

TRACE = {"traceEvents": [
    {"ph": "X", "cat": "kernel", "ts": 0,
     "name": "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "dur": 6000},
    {"ph": "X", "cat": "kernel", "ts": 6000,
     "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "dur": 4000},
    {"ph": "X", "cat": "kernel", "ts": 10000,
     "name": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128>>", "dur": 2000},
    {"ph": "X", "cat": "kernel", "ts": 12000,
     "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "dur": 1000},
    {"ph": "X", "cat": "kernel", "ts": 13000,
     "name": "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
     "dur": 500},
    {"ph": "X", "cat": "kernel", "ts": 13500,
     "name": "triton_per_fused_native_layer_norm_0", "dur": 400},
    {"ph": "X", "cat": "kernel", "ts": 13900,
     "name": "void at::native::vectorized_elementwise_kernel",
     "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 99999},  # host op: not GPU time
]}


def test_summary_per_step_and_idle_time():
    by_kind, top = summarize_trace(TRACE, steps=2, step_ms=10.0)
    assert {k: v for k, v in by_kind.items() if v} == {
        "GEMM/conv": 5.0, "attention": 1.0, "communication": 0.5, "optimizer": 0.25,
        "norm/elementwise": 0.25, "idle": 10.0 - 7.0,  # 14 ms of kernels back to back
        "exposed communication": 0.5}  # back to back: nothing ran beside the all-reduce
    assert top[0] == ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", 3.0)
    text = render(by_kind, top, step_ms=10.0, title="t")
    assert "| GEMM/conv | 5.0 | 50.0 |" in text
    assert "| idle (no kernel running) | 3.0 | 30.0 |" in text
