"""flashinfer.fused_moe under the switch: ignis.fused_moe's entry points and enums (through
``.core``, FlashInfer's module of them: ``flashinfer.fused_moe.core.ActivationType`` resolves), the
load-time names ignis lacks as raising stubs (see .core), and ``fused_topk_deepseek`` from
ignis.fused_moe_routing."""

from . import core
from .core import (ActivationType, Fp8QuantizationType, RoutingMethodType, WeightLayout,
                   _maybe_get_cached_w3_w1_permute_indices, convert_to_block_layout, cutlass_fused_moe,
                   cutlass_fused_moe_workspace_size, get_w2_permute_indices_with_cache,
                   interleave_moe_scales_for_sm90_mixed_gemm, interleave_moe_weights_for_sm90_mixed_gemm,
                   reorder_rows_for_gated_act_gemm, trtllm_bf16_moe, trtllm_bf16_routed_moe, trtllm_fp4_block_scale_moe,
                   trtllm_fp4_block_scale_routed_moe, trtllm_fp8_block_scale_moe, trtllm_fp8_block_scale_routed_moe,
                   trtllm_fp8_per_tensor_scale_moe, trtllm_fp8_per_tensor_scale_routed_moe,
                   trtllm_mxint4_block_scale_moe)
from ignis.fused_moe_routing import fused_topk_deepseek
