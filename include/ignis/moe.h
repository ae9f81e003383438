/* Fused MoE expert computation given the routing: each token goes through the top_k experts its
 * routing chose, and their outputs are summed with the routing weights. Semantics follow
 * FlashInfer's cutlass_fused_moe and its trtllm_*_routed_moe entry points (which take the same
 * math with other argument spellings); the routing itself (logits to top-k ids and weights) is a
 * separate op.
 *
 * The math, for token t and slot j with global expert id g = topk_ids[t, j], local expert
 * e = g - local_expert_offset (slots whose e is outside [0, E) contribute nothing: expert
 * parallelism, the other ranks own them; a negative id is such a slot too) and weight
 * w = topk_weights[t, j]:
 *     h      = input[t] @ fc1[e]^T  (* dequant)  + fc1_bias[e]              [N1], f32 accumulation
 *     a      = act(h)                                                       [I]
 *     y      = a @ fc2[e]^T          (* dequant)                            [H]
 *     out[t] = (out[t] if accumulate) + sum_j w * (y + fc2_bias[e])        fixed order j = 0, 1, ...
 * The fc2 bias is inside the weighted sum (FlashInfer's finalize), and is added only when
 * config.tp_rank == 0: with tensor parallelism every rank holds the shard of fc1 rows and fc2
 * columns of its part of the intermediate dimension (the given weights ARE the shard: I is the
 * shard's size), out is the rank's partial sum, and the bias must be counted once.
 *
 * Activations (ignis_moe_activation, FlashInfer's ActivationType values). Gated ones split the N1 =
 * 2I values of h into the "up" (linear) half u and the "gate" half g; which half is which is
 * config.gate_first: 0 (default, FlashInfer's convention for cutlass_fused_moe and the trtllm
 * entry points) means fc1 rows 0..I-1 are up (w3) and I..2I-1 are gate (w1), the "w3_w1" order
 * vLLM swaps its w13 into; 1 means gate first (the checkpoint's w1 then w3 stacking, "w13").
 *     Swiglu      silu(g) * u; with any of act_alpha / act_beta / act_limit given it is SwigluBias
 *     SwigluBias  gc * sigmoid(alpha * gc) * (uc + beta), gc = min(g, limit), uc = clamp(u, +-limit)
 *                 (gpt-oss: alpha 1.702, beta 1, limit 7; defaults alpha 1, beta 0, limit +inf)
 *     SwigluStep  min(silu(g), limit) * clamp(u, -limit, limit), limit default 7
 *     Geglu       gelu(g) * u, gelu(x) = x/2 (1 + erf(x / sqrt 2))
 *     GegluTanh   gelu_tanh(g) * u, gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * Non-gated ones (N1 = I): Gelu gelu(x), Relu max(x, 0), Silu silu(x), Relu2 max(x, 0)^2,
 * Identity x. FlashInfer's Situ (10) and ClampedRelu2 (12) are refused (IGNIS_ERROR_UNSUPPORTED).
 * alpha, beta, limit are per local expert (act_alpha / act_beta / act_limit: [E] f32), given only
 * for the Swiglu family (limit alone for SwigluStep).
 *
 * Quantization (config.quant):
 *   - IGNIS_MOE_QUANT_NONE: input, fc1, fc2 all f16 or all bf16.
 *   - IGNIS_MOE_QUANT_FP8_PER_TENSOR: input, fc1, fc2 fp8 e4m3 (the input already quantized, its
 *     scale folded into the dequant scales, as FlashInfer requires). fc1_scale [E]: the dequant of
 *     h (FlashInfer's quant_scales[0], a1_scale * w1_scale[e]); fc1_gate_scale NULL or [E]: when
 *     given, the gate half's dequant instead (TRT-LLM's output1_scales_gate_scalar, with
 *     fc1_scale its output1_scales_scalar for the up half); fc2_input_scale NULL (1) or one value
 *     ([1] or []) or [E]: a multiplies it before its fp8 rounding (FlashInfer's quant_scales[1],
 *     1 / a2_scale: a multiplier, not a divisor); fc2_scale [E]: the dequant of y (quant_scales[2]).
 *     FlashInfer's quant_scales[3] (the input's dequant scale) feeds only its LoRA path: not taken.
 *   - IGNIS_MOE_QUANT_FP8_BLOCK (DeepSeek-V3): fc1, fc2 fp8 e4m3 with one f32 scale per 128x128
 *     block: fc1_scale [E, ceil(N1/128), ceil(H/128)], fc2_scale [E, ceil(H/128), ceil(I/128)], any
 *     strides. The input is f16/bf16, quantized here per 1x128 group of each row (input_scale NULL),
 *     or fp8 e4m3 with input_scale [T, ceil(H/128)] f32 (any strides: TRT-LLM's [H/128, T] tensor
 *     passes transposed). a is quantized the same way before fc2. The dynamic 1x128 rule (TRT-LLM's):
 *     s = absmax / 448 (s = 1 for an all-zero group), q = fp8(sat(v * (1 / s))). Each 128-wide K
 *     block's partial sum is formed in f32 and scaled (the GPU's "promotion").
 *
 * Precision: h, y and (16-bit modes) a are stored in the work dtype between the steps: the
 * input's dtype when it is f16/bf16, else out's when that is f16/bf16, else bf16. Activations,
 * scales and the final sum are f32; out is rounded once. Results are deterministic: the same bits
 * on every call of the same inputs (no atomics in any sum).
 *
 * Tensors (T tokens, k = top_k, H hidden, I intermediate, E local experts, N1 = 2I or I):
 *   input        [T, H], last dim contiguous, any row stride
 *   input_scale  NULL, or [T, ceil(H/128)] f32 (FP8_BLOCK with an fp8 input)
 *   topk_ids     [T, k] i32 or i64 GLOBAL expert ids, any strides
 *   topk_weights [T, k] f32 or bf16, any strides; or NULL: topk_ids is then FlashInfer's packed
 *                routing (i32: expert id in the high 16 bits, the bf16 weight's bits in the low 16)
 *   weights      fc1 [E, N1, H], fc2 [E, H, I] (each expert stored [N, K] row-major: last dim
 *                contiguous, any other strides); biases NULL or fc1_bias [E, N1], fc2_bias [E, H]
 *                (f32, f16 or bf16, last dim contiguous); the scales above
 *   out          [T, H] f32, f16 or bf16, last dim contiguous, any row stride; must not overlap
 *                any input or the workspace
 * 1 <= k <= IGNIS_MOE_MAX_TOP_K. T == 0 writes nothing. A token none of whose slots is local gets
 * out[t] = 0 (or keeps out[t] when accumulating).
 *
 * Workspace: caller-owned memory where the tensors live (device memory for CUDA tensors, host
 * memory for host tensors), of at least ignis_fused_moe_workspace_size bytes for the largest T
 * and the sizes, dtypes and config of the calls. The size query carves the same pieces as the run
 * (counting mode), so a workspace sized for max_tokens serves every T <= max_tokens; a run whose T
 * needs more returns IGNIS_ERROR_INSUFFICIENT_WORKSPACE before writing anything.
 *
 * The pipeline (CUDA: src/cuda/moe/; CPU: src/cpu/moe.c, the same steps in plain loops):
 *   1. per-expert counts, offsets and the permutation of the T * k (token, slot) rows by local
 *      expert (rows of one expert in (token, slot) order), on the device: the host never reads
 *      topk_ids (no sync; the launches depend only on T and the sizes, so a CUDA graph captured
 *      at T replays correctly for any routing, including slots routed nowhere, e.g. padding
 *      tokens given id -1);
 *   2. gather of the input rows into expert order (FP8_BLOCK with a 16-bit input: quantized 1x128
 *      on the way);
 *   3. grouped GEMM 1 (ignis_grouped_mm's kernels, whatever path they choose);
 *   4. dequant, bias, activation (and for fp8 the requantization of a);
 *   5. grouped GEMM 2;
 *   6. finalize: the weighted sum of each token's rows back in token order, into out or added.
 * CUDA needs what ignis_grouped_mm's kernel needs of both GEMMs: H and I multiples of 8 (16 for the
 * fp8 modes), 16-byte aligned data and row strides (input, out, weights, biases), sm_80 or later
 * (sm_89 for fp8): else IGNIS_ERROR_UNSUPPORTED naming the reason, before anything is launched.
 *
 * On error nothing is written; the message names the function and the parameter. */
#ifndef IGNIS_MOE_H
#define IGNIS_MOE_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IGNIS_MOE_MAX_TOP_K 256

/* FlashInfer's ActivationType values. */
typedef enum ignis_moe_activation {
  IGNIS_MOE_ACT_GELU = 0,
  IGNIS_MOE_ACT_RELU = 1,
  IGNIS_MOE_ACT_SILU = 2,
  IGNIS_MOE_ACT_SWIGLU = 3,
  IGNIS_MOE_ACT_GEGLU = 4,
  IGNIS_MOE_ACT_SWIGLU_BIAS = 5,
  IGNIS_MOE_ACT_RELU2 = 6,
  IGNIS_MOE_ACT_SWIGLU_STEP = 7,
  IGNIS_MOE_ACT_GEGLU_TANH = 8,
  IGNIS_MOE_ACT_IDENTITY = 9
} ignis_moe_activation;

typedef enum ignis_moe_quant {
  IGNIS_MOE_QUANT_NONE = 0,
  IGNIS_MOE_QUANT_FP8_PER_TENSOR = 1,
  IGNIS_MOE_QUANT_FP8_BLOCK = 2
} ignis_moe_quant;

typedef struct ignis_fused_moe_config {
  size_t size;                     /* sizeof(ignis_fused_moe_config): set by the _INIT */
  ignis_moe_activation activation; /* default Swiglu */
  ignis_moe_quant quant;           /* default none */
  int32_t gate_first;              /* gated activations: 0 fc1 rows [up; gate] (FlashInfer), 1 [gate; up] */
  int32_t accumulate;              /* 0: out = result; 1: out += result */
  int64_t local_expert_offset;     /* global id of local expert 0 (expert parallelism), >= 0 */
  int32_t tp_rank;                 /* tensor-parallel rank, >= 0: the fc2 bias is added on rank 0 only */
} ignis_fused_moe_config;

#define IGNIS_FUSED_MOE_CONFIG_INIT                                                                          \
  { sizeof(ignis_fused_moe_config), IGNIS_MOE_ACT_SWIGLU, IGNIS_MOE_QUANT_NONE, 0, 0, 0, 0 }

/* The experts' tensors (NULL where not used; see the header comment for shapes and meanings). */
typedef struct ignis_fused_moe_weights {
  size_t size; /* sizeof(ignis_fused_moe_weights): set by the _INIT */
  const ignis_tensor *fc1, *fc2;
  const ignis_tensor *fc1_bias, *fc2_bias;
  const ignis_tensor *fc1_scale, *fc2_scale;            /* fp8: per-tensor [E], or 128x128 blocks */
  const ignis_tensor *fc1_gate_scale;                   /* FP8_PER_TENSOR only: NULL or [E] */
  const ignis_tensor *fc2_input_scale;                  /* FP8_PER_TENSOR only: NULL, [1] / [] or [E] */
  const ignis_tensor *act_alpha, *act_beta, *act_limit; /* NULL or [E] f32 */
} ignis_fused_moe_weights;

#define IGNIS_FUSED_MOE_WEIGHTS_INIT                                                                         \
  { sizeof(ignis_fused_moe_weights), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/* Workspace bytes for every call with at most max_tokens tokens and these sizes (E =
 * num_local_experts), input and out dtypes and config (its activation and quant matter). */
IGNIS_API ignis_status ignis_fused_moe_workspace_size(int64_t max_tokens, int64_t top_k,
                                                      int64_t num_local_experts, int64_t hidden_size,
                                                      int64_t intermediate_size, ignis_dtype input_dtype,
                                                      ignis_dtype out_dtype,
                                                      const ignis_fused_moe_config *config, size_t *bytes);

/* out [T, H] = the MoE of input [T, H] over the routing (topk_ids, topk_weights) and the local
 * experts' weights. config NULL means IGNIS_FUSED_MOE_CONFIG_INIT. */
IGNIS_API ignis_status ignis_fused_moe(const ignis_tensor *input, const ignis_tensor *input_scale,
                                       const ignis_tensor *topk_ids, const ignis_tensor *topk_weights,
                                       const ignis_fused_moe_weights *weights,
                                       const ignis_fused_moe_config *config, void *workspace,
                                       size_t workspace_bytes, ignis_tensor *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
