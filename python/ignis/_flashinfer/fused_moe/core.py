"""flashinfer.fused_moe.core under the switch: the enums (``ActivationType``, ``RoutingMethodType``,
``WeightLayout``, ``Fp8QuantizationType``) and entry points of ignis.fused_moe, plus the weight
preparation helpers of FlashInfer's Blackwell kernels that engines import at load time
(``get_w2_permute_indices_with_cache``, ``_maybe_get_cached_w3_w1_permute_indices``,
``convert_to_block_layout``, ``reorder_rows_for_gated_act_gemm``, the SM90 mixed-GEMM
interleaves) and its fp4 / mxint4 MoE: ignis has none of those layouts or formats, so they raise
UnsupportedError when called."""

from ignis import UnsupportedError
from ignis.fused_moe import (ActivationType, Fp8QuantizationType, RoutingMethodType, WeightLayout, cutlass_fused_moe,
                             cutlass_fused_moe_workspace_size, trtllm_bf16_moe, trtllm_bf16_routed_moe,
                             trtllm_fp8_block_scale_moe, trtllm_fp8_block_scale_routed_moe,
                             trtllm_fp8_per_tensor_scale_moe, trtllm_fp8_per_tensor_scale_routed_moe)


def _absent(name, why):
    raise UnsupportedError("flashinfer.fused_moe.%s: %s" % (name, why))


_LAYOUT = ("ignis' MoE takes the experts' weights unshuffled in the MajorK layout ([E, N, K] row-major; "
           "ignis.fused_moe.fc1_from_gate_up builds fc1)")


def get_w2_permute_indices_with_cache(*args, **kwargs):
    """FlashInfer's shuffle indices of the TRT-LLM-gen fc2 layout; not implemented (raises)."""
    _absent("get_w2_permute_indices_with_cache", _LAYOUT)


def _maybe_get_cached_w3_w1_permute_indices(*args, **kwargs):
    """FlashInfer's shuffle indices of the TRT-LLM-gen fc1 layout; not implemented (raises)."""
    _absent("_maybe_get_cached_w3_w1_permute_indices", _LAYOUT)


def convert_to_block_layout(*args, **kwargs):
    """FlashInfer's BlockMajorK weight layout; not implemented (raises)."""
    _absent("convert_to_block_layout", _LAYOUT)


def reorder_rows_for_gated_act_gemm(*args, **kwargs):
    """FlashInfer's interleaved gate/up rows; not implemented (raises)."""
    _absent("reorder_rows_for_gated_act_gemm", _LAYOUT)


def interleave_moe_weights_for_sm90_mixed_gemm(*args, **kwargs):
    """FlashInfer's SM90 mixed-input (int4/fp4 weights) layout; not implemented (raises)."""
    _absent("interleave_moe_weights_for_sm90_mixed_gemm", "ignis has no mixed-input (int4 / fp4 weight) MoE")


def interleave_moe_scales_for_sm90_mixed_gemm(*args, **kwargs):
    """FlashInfer's SM90 mixed-input scale layout; not implemented (raises)."""
    _absent("interleave_moe_scales_for_sm90_mixed_gemm", "ignis has no mixed-input (int4 / fp4 weight) MoE")


def trtllm_fp4_block_scale_moe(*args, **kwargs):
    """FlashInfer's NVFP4 / MXFP4 MoE; not implemented (raises)."""
    _absent("trtllm_fp4_block_scale_moe", "ignis has no fp4 MoE (bf16, fp8 per-tensor and fp8 block-scaled only)")


def trtllm_fp4_block_scale_routed_moe(*args, **kwargs):
    """FlashInfer's NVFP4 / MXFP4 MoE with precomputed routing; not implemented (raises)."""
    _absent("trtllm_fp4_block_scale_routed_moe",
            "ignis has no fp4 MoE (bf16, fp8 per-tensor and fp8 block-scaled only)")


def trtllm_mxint4_block_scale_moe(*args, **kwargs):
    """FlashInfer's MXINT4 MoE; not implemented (raises)."""
    _absent("trtllm_mxint4_block_scale_moe", "ignis has no int4 MoE (bf16, fp8 per-tensor and fp8 block-scaled only)")
