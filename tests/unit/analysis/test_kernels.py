"""Kernel time by kind, on kernel names as cuBLAS, cuDNN, flash attention, NCCL, the fused
optimizers and Inductor name them (names from the profiles in docs/BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from toolkit.analysis.kernels import (
    ATTENTION,
    CATEGORIES,
    COMMUNICATION,
    EXPOSED_COMMUNICATION,
    GEMM_CONV,
    IDLE,
    NORM_ELEMENTWISE,
    OPTIMIZER,
    OTHER,
    breakdown,
    busy_us,
    exposed_us,
    kernel_category,
    trace_kernels,
)


@pytest.mark.parametrize("name,kind", [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", GEMM_CONV),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", GEMM_CONV),
    ("cutlass3x_sm90_tensorop_gemm_bf16", GEMM_CONV),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", GEMM_CONV),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32", GEMM_CONV),
    ("triton_tem_fused_mm_0", GEMM_CONV),  # Inductor's matmul template (max_autotune)
    ("triton_mm_1290", GEMM_CONV),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", ATTENTION),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128>>", ATTENTION),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", COMMUNICATION),
    ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", OPTIMIZER),
    ("void at::native::(anonymous namespace)::fused_sgd_kernel", OPTIMIZER),
    # Inductor names a batch-norm backward reduction after the convolution it follows
    ("triton_red_fused__native_batch_norm_legit_functional_convolution_backward_12",
     NORM_ELEMENTWISE),
    ("triton_per_fused_native_layer_norm_0", NORM_ELEMENTWISE),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", NORM_ELEMENTWISE),
    ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", NORM_ELEMENTWISE),
    ("Memcpy HtoD (Pageable -> Device)", OTHER),
    # eager kernels' names hold their functor's `{lambda(...)}`: not LAMB, the optimizer (the
    # GPT's vocabulary-parallel loss, last stage of tp 2 x pp 2 on 4 H100s, printed cut at 130
    # characters; the reduction in full from the recorded profile in tests/data/profiles)
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::"
     "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
     "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::"
     "ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
     "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, "
     "4, 4>)", NORM_ELEMENTWISE),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda(at::"
     "TensorIteratorBase&)::{lambda()#2}::operator()()", NORM_ELEMENTWISE),  # as printed, cut
    ("void at::native::multi_tensor_apply_kernel<LambMathFunctor>", OPTIMIZER),
])
def test_kernels_fall_in_the_kind_their_name_says(name, kind):
    assert kernel_category(name) == kind


def test_overlapping_kernels_are_busy_once_and_idle_is_the_rest():
    kernels = [("nvjet_a", 0.0, 4000.0), ("ncclDevKernel_x", 1000.0, 2000.0),  # inside the GEMM
               ("triton_poi_fused_add_0", 5000.0, 1000.0), ("nvjet_b", 5500.0, 1000.0)]
    assert busy_us(kernels) == 5500.0  # 0-4000 and 5000-6500
    out = breakdown(kernels, steps=2, step_ms=4.0)
    assert set(out) == {*CATEGORIES, EXPOSED_COMMUNICATION, IDLE}
    assert out[GEMM_CONV] == 2.5 and out[COMMUNICATION] == 1.0 and out[NORM_ELEMENTWISE] == 0.5
    assert out[EXPOSED_COMMUNICATION] == 0.0  # the all-reduce ran inside the GEMM
    assert out[ATTENTION] == 0.0 and out[IDLE] == pytest.approx(4.0 - 2.75)
    assert IDLE not in breakdown(kernels, steps=2)
    with pytest.raises(ValueError, match="steps must be positive"):
        breakdown(kernels, steps=0)


def test_only_kernels_are_read_from_a_chrome_trace():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "nvjet_a", "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 99},
        {"ph": "X", "cat": "kernel", "name": "broken", "ts": 1},  # no duration
        "not an event"]}
    assert trace_kernels(trace) == [("nvjet_a", 10.0, 5.0)]


def test_exposed_communication_is_the_time_only_communication_ran():
    kernels = [("nvjet_a", 0.0, 1000.0), ("ncclDevKernel_AllReduce", 500.0, 2000.0),
               ("ncclDevKernel_AllReduce", 4000.0, 500.0), ("triton_poi_fused_0", 4100.0, 100.0)]
    # 1000-2500 and 4000-4100, 4200-4500 ran communication alone: 1500 + 100 + 300 us
    assert exposed_us(kernels) == 1900.0
    assert breakdown(kernels, steps=1)[EXPOSED_COMMUNICATION] == pytest.approx(1.9)
    assert exposed_us([("nvjet_a", 0.0, 10.0)]) == 0.0
