/* The flat params of MoE routing (include/ignis/moe_routing.h: ignis_moe_route), filled by
 * src/core/op_moe_routing.c and read by the backends' moe_route entry point.
 *
 * Token t reads logits + t * logits_row_stride (num_experts contiguous values of logits_dtype) and
 * writes top_k ids to topk_ids + t * ids_row_stride and top_k weights (weights_dtype) to
 * topk_weights + t * weights_row_stride. The front end resolves the group options: n_group > 1
 * only when the method is DEEPSEEK_V3 and the group stage keeps fewer groups than there are
 * (1 < n_group, topk_group < n_group); otherwise n_group = topk_group = 1 and the backends skip the
 * group stage. The shared rules of the math are in core/moe_routing_math.h. */
#ifndef IGNIS_CORE_MOE_ROUTING_PARAMS_H
#define IGNIS_CORE_MOE_ROUTING_PARAMS_H

#include <stdint.h>

#include "ignis/core.h"
#include "ignis/moe_routing.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_moe_routing_params {
  ignis_moe_routing_method method;
  int64_t num_tokens;
  int32_t num_experts;         /* E <= IGNIS_MOE_ROUTING_MAX_EXPERTS */
  int32_t top_k;               /* 1 <= top_k <= min(E, IGNIS_MOE_ROUTING_MAX_TOP_K) */
  int32_t n_group;             /* 1: no group stage; else divides E, <= IGNIS_MOE_ROUTING_MAX_GROUPS */
  int32_t topk_group;          /* groups kept, < n_group (1 when n_group is 1) */
  float routed_scaling_factor; /* multiplies every weight */
  ignis_dtype logits_dtype;    /* f32, bf16, f16 */
  const void *logits;
  int64_t logits_row_stride;
  ignis_dtype bias_dtype; /* when bias is set: f32, bf16, f16 */
  const void *bias;       /* [E] contiguous, or NULL (zeros) */
  int32_t *topk_ids;
  int64_t ids_row_stride;
  ignis_dtype weights_dtype; /* f32, bf16, f16 */
  void *topk_weights;
  int64_t weights_row_stride;
} ignis_moe_routing_params;

#ifdef __cplusplus
}
#endif
#endif
