/* MoE routing, the first stage of a fused MoE layer: for each token, the top_k experts its router
 * logits choose and the weight each chosen expert's output is multiplied by. The methods are
 * FlashInfer's RoutingMethodType (same names, same integer values as FlashInfer 0.7.2), read from
 * its trtllm-gen routing kernels and its NoAuxTc kernel (fused_topk_deepseek).
 *
 * Layout and dtypes. logits [T, E]: f32, bf16 or f16, the last dimension contiguous
 * (IGNIS_ERROR_UNSUPPORTED otherwise), any row stride. bias [E]: NULL, or f32, bf16 or f16 with
 * stride 1. topk_ids [T, top_k]: i32, global expert ids 0 .. E-1. topk_weights [T, top_k]: f32 (the
 * MoE stages take f32), or bf16 / f16 (FlashInfer's fused_topk_deepseek writes the logits' dtype);
 * both with a contiguous last dimension and any row stride, overlapping no input and not each
 * other. Everything is computed in f32; weights are rounded once when stored.
 *
 * How each method scores, selects and weighs, for one token with logits x[e] (b[e] the bias):
 *   DEFAULT            softmax over all E, the top_k of it: w = exp(x - m) / sum_e exp(x[e] - m),
 *                      m the largest logit.
 *   RENORMALIZE        the top_k logits, softmax over those k: w = exp(x - m) / sum_k exp(x - m).
 *   RENORMALIZE_NAIVE  softmax, top_k, divide by the sum of the k: the same weights as RENORMALIZE,
 *                      computed as RENORMALIZE computes them (as FlashInfer does).
 *   TOPK               the top_k logits, w = x.
 *   LLAMA4             the top logit (top_k must be 1), w = sigmoid(x).
 *   TOPK_SIGMOID       the top_k logits, w = sigmoid(x).
 *   SIGMOID            the top_k of sigmoid(x), w = sigmoid(x).
 *   SIGMOID_RENORM     the top_k of sigmoid(x), w = sigmoid(x) / max(sum_k sigmoid(x), 1e-20).
 *   DEEPSEEK_V3        s = sigmoid(x), key = s + b (the bias steers the choice only). The E experts
 *                      form n_group groups of E / n_group consecutive experts; a group scores the
 *                      sum of its two largest keys (its one key when groups hold one expert); the
 *                      topk_group best groups are kept and the top_k keys among their experts are
 *                      chosen; w = s / (sum_k s + 1e-20). n_group 0 or 1: no group stage.
 *   MINIMAX2           as DEEPSEEK_V3 without groups.
 * Every method then multiplies the weights by routed_scaling_factor (1 by default), so
 * topk_weights are the final factors of the expert outputs. (FlashInfer applies the factor in
 * DEEPSEEK_V3 and MINIMAX2 only; a caller matching FlashInfer's other methods passes 1.)
 *
 * Ranking and ties. The methods whose score is an increasing function of the logit (all but
 * DEEPSEEK_V3 and MINIMAX2) rank the logits themselves, so scores that round to equal values
 * (sigmoid saturating at 1, softmax underflowing to 0) keep the logits' order. Values rank by
 * value with NaN below -Inf and -0 below +0; among equal values the lower expert index ranks first,
 * and groups likewise by group index. Row t of the outputs lists the chosen experts from the
 * highest ranked down.
 *
 * Arithmetic. sigmoid and exp are ignis' own (src/core/moe_routing_math.h: built from correctly
 * rounded operations only), and sums are added in one fixed order, so the CPU and CUDA backends
 * return the same ids and the same weights bit for bit. They treat a NaN argument as -Inf
 * (sigmoid 0, exp 0); sigmoid is 0 below x = -104 and rounds to 1 above about x = 17. So a NaN
 * logit ranks last where logits are ranked, keys as -Inf would (key = bias) in DEEPSEEK_V3 and
 * MINIMAX2, and weighs 0 in DEFAULT's sum; infinite logits give weights as IEEE arithmetic makes
 * them (DEFAULT with a +Inf logit: NaN weights).
 *
 * Limits (IGNIS_ERROR_UNSUPPORTED beyond them): E <= 512, top_k <= 32, n_group <= 32.
 *
 * Errors: IGNIS_ERROR_INVALID_ARGUMENT for a NULL required tensor or config, a config.size that is
 * not an ignis_moe_routing_config's, a method outside the enum (FlashInfer's Unspecified included),
 * top_k < 1 or > E, LLAMA4 with top_k != 1, a bias given to a method that takes none, n_group or
 * topk_group > 1 for a method other than DEEPSEEK_V3, n_group not dividing E, topk_group outside
 * [1, n_group], fewer than top_k experts in the topk_group groups kept (topk_group * E / n_group <
 * top_k), a routed_scaling_factor that is not a finite f32, a wrong ndim, shape or dtype, or overlapping
 * outputs; IGNIS_ERROR_UNSUPPORTED for the limits above or a non-contiguous last dimension or bias.
 * Nothing is written on an error. The call never synchronizes or allocates and is safe inside
 * CUDA-graph capture; T = 0 writes nothing. */
#ifndef IGNIS_MOE_ROUTING_H
#define IGNIS_MOE_ROUTING_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FlashInfer's RoutingMethodType, value for value (its Unspecified, 10, is refused). */
typedef enum ignis_moe_routing_method {
  IGNIS_MOE_ROUTING_DEFAULT = 0,           /* softmax -> top-k */
  IGNIS_MOE_ROUTING_RENORMALIZE = 1,       /* top-k -> softmax */
  IGNIS_MOE_ROUTING_DEEPSEEK_V3 = 2,       /* sigmoid + bias -> groups -> top-k, renormalized */
  IGNIS_MOE_ROUTING_LLAMA4 = 3,            /* top-1 -> sigmoid */
  IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE = 4, /* softmax -> top-k -> renormalize (Qwen3, Mixtral) */
  IGNIS_MOE_ROUTING_TOPK = 5,              /* top-k of the logits, weights the logits */
  IGNIS_MOE_ROUTING_SIGMOID_RENORM = 6,    /* sigmoid -> top-k -> renormalize */
  IGNIS_MOE_ROUTING_MINIMAX2 = 7,          /* sigmoid + bias -> top-k, renormalized */
  IGNIS_MOE_ROUTING_SIGMOID = 8,           /* sigmoid -> top-k */
  IGNIS_MOE_ROUTING_TOPK_SIGMOID = 9       /* top-k -> sigmoid */
} ignis_moe_routing_method;

#define IGNIS_MOE_ROUTING_MAX_EXPERTS 512
#define IGNIS_MOE_ROUTING_MAX_TOP_K 32
#define IGNIS_MOE_ROUTING_MAX_GROUPS 32

/* How a call routes. size = sizeof(ignis_moe_routing_config) (IGNIS_MOE_ROUTING_CONFIG_INIT). */
typedef struct ignis_moe_routing_config {
  size_t size;
  ignis_moe_routing_method method;
  int64_t top_k;                /* experts per token */
  int64_t n_group;              /* DEEPSEEK_V3: expert groups (0 or 1: none); others 0 or 1 */
  int64_t topk_group;           /* DEEPSEEK_V3: groups kept (0: every group when n_group <= 1) */
  double routed_scaling_factor; /* multiplies every weight */
} ignis_moe_routing_config;
#define IGNIS_MOE_ROUTING_CONFIG_INIT                                                                        \
  { sizeof(ignis_moe_routing_config), IGNIS_MOE_ROUTING_DEFAULT, 1, 0, 0, 1.0 }

/* Route T tokens: topk_ids[t, i] and topk_weights[t, i] for i < top_k, as the header says. bias may
 * be NULL (zeros); it is taken by DEEPSEEK_V3 and MINIMAX2 only. */
IGNIS_API ignis_status ignis_moe_route(const ignis_tensor *logits, const ignis_tensor *bias,
                                       const ignis_moe_routing_config *config, ignis_tensor *topk_ids,
                                       ignis_tensor *topk_weights, void *stream);

#ifdef __cplusplus
}
#endif
#endif
