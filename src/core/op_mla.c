/* Front end of MLA attention and of the latent-cache append (include/ignis/mla.h): the plan
 * (create / workspace size / update / run / destroy) and ignis_append_paged_mla_kv_cache.
 *
 * Validation names every parameter; nothing is written before all of it has passed. The plan's
 * schedule (sched/mla_plan.h) lives where decode's does (core/attention_plan.h): the plan's own
 * device memory, filled by one asynchronous copy per update, or the host for host-memory
 * backends. The workspace holds only the split partial rows, carved by one function in counting
 * mode (the size query) and over the caller's buffer (the run):
 *     partial_out [max_partial_tokens, num_heads, 512] f32 | partial_lse [max_partial_tokens, num_heads] f32
 * Host-memory plans keep their partials in the backend and remember the planned lengths, which a
 * run checks against its host index arrays. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_common.h"
#include "core/attention_plan.h"
#include "core/backend.h"
#include "core/config.h"
#include "core/env.h"
#include "core/paged_kv_check.h"
#include "core/validate.h"
#include "core/workspace.h"
#include "ignis/mla.h"
#include "sched/mla_plan.h"

#define CKV IGNIS_MLA_HEAD_DIM_CKV
#define KPE IGNIS_MLA_HEAD_DIM_KPE

struct ignis_mla_plan {
  ignis_mla_plan_config config;
  ignis_mla_planner planner;
  ignis_plan_storage storage;
  /* the last successful update */
  int updated;
  int64_t batch_size, nnz_q, num_pages_used;
  int32_t num_work, num_merge, num_partial_tokens;
  int32_t *host_kv_indptr; /* host plans: the planned kv_indptr, for the run's page checks */
};

static ignis_status check_config(const char *fn, const ignis_mla_plan_config *caller,
                                 ignis_mla_plan_config *c) {
  static const ignis_mla_plan_config defaults = IGNIS_MLA_PLAN_CONFIG_INIT;
  if (!caller)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL", fn);
  IGNIS_TRY(ignis_read_config(fn, "config.size", "IGNIS_MLA_PLAN_CONFIG_INIT", c, &defaults, caller,
                              sizeof *c, IGNIS_CONFIG_END(ignis_mla_plan_config, max_kv_len)));
  IGNIS_TRY(ignis_check_plan_device(fn, c->device));
  if (c->num_heads < 1 || c->num_heads > 4096)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.num_heads=%" PRId64 " but it must be 1..4096", fn, c->num_heads);
  if (c->head_dim_ckv != CKV)
    return ignis_set_error(c->head_dim_ckv > 0 ? IGNIS_ERROR_UNSUPPORTED : IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.head_dim_ckv=%" PRId64 " but only %d is supported", fn,
                           c->head_dim_ckv, CKV);
  if (c->head_dim_kpe != KPE)
    return ignis_set_error(c->head_dim_kpe > 0 ? IGNIS_ERROR_UNSUPPORTED : IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.head_dim_kpe=%" PRId64 " but only %d is supported", fn,
                           c->head_dim_kpe, KPE);
  IGNIS_TRY(ignis_check_page_size(fn, "config.page_size", c->page_size));
  IGNIS_TRY(ignis_check_attention_dtype(fn, "config.q_dtype", c->q_dtype));
  if (c->kv_dtype == IGNIS_FP8_E5M2)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: config.kv_dtype=fp8_e5m2: the MLA cache takes f16, bf16 or "
                           "fp8 e4m3",
                           fn);
  if (c->kv_dtype != c->q_dtype && c->kv_dtype != IGNIS_FP8_E4M3)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.kv_dtype=%s but it must be config.q_dtype=%s or fp8_e4m3", fn,
                           ignis_dtype_name(c->kv_dtype), ignis_dtype_name(c->q_dtype));
  if (c->causal != 0 && c->causal != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.causal=%d but it must be 0 or 1", fn,
                           (int)c->causal);
  if (!(c->sm_scale > 0.0) || !isfinite(c->sm_scale))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.sm_scale=%g but it must be finite and > 0", fn, c->sm_scale);
  if (c->lse_base != IGNIS_LSE_BASE2 && c->lse_base != IGNIS_LSE_NATURAL)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.lse_base=%d is not an ignis_lse_base",
                           fn, (int)c->lse_base);
  if (c->max_batch_size < 1 || c->max_batch_size >= INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_batch_size=%" PRId64 " but it must be 1..%d", fn,
                           c->max_batch_size, INT32_MAX - 1);
  if (c->max_q_tokens < 1 || c->max_q_tokens >= INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_q_tokens=%" PRId64 " but it must be 1..%d", fn, c->max_q_tokens,
                           INT32_MAX - 1);
  if (c->max_kv_len < 0 || c->max_kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_kv_len=%" PRId64 " but it must be 0..%d", fn, c->max_kv_len,
                           INT32_MAX);
  return IGNIS_OK;
}

ignis_status ignis_mla_plan_destroy(ignis_mla_plan *plan) {
  ignis_clear_error();
  if (!plan)
    return IGNIS_OK;
  ignis_plan_storage_destroy(&plan->storage);
  ignis_clear_error();
  free(plan->host_kv_indptr);
  free(plan);
  return IGNIS_OK;
}

ignis_status ignis_mla_plan_create(const ignis_mla_plan_config *config, ignis_mla_plan **out_plan) {
  static const char fn[] = "ignis_mla_plan_create";
  ignis_clear_error();
  if (!out_plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out_plan is NULL", fn);
  ignis_mla_plan_config c;
  IGNIS_TRY(check_config(fn, config, &c));
  ignis_mla_planner planner;
  const char *tile_env = ignis_env(IGNIS_ENV_MLA_TILE_ROWS);
  const int64_t tile_rows = tile_env && strcmp(tile_env, "64") == 0 ? IGNIS_MLA_TILE_ROWS : 0;
  if (ignis_mla_planner_init(&planner, c.num_heads, tile_rows, c.max_batch_size, c.max_q_tokens, c.max_kv_len,
                             IGNIS_MLA_NOMINAL_WAVE) != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_q_tokens=%" PRId64 " x config.num_heads=%" PRId64 " is too large",
                           fn, c.max_q_tokens, c.num_heads);
  ignis_mla_plan *plan = calloc(1, sizeof *plan);
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  plan->config = c;
  plan->config.size = sizeof c;
  plan->planner = planner;
  ignis_status status =
      ignis_plan_storage_create(&plan->storage, fn, c.device, ignis_mla_schedule_bytes(&planner), 0);
  if (status == IGNIS_OK && !ignis_plan_uses_workspace(&plan->storage)) {
    plan->host_kv_indptr = malloc(sizeof(int32_t) * (size_t)(c.max_batch_size + 1));
    if (!plan->host_kv_indptr)
      status = ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  }
  if (status != IGNIS_OK) {
    char message[512];
    snprintf(message, sizeof message, "%s", ignis_last_error());
    ignis_mla_plan_destroy(plan);
    return ignis_set_error(status, "%s", message);
  }
  *out_plan = plan;
  return IGNIS_OK;
}

typedef struct mla_pieces {
  float *partial_out, *partial_lse;
} mla_pieces;

static ignis_status carve(ignis_workspace *ws, const char *fn, const ignis_mla_plan *plan,
                          mla_pieces *pieces) {
  const int64_t rows = plan->planner.max_partial_tokens * plan->config.num_heads;
  pieces->partial_out = pieces->partial_lse = NULL;
  if (rows == 0)
    return IGNIS_OK;
  IGNIS_TRY(
      ignis_workspace_take(ws, fn, "partial_out", rows * CKV, sizeof(float), (void **)&pieces->partial_out));
  return ignis_workspace_take(ws, fn, "partial_lse", rows, sizeof(float), (void **)&pieces->partial_lse);
}

ignis_status ignis_mla_workspace_size(const ignis_mla_plan *plan, size_t *bytes) {
  static const char fn[] = "ignis_mla_workspace_size";
  ignis_clear_error();
  if (!plan || !bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, plan ? "bytes" : "plan");
  *bytes = 0;
  if (!ignis_plan_uses_workspace(&plan->storage))
    return IGNIS_OK;
  ignis_workspace ws = ignis_workspace_counting();
  mla_pieces pieces;
  IGNIS_TRY(carve(&ws, fn, plan, &pieces));
  *bytes = ignis_attention_required_bytes(&ws);
  return IGNIS_OK;
}

/* A device plan's workspace: large enough, on the plan's device. Host plans: nothing. */
static ignis_status open_workspace(const char *fn, const ignis_mla_plan *plan, void *workspace,
                                   size_t workspace_bytes, mla_pieces *pieces) {
  memset(pieces, 0, sizeof *pieces);
  if (!ignis_plan_uses_workspace(&plan->storage))
    return IGNIS_OK;
  ignis_workspace ws =
      workspace ? ignis_workspace_over(workspace, workspace_bytes) : ignis_workspace_counting();
  IGNIS_TRY(carve(&ws, fn, plan, pieces));
  if (!workspace)
    return ws.offset ? ignis_attention_missing_workspace(fn, &ws) : IGNIS_OK;
  return ignis_plan_check_workspace(&plan->storage, fn, workspace);
}

static ignis_status check_update(const char *fn, const ignis_mla_plan *plan, const int32_t *qo_indptr,
                                 const int32_t *kv_indptr, const int32_t *kv_len, int64_t batch_size) {
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const ignis_mla_plan_config *c = &plan->config;
  if (batch_size < 0 || batch_size > c->max_batch_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: batch_size=%" PRId64 " but it must be 0..%" PRId64
                           " (the plan's max_batch_size)",
                           fn, batch_size, c->max_batch_size);
  if (!qo_indptr || !kv_indptr || (!kv_len && batch_size > 0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                           !qo_indptr   ? "qo_indptr_host"
                           : !kv_indptr ? "kv_indptr_host"
                                        : "kv_len_host");
  if (qo_indptr[0] != 0 || kv_indptr[0] != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s[0]=%d but it must be 0", fn,
                           qo_indptr[0] != 0 ? "qo_indptr_host" : "kv_indptr_host",
                           qo_indptr[0] != 0 ? (int)qo_indptr[0] : (int)kv_indptr[0]);
  IGNIS_TRY(ignis_check_indptr_contents(fn, "qo_indptr_host", qo_indptr, batch_size, c->max_q_tokens,
                                        "the plan's max_q_tokens"));
  IGNIS_TRY(ignis_check_indptr_contents(fn, "kv_indptr_host", kv_indptr, batch_size, INT32_MAX, "INT32_MAX"));
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t pages = (int64_t)kv_indptr[b + 1] - kv_indptr[b];
    if (kv_len[b] < 0 || kv_len[b] > c->max_kv_len || kv_len[b] > pages * c->page_size)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: kv_len_host[%" PRId64 "]=%d but it must be 0..min(%" PRId64
                             " (the plan's max_kv_len), %" PRId64 " (its %" PRId64 " pages x page_size))",
                             fn, b, (int)kv_len[b], c->max_kv_len, pages * c->page_size, pages);
  }
  return IGNIS_OK;
}

ignis_status ignis_mla_plan_update(ignis_mla_plan *plan, const int32_t *qo_indptr_host,
                                   const int32_t *kv_indptr_host, const int32_t *kv_len_host,
                                   int64_t batch_size, void *workspace, size_t workspace_bytes,
                                   void *stream) {
  static const char fn[] = "ignis_mla_plan_update";
  ignis_clear_error();
  IGNIS_TRY(check_update(fn, plan, qo_indptr_host, kv_indptr_host, kv_len_host, batch_size));
  mla_pieces pieces;
  if (workspace)
    IGNIS_TRY(open_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  void *image;
  IGNIS_TRY(ignis_plan_begin_update(&plan->storage, &image));
  plan->updated = 0;
  const size_t used =
      ignis_mla_plan_batch(&plan->planner, qo_indptr_host, kv_indptr_host, kv_len_host, batch_size, image);
  const ignis_mla_schedule_header header = *(const ignis_mla_schedule_header *)image;
  IGNIS_TRY(ignis_plan_finish_update(&plan->storage, used, stream));
  if (plan->host_kv_indptr)
    memcpy(plan->host_kv_indptr, kv_indptr_host, sizeof(int32_t) * (size_t)(batch_size + 1));
  plan->batch_size = batch_size;
  plan->nnz_q = qo_indptr_host[batch_size];
  plan->num_pages_used = kv_indptr_host[batch_size];
  plan->num_work = header.num_work;
  plan->num_merge = header.num_merge;
  plan->num_partial_tokens = header.num_partial_tokens;
  plan->updated = 1;
  return IGNIS_OK;
}

ignis_status ignis_mla_plan_info(const ignis_mla_plan *plan, int64_t *num_work, int64_t *num_merged_tokens) {
  static const char fn[] = "ignis_mla_plan_info";
  ignis_clear_error();
  if (!plan || !num_work || !num_merged_tokens)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                           !plan       ? "plan"
                           : !num_work ? "num_work"
                                       : "num_merged_tokens");
  if (!plan->updated)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: the plan has no update yet", fn);
  *num_work = plan->num_work;
  *num_merged_tokens = plan->num_merge;
  return IGNIS_OK;
}

/* A [rows, heads, dim] tensor of the plan's dtype, last dimension contiguous, at least `rows`. */
static ignis_status check_rows(const char *fn, const char *name, const ignis_tensor *t, int64_t rows,
                               int64_t heads, int64_t dim, ignis_dtype dtype) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 3, 3));
  if (t->dtype != dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but the plan's dtype is %s", fn,
                           name, ignis_dtype_name(t->dtype), ignis_dtype_name(dtype));
  if (t->shape[0] < rows)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.shape[0]=%" PRId64 " but the planned batch has %" PRId64 " query rows", fn,
                           name, t->shape[0], rows);
  IGNIS_TRY(ignis_check_dim(fn, name, t, 1, heads, "the plan's num_heads"));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 2, dim, dim == CKV ? "head_dim_ckv (512)" : "head_dim_kpe (64)"));
  return ignis_check_last_dim_contiguous(fn, name, t);
}

/* A cache [num_pages, page_size, dim] of the plan's dtype, last dimension contiguous. */
static ignis_status check_cache(const char *fn, const char *name, const ignis_tensor *t,
                                const ignis_mla_plan_config *c, int64_t dim) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 3, 3));
  if (t->dtype != c->kv_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but the plan's kv_dtype is %s", fn,
                           name, ignis_dtype_name(t->dtype), ignis_dtype_name(c->kv_dtype));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 1, c->page_size, "the plan's page_size"));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 2, dim, dim == CKV ? "head_dim_ckv (512)" : "head_dim_kpe (64)"));
  return ignis_check_last_dim_contiguous(fn, name, t);
}

ignis_status ignis_mla_run(const ignis_mla_plan *plan, const ignis_tensor *q_nope, const ignis_tensor *q_pe,
                           const ignis_tensor *ckv_cache, const ignis_tensor *kpe_cache,
                           const ignis_tensor *kv_indices, double ckv_scale, double kpe_scale,
                           ignis_tensor *out, ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                           void *stream) {
  static const char fn[] = "ignis_mla_run";
  ignis_clear_error();
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  if (!plan->updated)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: the plan has no successful ignis_mla_plan_update", fn);
  const ignis_mla_plan_config *c = &plan->config;
  const int64_t H = c->num_heads, rows = plan->nnz_q;
  IGNIS_TRY(check_rows(fn, "q_nope", q_nope, rows, H, CKV, c->q_dtype));
  IGNIS_TRY(check_rows(fn, "q_pe", q_pe, rows, H, KPE, c->q_dtype));
  IGNIS_TRY(check_rows(fn, "out", out, rows, H, CKV, c->q_dtype));
  IGNIS_TRY(check_cache(fn, "ckv_cache", ckv_cache, c, CKV));
  IGNIS_TRY(check_cache(fn, "kpe_cache", kpe_cache, c, KPE));
  IGNIS_TRY(
      ignis_check_dim(fn, "kpe_cache", kpe_cache, 0, ckv_cache->shape[0], "ckv_cache.shape[0] (pages)"));
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_indices", kv_indices, -1, plan->num_pages_used));
  const double scales[2] = {ckv_scale, kpe_scale};
  for (int i = 0; i < 2; ++i)
    if (!(scales[i] > 0.0) || !isfinite(scales[i]))
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%g but it must be finite and > 0", fn,
                             i == 0 ? "ckv_scale" : "kpe_scale", scales[i]);
  if (lse) {
    IGNIS_TRY(ignis_check_tensor(fn, "lse", lse, 2, 2));
    if (lse->dtype != IGNIS_F32)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: lse.dtype=%s but it must be f32", fn,
                             ignis_dtype_name(lse->dtype));
    if (lse->shape[0] < rows)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: lse.shape[0]=%" PRId64 " but the planned batch has %" PRId64 " query rows",
                             fn, lse->shape[0], rows);
    IGNIS_TRY(ignis_check_dim(fn, "lse", lse, 1, H, "the plan's num_heads"));
  }
  const ignis_tensor *inputs[] = {q_nope, q_pe, ckv_cache, kpe_cache, kv_indices};
  const char *input_names[] = {"q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indices"};
  for (int i = 0; i < 5; ++i) {
    IGNIS_TRY(ignis_check_disjoint(fn, "out", out, input_names[i], inputs[i]));
    if (lse)
      IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, input_names[i], inputs[i]));
  }
  if (lse)
    IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, "out", out));
  const ignis_tensor *tensors[] = {q_nope, q_pe, ckv_cache, kpe_cache, kv_indices, out, lse};
  const char *names[] = {"q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_indices", "out", "lse"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 7, &target));
  IGNIS_TRY(ignis_check_run_device(fn, target.device, c->device));
  if (target.backend->host_memory) { /* the pages the plan reads exist */
    const int32_t *indices = (const int32_t *)kv_indices->data;
    for (int64_t i = 0; i < plan->num_pages_used; ++i)
      if (indices[i] < 0 || indices[i] >= ckv_cache->shape[0])
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: kv_indices[%" PRId64 "]=%d but ckv_cache has %" PRId64 " pages", fn, i,
                               (int)indices[i], ckv_cache->shape[0]);
  }
  mla_pieces pieces;
  IGNIS_TRY(open_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  if (plan->num_work == 0 && plan->batch_size == 0)
    return IGNIS_OK;
  ignis_mla_params p;
  memset(&p, 0, sizeof p);
  p.dtype = c->q_dtype;
  p.kv_dtype = c->kv_dtype;
  p.ckv_scale = (float)ckv_scale;
  p.kpe_scale = (float)kpe_scale;
  p.num_heads = H;
  p.page_size = c->page_size;
  p.causal = c->causal;
  p.sm_scale_log2 = (float)(c->sm_scale * 1.4426950408889634);
  p.lse_scale = c->lse_base == IGNIS_LSE_NATURAL ? 0.6931471805599453f : 1.0f;
  p.q_nope = q_nope->data;
  p.q_pe = q_pe->data;
  p.ckv = ckv_cache->data;
  p.kpe = kpe_cache->data;
  p.out = out->data;
  p.lse = lse ? (float *)lse->data : NULL;
  p.q_nope_stride_token = q_nope->strides[0];
  p.q_nope_stride_head = q_nope->strides[1];
  p.q_pe_stride_token = q_pe->strides[0];
  p.q_pe_stride_head = q_pe->strides[1];
  p.ckv_stride_page = ckv_cache->strides[0];
  p.ckv_stride_token = ckv_cache->strides[1];
  p.kpe_stride_page = kpe_cache->strides[0];
  p.kpe_stride_token = kpe_cache->strides[1];
  p.out_stride_token = out->strides[0];
  p.out_stride_head = out->strides[1];
  if (lse) {
    p.lse_stride_token = lse->strides[0];
    p.lse_stride_head = lse->strides[1];
  }
  p.kv_indices = (const int32_t *)kv_indices->data;
  p.num_pages = ckv_cache->shape[0];
  void *schedule = ignis_plan_schedule(&plan->storage);
  p.header = (const ignis_mla_schedule_header *)schedule;
  p.work = ignis_mla_schedule_work(schedule);
  p.merge = ignis_mla_schedule_merge(&plan->planner, schedule);
  p.launch_work = plan->num_work;
  p.launch_merge = plan->num_merge;
  p.tile_rows = plan->planner.tile_rows;
  p.max_work = plan->planner.max_work;
  p.max_merge = plan->planner.max_merge;
  p.partial_out = pieces.partial_out;
  p.partial_lse = pieces.partial_lse;
  return target.backend->mla(&p, target.device.id, stream);
}

/* ---- append_paged_mla_kv_cache ----------------------------------------------------------------- */
ignis_status ignis_append_paged_mla_kv_cache(const ignis_tensor *append_ckv, const ignis_tensor *append_kpe,
                                             const ignis_tensor *batch_indices, const ignis_tensor *positions,
                                             ignis_tensor *ckv_cache, ignis_tensor *kpe_cache,
                                             const ignis_tensor *kv_indices, const ignis_tensor *kv_indptr,
                                             const ignis_tensor *kv_last_page_len, void *stream) {
  static const char fn[] = "ignis_append_paged_mla_kv_cache";
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "ckv_cache", ckv_cache, 3, 3));
  const ignis_dtype dtype = ckv_cache->dtype;
  if (dtype != IGNIS_F16 && dtype != IGNIS_BF16 && dtype != IGNIS_FP8_E4M3)
    return ignis_set_error(dtype == IGNIS_FP8_E5M2 ? IGNIS_ERROR_UNSUPPORTED : IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: ckv_cache.dtype=%s but it must be f16, bf16 or fp8_e4m3", fn,
                           ignis_dtype_name(dtype));
  const int64_t page_size = ckv_cache->shape[1];
  IGNIS_TRY(ignis_check_page_size(fn, "ckv_cache.shape[1] (page_size)", page_size));
  IGNIS_TRY(ignis_check_dim(fn, "ckv_cache", ckv_cache, 2, CKV, "head_dim_ckv (512)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "ckv_cache", ckv_cache));
  IGNIS_TRY(ignis_check_tensor(fn, "kpe_cache", kpe_cache, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "kpe_cache", kpe_cache, "ckv_cache", ckv_cache));
  IGNIS_TRY(
      ignis_check_dim(fn, "kpe_cache", kpe_cache, 0, ckv_cache->shape[0], "ckv_cache.shape[0] (pages)"));
  IGNIS_TRY(ignis_check_dim(fn, "kpe_cache", kpe_cache, 1, page_size, "ckv_cache.shape[1] (page_size)"));
  IGNIS_TRY(ignis_check_dim(fn, "kpe_cache", kpe_cache, 2, KPE, "head_dim_kpe (64)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "kpe_cache", kpe_cache));
  IGNIS_TRY(ignis_check_tensor(fn, "append_ckv", append_ckv, 2, 2));
  IGNIS_TRY(ignis_check_same_dtype(fn, "append_ckv", append_ckv, "ckv_cache", ckv_cache));
  IGNIS_TRY(ignis_check_dim(fn, "append_ckv", append_ckv, 1, CKV, "head_dim_ckv (512)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "append_ckv", append_ckv));
  const int64_t nnz = append_ckv->shape[0];
  IGNIS_TRY(ignis_check_tensor(fn, "append_kpe", append_kpe, 2, 2));
  IGNIS_TRY(ignis_check_same_dtype(fn, "append_kpe", append_kpe, "ckv_cache", ckv_cache));
  IGNIS_TRY(ignis_check_dim(fn, "append_kpe", append_kpe, 0, nnz, "append_ckv.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "append_kpe", append_kpe, 1, KPE, "head_dim_kpe (64)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "append_kpe", append_kpe));
  IGNIS_TRY(ignis_check_index_vector(fn, "batch_indices", batch_indices, nnz, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "positions", positions, nnz, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_indptr", kv_indptr, -1, 1));
  const int64_t batch = kv_indptr->shape[0] - 1;
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_last_page_len", kv_last_page_len, batch, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_indices", kv_indices, -1, 0));
  const ignis_tensor *inputs[] = {append_ckv, append_kpe, batch_indices,   positions,
                                  kv_indices, kv_indptr,  kv_last_page_len};
  const char *input_names[] = {"append_ckv", "append_kpe", "batch_indices",   "positions",
                               "kv_indices", "kv_indptr",  "kv_last_page_len"};
  for (int i = 0; i < 7; ++i) {
    IGNIS_TRY(ignis_check_disjoint(fn, "ckv_cache", ckv_cache, input_names[i], inputs[i]));
    IGNIS_TRY(ignis_check_disjoint(fn, "kpe_cache", kpe_cache, input_names[i], inputs[i]));
  }
  const ignis_tensor *tensors[] = {append_ckv, append_kpe, batch_indices, positions,       ckv_cache,
                                   kpe_cache,  kv_indices, kv_indptr,     kv_last_page_len};
  const char *names[] = {"append_ckv", "append_kpe", "batch_indices", "positions",       "ckv_cache",
                         "kpe_cache",  "kv_indices", "kv_indptr",     "kv_last_page_len"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 9, &target));
  if (target.backend->host_memory) {
    const int32_t *bi = (const int32_t *)batch_indices->data, *pos = (const int32_t *)positions->data;
    const int32_t *indptr = (const int32_t *)kv_indptr->data, *last = (const int32_t *)kv_last_page_len->data;
    const int32_t *indices = (const int32_t *)kv_indices->data;
    IGNIS_TRY(ignis_check_indptr_contents(fn, "kv_indptr", indptr, batch, kv_indices->shape[0],
                                          "kv_indices.shape[0]"));
    IGNIS_TRY(ignis_check_last_page_len_contents(fn, "kv_last_page_len", indptr, last, batch, page_size));
    for (int64_t t = 0; t < nnz; ++t) {
      if (bi[t] < 0 || bi[t] >= batch)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: batch_indices[%" PRId64 "]=%d but it must be 0..%" PRId64, fn, t,
                               (int)bi[t], batch - 1);
      const int64_t pages = (int64_t)indptr[bi[t] + 1] - indptr[bi[t]];
      const int64_t len = pages > 0 ? (pages - 1) * page_size + last[bi[t]] : 0;
      if (pos[t] < 0 || pos[t] >= len)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: positions[%" PRId64 "]=%d but request %d has %" PRId64
                               " keys (kv_indptr, kv_last_page_len)",
                               fn, t, (int)pos[t], (int)bi[t], len);
      const int32_t page = indices[indptr[bi[t]] + pos[t] / page_size];
      if (page < 0 || page >= ckv_cache->shape[0])
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: kv_indices[%" PRId64 "]=%d but ckv_cache has %" PRId64 " pages", fn,
                               (int64_t)indptr[bi[t]] + pos[t] / page_size, (int)page, ckv_cache->shape[0]);
    }
  }
  if (nnz == 0)
    return IGNIS_OK;
  ignis_append_mla_params p;
  memset(&p, 0, sizeof p);
  p.dtype = dtype;
  p.nnz = nnz;
  p.page_size = page_size;
  p.num_pages = ckv_cache->shape[0];
  p.batch_size = batch;
  p.append_ckv = append_ckv->data;
  p.append_kpe = append_kpe->data;
  p.append_ckv_stride = append_ckv->strides[0];
  p.append_kpe_stride = append_kpe->strides[0];
  p.ckv = ckv_cache->data;
  p.kpe = kpe_cache->data;
  p.ckv_stride_page = ckv_cache->strides[0];
  p.ckv_stride_token = ckv_cache->strides[1];
  p.kpe_stride_page = kpe_cache->strides[0];
  p.kpe_stride_token = kpe_cache->strides[1];
  p.batch_indices = (const int32_t *)batch_indices->data;
  p.positions = (const int32_t *)positions->data;
  p.kv_indices = (const int32_t *)kv_indices->data;
  p.kv_indptr = (const int32_t *)kv_indptr->data;
  return target.backend->append_paged_mla_kv(&p, target.device.id, stream);
}
