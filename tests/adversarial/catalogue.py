"""The adversarial corpus: every cheat and every honest kernel, by family and kernel type.

One explicit list per kind (no discovery magic): adding a case means adding its module and a
line here (a module of sized cases, ``CASES``, adds them all). ``TECHNIQUES`` is the issue's list
of cheat kinds the corpus must span; ``CPU_TECHNIQUES`` those that must also have a case that
runs without a GPU (CI).
"""

from __future__ import annotations

import sys
from types import ModuleType

from tests.adversarial.cheats import (
    escape_connect_listener,
    escape_kill_parent,
    escape_kill_scan,
    escape_loopback_admin,
    escape_read_other_jobs,
    escape_write_job_store,
    escape_write_project_tree,
    timing_beside_slowed,
    timing_cache_by_content,
    timing_cache_by_content_starved,
    timing_cache_by_pointer,
    timing_child_process_gpu,
    timing_content_cache_large,
    timing_ctypes_rewrite_samples,
    timing_deferred_to_sync,
    timing_forged_extra_figures,
    timing_forged_result_fd,
    timing_forged_result_file,
    timing_forged_timing_report,
    timing_inputs_polled,
    timing_inputs_watched,
    timing_lazy_tensor,
    timing_median_split,
    timing_message_arrival,
    timing_mode_gap,
    timing_mode_stack,
    timing_null_calls,
    timing_patched_event,
    timing_patched_perf_counter,
    timing_patched_server_stats,
    timing_patched_statistics,
    timing_predicted_inputs_get_inputs,
    timing_predicted_inputs_io,
    timing_predicted_inputs_throttled,
    timing_reading_again,
    timing_rebound_timer,
    timing_rebound_timer_throttled,
    timing_rewritten_replies,
    timing_second_cuda_context,
    timing_side_stream,
    timing_side_stream_cpp,
    timing_tamper_module_globals,
    timing_thread,
    timing_thread_between_samples,
    verdict_audit_rewrite_gc,
    verdict_frame_scavenge,
    verdict_gc_scavenge,
    verdict_inf_output,
    verdict_input_mutation,
    verdict_input_mutation_hidden,
    verdict_nan_output,
    verdict_patched_allclose,
    verdict_patched_le,
    verdict_patched_server_compare,
    verdict_reduced_precision_bf16,
    verdict_reduced_precision_fp16,
    verdict_reduced_precision_tf32,
    verdict_tolerance_loose_fp16,
    verdict_tolerance_zeros,
    verdict_uninitialized_memory,
)
from tests.adversarial.corpus import Cheat, Escape, Family, Honest
from tests.adversarial.honest import (
    cuda_add,
    cuda_evaluate_add,
    cuda_inout_scale,
    cuda_row_sum_shared,
    cuda_saxpy_large,
    multi_inout_accumulate,
    multi_returns_value,
    multi_streams_joined,
    multi_torch_ops,
    multi_triton_launch,
    torch_bf16_add,
    torch_conv2d_unfold,
    torch_cuda_add,
    torch_cuda_cublas_gemm,
    torch_cuda_relu_small,
    torch_cuda_streams_joined,
    torch_evaluate_relu,
    torch_fp16_matmul_fp32_accumulate,
    torch_function_name,
    torch_gelu_erf,
    torch_inout_inplace,
    torch_int_bitwise,
    torch_kernelbench_linear,
    torch_large_inputs,
    torch_layernorm_manual,
    torch_matmul_einsum,
    torch_microsecond_add,
    torch_multi_output,
    torch_relu_clamp,
    torch_silu_large,
    torch_softmax_manual,
    torch_streams_joined,
    torch_tiny_sum,
    triton_add,
    triton_axpy_scalar,
    triton_evaluate_add,
    triton_inout_scale,
    triton_matmul,
    triton_relu_large,
    triton_softmax_rows,
    triton_two_outputs,
)

TECHNIQUES: dict[Family, tuple[str, ...]] = {
    Family.TIMING: (
        "side_stream", "threads", "patched_timer", "patched_stats", "output_cache_pointer",
        "output_cache_content", "deferred_result", "forged_result", "timing_mode_detection",
        # issue 25: a kernel that owns its process and knows the harness's source
        "predicted_inputs", "content_cache_large", "tampered_timer_state", "tampered_audit_state",
        "hidden_context",
        # a kernel that reads the judge's own code: work started before the judge's clock
        "early_start",
        # issue 50: each tried at several sizes against an honest twin, with what must
        # become of it (fails, flagged, or bounded by the residual)
        "figures_rewritten", "message_arrival", "input_arrival", "median_mean_split",
        "forged_extra_figures", "readings_again",
        # the two sides timed in turn (a host-bound reference): the reference's samples slowed
        "other_side_slowed",
    ),
    Family.VERDICT: (
        "reference_scavenging", "patched_comparison", "input_mutation", "reduced_precision",
        "nan_inf_output", "uninitialized_memory", "tolerance_exploitation",
    ),
    Family.ESCAPE: (
        "kill_parent", "kill_scan", "write_project_tree", "write_job_store", "read_other_jobs",
        "loopback_server", "network",
    ),
}

CPU_TECHNIQUES = (
    "patched_timer", "patched_stats", "output_cache_pointer", "output_cache_content",
    "timing_mode_detection",
    "deferred_result", "forged_result", "reference_scavenging", "patched_comparison",
    "input_mutation", "reduced_precision", "nan_inf_output", "tolerance_exploitation",
    "predicted_inputs", "content_cache_large", "tampered_timer_state", "tampered_audit_state",
    "early_start", "figures_rewritten", "message_arrival", "input_arrival",
    "median_mean_split", "forged_extra_figures", "readings_again", *TECHNIQUES[Family.ESCAPE],
)

CHEATS: tuple[Cheat, ...] = (
    # timing
    timing_side_stream.CASE,
    timing_side_stream_cpp.CASE,
    timing_inputs_watched.CASE,
    timing_thread.CASE,
    timing_deferred_to_sync.CASE,
    timing_lazy_tensor.CASE,
    timing_mode_gap.CASE,
    timing_mode_stack.CASE,
    timing_patched_event.CASE,
    timing_patched_perf_counter.CASE,
    timing_patched_server_stats.CASE,
    timing_patched_statistics.CASE,
    timing_cache_by_pointer.CASE,
    timing_cache_by_content.CASE,
    timing_cache_by_content_starved.CASE,
    timing_forged_result_file.CASE,
    timing_forged_result_fd.CASE,
    timing_forged_timing_report.CASE,
    timing_predicted_inputs_io.CASE,
    timing_predicted_inputs_get_inputs.CASE,
    timing_predicted_inputs_throttled.CASE,
    timing_content_cache_large.CASE,
    timing_rebound_timer.CASE,
    timing_rebound_timer_throttled.CASE,
    timing_tamper_module_globals.CASE,
    timing_ctypes_rewrite_samples.CASE,
    timing_thread_between_samples.CASE,
    verdict_audit_rewrite_gc.CASE,
    timing_child_process_gpu.CASE,
    timing_second_cuda_context.CASE,
    # issue 50: sized, each with its expectation against an honest twin
    *timing_rewritten_replies.CASES,
    *timing_null_calls.CASES,
    *timing_message_arrival.CASES,
    *timing_inputs_polled.CASES,
    *timing_median_split.CASES,
    *timing_forged_extra_figures.CASES,
    *timing_reading_again.CASES,
    *timing_beside_slowed.CASES,
    # verdict
    verdict_gc_scavenge.CASE,
    verdict_frame_scavenge.CASE,
    verdict_patched_le.CASE,
    verdict_patched_allclose.CASE,
    verdict_patched_server_compare.CASE,
    verdict_input_mutation.CASE,
    verdict_input_mutation_hidden.CASE,
    verdict_reduced_precision_bf16.CASE,
    verdict_reduced_precision_fp16.CASE,
    verdict_reduced_precision_tf32.CASE,
    verdict_nan_output.CASE,
    verdict_inf_output.CASE,
    verdict_uninitialized_memory.CASE,
    verdict_tolerance_zeros.CASE,
    verdict_tolerance_loose_fp16.CASE,
)

ESCAPES: tuple[Escape, ...] = (
    escape_kill_parent.CASE,
    escape_kill_scan.CASE,
    escape_write_project_tree.CASE,
    escape_write_job_store.CASE,
    escape_read_other_jobs.CASE,
    escape_loopback_admin.CASE,
    escape_connect_listener.CASE,
)

HONEST: tuple[Honest, ...] = (
    # torch
    torch_relu_clamp.CASE,
    torch_tiny_sum.CASE,
    torch_matmul_einsum.CASE,
    torch_softmax_manual.CASE,
    torch_layernorm_manual.CASE,
    torch_gelu_erf.CASE,
    torch_conv2d_unfold.CASE,
    torch_inout_inplace.CASE,
    torch_kernelbench_linear.CASE,
    torch_function_name.CASE,
    torch_silu_large.CASE,
    torch_multi_output.CASE,
    torch_bf16_add.CASE,
    torch_fp16_matmul_fp32_accumulate.CASE,
    torch_int_bitwise.CASE,
    torch_evaluate_relu.CASE,
    torch_streams_joined.CASE,
    torch_large_inputs.CASE,
    torch_microsecond_add.CASE,
    # triton
    triton_add.CASE,
    triton_evaluate_add.CASE,
    triton_inout_scale.CASE,
    triton_softmax_rows.CASE,
    triton_matmul.CASE,
    triton_relu_large.CASE,
    triton_axpy_scalar.CASE,
    triton_two_outputs.CASE,
    # multi_kernel
    multi_torch_ops.CASE,
    multi_triton_launch.CASE,
    multi_returns_value.CASE,
    multi_inout_accumulate.CASE,
    multi_streams_joined.CASE,
    # cuda
    cuda_add.CASE,
    cuda_evaluate_add.CASE,
    cuda_inout_scale.CASE,
    cuda_row_sum_shared.CASE,
    cuda_saxpy_large.CASE,
    # torch_cuda
    torch_cuda_add.CASE,
    torch_cuda_cublas_gemm.CASE,
    torch_cuda_streams_joined.CASE,
    torch_cuda_relu_small.CASE,
)

KERNEL_TYPES = ("torch", "torch_cuda", "triton", "cuda", "multi_kernel")
HONEST_FEATURES = ("streams", "inout", "cublas", "small", "large")


def module_of(case: Cheat | Escape | Honest) -> ModuleType:
    """The module that defines ``case`` (its docstring says what it tries, what catches it)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("tests.adversarial."):
            continue
        if getattr(module, "CASE", None) is case or any(c is case for c in
                                                        getattr(module, "CASES", ())):
            return module
    raise LookupError(f"no module defines case {case.name}")
