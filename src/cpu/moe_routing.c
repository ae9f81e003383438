/* CPU backend of MoE routing (include/ignis/moe_routing.h), the plain statement of the math: one
 * token at a time, tokens in parallel.
 *
 * A token: its E logits in f32; each expert's rank and value (core/moe_routing_math.h: the rank
 * orders the key, the logit or sigmoid(logit) + bias; the value is what the weight is made of);
 * with groups, each group's rank from its two largest keys, the topk_group best groups kept and
 * the rank of every expert outside them cleared; then top_k times the largest rank left (the lower
 * expert index among equal ranks), taken and cleared; last the weights from the chosen values.
 * The keys, the choice and the weights are the CUDA kernel's bit for bit: the same shared rules,
 * and sums added in the kernel's warp order (core/moe_routing_math.h). */
#include "core/moe_routing_math.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

/* The lowest index of the largest rank in rank[0..n). */
static int32_t largest_rank(const uint32_t *rank, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (rank[i] > rank[best])
      best = i;
  return best;
}

/* Clear the ranks of the experts outside the topk_group best groups. */
static void keep_best_groups(const ignis_moe_routing_params *p, uint32_t *rank) {
  const int32_t per_group = p->num_experts / p->n_group;
  uint32_t group_rank[IGNIS_MOE_ROUTING_MAX_GROUPS];
  for (int32_t g = 0; g < p->n_group; ++g) {
    uint32_t first = 0, second = 0;
    for (int32_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (rank[e] > first) {
        second = first;
        first = rank[e];
      } else if (rank[e] > second) {
        second = rank[e];
      }
    }
    group_rank[g] = ignis_routing_group_rank(first, second, per_group == 1);
  }
  int kept[IGNIS_MOE_ROUTING_MAX_GROUPS] = {0};
  for (int32_t j = 0; j < p->topk_group; ++j) {
    const int32_t g = largest_rank(group_rank, p->n_group);
    kept[g] = 1;
    group_rank[g] = IGNIS_ROUTING_RANK_NONE;
  }
  for (int32_t e = 0; e < p->num_experts; ++e)
    if (!kept[e / per_group])
      rank[e] = IGNIS_ROUTING_RANK_NONE;
}

static void route_token(const ignis_moe_routing_params *p, int64_t t) {
  const int32_t E = p->num_experts, k = p->top_k;
  float logit[IGNIS_MOE_ROUTING_MAX_EXPERTS], value[IGNIS_MOE_ROUTING_MAX_EXPERTS];
  uint32_t rank[IGNIS_MOE_ROUTING_MAX_EXPERTS];
  const ignis_routing_rule rule = ignis_routing_rule_of(p->method);
  ignis_cpu_load_row(ignis_cpu_at(p->logits, p->logits_dtype, t * p->logits_row_stride), p->logits_dtype, E,
                     logit);
  for (int32_t e = 0; e < E; ++e) {
    if (rule.biased) {
      const float sig = ignis_routing_sigmoid(logit[e]);
      const float bias = p->bias ? ignis_cpu_load(p->bias, p->bias_dtype, e) : 0.0f;
      rank[e] = ignis_routing_rank(sig + bias);
      value[e] = sig;
    } else {
      rank[e] = ignis_routing_rank(logit[e]);
      value[e] = logit[e];
    }
  }
  if (p->n_group > 1)
    keep_best_groups(p, rank);

  int32_t id[IGNIS_MOE_ROUTING_MAX_TOP_K] = {0};
  float term[IGNIS_ROUTING_LANES];
  for (int32_t j = 0; j < k; ++j) {
    id[j] = largest_rank(rank, E);
    rank[id[j]] = IGNIS_ROUTING_RANK_NONE;
  }
  const float top = value[id[0]];
  float lanes[IGNIS_ROUTING_LANES];
  for (int32_t l = 0; l < IGNIS_ROUTING_LANES; ++l) {
    term[l] = l < k ? ignis_routing_term(rule.term, value[id[l]], top) : 0.0f;
    lanes[l] = term[l];
  }
  if (rule.sum == IGNIS_ROUTING_SUM_ALL) {
    const int32_t width = ignis_routing_lane_width(E);
    for (int32_t l = 0; l < IGNIS_ROUTING_LANES; ++l) {
      lanes[l] = 0.0f;
      for (int32_t e = l * width; e < (l + 1) * width && e < E; ++e)
        lanes[l] += ignis_routing_exp_term(value[e], top);
    }
  }
  const float sum = rule.sum == IGNIS_ROUTING_SUM_NONE ? 0.0f : ignis_routing_butterfly_sum(lanes);

  int32_t *ids = p->topk_ids + t * p->ids_row_stride;
  void *weights = ignis_cpu_at_mut(p->topk_weights, p->weights_dtype, t * p->weights_row_stride);
  for (int32_t j = 0; j < k; ++j) {
    ids[j] = id[j];
    ignis_cpu_store(weights, p->weights_dtype, j,
                    ignis_routing_weight(rule.norm, term[j], sum, p->routed_scaling_factor));
  }
}

ignis_status ignis_cpu_moe_route(const ignis_moe_routing_params *p, int32_t device, void *stream) {
  const int64_t tokens = p->num_tokens;
  IGNIS_CPU_PARALLEL_FOR(tokens * p->num_experts)
  for (int64_t t = 0; t < tokens; ++t)
    route_token(p, t);
  return IGNIS_OK;
}
