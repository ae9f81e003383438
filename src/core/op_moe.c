/* Front end of the fused MoE op (include/ignis/moe.h): read the config and the weights struct,
 * check every tensor against the sizes the input, the routing and the weights give, carve the
 * workspace (the same carving answers the size query in counting mode), fill
 * ignis_fused_moe_params (core/moe_params.h) and hand it to the backend where the tensors live.
 * Everything is checked before anything is written. */
#include <inttypes.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/moe_math.h"
#include "core/moe_params.h"
#include "core/validate.h"
#include "ignis/moe.h"

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

ignis_dtype ignis_moe_work_dtype(ignis_dtype input_dtype, ignis_dtype out_dtype) {
  if (input_dtype == IGNIS_F16 || input_dtype == IGNIS_BF16)
    return input_dtype;
  if (out_dtype == IGNIS_F16 || out_dtype == IGNIS_BF16)
    return out_dtype;
  return IGNIS_BF16;
}

/* One tile when the rows fit a block, else tiles of IGNIS_MOE_TILE_MULTI rows. */
static void set_tiles(ignis_fused_moe_params *p) {
  p->rows = p->tokens * p->top_k;
  if (p->rows <= IGNIS_MOE_TILE_SINGLE) {
    p->tiles = 1;
    p->tile_rows = p->rows < 32 ? 32 : (p->rows + 31) / 32 * 32;
  } else {
    p->tiles = ceil_div(p->rows, IGNIS_MOE_TILE_MULTI);
    p->tile_rows = IGNIS_MOE_TILE_MULTI;
  }
}

/* a1 and a2 share one region, h and y another (never live at the same time). */
ignis_status ignis_moe_carve(ignis_workspace *ws, const char *fn, ignis_fused_moe_params *p) {
  const int64_t r = p->rows, e = p->experts, align = IGNIS_WORKSPACE_ALIGNMENT;
  const int block = p->quant == IGNIS_MOE_QUANT_FP8_BLOCK;
  void *piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "tile counts", p->tiles * e, sizeof(int32_t), &piece));
  p->tile_counts = piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "ranks", r, sizeof(int32_t), &piece));
  p->rank = piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "row map", r, sizeof(int32_t), &piece));
  p->row_to_perm = piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "permutation", r, sizeof(int32_t), &piece));
  p->perm_row = piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "m_indptr", e + 1, sizeof(int32_t), &piece));
  p->m_indptr = piece;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "constants", 4, sizeof(float), &piece));
  p->consts = piece;
  const int64_t a1_bytes =
      (r * p->hidden * (int64_t)ignis_dtype_size(p->a1_dtype) + align - 1) / align * align;
  const int64_t a2_bytes =
      (r * p->inter * (int64_t)ignis_dtype_size(p->a2_dtype) + align - 1) / align * align;
  const int64_t a1_scale = block ? r * ceil_div(p->hidden, IGNIS_MOE_GROUP) * 4 : 0;
  const int64_t a2_scale = block ? r * ceil_div(p->inter, IGNIS_MOE_GROUP) * 4 : 0;
  const int64_t first = a1_bytes + a1_scale > a2_bytes + a2_scale ? a1_bytes + a1_scale : a2_bytes + a2_scale;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "GEMM inputs", first, 1, &piece));
  p->a1 = p->a2 = piece;
  p->a1_scale = block && piece ? (float *)((char *)piece + a1_bytes) : NULL;
  p->a2_scale = block && piece ? (float *)((char *)piece + a2_bytes) : NULL;
  const int64_t wide = p->fc1_rows > p->hidden ? p->fc1_rows : p->hidden;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "GEMM outputs", r * wide, ignis_dtype_size(p->work_dtype), &piece));
  p->h = p->y = piece;
  return IGNIS_OK;
}

void ignis_moe_gemm_params(const ignis_fused_moe_params *p, int second, ignis_grouped_gemm_params *g) {
  const ignis_grouped_gemm_params zero = {0};
  *g = zero;
  g->fp8 = p->quant != IGNIS_MOE_QUANT_NONE;
  g->groups = g->num_weights = p->experts;
  g->m = p->rows;
  g->n = second ? p->hidden : p->fc1_rows;
  g->k = second ? p->inter : p->hidden;
  g->a_dtype = second ? p->a2_dtype : p->a1_dtype;
  g->out_dtype = p->work_dtype;
  g->index_dtype = IGNIS_I32;
  g->a = second ? p->a2 : p->a1;
  g->a_row_stride = g->k;
  g->b = second ? p->fc2 : p->fc1;
  g->b_group_stride = second ? p->fc2_stride_e : p->fc1_stride_e;
  g->b_stride_n = second ? p->fc2_stride_n : p->fc1_stride_n;
  g->b_stride_k = 1;
  g->out = second ? p->y : p->h;
  g->out_row_stride = g->n;
  g->m_indptr = p->m_indptr;
  if (!g->fp8)
    return;
  g->scale_dtype = IGNIS_F32;
  if (p->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR) {
    g->a_scale = g->b_scale = p->consts; /* unit scales: steps 4 and 6 apply the dequant */
    return;
  }
  const int64_t *bs = second ? p->fc2_scale_strides : p->fc1_scale_strides;
  g->a_scale = second ? p->a2_scale : p->a1_scale;
  g->a_scale_stride_m = ceil_div(g->k, IGNIS_MOE_GROUP);
  g->a_scale_stride_k = 1;
  g->b_scale = second ? p->fc2_scale : p->fc1_scale;
  g->b_scale_stride_g = bs[0];
  g->b_scale_stride_n = bs[1];
  g->b_scale_stride_k = bs[2];
}

/* ---- checks ------------------------------------------------------------------------------------ */
static ignis_status read_config(const char *fn, const ignis_fused_moe_config *caller,
                                ignis_fused_moe_config *c) {
  static const ignis_fused_moe_config defaults = IGNIS_FUSED_MOE_CONFIG_INIT;
  if (!caller) {
    *c = defaults;
  } else {
    IGNIS_TRY(ignis_read_config(fn, "config.size", "IGNIS_FUSED_MOE_CONFIG_INIT", c, &defaults, caller,
                                sizeof *c, IGNIS_CONFIG_END(ignis_fused_moe_config, tp_rank)));
  }
  const int act = (int)c->activation;
  if (act == 10 || act == 12)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.activation=%d (FlashInfer's %s) is not supported", fn, act,
                           act == 10 ? "Situ" : "ClampedRelu2");
  if (act < IGNIS_MOE_ACT_GELU || act > IGNIS_MOE_ACT_IDENTITY)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.activation=%d is not an ignis_moe_activation (0..9)", fn, act);
  if ((int)c->quant < IGNIS_MOE_QUANT_NONE || (int)c->quant > IGNIS_MOE_QUANT_FP8_BLOCK)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.quant=%d is not an ignis_moe_quant (0..2)", fn, (int)c->quant);
  if (c->gate_first != 0 && c->gate_first != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.gate_first=%d must be 0 or 1", fn,
                           c->gate_first);
  if (c->gate_first && !ignis_moe_is_gated(c->activation))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.gate_first=1 but config.activation=%d is not gated", fn, act);
  if (c->accumulate != 0 && c->accumulate != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.accumulate=%d must be 0 or 1", fn,
                           c->accumulate);
  if (c->local_expert_offset < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.local_expert_offset=%" PRId64 " is negative", fn,
                           c->local_expert_offset);
  if (c->tp_rank < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.tp_rank=%d is negative", fn, c->tp_rank);
  return IGNIS_OK;
}

static ignis_status no_negative_strides(const char *fn, const char *name, const ignis_tensor *t) {
  for (int d = 0; d < t->ndim; ++d)
    if (t->strides[d] < 0)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[%d]=%" PRId64 " is negative", fn, name,
                             d, t->strides[d]);
  return IGNIS_OK;
}

static ignis_status check_dtype(const char *fn, const char *name, const ignis_tensor *t, ignis_dtype a,
                                ignis_dtype b, ignis_dtype c, const char *allowed) {
  if (t->dtype == a || t->dtype == b || t->dtype == c)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be %s", fn, name,
                         ignis_dtype_name(t->dtype), allowed);
}

/* A 2-D or 3-D tensor of exactly this shape, any non-negative strides. */
static ignis_status check_shape(const char *fn, const char *name, const ignis_tensor *t, int ndim,
                                const int64_t *shape, const char *const *what) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, ndim, ndim));
  for (int d = 0; d < ndim; ++d)
    IGNIS_TRY(ignis_check_dim(fn, name, t, d, shape[d], what[d]));
  return no_negative_strides(fn, name, t);
}

/* An f32 tensor [E] (per local expert), any stride. */
static ignis_status check_per_expert(const char *fn, const char *name, const ignis_tensor *t, int64_t experts,
                                     const float **data, int64_t *stride) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, 1));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 0, experts, "the local experts (fc1.shape[0])"));
  IGNIS_TRY(check_dtype(fn, name, t, IGNIS_F32, IGNIS_F32, IGNIS_F32, "f32"));
  IGNIS_TRY(no_negative_strides(fn, name, t));
  *data = t->data;
  *stride = t->strides[0];
  return IGNIS_OK;
}

static ignis_status absent(const char *fn, const char *name, const ignis_tensor *t, const char *why) {
  if (t)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is given but %s", fn, name, why);
  return IGNIS_OK;
}

/* input [T, H], topk_ids / topk_weights [T, k]: the sizes T, H, k and the routing fields. */
static ignis_status check_routing(const char *fn, const ignis_tensor *input, const ignis_tensor *ids,
                                  const ignis_tensor *weights, ignis_fused_moe_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 2, 2));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", input));
  IGNIS_TRY(no_negative_strides(fn, "input", input));
  p->tokens = input->shape[0];
  p->hidden = input->shape[1];
  if (p->hidden < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: input.shape[1]=0 but the hidden size must be >= 1", fn);
  if (p->tokens > 1 && input->strides[0] < p->hidden)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: input.strides[0]=%" PRId64 " but it must be at least H=%" PRId64, fn,
                           input->strides[0], p->hidden);
  IGNIS_TRY(ignis_check_tensor(fn, "topk_ids", ids, 2, 2));
  IGNIS_TRY(ignis_check_dim(fn, "topk_ids", ids, 0, p->tokens, "input.shape[0] (tokens)"));
  IGNIS_TRY(ignis_check_index_dtype(fn, "topk_ids", ids));
  IGNIS_TRY(no_negative_strides(fn, "topk_ids", ids));
  p->top_k = ids->shape[1];
  if (p->top_k < 1 || p->top_k > IGNIS_MOE_MAX_TOP_K)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: topk_ids.shape[1]=%" PRId64 " but top_k must be in 1..%d", fn, p->top_k,
                           IGNIS_MOE_MAX_TOP_K);
  p->ids = ids->data;
  p->ids_dtype = ids->dtype;
  p->ids_stride_t = ids->strides[0];
  p->ids_stride_k = ids->strides[1];
  if (!weights) {
    if (ids->dtype != IGNIS_I32)
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "%s: topk_weights is NULL (packed routing) but topk_ids.dtype=%s: packed ids are i32", fn,
          ignis_dtype_name(ids->dtype));
    p->packed = 1;
    return IGNIS_OK;
  }
  IGNIS_TRY(ignis_check_tensor(fn, "topk_weights", weights, 2, 2));
  IGNIS_TRY(ignis_check_dim(fn, "topk_weights", weights, 0, p->tokens, "input.shape[0] (tokens)"));
  IGNIS_TRY(ignis_check_dim(fn, "topk_weights", weights, 1, p->top_k, "topk_ids.shape[1] (top_k)"));
  IGNIS_TRY(check_dtype(fn, "topk_weights", weights, IGNIS_F32, IGNIS_BF16, IGNIS_BF16, "f32 or bf16"));
  IGNIS_TRY(no_negative_strides(fn, "topk_weights", weights));
  p->weights = weights->data;
  p->weights_dtype = weights->dtype;
  p->weights_stride_t = weights->strides[0];
  p->weights_stride_k = weights->strides[1];
  return IGNIS_OK;
}

/* fc1 [E, N1, H] and fc2 [E, H, I]: the sizes E, I, N1 and the weight fields. */
static ignis_status check_experts(const char *fn, const ignis_fused_moe_weights *w,
                                  ignis_fused_moe_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "weights.fc1", w->fc1, 3, 3));
  IGNIS_TRY(ignis_check_tensor(fn, "weights.fc2", w->fc2, 3, 3));
  p->experts = w->fc1->shape[0];
  if (p->experts < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: weights.fc1.shape[0]=0 but there must be a local expert", fn);
  IGNIS_TRY(ignis_check_dim(fn, "weights.fc1", w->fc1, 2, p->hidden, "input.shape[1] (H)"));
  p->fc1_rows = w->fc1->shape[1];
  if (p->gated && p->fc1_rows % 2)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: weights.fc1.shape[1]=%" PRId64 " but a gated activation needs 2 * I rows", fn,
                           p->fc1_rows);
  p->inter = p->gated ? p->fc1_rows / 2 : p->fc1_rows;
  if (p->inter < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: weights.fc1.shape[1]=0 but I must be >= 1", fn);
  const int64_t fc2_shape[3] = {p->experts, p->hidden, p->inter};
  const char *const fc2_what[3] = {"fc1.shape[0] (E)", "input.shape[1] (H)",
                                   p->gated ? "fc1.shape[1] / 2 (I)" : "fc1.shape[1] (I)"};
  IGNIS_TRY(check_shape(fn, "weights.fc2", w->fc2, 3, fc2_shape, fc2_what));
  IGNIS_TRY(no_negative_strides(fn, "weights.fc1", w->fc1));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "weights.fc1", w->fc1));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "weights.fc2", w->fc2));
  IGNIS_TRY(ignis_check_same_dtype(fn, "weights.fc2", w->fc2, "weights.fc1", w->fc1));
  p->fc1 = w->fc1->data;
  p->fc2 = w->fc2->data;
  p->weight_dtype = w->fc1->dtype;
  p->fc1_stride_e = w->fc1->strides[0];
  p->fc1_stride_n = p->fc1_rows > 1 ? w->fc1->strides[1] : p->hidden;
  p->fc2_stride_e = w->fc2->strides[0];
  p->fc2_stride_n = p->hidden > 1 ? w->fc2->strides[1] : p->inter;
  if (p->fc1_stride_n < p->hidden || p->fc2_stride_n < p->inter)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: weights.%s.strides[1] is below its row length: rows "
                           "may not overlap",
                           fn, p->fc1_stride_n < p->hidden ? "fc1" : "fc2");
  const ignis_tensor *biases[2] = {w->fc1_bias, w->fc2_bias};
  const char *names[2] = {"weights.fc1_bias", "weights.fc2_bias"};
  const int64_t cols[2] = {p->fc1_rows, p->hidden};
  for (int i = 0; i < 2; ++i) {
    if (!biases[i])
      continue;
    const int64_t shape[2] = {p->experts, cols[i]};
    const char *const what[2] = {"fc1.shape[0] (E)", i ? "input.shape[1] (H)" : "fc1.shape[1] (N1)"};
    IGNIS_TRY(check_shape(fn, names[i], biases[i], 2, shape, what));
    IGNIS_TRY(ignis_check_float_dtype(fn, names[i], biases[i]));
    IGNIS_TRY(ignis_check_last_dim_contiguous(fn, names[i], biases[i]));
  }
  if (w->fc1_bias) {
    p->fc1_bias = w->fc1_bias->data;
    p->fc1_bias_dtype = w->fc1_bias->dtype;
    p->fc1_bias_stride_e = w->fc1_bias->strides[0];
  }
  if (w->fc2_bias) {
    p->fc2_bias = w->fc2_bias->data;
    p->fc2_bias_dtype = w->fc2_bias->dtype;
    p->fc2_bias_stride_e = w->fc2_bias->strides[0];
  }
  return IGNIS_OK;
}

/* The dtypes the quant mode takes, and its scales. */
static ignis_status check_quant(const char *fn, const ignis_tensor *input, const ignis_tensor *input_scale,
                                const ignis_fused_moe_weights *w, ignis_fused_moe_params *p) {
  const int e4m3_input = input->dtype == IGNIS_FP8_E4M3;
  if (p->quant == IGNIS_MOE_QUANT_NONE) {
    IGNIS_TRY(check_dtype(fn, "input", input, IGNIS_F16, IGNIS_BF16, IGNIS_BF16,
                          "f16 or bf16 (config.quant none)"));
    IGNIS_TRY(ignis_check_same_dtype(fn, "weights.fc1", w->fc1, "input", input));
  } else {
    IGNIS_TRY(check_dtype(fn, "weights.fc1", w->fc1, IGNIS_FP8_E4M3, IGNIS_FP8_E4M3, IGNIS_FP8_E4M3,
                          "fp8_e4m3 (config.quant fp8)"));
    if (p->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR)
      IGNIS_TRY(check_dtype(fn, "input", input, IGNIS_FP8_E4M3, IGNIS_FP8_E4M3, IGNIS_FP8_E4M3,
                            "fp8_e4m3 (config.quant fp8 per-tensor: the input comes quantized)"));
    else
      IGNIS_TRY(check_dtype(fn, "input", input, IGNIS_F16, IGNIS_BF16, IGNIS_FP8_E4M3,
                            "f16, bf16 or fp8_e4m3 (config.quant fp8 block)"));
  }
  if (p->quant != IGNIS_MOE_QUANT_FP8_PER_TENSOR) {
    IGNIS_TRY(
        absent(fn, "weights.fc1_gate_scale", w->fc1_gate_scale, "only the fp8 per-tensor mode reads it"));
    IGNIS_TRY(
        absent(fn, "weights.fc2_input_scale", w->fc2_input_scale, "only the fp8 per-tensor mode reads it"));
  }
  if (p->quant == IGNIS_MOE_QUANT_NONE) {
    IGNIS_TRY(absent(fn, "weights.fc1_scale", w->fc1_scale, "config.quant is none"));
    IGNIS_TRY(absent(fn, "weights.fc2_scale", w->fc2_scale, "config.quant is none"));
  }
  if (p->quant != IGNIS_MOE_QUANT_FP8_BLOCK || !e4m3_input)
    IGNIS_TRY(absent(fn, "input_scale", input_scale, "only an fp8 input of the fp8 block mode has one"));
  p->input = input->data;
  p->input_dtype = input->dtype;
  p->input_row_stride = p->tokens > 1 ? input->strides[0] : p->hidden;
  if (p->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR) {
    if (!w->fc1_scale || !w->fc2_scale)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: weights.%s is NULL but the fp8 per-tensor mode "
                             "needs the dequant scales [E]",
                             fn, w->fc1_scale ? "fc2_scale" : "fc1_scale");
    IGNIS_TRY(check_per_expert(fn, "weights.fc1_scale", w->fc1_scale, p->experts, &p->fc1_scale,
                               &p->fc1_scale_strides[0]));
    IGNIS_TRY(check_per_expert(fn, "weights.fc2_scale", w->fc2_scale, p->experts, &p->fc2_scale,
                               &p->fc2_scale_strides[0]));
    if (w->fc1_gate_scale) {
      if (!p->gated)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: weights.fc1_gate_scale is given but the activation is not gated", fn);
      IGNIS_TRY(check_per_expert(fn, "weights.fc1_gate_scale", w->fc1_gate_scale, p->experts,
                                 &p->fc1_gate_scale, &p->fc1_gate_scale_stride));
    }
    const ignis_tensor *q = w->fc2_input_scale;
    if (q) {
      IGNIS_TRY(ignis_check_tensor(fn, "weights.fc2_input_scale", q, 0, 1));
      IGNIS_TRY(check_dtype(fn, "weights.fc2_input_scale", q, IGNIS_F32, IGNIS_F32, IGNIS_F32, "f32"));
      const int64_t n = q->ndim ? q->shape[0] : 1;
      if (n != 1 && n != p->experts)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: weights.fc2_input_scale.shape[0]=%" PRId64
                               " but it must be 1 or E=%" PRId64,
                               fn, n, p->experts);
      IGNIS_TRY(no_negative_strides(fn, "weights.fc2_input_scale", q));
      p->fc2_input_scale = q->data;
      p->fc2_input_scale_stride = n == 1 ? 0 : q->strides[0];
    }
    return IGNIS_OK;
  }
  if (p->quant != IGNIS_MOE_QUANT_FP8_BLOCK)
    return IGNIS_OK;
  if (!w->fc1_scale || !w->fc2_scale)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: weights.%s is NULL but the fp8 block mode needs the "
                           "128x128 block scales",
                           fn, w->fc1_scale ? "fc2_scale" : "fc1_scale");
  const int64_t hb = ceil_div(p->hidden, IGNIS_MOE_GROUP), ib = ceil_div(p->inter, IGNIS_MOE_GROUP);
  const int64_t s1[3] = {p->experts, ceil_div(p->fc1_rows, IGNIS_MOE_GROUP), hb},
                s2[3] = {p->experts, hb, ib};
  const char *const w1[3] = {"E", "ceil(N1 / 128)", "ceil(H / 128)"}, *const w2[3] = {"E", "ceil(H / 128)",
                                                                                      "ceil(I / 128)"};
  IGNIS_TRY(check_shape(fn, "weights.fc1_scale", w->fc1_scale, 3, s1, w1));
  IGNIS_TRY(check_shape(fn, "weights.fc2_scale", w->fc2_scale, 3, s2, w2));
  IGNIS_TRY(check_dtype(fn, "weights.fc1_scale", w->fc1_scale, IGNIS_F32, IGNIS_F32, IGNIS_F32, "f32"));
  IGNIS_TRY(check_dtype(fn, "weights.fc2_scale", w->fc2_scale, IGNIS_F32, IGNIS_F32, IGNIS_F32, "f32"));
  p->fc1_scale = w->fc1_scale->data;
  p->fc2_scale = w->fc2_scale->data;
  for (int d = 0; d < 3; ++d) {
    p->fc1_scale_strides[d] = w->fc1_scale->strides[d];
    p->fc2_scale_strides[d] = w->fc2_scale->strides[d];
  }
  if (e4m3_input) {
    if (!input_scale)
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "%s: input_scale is NULL but an fp8 input needs its 1x128 scales [T, ceil(H / 128)]", fn);
    const int64_t s[2] = {p->tokens, hb};
    const char *const what[2] = {"input.shape[0] (T)", "ceil(H / 128)"};
    IGNIS_TRY(check_shape(fn, "input_scale", input_scale, 2, s, what));
    IGNIS_TRY(check_dtype(fn, "input_scale", input_scale, IGNIS_F32, IGNIS_F32, IGNIS_F32, "f32"));
    p->input_scale = input_scale->data;
    p->input_scale_stride_t = input_scale->strides[0];
    p->input_scale_stride_k = input_scale->strides[1];
  }
  return IGNIS_OK;
}

/* alpha / beta / limit: the Swiglu family only (SwigluStep: limit only). */
static ignis_status check_act_args(const char *fn, const ignis_fused_moe_weights *w,
                                   ignis_fused_moe_params *p) {
  const ignis_moe_activation act = p->activation;
  const int swiglu = act == IGNIS_MOE_ACT_SWIGLU || act == IGNIS_MOE_ACT_SWIGLU_BIAS;
  const int step = act == IGNIS_MOE_ACT_SWIGLU_STEP;
  const char *why = "only the Swiglu activations (Swiglu, SwigluBias; SwigluStep: act_limit) read it";
  if (!swiglu) {
    IGNIS_TRY(absent(fn, "weights.act_alpha", w->act_alpha, why));
    IGNIS_TRY(absent(fn, "weights.act_beta", w->act_beta, why));
    if (!step)
      IGNIS_TRY(absent(fn, "weights.act_limit", w->act_limit, why));
  }
  if (w->act_alpha)
    IGNIS_TRY(check_per_expert(fn, "weights.act_alpha", w->act_alpha, p->experts, &p->act_alpha,
                               &p->act_alpha_stride));
  if (w->act_beta)
    IGNIS_TRY(
        check_per_expert(fn, "weights.act_beta", w->act_beta, p->experts, &p->act_beta, &p->act_beta_stride));
  if (w->act_limit)
    IGNIS_TRY(check_per_expert(fn, "weights.act_limit", w->act_limit, p->experts, &p->act_limit,
                               &p->act_limit_stride));
  return IGNIS_OK;
}

static ignis_status check_out(const char *fn, const ignis_tensor *out, ignis_fused_moe_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 2, 2));
  const int64_t shape[2] = {p->tokens, p->hidden};
  const char *const what[2] = {"input.shape[0] (T)", "input.shape[1] (H)"};
  IGNIS_TRY(check_shape(fn, "out", out, 2, shape, what));
  IGNIS_TRY(ignis_check_float_dtype(fn, "out", out));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  if (p->tokens > 1 && out->strides[0] < p->hidden)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: out.strides[0]=%" PRId64 " but it must be at least H=%" PRId64, fn,
                           out->strides[0], p->hidden);
  p->out = out->data;
  p->out_dtype = out->dtype;
  p->out_row_stride = p->tokens > 1 ? out->strides[0] : p->hidden;
  return IGNIS_OK;
}

/* The dtypes of the pipeline's stages, from the input, out and the quant mode. */
static void set_dtypes(ignis_fused_moe_params *p) {
  p->work_dtype = ignis_moe_work_dtype(p->input_dtype, p->out_dtype);
  p->a1_dtype = p->quant == IGNIS_MOE_QUANT_NONE ? p->work_dtype : IGNIS_FP8_E4M3;
  p->a2_dtype = p->a1_dtype;
}

ignis_status ignis_fused_moe_workspace_size(int64_t max_tokens, int64_t top_k, int64_t num_local_experts,
                                            int64_t hidden_size, int64_t intermediate_size,
                                            ignis_dtype input_dtype, ignis_dtype out_dtype,
                                            const ignis_fused_moe_config *config, size_t *bytes) {
  const char *fn = "ignis_fused_moe_workspace_size";
  ignis_clear_error();
  if (!bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  ignis_fused_moe_config c;
  IGNIS_TRY(read_config(fn, config, &c));
  if (max_tokens < 0 || top_k < 1 || top_k > IGNIS_MOE_MAX_TOP_K || num_local_experts < 1 ||
      hidden_size < 1 || intermediate_size < 1)
    return ignis_set_error(
        IGNIS_ERROR_INVALID_ARGUMENT,
        "%s: max_tokens=%" PRId64 ", top_k=%" PRId64 ", num_local_experts=%" PRId64 ", hidden_size=%" PRId64
        ", intermediate_size=%" PRId64 ": need max_tokens >= 0, top_k in 1..%d and the sizes >= 1",
        fn, max_tokens, top_k, num_local_experts, hidden_size, intermediate_size, IGNIS_MOE_MAX_TOP_K);
  if (ignis_dtype_size(input_dtype) == 0 || ignis_dtype_size(out_dtype) == 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: input_dtype=%d or out_dtype=%d is not a dtype",
                           fn, (int)input_dtype, (int)out_dtype);
  if (max_tokens > INT32_MAX / top_k)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: max_tokens * top_k past 2^31 rows", fn);
  ignis_fused_moe_params p = {0};
  p.tokens = max_tokens;
  p.top_k = top_k;
  p.experts = num_local_experts;
  p.hidden = hidden_size;
  p.inter = intermediate_size;
  p.gated = ignis_moe_is_gated(c.activation);
  p.fc1_rows = p.gated ? 2 * intermediate_size : intermediate_size;
  p.quant = c.quant;
  p.input_dtype = input_dtype;
  p.out_dtype = out_dtype;
  set_dtypes(&p);
  set_tiles(&p);
  ignis_workspace ws = ignis_workspace_counting();
  IGNIS_TRY(ignis_moe_carve(&ws, fn, &p));
  *bytes = ignis_workspace_required(&ws);
  return IGNIS_OK;
}

ignis_status ignis_fused_moe(const ignis_tensor *input, const ignis_tensor *input_scale,
                             const ignis_tensor *topk_ids, const ignis_tensor *topk_weights,
                             const ignis_fused_moe_weights *weights, const ignis_fused_moe_config *config,
                             void *workspace, size_t workspace_bytes, ignis_tensor *out, void *stream) {
  const char *fn = "ignis_fused_moe";
  ignis_clear_error();
  ignis_fused_moe_config c;
  IGNIS_TRY(read_config(fn, config, &c));
  if (!weights)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: weights is NULL", fn);
  static const ignis_fused_moe_weights no_weights = IGNIS_FUSED_MOE_WEIGHTS_INIT;
  ignis_fused_moe_weights w;
  IGNIS_TRY(ignis_read_config(fn, "weights.size", "IGNIS_FUSED_MOE_WEIGHTS_INIT", &w, &no_weights, weights,
                              sizeof w, IGNIS_CONFIG_END(ignis_fused_moe_weights, act_limit)));
  ignis_fused_moe_params p = {0};
  p.activation = c.activation;
  p.quant = c.quant;
  p.gated = ignis_moe_is_gated(c.activation);
  p.gate_first = c.gate_first;
  p.accumulate = c.accumulate;
  p.expert_offset = c.local_expert_offset;
  IGNIS_TRY(check_routing(fn, input, topk_ids, topk_weights, &p));
  IGNIS_TRY(check_experts(fn, &w, &p));
  IGNIS_TRY(check_quant(fn, input, input_scale, &w, &p));
  IGNIS_TRY(check_act_args(fn, &w, &p));
  IGNIS_TRY(check_out(fn, out, &p));
  p.add_fc2_bias = p.fc2_bias && c.tp_rank == 0;
  if (p.tokens > INT32_MAX / p.top_k)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: tokens * top_k past 2^31 rows", fn);
  set_dtypes(&p);
  set_tiles(&p);

  ignis_tensor ws_tensor;
  const int64_t ws_shape[1] = {(int64_t)workspace_bytes};
  ignis_tensor_init(&ws_tensor, workspace, IGNIS_U8, 1, ws_shape, input->device);
  const ignis_tensor *tensors[] = {input,
                                   input_scale,
                                   topk_ids,
                                   topk_weights,
                                   w.fc1,
                                   w.fc2,
                                   w.fc1_bias,
                                   w.fc2_bias,
                                   w.fc1_scale,
                                   w.fc2_scale,
                                   w.fc1_gate_scale,
                                   w.fc2_input_scale,
                                   w.act_alpha,
                                   w.act_beta,
                                   w.act_limit,
                                   out,
                                   workspace ? &ws_tensor : NULL};
  const char *names[] = {"input",
                         "input_scale",
                         "topk_ids",
                         "topk_weights",
                         "weights.fc1",
                         "weights.fc2",
                         "weights.fc1_bias",
                         "weights.fc2_bias",
                         "weights.fc1_scale",
                         "weights.fc2_scale",
                         "weights.fc1_gate_scale",
                         "weights.fc2_input_scale",
                         "weights.act_alpha",
                         "weights.act_beta",
                         "weights.act_limit",
                         "out",
                         "workspace"};
  const int count = (int)(sizeof tensors / sizeof tensors[0]);
  for (int i = 0; i < count; ++i)
    if (tensors[i] && tensors[i] != out)
      IGNIS_TRY(ignis_check_disjoint(fn, "out", out, names[i], tensors[i]));
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, count, &target));
  if (p.tokens == 0)
    return IGNIS_OK;
  if (!workspace) { /* ignis_workspace_over(NULL) would count instead of carve */
    ignis_workspace need = ignis_workspace_counting();
    IGNIS_TRY(ignis_moe_carve(&need, fn, &p));
    return ignis_set_error(IGNIS_ERROR_INSUFFICIENT_WORKSPACE,
                           "%s: workspace is NULL but %" PRId64
                           " tokens need %zu bytes (ignis_fused_moe_workspace_size)",
                           fn, p.tokens, ignis_workspace_required(&need));
  }
  ignis_workspace ws = ignis_workspace_over(workspace, workspace_bytes);
  IGNIS_TRY(ignis_moe_carve(&ws, fn, &p));
  return target.backend->fused_moe(&p, target.device.id, stream);
}
