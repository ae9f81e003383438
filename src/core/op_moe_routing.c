/* Front end of MoE routing (include/ignis/moe_routing.h): read the caller's config over its
 * defaults, validate the tensors and the routing options (naming the parameter at fault), resolve
 * the group options (no group stage unless DEEPSEEK_V3 keeps fewer groups than it has), fill the
 * flat params (core/moe_routing_params.h) and hand them to the backend where the tensors live.
 * Nothing is written on an error. */
#include <float.h>
#include <inttypes.h>
#include <math.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/validate.h"
#include "ignis/moe_routing.h"

static const char *const method_names[] = {
    "IGNIS_MOE_ROUTING_DEFAULT",           "IGNIS_MOE_ROUTING_RENORMALIZE",
    "IGNIS_MOE_ROUTING_DEEPSEEK_V3",       "IGNIS_MOE_ROUTING_LLAMA4",
    "IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE", "IGNIS_MOE_ROUTING_TOPK",
    "IGNIS_MOE_ROUTING_SIGMOID_RENORM",    "IGNIS_MOE_ROUTING_MINIMAX2",
    "IGNIS_MOE_ROUTING_SIGMOID",           "IGNIS_MOE_ROUTING_TOPK_SIGMOID"};
#define METHOD_COUNT ((int)(sizeof method_names / sizeof method_names[0]))

/* An output [T, top_k] with a contiguous last dimension. */
static ignis_status check_output(const char *fn, const char *name, const ignis_tensor *t, int64_t tokens,
                                 int64_t top_k) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 2, 2));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 0, tokens, "logits.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 1, top_k, "config.top_k"));
  return ignis_check_last_dim_contiguous(fn, name, t);
}

/* top_k against the experts and the method; E and top_k within the kernels' limits. */
static ignis_status check_top_k(const char *fn, const ignis_moe_routing_config *cfg, int64_t experts) {
  if (experts > IGNIS_MOE_ROUTING_MAX_EXPERTS)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: logits.shape[1]=%" PRId64 " experts but ignis routes at most %d", fn, experts,
                           IGNIS_MOE_ROUTING_MAX_EXPERTS);
  if (cfg->top_k < 1 || cfg->top_k > experts)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.top_k=%" PRId64 " but it must be in [1, %" PRId64
                           "] (logits.shape[1])",
                           fn, cfg->top_k, experts);
  if (cfg->top_k > IGNIS_MOE_ROUTING_MAX_TOP_K)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.top_k=%" PRId64 " but ignis routes at most %d", fn, cfg->top_k,
                           IGNIS_MOE_ROUTING_MAX_TOP_K);
  if (cfg->method == IGNIS_MOE_ROUTING_LLAMA4 && cfg->top_k != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.top_k=%" PRId64
                           " but IGNIS_MOE_ROUTING_LLAMA4 routes to one expert (top_k 1)",
                           fn, cfg->top_k);
  return IGNIS_OK;
}

/* n_group / topk_group; on success *groups and *kept are the group stage the backends run (1 and 1:
 * none). */
static ignis_status check_groups(const char *fn, const ignis_moe_routing_config *cfg, int64_t experts,
                                 int32_t *groups, int32_t *kept) {
  const int64_t n = cfg->n_group, g = cfg->topk_group;
  *groups = *kept = 1;
  if (n < 0 || g < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.n_group=%" PRId64 " and config.topk_group=%" PRId64 " must be >= 0",
                           fn, n, g);
  if (cfg->method != IGNIS_MOE_ROUTING_DEEPSEEK_V3) {
    if (n > 1 || g > 1)
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "%s: config.n_group=%" PRId64 ", config.topk_group=%" PRId64
          " but %s has no group stage (only IGNIS_MOE_ROUTING_DEEPSEEK_V3 does): pass 0 or 1",
          fn, n, g, method_names[cfg->method]);
    return IGNIS_OK;
  }
  if (n <= 1) {
    if (g > 1)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: config.topk_group=%" PRId64 " but it must be <= config.n_group=%" PRId64,
                             fn, g, n);
    return IGNIS_OK;
  }
  if (n > IGNIS_MOE_ROUTING_MAX_GROUPS)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.n_group=%" PRId64 " but ignis routes at most %d groups", fn, n,
                           IGNIS_MOE_ROUTING_MAX_GROUPS);
  if (experts % n != 0)
    return ignis_set_error(
        IGNIS_ERROR_INVALID_ARGUMENT,
        "%s: config.n_group=%" PRId64 " does not divide logits.shape[1]=%" PRId64 " experts", fn, n, experts);
  if (g < 1 || g > n)
    return ignis_set_error(
        IGNIS_ERROR_INVALID_ARGUMENT,
        "%s: config.topk_group=%" PRId64 " but it must be in [1, config.n_group=%" PRId64 "]", fn, g, n);
  if (g * (experts / n) < cfg->top_k)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.top_k=%" PRId64 " but the config.topk_group=%" PRId64
                           " groups kept hold %" PRId64 " experts (topk_group * E / n_group)",
                           fn, cfg->top_k, g, g * (experts / n));
  if (g < n) {
    *groups = (int32_t)n;
    *kept = (int32_t)g;
  }
  return IGNIS_OK;
}

static ignis_status check_bias(const char *fn, const ignis_moe_routing_config *cfg, const ignis_tensor *bias,
                               int64_t experts) {
  if (!bias)
    return IGNIS_OK;
  if (cfg->method != IGNIS_MOE_ROUTING_DEEPSEEK_V3 && cfg->method != IGNIS_MOE_ROUTING_MINIMAX2)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: bias is given but %s takes none (only IGNIS_MOE_ROUTING_DEEPSEEK_V3 and "
                           "IGNIS_MOE_ROUTING_MINIMAX2 do)",
                           fn, method_names[cfg->method]);
  IGNIS_TRY(ignis_check_tensor(fn, "bias", bias, 1, 1));
  IGNIS_TRY(ignis_check_float_dtype(fn, "bias", bias));
  return ignis_check_vector(fn, "bias", bias, experts);
}

ignis_status ignis_moe_route(const ignis_tensor *logits, const ignis_tensor *bias,
                             const ignis_moe_routing_config *config, ignis_tensor *topk_ids,
                             ignis_tensor *topk_weights, void *stream) {
  static const char *const fn = "ignis_moe_route";
  ignis_clear_error();
  if (!config)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL (IGNIS_MOE_ROUTING_CONFIG_INIT)",
                           fn);
  static const ignis_moe_routing_config defaults = IGNIS_MOE_ROUTING_CONFIG_INIT;
  ignis_moe_routing_config cfg;
  IGNIS_TRY(ignis_read_config(fn, "config.size", "IGNIS_MOE_ROUTING_CONFIG_INIT", &cfg, &defaults, config,
                              sizeof cfg, IGNIS_CONFIG_END(ignis_moe_routing_config, routed_scaling_factor)));
  IGNIS_TRY(ignis_check_tensor(fn, "logits", logits, 2, 2));
  IGNIS_TRY(ignis_check_float_dtype(fn, "logits", logits));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "logits", logits));
  const int64_t tokens = logits->shape[0], experts = logits->shape[1];
  if ((int)cfg.method < 0 || (int)cfg.method >= METHOD_COUNT)
    return ignis_set_error(
        IGNIS_ERROR_INVALID_ARGUMENT,
        "%s: config.method=%d but it must be a routing method, 0 (IGNIS_MOE_ROUTING_DEFAULT) to "
        "9 (IGNIS_MOE_ROUTING_TOPK_SIGMOID)",
        fn, (int)cfg.method);
  IGNIS_TRY(check_top_k(fn, &cfg, experts));
  int32_t groups, kept;
  IGNIS_TRY(check_groups(fn, &cfg, experts, &groups, &kept));
  if (!(fabs(cfg.routed_scaling_factor) <= FLT_MAX))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.routed_scaling_factor=%g but it must be finite (as an f32)", fn,
                           cfg.routed_scaling_factor);
  IGNIS_TRY(check_bias(fn, &cfg, bias, experts));
  IGNIS_TRY(check_output(fn, "topk_ids", topk_ids, tokens, cfg.top_k));
  if (topk_ids->dtype != IGNIS_I32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: topk_ids.dtype=%s but it must be i32", fn,
                           ignis_dtype_name(topk_ids->dtype));
  IGNIS_TRY(check_output(fn, "topk_weights", topk_weights, tokens, cfg.top_k));
  IGNIS_TRY(ignis_check_float_dtype(fn, "topk_weights", topk_weights));
  IGNIS_TRY(ignis_check_disjoint(fn, "topk_ids", topk_ids, "topk_weights", topk_weights));
  IGNIS_TRY(ignis_check_disjoint(fn, "topk_ids", topk_ids, "logits", logits));
  IGNIS_TRY(ignis_check_disjoint(fn, "topk_weights", topk_weights, "logits", logits));
  if (bias) {
    IGNIS_TRY(ignis_check_disjoint(fn, "topk_ids", topk_ids, "bias", bias));
    IGNIS_TRY(ignis_check_disjoint(fn, "topk_weights", topk_weights, "bias", bias));
  }
  const ignis_tensor *tensors[] = {logits, bias, topk_ids, topk_weights};
  const char *names[] = {"logits", "bias", "topk_ids", "topk_weights"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 4, &target));

  ignis_moe_routing_params p = {0};
  p.method = cfg.method;
  p.num_tokens = tokens;
  p.num_experts = (int32_t)experts;
  p.top_k = (int32_t)cfg.top_k;
  p.n_group = groups;
  p.topk_group = kept;
  p.routed_scaling_factor = (float)cfg.routed_scaling_factor;
  p.logits_dtype = logits->dtype;
  p.logits = logits->data;
  p.logits_row_stride = logits->strides[0];
  p.bias_dtype = bias ? bias->dtype : IGNIS_F32;
  p.bias = bias ? bias->data : NULL;
  p.topk_ids = topk_ids->data;
  p.ids_row_stride = topk_ids->strides[0];
  p.weights_dtype = topk_weights->dtype;
  p.topk_weights = topk_weights->data;
  p.weights_row_stride = topk_weights->strides[0];
  if (tokens == 0)
    return IGNIS_OK;
  return target.backend->moe_route(&p, target.device.id, stream);
}
