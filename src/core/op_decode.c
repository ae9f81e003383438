/* Front end of decode attention (include/ignis/decode.h): single decode, and the batch decode
 * plan (create / workspace size / update / run / destroy).
 *
 * Validation names every parameter; nothing is written before all of it has passed. The device
 * workspace (what a run writes and reads within itself) is carved by one function per entry point,
 * used both in counting mode (the size query) and over the caller's buffer (the run), so the two
 * cannot drift:
 *   batch decode:  partial_out [max_partials, q_len, Hq, D] f32 | partial_lse [max_partials, q_len, Hq]
 *                  f32
 *   single decode: partial_out [chunks, Hq, D] f32 | partial_lse [chunks, Hq] f32, chunks the most
 *                  any device uses for that length (none when it never splits)
 *
 * Where the schedule (sched/decode_plan.h) lives between update and run is the plan storage's
 * business (core/attention_plan.h): device plans upload it into their own device memory through a
 * pinned staging ring, and the run only reads it (it allocates nothing, synchronizes nothing, and
 * its launch shape depends only on the plan); host-memory plans keep it on the host and need no
 * workspace. Every schedule holds copies of the planned kv_indptr / kv_last_page_len, against which
 * a host-memory plan's run checks the cache's index arrays. An update validates, finds the longest
 * request and schedules in few passes over the batch (scan_update, the chunk choice, the emit),
 * as its host time is part of every decode step's. Single decode plans its split on the host and passes it
 * as the implicit schedule (params.h: implicit_chunk_tokens), so it copies nothing. A block-table run
 * (no update) takes either that implicit schedule for a uniform batch at its bound, or, where the
 * split depends on the lengths, a schedule its backend plans from them (params.h: length_plan;
 * fill_block_table_schedule), on CUDA into the plan's own device memory. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
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
#include "ignis/decode.h"
#include "sched/decode_plan.h"
#include "sched/plan_math.h"


/* What a plan of a (checked) config holds before any update: its backend's kernel choice, its
 * planners and the bounds of every schedule it can produce (compute_plan_bounds, which allocates
 * nothing, so the workspace queries can ask it too). The page planner is for the shapes the CUDA
 * page kernel takes: an update keeps its schedule when it has no split and fills its waves, else
 * the general planner's. */
typedef struct plan_bounds {
  ignis_kernel_choice general, page;          /* page.wave 0: no page kernel */
  ignis_decode_planner planner, page_planner; /* their waves are the choices' */
  int64_t max_work, max_partials;             /* the larger of the two planners' */
  size_t schedule_bytes;
} plan_bounds;

/* Block-table batches planned from their lengths (fill_block_table_schedule): at most max_batch
 * requests and max_items items. A device plan keeps for them, in its own device memory after the
 * implicit schedule's merge counters, request_partials [max_batch + 1] padded to 16 bytes (the m16
 * kernel's merge kernel reads them), then their merge counters (zero at creation; each merger
 * leaves its counter zero). The attention kernel's blocks plan the batch (no work list). */
typedef struct length_area {
  int64_t max_batch, max_items; /* 0: no batch is planned from its lengths */
  size_t offset;                /* from storage.device_counters */
  size_t bytes;
} length_area;

struct ignis_decode_plan {
  ignis_decode_plan_config config;
  ignis_attention_resolved options;
  plan_bounds bounds;
  ignis_attention_kernel kernel; /* of the last update: bounds.page's if it took the page planner's schedule */
  ignis_plan_storage storage;
  length_area length;      /* block-table runs planned from their lengths */
  /* the last successful update */
  int updated;
  int64_t batch_size;
  int32_t num_work;     /* items of that batch */
  int32_t num_partials; /* partial rows of that batch (0: no request is split) */
};

static ignis_status check_head_dim(const char *fn, const char *what, int64_t head_dim) {
  if (head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512)
    return IGNIS_OK;
  if (head_dim <= 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%" PRId64 " but it must be positive", fn,
                           what, head_dim);
  return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                         "%s: %s=%" PRId64 " has no compiled kernel (64, 128, 256 or 512)", fn, what,
                         head_dim);
}

/* Run extras into the params' fields. */
static ignis_status check_extras(const char *fn, const ignis_attention_extras *e, int64_t num_qo_heads,
                                 ignis_decode_params *p) {
  return ignis_check_attention_extras(fn, e, num_qo_heads, &p->k_scale, &p->v_scale, &p->sinks);
}

/* The options' fields of the params. */
static void fill_options(ignis_decode_params *p, const ignis_attention_resolved *opt) {
  p->lse_scale = opt->lse_scale;
  p->sm_scale_log2 = opt->sm_scale_log2;
  p->logits_soft_cap = opt->logits_soft_cap;
  p->window_left = opt->window_left;
  p->pos_encoding = opt->pos_encoding;
  p->rope_rcp_scale = opt->rope_rcp_scale;
  p->rope_log2_theta = opt->rope_log2_theta;
}

/* q and out: [lead..., num_qo_heads, head_dim] (ndim 3 with batch, 2 without), out of out_dtype
 * (q's, or a plan's o_dtype), last dimension contiguous; lse (may be NULL): q's shape without the
 * last dimension, f32. */
static ignis_status check_q_out_lse(const char *fn, const ignis_tensor *q, const ignis_tensor *out,
                                    const ignis_tensor *lse, int ndim, ignis_dtype out_dtype) {
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, ndim, ndim));
  IGNIS_TRY(ignis_check_attention_out_dtype(fn, out, q, out_dtype));
  IGNIS_TRY(ignis_check_same_shape(fn, "out", out, "q", q));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "q", q));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  IGNIS_TRY(ignis_check_disjoint(fn, "out", out, "q", q));
  if (lse) {
    IGNIS_TRY(ignis_check_tensor(fn, "lse", lse, ndim - 1, ndim - 1));
    if (lse->dtype != IGNIS_F32)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: lse.dtype=%s but it must be f32", fn,
                             ignis_dtype_name(lse->dtype));
    static const char *const q_dims[] = {"q.shape[0]", "q.shape[1]"};
    for (int d = 0; d < ndim - 1; ++d)
      IGNIS_TRY(ignis_check_dim(fn, "lse", lse, d, q->shape[d], q_dims[d]));
    IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, "q", q));
    IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, "out", out));
  }
  return IGNIS_OK;
}

/* f32 partial rows [rows, num_qo_heads, head_dim] and their LSEs; nothing when rows == 0. */
static ignis_status carve_partials(ignis_workspace *ws, const char *fn, int64_t rows, int64_t num_qo_heads,
                                   int64_t head_dim, float **partial_out, float **partial_lse) {
  /* rows: partial rows times query tokens per request */
  *partial_out = *partial_lse = NULL;
  if (rows == 0)
    return IGNIS_OK;
  IGNIS_TRY(ignis_workspace_take(ws, fn, "partial_out", rows * num_qo_heads * head_dim, sizeof(float),
                                 (void **)partial_out));
  return ignis_workspace_take(ws, fn, "partial_lse", rows * num_qo_heads, sizeof(float),
                              (void **)partial_lse);
}

/* The backend's kernels for blocks of `rows` query rows on `device` (core/backend.h: decode_choose;
 * page_size 0: the page kernel is not asked). */
static void decode_choice(ignis_device device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                          int64_t num_kv_heads, int64_t page_size, ignis_kernel_choice *general,
                          ignis_kernel_choice *page) {
  ignis_backend_for(device.type)
      ->decode_choose(device.id, head_dim, kv_dtype, rows, num_kv_heads, page_size, general, page);
}

/* IGNIS_DECODE_PAGE_KERNEL (read once): "0" never plans the page kernel (comparisons), "always"
 * plans it for every batch of a shape it takes, split or not (tests of its merge path); otherwise
 * PAGE_AUTO, the choice of ignis_decode_plan_update. */
enum { PAGE_OFF = 0, PAGE_AUTO = 1, PAGE_ALWAYS = 2 };
static int page_kernel_mode(void) {
  static atomic_int known = -1; /* any thread may be first: each stores the same answer */
  int value = atomic_load_explicit(&known, memory_order_relaxed);
  if (value < 0) {
    const char *text = ignis_env(IGNIS_ENV_DECODE_PAGE_KERNEL);
    value = text == NULL                  ? PAGE_AUTO
            : strcmp(text, "0") == 0      ? PAGE_OFF
            : strcmp(text, "always") == 0 ? PAGE_ALWAYS
                                          : PAGE_AUTO;
    atomic_store_explicit(&known, value, memory_order_relaxed);
  }
  return value;
}


/* ---- single decode -------------------------------------------------------------------------- */
static int64_t single_chunk_rows(int64_t kv_len) {
  int64_t chunks = ignis_decode_single_max_chunks(kv_len);
  return chunks > 1 ? chunks : 0;
}

ignis_status ignis_single_decode_workspace_size(int64_t num_qo_heads, int64_t head_dim, int64_t max_kv_len,
                                                size_t *bytes) {
  static const char fn[] = "ignis_single_decode_workspace_size";
  ignis_clear_error();
  if (!bytes)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  if (num_qo_heads < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: num_qo_heads=%" PRId64 " but it must be >= 1",
                           fn, num_qo_heads);
  IGNIS_TRY(check_head_dim(fn, "head_dim", head_dim));
  if (max_kv_len < 0 || max_kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: max_kv_len=%" PRId64 " but it must be 0..%d",
                           fn, max_kv_len, INT32_MAX);
  ignis_workspace ws = ignis_workspace_counting();
  float *partial_out, *partial_lse;
  IGNIS_TRY(carve_partials(&ws, fn, single_chunk_rows(max_kv_len), num_qo_heads, head_dim, &partial_out,
                           &partial_lse));
  *bytes = ignis_attention_required_bytes(&ws);
  return IGNIS_OK;
}

/* What validation of a single decode call settles, for the params. */
typedef struct single_call {
  ignis_target target;
  ignis_attention_resolved opt;
  int64_t num_qo_heads, num_kv_heads, head_dim, kv_len;
  int token_dim, head_dim_index; /* k / v: the token and head dimensions of the layout */
} single_call;

static ignis_status check_single(const char *fn, const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                 ignis_kv_layout layout, const ignis_attention_options *options,
                                 const ignis_attention_extras *extras, const ignis_tensor *out, const ignis_tensor *lse,
                                 single_call *call, ignis_decode_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "q", q, 2, 2));
  IGNIS_TRY(ignis_check_attention_dtype(fn, "q.dtype", q->dtype));
  if (layout != IGNIS_KV_LAYOUT_NHD && layout != IGNIS_KV_LAYOUT_HND)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: layout=%d is not an ignis_kv_layout", fn,
                           (int)layout);
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  call->token_dim = nhd ? 0 : 1;
  call->head_dim_index = nhd ? 1 : 0;
  IGNIS_TRY(ignis_check_tensor(fn, "k", k, 3, 3));
  IGNIS_TRY(ignis_check_attention_kv_dtype(fn, "k.dtype", k->dtype, "q.dtype", q->dtype));
  IGNIS_TRY(ignis_check_tensor(fn, "v", v, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "v", v, "k", k));
  IGNIS_TRY(ignis_check_same_shape(fn, "v", v, "k", k));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "k", k));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "v", v));
  call->num_qo_heads = q->shape[0];
  call->head_dim = q->shape[1];
  call->num_kv_heads = k->shape[call->head_dim_index];
  call->kv_len = k->shape[call->token_dim];
  IGNIS_TRY(ignis_check_dim(fn, "k", k, 2, call->head_dim, "q.shape[1] (head_dim)"));
  IGNIS_TRY(ignis_check_attention_heads(fn, "q.shape[0] (num_qo_heads)", call->num_qo_heads,
                                        nhd ? "k.shape[1] (num_kv_heads)" : "k.shape[0] (num_kv_heads)",
                                        call->num_kv_heads));
  if (call->kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: k.shape[%d]=%" PRId64 " keys but at most %d are taken", fn, call->token_dim,
                           call->kv_len, INT32_MAX);
  IGNIS_TRY(check_q_out_lse(fn, q, out, lse, 2, q->dtype));
  const ignis_tensor *kv[] = {k, v};
  const char *kv_names[] = {"k", "v"};
  for (int i = 0; i < 2; ++i) {
    IGNIS_TRY(ignis_check_disjoint(fn, "out", out, kv_names[i], kv[i]));
    if (lse)
      IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, kv_names[i], kv[i]));
  }
  IGNIS_TRY(ignis_check_attention_options(fn, "options", options, call->head_dim, &call->opt));
  IGNIS_TRY(check_head_dim(fn, "q.shape[1] (head_dim)", call->head_dim));
  IGNIS_TRY(check_extras(fn, extras, call->num_qo_heads, p));
  const ignis_tensor *tensors[] = {q, k, v, out, lse, extras ? extras->sinks : NULL};
  const char *names[] = {"q", "k", "v", "out", "lse", "extras.sinks"};
  return ignis_resolve_target(fn, tensors, names, 6, &call->target);
}

/* The params of a checked call: one request over contiguous K/V, split as the backend's wave says,
 * its partial rows carved from the workspace where the backend needs one. */
static ignis_status fill_single_params(const char *fn, const single_call *call, const ignis_tensor *q,
                                       const ignis_tensor *k, const ignis_tensor *v, ignis_tensor *out,
                                       ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                       ignis_decode_params *p) {
  const int64_t kv_len = call->kv_len;
  ignis_kernel_choice choice, no_page;
  decode_choice(call->target.device, call->head_dim, k->dtype, call->num_qo_heads / call->num_kv_heads,
                call->num_kv_heads, 0, &choice, &no_page);
  int64_t chunk = ignis_decode_single_chunk_tokens(kv_len, call->num_kv_heads, choice.wave);
  int64_t items = ignis_decode_implicit_items(kv_len, chunk);
  if (!call->target.backend->host_memory) { /* split partials in the workspace */
    ignis_workspace ws =
        workspace ? ignis_workspace_over(workspace, workspace_bytes) : ignis_workspace_counting();
    float *partial_out, *partial_lse;
    IGNIS_TRY(carve_partials(&ws, fn, single_chunk_rows(kv_len), call->num_qo_heads, call->head_dim, &partial_out,
                             &partial_lse));
    if (!workspace && ws.offset)
      return ignis_attention_missing_workspace(fn, &ws);
    if (items > 1) {
      p->partial_out = partial_out;
      p->partial_lse = partial_lse;
    }
  }
  p->num_qo_heads = call->num_qo_heads;
  p->num_kv_heads = call->num_kv_heads;
  p->head_dim = call->head_dim;
  p->dtype = q->dtype;
  p->q_dtype = q->dtype;
  p->q_len = 1;
  p->q = q->data;
  p->q_stride_head = q->strides[0];
  p->out = out->data;
  p->out_stride_head = out->strides[0];
  if (lse) {
    p->lse = (float *)lse->data;
    p->lse_stride_head = lse->strides[0];
  }
  fill_options(p, &call->opt);
  p->cache.num_pages = 1;
  p->cache.page_size = kv_len;
  p->cache.num_kv_heads = call->num_kv_heads;
  p->cache.head_dim = call->head_dim;
  p->cache.batch_size = 1;
  p->cache.dtype = k->dtype;
  p->cache.k_cache = k->data;
  p->cache.k_stride_token = k->strides[call->token_dim];
  p->cache.k_stride_head = k->strides[call->head_dim_index];
  p->cache.v_cache = v->data;
  p->cache.v_stride_token = v->strides[call->token_dim];
  p->cache.v_stride_head = v->strides[call->head_dim_index];
  p->contiguous_kv_len = kv_len;
  p->max_work = items;
  p->max_batch = 1;
  p->implicit_chunk_tokens = chunk;
  p->implicit_splits = items;
  p->kernel = (int32_t)choice.kernel;
  return IGNIS_OK;
}

ignis_status ignis_single_decode(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                 ignis_kv_layout layout, const ignis_attention_options *options,
                                 const ignis_attention_extras *extras, ignis_tensor *out, ignis_tensor *lse,
                                 void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_single_decode";
  ignis_clear_error();
  ignis_decode_params p;
  memset(&p, 0, sizeof p);
  single_call call;
  IGNIS_TRY(check_single(fn, q, k, v, layout, options, extras, out, lse, &call, &p));
  IGNIS_TRY(fill_single_params(fn, &call, q, k, v, out, lse, workspace, workspace_bytes, &p));
  return call.target.backend->decode(&p, call.target.device.id, stream);
}

/* ---- batch decode: plan ------------------------------------------------------------------------ */
/* The caller's config read over the defaults into *c (core/config.h), then checked. */
static ignis_status check_config(const char *fn, const ignis_decode_plan_config *caller, ignis_decode_plan_config *c, ignis_attention_resolved *opt) {
  static const ignis_decode_plan_config defaults = IGNIS_DECODE_PLAN_CONFIG_INIT;
  if (!caller)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL", fn);
  IGNIS_TRY(ignis_read_config(fn, "config.size", "IGNIS_DECODE_PLAN_CONFIG_INIT", c, &defaults, caller, sizeof *c,
                              IGNIS_CONFIG_END(ignis_decode_plan_config, options)));
  IGNIS_TRY(ignis_check_plan_device(fn, c->device));
  IGNIS_TRY(ignis_check_attention_heads(fn, "config.num_qo_heads", c->num_qo_heads, "config.num_kv_heads", c->num_kv_heads));
  IGNIS_TRY(ignis_check_page_size(fn, "config.page_size", c->page_size));
  IGNIS_TRY(ignis_check_attention_plan_dtypes(fn, c->q_dtype, c->kv_dtype, c->o_dtype, &c->o_dtype));
  if (c->q_len_per_req < 0 || c->q_len_per_req > IGNIS_DECODE_MAX_Q_LEN)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.q_len_per_req=%" PRId64 " but it must be 0..%d (0 means 1)", fn,
                           c->q_len_per_req, IGNIS_DECODE_MAX_Q_LEN);
  if (c->max_batch_size < 1 || c->max_batch_size >= INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_batch_size=%" PRId64 " but it must be 1..%d", fn,
                           c->max_batch_size, INT32_MAX - 1);
  if (c->max_kv_len < 0 || c->max_kv_len > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_kv_len=%" PRId64 " but it must be 0..%d", fn, c->max_kv_len,
                           INT32_MAX);
  if (c->disable_split_kv != 0 && c->disable_split_kv != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.disable_split_kv=%d but it must be 0 or 1", fn,
                           (int)c->disable_split_kv);
  if (c->fixed_split_size < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.fixed_split_size=%" PRId64 " but it must be >= 0", fn,
                           c->fixed_split_size);
  IGNIS_TRY(ignis_check_attention_options(fn, "config.options", &c->options, c->head_dim, opt));
  return check_head_dim(fn, "config.head_dim", c->head_dim);
}

ignis_status ignis_decode_plan_destroy(ignis_decode_plan *plan) {
  ignis_clear_error();
  if (!plan)
    return IGNIS_OK;
  ignis_plan_storage_destroy(&plan->storage);
  ignis_clear_error();
  free(plan);
  return IGNIS_OK;
}

static ignis_status compute_plan_bounds(const char *fn, const ignis_decode_plan_config *config, plan_bounds *b) {
  const int64_t rows = (config->q_len_per_req > 0 ? config->q_len_per_req : 1) *
                       (config->num_qo_heads / config->num_kv_heads);
  memset(b, 0, sizeof *b);
  decode_choice(config->device, config->head_dim, config->kv_dtype, rows, config->num_kv_heads, config->page_size,
                &b->general, &b->page);
  /* not in the batch-invariant modes: a request alone and inside a batch must run the same kernel
   * (the page kernel takes only batches that fill the GPU) */
  const int page_mode = page_kernel_mode();
  if (page_mode == PAGE_OFF ||
      (page_mode == PAGE_AUTO && (config->disable_split_kv || config->fixed_split_size > 0)))
    b->page.wave = 0;
  const int64_t page_wave = b->page.wave;
  if (ignis_decode_planner_init(&b->planner, config->max_batch_size, config->max_kv_len, config->page_size,
                                config->num_kv_heads, b->general.wave, 1,
                                config->disable_split_kv, config->fixed_split_size) != 0 ||
      (page_wave > 0 && ignis_decode_planner_init(&b->page_planner, config->max_batch_size, config->max_kv_len,
                                                  config->page_size, config->num_kv_heads, page_wave, 1,
                                                  config->disable_split_kv, config->fixed_split_size) != 0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.max_batch_size=%" PRId64 ", config.max_kv_len=%" PRId64
                           " and config.fixed_split_size=%" PRId64 " need more than %d work items",
                           fn, config->max_batch_size, config->max_kv_len, config->fixed_split_size,
                           INT32_MAX);
  /* room for either planner's schedules (same layout: both have max_batch) */
  b->max_work = b->planner.max_work;
  b->max_partials = b->planner.max_partials;
  b->schedule_bytes = ignis_decode_schedule_bytes(&b->planner);
  if (page_wave > 0) {
    b->max_work = max64(b->max_work, b->page_planner.max_work);
    b->max_partials = max64(b->max_partials, b->page_planner.max_partials);
    const size_t page_bytes = ignis_decode_schedule_bytes(&b->page_planner);
    if (page_bytes > b->schedule_bytes)
      b->schedule_bytes = page_bytes;
  }
  return IGNIS_OK;
}

/* The length-planned schedules of a plan of these bounds (the general planner's batches below a
 * wave: at most its wave_items requests and items; none in the batch-invariant modes), at offset. */
static length_area length_area_of(const plan_bounds *b, const ignis_decode_plan_config *c, size_t offset) {
  length_area a = {0, 0, offset, 0};
  const int64_t wave_items = b->planner.wave / c->num_kv_heads;
  if (c->disable_split_kv || c->fixed_split_size > 0 || b->planner.max_partials == 0 || wave_items < 2)
    return a;
  a.max_batch = min64(min64(c->max_batch_size, wave_items), IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH);
  a.max_items = min64(wave_items, b->max_work);
  const int64_t partials = min64(wave_items, b->max_partials);
  a.bytes = pad16(sizeof(int32_t) * (size_t)(a.max_batch + 1)) +
            pad16(sizeof(uint32_t) * (size_t)ignis_decode_merge_counters(partials, a.max_batch, c->num_kv_heads));
  return a;
}

ignis_status ignis_decode_plan_create(const ignis_decode_plan_config *config, ignis_decode_plan **out_plan) {
  static const char fn[] = "ignis_decode_plan_create";
  ignis_clear_error();
  if (!out_plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out_plan is NULL", fn);
  ignis_attention_resolved options;
  ignis_decode_plan_config read;
  IGNIS_TRY(check_config(fn, config, &read, &options));
  config = &read;
  plan_bounds bounds;
  IGNIS_TRY(compute_plan_bounds(fn, config, &bounds));
  ignis_decode_plan *plan = calloc(1, sizeof *plan);
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  plan->config = *config;
  plan->config.size = sizeof(ignis_decode_plan_config);
  if (plan->config.q_len_per_req == 0)
    plan->config.q_len_per_req = 1;
  plan->options = options;
  plan->bounds = bounds;
  plan->kernel = bounds.general.kernel;
  /* block-table runs' merge counters (as many as a planned schedule's at most), then their
   * length-planned schedules */
  const size_t counter_bytes = (size_t)ignis_decode_merge_counters(bounds.max_partials, config->max_batch_size,
                                                                   config->num_kv_heads) * sizeof(uint32_t);
  plan->length = length_area_of(&bounds, config, pad16(counter_bytes));
  ignis_status status = ignis_plan_storage_create(&plan->storage, fn, config->device, bounds.schedule_bytes,
                                                  pad16(counter_bytes) + plan->length.bytes);
  if (status != IGNIS_OK) {
    char message[512];
    snprintf(message, sizeof message, "%s", ignis_last_error());
    ignis_decode_plan_destroy(plan);
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

/* The plan's workspace: an fp8 q's converted copy (core/params.h: q_scratch), then the partial
 * rows of every split item. */
static ignis_status carve_plan_workspace(ignis_workspace *ws, const char *fn, int64_t max_partials,
                                         const ignis_decode_plan_config *c, plan_pieces *pieces) {
  const int64_t q_len = c->q_len_per_req > 0 ? c->q_len_per_req : 1;
  IGNIS_TRY(ignis_attention_carve_q_scratch(ws, fn, c->q_dtype, c->o_dtype,
                                            c->max_batch_size * q_len * c->num_qo_heads * c->head_dim,
                                            &pieces->q_scratch));
  return carve_partials(ws, fn, max_partials * q_len, c->num_qo_heads, c->head_dim, &pieces->partial_out,
                        &pieces->partial_lse);
}

static ignis_status carve_plan(ignis_workspace *ws, const char *fn, const ignis_decode_plan *plan,
                               plan_pieces *pieces) {
  return carve_plan_workspace(ws, fn, plan->bounds.max_partials, &plan->config, pieces);
}

ignis_status ignis_decode_workspace_size(const ignis_decode_plan *plan, size_t *bytes) {
  static const char fn[] = "ignis_decode_workspace_size";
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

/* Workspace bytes a plan of config (checked) with this max_kv_len would need; 0 on the CPU. */
static ignis_status bytes_for_max_kv_len(const char *fn, const ignis_decode_plan_config *config, int64_t max_kv_len,
                                         size_t *bytes) {
  ignis_decode_plan_config c = *config;
  c.max_kv_len = max_kv_len;
  plan_bounds bounds;
  IGNIS_TRY(compute_plan_bounds(fn, &c, &bounds));
  if (ignis_backend_for(c.device.type)->host_memory) { /* its plans need no workspace */
    *bytes = 0;
    return IGNIS_OK;
  }
  ignis_workspace ws = ignis_workspace_counting();
  plan_pieces pieces;
  IGNIS_TRY(carve_plan_workspace(&ws, fn, bounds.max_partials, &c, &pieces));
  *bytes = ignis_attention_required_bytes(&ws);
  return IGNIS_OK;
}

ignis_status ignis_decode_max_kv_len_for_workspace(const ignis_decode_plan_config *config, size_t workspace_bytes,
                                                   int64_t *max_kv_len) {
  static const char fn[] = "ignis_decode_max_kv_len_for_workspace";
  ignis_clear_error();
  if (!max_kv_len)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: max_kv_len is NULL", fn);
  ignis_attention_resolved options;
  ignis_decode_plan_config read;
  IGNIS_TRY(check_config(fn, config, &read, &options));
  config = &read;
  /* the bytes grow with max_kv_len: the largest that fits, by bisection over [0, INT32_MAX]; a
   * bound whose planner does not fit the schedule's int32 fields counts as not fitting */
  size_t bytes;
  if (bytes_for_max_kv_len(fn, config, 0, &bytes) != IGNIS_OK || bytes > workspace_bytes) {
    ignis_clear_error();
    *max_kv_len = -1;
    return IGNIS_OK;
  }
  int64_t fits = 0, fails = (int64_t)INT32_MAX + 1;
  while (fails - fits > 1) {
    int64_t mid = fits + (fails - fits) / 2;
    if (bytes_for_max_kv_len(fn, config, mid, &bytes) == IGNIS_OK && bytes <= workspace_bytes)
      fits = mid;
    else
      fails = mid;
  }
  ignis_clear_error();
  *max_kv_len = fits;
  return IGNIS_OK;
}

/* The workspace of a plan that uses one: large enough for its pieces, on the plan's device. */
static ignis_status open_plan_workspace(const char *fn, const ignis_decode_plan *plan, void *workspace,
                                        size_t workspace_bytes, plan_pieces *pieces) {
  ignis_workspace ws =
      workspace ? ignis_workspace_over(workspace, workspace_bytes) : ignis_workspace_counting();
  IGNIS_TRY(carve_plan(&ws, fn, plan, pieces));
  if (!workspace)
    return ws.offset ? ignis_attention_missing_workspace(fn, &ws) : IGNIS_OK;
  return ignis_plan_check_workspace(&plan->storage, fn, workspace);
}

/* A run's pieces of the workspace (device plans; none on the host). */
static ignis_status open_run_workspace(const char *fn, const ignis_decode_plan *plan, void *workspace,
                                       size_t workspace_bytes, plan_pieces *pieces) {
  memset(pieces, 0, sizeof *pieces);
  if (!ignis_plan_uses_workspace(&plan->storage))
    return IGNIS_OK;
  return open_plan_workspace(fn, plan, workspace, workspace_bytes, pieces);
}

/* One pass over an update's host arrays (the checks below in one loop of int32 arithmetic, most
 * updates' only pass): 1 when kv_indptr is non-decreasing from >= 0, each last_page_len in range
 * and no request longer than max_kv_len; *longest_pages is then the longest request's pages. A
 * request of p pages fits max_kv_len = P * page_size + r (0 <= r < page_size) when p <= P, or
 * p = P + 1 with last_page_len <= r. */
static int scan_update(const int32_t *kv_indptr, const int32_t *kv_last_page_len, int64_t batch_size,
                       int64_t page_size, int64_t max_kv_len, int64_t *longest_pages) {
  const int64_t full_pages = max_kv_len / page_size;
  const int32_t max_pages = (int32_t)min64(full_pages, INT32_MAX);
  const int32_t last_past = (int32_t)(max_kv_len - full_pages * page_size), size = (int32_t)page_size;
  int32_t bad = kv_indptr[0] < 0, longest = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    /* exact once every entry is >= 0 (else it fails); unsigned, so that no input overflows */
    const int32_t end = kv_indptr[b + 1], pages = (int32_t)((uint32_t)end - (uint32_t)kv_indptr[b]);
    const int32_t last = kv_last_page_len[b];
    /* (every term is evaluated: the difference is unsigned too, as pages may be any int32) */
    bad |= (end < 0) | (pages < 0) | (last < (pages > 0)) | (last > size) |
           ((pages > max_pages) & (((uint32_t)pages - (uint32_t)max_pages != 1u) | (last > last_past)));
    longest = pages > longest ? pages : longest;
  }
  *longest_pages = longest;
  return !bad;
}

/* An update's host arrays: batch within the plan's maxima, contents valid, no request too long;
 * *longest_pages the longest request's pages. */
static ignis_status check_update(const char *fn, const ignis_decode_plan *plan, const int32_t *kv_indptr_host,
                                 const int32_t *kv_last_page_len_host, int64_t batch_size, int64_t *longest_pages) {
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  const ignis_decode_plan_config *c = &plan->config;
  if (batch_size < 0 || batch_size > c->max_batch_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: batch_size=%" PRId64 " but it must be 0..%" PRId64
                           " (the plan's max_batch_size)",
                           fn, batch_size, c->max_batch_size);
  if (!kv_indptr_host)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: kv_indptr_host is NULL", fn);
  if (!kv_last_page_len_host && batch_size > 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: kv_last_page_len_host is NULL", fn);
  if (scan_update(kv_indptr_host, kv_last_page_len_host, batch_size, c->page_size, c->max_kv_len, longest_pages))
    return IGNIS_OK;
  /* what is wrong, named */
  IGNIS_TRY(
      ignis_check_indptr_contents(fn, "kv_indptr_host", kv_indptr_host, batch_size, INT32_MAX, "INT32_MAX"));
  IGNIS_TRY(ignis_check_last_page_len_contents(fn, "kv_last_page_len_host", kv_indptr_host,
                                               kv_last_page_len_host, batch_size, c->page_size));
  for (int64_t b = 0; b < batch_size; ++b) {
    int64_t kv_len = ignis_paged_request_len(kv_indptr_host, kv_last_page_len_host, b, c->page_size);
    if (kv_len > c->max_kv_len)
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "%s: request %" PRId64 " has %" PRId64
          " keys (kv_indptr_host, kv_last_page_len_host) but the plan's max_kv_len=%" PRId64,
          fn, b, kv_len, c->max_kv_len);
  }
  return IGNIS_OK;
}

/* How a batch runs: the planner whose schedule it takes, that planner's chunk, and the kernel. */
typedef struct batch_choice {
  const ignis_decode_planner *planner;
  int64_t chunk_pages; /* 0: no split */
  ignis_attention_kernel kernel;
} batch_choice;

/* Whether the page kernel's planner is asked for a batch of batch_size requests: it has a wave, and
 * the batch fills its waves (or IGNIS_DECODE_PAGE_KERNEL=always). */
static int page_candidate(const ignis_decode_plan *plan, int64_t batch_size) {
  const int64_t wave_items = plan->bounds.page_planner.wave / plan->config.num_kv_heads;
  const int64_t waves = wave_items > 0 ? ceil_div(batch_size, wave_items) : 0;
  return wave_items > 0 &&
         (page_kernel_mode() == PAGE_ALWAYS ||
          (batch_size > 0 && (double)batch_size >= IGNIS_DECODE_PAGE_MIN_FILL * (double)(waves * wave_items)));
}

/* The choice for a batch (kv_indptr's requests, the longest of longest_pages pages, or with
 * kv_indptr NULL batch_size requests of longest_pages pages): the page kernel's planner where its
 * schedule has no split (no request is longer than its chunk) and fills its waves (a batch too
 * small to fill them skips it), else the general kernel's. Plan updates and block-table runs both
 * choose here. */
static batch_choice choose_batch(const ignis_decode_plan *plan, const int32_t *kv_indptr, int64_t longest_pages,
                                 int64_t batch_size) {
  const plan_bounds *b = &plan->bounds;
  const int always = page_kernel_mode() == PAGE_ALWAYS;
  if (page_candidate(plan, batch_size)) {
    batch_choice page = {&b->page_planner,
                         ignis_decode_choose_chunk_pages(&b->page_planner, kv_indptr, longest_pages, batch_size),
                         b->page.kernel};
    if (always || page.chunk_pages <= 0 || longest_pages <= page.chunk_pages)
      return page;
  }
  batch_choice general = {&b->planner,
                          ignis_decode_choose_chunk_pages(&b->planner, kv_indptr, longest_pages, batch_size),
                          b->general.kernel};
  return general;
}

/* Plan the batch into image by its choice (plan->kernel says which kernel). Returns the bytes of
 * the image used. */
static size_t plan_batch(ignis_decode_plan *plan, const int32_t *kv_indptr_host,
                         const int32_t *kv_last_page_len_host, int64_t longest_pages, int64_t batch_size,
                         void *image) {
  const batch_choice choice = choose_batch(plan, kv_indptr_host, longest_pages, batch_size);
  plan->kernel = choice.kernel;
  return ignis_decode_plan_batch(choice.planner, choice.chunk_pages, kv_indptr_host, kv_last_page_len_host,
                                 batch_size, image);
}

ignis_status ignis_decode_plan_update(ignis_decode_plan *plan, const int32_t *kv_indptr_host,
                                      const int32_t *kv_last_page_len_host, int64_t batch_size,
                                      void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_decode_plan_update";
  ignis_clear_error();
  int64_t longest_pages = 0;
  IGNIS_TRY(check_update(fn, plan, kv_indptr_host, kv_last_page_len_host, batch_size, &longest_pages));
  plan_pieces pieces = {0};
  if (workspace && ignis_plan_uses_workspace(&plan->storage)) /* optional here: checked for the runs */
    IGNIS_TRY(open_plan_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  void *image;
  IGNIS_TRY(ignis_plan_begin_update(&plan->storage, &image));
  plan->updated = 0;
  size_t used = plan_batch(plan, kv_indptr_host, kv_last_page_len_host, longest_pages, batch_size, image);
  IGNIS_TRY(ignis_plan_finish_update(&plan->storage, used, stream));
  const ignis_decode_schedule_header *header = ignis_decode_schedule_header_of(image);
  plan->num_work = header->num_work;
  plan->num_partials = header->num_partials;
  plan->batch_size = batch_size;
  plan->updated = 1;
  return IGNIS_OK;
}

/* A 1-D i32 tensor of n elements at data on device. */
static ignis_tensor index_view(void *data, int64_t n, ignis_device device) {
  ignis_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = IGNIS_I32;
  t.ndim = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  t.device = device;
  return t;
}

ignis_status ignis_decode_plan_index_views(const ignis_decode_plan *plan, void *workspace, size_t workspace_bytes,
                                           ignis_tensor *kv_indptr, ignis_tensor *kv_last_page_len) {
  static const char fn[] = "ignis_decode_plan_index_views";
  ignis_clear_error();
  if (!plan || !kv_indptr || !kv_last_page_len)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                           !plan ? "plan" : !kv_indptr ? "kv_indptr" : "kv_last_page_len");
  if (!plan->updated)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: plan has no schedule: call ignis_decode_plan_update first", fn);
  void *schedule = ignis_plan_schedule(&plan->storage);
  *kv_indptr = index_view(ignis_decode_schedule_indptr_of(&plan->bounds.planner, schedule), plan->batch_size + 1,
                          plan->config.device);
  *kv_last_page_len = index_view(ignis_decode_schedule_last_page_len_of(&plan->bounds.planner, schedule),
                                 plan->batch_size, plan->config.device);
  return IGNIS_OK;
}

/* ---- batch decode: run ---------------------------------------------------------------------- */
/* The plan of a run: given and updated (block-table runs need no update). */
static ignis_status check_run_plan(const char *fn, const ignis_decode_plan *plan, int need_update) {
  if (!plan)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
  if (need_update && !plan->updated)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: plan has no schedule: call ignis_decode_plan_update first", fn);
  return IGNIS_OK;
}

/* q [batch * q_len_per_req, num_qo_heads, head_dim] of the plan's q_dtype (batch_what names where
 * the batch comes from), out, lse and the extras against the plan; out and lse disjoint from K/V. */
static ignis_status check_run_tensors(const char *fn, const ignis_decode_plan *plan, const ignis_tensor *q,
                                      int64_t batch, const char *batch_what, const ignis_tensor *k_cache,
                                      const ignis_tensor *v_cache, const ignis_attention_extras *extras,
                                      const ignis_tensor *out, const ignis_tensor *lse, ignis_decode_params *p) {
  const ignis_decode_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_check_tensor(fn, "q", q, 3, 3));
  if (q->dtype != c->q_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: q.dtype=%s but the plan's q_dtype=%s", fn,
                           ignis_dtype_name(q->dtype), ignis_dtype_name(c->q_dtype));
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 0, batch * c->q_len_per_req, batch_what));
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 1, c->num_qo_heads, "the plan's num_qo_heads"));
  IGNIS_TRY(ignis_check_dim(fn, "q", q, 2, c->head_dim, "the plan's head_dim"));
  IGNIS_TRY(check_q_out_lse(fn, q, out, lse, 3, c->o_dtype));
  const ignis_tensor *kv[] = {k_cache, v_cache};
  const char *kv_names[] = {"cache.k_cache", "cache.v_cache"};
  for (int i = 0; i < 2; ++i) {
    IGNIS_TRY(ignis_check_disjoint(fn, "out", out, kv_names[i], kv[i]));
    if (lse)
      IGNIS_TRY(ignis_check_disjoint(fn, "lse", lse, kv_names[i], kv[i]));
  }
  return check_extras(fn, extras, c->num_qo_heads, p);
}

/* The cache's K/V against the plan: its KV dtype, page size, KV heads and head dim. */
static ignis_status check_run_kv(const char *fn, const ignis_decode_plan *plan, const ignis_tensor *k_cache,
                                 ignis_kv_layout layout) {
  const ignis_decode_plan_config *c = &plan->config;
  if (k_cache->dtype != c->kv_dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache.k_cache.dtype=%s but the plan's kv_dtype=%s",
                           fn, ignis_dtype_name(k_cache->dtype), ignis_dtype_name(c->kv_dtype));
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  IGNIS_TRY(ignis_check_dim(fn, "cache.k_cache", k_cache, nhd ? 1 : 2, c->page_size, "the plan's page_size"));
  IGNIS_TRY(ignis_check_dim(fn, "cache.k_cache", k_cache, nhd ? 2 : 1, c->num_kv_heads, "the plan's num_kv_heads"));
  return ignis_check_dim(fn, "cache.k_cache", k_cache, 3, c->head_dim, "the plan's head_dim");
}

/* A run's arguments against its plan: q, out, lse, the cache (into p->cache) and the extras; the
 * target, the plan's device; host index arrays against the planned lengths. */
static ignis_status check_run(const char *fn, const ignis_decode_plan *plan, const ignis_tensor *q,
                              const ignis_paged_kv_cache *cache, const ignis_attention_extras *extras,
                              const ignis_tensor *out, const ignis_tensor *lse, ignis_target *target,
                              ignis_decode_params *p) {
  IGNIS_TRY(check_run_plan(fn, plan, 1));
  const ignis_decode_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_check_paged_kv_cache(fn, cache, &p->cache));
  IGNIS_TRY(check_run_kv(fn, plan, &cache->k_cache, cache->layout));
  IGNIS_TRY(check_run_tensors(fn, plan, q, plan->batch_size, "the planned batch_size * q_len_per_req",
                              &cache->k_cache, &cache->v_cache, extras, out, lse, p));
  IGNIS_TRY(ignis_check_dim(fn, "cache.indptr", &cache->indptr, 0, plan->batch_size + 1,
                            "the planned batch_size + 1"));
  const ignis_tensor *tensors[] = {q,   &cache->k_cache,  &cache->v_cache, &cache->indptr, &cache->indices,
                                   &cache->last_page_len, out, lse, extras ? extras->sinks : NULL};
  const char *names[] = {"q",   "cache.k_cache", "cache.v_cache", "cache.indptr", "cache.indices",
                         "cache.last_page_len", "out", "lse", "extras.sinks"};
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 9, target));
  IGNIS_TRY(ignis_check_run_device(fn, target->device, c->device));
  if (ignis_plan_uses_workspace(&plan->storage))
    return IGNIS_OK;
  IGNIS_TRY(ignis_check_paged_kv_contents(fn, &p->cache)); /* host index arrays: the planned lengths */
  void *schedule = ignis_plan_schedule(&plan->storage);       /* with the planned arrays' copies */
  const int32_t *planned_indptr = ignis_decode_schedule_indptr_of(&plan->bounds.planner, schedule);
  const int32_t *planned_last = ignis_decode_schedule_last_page_len_of(&plan->bounds.planner, schedule);
  for (int64_t b = 0; b < plan->batch_size; ++b) {
    int64_t kv_len = ignis_paged_request_len(p->cache.indptr, p->cache.last_page_len, b, c->page_size);
    int64_t planned = ignis_paged_request_len(planned_indptr, planned_last, b, c->page_size);
    if (kv_len != planned)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: cache.indptr / cache.last_page_len give request %" PRId64 " %" PRId64
                             " keys but it was planned with %" PRId64,
                             fn, b, kv_len, planned);
  }
  return IGNIS_OK;
}

/* The params of a checked run: q / out / lse and the options (fill_run_io), and the plan's schedule
 * with the launch shape the last update recorded. */
static void fill_run_io(const ignis_decode_plan *plan, const plan_pieces *pieces, const ignis_tensor *q,
                        ignis_tensor *out, ignis_tensor *lse, ignis_decode_params *p) {
  const ignis_decode_plan_config *c = &plan->config;
  p->partial_out = pieces->partial_out;
  p->partial_lse = pieces->partial_lse;
  p->num_qo_heads = c->num_qo_heads;
  p->num_kv_heads = c->num_kv_heads;
  p->head_dim = c->head_dim;
  p->dtype = c->o_dtype;
  p->q_dtype = q->dtype;
  p->q_scratch = pieces->q_scratch;
  p->q_len = (int32_t)c->q_len_per_req;
  p->q = q->data;
  p->q_stride_batch = q->strides[0];
  p->q_stride_head = q->strides[1];
  p->out = out->data;
  p->out_stride_batch = out->strides[0];
  p->out_stride_head = out->strides[1];
  if (lse) {
    p->lse = (float *)lse->data;
    p->lse_stride_batch = lse->strides[0];
    p->lse_stride_head = lse->strides[1];
  }
  fill_options(p, &plan->options);
}

static void fill_run_params(const ignis_decode_plan *plan, const plan_pieces *pieces, const ignis_tensor *q,
                            ignis_tensor *out, ignis_tensor *lse, ignis_decode_params *p) {
  fill_run_io(plan, pieces, q, out, lse, p);
  void *schedule = ignis_plan_schedule(&plan->storage);
  ignis_decode_schedule_header *header = ignis_decode_schedule_header_of(schedule);
  p->work = ignis_decode_schedule_work_of(&plan->bounds.planner, schedule);
  p->num_work = &header->num_work;
  p->max_work = plan->bounds.max_work;
  p->request_partials = ignis_decode_schedule_partials_of(schedule);
  p->batch_size = &header->batch_size;
  p->max_batch = plan->bounds.planner.max_batch;
  p->launch_work = plan->num_work;
  p->launch_batch = plan->batch_size;
  p->launch_merge = plan->num_partials > 0;
  p->kernel = (int32_t)plan->kernel;
}

ignis_status ignis_decode_plan_kernel(const ignis_decode_plan *plan, const char **name) {
  ignis_clear_error();
  if (!plan || !name)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_decode_plan_kernel: %s is NULL",
                           !plan ? "plan" : "name");
  *name = ignis_attention_kernel_name(plan->kernel);
  return IGNIS_OK;
}

ignis_status ignis_decode_run(const ignis_decode_plan *plan, const ignis_tensor *q,
                              const ignis_paged_kv_cache *cache, const ignis_attention_extras *extras,
                              ignis_tensor *out, ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                              void *stream) {
  static const char fn[] = "ignis_decode_run";
  ignis_clear_error();
  ignis_decode_params p;
  memset(&p, 0, sizeof p);
  ignis_target target;
  IGNIS_TRY(check_run(fn, plan, q, cache, extras, out, lse, &target, &p));
  plan_pieces pieces;
  IGNIS_TRY(open_run_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  if (plan->batch_size == 0)
    return IGNIS_OK;
  fill_run_params(plan, &pieces, q, out, lse, &p);
  return target.backend->decode(&p, target.device.id, stream);
}

/* ---- block-table run ------------------------------------------------------------------------ */
/* The schedule of a block-table batch of batch_size requests of at most max_seq_len keys, into p.
 * Its choice (kernel and planner) is that of a batch whose every request has max_seq_len keys
 * (choose_batch), which the host can make. Then, where the chunk depends on the lengths, i.e. with
 * automatic splits a batch of two or more requests below the general kernel's wave that the page
 * kernel does not take and whose bound passes one smallest chunk, the backend plans the batch from
 * its lengths (core/params.h: length_plan), so that it runs the schedule ignis_decode_plan_update
 * would give the same lengths; else it runs the implicit schedule of that uniform batch (a
 * request's chunks, and so its items, depend only on the bound there: one request, fixed or
 * disabled splits, or a batch of a wave or more, where the hardware spreads uneven blocks). */
static ignis_status fill_block_table_schedule(const char *fn, const ignis_decode_plan *plan, int64_t batch_size,
                                              int64_t max_seq_len, ignis_decode_params *p) {
  const int64_t page_size = plan->config.page_size, heads = plan->config.num_kv_heads;
  const int64_t pages = ceil_div(max_seq_len, page_size);
  const batch_choice choice = choose_batch(plan, NULL, pages, batch_size);
  const ignis_decode_planner *general = &plan->bounds.planner;
  p->kernel = (int32_t)choice.kernel;
  if (batch_size >= 2 && batch_size <= plan->length.max_batch && choice.planner == general &&
      !page_candidate(plan, batch_size) && batch_size * heads < general->wave &&
      pages > ignis_decode_min_chunk_pages(page_size)) {
    const ignis_decode_length_plan lp = {(int32_t)(general->wave / heads),
                                         (int32_t)ignis_decode_min_chunk_pages(page_size), (int32_t)pages};
    p->length_plan = lp;
    /* the grid's bound: the items fit the wave, and a batch within the bound is one the plan admits */
    p->max_work = min64(lp.wave_items, plan->length.max_items);
    p->max_batch = batch_size;
    if (ignis_plan_uses_workspace(&plan->storage)) { /* the plan's device memory (length_area) */
      char *area = (char *)plan->storage.device_counters + plan->length.offset;
      p->request_partials = (const int32_t *)area;
      p->merge_counters = (uint32_t *)(area + pad16(sizeof(int32_t) * (size_t)(plan->length.max_batch + 1)));
    }
    return IGNIS_OK;
  }
  const int64_t splits = choice.chunk_pages > 0 ? max64(1, ceil_div(pages, choice.chunk_pages)) : 1;
  p->implicit_chunk_tokens = splits > 1 ? choice.chunk_pages * page_size : INT32_MAX;
  p->implicit_splits = splits;
  p->max_work = batch_size * splits;
  p->max_batch = batch_size;
  if (splits > 1)
    p->merge_counters = (uint32_t *)plan->storage.device_counters;
  /* a batch of batch_size requests of max_seq_len keys is one the plan admits, so its bounds hold */
  if (p->max_work > plan->bounds.max_work || (splits > 1 && p->max_work > plan->bounds.max_partials))
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: %" PRId64 " work items exceed the plan's bounds", fn,
                           p->max_work);
  return IGNIS_OK;
}

ignis_status ignis_decode_run_block_table(const ignis_decode_plan *plan, const ignis_tensor *q,
                                          const ignis_block_table_kv_cache *cache, int64_t max_seq_len,
                                          const ignis_attention_extras *extras, ignis_tensor *out, ignis_tensor *lse,
                                          void *workspace, size_t workspace_bytes, void *stream) {
  static const char fn[] = "ignis_decode_run_block_table";
  ignis_clear_error();
  ignis_decode_params p;
  memset(&p, 0, sizeof p);
  IGNIS_TRY(check_run_plan(fn, plan, 0));
  const ignis_decode_plan_config *c = &plan->config;
  IGNIS_TRY(ignis_check_block_table_kv_cache(fn, cache, &p.cache));
  IGNIS_TRY(check_run_kv(fn, plan, &cache->k_cache, cache->layout));
  const int64_t batch = p.cache.batch_size;
  if (batch > c->max_batch_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cache.block_tables.shape[0]=%" PRId64 " requests but the plan's max_batch_size=%" PRId64,
                           fn, batch, c->max_batch_size);
  if (max_seq_len < 0 || max_seq_len > c->max_kv_len)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: max_seq_len=%" PRId64 " but it must be 0..%" PRId64 " (the plan's max_kv_len)", fn,
                           max_seq_len, c->max_kv_len);
  IGNIS_TRY(check_run_tensors(fn, plan, q, batch, "cache.block_tables.shape[0] * q_len_per_req", &cache->k_cache,
                              &cache->v_cache, extras, out, lse, &p));
  const ignis_tensor *tensors[] = {q,   &cache->k_cache, &cache->v_cache, &cache->block_tables, &cache->seq_lens,
                                   out, lse,             extras ? extras->sinks : NULL};
  const char *names[] = {"q",   "cache.k_cache", "cache.v_cache", "cache.block_tables", "cache.seq_lens",
                         "out", "lse",           "extras.sinks"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 8, &target));
  IGNIS_TRY(ignis_check_run_device(fn, target.device, c->device));
  if (!ignis_plan_uses_workspace(&plan->storage))
    IGNIS_TRY(ignis_check_block_table_contents(fn, &p.cache));
  plan_pieces pieces;
  IGNIS_TRY(open_run_workspace(fn, plan, workspace, workspace_bytes, &pieces));
  if (batch == 0)
    return IGNIS_OK;
  fill_run_io(plan, &pieces, q, out, lse, &p);
  IGNIS_TRY(fill_block_table_schedule(fn, plan, batch, min64(max_seq_len, p.cache.pages_per_seq * c->page_size), &p));
  return target.backend->decode(&p, target.device.id, stream);
}

/* ---- index arrays for CUDA-graph buffers ---------------------------------------------------- */
ignis_status ignis_decode_plan_copy_index_arrays(const ignis_decode_plan *plan, ignis_tensor *kv_indptr,
                                                 ignis_tensor *kv_last_page_len, void *stream) {
  static const char fn[] = "ignis_decode_plan_copy_index_arrays";
  ignis_clear_error();
  IGNIS_TRY(check_run_plan(fn, plan, 1));
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_indptr", kv_indptr, -1, plan->batch_size + 1));
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_last_page_len", kv_last_page_len, -1, plan->batch_size));
  IGNIS_TRY(ignis_check_disjoint(fn, "kv_indptr", kv_indptr, "kv_last_page_len", kv_last_page_len));
  const ignis_tensor *tensors[] = {kv_indptr, kv_last_page_len};
  const char *names[] = {"kv_indptr", "kv_last_page_len"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 2, &target));
  IGNIS_TRY(ignis_check_run_device(fn, target.device, plan->config.device));
  void *schedule = ignis_plan_schedule(&plan->storage);
  const int32_t *indptr = ignis_decode_schedule_indptr_of(&plan->bounds.planner, schedule);
  const int32_t *last = ignis_decode_schedule_last_page_len_of(&plan->bounds.planner, schedule);
  const size_t indptr_bytes = sizeof(int32_t) * (size_t)(plan->batch_size + 1);
  const size_t last_bytes = sizeof(int32_t) * (size_t)plan->batch_size;
  if (target.backend->host_memory) {
    memcpy(kv_indptr->data, indptr, indptr_bytes);
    memcpy(kv_last_page_len->data, last, last_bytes);
    return IGNIS_OK;
  }
  IGNIS_TRY(target.backend->copy_device_async(kv_indptr->data, indptr, indptr_bytes, target.device.id, stream));
  if (last_bytes == 0)
    return IGNIS_OK;
  return target.backend->copy_device_async(kv_last_page_len->data, last, last_bytes, target.device.id, stream);
}
