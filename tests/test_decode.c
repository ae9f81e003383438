/* Tests of decode attention (include/ignis/decode.h) and its planner (src/sched/decode_plan.h), on
 * every backend, against an fp64 reference written here from the header's math:
 *     x_j = sm_scale <q, k_j>, soft-capped; keys before kv_len - 1 - window_left masked;
 *     out = softmax(x) V;  lse = log(sum e^x) in the chosen base;  no key: out 0, lse -inf.
 *
 * Planner: random batches under every policy (auto, disabled, fixed) must tile each request with
 * items in order, keep num_work / partial rows within the plan's bounds, honour the policy (no
 * split when the batch fills a wave, chunks of >= 256 tokens and the smallest that fits a wave,
 * fixed chunks exact), plan deterministically, and plan a batch of 256 in a few microseconds.
 * Single decode: NHD / HND with padded token strides, kv_len 0, 1, 7, 1000 (and 33000 on CUDA),
 * GQA groups, head dims 64 / 128 / 256, f16 / bf16, every option.
 * Batch decode: random page permutations, page sizes 1, 5, 16, 64, groups 1, 4, 6, 7, 8, 16,
 * lengths 0 .. ~3000 ending mid-page or on a page boundary, K/V separate with padded strides or
 * one [pages, 2, ...] buffer, strided q / out / lse (lse transposed), every option; each case runs
 * with split-KV auto, disabled and fixed (small chunks), each against the reference and auto
 * against disabled. Batch invariance: with disabled or fixed splits a request gives bit-identical
 * out / lse alone and inside a batch. Plan reuse: the same plan re-planned with other lengths and
 * batch sizes (more updates than staging slots between runs).
 * Outputs are poisoned first; every element in the view must be written, none outside it.
 * Tolerances: out within rtol * max|ref| (bf16 1e-2, f16 2e-3); lse within rtol * (1 + |ref|).
 * Bad inputs: each returns the right status naming the parameter and writes nothing. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"
#include "sched/decode_plan.h"

static double rtol_of(ignis_dtype dtype) {
  return dtype == IGNIS_BF16 ? 1e-2 : 2e-3;
}

typedef struct attn_opts {
  double sm_scale; /* 0: 1/sqrt(D) */
  double soft_cap;
  int window_left;
  ignis_lse_base base;
  int with_lse;
} attn_opts;

static ignis_attention_options to_options(const attn_opts *o) {
  ignis_attention_options r = IGNIS_ATTENTION_OPTIONS_INIT;
  r.sm_scale = o->sm_scale;
  r.logits_soft_cap = o->soft_cap;
  r.window_left = o->window_left;
  r.lse_base = o->base;
  return r;
}

static attn_opts opts_variant(int variant) {
  attn_opts o = {0.0, 0.0, -1, IGNIS_LSE_BASE2, 1};
  switch (variant % 6) {
  case 1:
    o.sm_scale = 0.3;
    break;
  case 2:
    o.soft_cap = 2.5;
    o.sm_scale = 0.5;
    break;
  case 3:
    o.window_left = 37;
    break;
  case 4:
    o.base = IGNIS_LSE_NATURAL;
    o.window_left = 0;
    break;
  case 5:
    o.with_lse = 0;
    o.window_left = 300;
    o.soft_cap = 8.0;
    break;
  default:
    break;
  }
  return o;
}

/* fp64 reference of one (request, head): keys j at kd[k_rows[j] ..], values at vd[v_rows[j] ..]. */
static void ref_attention(const double *q, int64_t D, int64_t L, const double *kd, const int64_t *k_rows,
                          const double *vd, const int64_t *v_rows, const attn_opts *o, double *out,
                          double *lse) {
  double scale = o->sm_scale > 0 ? o->sm_scale : 1.0 / sqrt((double)D), m = -INFINITY;
  int64_t start = o->window_left >= 0 && L - 1 - o->window_left > 0 ? L - 1 - o->window_left : 0;
  double *x = malloc(sizeof(double) * (size_t)(L + 1));
  for (int64_t j = start; j < L; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d)
      dot += q[d] * kd[k_rows[j] + d];
    x[j] = scale * dot;
    if (o->soft_cap > 0)
      x[j] = o->soft_cap * tanh(x[j] / o->soft_cap);
    m = x[j] > m ? x[j] : m;
  }
  double sum = 0;
  for (int64_t d = 0; d < D; ++d)
    out[d] = 0;
  for (int64_t j = start; j < L; ++j) {
    double w = exp(x[j] - m);
    sum += w;
    for (int64_t d = 0; d < D; ++d)
      out[d] += w * vd[v_rows[j] + d];
  }
  for (int64_t d = 0; d < D && sum > 0; ++d)
    out[d] /= sum;
  *lse = sum > 0 ? (m + log(sum)) / (o->base == IGNIS_LSE_BASE2 ? log(2.0) : 1.0) : -INFINITY;
  free(x);
}

static double *to_doubles(const h_buf *b) {
  double *r = malloc(sizeof(double) * (size_t)(b->count ? b->count : 1));
  for (int64_t i = 0; i < b->count; ++i)
    r[i] = h_get(b, i);
  return r;
}

/* ---- q / out / lse ------------------------------------------------------------------------ */
typedef struct qo_set {
  int ndim; /* 3: [B, H, D]; 2: [H, D] (single decode) */
  int64_t B, H, D;
  h_buf q, out, lse;
  ignis_tensor tq, tout, tlse;
  unsigned char *out_mask, *lse_mask;
} qo_set;

static void qo_make(qo_set *s, h_backend backend, ignis_dtype dtype, int ndim, int64_t B, int64_t H,
                    int64_t D, int strided, h_rng *rng, double q_scale) {
  memset(s, 0, sizeof *s);
  s->ndim = ndim;
  s->B = B;
  s->H = H;
  s->D = D;
  int64_t shape[3] = {B, H, D}, qs[3], os[3], ls[2];
  /* The CUDA kernels need 16-byte aligned rows (strides and offsets in multiples of 8 elements):
   * on the GPU the padding keeps that; on the CPU it is deliberately odd. */
  const int cuda = backend == H_CUDA;
  int64_t qh = strided ? D + 8 : D, oh = strided ? D + (cuda ? 8 : 4) : D;
  qs[2] = os[2] = 1;
  qs[1] = qh;
  qs[0] = H * qh + (strided ? (cuda ? 8 : 3) : 0);
  os[1] = oh;
  os[0] = H * oh + (strided ? (cuda ? 8 : 1) : 0);
  ls[0] = strided ? 1 : H;
  ls[1] = strided ? B + 1 : 1;
  int off = ndim == 3 ? 0 : 1;
  int64_t q_extent = h_view_extent(0, ndim, shape + off, qs + off),
          o_extent = h_view_extent(2, ndim, shape + off, os + off);
  int64_t l_extent = h_view_extent(1, ndim - 1, shape + off, ndim == 3 ? ls : ls + 1) + 2;
  s->q = h_buf_alloc(backend, dtype, q_extent + 1);
  s->out = h_buf_alloc(backend, dtype, o_extent + 10);
  s->lse = h_buf_alloc(backend, IGNIS_F32, l_extent);
  for (int64_t i = 0; i < s->q.count; ++i)
    h_set(&s->q, i, h_rng_normal(rng) * q_scale);
  s->tq = h_view(&s->q, 0, ndim, shape + off, qs + off);
  s->tout = h_view(&s->out, cuda ? 8 : 2, ndim, shape + off, os + off);
  s->tlse = h_view(&s->lse, 1, ndim - 1, shape + off, ndim == 3 ? ls : ls + 1);
  s->out_mask = calloc((size_t)s->out.count, 1);
  s->lse_mask = calloc((size_t)s->lse.count, 1);
  h_view_mark(&s->out, &s->tout, s->out_mask);
  h_view_mark(&s->lse, &s->tlse, s->lse_mask);
  h_buf_upload(&s->q);
}

static void qo_poison(qo_set *s) {
  h_buf_poison(&s->out);
  h_buf_poison(&s->lse);
  h_buf_upload(&s->out);
  h_buf_upload(&s->lse);
}

static void qo_free(qo_set *s) {
  h_buf_free(&s->q);
  h_buf_free(&s->out);
  h_buf_free(&s->lse);
  free(s->out_mask);
  free(s->lse_mask);
}

static int64_t qo_index(const h_buf *buf, const ignis_tensor *t, int ndim, int64_t b, int64_t h, int64_t d) {
  int64_t idx[3] = {b, h, d};
  return h_index(buf, t, ndim == 3 ? idx : idx + 1);
}

/* q of (b, h) as doubles. */
static void qo_query(const qo_set *s, int64_t b, int64_t h, double *q) {
  for (int64_t d = 0; d < s->D; ++d)
    q[d] = h_get(&s->q, qo_index(&s->q, &s->tq, s->ndim, b, h, d));
}

/* Download and compare with the reference [B, H, D] / [B, H]; also nothing written outside. */
static void qo_check(qo_set *s, const double *ref_out, const double *ref_lse, int with_lse,
                     const char *what) {
  h_buf_download(&s->out);
  h_buf_download(&s->lse);
  double max_ref = 0;
  for (int64_t i = 0; i < s->B * s->H * s->D; ++i)
    max_ref = fabs(ref_out[i]) > max_ref ? fabs(ref_out[i]) : max_ref;
  double rtol = rtol_of(s->out.dtype), out_tol = rtol * (max_ref > 1e-3 ? max_ref : 1e-3);
  h_cmp out_cmp, lse_cmp;
  h_cmp_init(&out_cmp);
  h_cmp_init(&lse_cmp);
  int64_t bad_inf = 0;
  for (int64_t b = 0; b < s->B; ++b)
    for (int64_t h = 0; h < s->H; ++h) {
      for (int64_t d = 0; d < s->D; ++d) {
        int64_t i = qo_index(&s->out, &s->tout, s->ndim, b, h, d);
        h_cmp_add(&out_cmp, i, h_get(&s->out, i), ref_out[(b * s->H + h) * s->D + d], out_tol);
      }
      if (!with_lse)
        continue;
      int64_t idx2[2] = {b, h};
      int64_t i = h_index(&s->lse, &s->tlse, s->ndim == 3 ? idx2 : idx2 + 1);
      double got = h_get(&s->lse, i), ref = ref_lse[b * s->H + h];
      if (isinf(ref))
        bad_inf += !(isinf(got) && got < 0);
      else
        h_cmp_add(&lse_cmp, i, got, ref, rtol * (1 + fabs(ref)));
    }
  char label[160];
  snprintf(label, sizeof label, "%s out", what);
  CHECK_CMP(&out_cmp, label);
  snprintf(label, sizeof label, "%s lse", what);
  CHECK_CMP(&lse_cmp, label);
  CHECKF(bad_inf == 0, "%s: %lld lse values should be -inf", what, (long long)bad_inf);
  CHECKF(h_buf_changed(&s->out, s->out_mask) == 0, "%s: out written outside its view", what);
  CHECKF(h_buf_changed(&s->lse, with_lse ? s->lse_mask : NULL) == 0, "%s: lse written outside its view",
         what);
}

/* ---- paged batches -------------------------------------------------------------------------- */
typedef struct kv_batch {
  int64_t B, P, Hkv, D, num_pages, total_pages;
  ignis_kv_layout layout;
  int combined;
  int64_t *len;
  h_buf k, v, indptr, indices, last;
  int64_t k_off, v_off, sp, st, sh;
  double *kd, *vd;
  ignis_paged_kv_cache cache;
} kv_batch;

static ignis_tensor cache_view(const h_buf *buf, int64_t offset, const kv_batch *c) {
  int nhd = c->layout == IGNIS_KV_LAYOUT_NHD;
  int64_t shape[4] = {c->num_pages, nhd ? c->P : c->Hkv, nhd ? c->Hkv : c->P, c->D};
  int64_t strides[4] = {c->sp, nhd ? c->st : c->sh, nhd ? c->sh : c->st, 1};
  return h_view(buf, offset, 4, shape, strides);
}

static const int32_t *i32(const h_buf *b) {
  return (const int32_t *)b->host;
}

/* Lengths given (len != NULL) or random in 0..max_len with zeros, full pages and mid-page ends. */
static void kv_make(kv_batch *c, h_backend backend, ignis_dtype dtype, int64_t B, int64_t P, int64_t Hkv,
                    int64_t D, ignis_kv_layout layout, int combined, const int64_t *len, int64_t max_len,
                    h_rng *rng) {
  memset(c, 0, sizeof *c);
  c->B = B;
  c->P = P;
  c->Hkv = Hkv;
  c->D = D;
  c->layout = layout;
  c->combined = combined;
  c->len = malloc(sizeof(int64_t) * (size_t)(B + 1));
  for (int64_t b = 0; b < B; ++b) {
    int kind = (int)h_rng_int(rng, 0, 5);
    c->len[b] = len         ? len[b]
                : kind == 0 ? (b % 3 == 1 ? 0 : 1)
                : kind == 1 ? P * h_rng_int(rng, 1, max_len / P > 1 ? max_len / P : 1)
                            : h_rng_int(rng, 1, max_len);
    c->total_pages += (c->len[b] + P - 1) / P;
  }
  c->num_pages = c->total_pages + 3;
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)c->num_pages);
  for (int64_t i = 0; i < c->num_pages; ++i)
    perm[i] = i;
  for (int64_t i = c->num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(rng, 0, i), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  c->indptr = h_buf_alloc(backend, IGNIS_I32, B + 1);
  c->indices = h_buf_alloc(backend, IGNIS_I32, c->total_pages + 1);
  c->last = h_buf_alloc(backend, IGNIS_I32, B + 1);
  int64_t acc = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t pages = (c->len[b] + P - 1) / P;
    h_set(&c->indptr, b, (double)acc);
    for (int64_t i = 0; i < pages; ++i)
      h_set(&c->indices, acc + i, (double)perm[acc + i]);
    h_set(&c->last, b, pages ? (double)(c->len[b] - (pages - 1) * P) : 0.0);
    acc += pages;
  }
  h_set(&c->indptr, B, (double)acc);
  free(perm);
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  if (combined) {
    int64_t page_elems = P * Hkv * D;
    c->sp = 2 * page_elems;
    c->st = nhd ? Hkv * D : D;
    c->sh = nhd ? D : P * D;
    c->v_off = page_elems;
    c->k = h_buf_alloc(backend, dtype, c->num_pages * c->sp);
  } else {
    int64_t row = D + 8;
    c->st = nhd ? Hkv * row : row;
    c->sh = nhd ? row : P * row;
    c->sp = P * Hkv * row + 16;
    c->v_off = 8;
    c->k = h_buf_alloc(backend, dtype, c->num_pages * c->sp + 8);
    c->v = h_buf_alloc(backend, dtype, c->num_pages * c->sp + 16);
  }
  h_buf *bufs[2] = {&c->k, combined ? NULL : &c->v};
  for (int i = 0; i < 2; ++i)
    if (bufs[i]) {
      for (int64_t e = 0; e < bufs[i]->count; ++e)
        h_set(bufs[i], e, h_rng_normal(rng));
      h_buf_upload(bufs[i]);
    }
  h_buf_upload(&c->indptr);
  h_buf_upload(&c->indices);
  h_buf_upload(&c->last);
  c->kd = to_doubles(&c->k);
  c->vd = combined ? c->kd : to_doubles(&c->v);
  c->cache = (ignis_paged_kv_cache)IGNIS_PAGED_KV_CACHE_INIT;
  c->cache.layout = layout;
  c->cache.k_cache = cache_view(&c->k, c->k_off, c);
  c->cache.v_cache = cache_view(combined ? &c->k : &c->v, c->v_off, c);
  c->cache.indptr = h_view(&c->indptr, 0, 1, (int64_t[]){B + 1}, NULL);
  c->cache.indices = h_view(&c->indices, 0, 1, (int64_t[]){c->total_pages}, NULL);
  c->cache.last_page_len = h_view(&c->last, 0, 1, (int64_t[]){B}, NULL);
}

static void kv_free(kv_batch *c) {
  h_buf_free(&c->k);
  if (!c->combined) {
    h_buf_free(&c->v);
    free(c->vd);
  }
  free(c->kd);
  h_buf_free(&c->indptr);
  h_buf_free(&c->indices);
  h_buf_free(&c->last);
  free(c->len);
}

/* Reference of the whole batch: ref_out [B, H, D], ref_lse [B, H]. */
static void kv_reference(const kv_batch *c, const qo_set *s, const attn_opts *o, double *ref_out,
                         double *ref_lse) {
  int64_t group = s->H / c->Hkv, max_len = 1;
  for (int64_t b = 0; b < c->B; ++b)
    max_len = c->len[b] > max_len ? c->len[b] : max_len;
  int64_t *k_rows = malloc(sizeof(int64_t) * (size_t)max_len),
          *v_rows = malloc(sizeof(int64_t) * (size_t)max_len);
  double q[256];
  for (int64_t b = 0; b < c->B; ++b)
    for (int64_t h = 0; h < s->H; ++h) {
      int64_t kvh = h / group;
      for (int64_t j = 0; j < c->len[b]; ++j) {
        int64_t page = i32(&c->indices)[i32(&c->indptr)[b] + j / c->P];
        int64_t base = page * c->sp + (j % c->P) * c->st + kvh * c->sh;
        k_rows[j] = c->k_off + base;
        v_rows[j] = c->v_off + base;
      }
      qo_query(s, b, h, q);
      ref_attention(q, c->D, c->len[b], c->kd, k_rows, c->vd, v_rows, o, ref_out + (b * s->H + h) * c->D,
                    ref_lse + b * s->H + h);
    }
  free(k_rows);
  free(v_rows);
}

typedef enum split_mode { SPLIT_AUTO = 0, SPLIT_DISABLED = 1, SPLIT_FIXED = 2 } split_mode;
static const char *const split_names[] = {"auto", "disabled", "fixed"};

typedef struct plan_env {
  ignis_decode_plan *plan;
  h_buf workspace;
  void *ws;
  size_t ws_bytes;
} plan_env;

static int plan_open(plan_env *e, h_backend backend, const kv_batch *c, int64_t H, ignis_dtype dtype,
                     int64_t max_batch, int64_t max_kv_len, split_mode mode, int64_t fixed_pages,
                     const attn_opts *o) {
  memset(e, 0, sizeof *e);
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_qo_heads = H;
  config.num_kv_heads = c->Hkv;
  config.head_dim = c->D;
  config.page_size = c->P;
  config.q_dtype = dtype;
  config.kv_dtype = config.q_dtype;
  config.max_batch_size = max_batch;
  config.max_kv_len = max_kv_len;
  config.disable_split_kv = mode == SPLIT_DISABLED;
  config.fixed_split_size = mode == SPLIT_FIXED ? fixed_pages : 0;
  config.options = to_options(o);
  if (!CHECK_STATUS(ignis_decode_plan_create(&config, &e->plan), IGNIS_OK))
    return 0;
  CHECK_STATUS(ignis_decode_workspace_size(e->plan, &e->ws_bytes), IGNIS_OK);
  CHECKF((backend == H_CPU) == (e->ws_bytes == 0), "workspace %zu bytes on %s", e->ws_bytes,
         h_backend_name(backend));
  if (e->ws_bytes) {
    e->workspace = h_buf_alloc(backend, IGNIS_U8, (int64_t)e->ws_bytes);
    e->ws = e->workspace.data;
  }
  return 1;
}

static void plan_close(plan_env *e) {
  CHECK_STATUS(ignis_decode_plan_destroy(e->plan), IGNIS_OK);
  if (e->ws_bytes)
    h_buf_free(&e->workspace);
}

static int plan_update(plan_env *e, const kv_batch *c) {
  return CHECK_STATUS(
      ignis_decode_plan_update(e->plan, i32(&c->indptr), i32(&c->last), c->B, e->ws, e->ws_bytes, NULL),
      IGNIS_OK);
}

static int plan_run(plan_env *e, const kv_batch *c, qo_set *s, int with_lse) {
  return CHECK_STATUS(ignis_decode_run(e->plan, &s->tq, &c->cache, NULL, &s->tout, with_lse ? &s->tlse : NULL,
                                       e->ws, e->ws_bytes, NULL),
                      IGNIS_OK);
}

/* ---- planner ------------------------------------------------------------------------------ */
static void check_schedule(const ignis_decode_planner *pl, const int32_t *indptr, const int32_t *last,
                           int64_t B, void *image, const char *what) {
  ignis_decode_schedule_header *hd = ignis_decode_schedule_header_of(image);
  const int32_t *rp = ignis_decode_schedule_partials_of(image);
  const ignis_decode_work *w = ignis_decode_schedule_work_of(pl, image);
  int ok = hd->num_work <= pl->max_work && hd->num_partials <= pl->max_partials && hd->batch_size == B &&
           rp[B] == hd->num_partials;
  int64_t i = 0, min_chunk = INT64_MAX, max_chunk = 0;
  for (int64_t b = 0; b < B && ok; ++b) {
    int64_t pages = indptr[b + 1] - indptr[b], L = pages ? (pages - 1) * pl->page_size + last[b] : 0;
    int64_t first = i, pos = 0;
    while (i < hd->num_work && w[i].request == b) {
      ok &= w[i].kv_start == pos && w[i].kv_end > w[i].kv_start - (L == 0);
      pos = w[i].kv_end;
      ++i;
    }
    int64_t n = i - first;
    ok &= pos == L && n >= 1;
    if (n == 1) {
      ok &= w[first].partial == -1 && rp[b + 1] == rp[b];
    } else {
      ok &= rp[b + 1] - rp[b] == n;
      for (int64_t t = 0; t < n; ++t) {
        ok &= w[first + t].partial == rp[b] + t;
        int64_t len = w[first + t].kv_end - w[first + t].kv_start;
        if (t + 1 < n) {
          min_chunk = len < min_chunk ? len : min_chunk;
          max_chunk = len > max_chunk ? len : max_chunk;
        }
      }
    }
  }
  ok &= i == hd->num_work;
  CHECKF(ok,
         "%s: schedule does not tile the batch within the bounds (num_work %d of %lld, partials %d of %lld)",
         what, hd->num_work, (long long)pl->max_work, hd->num_partials, (long long)pl->max_partials);
  int64_t chunk_tokens = (int64_t)hd->chunk_pages * pl->page_size;
  if (min_chunk <= max_chunk)
    CHECKF(min_chunk == chunk_tokens && max_chunk == chunk_tokens,
           "%s: full chunks %lld..%lld tokens, header %lld", what, (long long)min_chunk, (long long)max_chunk,
           (long long)chunk_tokens);
  if (pl->disable_split_kv)
    CHECKF(hd->num_partials == 0, "%s: split while disabled", what);
  else if (pl->fixed_split_pages > 0)
    CHECKF(hd->chunk_pages == 0 || hd->chunk_pages == pl->fixed_split_pages, "%s: fixed chunk %d", what,
           hd->chunk_pages);
  else if (hd->chunk_pages > 0) {
    CHECKF(B * pl->num_kv_heads < pl->wave && hd->num_work * pl->num_kv_heads <= pl->wave,
           "%s: auto split with batch %lld, %d items", what, (long long)B, hd->num_work);
    CHECKF(chunk_tokens >= IGNIS_DECODE_MIN_CHUNK_TOKENS, "%s: chunk of %lld tokens", what,
           (long long)chunk_tokens);
    /* smallest: one page less would not fit the wave (or be below the minimum) */
    int64_t smaller = hd->chunk_pages - 1, items = 0;
    for (int64_t b = 0; b < B && smaller > 0; ++b) {
      int64_t pages = indptr[b + 1] - indptr[b];
      items += pages > smaller ? (pages + smaller - 1) / smaller : 1;
    }
    CHECKF(smaller * pl->page_size < IGNIS_DECODE_MIN_CHUNK_TOKENS || items * pl->num_kv_heads > pl->wave,
           "%s: chunk of %d pages is not the smallest that fits", what, hd->chunk_pages);
  }
}

static void test_planner(void) {
  h_case("decode planner");
  h_rng rng = h_rng_make(0xdec0de);
  static const int64_t page_sizes[] = {1, 5, 16, 64};
  int splits = 0, unsplit = 0;
  for (int trial = 0; trial < 400; ++trial) {
    int64_t P = page_sizes[trial % 4], Hkv = h_rng_int(&rng, 1, 8), max_batch = h_rng_int(&rng, 1, 300);
    int64_t max_kv_len = h_rng_int(&rng, 0, trial % 3 ? 5000 : 70000);
    int mode = trial % 5 < 3 ? SPLIT_AUTO : trial % 5 - 2;
    int64_t fixed = mode == SPLIT_FIXED ? h_rng_int(&rng, 1, 40) : 0;
    ignis_decode_planner pl;
    CHECK(ignis_decode_planner_init(&pl, max_batch, max_kv_len, P, Hkv, 132, 4, mode == SPLIT_DISABLED,
                                    fixed) == 0);
    int64_t B = h_rng_int(&rng, 0, max_batch);
    int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(B + 1)),
            *last = malloc(sizeof(int32_t) * (size_t)(B + 1));
    indptr[0] = 0;
    for (int64_t b = 0; b < B; ++b) {
      int64_t L = h_rng_int(&rng, 0, 3) == 0 ? max_kv_len : h_rng_int(&rng, 0, max_kv_len);
      int64_t pages = (L + P - 1) / P;
      indptr[b + 1] = indptr[b] + (int32_t)pages;
      last[b] = pages ? (int32_t)(L - (pages - 1) * P) : 0;
    }
    size_t bytes = ignis_decode_schedule_bytes(&pl);
    void *a = calloc(1, bytes), *b2 = calloc(1, bytes);
    size_t used = ignis_decode_plan_batch(&pl, indptr, last, B, a);
    size_t used2 = ignis_decode_plan_batch(&pl, indptr, last, B, b2);
    CHECK(used <= bytes && used == used2 && memcmp(a, b2, used) == 0);
    char what[128];
    snprintf(what, sizeof what, "trial %d: P=%lld Hkv=%lld B=%lld max_kv_len=%lld %s", trial, (long long)P,
             (long long)Hkv, (long long)B, (long long)max_kv_len, split_names[mode]);
    check_schedule(&pl, indptr, last, B, a, what);
    if (mode == SPLIT_AUTO)
      *(ignis_decode_schedule_header_of(a)->chunk_pages ? &splits : &unsplit) += 1;
    free(a);
    free(b2);
    free(indptr);
    free(last);
  }
  CHECKF(splits > 20 && unsplit > 20, "auto: %d split, %d unsplit batches", splits, unsplit);

  /* A batch that fills the wave is not split; a short batch of long requests is. */
  ignis_decode_planner pl;
  ignis_decode_planner_init(&pl, 256, 32768, 16, 8, 132, 4, 0, 0);
  int32_t indptr[257], last[256];
  indptr[0] = 0;
  for (int b = 0; b < 256; ++b) {
    indptr[b + 1] = indptr[b] + 1 + (int32_t)h_rng_int(&rng, 0, 2047);
    last[b] = (int32_t)h_rng_int(&rng, 1, 16);
  }
  void *image = malloc(ignis_decode_schedule_bytes(&pl));
  ignis_decode_plan_batch(&pl, indptr, last, 256, image);
  CHECK(ignis_decode_schedule_header_of(image)->num_work == 256);
  ignis_decode_plan_batch(&pl, indptr, last, 4, image);
  CHECK(ignis_decode_schedule_header_of(image)->chunk_pages > 0);
  check_schedule(&pl, indptr, last, 4, image, "4 long requests");

  /* Host time: batch 256 (no split) and batch 48 (split search), 8 KV heads, up to 32k keys. */
  const int reps = 2000;
  int64_t batches[2] = {256, 48};
  for (int k = 0; k < 2; ++k) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ignis_decode_planner p1;
    ignis_decode_planner_init(&p1, 256, 32768, 16, batches[k] == 256 ? 8 : 1, 132, 4, 0, 0);
    free(image);
    image = malloc(ignis_decode_schedule_bytes(&p1));
    for (int r = 0; r < reps; ++r)
      ignis_decode_plan_batch(&p1, indptr, last, batches[k], image);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps;
    printf("planner: batch %lld: %.2f us per plan (chunk %d pages, %d items)\n", (long long)batches[k], us,
           ignis_decode_schedule_header_of(image)->chunk_pages,
           ignis_decode_schedule_header_of(image)->num_work);
    CHECKF(us < 50.0, "planning batch %lld takes %.1f us", (long long)batches[k], us);
  }
  free(image);

  /* Single decode: chunks of >= 256 keys, at most the size query's bound, none for short inputs. */
  int64_t lens[] = {0, 1, 255, 256, 511, 512, 1000, 33000, 1 << 20};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; ++i)
    for (int64_t hkv = 1; hkv <= 64; hkv *= 4) {
      int64_t chunk = ignis_decode_single_chunk_tokens(lens[i], hkv, 528);
      int64_t n = lens[i] > chunk ? (lens[i] + chunk - 1) / chunk : 1;
      CHECKF(chunk >= 1 && (n == 1 || chunk >= 256) && n <= ignis_decode_single_max_chunks(lens[i]) &&
                 n * hkv <= (n > 1 ? 528 : n * hkv),
             "single: kv_len %lld, %lld KV heads: chunk %lld", (long long)lens[i], (long long)hkv,
             (long long)chunk);
    }
}

/* ---- single decode -------------------------------------------------------------------------- */
static void run_single_case(h_backend backend, int64_t L, int64_t Hkv, int64_t group, int64_t D,
                            ignis_dtype dtype, ignis_kv_layout layout, const attn_opts *o, h_rng *rng) {
  const int64_t H = Hkv * group;
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  h_case("single_decode on %s: kv_len=%lld Hkv=%lld group=%lld D=%lld %s %s scale=%g cap=%g window=%d "
         "base=%d lse=%d",
         h_backend_name(backend), (long long)L, (long long)Hkv, (long long)group, (long long)D,
         ignis_dtype_name(dtype), nhd ? "NHD" : "HND", o->sm_scale, o->soft_cap, o->window_left, (int)o->base,
         o->with_lse);
  /* padded rows: token stride (NHD) / head stride (HND) larger than needed */
  const int64_t pad = backend == H_CUDA ? 8 : 4; /* the GPU needs 16-byte aligned rows */
  int64_t row = D + 8, st = nhd ? Hkv * row + pad : row, sh = nhd ? row : L * row + pad;
  int64_t shape[3] = {nhd ? L : Hkv, nhd ? Hkv : L, D}, strides[3] = {nhd ? st : sh, nhd ? sh : st, 1};
  int64_t extent = h_view_extent(0, 3, shape, strides) + 16;
  h_buf k = h_buf_alloc(backend, dtype, extent), v = h_buf_alloc(backend, dtype, extent + 8);
  for (int64_t i = 0; i < extent; ++i) {
    h_set(&k, i, h_rng_normal(rng));
    h_set(&v, i, h_rng_normal(rng));
  }
  h_buf_upload(&k);
  h_buf_upload(&v);
  const int64_t v_off = backend == H_CUDA ? 8 : 3;
  ignis_tensor tk = h_view(&k, 0, 3, shape, strides), tv = h_view(&v, v_off, 3, shape, strides);
  qo_set s;
  qo_make(&s, backend, dtype, 2, 1, H, D, (int)(L % 2), rng, 1.5);
  double *kd = to_doubles(&k), *vd = to_doubles(&v), q[256];
  double *ref_out = malloc(sizeof(double) * (size_t)(H * D)), *ref_lse = malloc(sizeof(double) * (size_t)H);
  int64_t *k_rows = malloc(sizeof(int64_t) * (size_t)(L + 1)),
          *v_rows = malloc(sizeof(int64_t) * (size_t)(L + 1));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t j = 0; j < L; ++j) {
      k_rows[j] = j * st + (h / group) * sh;
      v_rows[j] = v_off + k_rows[j];
    }
    qo_query(&s, 0, h, q);
    ref_attention(q, D, L, kd, k_rows, vd, v_rows, o, ref_out + h * D, ref_lse + h);
  }
  size_t bytes = 0;
  CHECK_STATUS(ignis_single_decode_workspace_size(H, D, L, &bytes), IGNIS_OK);
  h_buf ws = {0};
  if (backend == H_CUDA && bytes)
    ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes);
  qo_poison(&s);
  ignis_attention_options options = to_options(o);
  CHECK_STATUS(ignis_single_decode(&s.tq, &tk, &tv, layout, &options, NULL, &s.tout, o->with_lse ? &s.tlse : NULL,
                                   backend == H_CUDA ? ws.data : NULL, backend == H_CUDA ? bytes : 0, NULL),
               IGNIS_OK);
  qo_check(&s, ref_out, ref_lse, o->with_lse, "single_decode");
  CHECK(h_buf_changed(&k, NULL) == 0 && h_buf_changed(&v, NULL) == 0);
  if (backend == H_CUDA && bytes)
    h_buf_free(&ws);
  qo_free(&s);
  h_buf_free(&k);
  h_buf_free(&v);
  free(kd);
  free(vd);
  free(ref_out);
  free(ref_lse);
  free(k_rows);
  free(v_rows);
}

static void test_single(h_backend backend) {
  h_rng rng = h_rng_make(0x51a9 + (uint64_t)backend);
  int64_t lens[] = {0, 1, 7, 1000, 33000};
  int64_t groups[] = {1, 4, 7, 8};
  int64_t dims[] = {64, 128, 256};
  int variant = 0;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
    if (lens[li] > 5000 && backend == H_CPU)
      continue;
    for (int layout = 0; layout < 2; ++layout)
      for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi, ++variant) {
        attn_opts o = opts_variant(variant);
        run_single_case(backend, lens[li], 1 + variant % 2, groups[gi], dims[variant % 3],
                        variant % 2 ? IGNIS_F16 : IGNIS_BF16, (ignis_kv_layout)layout, &o, &rng);
      }
  }
}

/* ---- batch decode --------------------------------------------------------------------------- */
static void run_batch_case(h_backend backend, int64_t B, int64_t P, int64_t Hkv, int64_t group, int64_t D,
                           ignis_dtype dtype, ignis_kv_layout layout, int combined, int strided,
                           int64_t max_len, const attn_opts *o, h_rng *rng) {
  const int64_t H = Hkv * group;
  h_case(
      "batch decode on %s: B=%lld P=%lld Hkv=%lld group=%lld D=%lld %s %s %s%s max_len=%lld scale=%g cap=%g "
      "window=%d base=%d lse=%d",
      h_backend_name(backend), (long long)B, (long long)P, (long long)Hkv, (long long)group, (long long)D,
      ignis_dtype_name(dtype), layout == IGNIS_KV_LAYOUT_NHD ? "NHD" : "HND",
      combined ? "combined" : "separate", strided ? " strided" : "", (long long)max_len, o->sm_scale,
      o->soft_cap, o->window_left, (int)o->base, o->with_lse);
  kv_batch c;
  kv_make(&c, backend, dtype, B, P, Hkv, D, layout, combined, NULL, max_len, rng);
  qo_set s;
  qo_make(&s, backend, dtype, 3, B, H, D, strided, rng, 1.5);
  double *ref_out = malloc(sizeof(double) * (size_t)(B * H * D)),
         *ref_lse = malloc(sizeof(double) * (size_t)(B * H));
  kv_reference(&c, &s, o, ref_out, ref_lse);
  double *auto_out = malloc(sizeof(double) * (size_t)(B * H * D));
  int64_t fixed_pages = 96 / P > 1 ? 96 / P : 1;
  for (int mode = 0; mode < 3; ++mode) {
    plan_env e;
    if (!plan_open(&e, backend, &c, H, dtype, B + 2, max_len + 5, (split_mode)mode, fixed_pages, o))
      continue;
    qo_poison(&s);
    if (plan_update(&e, &c) && plan_run(&e, &c, &s, o->with_lse)) {
      char what[64];
      snprintf(what, sizeof what, "split %s", split_names[mode]);
      qo_check(&s, ref_out, ref_lse, o->with_lse, what);
      /* auto against disabled, directly */
      h_cmp cross;
      h_cmp_init(&cross);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            double got = h_get(&s.out, qo_index(&s.out, &s.tout, 3, b, h, d));
            if (mode == SPLIT_AUTO)
              auto_out[(b * H + h) * D + d] = got;
            else if (mode == SPLIT_DISABLED)
              h_cmp_add(&cross, (b * H + h) * D + d, got, auto_out[(b * H + h) * D + d], 2 * rtol_of(dtype));
          }
      if (mode == SPLIT_DISABLED)
        CHECK_CMP(&cross, "split auto vs disabled");
    }
    plan_close(&e);
  }
  CHECK(h_buf_changed(&s.q, NULL) == 0 && h_buf_changed(&c.k, NULL) == 0 &&
        h_buf_changed(&c.indices, NULL) == 0);
  free(auto_out);
  free(ref_out);
  free(ref_lse);
  qo_free(&s);
  kv_free(&c);
}

static void test_batch(h_backend backend) {
  static const int64_t page_sizes[] = {1, 5, 16, 64};
  static const int64_t groups[] = {1, 4, 6, 7, 8, 16};
  static const int64_t dims[] = {64, 128, 256};
  h_rng rng = h_rng_make(0xba7c4 + (uint64_t)backend);
  int variant = 0;
  for (size_t pi = 0; pi < sizeof page_sizes / sizeof page_sizes[0]; ++pi)
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi, ++variant) {
      attn_opts o = opts_variant(variant);
      int64_t group = groups[gi], Hkv = group >= 8 ? 1 + variant % 2 : 1 + variant % 3;
      run_batch_case(backend, 1 + variant % 5, page_sizes[pi], Hkv, group, dims[variant % 3],
                     variant % 2 ? IGNIS_F16 : IGNIS_BF16, (ignis_kv_layout)((variant / 2) % 2),
                     variant % 3 == 0, variant % 4 != 1, variant % 4 == 0 ? 3000 : 700, &o, &rng);
    }
}

/* Request r of a batch alone (a batch of one over the same pages): bit-identical out / lse with
 * disabled or fixed splits; and the plan reused across batches of other sizes and lengths. */
static void test_invariance_and_reuse(h_backend backend) {
  h_rng rng = h_rng_make(0x1a7 + (uint64_t)backend);
  const int64_t B = 5, P = 16, Hkv = 2, group = 4, D = 128, H = Hkv * group, r = 2;
  const int64_t lens[5] = {2900, 17, 0, 700, 1500};
  for (int mode = SPLIT_DISABLED; mode <= SPLIT_FIXED; ++mode)
    for (int which = 0; which < 2; ++which) {
      int64_t lens_r[5];
      memcpy(lens_r, lens, sizeof lens);
      lens_r[r] = which ? 2345 : 300;
      h_case("batch invariance on %s: split %s, request of %lld keys", h_backend_name(backend),
             split_names[mode], (long long)lens_r[r]);
      attn_opts o = opts_variant(which ? 2 : 0);
      kv_batch c;
      kv_make(&c, backend, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens_r, 0, &rng);
      qo_set s;
      qo_make(&s, backend, IGNIS_BF16, 3, B, H, D, 1, &rng, 1.5);
      double *ref_out = malloc(sizeof(double) * (size_t)(B * H * D)),
             *ref_lse = malloc(sizeof(double) * (size_t)(B * H));
      kv_reference(&c, &s, &o, ref_out, ref_lse);
      plan_env e;
      if (!plan_open(&e, backend, &c, H, IGNIS_BF16, B, 3000, (split_mode)mode, 3, &o)) {
        kv_free(&c);
        qo_free(&s);
        continue;
      }
      qo_poison(&s);
      plan_update(&e, &c);
      plan_run(&e, &c, &s, 1);
      qo_check(&s, ref_out, ref_lse, 1, "whole batch");
      /* The request alone: indptr {0, pages}, indices / last_page_len / q views at its offsets. */
      int64_t first_page = i32(&c.indptr)[r], pages = i32(&c.indptr)[r + 1] - first_page;
      kv_batch alone = c;
      alone.B = 1;
      alone.indptr = h_buf_alloc(backend, IGNIS_I32, 2);
      h_set(&alone.indptr, 0, 0);
      h_set(&alone.indptr, 1, (double)pages);
      h_buf_upload(&alone.indptr);
      alone.cache.indptr = h_view(&alone.indptr, 0, 1, (int64_t[]){2}, NULL);
      alone.cache.indices = h_view(&c.indices, first_page, 1, (int64_t[]){pages}, NULL);
      alone.cache.last_page_len = h_view(&c.last, r, 1, (int64_t[]){1}, NULL);
      const int32_t alone_last = i32(&c.last)[r];
      qo_set one = s;
      one.B = 1;
      one.tq.shape[0] = one.tout.shape[0] = one.tlse.shape[0] = 1;
      one.tq.data = (char *)s.tq.data + r * s.tq.strides[0] * (int64_t)s.q.elem_size;
      /* Keep the batch's results; the lone run writes into the same rows of a fresh poisoned copy. */
      h_buf batch_out = h_buf_alloc(H_CPU, IGNIS_BF16, s.out.count),
            batch_lse = h_buf_alloc(H_CPU, IGNIS_F32, s.lse.count);
      memcpy(batch_out.host, s.out.host, (size_t)s.out.count * s.out.elem_size);
      memcpy(batch_lse.host, s.lse.host, (size_t)s.lse.count * s.lse.elem_size);
      qo_poison(&s);
      one.tout.data = (char *)s.tout.data + r * s.tout.strides[0] * (int64_t)s.out.elem_size;
      one.tlse.data = (char *)s.tlse.data + r * s.tlse.strides[0] * (int64_t)s.lse.elem_size;
      CHECK_STATUS(
          ignis_decode_plan_update(e.plan, i32(&alone.indptr), &alone_last, 1, e.ws, e.ws_bytes, NULL),
          IGNIS_OK);
      CHECK_STATUS(
          ignis_decode_run(e.plan, &one.tq, &alone.cache, NULL, &one.tout, &one.tlse, e.ws, e.ws_bytes, NULL),
          IGNIS_OK);
      h_buf_download(&s.out);
      h_buf_download(&s.lse);
      int64_t differ = 0;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          int64_t i = qo_index(&s.out, &s.tout, 3, r, h, d);
          differ += memcmp((char *)s.out.host + i * 2, (char *)batch_out.host + i * 2, 2) != 0;
        }
        int64_t i = h_index(&s.lse, &s.tlse, (int64_t[]){r, h});
        differ += memcmp((char *)s.lse.host + i * 4, (char *)batch_lse.host + i * 4, 4) != 0;
      }
      CHECKF(differ == 0, "%lld elements differ between the request alone and inside the batch",
             (long long)differ);

      /* Reuse: more updates than staging slots with other batches, then the full batch again. */
      for (int u = 0; u < 6; ++u) {
        int64_t nb = 1 + u % B;
        CHECK_STATUS(
            ignis_decode_plan_update(e.plan, i32(&c.indptr), i32(&c.last), nb, e.ws, e.ws_bytes, NULL),
            IGNIS_OK);
      }
      qo_poison(&s);
      plan_update(&e, &c);
      plan_run(&e, &c, &s, 1);
      qo_check(&s, ref_out, ref_lse, 1, "re-planned batch");
      /* and a different batch with the same plan */
      {
        kv_batch c2;
        kv_make(&c2, backend, IGNIS_BF16, 3, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, NULL, 2999, &rng);
        qo_set s2;
        qo_make(&s2, backend, IGNIS_BF16, 3, 3, H, D, 0, &rng, 1.0);
        double *r2o = malloc(sizeof(double) * (size_t)(3 * H * D)),
               *r2l = malloc(sizeof(double) * (size_t)(3 * H));
        kv_reference(&c2, &s2, &o, r2o, r2l);
        qo_poison(&s2);
        plan_update(&e, &c2);
        plan_run(&e, &c2, &s2, 1);
        qo_check(&s2, r2o, r2l, 1, "plan reused for another batch");
        free(r2o);
        free(r2l);
        qo_free(&s2);
        kv_free(&c2);
      }
      plan_close(&e);
      h_buf_free(&batch_out);
      h_buf_free(&batch_lse);
      h_buf_free(&alone.indptr);
      free(ref_out);
      free(ref_lse);
      qo_free(&s);
      kv_free(&c);
    }
}

/* ---- bad inputs ----------------------------------------------------------------------------- */
static int outputs_untouched(qo_set *s) {
  return h_buf_untouched(&s->out) && h_buf_untouched(&s->lse) && h_buf_untouched(&s->q);
}

#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(outputs_untouched(&s), "a rejected call changed a buffer");                                       \
  } while (0)

static void test_bad_inputs(h_backend backend) {
  h_case("decode bad inputs on %s", h_backend_name(backend));
  h_rng rng = h_rng_make(0xbad + (uint64_t)backend);
  const int64_t B = 2, P = 4, Hkv = 2, D = 64, H = 4;
  const int64_t lens[2] = {6, 3};
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  kv_batch c;
  kv_make(&c, backend, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens, 0, &rng);
  qo_set s;
  qo_make(&s, backend, IGNIS_BF16, 3, B, H, D, 0, &rng, 1.0);
  qo_poison(&s);
  attn_opts o = opts_variant(0);
  plan_env e;
  plan_open(&e, backend, &c, H, IGNIS_BF16, B, 8, SPLIT_AUTO, 0, &o);
  ignis_decode_plan_config good = IGNIS_DECODE_PLAN_CONFIG_INIT, bad;
  good.device = h_backend_device(backend);
  good.num_qo_heads = H;
  good.num_kv_heads = Hkv;
  good.head_dim = D;
  good.page_size = P;
  good.max_batch_size = B;
  good.max_kv_len = 8;
  ignis_decode_plan *plan = NULL;
#define CONFIG_BAD(field, value, status, needle)                                                             \
  do {                                                                                                       \
    bad = good;                                                                                              \
    bad.field = value;                                                                                       \
    BAD(ignis_decode_plan_create(&bad, &plan), status, needle);                                              \
  } while (0)
  CONFIG_BAD(head_dim, 96, UNS, "config.head_dim");
  CONFIG_BAD(num_qo_heads, 5, INV, "config.num_qo_heads");
  CONFIG_BAD(num_kv_heads, 0, INV, "config.num_kv_heads");
  CONFIG_BAD(page_size, 0, INV, "config.page_size");
  CONFIG_BAD(q_dtype, IGNIS_F32, INV, "config.q_dtype");
  CONFIG_BAD(max_batch_size, 0, INV, "config.max_batch_size");
  CONFIG_BAD(max_kv_len, -1, INV, "config.max_kv_len");
  CONFIG_BAD(fixed_split_size, -1, INV, "config.fixed_split_size");
  CONFIG_BAD(disable_split_kv, 2, INV, "config.disable_split_kv");
  CONFIG_BAD(size, 8, INV, "config.size");
  CONFIG_BAD(options.size, 8, INV, "config.options.size");
  CONFIG_BAD(options.sm_scale, -1.0, INV, "config.options.sm_scale");
  CONFIG_BAD(options.logits_soft_cap, -0.5, INV, "config.options.logits_soft_cap");
  CONFIG_BAD(options.window_left, -2, INV, "config.options.window_left");
  CONFIG_BAD(options.lse_base, (ignis_lse_base)7, INV, "config.options.lse_base");
  BAD(ignis_decode_plan_create(NULL, &plan), INV, "config is NULL");
  CHECK(plan == NULL);

  /* plan_update: host index contents and maxima. */
  int32_t indptr[3] = {0, 2, 3}, last[2] = {2, 3};
  int32_t bad_indptr[3] = {0, 2, 1}, bad_last0[2] = {5, 3}, bad_last1[2] = {2, 0}, long_last[2] = {2, 3};
  int32_t long_indptr[3] = {0, 3, 4}; /* request 0: 3 pages -> 10 keys > max_kv_len 8 */
  BAD(ignis_decode_plan_update(e.plan, bad_indptr, last, B, e.ws, e.ws_bytes, NULL), INV, "kv_indptr_host");
  BAD(ignis_decode_plan_update(e.plan, indptr, bad_last0, B, e.ws, e.ws_bytes, NULL), INV,
      "kv_last_page_len_host[0]");
  BAD(ignis_decode_plan_update(e.plan, indptr, bad_last1, B, e.ws, e.ws_bytes, NULL), INV,
      "kv_last_page_len_host[1]");
  BAD(ignis_decode_plan_update(e.plan, long_indptr, long_last, B, e.ws, e.ws_bytes, NULL), INV, "max_kv_len");
  BAD(ignis_decode_plan_update(e.plan, indptr, last, B + 1, e.ws, e.ws_bytes, NULL), INV, "batch_size");
  BAD(ignis_decode_plan_update(NULL, indptr, last, B, e.ws, e.ws_bytes, NULL), INV, "plan");
#define RUN(qt, cache, ot, lt) ignis_decode_run(e.plan, (qt), (cache), NULL, (ot), (lt), e.ws, e.ws_bytes, NULL)
  BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "plan_update first");
  if (backend == H_CUDA) {
    BAD(ignis_decode_plan_update(e.plan, indptr, last, B, e.ws, e.ws_bytes - 300, NULL),
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    BAD(ignis_decode_plan_update(e.plan, indptr, last, B, NULL, 0, NULL), IGNIS_ERROR_INSUFFICIENT_WORKSPACE,
        "workspace");
  }
  CHECK_STATUS(ignis_decode_plan_update(e.plan, indptr, last, B, e.ws, e.ws_bytes, NULL), IGNIS_OK);

  /* run: tensors */
  ignis_tensor t;
  ignis_paged_kv_cache bc;
  t = s.tq;
  t.dtype = IGNIS_F16;
  BAD(RUN(&t, &c.cache, &s.tout, &s.tlse), INV, "q.dtype");
  t = s.tout;
  t.dtype = IGNIS_F16;
  BAD(RUN(&s.tq, &c.cache, &t, &s.tlse), INV, "out.dtype");
  t = s.tq;
  t.shape[0] = 1;
  BAD(RUN(&t, &c.cache, &s.tout, &s.tlse), INV, "q.shape[0]");
  t = s.tq;
  t.shape[1] = 2;
  BAD(RUN(&t, &c.cache, &s.tout, &s.tlse), INV, "q.shape[1]");
  t = s.tout;
  t.shape[2] = 32;
  BAD(RUN(&s.tq, &c.cache, &t, &s.tlse), INV, "out.shape");
  t = s.tout;
  t.strides[2] = 2;
  t.shape[2] = 64;
  BAD(RUN(&s.tq, &c.cache, &t, &s.tlse), UNS, "out.strides[-1]");
  t = s.tlse;
  t.dtype = IGNIS_F16;
  BAD(RUN(&s.tq, &c.cache, &s.tout, &t), INV, "lse.dtype");
  t = s.tlse;
  t.shape[1] = 3;
  BAD(RUN(&s.tq, &c.cache, &s.tout, &t), INV, "lse.shape[1]");
  BAD(RUN(&s.tq, &c.cache, &s.tq, &s.tlse), INV, "out overlaps q");
  bc = c.cache;
  bc.v_cache.dtype = IGNIS_F16;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.v_cache.dtype");
  bc = c.cache;
  bc.k_cache.dtype = bc.v_cache.dtype = IGNIS_F16;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.k_cache.dtype");
  bc = c.cache;
  bc.k_cache.shape[2] = bc.v_cache.shape[2] = 1;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.k_cache.shape[2]");
  bc = c.cache;
  bc.k_cache.shape[1] = bc.v_cache.shape[1] = 2;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "page_size");
  bc = c.cache;
  bc.indptr.shape[0] = 2;
  bc.last_page_len.shape[0] = 1;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.indptr.shape[0]");
  bc = c.cache;
  bc.size = 4;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.size");
  if (backend == H_CPU) {
    /* host index contents of the cache */
    h_set(&c.indices, 1, (double)c.num_pages);
    BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "cache.indices[1]");
    h_set(&c.indices, 1, 1);
    int32_t *ip = (int32_t *)c.indptr.host;
    ip[1] = 4;
    BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "cache.indptr");
    ip[1] = 2;
    int32_t *lp = (int32_t *)c.last.host;
    lp[1] = 2; /* valid, but not the planned length */
    BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "planned");
    lp[1] = 3;
  } else {
    BAD(ignis_decode_run(e.plan, &s.tq, &c.cache, NULL, &s.tout, &s.tlse, e.ws, e.ws_bytes - 300, NULL),
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
  }
  CHECK_STATUS(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), IGNIS_OK);
  qo_poison(&s);
#undef RUN

  /* single decode */
  {
    const int64_t L = 700;
    h_buf k = h_buf_alloc(backend, IGNIS_BF16, L * Hkv * D),
          v = h_buf_alloc(backend, IGNIS_BF16, L * Hkv * D);
    h_buf_upload(&k);
    h_buf_upload(&v);
    ignis_tensor tk = h_view(&k, 0, 3, (int64_t[]){L, Hkv, D}, NULL),
                 tv = h_view(&v, 0, 3, (int64_t[]){L, Hkv, D}, NULL);
    ignis_tensor q1 = s.tq, o1 = s.tout, l1 = s.tlse;
    q1.ndim = o1.ndim = 2;
    q1.shape[0] = o1.shape[0] = H;
    q1.shape[1] = o1.shape[1] = D;
    q1.strides[0] = o1.strides[0] = s.tq.strides[1];
    q1.strides[1] = o1.strides[1] = 1;
    o1.strides[0] = s.tout.strides[1];
    l1.ndim = 1;
    l1.shape[0] = H;
    l1.strides[0] = s.tlse.strides[1];
    size_t bytes = 0;
    CHECK_STATUS(ignis_single_decode_workspace_size(H, D, L, &bytes), IGNIS_OK);
    CHECK(bytes > 0);
    h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes);
    void *wsp = backend == H_CUDA ? ws.data : NULL;
    size_t wsb = backend == H_CUDA ? bytes : 0;
#define SINGLE(qt, kt, vt, layout, ot, lt)                                                                   \
  ignis_single_decode((qt), (kt), (vt), (layout), NULL, NULL, (ot), (lt), wsp, wsb, NULL)
    if (backend == H_CUDA) { /* documented: the GPU needs 16-byte aligned rows */
      ignis_tensor shifted_k = tk, shifted_v = tv;
      shifted_k.data = (char *)shifted_k.data + 2 * ignis_dtype_size(shifted_k.dtype);
      shifted_v.data = (char *)shifted_v.data + 2 * ignis_dtype_size(shifted_v.dtype);
      shifted_k.shape[0] = shifted_v.shape[0] = L - 1;
      BAD(SINGLE(&q1, &shifted_k, &shifted_v, IGNIS_KV_LAYOUT_NHD, &o1, &l1), UNS, "16-byte aligned");
    }
    ignis_tensor bk;
    bk = tk;
    bk.shape[2] = bk.strides[1] = 96;
    ignis_tensor q96 = q1, o96 = o1;
    q96.shape[1] = o96.shape[1] = 96;
    BAD(SINGLE(&q96, &bk, &bk, IGNIS_KV_LAYOUT_NHD, &o96, &l1), UNS, "head_dim");
    bk = tk;
    bk.shape[1] = 3;
    bk.shape[0] = L * Hkv / 3 / 2;
    BAD(SINGLE(&q1, &bk, &bk, IGNIS_KV_LAYOUT_NHD, &o1, &l1), INV, "num_qo_heads");
    bk = tv;
    bk.dtype = IGNIS_F16;
    BAD(SINGLE(&q1, &tk, &bk, IGNIS_KV_LAYOUT_NHD, &o1, &l1), INV, "v.dtype");
    bk = tv;
    bk.shape[0] = L - 1;
    BAD(SINGLE(&q1, &tk, &bk, IGNIS_KV_LAYOUT_NHD, &o1, &l1), INV, "v.shape");
    BAD(SINGLE(&q1, &tk, &tv, (ignis_kv_layout)5, &o1, &l1), INV, "layout");
    t = l1;
    t.shape[0] = H + 1;
    BAD(SINGLE(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &o1, &t), INV, "lse.shape[0]");
    t = o1;
    t.dtype = IGNIS_F16;
    BAD(SINGLE(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &t, &l1), INV, "out.dtype");
    ignis_attention_options bad_options = IGNIS_ATTENTION_OPTIONS_INIT;
    bad_options.window_left = -3;
    BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &bad_options, NULL, &o1, &l1, wsp, wsb, NULL), INV,
        "options.window_left");
    if (backend == H_CUDA) {
      BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, NULL, NULL, &o1, &l1, ws.data, bytes - 300, NULL),
          IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
      BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, NULL, NULL, &o1, &l1, NULL, 0, NULL),
          IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    }
    BAD(ignis_single_decode_workspace_size(H, 96, L, &bytes), UNS, "head_dim");
    BAD(ignis_single_decode_workspace_size(0, D, L, &bytes), INV, "num_qo_heads");
    CHECK_STATUS(SINGLE(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &o1, &l1), IGNIS_OK);
#undef SINGLE
    h_buf_free(&ws);
    h_buf_free(&k);
    h_buf_free(&v);
  }
  plan_close(&e);
  qo_free(&s);
  kv_free(&c);
}

int main(void) {
  h_init("test_decode");
  test_planner();
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_single(backend);
    test_batch(backend);
    test_invariance_and_reuse(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
