/* What the attention front ends share (see attention_common.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/attention_common.h"
#include "core/config.h"
#include "core/validate.h"

static ignis_status positive_finite(const char *fn, const char *name, const char *field, double value) {
  if (value > 0.0 && !isinf(value))
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.%s=%g but it must be finite and > 0", fn, name,
                         field, value);
}

static ignis_status non_negative_finite(const char *fn, const char *name, const char *field, double value) {
  if (value >= 0.0 && !isinf(value))
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.%s=%g but it must be finite and >= 0", fn,
                         name, field, value);
}

ignis_status ignis_check_attention_options(const char *fn, const char *name, const ignis_attention_options *o,
                                           int64_t head_dim, ignis_attention_resolved *r) {
  static const ignis_attention_options defaults = IGNIS_ATTENTION_OPTIONS_INIT;
  ignis_attention_options read = defaults;
  if (o) {
    char size_field[64];
    snprintf(size_field, sizeof size_field, "%s.size", name);
    IGNIS_TRY(ignis_read_config(fn, size_field, "IGNIS_ATTENTION_OPTIONS_INIT", &read, &defaults, o, sizeof read,
                                IGNIS_CONFIG_END(ignis_attention_options, rope_theta)));
  }
  o = &read;
  IGNIS_TRY(non_negative_finite(fn, name, "sm_scale", o->sm_scale));
  IGNIS_TRY(non_negative_finite(fn, name, "logits_soft_cap", o->logits_soft_cap));
  if (o->window_left < -1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.window_left=%d but it must be >= -1", fn,
                           name, (int)o->window_left);
  if (o->lse_base != IGNIS_LSE_BASE2 && o->lse_base != IGNIS_LSE_NATURAL)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.lse_base=%d is not an ignis_lse_base", fn,
                           name, (int)o->lse_base);
  if (o->pos_encoding_mode != IGNIS_POS_ENCODING_NONE && o->pos_encoding_mode != IGNIS_POS_ENCODING_ROPE_LLAMA &&
      o->pos_encoding_mode != IGNIS_POS_ENCODING_ALIBI)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.pos_encoding_mode=%d is not an ignis_pos_encoding", fn, name,
                           (int)o->pos_encoding_mode);
  r->rope_rcp_scale = 1.0f;
  r->rope_log2_theta = 0.0f;
  if (o->pos_encoding_mode == IGNIS_POS_ENCODING_ROPE_LLAMA) {
    IGNIS_TRY(positive_finite(fn, name, "rope_scale", o->rope_scale));
    IGNIS_TRY(positive_finite(fn, name, "rope_theta", o->rope_theta));
    r->rope_rcp_scale = (float)(1.0 / o->rope_scale);
    r->rope_log2_theta = (float)log2(o->rope_theta);
  }
  r->pos_encoding = (int32_t)o->pos_encoding_mode;
  double sm_scale = o->sm_scale > 0.0 ? o->sm_scale : 1.0 / sqrt((double)head_dim);
  r->sm_scale_log2 = (float)(sm_scale * 1.4426950408889634);
  r->logits_soft_cap = (float)o->logits_soft_cap;
  r->window_left = o->window_left;
  r->lse_scale = o->lse_base == IGNIS_LSE_NATURAL ? 0.6931471805599453f : 1.0f;
  return IGNIS_OK;
}

ignis_status ignis_check_attention_heads(const char *fn, const char *qo_what, int64_t num_qo_heads,
                                         const char *kv_what, int64_t num_kv_heads) {
  if (num_kv_heads < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%" PRId64 " but it must be >= 1", fn,
                           kv_what, num_kv_heads);
  if (num_qo_heads < 1 || num_qo_heads % num_kv_heads != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s=%" PRId64 " but it must be a positive multiple of %s=%" PRId64, fn,
                           qo_what, num_qo_heads, kv_what, num_kv_heads);
  return IGNIS_OK;
}

ignis_status ignis_check_attention_dtype(const char *fn, const char *name, ignis_dtype dtype) {
  if (dtype == IGNIS_F16 || dtype == IGNIS_BF16)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%s but it must be f16 or bf16", fn, name,
                         ignis_dtype_name(dtype));
}

ignis_status ignis_check_attention_kv_dtype(const char *fn, const char *name, ignis_dtype kv_dtype,
                                            const char *q_name, ignis_dtype q_dtype) {
  if (kv_dtype == q_dtype || kv_dtype == IGNIS_FP8_E4M3 || kv_dtype == IGNIS_FP8_E5M2)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%s but it must be %s=%s, fp8_e4m3 or fp8_e5m2",
                         fn, name, ignis_dtype_name(kv_dtype), q_name, ignis_dtype_name(q_dtype));
}

ignis_status ignis_check_attention_plan_dtypes(const char *fn, ignis_dtype q_dtype, ignis_dtype kv_dtype,
                                             ignis_dtype o_dtype, ignis_dtype *out_dtype) {
  if (q_dtype == IGNIS_FP8_E4M3) {
    if (kv_dtype != IGNIS_FP8_E4M3 && kv_dtype != IGNIS_FP8_E5M2)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: config.q_dtype=fp8_e4m3 needs an fp8 cache, but config.kv_dtype=%s", fn,
                             ignis_dtype_name(kv_dtype));
    if (o_dtype != IGNIS_F16 && o_dtype != IGNIS_BF16)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: config.o_dtype=%s but with config.q_dtype=fp8_e4m3 it must be f16 or bf16", fn,
                             o_dtype == IGNIS_DTYPE_OF_Q ? "IGNIS_DTYPE_OF_Q" : ignis_dtype_name(o_dtype));
    *out_dtype = o_dtype;
    return IGNIS_OK;
  }
  IGNIS_TRY(ignis_check_attention_dtype(fn, "config.q_dtype", q_dtype));
  IGNIS_TRY(ignis_check_attention_kv_dtype(fn, "config.kv_dtype", kv_dtype, "config.q_dtype", q_dtype));
  if (o_dtype != IGNIS_DTYPE_OF_Q && o_dtype != q_dtype)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.o_dtype=%s but with config.q_dtype=%s out is written in q's dtype "
                           "(IGNIS_DTYPE_OF_Q)",
                           fn, ignis_dtype_name(o_dtype), ignis_dtype_name(q_dtype));
  *out_dtype = q_dtype;
  return IGNIS_OK;
}

ignis_status ignis_check_attention_extras(const char *fn, const ignis_attention_extras *e, int64_t num_qo_heads,
                                          float *k_scale, float *v_scale, const float **sinks) {
  static const ignis_attention_extras defaults = IGNIS_ATTENTION_EXTRAS_INIT;
  ignis_attention_extras read = defaults;
  if (e)
    IGNIS_TRY(ignis_read_config(fn, "extras.size", "IGNIS_ATTENTION_EXTRAS_INIT", &read, &defaults, e, sizeof read,
                                IGNIS_CONFIG_END(ignis_attention_extras, sinks)));
  e = &read;
  IGNIS_TRY(positive_finite(fn, "extras", "k_scale", e->k_scale));
  IGNIS_TRY(positive_finite(fn, "extras", "v_scale", e->v_scale));
  *k_scale = (float)e->k_scale;
  *v_scale = (float)e->v_scale;
  *sinks = NULL;
  if (e->sinks) {
    IGNIS_TRY(ignis_check_tensor(fn, "extras.sinks", e->sinks, 1, 1));
    if (e->sinks->dtype != IGNIS_F32)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: extras.sinks.dtype=%s but it must be f32", fn,
                             ignis_dtype_name(e->sinks->dtype));
    IGNIS_TRY(ignis_check_dim(fn, "extras.sinks", e->sinks, 0, num_qo_heads, "num_qo_heads"));
    IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "extras.sinks", e->sinks));
    *sinks = (const float *)e->sinks->data;
  }
  return IGNIS_OK;
}

ignis_status ignis_check_attention_lse(const char *fn, const ignis_tensor *lse, const ignis_tensor *q,
                                       const ignis_tensor *out) {
  if (!lse)
    return IGNIS_OK;
  IGNIS_TRY(ignis_check_tensor(fn, "lse", lse, 2, 2));
  if (lse->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: lse.dtype=%s but it must be f32", fn,
                           ignis_dtype_name(lse->dtype));
  IGNIS_TRY(ignis_check_dim(fn, "lse", lse, 0, q->shape[0], "q.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "lse", lse, 1, q->shape[1], "q.shape[1]"));
  IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, "q", q));
  return ignis_check_disjoint(fn, "lse", lse, "out", out);
}

const char *ignis_attention_kernel_name(ignis_attention_kernel kernel) {
  switch (kernel) {
  case IGNIS_KERNEL_CPU:
    return "cpu";
  case IGNIS_KERNEL_DECODE_M16:
    return "decode_m16";
  case IGNIS_KERNEL_DECODE_TRANSPOSED:
    return "decode_transposed";
  case IGNIS_KERNEL_DECODE_PAGE:
    return "decode_page";
  case IGNIS_KERNEL_PREFILL_TILE:
    return "prefill_tile";
  case IGNIS_KERNEL_PREFILL_WGMMA:
    return "prefill_wgmma";
  }
  return "unknown";
}

ignis_status ignis_check_attention_out_dtype(const char *fn, const ignis_tensor *out, const ignis_tensor *q,
                                             ignis_dtype out_dtype) {
  if (out_dtype == q->dtype)
    return ignis_check_same_dtype(fn, "out", out, "q", q);
  if (out->dtype != out_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out.dtype=%s but the plan's o_dtype=%s", fn,
                           ignis_dtype_name(out->dtype), ignis_dtype_name(out_dtype));
  return IGNIS_OK;
}

ignis_status ignis_attention_carve_q_scratch(ignis_workspace *ws, const char *fn, ignis_dtype q_dtype,
                                             ignis_dtype o_dtype, int64_t elements, void **q_scratch) {
  *q_scratch = NULL;
  if (q_dtype == o_dtype)
    return IGNIS_OK;
  return ignis_workspace_take(ws, fn, "q_scratch", elements, ignis_dtype_size(o_dtype), q_scratch);
}

size_t ignis_attention_required_bytes(const ignis_workspace *ws) {
  return ws->offset ? ignis_workspace_required(ws) : 0;
}

ignis_status ignis_attention_missing_workspace(const char *fn, const ignis_workspace *counting) {
  return ignis_set_error(IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "%s: workspace is NULL but %zu bytes are needed",
                         fn, ignis_attention_required_bytes(counting));
}
