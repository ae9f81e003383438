/* Front end of prefill attention (include/ignis/prefill.h): single prefill, and the batch prefill
 * plan (create / workspace size / update / ragged run / paged run / destroy).
 *
 * It mirrors op_decode.c: validation names every parameter and nothing is written before all of it
 * has passed; the device workspace (what a run writes and reads within itself) is carved by one
 * function per entry point, in counting mode for the size query and over the caller's buffer for
 * the run:
 *   batch prefill:  partial_out [max_partials * Hkv * q_tile_rows, head_dim_vo] f32 | partial_lse
 *                   [max_partials * Hkv * q_tile_rows] f32
 *   single prefill: partial_out / partial_lse for the most slots any device uses (none when the
 *                   longest key length is never split)
 * The plan storage (core/attention_plan.h) keeps the schedule (sched/prefill_plan.h): device plans
 * upload it into their own device memory through a staging ring (pinned buffers, one asynchronous
 * copy per update, a wait only when a slot's previous copy has not run) and the run only reads it;
 * host-memory plans keep it on the host and remember the planned lengths, which the run checks
 * against the index arrays it gets. Single prefill plans its split on the host and passes it as the implicit schedule
 * (core/params.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_common.h"
#include "core/attention_plan.h"
#include "core/backend.h"
#include "core/config.h"
#include "core/paged_kv_check.h"
#include "core/validate.h"
#include "core/workspace.h"
#include "ignis/prefill.h"
#include "sched/prefill_plan.h"

struct ignis_prefill_plan {
  ignis_prefill_plan_config config;
  ignis_attention_resolved options;
  ignis_prefill_planner planner;
  ignis_attention_kernel kernel; /* the backend's choice at plan creation; every run takes it */
  size_t schedule_bytes;
  ignis_plan_storage storage;
  int32_t *planned_kv_indptr; /* plans without a workspace: [max_batch + 1] */
  int32_t *planned_kv_len;    /* and [max_batch] */
  /* the last successful update */
  int updated;
  int64_t batch_size;
  int64_t q_rows;     /* qo_indptr[B]: q / out need at least this many rows */
  int64_t kv_rows;    /* ragged: kv_indptr[B] */
  int64_t mask_bytes; /* custom mask bytes of the batch */
};

int64_t ignis_prefill_mask_bytes(int64_t q_len, int64_t kv_len) {
  return (q_len * kv_len + 7) / 8;
}

/* (64, 64), (128, 128), (256, 256), (512, 512), (192, 128). */
static ignis_status check_head_dims(const char *fn, const char *qk_what, int64_t head_dim_qk, const char *vo_what,
                                    int64_t head_dim_vo) {
  if (head_dim_qk <= 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%" PRId64 " but it must be positive", fn, qk_what,
                           head_dim_qk);
  if (head_dim_vo <= 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%" PRId64 " but it must be positive", fn, vo_what,
                           head_dim_vo);
  int same = head_dim_qk == head_dim_vo &&
             (head_dim_qk == 64 || head_dim_qk == 128 || head_dim_qk == 256 || head_dim_qk == 512);
  if (same || (head_dim_qk == 192 && head_dim_vo == 128))
    return IGNIS_OK;
  return ignis_set_error(
      IGNIS_ERROR_UNSUPPORTED,
      "%s: %s=%" PRId64 " with %s=%" PRId64
      " has no compiled kernel ((64, 64), (128, 128), (256, 256), (512, 512) or (192, 128))",
      fn, qk_what, head_dim_qk, vo_what, head_dim_vo);
}

static ignis_status check_mask_mode(const char *fn, const char *name, ignis_mask_mode mode) {
  if (mode == IGNIS_MASK_NONE || mode == IGNIS_MASK_CAUSAL || mode == IGNIS_MASK_CUSTOM)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%d is not an ignis_mask_mode", fn, name, (int)mode);
}

/* custom_mask: given exactly with IGNIS_MASK_CUSTOM, 1-D u8 stride 1, at least `bytes` long. */
static ignis_status check_custom_mask(const char *fn, ignis_mask_mode mode, const ignis_tensor *mask, int64_t bytes) {
  if (mode != IGNIS_MASK_CUSTOM) {
    if (mask)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: custom_mask is given but the mask mode is not IGNIS_MASK_CUSTOM", fn);
    return IGNIS_OK;
  }
  if (!mask)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: custom_mask is NULL but the mask mode is IGNIS_MASK_CUSTOM",
                           fn);
  IGNIS_TRY(ignis_check_tensor(fn, "custom_mask", mask, 1, 1));
  if (mask->dtype != IGNIS_U8)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: custom_mask.dtype=%s but it must be u8 (bit-packed)", fn,
                           ignis_dtype_name(mask->dtype));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "custom_mask", mask));
  if (mask->shape[0] < bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: custom_mask.shape[0]=%" PRId64 " but the batch's bit-packed masks need %" PRId64
                           " bytes",
                           fn, mask->shape[0], bytes);
  return IGNIS_OK;
}

/* q [rows, num_qo_heads, head_dim_qk]; out [rows, num_qo_heads, head_dim_vo] of out_dtype (q's, or
 * a plan's o_dtype); lse [rows, num_qo_heads] or NULL; last dimensions contiguous; outputs disjoint
 * from q. */
static ignis_status check_q_out(const char *fn, const ignis_tensor *q, const ignis_tensor *out,
                                const ignis_tensor *lse, int64_t head_dim_vo, ignis_dtype out_dtype) {
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 3, 3));
  IGNIS_TRY(ignis_check_attention_out_dtype(fn, out, q, out_dtype));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, 0, q->shape[0], "q.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, 1, q->shape[1], "q.shape[1]"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, 2, head_dim_vo, "head_dim_vo"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "q", q));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  IGNIS_TRY(ignis_check_disjoint(fn, "out", out, "q", q));
  return ignis_check_attention_lse(fn, lse, q, out);
}

/* Outputs disjoint from the keys, values and mask. */
static ignis_status check_outputs_disjoint(const char *fn, const ignis_tensor *out, const ignis_tensor *lse,
                                           const ignis_tensor *k, const char *k_name, const ignis_tensor *v,
                                           const char *v_name, const ignis_tensor *mask) {
  const ignis_tensor *inputs[] = {k, v, mask};
  const char *names[] = {k_name, v_name, "custom_mask"};
  for (int i = 0; i < 3; ++i) {
    if (!inputs[i])
      continue;
    IGNIS_TRY(ignis_check_disjoint(fn, "out", out, names[i], inputs[i]));
    if (lse)
      IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, names[i], inputs[i]));
  }
  return IGNIS_OK;
}

/* Contiguous (single) or ragged K / V: NHD [tokens, heads, dim] or HND [heads, tokens, dim]; same
 * dtype, token count and heads; K's dim head_dim_qk (checked by the caller), V's head_dim_vo. */
static ignis_status check_kv_pair(const char *fn, const ignis_tensor *k, const ignis_tensor *v, ignis_kv_layout layout,
                                  int64_t head_dim_qk, int64_t head_dim_vo, ignis_paged_kv_params *c) {
  if (layout != IGNIS_KV_LAYOUT_NHD && layout != IGNIS_KV_LAYOUT_HND)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: layout=%d is not an ignis_kv_layout", fn, (int)layout);
  int nhd = layout == IGNIS_KV_LAYOUT_NHD, token_dim = nhd ? 0 : 1, head_index = nhd ? 1 : 0;
  IGNIS_TRY(ignis_check_tensor(fn, "k", k, 3, 3));
  IGNIS_TRY(ignis_check_tensor(fn, "v", v, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "v", v, "k", k));
  IGNIS_TRY(ignis_check_dim(fn, "k", k, 2, head_dim_qk, "head_dim_qk"));
  IGNIS_TRY(ignis_check_dim(fn, "v", v, token_dim, k->shape[token_dim], nhd ? "k.shape[0]" : "k.shape[1]"));
  IGNIS_TRY(ignis_check_dim(fn, "v", v, head_index, k->shape[head_index], nhd ? "k.shape[1]" : "k.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "v", v, 2, head_dim_vo, "head_dim_vo"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "k", k));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "v", v));
  if (k->shape[token_dim] > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: k.shape[%d]=%" PRId64 " keys but at most %d are taken",
                           fn, token_dim, k->shape[token_dim], INT32_MAX);
  memset(c, 0, sizeof *c);
  c->num_pages = 1;
  c->page_size = k->shape[token_dim];
  c->num_kv_heads = k->shape[head_index];
  c->head_dim = head_dim_qk;
  c->batch_size = 1;
  c->dtype = k->dtype;
  c->k_cache = k->data;
  c->k_stride_token = k->strides[token_dim];
  c->k_stride_head = k->strides[head_index];
  c->v_cache = v->data;
  c->v_stride_token = v->strides[token_dim];
  c->v_stride_head = v->strides[head_index];
  return IGNIS_OK;
}

static void fill_options(ignis_prefill_params *p, const ignis_attention_resolved *o) {
  p->lse_scale = o->lse_scale;
  p->sm_scale_log2 = o->sm_scale_log2;
  p->logits_soft_cap = o->logits_soft_cap;
  p->window_left = o->window_left;
  p->pos_encoding = o->pos_encoding;
  p->rope_rcp_scale = o->rope_rcp_scale;
  p->rope_log2_theta = o->rope_log2_theta;
}

static void fill_q_out(ignis_prefill_params *p, const ignis_tensor *q, ignis_tensor *out, ignis_tensor *lse) {
  p->num_qo_heads = q->shape[1];
  p->head_dim_qk = q->shape[2];
  p->head_dim_vo = out->shape[2];
  p->dtype = out->dtype; /* the kernels compute in out's dtype; an fp8 q is converted to it */
  p->q_dtype = q->dtype;
  p->q = q->data;
  p->q_stride_token = q->strides[0];
  p->q_stride_head = q->strides[1];
  p->out = out->data;
  p->out_stride_token = out->strides[0];
  p->out_stride_head = out->strides[1];
  if (lse) {
    p->lse = (float *)lse->data;
    p->lse_stride_token = lse->strides[0];
    p->lse_stride_head = lse->strides[1];
  }
}

/* f32 partial slots: rows = slots * num_kv_heads * q_tile_rows; nothing when rows == 0. */
static ignis_status carve_partials(ignis_workspace *ws, const char *fn, int64_t rows, int64_t head_dim_vo,
                                   float **partial_out, float **partial_lse) {
  *partial_out = *partial_lse = NULL;
  if (rows == 0)
    return IGNIS_OK;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "partial_out", rows * head_dim_vo, sizeof(float), (void **)partial_out));
  return ignis_workspace_take(ws, fn, "partial_lse", rows, sizeof(float), (void **)partial_lse);
}

/* The kernel of a call of this shape (dtypes, head dims, mask mode and options pick it) and its
 * wave, as the device's backend chooses. */
static ignis_kernel_choice prefill_choice(ignis_device device, ignis_dtype q_dtype, ignis_dtype kv_dtype,
                                          int64_t head_dim_qk, int64_t head_dim_vo, ignis_mask_mode mask_mode,
                                          const ignis_attention_resolved *opt) {
  ignis_prefill_params shape;
  memset(&shape, 0, sizeof shape);
  shape.dtype = q_dtype;
  shape.cache.dtype = kv_dtype;
  shape.head_dim_qk = head_dim_qk;
  shape.head_dim_vo = head_dim_vo;
  shape.mask_mode = mask_mode;
  fill_options(&shape, opt);
  ignis_kernel_choice choice;
  ignis_backend_for(device.type)->prefill_choose(&shape, device.id, &choice);
  return choice;
}

/* ---- single prefill ------------------------------------------------------------------------- */
static int64_t single_partial_rows(int64_t max_kv_len, int64_t num_kv_heads, int64_t head_dim_qk,
                                   int64_t head_dim_vo) {
  return ignis_prefill_single_max_partials(max_kv_len, num_kv_heads) * num_kv_heads *
         ignis_prefill_q_tile_rows(head_dim_qk, head_dim_vo);
}

ignis_status ignis_single_prefill_workspace_size(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim_qk,
                                                 int64_t head_dim_vo, int64_t max_qo_len, int64_t max_kv_len,
                                                 size_t *bytes) {
  static const char fn[] = "ignis_single_prefill_workspace_size";
  ignis_clear_error();
  if (!bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  IGNIS_TRY(ignis_check_attention_heads(fn, "num_qo_heads", num_qo_heads, "num_kv_heads", num_kv_heads));
  IGNIS_TRY(check_head_dims(fn, "head_dim_qk", head_dim_qk, "head_dim_vo", head_dim_vo));
  if (max_qo_len < 0 || max_qo_len > INT32_MAX / (num_qo_heads / num_kv_heads))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: max_qo_len=%" PRId64 " is out of range", fn,
                           max_qo_len);
  if (max_kv_len < 0 || max_kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: max_kv_len=%" PRId64 " but it must be 0..%d", fn,
                           max_kv_len, INT32_MAX);
  ignis_workspace ws = ignis_workspace_counting();
  float *partial_out, *partial_lse;
  IGNIS_TRY(carve_partials(&ws, fn, single_partial_rows(max_kv_len, num_kv_heads, head_dim_qk, head_dim_vo),
                           head_dim_vo, &partial_out, &partial_lse));
  *bytes = ignis_attention_required_bytes(&ws);
  return IGNIS_OK;
}

ignis_status ignis_single_prefill(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                  ignis_kv_layout layout, ignis_mask_mode mask_mode, const ignis_tensor *custom_mask,
                                  const ignis_attention_options *options, const ignis_attention_extras *extras,
                                  ignis_tensor *out, ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                  void *stream) {
  static const char fn[] = "ignis_single_prefill";
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "q", q, 3, 3));
  IGNIS_TRY(ignis_check_attention_dtype(fn, "q.dtype", q->dtype));
  ignis_prefill_params p;
  memset(&p, 0, sizeof p);
  int64_t head_dim_qk = q->shape[2], head_dim_vo = v ? (v->ndim == 3 ? v->shape[2] : 0) : 0;
  IGNIS_TRY(check_kv_pair(fn, k, v, layout, head_dim_qk, head_dim_vo, &p.cache));
  IGNIS_TRY(ignis_check_attention_kv_dtype(fn, "k.dtype", k->dtype, "q.dtype", q->dtype));
  int64_t qo_len = q->shape[0], num_qo_heads = q->shape[1], num_kv_heads = p.cache.num_kv_heads;
  int64_t kv_len = p.cache.page_size;
  IGNIS_TRY(ignis_check_attention_heads(fn, "q.shape[1] (num_qo_heads)", num_qo_heads, "num_kv_heads (k)",
                                        num_kv_heads));
  if (qo_len > INT32_MAX / (num_qo_heads / num_kv_heads))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: q.shape[0]=%" PRId64 " query tokens is too many", fn,
                           qo_len);
  IGNIS_TRY(check_q_out(fn, q, out, lse, head_dim_vo, q->dtype));
  IGNIS_TRY(check_mask_mode(fn, "mask_mode", mask_mode));
  IGNIS_TRY(check_custom_mask(fn, mask_mode, custom_mask, ignis_prefill_mask_bytes(qo_len, kv_len)));
  IGNIS_TRY(check_outputs_disjoint(fn, out, lse, k, "k", v, "v", custom_mask));
  ignis_attention_resolved opt;
  IGNIS_TRY(ignis_check_attention_options(fn, "options", options, head_dim_qk, &opt));
  IGNIS_TRY(check_head_dims(fn, "q.shape[2] (head_dim_qk)", head_dim_qk, "v.shape[2] (head_dim_vo)", head_dim_vo));
  IGNIS_TRY(ignis_check_attention_extras(fn, extras, num_qo_heads, &p.k_scale, &p.v_scale, &p.sinks));
  const ignis_tensor *tensors[] = {q, k, v, custom_mask, out, lse, extras ? extras->sinks : NULL};
  const char *names[] = {"q", "k", "v", "custom_mask", "out", "lse", "extras.sinks"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 7, &target));
  const int scratch = !target.backend->host_memory; /* split partials in the workspace */

  int64_t group = num_qo_heads / num_kv_heads, tile = ignis_prefill_q_tile_rows(head_dim_qk, head_dim_vo);
  const ignis_kernel_choice choice =
      prefill_choice(target.device, q->dtype, k->dtype, head_dim_qk, head_dim_vo, mask_mode, &opt);
  int64_t chunk = ignis_prefill_single_chunk_tokens(qo_len, kv_len, group, num_kv_heads, tile, choice.wave);
  int64_t tiles = ignis_prefill_implicit_tiles(qo_len, group, tile);
  int64_t chunks = ignis_prefill_implicit_chunks(kv_len, chunk);
  if (scratch) {
    ignis_workspace ws = workspace ? ignis_workspace_over(workspace, workspace_bytes) : ignis_workspace_counting();
    float *partial_out, *partial_lse;
    IGNIS_TRY(carve_partials(&ws, fn, single_partial_rows(kv_len, num_kv_heads, head_dim_qk, head_dim_vo),
                             head_dim_vo, &partial_out, &partial_lse));
    if (!workspace && ws.offset)
      return ignis_attention_missing_workspace(fn, &ws);
    if (chunks > 1) {
      p.partial_out = partial_out;
      p.partial_lse = partial_lse;
    }
  }
  fill_q_out(&p, q, out, lse);
  p.num_kv_heads = num_kv_heads;
  fill_options(&p, &opt);
  p.mask_mode = mask_mode;
  p.custom_mask = custom_mask ? (const uint8_t *)custom_mask->data : NULL;
  p.kv_source = IGNIS_PREFILL_KV_CONTIGUOUS;
  p.q_tile_rows = (int32_t)tile;
  p.kernel = (int32_t)choice.kernel;
  p.max_batch = 1;
  p.max_work = tiles * chunks;
  p.max_merge = chunks > 1 ? tiles : 0;
  p.implicit_chunk_tokens = chunk;
  p.contiguous_q_len = qo_len;
  p.contiguous_kv_len = kv_len;
  if (qo_len == 0)
    return IGNIS_OK;
  return target.backend->prefill(&p, target.device.id, stream);
}

/* ---- batch prefill: plan ---------------------------------------------------------------------- */
/* The caller's config read over the defaults into *c (core/config.h), then checked. */
static ignis_status check_config(const char *fn, const ignis_prefill_plan_config *caller, ignis_prefill_plan_config *c, ignis_attention_resolved *opt) {
  static const ignis_prefill_plan_config defaults = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  if (!caller)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL", fn);
  IGNIS_TRY(ignis_read_config(fn, "config.size", "IGNIS_PREFILL_PLAN_CONFIG_INIT", c, &defaults, caller, sizeof *c,
                              IGNIS_CONFIG_END(ignis_prefill_plan_config, options)));
  IGNIS_TRY(ignis_check_plan_device(fn, c->device));
  if (c->kv_kind != IGNIS_PREFILL_RAGGED && c->kv_kind != IGNIS_PREFILL_PAGED)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.kv_kind=%d is not an ignis_prefill_kv_kind", fn,
                           (int)c->kv_kind);
  if (c->kv_layout != IGNIS_KV_LAYOUT_NHD && c->kv_layout != IGNIS_KV_LAYOUT_HND)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.kv_layout=%d is not an ignis_kv_layout", fn,
                           (int)c->kv_layout);
  IGNIS_TRY(ignis_check_attention_heads(fn, "config.num_qo_heads", c->num_qo_heads, "config.num_kv_heads",
                                        c->num_kv_heads));
  if (c->kv_kind == IGNIS_PREFILL_PAGED)
    IGNIS_TRY(ignis_check_page_size(fn, "config.page_size", c->page_size));
  IGNIS_TRY(ignis_check_attention_plan_dtypes(fn, c->q_dtype, c->kv_dtype, c->o_dtype, &c->o_dtype));
  IGNIS_TRY(check_mask_mode(fn, "config.mask_mode", c->mask_mode));
  if (c->max_batch_size < 1 || c->max_batch_size >= INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.max_batch_size=%" PRId64 " but it must be 1..%d",
                           fn, c->max_batch_size, INT32_MAX - 1);
  int64_t group = c->num_qo_heads / c->num_kv_heads;
  if (c->max_qo_tokens < 1 || c->max_qo_tokens > INT32_MAX / group)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_qo_tokens=%" PRId64 " but it must be 1..%" PRId64
                           " (INT32_MAX / the GQA group)",
                           fn, c->max_qo_tokens, (int64_t)INT32_MAX / group);
  if (c->max_kv_len < 0 || c->max_kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.max_kv_len=%" PRId64 " but it must be 0..%d", fn,
                           c->max_kv_len, INT32_MAX);
  if (c->disable_split_kv != 0 && c->disable_split_kv != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.disable_split_kv=%d but it must be 0 or 1", fn,
                           (int)c->disable_split_kv);
  if (c->fixed_split_size < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.fixed_split_size=%" PRId64 " but it must be >= 0",
                           fn, c->fixed_split_size);
  int64_t head_dim_vo = c->head_dim_vo ? c->head_dim_vo : c->head_dim_qk;
  IGNIS_TRY(ignis_check_attention_options(fn, "config.options", &c->options, c->head_dim_qk, opt));
  IGNIS_TRY(check_head_dims(fn, "config.head_dim_qk", c->head_dim_qk, "config.head_dim_vo", head_dim_vo));
  if (c->kv_kind == IGNIS_PREFILL_PAGED && head_dim_vo != c->head_dim_qk)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.head_dim_vo=%" PRId64 " differs from config.head_dim_qk=%" PRId64
                           ": paged caches take one head dim (use a ragged plan)",
                           fn, head_dim_vo, c->head_dim_qk);
  return IGNIS_OK;
}

ignis_status ignis_prefill_plan_destroy(ignis_prefill_plan *plan) {
  ignis_clear_error();
  if (!plan)
    return IGNIS_OK;
  ignis_plan_storage_destroy(&plan->storage);
  ignis_clear_error();
  free(plan->planned_kv_indptr);
  free(plan->planned_kv_len);
  free(plan);
  return IGNIS_OK;
}

ignis_status ignis_prefill_plan_create(const ignis_prefill_plan_config *config, ignis_prefill_plan **out_plan) {
  static const char fn[] = "ignis_prefill_plan_create";
  ignis_clear_error();
  if (!out_plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out_plan is NULL", fn);
  ignis_attention_resolved options;
  ignis_prefill_plan_config read;
  IGNIS_TRY(check_config(fn, config, &read, &options));
  config = &read;
  const ignis_prefill_plan_config *c = config;
  int64_t head_dim_vo = c->head_dim_vo ? c->head_dim_vo : c->head_dim_qk;
  int64_t page_size = c->kv_kind == IGNIS_PREFILL_PAGED ? c->page_size : 1;
  const ignis_kernel_choice choice =
      prefill_choice(c->device, c->o_dtype, c->kv_dtype, c->head_dim_qk, head_dim_vo, c->mask_mode, &options);
  ignis_prefill_planner planner;
  if (ignis_prefill_planner_init(&planner, c->max_batch_size, c->max_qo_tokens, c->max_kv_len, page_size,
                                 c->num_kv_heads, c->num_qo_heads / c->num_kv_heads,
                                 ignis_prefill_q_tile_rows(c->head_dim_qk, head_dim_vo),
                                 c->mask_mode == IGNIS_MASK_CAUSAL, c->options.window_left, choice.wave,
                                 c->disable_split_kv, c->fixed_split_size) != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_batch_size=%" PRId64 ", config.max_qo_tokens=%" PRId64
                           ", config.max_kv_len=%" PRId64 " and config.fixed_split_size=%" PRId64
                           " need more than %d work items",
                           fn, c->max_batch_size, c->max_qo_tokens, c->max_kv_len, c->fixed_split_size, INT32_MAX);
  ignis_prefill_plan *plan = calloc(1, sizeof *plan);
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  plan->config = *c;
  plan->config.size = sizeof(ignis_prefill_plan_config);
  plan->config.head_dim_vo = head_dim_vo;
  plan->config.page_size = page_size;
  plan->options = options;
  plan->planner = planner;
  plan->kernel = choice.kernel;
  plan->schedule_bytes = ignis_prefill_schedule_bytes(&planner);
  ignis_status status = ignis_plan_storage_create(&plan->storage, fn, c->device, plan->schedule_bytes, 0);
  const int keeps_lengths = status == IGNIS_OK && !ignis_plan_uses_workspace(&plan->storage);
  if (keeps_lengths) {
    plan->planned_kv_indptr = malloc(sizeof(int32_t) * (size_t)(c->max_batch_size + 1));
    plan->planned_kv_len = malloc(sizeof(int32_t) * (size_t)c->max_batch_size);
  }
  if (keeps_lengths && (!plan->planned_kv_indptr || !plan->planned_kv_len))
    status = ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  if (status != IGNIS_OK) {
    char message[512];
    snprintf(message, sizeof message, "%s", ignis_last_error());
    ignis_prefill_plan_destroy(plan);
    return ignis_set_error(status, "%s", message);
  }
  *out_plan = plan;
  return IGNIS_OK;
}

/* Where the pieces of a plan's workspace are (NULL in counting mode). */
typedef struct plan_pieces {
  void *q_scratch;
  float *partial_out;
  float *partial_lse;
} plan_pieces;

/* The plan's workspace: an fp8 q's converted copy (core/params.h: q_scratch; its rows start at 0,
 * so such plans take batches whose qo_indptr starts at 0), then the partial rows. */
static ignis_status carve_plan(ignis_workspace *ws, const char *fn, const ignis_prefill_plan *plan,
                               plan_pieces *pieces) {
  const ignis_prefill_planner *pl = &plan->planner;
  const ignis_prefill_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_attention_carve_q_scratch(ws, fn, c->q_dtype, c->o_dtype,
                                            c->max_qo_tokens * c->num_qo_heads * c->head_dim_qk, &pieces->q_scratch));
  return carve_partials(ws, fn, pl->max_partials * pl->num_kv_heads * pl->q_tile_rows, plan->config.head_dim_vo,
                        &pieces->partial_out, &pieces->partial_lse);
}

ignis_status ignis_prefill_workspace_size(const ignis_prefill_plan *plan, size_t *bytes) {
  static const char fn[] = "ignis_prefill_workspace_size";
  ignis_clear_error();
  if (!plan || !bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, plan ? "bytes" : "plan");
  if (!ignis_plan_uses_workspace(&plan->storage)) {
    *bytes = 0;
    return IGNIS_OK;
  }
  ignis_workspace ws = ignis_workspace_counting();
  plan_pieces pieces;
  IGNIS_TRY(carve_plan(&ws, fn, plan, &pieces));
  *bytes = ignis_attention_required_bytes(&ws);
  return IGNIS_OK;
}

static ignis_status open_plan_workspace(const char *fn, const ignis_prefill_plan *plan, void *workspace,
                                        size_t workspace_bytes, plan_pieces *pieces) {
  ignis_workspace ws = workspace ? ignis_workspace_over(workspace, workspace_bytes) : ignis_workspace_counting();
  IGNIS_TRY(carve_plan(&ws, fn, plan, pieces));
  if (!workspace)
    return ws.offset ? ignis_attention_missing_workspace(fn, &ws) : IGNIS_OK;
  return ignis_plan_check_workspace(&plan->storage, fn, workspace);
}

static int64_t planned_kv_len(const ignis_prefill_plan *plan, const int32_t *kv_indptr,
                              const int32_t *kv_last_page_len, int64_t b) {
  if (plan->config.kv_kind == IGNIS_PREFILL_RAGGED)
    return (int64_t)kv_indptr[b + 1] - kv_indptr[b]; /* the rows are the keys */
  return ignis_paged_request_len(kv_indptr, kv_last_page_len, b, plan->config.page_size);
}

/* Host index arrays of an update: shapes of the contents, and the plan's maxima. */
static ignis_status check_update_arrays(const char *fn, const ignis_prefill_plan *plan, const int32_t *qo_indptr,
                                        const int32_t *kv_indptr, const int32_t *kv_last_page_len,
                                        int64_t batch_size, int64_t *mask_bytes) {
  const ignis_prefill_plan_config *c = &plan->config;
  int paged = c->kv_kind == IGNIS_PREFILL_PAGED;
  if (!qo_indptr)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: qo_indptr_host is NULL", fn);
  if (!kv_indptr)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: kv_indptr_host is NULL", fn);
  if (paged && !kv_last_page_len && batch_size > 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: kv_last_page_len_host is NULL", fn);
  if (!paged && kv_last_page_len)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: kv_last_page_len_host is given but the plan is ragged (pass NULL)", fn);
  IGNIS_TRY(ignis_check_indptr_contents(fn, "qo_indptr_host", qo_indptr, batch_size, INT32_MAX, "INT32_MAX"));
  IGNIS_TRY(ignis_check_indptr_contents(fn, "kv_indptr_host", kv_indptr, batch_size, INT32_MAX, "INT32_MAX"));
  if (paged)
    IGNIS_TRY(ignis_check_last_page_len_contents(fn, "kv_last_page_len_host", kv_indptr, kv_last_page_len, batch_size,
                                                 c->page_size));
  int64_t tokens = (int64_t)qo_indptr[batch_size] - qo_indptr[0];
  if (tokens > c->max_qo_tokens)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: qo_indptr_host describes %" PRId64 " query tokens but the plan's max_qo_tokens=%" PRId64,
                           fn, tokens, c->max_qo_tokens);
  if (c->q_dtype != c->o_dtype && qo_indptr[0] != 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: qo_indptr_host[0]=%d but a plan with an fp8 q_dtype takes batches whose query rows "
                           "start at 0",
                           fn, (int)qo_indptr[0]);
  *mask_bytes = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    int64_t kv_len = planned_kv_len(plan, kv_indptr, kv_last_page_len, b);
    if (kv_len > c->max_kv_len)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: request %" PRId64 " has %" PRId64 " keys (kv_indptr_host%s) but the plan's "
                             "max_kv_len=%" PRId64,
                             fn, b, kv_len, paged ? ", kv_last_page_len_host" : "", c->max_kv_len);
    *mask_bytes += ignis_prefill_mask_bytes((int64_t)qo_indptr[b + 1] - qo_indptr[b], kv_len);
  }
  return IGNIS_OK;
}

ignis_status ignis_prefill_plan_kernel(const ignis_prefill_plan *plan, const char **name) {
  ignis_clear_error();
  if (!plan || !name)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_prefill_plan_kernel: %s is NULL",
                           !plan ? "plan" : "name");
  *name = ignis_attention_kernel_name(plan->kernel);
  return IGNIS_OK;
}

ignis_status ignis_prefill_plan_update(ignis_prefill_plan *plan, const int32_t *qo_indptr_host,
                                       const int32_t *kv_indptr_host, const int32_t *kv_last_page_len_host,
                                       int64_t batch_size, void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_prefill_plan_update";
  ignis_clear_error();
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const ignis_prefill_plan_config *c = &plan->config;
  if (batch_size < 0 || batch_size > c->max_batch_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: batch_size=%" PRId64 " but it must be 0..%" PRId64 " (the plan's max_batch_size)", fn,
                           batch_size, c->max_batch_size);
  int64_t mask_bytes = 0;
  IGNIS_TRY(check_update_arrays(fn, plan, qo_indptr_host, kv_indptr_host, kv_last_page_len_host, batch_size,
                                &mask_bytes));
  const int32_t *last = c->kv_kind == IGNIS_PREFILL_PAGED ? kv_last_page_len_host : NULL;
  plan_pieces pieces = {0};
  if (workspace && ignis_plan_uses_workspace(&plan->storage)) /* optional here: checked for the runs */
    IGNIS_TRY(open_plan_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  void *image;
  IGNIS_TRY(ignis_plan_begin_update(&plan->storage, &image));
  plan->updated = 0;
  size_t used = ignis_prefill_plan_batch(&plan->planner, qo_indptr_host, kv_indptr_host, last, batch_size, image);
  IGNIS_TRY(ignis_plan_finish_update(&plan->storage, used, stream));
  if (!ignis_plan_uses_workspace(&plan->storage)) { /* its runs check host index arrays against these */
    for (int64_t b = 0; b <= batch_size; ++b)
      plan->planned_kv_indptr[b] = kv_indptr_host[b];
    for (int64_t b = 0; b < batch_size; ++b)
      plan->planned_kv_len[b] = (int32_t)planned_kv_len(plan, kv_indptr_host, last, b);
  }
  plan->batch_size = batch_size;
  plan->q_rows = qo_indptr_host[batch_size];
  plan->kv_rows = kv_indptr_host[batch_size];
  plan->mask_bytes = mask_bytes;
  plan->updated = 1;
  return IGNIS_OK;
}

/* ---- batch prefill: run --------------------------------------------------------------------- */
/* What ragged and paged runs share once their keys are checked: q / out / lse, mask, extras,
 * device, workspace, schedule; then the dispatch. p->cache and p->kv_source are set by the caller. */
static ignis_status run_plan(const char *fn, const ignis_prefill_plan *plan, const ignis_tensor *q,
                             const ignis_tensor *custom_mask, const ignis_attention_extras *extras, ignis_tensor *out,
                             ignis_tensor *lse, void *workspace, size_t workspace_bytes, void *stream,
                             const ignis_tensor *const *kv, const char *const *kv_names, ignis_prefill_params *p) {
  const ignis_prefill_plan_config *c = &plan->config;
  IGNIS_TRY(check_q_out(fn, q, out, lse, c->head_dim_vo, c->o_dtype));
  IGNIS_TRY(check_custom_mask(fn, c->mask_mode, custom_mask, plan->mask_bytes));
  IGNIS_TRY(check_outputs_disjoint(fn, out, lse, kv[0], kv_names[0], kv[1], kv_names[1], custom_mask));
  IGNIS_TRY(ignis_check_attention_extras(fn, extras, c->num_qo_heads, &p->k_scale, &p->v_scale, &p->sinks));
  const ignis_tensor *tensors[] = {q, out, lse, custom_mask, extras ? extras->sinks : NULL, kv[0], kv[1], kv[2], kv[3], kv[4]};
  const char *names[] = {"q", "out", "lse", "custom_mask", "extras.sinks", kv_names[0], kv_names[1], kv_names[2],
                         kv_names[3], kv_names[4]};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 10, &target));
  IGNIS_TRY(ignis_check_run_device(fn, target.device, c->device));
  void *schedule = ignis_plan_schedule(&plan->storage);
  if (ignis_plan_uses_workspace(&plan->storage)) {
    plan_pieces pieces;
    IGNIS_TRY(open_plan_workspace(fn, plan, workspace, workspace_bytes, &pieces));
    p->q_scratch = pieces.q_scratch;
    p->max_q_rows = c->max_qo_tokens;
    p->partial_out = pieces.partial_out;
    p->partial_lse = pieces.partial_lse;
  }
  if (plan->batch_size == 0)
    return IGNIS_OK;
  fill_q_out(p, q, out, lse);
  p->num_kv_heads = c->num_kv_heads;
  fill_options(p, &plan->options);
  p->mask_mode = c->mask_mode;
  p->custom_mask = custom_mask ? (const uint8_t *)custom_mask->data : NULL;
  const ignis_prefill_planner *pl = &plan->planner;
  ignis_prefill_schedule_header *header = ignis_prefill_schedule_header_of(schedule);
  p->q_tile_rows = (int32_t)pl->q_tile_rows;
  p->kernel = (int32_t)plan->kernel;
  p->requests = ignis_prefill_schedule_requests_of(schedule);
  p->batch_size = &header->batch_size;
  p->max_batch = pl->max_batch;
  p->work = ignis_prefill_schedule_work_of(pl, schedule);
  p->num_work = &header->num_work;
  p->max_work = pl->max_work;
  p->merge = ignis_prefill_schedule_merge_of(pl, schedule);
  p->num_merge = &header->num_merge;
  p->max_merge = pl->max_merge;
  return target.backend->prefill(p, target.device.id, stream);
}

/* q: [rows >= the planned qo_indptr[B], num_qo_heads, head_dim_qk] of the plan's q dtype. */
static ignis_status check_run_q(const char *fn, const ignis_prefill_plan *plan, const ignis_tensor *q) {
  const ignis_prefill_plan_config *c = &plan->config;
  if (!plan->updated)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: plan has no schedule: call ignis_prefill_plan_update first", fn);
  IGNIS_TRY(ignis_check_tensor(fn, "q", q, 3, 3));
  if (q->dtype != c->q_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: q.dtype=%s but the plan's q_dtype=%s", fn,
                           ignis_dtype_name(q->dtype), ignis_dtype_name(c->q_dtype));
  if (q->shape[0] < plan->q_rows)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: q.shape[0]=%" PRId64 " but the planned qo_indptr[batch_size]=%" PRId64, fn,
                           q->shape[0], plan->q_rows);
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 1, c->num_qo_heads, "the plan's num_qo_heads"));
  return ignis_check_dim(fn, "q", q, 2, c->head_dim_qk, "the plan's head_dim_qk");
}

ignis_status ignis_prefill_ragged_run(const ignis_prefill_plan *plan, const ignis_tensor *q, const ignis_tensor *k,
                                      const ignis_tensor *v, const ignis_tensor *custom_mask,
                                      const ignis_attention_extras *extras, ignis_tensor *out, ignis_tensor *lse,
                                      void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_prefill_ragged_run";
  ignis_clear_error();
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const ignis_prefill_plan_config *c = &plan->config;
  if (c->kv_kind != IGNIS_PREFILL_RAGGED)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is a paged plan (use ignis_prefill_paged_run)", fn);
  IGNIS_TRY(check_run_q(fn, plan, q));
  ignis_prefill_params p;
  memset(&p, 0, sizeof p);
  IGNIS_TRY(check_kv_pair(fn, k, v, c->kv_layout, c->head_dim_qk, c->head_dim_vo, &p.cache));
  if (k->dtype != c->kv_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: k.dtype=%s but the plan's kv_dtype=%s", fn,
                           ignis_dtype_name(k->dtype), ignis_dtype_name(c->kv_dtype));
  int nhd = c->kv_layout == IGNIS_KV_LAYOUT_NHD;
  IGNIS_TRY(ignis_check_dim(fn, "k", k, nhd ? 1 : 0, c->num_kv_heads, "the plan's num_kv_heads"));
  if (p.cache.page_size < plan->kv_rows)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: k.shape[%d]=%" PRId64 " but the planned kv_indptr[batch_size]=%" PRId64, fn,
                           nhd ? 0 : 1, p.cache.page_size, plan->kv_rows);
  p.kv_source = IGNIS_PREFILL_KV_RAGGED;
  const ignis_tensor *kv[] = {k, v, NULL, NULL, NULL};
  const char *kv_names[] = {"k", "v", "", "", ""};
  return run_plan(fn, plan, q, custom_mask, extras, out, lse, workspace, workspace_bytes, stream, kv, kv_names, &p);
}

/* A paged cache's k_cache ([pages, page, heads, dim] NHD or [pages, heads, page, dim] HND) against
 * the plan's kv_dtype, page_size, num_kv_heads and head_dim_qk. */
static ignis_status check_k_cache(const char *fn, const ignis_prefill_plan_config *c, const ignis_tensor *k_cache,
                                  ignis_kv_layout layout) {
  if (k_cache->dtype != c->kv_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache.k_cache.dtype=%s but the plan's kv_dtype=%s", fn,
                           ignis_dtype_name(k_cache->dtype), ignis_dtype_name(c->kv_dtype));
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  IGNIS_TRY(ignis_check_dim(fn, "cache.k_cache", k_cache, nhd ? 1 : 2, c->page_size, "the plan's page_size"));
  IGNIS_TRY(ignis_check_dim(fn, "cache.k_cache", k_cache, nhd ? 2 : 1, c->num_kv_heads, "the plan's num_kv_heads"));
  return ignis_check_dim(fn, "cache.k_cache", k_cache, 3, c->head_dim_qk, "the plan's head_dim_qk");
}

/* The cache against the plan; on the host, its index contents against the planned lengths. */
static ignis_status check_run_cache(const char *fn, const ignis_prefill_plan *plan, const ignis_paged_kv_cache *cache,
                                    ignis_paged_kv_params *kv) {
  const ignis_prefill_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_check_paged_kv_cache(fn, cache, kv));
  IGNIS_TRY(check_k_cache(fn, c, &cache->k_cache, cache->layout));
  IGNIS_TRY(ignis_check_dim(fn, "cache.indptr", &cache->indptr, 0, plan->batch_size + 1, "the planned batch_size + 1"));
  if (ignis_plan_uses_workspace(&plan->storage) || cache->k_cache.device.type != c->device.type)
    return IGNIS_OK; /* device index arrays: not readable here */
  IGNIS_TRY(ignis_check_paged_kv_contents(fn, kv));
  for (int64_t b = 0; b < plan->batch_size; ++b) {
    int64_t kv_len = planned_kv_len(plan, kv->indptr, kv->last_page_len, b);
    if (kv->indptr[b] != plan->planned_kv_indptr[b] || kv_len != plan->planned_kv_len[b])
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: cache.indptr / cache.last_page_len give request %" PRId64 " pages from %d and %" PRId64
                             " keys but it was planned with pages from %d and %d keys",
                             fn, b, (int)kv->indptr[b], kv_len, (int)plan->planned_kv_indptr[b],
                             (int)plan->planned_kv_len[b]);
  }
  return IGNIS_OK;
}

ignis_status ignis_prefill_paged_run(const ignis_prefill_plan *plan, const ignis_tensor *q,
                                     const ignis_paged_kv_cache *cache, const ignis_tensor *custom_mask,
                                     const ignis_attention_extras *extras, ignis_tensor *out, ignis_tensor *lse,
                                     void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_prefill_paged_run";
  ignis_clear_error();
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  if (plan->config.kv_kind != IGNIS_PREFILL_PAGED)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is a ragged plan (use ignis_prefill_ragged_run)", fn);
  IGNIS_TRY(check_run_q(fn, plan, q));
  ignis_prefill_params p;
  memset(&p, 0, sizeof p);
  IGNIS_TRY(check_run_cache(fn, plan, cache, &p.cache));
  p.kv_source = IGNIS_PREFILL_KV_PAGED;
  const ignis_tensor *kv[] = {&cache->k_cache, &cache->v_cache, &cache->indptr, &cache->indices, &cache->last_page_len};
  const char *kv_names[] = {"cache.k_cache", "cache.v_cache", "cache.indptr", "cache.indices", "cache.last_page_len"};
  return run_plan(fn, plan, q, custom_mask, extras, out, lse, workspace, workspace_bytes, stream, kv, kv_names, &p);
}

/* ---- block-table run ------------------------------------------------------------------------ */
/* The block-table cache against a paged plan (as check_run_cache does the indptr form). */
static ignis_status check_block_table_cache(const char *fn, const ignis_prefill_plan *plan,
                                            const ignis_block_table_kv_cache *cache, ignis_paged_kv_params *kv) {
  const ignis_prefill_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_check_block_table_kv_cache(fn, cache, kv));
  IGNIS_TRY(check_k_cache(fn, c, &cache->k_cache, cache->layout));
  if (kv->batch_size > c->max_batch_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cache.block_tables.shape[0]=%" PRId64 " requests but the plan's max_batch_size=%" PRId64,
                           fn, kv->batch_size, c->max_batch_size);
  if (kv->num_page_entries > INT32_MAX) /* kv_start of the last row is an int32 */
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: cache.block_tables spans %" PRId64 " entries (rows x row stride) but at most %d are "
                           "taken",
                           fn, kv->num_page_entries, INT32_MAX);
  return IGNIS_OK;
}

/* Host: qo_indptr non-decreasing within [0, rows], no request over max_q_len tokens. */
static ignis_status check_qo_indptr_contents(const char *fn, const int32_t *qo_indptr, int64_t batch, int64_t rows,
                                             int64_t max_q_len) {
  IGNIS_TRY(ignis_check_indptr_contents(fn, "qo_indptr", qo_indptr, batch, rows, "q.shape[0]"));
  for (int64_t b = 0; b < batch; ++b)
    if ((int64_t)qo_indptr[b + 1] - qo_indptr[b] > max_q_len)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: request %" PRId64 " has %" PRId64 " query tokens (qo_indptr) but max_q_len=%" PRId64,
                             fn, b, (int64_t)qo_indptr[b + 1] - qo_indptr[b], max_q_len);
  return IGNIS_OK;
}

ignis_status ignis_prefill_run_block_table(const ignis_prefill_plan *plan, const ignis_tensor *q,
                                           const ignis_block_table_kv_cache *cache, const ignis_tensor *qo_indptr,
                                           int64_t max_q_len, const ignis_attention_extras *extras, ignis_tensor *out,
                                           ignis_tensor *lse, void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_prefill_run_block_table";
  ignis_clear_error();
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const ignis_prefill_plan_config *c = &plan->config;
  if (c->kv_kind != IGNIS_PREFILL_PAGED)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is a ragged plan (a block table needs a paged one)",
                           fn);
  if (c->mask_mode == IGNIS_MASK_CUSTOM)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: the plan's mask_mode is IGNIS_MASK_CUSTOM, which block-table runs do not take", fn);
  IGNIS_TRY(ignis_check_tensor(fn, "q", q, 3, 3));
  if (q->dtype != c->q_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: q.dtype=%s but the plan's q_dtype=%s", fn,
                           ignis_dtype_name(q->dtype), ignis_dtype_name(c->q_dtype));
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 1, c->num_qo_heads, "the plan's num_qo_heads"));
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 2, c->head_dim_qk, "the plan's head_dim_qk"));
  if (q->shape[0] > c->max_qo_tokens)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: q.shape[0]=%" PRId64 " rows but the plan's max_qo_tokens=%" PRId64, fn, q->shape[0],
                           c->max_qo_tokens);
  ignis_prefill_params p;
  memset(&p, 0, sizeof p);
  IGNIS_TRY(check_block_table_cache(fn, plan, cache, &p.cache));
  const int64_t batch = p.cache.batch_size;
  IGNIS_TRY(ignis_check_index_vector(fn, "qo_indptr", qo_indptr, batch + 1, 0));
  if (max_q_len < 0 || max_q_len > c->max_qo_tokens)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: max_q_len=%" PRId64 " but it must be 0..%" PRId64 " (the plan's max_qo_tokens)", fn,
                           max_q_len, c->max_qo_tokens);
  IGNIS_TRY(check_q_out(fn, q, out, lse, c->head_dim_vo, c->o_dtype));
  IGNIS_TRY(check_outputs_disjoint(fn, out, lse, &cache->k_cache, "cache.k_cache", &cache->v_cache, "cache.v_cache",
                                   NULL));
  IGNIS_TRY(ignis_check_attention_extras(fn, extras, c->num_qo_heads, &p.k_scale, &p.v_scale, &p.sinks));
  const ignis_tensor *tensors[] = {q,
                                   out,
                                   lse,
                                   extras ? extras->sinks : NULL,
                                   &cache->k_cache,
                                   &cache->v_cache,
                                   &cache->block_tables,
                                   &cache->seq_lens,
                                   qo_indptr};
  const char *names[] = {"q",           "out",           "lse", "extras.sinks", "cache.k_cache", "cache.v_cache",
                         "cache.block_tables", "cache.seq_lens", "qo_indptr"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 9, &target));
  IGNIS_TRY(ignis_check_run_device(fn, target.device, c->device));
  const int32_t *qo = (const int32_t *)qo_indptr->data;
  if (!ignis_plan_uses_workspace(&plan->storage)) { /* host arrays: checked before anything is written */
    IGNIS_TRY(ignis_check_block_table_contents(fn, &p.cache));
    IGNIS_TRY(check_qo_indptr_contents(fn, qo, batch, q->shape[0], max_q_len));
  } else {
    plan_pieces pieces;
    IGNIS_TRY(open_plan_workspace(fn, plan, workspace, workspace_bytes, &pieces));
    p.q_scratch = pieces.q_scratch;
    p.max_q_rows = q->shape[0];
  }
  if (batch == 0 || max_q_len == 0)
    return IGNIS_OK;
  fill_q_out(&p, q, out, lse);
  p.num_kv_heads = c->num_kv_heads;
  fill_options(&p, &plan->options);
  p.mask_mode = c->mask_mode;
  p.kv_source = IGNIS_PREFILL_KV_PAGED;
  p.q_tile_rows = (int32_t)plan->planner.q_tile_rows;
  p.kernel = (int32_t)plan->kernel;
  p.max_batch = batch;
  p.max_work = batch * ignis_prefill_implicit_tiles(max_q_len, c->num_qo_heads / c->num_kv_heads,
                                                    plan->planner.q_tile_rows);
  p.qo_indptr = qo;
  p.block_table_max_q_len = max_q_len;
  p.num_q_rows = q->shape[0];
  return target.backend->prefill(&p, target.device.id, stream);
}
