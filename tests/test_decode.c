/* Tests of decode attention (include/ignis/decode.h) and its planner (src/sched/decode_plan.h), on
 * every backend, against one fp64 reference written here from the header's math. The reference
 * (ref_decode) reads the paged cache exactly as the op is given it (views, strides, layout, page
 * table, last_page_len) through the host mirrors of its buffers, and for request b, token i of
 * q_len, query head h computes
 *     q_pos = kv_len - q_len + i;  keys j <= q_pos (and j >= q_pos - window_left) visible
 *     k_j = k_scale K[j], v_j = v_scale V[j] (K, V as stored: f16, bf16, fp8 values read exactly)
 *     ROPE_LLAMA: q and k_j rotated at q_pos and j (halves, angle pos / rope_scale * theta^(-2t/D))
 *     x_j = sm_scale <q, k_j> (+ ALiBi slope_h (j - q_pos)), soft-capped
 *     out = sum e^x_j v_j / Z,  Z = sum e^x_j (+ e^sink_h),  lse = log Z in the chosen base
 *
 * Planner: random batches under every policy (auto, disabled, fixed) must tile each request with
 * items in order, keep num_work / partial rows within the plan's bounds, honour the policy (no
 * split when the batch fills a wave, chunks of >= 256 tokens and the smallest that fits a wave,
 * fixed chunks exact), plan deterministically, and plan a batch of 256 in a few microseconds.
 * Single decode: NHD / HND with padded token strides, kv_len 0, 1, 7, 1000, 33000 (the long one
 * with few heads on the CPU), GQA groups, head dims 64 / 128 / 256, q f16 / bf16, K/V f16 / bf16 /
 * fp8 e4m3 / fp8 e5m2, every option.
 * Batch decode: random page permutations, page sizes 1, 5, 16, 64, groups 1, 4, 6, 7, 8, 16,
 * lengths 0 .. ~3000 (and one of 33001) ending mid-page or on a page boundary, K/V separate with
 * padded strides or one [pages, 2, ...] buffer, strided q / out / lse (lse transposed), q_len 1..6
 * (tokens with no visible key included), fp8 K/V with k_scale / v_scale != 1, every option (sm_scale,
 * soft cap, window, RoPE with rope_scale / rope_theta, ALiBi, sinks, both LSE bases, no LSE); each
 * case runs with split-KV auto, disabled and fixed (small chunks), each against the reference and
 * auto against disabled, and fixed run twice with no plan_update between must give the same bits
 * (the CUDA merge counters re-arm themselves). Batch invariance: with disabled or fixed splits a request gives
 * bit-identical out / lse alone and inside a batch (bf16, f16 + fp8 e4m3, bf16 + fp8 e5m2). Plan
 * reuse: the same plan re-planned with other lengths and batch sizes. CUDA only: one captured
 * graph of ignis_decode_run at the largest batch, replayed after plan_update with new lengths,
 * page tables and batch sizes; every replay against the reference, rows past the batch unwritten.
 * Outputs are poisoned first; every element in the view must be written, none outside it.
 * Tolerances (the GPU multiplies in 16 bits with f32 accumulation; fp8 K/V are exact inputs of
 * the reference): out within rtol * max|ref| (bf16 2e-2, f16 2e-3; doubled past 8192 keys), lse
 * within rtol / 2 * (1 + |ref|).
 * Block-table runs (ignis_decode_run_block_table): every split policy against the reference, with
 * max_seq_len the longest request, above it and below it (requests past the bound still complete),
 * padded and poisoned tables, lengths 0..8192 mixed; the bits of the planned run on uniform batches,
 * and on mixed ones below a wave (planned from their lengths where they run); CUDA only: one
 * captured graph replayed over new tables, lengths (some past the captured bound, padding rows of
 * length 0) and queries; runs right after a kernel that writes their seq_lens (ignis_get_seq_lens
 * over stale values, the transposed and the m16 kernel). ignis_decode_plan_copy_index_arrays: the
 * planned arrays in caller buffers.
 * Bad inputs: each returns the right status naming the parameter and writes nothing. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "sched/decode_plan.h"

#ifdef IGNIS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static double rtol_of(ignis_dtype dtype) {
  return dtype == IGNIS_BF16 ? 2e-2 : 2e-3;
}

static int is_fp8(ignis_dtype dtype) {
  return dtype == IGNIS_FP8_E4M3 || dtype == IGNIS_FP8_E5M2;
}

/* ---- options and extras ----------------------------------------------------------------------- */
typedef struct attn_opts {
  double sm_scale; /* 0: 1/sqrt(D) */
  double soft_cap;
  int window_left;
  ignis_lse_base base;
  int with_lse;
  ignis_pos_encoding pos;
  double rope_scale, rope_theta;
  double k_scale, v_scale; /* run extras */
  int sinks;               /* run extras: per-head sinks */
} attn_opts;

#define NUM_VARIANTS 12

static attn_opts opts_variant(int variant) {
  attn_opts o = {0.0, 0.0, -1, IGNIS_LSE_BASE2, 1, IGNIS_POS_ENCODING_NONE, 1.0, 1e4, 1.0, 1.0, 0};
  switch (variant % NUM_VARIANTS) {
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
  case 6:
    o.pos = IGNIS_POS_ENCODING_ROPE_LLAMA;
    o.sinks = 1;
    break;
  case 7:
    o.pos = IGNIS_POS_ENCODING_ROPE_LLAMA;
    o.rope_scale = 2.5;
    o.rope_theta = 5e5;
    o.window_left = 50;
    o.base = IGNIS_LSE_NATURAL;
    break;
  case 8:
    o.pos = IGNIS_POS_ENCODING_ALIBI;
    o.sinks = 1;
    break;
  case 9:
    o.pos = IGNIS_POS_ENCODING_ALIBI;
    o.soft_cap = 5.0;
    o.window_left = 20;
    o.base = IGNIS_LSE_NATURAL;
    break;
  case 10:
    o.sinks = 1;
    o.k_scale = 0.5;
    o.v_scale = 1.75;
    o.soft_cap = 6.0;
    break;
  case 11:
    o.sinks = 1;
    o.window_left = 0;
    o.sm_scale = 0.2;
    o.base = IGNIS_LSE_NATURAL;
    break;
  default:
    break;
  }
  return o;
}

/* fp8 caches always run with scales != 1. */
static attn_opts opts_for_kv(attn_opts o, ignis_dtype kv_dtype) {
  if (is_fp8(kv_dtype) && o.k_scale == 1.0 && o.v_scale == 1.0) {
    o.k_scale = 0.375;
    o.v_scale = 2.5;
  }
  return o;
}

static const char *pos_name(ignis_pos_encoding pos) {
  return pos == IGNIS_POS_ENCODING_ROPE_LLAMA ? "rope" : pos == IGNIS_POS_ENCODING_ALIBI ? "alibi" : "none";
}

/* The options as text, for the case description. */
static const char *opts_text(const attn_opts *o) {
  static char text[256];
  snprintf(text, sizeof text,
           "sm_scale=%g cap=%g window=%d lse=%s pos=%s rope_scale=%g rope_theta=%g k_scale=%g v_scale=%g "
           "sinks=%d",
           o->sm_scale, o->soft_cap, o->window_left,
           !o->with_lse                 ? "none"
           : o->base == IGNIS_LSE_BASE2 ? "base2"
                                        : "ln",
           pos_name(o->pos), o->rope_scale, o->rope_theta, o->k_scale, o->v_scale, o->sinks);
  return text;
}

static ignis_attention_options to_options(const attn_opts *o) {
  ignis_attention_options r = IGNIS_ATTENTION_OPTIONS_INIT;
  r.sm_scale = o->sm_scale;
  r.logits_soft_cap = o->soft_cap;
  r.window_left = o->window_left;
  r.lse_base = o->base;
  r.pos_encoding_mode = o->pos;
  r.rope_scale = o->rope_scale;
  r.rope_theta = o->rope_theta;
  return r;
}

/* Run extras of a case: scales, and sinks [H] f32 on the backend (uniform in [-1, sink_hi)). */
typedef struct extras_set {
  int sinks;
  h_buf sink_buf;
  ignis_tensor tsinks;
  ignis_attention_extras extras;
} extras_set;

static void extras_make(extras_set *x, h_backend backend, const attn_opts *o, int64_t H, double sink_hi,
                        h_rng *rng) {
  memset(x, 0, sizeof *x);
  x->extras = (ignis_attention_extras)IGNIS_ATTENTION_EXTRAS_INIT;
  x->extras.k_scale = o->k_scale;
  x->extras.v_scale = o->v_scale;
  x->sinks = o->sinks;
  if (o->sinks) {
    x->sink_buf = h_buf_alloc(backend, IGNIS_F32, H);
    for (int64_t h = 0; h < H; ++h)
      h_set(&x->sink_buf, h, h_rng_uniform(rng, -1.0, sink_hi));
    h_buf_upload(&x->sink_buf);
    x->tsinks = h_view(&x->sink_buf, 0, 1, (int64_t[]){H}, NULL);
  }
}

/* What the run takes: NULL for the defaults (exercises that path), else the extras. */
static const ignis_attention_extras *extras_of(extras_set *x) {
  if (!x->sinks && x->extras.k_scale == 1.0 && x->extras.v_scale == 1.0)
    return NULL;
  x->extras.sinks = x->sinks ? &x->tsinks : NULL;
  return &x->extras;
}

static const h_buf *extras_sinks(const extras_set *x) {
  return x->sinks ? &x->sink_buf : NULL;
}

static void extras_free(extras_set *x) {
  if (x->sinks)
    h_buf_free(&x->sink_buf);
}

/* ---- q / out / lse ------------------------------------------------------------------------ */
typedef struct qo_set {
  int ndim;        /* 3: [rows, H, D]; 2: [H, D] (single decode) */
  int64_t B, H, D; /* B: rows (batch * q_len) */
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

/* q as fp8 e4m3 (the values rounded to it, the same view): a plan with an fp8 q_dtype and a
 * 16-bit o_dtype, out staying in the dtype s was made with. */
static void qo_quantize_q(qo_set *s) {
  h_buf q8 = h_buf_alloc(s->q.backend, IGNIS_FP8_E4M3, s->q.count);
  for (int64_t i = 0; i < s->q.count; ++i)
    h_set(&q8, i, h_get(&s->q, i));
  h_buf_upload(&q8);
  ignis_tensor view = h_view(&q8, 0, s->tq.ndim, s->tq.shape, s->tq.strides);
  h_buf_free(&s->q);
  s->q = q8;
  s->tq = view;
}

#ifdef IGNIS_HAVE_CUDA /* used by the graph replay test */
/* The first `rows` rows of s (same buffers), with masks of just those rows; qo_sub_free after. */
static qo_set qo_sub(const qo_set *s, int64_t rows) {
  qo_set r = *s;
  r.B = rows;
  r.tq.shape[0] = r.tout.shape[0] = r.tlse.shape[0] = rows;
  r.out_mask = calloc((size_t)s->out.count, 1);
  r.lse_mask = calloc((size_t)s->lse.count, 1);
  h_view_mark(&r.out, &r.tout, r.out_mask);
  h_view_mark(&r.lse, &r.tlse, r.lse_mask);
  return r;
}

static void qo_sub_free(qo_set *r) {
  free(r->out_mask);
  free(r->lse_mask);
}
#endif

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

static int64_t lse_index(const qo_set *s, int64_t b, int64_t h) {
  int64_t idx[2] = {b, h};
  return h_index(&s->lse, &s->tlse, s->ndim == 3 ? idx : idx + 1);
}

/* q of (row, h) as doubles. */
static void qo_query(const qo_set *s, int64_t row, int64_t h, double *q) {
  for (int64_t d = 0; d < s->D; ++d)
    q[d] = h_get(&s->q, qo_index(&s->q, &s->tq, s->ndim, row, h, d));
}

/* Download and compare with the reference [rows, H, D] / [rows, H]; also nothing written outside.
 * tol_scale widens the tolerance (long contexts). */
static void qo_check(qo_set *s, const double *ref_out, const double *ref_lse, int with_lse, double tol_scale,
                     const char *what) {
  h_buf_download(&s->out);
  h_buf_download(&s->lse);
  double max_ref = 0;
  for (int64_t i = 0; i < s->B * s->H * s->D; ++i)
    max_ref = fabs(ref_out[i]) > max_ref ? fabs(ref_out[i]) : max_ref;
  double rtol = rtol_of(s->out.dtype) * tol_scale, out_tol = rtol * (max_ref > 1e-3 ? max_ref : 1e-3);
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
      int64_t i = lse_index(s, b, h);
      double got = h_get(&s->lse, i), ref = ref_lse[b * s->H + h];
      if (isinf(ref))
        bad_inf += !(isinf(got) && got < 0);
      else
        h_cmp_add(&lse_cmp, i, got, ref, 0.5 * rtol * (1 + fabs(ref)));
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

/* ---- the fp64 reference ------------------------------------------------------------------------ */
/* A paged cache as the op is given it, and the buffers (host mirrors) its views point into. */
typedef struct ref_cache {
  const ignis_paged_kv_cache *cache;
  const h_buf *k, *v, *indptr, *indices, *last;
} ref_cache;

static int64_t ref_i32(const h_buf *buf, const ignis_tensor *t, int64_t i) {
  return (int64_t)h_get(buf, h_index(buf, t, &i));
}

/* RoPE (Llama, non-interleaved halves) at position pos, from the formula. */
static void ref_rope(double *x, int64_t D, double pos, double rope_scale, double rope_theta) {
  for (int64_t t = 0; t < D / 2; ++t) {
    double angle = pos / rope_scale * pow(rope_theta, -2.0 * (double)t / (double)D);
    double c = cos(angle), s = sin(angle), a = x[t], b = x[t + D / 2];
    x[t] = a * c - b * s;
    x[t + D / 2] = b * c + a * s;
  }
}

static double ref_alibi_slope(int64_t h, int64_t num_heads) {
  int64_t n = 1;
  while (2 * n <= num_heads)
    n *= 2;
  return h < n ? pow(2.0, -8.0 * (double)(h + 1) / (double)n)
               : pow(2.0, -4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

/* Decode of every request of the cache: s->B = batch * q_len rows of q; ref_out [rows, H, D],
 * ref_lse [rows, H] in the base of o. sinks: NULL or [H] f32. */
static void ref_decode(const ref_cache *rc, const qo_set *s, int64_t q_len, const attn_opts *o,
                       const h_buf *sinks, double *ref_out, double *ref_lse) {
  const ignis_paged_kv_cache *c = rc->cache;
  const int nhd = c->layout == IGNIS_KV_LAYOUT_NHD;
  const int64_t P = c->k_cache.shape[nhd ? 1 : 2], Hkv = c->k_cache.shape[nhd ? 2 : 1],
                D = c->k_cache.shape[3];
  const int64_t batch = c->indptr.shape[0] - 1, H = s->H, group = H / Hkv;
  const double sm_scale = o->sm_scale > 0 ? o->sm_scale : 1.0 / sqrt((double)D);
  const double log_base = o->base == IGNIS_LSE_BASE2 ? log(2.0) : 1.0;
  const int rope = o->pos == IGNIS_POS_ENCODING_ROPE_LLAMA, alibi = o->pos == IGNIS_POS_ENCODING_ALIBI;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t first_page = ref_i32(rc->indptr, &c->indptr, b),
            pages = ref_i32(rc->indptr, &c->indptr, b + 1) - first_page;
    int64_t L = pages > 0 ? (pages - 1) * P + ref_i32(rc->last, &c->last_page_len, b) : 0;
    double *k = malloc(sizeof(double) * (size_t)(L * D + 1)),
           *v = malloc(sizeof(double) * (size_t)(L * D + 1));
    double *x = malloc(sizeof(double) * (size_t)(L + 1)), q[512];
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      for (int64_t j = 0; j < L; ++j) {
        int64_t page = ref_i32(rc->indices, &c->indices, first_page + j / P), slot = j % P;
        int64_t idx[4] = {page, nhd ? slot : kvh, nhd ? kvh : slot, 0};
        for (idx[3] = 0; idx[3] < D; ++idx[3]) {
          k[j * D + idx[3]] = o->k_scale * h_get(rc->k, h_index(rc->k, &c->k_cache, idx));
          v[j * D + idx[3]] = o->v_scale * h_get(rc->v, h_index(rc->v, &c->v_cache, idx));
        }
        if (rope)
          ref_rope(k + j * D, D, (double)j, o->rope_scale, o->rope_theta);
      }
      for (int64_t i = 0; i < q_len; ++i)
        for (int64_t g = 0; g < group; ++g) {
          int64_t h = kvh * group + g, row = b * q_len + i, q_pos = L - q_len + i;
          qo_query(s, row, h, q);
          if (rope)
            ref_rope(q, D, (double)q_pos, o->rope_scale, o->rope_theta);
          double sink = sinks ? h_get(sinks, h) : -INFINITY, m = sink;
          for (int64_t j = 0; j < L; ++j) {
            if (j > q_pos || (o->window_left >= 0 && j < q_pos - o->window_left))
              continue;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += q[d] * k[j * D + d];
            x[j] = sm_scale * dot;
            if (alibi)
              x[j] += ref_alibi_slope(h, H) * (double)(j - q_pos);
            if (o->soft_cap > 0)
              x[j] = o->soft_cap * tanh(x[j] / o->soft_cap);
            m = x[j] > m ? x[j] : m;
          }
          double *out = ref_out + (row * H + h) * D, z = sinks ? exp(sink - m) : 0.0;
          for (int64_t d = 0; d < D; ++d)
            out[d] = 0;
          for (int64_t j = 0; j < L; ++j) {
            if (j > q_pos || (o->window_left >= 0 && j < q_pos - o->window_left))
              continue;
            double w = exp(x[j] - m);
            z += w;
            for (int64_t d = 0; d < D; ++d)
              out[d] += w * v[j * D + d];
          }
          for (int64_t d = 0; d < D && z > 0; ++d)
            out[d] /= z;
          ref_lse[row * H + h] = z > 0 ? (m + log(z)) / log_base : -INFINITY;
        }
    }
    free(k);
    free(v);
    free(x);
  }
}

/* ---- paged batches -------------------------------------------------------------------------- */
typedef struct kv_batch {
  int64_t B, P, Hkv, D, num_pages, total_pages;
  ignis_kv_layout layout;
  int combined;
  int64_t *len;
  h_buf k, v, indptr, indices, last;
  int64_t k_off, v_off, sp, st, sh;
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

static ref_cache kv_ref(const kv_batch *c) {
  ref_cache r = {&c->cache, &c->k, c->combined ? &c->k : &c->v, &c->indptr, &c->indices, &c->last};
  return r;
}

/* Write page tables for lengths len[0 .. B) (pages drawn from a random permutation of the pool)
 * into the index buffers' host mirrors and upload them. */
static void kv_tables(kv_batch *c, int64_t B, const int64_t *len, h_rng *rng) {
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)c->num_pages);
  for (int64_t i = 0; i < c->num_pages; ++i)
    perm[i] = i;
  for (int64_t i = c->num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(rng, 0, i), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int64_t acc = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t pages = (len[b] + c->P - 1) / c->P;
    h_set(&c->indptr, b, (double)acc);
    for (int64_t i = 0; i < pages; ++i)
      h_set(&c->indices, acc + i, (double)perm[acc + i]);
    h_set(&c->last, b, pages ? (double)(len[b] - (pages - 1) * c->P) : 0.0);
    acc += pages;
  }
  h_set(&c->indptr, B, (double)acc);
  free(perm);
  h_buf_upload(&c->indptr);
  h_buf_upload(&c->indices);
  h_buf_upload(&c->last);
}

/* Lengths given (len != NULL) or random in 0..max_len with zeros, short ones, full pages and
 * mid-page ends. Stored K is N(0,1) / k_scale and V is N(0,1) / v_scale, so the keys and values the
 * attention sees are of order 1. */
static void kv_make(kv_batch *c, h_backend backend, ignis_dtype dtype, int64_t B, int64_t P, int64_t Hkv,
                    int64_t D, ignis_kv_layout layout, int combined, const int64_t *len, int64_t max_len,
                    const attn_opts *o, h_rng *rng) {
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
                : kind == 2 ? h_rng_int(rng, 1, max_len < 8 ? max_len : 8)
                            : h_rng_int(rng, 1, max_len);
    c->total_pages += (c->len[b] + P - 1) / P;
  }
  c->num_pages = c->total_pages + 3;
  c->indptr = h_buf_alloc(backend, IGNIS_I32, B + 1);
  c->indices = h_buf_alloc(backend, IGNIS_I32, c->total_pages + 1);
  c->last = h_buf_alloc(backend, IGNIS_I32, B + 1);
  kv_tables(c, B, c->len, rng);
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  /* the GPU needs 16-byte aligned rows: pad in 16 bytes there, oddly on the CPU */
  const int64_t unit = backend == H_CUDA ? 16 / (int64_t)ignis_dtype_size(dtype) : 3;
  if (combined) {
    int64_t page_elems = P * Hkv * D;
    c->sp = 2 * page_elems;
    c->st = nhd ? Hkv * D : D;
    c->sh = nhd ? D : P * D;
    c->v_off = page_elems;
    c->k = h_buf_alloc(backend, dtype, c->num_pages * c->sp);
  } else {
    int64_t row = D + unit;
    c->st = nhd ? Hkv * row : row;
    c->sh = nhd ? row : P * row;
    c->sp = P * Hkv * row + 2 * unit;
    c->v_off = unit;
    c->k = h_buf_alloc(backend, dtype, c->num_pages * c->sp + unit);
    c->v = h_buf_alloc(backend, dtype, c->num_pages * c->sp + 2 * unit);
  }
  for (int64_t e = 0; e < c->k.count; ++e) {
    int value_half = combined && e % c->sp >= c->v_off;
    h_set(&c->k, e, h_rng_normal(rng) / (value_half ? o->v_scale : o->k_scale));
  }
  h_buf_upload(&c->k);
  if (!combined) {
    for (int64_t e = 0; e < c->v.count; ++e)
      h_set(&c->v, e, h_rng_normal(rng) / o->v_scale);
    h_buf_upload(&c->v);
  }
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
  if (!c->combined)
    h_buf_free(&c->v);
  h_buf_free(&c->indptr);
  h_buf_free(&c->indices);
  h_buf_free(&c->last);
  free(c->len);
}

static int64_t kv_max_len(const kv_batch *c) {
  int64_t m = 0;
  for (int64_t b = 0; b < c->B; ++b)
    m = c->len[b] > m ? c->len[b] : m;
  return m;
}

/* Wider tolerances for long contexts. */
static double tol_scale_for(int64_t max_len) {
  return max_len > 8192 ? 2.0 : 1.0;
}

/* ---- plans ---------------------------------------------------------------------------------- */
typedef enum split_mode { SPLIT_AUTO = 0, SPLIT_DISABLED = 1, SPLIT_FIXED = 2 } split_mode;
static const char *const split_names[] = {"auto", "disabled", "fixed"};

typedef struct plan_spec {
  int64_t H, Hkv, D, P, q_len, max_batch, max_kv_len, fixed_pages;
  ignis_dtype q_dtype, kv_dtype; /* q fp8 e4m3: out (o_dtype) bf16 */
  split_mode mode;
  attn_opts o;
} plan_spec;

typedef struct plan_env {
  ignis_decode_plan *plan;
  h_buf workspace;
  void *ws;
  size_t ws_bytes;
} plan_env;

static int plan_open(plan_env *e, h_backend backend, const plan_spec *sp) {
  memset(e, 0, sizeof *e);
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_qo_heads = sp->H;
  config.num_kv_heads = sp->Hkv;
  config.head_dim = sp->D;
  config.page_size = sp->P;
  config.q_dtype = sp->q_dtype;
  config.kv_dtype = sp->kv_dtype;
  if (sp->q_dtype == IGNIS_FP8_E4M3)
    config.o_dtype = IGNIS_BF16;
  config.q_len_per_req = sp->q_len == 1 ? 0 : sp->q_len; /* 0 means 1: both spellings get used */
  config.max_batch_size = sp->max_batch;
  config.max_kv_len = sp->max_kv_len;
  config.disable_split_kv = sp->mode == SPLIT_DISABLED;
  config.fixed_split_size = sp->mode == SPLIT_FIXED ? sp->fixed_pages : 0;
  config.options = to_options(&sp->o);
  if (!CHECK_STATUS(ignis_decode_plan_create(&config, &e->plan), IGNIS_OK))
    return 0;
  CHECK_STATUS(ignis_decode_workspace_size(e->plan, &e->ws_bytes), IGNIS_OK);
  CHECKF(backend != H_CPU || e->ws_bytes == 0, "workspace %zu bytes on %s", e->ws_bytes, h_backend_name(backend));
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

static int plan_run(plan_env *e, const kv_batch *c, qo_set *s, extras_set *x, int with_lse) {
  return CHECK_STATUS(ignis_decode_run(e->plan, &s->tq, &c->cache, extras_of(x), &s->tout,
                                       with_lse ? &s->tlse : NULL, e->ws, e->ws_bytes, NULL),
                      IGNIS_OK);
}

/* The run with the plan's copies of kv_indptr / kv_last_page_len (ignis_decode_plan_index_views)
 * in place of the cache's own. */
static int plan_run_views(plan_env *e, const kv_batch *c, qo_set *s, extras_set *x, int with_lse) {
  ignis_paged_kv_cache cache = c->cache;
  if (!CHECK_STATUS(ignis_decode_plan_index_views(e->plan, e->ws, e->ws_bytes, &cache.indptr, &cache.last_page_len),
                    IGNIS_OK))
    return 0;
  CHECKF(cache.indptr.shape[0] == c->B + 1 && cache.last_page_len.shape[0] == c->B &&
             cache.indptr.device.type == c->cache.indptr.device.type,
         "index views: shapes %lld / %lld for batch %lld", (long long)cache.indptr.shape[0],
         (long long)cache.last_page_len.shape[0], (long long)c->B);
  return CHECK_STATUS(ignis_decode_run(e->plan, &s->tq, &cache, extras_of(x), &s->tout, with_lse ? &s->tlse : NULL,
                                       e->ws, e->ws_bytes, NULL),
                      IGNIS_OK);
}

/* ---- planner ------------------------------------------------------------------------------ */
/* The planner's schedule of a batch, with the chunk its policy chooses for it. */
static size_t plan_batch_of(const ignis_decode_planner *pl, const int32_t *indptr, const int32_t *last, int64_t B,
                            void *image) {
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b)
    longest = indptr[b + 1] - indptr[b] > longest ? indptr[b + 1] - indptr[b] : longest;
  return ignis_decode_plan_batch(pl, ignis_decode_choose_chunk_pages(pl, indptr, longest, B), indptr, last, B, image);
}

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
  /* merge counters (core/params.h: fused_merge): zeros right after the items, inside the image, and
   * the kernel's index f / 8 + g + b of group g of every split request b unique among them */
  int64_t groups_room = ignis_decode_merge_counters(hd->num_partials, B, 1);
  const uint32_t *counters = (const uint32_t *)(w + hd->num_work);
  unsigned char *taken = calloc((size_t)groups_room + 1, 1);
  int counters_ok = (size_t)((const char *)(counters + groups_room * pl->num_kv_heads) - (const char *)image) <=
                    ignis_decode_schedule_bytes(pl);
  for (int64_t b = 0; b < B && counters_ok; ++b) {
    int64_t first = rp[b], n = rp[b + 1] - rp[b];
    for (int64_t g = 0; g * IGNIS_DECODE_MERGE_GROUP < n; ++g) {
      int64_t at = first / IGNIS_DECODE_MERGE_GROUP + g + b;
      counters_ok &= at < groups_room && !taken[at];
      if (at < groups_room)
        taken[at] = 1;
    }
  }
  for (int64_t k = 0; k < groups_room * pl->num_kv_heads && counters_ok; ++k)
    counters_ok &= counters[k] == 0;
  CHECKF(counters_ok, "%s: merge counters (%lld groups) not unique, outside the image or not zero", what,
         (long long)groups_room);
  free(taken);
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
  else if (hd->chunk_pages > 0 && B * pl->num_kv_heads >= pl->wave) {
    /* a full batch: the longest request in 2..IGNIS_DECODE_BALANCE_SPLITS chunks */
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b)
      longest = indptr[b + 1] - indptr[b] > longest ? indptr[b + 1] - indptr[b] : longest;
    int64_t splits = (longest + hd->chunk_pages - 1) / hd->chunk_pages;
    CHECKF(splits >= 2 && splits <= IGNIS_DECODE_BALANCE_SPLITS &&
               hd->chunk_pages == (longest + splits - 1) / splits &&
               chunk_tokens >= IGNIS_DECODE_MIN_CHUNK_TOKENS,
           "%s: balance split of a full batch %lld: chunk %d pages, longest %lld", what, (long long)B,
           hd->chunk_pages, (long long)longest);
  } else if (hd->chunk_pages > 0) {
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
    size_t used = plan_batch_of(&pl, indptr, last, B, a);
    size_t used2 = plan_batch_of(&pl, indptr, last, B, b2);
    CHECK(used <= bytes && used == used2 && memcmp(a, b2, used) == 0);
    ignis_decode_schedule_header *hd = ignis_decode_schedule_header_of(a);
    CHECK(used == ignis_decode_schedule_work_offset(&pl) + (size_t)hd->num_work * sizeof(ignis_decode_work) +
                      (size_t)ignis_decode_merge_counters(hd->num_partials, B, Hkv) * sizeof(uint32_t));
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

  /* 64 equal requests of 4096 keys x 8 KV heads on 132 SMs x 3 blocks (1.3 waves unsplit) run
   * as 3 chunks each (4 waves of a third); a short batch of long requests is split to fill a wave. */
  ignis_decode_planner pl;
  ignis_decode_planner_init(&pl, 256, 32768, 16, 8, 132, 3, 0, 0);
  int32_t indptr[257], last[256];
  for (int b = 0; b <= 64; ++b)
    indptr[b] = 256 * b;
  for (int b = 0; b < 64; ++b)
    last[b] = 16;
  void *image = malloc(ignis_decode_schedule_bytes(&pl));
  plan_batch_of(&pl, indptr, last, 64, image);
  CHECKF(ignis_decode_schedule_header_of(image)->chunk_pages == 86 &&
             ignis_decode_schedule_header_of(image)->num_work == 192,
         "balanced split of 64 x 4096: chunk %d pages, %d items", ignis_decode_schedule_header_of(image)->chunk_pages,
         ignis_decode_schedule_header_of(image)->num_work);
  check_schedule(&pl, indptr, last, 64, image, "64 equal requests");
  indptr[0] = 0;
  for (int b = 0; b < 256; ++b) {
    indptr[b + 1] = indptr[b] + 1 + (int32_t)h_rng_int(&rng, 0, 2047);
    last[b] = (int32_t)h_rng_int(&rng, 1, 16);
  }
  plan_batch_of(&pl, indptr, last, 256, image);
  check_schedule(&pl, indptr, last, 256, image, "256 random requests");
  plan_batch_of(&pl, indptr, last, 4, image);
  CHECK(ignis_decode_schedule_header_of(image)->chunk_pages > 0);
  check_schedule(&pl, indptr, last, 4, image, "4 long requests");

  /* Length plans (block-table batches below a wave, planned where they run): with the bound at or
   * past the longest request, the planner's schedule of the same lengths; below it, every request
   * still tiled to its end within wave_items items. */
  int length_splits = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t P = page_sizes[trial % 4], Hkv = h_rng_int(&rng, 1, 8), wave = 132 * 4;
    const int64_t B = h_rng_int(&rng, 2, wave / Hkv - 1 < 300 ? wave / Hkv - 1 : 300);
    const int64_t max_len = h_rng_int(&rng, 1, trial % 3 ? 9000 : 70000);
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)B), *pages = malloc(sizeof(int32_t) * (size_t)B),
            *ip = malloc(sizeof(int32_t) * (size_t)(B + 1)), *lp_last = malloc(sizeof(int32_t) * (size_t)B);
    int64_t longest = 0;
    ip[0] = 0;
    for (int64_t b = 0; b < B; ++b) {
      int kind = (int)h_rng_int(&rng, 0, 4);
      lens[b] = (int32_t)(kind == 0 ? 0 : kind == 1 ? max_len : h_rng_int(&rng, 1, max_len));
      longest = lens[b] > longest ? lens[b] : longest;
      int64_t pg = (lens[b] + P - 1) / P;
      ip[b + 1] = ip[b] + (int32_t)pg;
      lp_last[b] = pg ? (int32_t)(lens[b] - (pg - 1) * P) : 0;
    }
    const int64_t bound = trial % 4 == 0 ? longest / 3 : trial % 4 == 1 ? longest + P * 7 : longest;
    const int64_t bound_pages = (bound + P - 1) / P;
    if (bound_pages <= ignis_decode_min_chunk_pages(P)) /* the front end plans such a batch uniformly */
      goto next;
    {
      ignis_decode_planner pl;
      CHECK(ignis_decode_planner_init(&pl, B, bound > longest ? bound : longest, P, Hkv, 132, 4, 0, 0) == 0);
      const ignis_decode_length_plan lp = {(int32_t)(wave / Hkv), (int32_t)ignis_decode_min_chunk_pages(P),
                                           (int32_t)bound_pages};
      for (int64_t b = 0; b < B; ++b)
        pages[b] = ignis_decode_length_pages(lens[b], (int32_t)P, lp.bound_pages);
      ignis_decode_work *w = malloc(sizeof(ignis_decode_work) * (size_t)lp.wave_items);
      int32_t *rp = malloc(sizeof(int32_t) * (size_t)(B + 1));
      const int32_t n = ignis_decode_plan_lengths(&lp, lens, pages, B, P, rp, w);
      char what[128];
      snprintf(what, sizeof what, "length plan %d: P=%lld Hkv=%lld B=%lld longest=%lld bound=%lld", trial,
               (long long)P, (long long)Hkv, (long long)B, (long long)longest, (long long)bound);
      int ok = n <= lp.wave_items;
      int64_t i = 0;
      for (int64_t b = 0; b < B && ok; ++b) { /* items tile [0, len) in order, partial rows as planned */
        int64_t pos = 0, first = i;
        while (i < n && w[i].request == b) {
          ok &= w[i].kv_start == pos && (w[i].kv_end > pos || lens[b] == 0);
          pos = w[i++].kv_end;
        }
        ok &= pos == lens[b] && i > first;
        ok &= i - first == 1 ? w[first].partial == -1 && rp[b + 1] == rp[b]
                             : rp[b + 1] - rp[b] == i - first && w[first].partial == rp[b];
      }
      CHECKF(ok && i == n, "%s: items do not tile the batch (%d items)", what, n);
      length_splits += n > B;
      if (bound >= longest) { /* the planner's own schedule of these lengths */
        void *image = calloc(1, ignis_decode_schedule_bytes(&pl));
        plan_batch_of(&pl, ip, lp_last, B, image);
        const ignis_decode_schedule_header *hd = ignis_decode_schedule_header_of(image);
        CHECKF(hd->num_work == n && memcmp(ignis_decode_schedule_work_of(&pl, image), w, sizeof *w * (size_t)n) == 0 &&
                   memcmp(ignis_decode_schedule_partials_of(image), rp, sizeof *rp * (size_t)(B + 1)) == 0,
               "%s: not the planner's schedule (%d items against %d)", what, n, hd->num_work);
        free(image);
      }
      free(w);
      free(rp);
    }
  next:
    free(lens);
    free(pages);
    free(ip);
    free(lp_last);
  }
  CHECKF(length_splits > 50, "length plans: %d of 300 split", length_splits);

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
      plan_batch_of(&p1, indptr, last, batches[k], image);
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
static ignis_dtype kv_kind(ignis_dtype q_dtype, int kind) {
  return kind == 0 ? q_dtype : kind == 1 ? IGNIS_FP8_E4M3 : IGNIS_FP8_E5M2;
}

/* [L, Hkv, D] (NHD) or [Hkv, L, D] (HND) as a cache of one page of L tokens: [1, ...]. */
static ignis_tensor as_one_page(const ignis_tensor *t) {
  ignis_tensor r = *t;
  r.ndim = 4;
  for (int d = 3; d >= 1; --d) {
    r.shape[d] = t->shape[d - 1];
    r.strides[d] = t->strides[d - 1];
  }
  r.shape[0] = 1;
  r.strides[0] = 0;
  return r;
}

static void run_single_case(h_backend backend, int64_t L, int64_t Hkv, int64_t group, int64_t D,
                            ignis_dtype q_dtype, ignis_dtype kv_dtype, ignis_kv_layout layout, attn_opts o,
                            h_rng *rng) {
  o = opts_for_kv(o, kv_dtype);
  const int64_t H = Hkv * group;
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  h_case("single_decode on %s: kv_len=%lld Hkv=%lld group=%lld D=%lld q=%s kv=%s %s %s",
         h_backend_name(backend), (long long)L, (long long)Hkv, (long long)group, (long long)D,
         ignis_dtype_name(q_dtype), ignis_dtype_name(kv_dtype), nhd ? "NHD" : "HND", opts_text(&o));
  /* padded rows: token stride (NHD) / head stride (HND) larger than needed; the GPU needs 16-byte
   * aligned rows */
  const int64_t unit = backend == H_CUDA ? 16 / (int64_t)ignis_dtype_size(kv_dtype) : 4;
  int64_t row = D + unit, st = nhd ? Hkv * row + unit : row, sh = nhd ? row : L * row + unit;
  int64_t shape[3] = {nhd ? L : Hkv, nhd ? Hkv : L, D}, strides[3] = {nhd ? st : sh, nhd ? sh : st, 1};
  int64_t extent = h_view_extent(0, 3, shape, strides) + 2 * unit;
  h_buf k = h_buf_alloc(backend, kv_dtype, extent), v = h_buf_alloc(backend, kv_dtype, extent + unit);
  for (int64_t i = 0; i < extent; ++i) {
    h_set(&k, i, h_rng_normal(rng) / o.k_scale);
    h_set(&v, i, h_rng_normal(rng) / o.v_scale);
  }
  h_buf_upload(&k);
  h_buf_upload(&v);
  const int64_t v_off = backend == H_CUDA ? unit : 3;
  ignis_tensor tk = h_view(&k, 0, 3, shape, strides), tv = h_view(&v, v_off, 3, shape, strides);
  qo_set s;
  qo_make(&s, backend, q_dtype, 2, 1, H, D, (int)(L % 2), rng, 1.5);
  extras_set x;
  extras_make(&x, backend, &o, H, log((double)L + 1.0) + 1.0, rng);

  /* the reference reads the same K / V as one page */
  h_buf indptr = h_buf_alloc(H_CPU, IGNIS_I32, 2), indices = h_buf_alloc(H_CPU, IGNIS_I32, 1),
        last = h_buf_alloc(H_CPU, IGNIS_I32, 1);
  h_set(&indptr, 1, L > 0 ? 1.0 : 0.0);
  h_set(&last, 0, (double)L);
  ignis_paged_kv_cache page = IGNIS_PAGED_KV_CACHE_INIT;
  page.layout = layout;
  page.k_cache = as_one_page(&tk);
  page.v_cache = as_one_page(&tv);
  page.indptr = h_view(&indptr, 0, 1, (int64_t[]){2}, NULL);
  page.indices = h_view(&indices, 0, 1, (int64_t[]){1}, NULL);
  page.last_page_len = h_view(&last, 0, 1, (int64_t[]){1}, NULL);
  ref_cache rc = {&page, &k, &v, &indptr, &indices, &last};
  double *ref_out = malloc(sizeof(double) * (size_t)(H * D)), *ref_lse = malloc(sizeof(double) * (size_t)H);
  ref_decode(&rc, &s, 1, &o, extras_sinks(&x), ref_out, ref_lse);

  size_t bytes = 0;
  CHECK_STATUS(ignis_single_decode_workspace_size(H, D, L, &bytes), IGNIS_OK);
  h_buf ws = {0};
  if (backend == H_CUDA && bytes)
    ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes);
  qo_poison(&s);
  ignis_attention_options options = to_options(&o);
  if (CHECK_STATUS(ignis_single_decode(&s.tq, &tk, &tv, layout, &options, extras_of(&x), &s.tout,
                                       o.with_lse ? &s.tlse : NULL, backend == H_CUDA ? ws.data : NULL,
                                       backend == H_CUDA ? bytes : 0, NULL),
                   IGNIS_OK))
    qo_check(&s, ref_out, ref_lse, o.with_lse, tol_scale_for(L), "single_decode");
  CHECK(h_buf_changed(&k, NULL) == 0 && h_buf_changed(&v, NULL) == 0);
  if (backend == H_CUDA && bytes)
    h_buf_free(&ws);
  h_buf_free(&indptr);
  h_buf_free(&indices);
  h_buf_free(&last);
  extras_free(&x);
  qo_free(&s);
  h_buf_free(&k);
  h_buf_free(&v);
  free(ref_out);
  free(ref_lse);
}

static void test_single(h_backend backend) {
  h_rng rng = h_rng_make(0x51a9 + (uint64_t)backend);
  static const int64_t lens[] = {0, 1, 7, 1000, 33000};
  static const int64_t groups[] = {1, 4, 7, 8};
  static const int64_t dims[] = {64, 128, 256};
  int variant = 0;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li)
    for (int layout = 0; layout < 2; ++layout)
      for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi, ++variant) {
        if (lens[li] > 5000 && backend == H_CPU && gi > 0) /* the CPU: one long case per layout */
          continue;
        ignis_dtype q_dtype = variant % 2 ? IGNIS_F16 : IGNIS_BF16;
        run_single_case(backend, lens[li], 1 + variant % 2, groups[gi], dims[variant % 3], q_dtype,
                        kv_kind(q_dtype, (variant / 3) % 3), (ignis_kv_layout)layout,
                        opts_variant(variant + variant / NUM_VARIANTS), &rng);
      }
  /* head dim 512 (on CUDA the m16 kernel, its warps splitting the head dim): every option, K/V
   * 16-bit and both fp8, GQA 1 to 16, a length that splits into chunks */
  static const int64_t lens512[] = {1, 37, 1000, 5003};
  static const int64_t groups512[] = {1, 5, 8, 16};
  for (int v = 0; v < NUM_VARIANTS; ++v) {
    ignis_dtype q_dtype = v % 2 ? IGNIS_F16 : IGNIS_BF16;
    run_single_case(backend, lens512[v % 4], 1 + v % 2, groups512[(v / 2) % 4], 512, q_dtype,
                    kv_kind(q_dtype, v % 3), (ignis_kv_layout)((v / 3) % 2), opts_variant(v), &rng);
  }
}

/* ---- batch decode --------------------------------------------------------------------------- */
/* The page kernel's test batches: PAGE_SHAPE_BATCH requests (enough to fill an H200 unsplit) of
 * 0..256 keys, with empty, one-key, mid-page and full-page lengths among them. */
enum { PAGE_SHAPE_BATCH = 128 };
static void page_shape_lens(int64_t *lens) {
  for (int i = 0; i < PAGE_SHAPE_BATCH; ++i)
    lens[i] = (i * 37) % 257;
}

typedef struct batch_shape {
  int64_t B, P, Hkv, group, D, q_len, max_len;
  ignis_dtype q_dtype, kv_dtype;
  ignis_kv_layout layout;
  int combined, strided;
  const int64_t *lens; /* NULL: random, up to max_len */
} batch_shape;

static void run_batch_case(h_backend backend, const batch_shape *bs, attn_opts o, h_rng *rng) {
  o = opts_for_kv(o, bs->kv_dtype);
  const int64_t H = bs->Hkv * bs->group, D = bs->D, q_len = bs->q_len, rows = bs->B * q_len;
  h_case("batch decode on %s: B=%lld q_len=%lld P=%lld Hkv=%lld group=%lld D=%lld q=%s kv=%s %s %s%s "
         "max_len=%lld %s",
         h_backend_name(backend), (long long)bs->B, (long long)q_len, (long long)bs->P, (long long)bs->Hkv,
         (long long)bs->group, (long long)D, ignis_dtype_name(bs->q_dtype), ignis_dtype_name(bs->kv_dtype),
         bs->layout == IGNIS_KV_LAYOUT_NHD ? "NHD" : "HND", bs->combined ? "combined" : "separate",
         bs->strided ? " strided" : "", (long long)bs->max_len, opts_text(&o));
  kv_batch c;
  kv_make(&c, backend, bs->kv_dtype, bs->B, bs->P, bs->Hkv, D, bs->layout, bs->combined, bs->lens,
          bs->max_len, &o, rng);
  const int64_t max_len = kv_max_len(&c);
  const ignis_dtype out_dtype = bs->q_dtype == IGNIS_FP8_E4M3 ? IGNIS_BF16 : bs->q_dtype;
  qo_set s;
  qo_make(&s, backend, out_dtype, 3, rows, H, D, bs->strided, rng, 1.5);
  if (bs->q_dtype != out_dtype)
    qo_quantize_q(&s);
  extras_set x;
  extras_make(&x, backend, &o, H, log((double)max_len + 1.0) + 1.0, rng);
  double *ref_out = malloc(sizeof(double) * (size_t)(rows * H * D + 1)),
         *ref_lse = malloc(sizeof(double) * (size_t)(rows * H + 1));
  ref_cache rc = kv_ref(&c);
  ref_decode(&rc, &s, q_len, &o, extras_sinks(&x), ref_out, ref_lse);
  double *auto_out = malloc(sizeof(double) * (size_t)(rows * H * D + 1));
  const int64_t fixed_pages = 96 / bs->P > 1 ? 96 / bs->P : 1;
  for (int mode = 0; mode < 3; ++mode) {
    plan_spec sp = {H,
                    bs->Hkv,
                    D,
                    bs->P,
                    q_len,
                    bs->B + 2,
                    max_len + 5,
                    fixed_pages,
                    bs->q_dtype,
                    bs->kv_dtype,
                    (split_mode)mode,
                    o};
    plan_env e;
    if (!plan_open(&e, backend, &sp))
      continue;
    qo_poison(&s);
    /* the fixed-split runs read the index arrays from the plan's workspace copies */
    int ran = plan_update(&e, &c) && (mode == SPLIT_FIXED ? plan_run_views(&e, &c, &s, &x, o.with_lse)
                                                          : plan_run(&e, &c, &s, &x, o.with_lse));
    if (ran) {
      char what[64];
      snprintf(what, sizeof what, "split %s%s", split_names[mode], mode == SPLIT_FIXED ? " (index views)" : "");
      qo_check(&s, ref_out, ref_lse, o.with_lse, tol_scale_for(max_len), what);
      /* auto against disabled, directly */
      h_cmp cross;
      h_cmp_init(&cross);
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            double got = h_get(&s.out, qo_index(&s.out, &s.tout, 3, b, h, d));
            if (mode == SPLIT_AUTO)
              auto_out[(b * H + h) * D + d] = got;
            else if (mode == SPLIT_DISABLED)
              h_cmp_add(&cross, (b * H + h) * D + d, got, auto_out[(b * H + h) * D + d],
                        2 * rtol_of(out_dtype) * tol_scale_for(max_len));
          }
      if (mode == SPLIT_DISABLED)
        CHECK_CMP(&cross, "split auto vs disabled");
      if (mode == SPLIT_FIXED) {
        /* the same schedule run again with no plan_update between (as a CUDA-graph replay does):
         * the same bits, so the first run left the merge counters of split requests armed */
        size_t out_bytes = (size_t)s.out.count * s.out.elem_size, lse_bytes = (size_t)s.lse.count * s.lse.elem_size;
        unsigned char *first_out = malloc(out_bytes), *first_lse = malloc(lse_bytes);
        memcpy(first_out, s.out.host, out_bytes);
        memcpy(first_lse, s.lse.host, lse_bytes);
        qo_poison(&s);
        if (plan_run_views(&e, &c, &s, &x, o.with_lse)) {
          h_buf_download(&s.out);
          h_buf_download(&s.lse);
          CHECKF(memcmp(first_out, s.out.host, out_bytes) == 0 && memcmp(first_lse, s.lse.host, lse_bytes) == 0,
                 "split fixed: a second run of the same plan differs from the first");
        }
        free(first_out);
        free(first_lse);
      }
    }
    plan_close(&e);
  }
  CHECK(h_buf_changed(&s.q, NULL) == 0 && h_buf_changed(&c.k, NULL) == 0 &&
        h_buf_changed(&c.indices, NULL) == 0);
  free(auto_out);
  free(ref_out);
  free(ref_lse);
  extras_free(&x);
  qo_free(&s);
  kv_free(&c);
}

static void test_batch(h_backend backend) {
  static const int64_t page_sizes[] = {1, 5, 16, 64};
  static const int64_t groups[] = {1, 4, 6, 7, 8, 16};
  static const int64_t dims[] = {64, 128, 256};
  h_rng rng = h_rng_make(0xba7c4 + (uint64_t)backend);
  int variant = 0;
  const int general = h_selected("batch");
  for (size_t pi = 0; pi < sizeof page_sizes / sizeof page_sizes[0] && general; ++pi)
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi, ++variant) {
      batch_shape bs;
      memset(&bs, 0, sizeof bs);
      bs.B = 1 + variant % 5;
      bs.P = page_sizes[pi];
      bs.group = groups[gi];
      bs.Hkv = bs.group >= 8 ? 1 + variant % 2 : 1 + variant % 3;
      bs.D = dims[variant % 3];
      bs.q_len = 1 + (variant * 5) % 6;
      bs.max_len = variant % 4 == 0 ? 3000 : 700;
      bs.q_dtype = variant % 2 ? IGNIS_F16 : IGNIS_BF16;
      bs.kv_dtype = kv_kind(bs.q_dtype, (int)((variant / 2 + pi) % 3));
      bs.layout = (ignis_kv_layout)((variant / 2) % 2);
      bs.combined = variant % 3 == 0;
      bs.strided = variant % 4 != 1;
      run_batch_case(backend, &bs, opts_variant(variant + variant / NUM_VARIANTS), &rng);
    }

  /* Head dim 512 (on CUDA the m16 kernel, its warps splitting the head dim): every option, K/V
   * 16-bit and both fp8, GQA groups of 1 to 16 rows and q_len up to 5 (blocks of one to five
   * m-tiles, passes over the keys), page sizes 1 and 16, odd lengths, long requests that split. */
  static const int64_t groups512[] = {1, 3, 8, 16};
  for (int v = 0; v < NUM_VARIANTS && general; ++v) {
    batch_shape bs;
    memset(&bs, 0, sizeof bs);
    bs.B = 1 + v % 4;
    bs.P = v % 3 == 0 ? 1 : 16;
    bs.group = groups512[v % 4];
    bs.Hkv = 1 + (v / 4) % 2;
    bs.D = 512;
    bs.q_len = 1 + (v * 3) % 5;
    bs.max_len = v % 4 == 2 ? 3000 : 500;
    bs.q_dtype = v % 2 ? IGNIS_F16 : IGNIS_BF16;
    bs.kv_dtype = kv_kind(bs.q_dtype, (v / 2) % 3);
    bs.layout = (ignis_kv_layout)((v / 3) % 2);
    bs.combined = v % 3 == 1;
    bs.strided = v % 4 != 1;
    run_batch_case(backend, &bs, opts_variant(v), &rng);
  }

  /* Causal among the q_len tokens, with requests shorter than q_len (tokens that see no key). */
  static const int64_t short_lens[6] = {0, 1, 3, 6, 7, 12};
  for (int k = 0; k < 3 && general; ++k) {
    batch_shape bs = {6,
                      k == 0 ? 1 : 5,
                      2,
                      3,
                      64,
                      6,
                      12,
                      k == 2 ? IGNIS_F16 : IGNIS_BF16,
                      kv_kind(k == 2 ? IGNIS_F16 : IGNIS_BF16, k),
                      (ignis_kv_layout)(k % 2),
                      0,
                      1,
                      short_lens};
    attn_opts o = opts_variant(k == 0 ? 0 : k == 1 ? 11 : 6);
    if (k == 0)
      o.window_left = 2;
    run_batch_case(backend, &bs, o, &rng);
  }

  /* An fp8 e4m3 q (as FlashInfer's fp8 decode on an fp8 KV cache takes it) with a bf16 out: the
   * kernels run on q converted to bf16, exactly, so the reference is that of the rounded q. Both
   * fp8 caches, GQA 4, a long request that splits, q_len 1 and 3, strided q. */
  static const int64_t fp8_lens[3] = {2500, 37, 900};
  for (int k = 0; k < 2 && general; ++k) {
    batch_shape bs = {3, 16, 2, 4, 128, k == 0 ? 1 : 3, 2500, IGNIS_FP8_E4M3,
                      k == 0 ? IGNIS_FP8_E4M3 : IGNIS_FP8_E5M2, IGNIS_KV_LAYOUT_NHD, k, 1, fp8_lens};
    run_batch_case(backend, &bs, opts_variant(0), &rng);
  }

  /* The page kernel's shapes (CUDA on sm_90: 8 KV heads, head dim 128, 16-bit K/V in NHD, pages of
   * a multiple of 16 tokens, at most 8 query rows per KV head; a plan with automatic splits takes
   * it for a batch it need not split and that fills the GPU, here 128 requests of at most 256 keys;
   * the disabled and fixed splits run the other kernel, or the page kernel (fixed: its merge path)
   * with IGNIS_DECODE_PAGE_KERNEL=always): every option, page sizes 16, 32 and 64, groups 1, 4 and 8,
   * q_len 2, K and V in one tensor or two (padded rows here: the other kernel), empty and one-key
   * requests, lengths that end mid-page or at a page's end. */
  int64_t page_lens[PAGE_SHAPE_BATCH];
  page_shape_lens(page_lens);
  for (int k = 0; k < NUM_VARIANTS && h_selected("batch page shape"); ++k) {
    static const int64_t group_of[4] = {4, 8, 1, 4};
    batch_shape bs = {PAGE_SHAPE_BATCH,
                      16 << (k % 3),
                      8,
                      group_of[k % 4],
                      128,
                      k % 4 == 3 ? 2 : 1,
                      256,
                      k % 2 ? IGNIS_F16 : IGNIS_BF16,
                      k % 2 ? IGNIS_F16 : IGNIS_BF16,
                      IGNIS_KV_LAYOUT_NHD,
                      k % 4 != 2,
                      k % 3 != 1,
                      page_lens};
    run_batch_case(backend, &bs, opts_variant(k), &rng);
  }

  /* One long request ending mid-page, split many ways (RoPE at large positions, sinks). */
  static const int64_t long_len[1] = {33001};
  batch_shape long_case = {1, 16, 1,       2, 128, 3, 33001, IGNIS_BF16, IGNIS_FP8_E4M3, IGNIS_KV_LAYOUT_NHD,
                           0, 1,  long_len};
  if (h_quick() || !general)
    return;
  run_batch_case(backend, &long_case, opts_variant(6), &rng);
  if (backend == H_CUDA) { /* larger on the GPU: more heads, mixed lengths, every option set */
    static const int64_t mixed[4] = {33001, 17, 0, 20000};
    batch_shape big = {4, 16, 8, 4, 128, 2, 33001, IGNIS_F16, IGNIS_F16, IGNIS_KV_LAYOUT_HND, 0, 1, mixed};
    run_batch_case(backend, &big, opts_variant(8), &rng);
    big.q_dtype = IGNIS_BF16;
    big.kv_dtype = IGNIS_FP8_E5M2;
    big.layout = IGNIS_KV_LAYOUT_NHD;
    run_batch_case(backend, &big, opts_variant(7), &rng);
  }
}

/* Request r of a batch alone (a batch of one over the same pages): bit-identical out / lse with
 * disabled or fixed splits; and the plan reused across batches of other sizes and lengths. */
/* Shape of a batch-invariance case: request r of B gets len_r keys, the others lens. */
typedef struct inv_shape {
  int64_t B, P, Hkv, group, q_len;
  ignis_dtype q_dtype, kv_dtype;
  int combined; /* K and V in one tensor */
  const int64_t *lens;
  int64_t r, len_r;
} inv_shape;

static void invariance_case(h_backend backend, h_rng *rng, const inv_shape *v, split_mode mode, attn_opts o) {
  const int64_t B = v->B, P = v->P, Hkv = v->Hkv, D = 128, H = Hkv * v->group, r = v->r, q_len = v->q_len;
  const int64_t rows = B * q_len;
  const ignis_dtype q_dtype = v->q_dtype, kv_dtype = v->kv_dtype;
  int64_t *lens_r = malloc(sizeof(int64_t) * (size_t)B);
  memcpy(lens_r, v->lens, sizeof(int64_t) * (size_t)B);
  lens_r[r] = v->len_r;
  o = opts_for_kv(o, kv_dtype);
  h_case("batch invariance on %s: split %s, request of %lld keys in B=%lld Hkv=%lld group=%lld, q_len=%lld q=%s "
         "kv=%s %s",
         h_backend_name(backend), split_names[mode], (long long)lens_r[r], (long long)B, (long long)Hkv,
         (long long)v->group, (long long)q_len, ignis_dtype_name(q_dtype), ignis_dtype_name(kv_dtype),
         opts_text(&o));
  kv_batch c;
  kv_make(&c, backend, kv_dtype, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, v->combined, lens_r, 0, &o, rng);
  qo_set s;
  qo_make(&s, backend, q_dtype, 3, rows, H, D, 1, rng, 1.5);
  extras_set x;
  extras_make(&x, backend, &o, H, 9.0, rng);
  double *ref_out = malloc(sizeof(double) * (size_t)(rows * H * D)),
         *ref_lse = malloc(sizeof(double) * (size_t)(rows * H));
  ref_cache rc = kv_ref(&c);
  ref_decode(&rc, &s, q_len, &o, extras_sinks(&x), ref_out, ref_lse);
  plan_spec sp = {H, Hkv, D, P, q_len, B, 3000, 3, q_dtype, kv_dtype, mode, o};
  plan_env e;
  if (!plan_open(&e, backend, &sp)) {
    free(ref_out);
    free(ref_lse);
    extras_free(&x);
    kv_free(&c);
    qo_free(&s);
    free(lens_r);
    return;
  }
  qo_poison(&s);
  plan_update(&e, &c);
  plan_run(&e, &c, &s, &x, 1);
  qo_check(&s, ref_out, ref_lse, 1, 1.0, "whole batch");
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
  one.B = q_len;
  one.tq.shape[0] = one.tout.shape[0] = one.tlse.shape[0] = q_len;
  one.tq.data = (char *)s.tq.data + r * q_len * s.tq.strides[0] * (int64_t)s.q.elem_size;
  /* Keep the batch's results; the lone run writes into the same rows of a fresh poisoned copy. */
  h_buf batch_out = h_buf_alloc(H_CPU, q_dtype, s.out.count),
        batch_lse = h_buf_alloc(H_CPU, IGNIS_F32, s.lse.count);
  memcpy(batch_out.host, s.out.host, (size_t)s.out.count * s.out.elem_size);
  memcpy(batch_lse.host, s.lse.host, (size_t)s.lse.count * s.lse.elem_size);
  qo_poison(&s);
  one.tout.data = (char *)s.tout.data + r * q_len * s.tout.strides[0] * (int64_t)s.out.elem_size;
  one.tlse.data = (char *)s.tlse.data + r * q_len * s.tlse.strides[0] * (int64_t)s.lse.elem_size;
  CHECK_STATUS(
      ignis_decode_plan_update(e.plan, i32(&alone.indptr), &alone_last, 1, e.ws, e.ws_bytes, NULL),
      IGNIS_OK);
  CHECK_STATUS(ignis_decode_run(e.plan, &one.tq, &alone.cache, extras_of(&x), &one.tout, &one.tlse,
                                e.ws, e.ws_bytes, NULL),
               IGNIS_OK);
  h_buf_download(&s.out);
  h_buf_download(&s.lse);
  int64_t differ = 0;
  for (int64_t row = r * q_len; row < (r + 1) * q_len; ++row)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        int64_t i = qo_index(&s.out, &s.tout, 3, row, h, d);
        differ += memcmp((char *)s.out.host + i * (int64_t)s.out.elem_size,
                         (char *)batch_out.host + i * (int64_t)s.out.elem_size, s.out.elem_size) != 0;
      }
      int64_t i = lse_index(&s, row, h);
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
  plan_run(&e, &c, &s, &x, 1);
  qo_check(&s, ref_out, ref_lse, 1, 1.0, "re-planned batch");
  /* and a different batch with the same plan */
  {
    kv_batch c2;
    kv_make(&c2, backend, kv_dtype, 3, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, v->combined, NULL, 2999, &o, rng);
    qo_set s2;
    qo_make(&s2, backend, q_dtype, 3, 3 * q_len, H, D, 0, rng, 1.0);
    double *r2o = malloc(sizeof(double) * (size_t)(3 * q_len * H * D)),
           *r2l = malloc(sizeof(double) * (size_t)(3 * q_len * H));
    ref_cache rc2 = kv_ref(&c2);
    ref_decode(&rc2, &s2, q_len, &o, extras_sinks(&x), r2o, r2l);
    qo_poison(&s2);
    plan_update(&e, &c2);
    plan_run(&e, &c2, &s2, &x, 1);
    qo_check(&s2, r2o, r2l, 1, 1.0, "plan reused for another batch");
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
  extras_free(&x);
  qo_free(&s);
  kv_free(&c);
  free(lens_r);
}

static void test_invariance_and_reuse(h_backend backend) {
  h_rng rng = h_rng_make(0x1a7 + (uint64_t)backend);
  static const int64_t lens[5] = {2900, 17, 0, 700, 1500};
  static const ignis_dtype q_dtypes[3] = {IGNIS_BF16, IGNIS_F16, IGNIS_BF16};
  static const ignis_dtype kv_dtypes[3] = {IGNIS_BF16, IGNIS_FP8_E4M3, IGNIS_FP8_E5M2};
  for (int cfg = 0; cfg < 3 && h_selected("invariance"); ++cfg)
    for (int mode = SPLIT_DISABLED; mode <= SPLIT_FIXED; ++mode)
      for (int which = 0; which < 2; ++which) {
        inv_shape v = {5, 16, 2, 4, 1 + cfg, q_dtypes[cfg], kv_dtypes[cfg], 0, lens, 2, which ? 2345 : 300};
        invariance_case(backend, &rng, &v, (split_mode)mode,
                        opts_variant(cfg == 0 ? (which ? 2 : 0) : cfg == 1 ? 6 : 8));
      }
  /* The page kernel's shape in a batch that fills the GPU unsplit (CUDA): the batch-invariant modes
   * must not take it for the batch and the other kernel for the request alone. */
  int64_t page_lens[PAGE_SHAPE_BATCH];
  page_shape_lens(page_lens);
  for (int mode = SPLIT_DISABLED; mode <= SPLIT_FIXED && h_selected("invariance page shape"); ++mode) {
    inv_shape v = {PAGE_SHAPE_BATCH, 16, 8, 4, 1, IGNIS_BF16, IGNIS_BF16, 1, page_lens, 5, 250};
    invariance_case(backend, &rng, &v, (split_mode)mode, opts_variant(1));
  }
}

/* ---- CUDA graph replay ------------------------------------------------------------------------- */
/* ignis_decode_max_kv_len_for_workspace: the plan it allows fits the bytes and one key more does
 * not (CUDA); the CPU needs no workspace, so only the schedule's item count bounds it. */
static void test_workspace_bound(h_backend backend) {
  h_case("decode max_kv_len for a workspace on %s", h_backend_name(backend));
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_qo_heads = 32;
  config.num_kv_heads = 8;
  config.head_dim = 128;
  config.page_size = 16;
  config.max_batch_size = 64;
  config.fixed_split_size = 4;
  int64_t fits = 0;
  CHECK_ERROR(ignis_decode_max_kv_len_for_workspace(&config, 1 << 20, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
              "max_kv_len is NULL");
  CHECK_ERROR(ignis_decode_max_kv_len_for_workspace(NULL, 1 << 20, &fits), IGNIS_ERROR_INVALID_ARGUMENT,
              "config is NULL");
  if (backend == H_CPU) {
    CHECK_STATUS(ignis_decode_max_kv_len_for_workspace(&config, 0, &fits), IGNIS_OK);
    CHECKF(fits > (1 << 30), "CPU bound %lld", (long long)fits); /* only the item count limits it */
    return;
  }
  /* no workspace holds the requests that never split: one chunk of fixed_split_size pages (the
   * schedule is in the plan's own memory; the workspace holds only split partials) */
  CHECK_STATUS(ignis_decode_max_kv_len_for_workspace(&config, 0, &fits), IGNIS_OK);
  CHECKF(fits == config.fixed_split_size * config.page_size, "bound for 0 bytes %lld", (long long)fits);
  const size_t budgets[] = {1 << 20, 48 << 20, 300 << 20};
  for (int i = 0; i < 3; ++i) {
    if (!CHECK_STATUS(ignis_decode_max_kv_len_for_workspace(&config, budgets[i], &fits), IGNIS_OK))
      continue;
    CHECKF(fits > 0 && fits < INT32_MAX, "bound for %zu bytes %lld", budgets[i], (long long)fits);
    for (int more = 0; more < 2; ++more) {
      config.max_kv_len = fits + more;
      ignis_decode_plan *plan = NULL;
      size_t bytes = 0;
      if (!CHECK_STATUS(ignis_decode_plan_create(&config, &plan), IGNIS_OK))
        continue;
      CHECK_STATUS(ignis_decode_workspace_size(plan, &bytes), IGNIS_OK);
      CHECKF(more ? bytes > budgets[i] : bytes <= budgets[i], "max_kv_len %lld needs %zu bytes of %zu",
             (long long)config.max_kv_len, bytes, budgets[i]);
      CHECK_STATUS(ignis_decode_plan_destroy(plan), IGNIS_OK);
    }
  }
}

#ifdef IGNIS_HAVE_CUDA
/* Two plans given one workspace, as engines share FlashInfer's between wrappers: both are updated
 * (different batches, split into fixed chunks so that both runs use the partials and the merge
 * counters), then run in turn, then the first again; each run must match its own reference. The
 * workspace holds only a run's partials and the schedules live in the plans, so neither update
 * disturbs the other plan's runs. */
static void test_workspace_sharing(void) {
  const int64_t B = 2, P = 16, Hkv = 2, H = 8, D = 128, max_kv_len = 3000;
  h_case("decode workspace shared by two plans: each run matches its own batch");
  attn_opts o = opts_variant(0);
  h_rng rng = h_rng_make(0xc1a1);
  int64_t lens_a[2] = {3000, 700}, lens_b[2] = {1200, 2500};
  kv_batch ca, cb;
  kv_make(&ca, H_CUDA, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens_a, 0, &o, &rng);
  kv_make(&cb, H_CUDA, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens_b, 0, &o, &rng);
  qo_set sa, sb;
  qo_make(&sa, H_CUDA, IGNIS_BF16, 3, B, H, D, 0, &rng, 1.5);
  qo_make(&sb, H_CUDA, IGNIS_BF16, 3, B, H, D, 0, &rng, 1.5);
  extras_set x;
  extras_make(&x, H_CUDA, &o, H, log((double)max_kv_len) + 1.0, &rng);
  double *ref_a = malloc(sizeof(double) * (size_t)(B * H * D)), *lse_a = malloc(sizeof(double) * (size_t)(B * H));
  double *ref_b = malloc(sizeof(double) * (size_t)(B * H * D)), *lse_b = malloc(sizeof(double) * (size_t)(B * H));
  ref_cache rca = kv_ref(&ca), rcb = kv_ref(&cb);
  ref_decode(&rca, &sa, 1, &o, extras_sinks(&x), ref_a, lse_a);
  ref_decode(&rcb, &sb, 1, &o, extras_sinks(&x), ref_b, lse_b);
  plan_spec sp = {H, Hkv, D, P, 1, B, max_kv_len, 8, IGNIS_BF16, IGNIS_BF16, SPLIT_FIXED, o};
  plan_env a, b;
  int opened_a = plan_open(&a, H_CUDA, &sp), opened_b = opened_a && plan_open(&b, H_CUDA, &sp);
  if (opened_b && CHECK(a.ws_bytes > 300 && a.ws_bytes == b.ws_bytes)) {
    /* a workspace given to an update is checked as the runs check it; a run needs one */
    CHECK_ERROR(ignis_decode_plan_update(a.plan, i32(&ca.indptr), i32(&ca.last), B, a.ws, a.ws_bytes - 300, NULL),
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    CHECK_STATUS(ignis_decode_plan_update(a.plan, i32(&ca.indptr), i32(&ca.last), B, a.ws, a.ws_bytes, NULL),
                 IGNIS_OK);
    qo_poison(&sa);
    CHECK_ERROR(ignis_decode_run(a.plan, &sa.tq, &ca.cache, extras_of(&x), &sa.tout, &sa.tlse, a.ws, a.ws_bytes - 300,
                         NULL),
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    CHECK_ERROR(ignis_decode_run(a.plan, &sa.tq, &ca.cache, extras_of(&x), &sa.tout, &sa.tlse, NULL, 0, NULL),
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    CHECK(h_buf_untouched(&sa.out) && h_buf_untouched(&sa.lse));
    CHECK_STATUS(ignis_decode_plan_update(b.plan, i32(&cb.indptr), i32(&cb.last), B, NULL, 0, NULL), IGNIS_OK);
    for (int round = 0; round < 2; ++round) {
      qo_poison(&sa);
      if (CHECK_STATUS(ignis_decode_run(a.plan, &sa.tq, &ca.cache, extras_of(&x), &sa.tout, &sa.tlse, a.ws,
                                        a.ws_bytes, NULL),
                       IGNIS_OK))
        qo_check(&sa, ref_a, lse_a, 1, 1.0, round ? "plan a again, after plan b's run" : "plan a, updated first");
      if (round == 0) {
        qo_poison(&sb);
        if (CHECK_STATUS(ignis_decode_run(b.plan, &sb.tq, &cb.cache, extras_of(&x), &sb.tout, &sb.tlse, a.ws,
                                          a.ws_bytes, NULL),
                         IGNIS_OK))
          qo_check(&sb, ref_b, lse_b, 1, 1.0, "plan b, in plan a's workspace");
      }
    }
  }
  if (opened_b)
    plan_close(&b);
  if (opened_a)
    plan_close(&a);
  free(ref_a);
  free(lse_a);
  free(ref_b);
  free(lse_b);
  extras_free(&x);
  qo_free(&sa);
  qo_free(&sb);
  kv_free(&ca);
  kv_free(&cb);
}

/* A stream and the graph of one call captured on it (the graph-replay tests). */
typedef struct graph_capture {
  cudaStream_t stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
} graph_capture;

/* End a capture begun with `begin` around a call that returned `status`, and instantiate the graph;
 * 1 when it is ready to replay. */
static int graph_capture_end(graph_capture *g, cudaError_t begin, ignis_status status) {
  cudaError_t end = begin == cudaSuccess ? cudaStreamEndCapture(g->stream, &g->graph) : begin;
  int ready = CHECK_STATUS(status, IGNIS_OK);
  ready &= CHECKF(end == cudaSuccess, "capture: %s", cudaGetErrorString(end));
  if (ready) {
    cudaError_t inst = cudaGraphInstantiate(&g->exec, g->graph, 0);
    ready = CHECKF(inst == cudaSuccess, "instantiate: %s", cudaGetErrorString(inst));
  }
  return ready;
}

static void graph_capture_free(graph_capture *g) {
  if (g->exec)
    cudaGraphExecDestroy(g->exec);
  if (g->graph)
    cudaGraphDestroy(g->graph);
  if (g->stream)
    cudaStreamDestroy(g->stream);
}

/* What a CUDA-only case holds beside its cache (c, made by the case): q / out / lse for
 * max_batch * q_len rows, the extras, the reference's buffers, the plan of its spec and a stream
 * (g.stream; the graph's when the case captures one). */
typedef struct cuda_case {
  kv_batch c;
  qo_set s;
  extras_set x;
  double *ref_out, *ref_lse;
  plan_env e;
  graph_capture g;
} cuda_case;

/* Opens all but the cache (q strided or not; sinks up to sink_hi); whether the plan and the stream
 * are ready. cuda_case_close frees it all, the cache too, either way. */
static int cuda_case_open(cuda_case *k, const plan_spec *sp, int strided, double sink_hi, h_rng *rng) {
  const int64_t rows = sp->max_batch * sp->q_len;
  qo_make(&k->s, H_CUDA, sp->q_dtype, 3, rows, sp->H, sp->D, strided, rng, 1.5);
  extras_make(&k->x, H_CUDA, &sp->o, sp->H, sink_hi, rng);
  k->ref_out = malloc(sizeof(double) * (size_t)(rows * sp->H * sp->D));
  k->ref_lse = malloc(sizeof(double) * (size_t)(rows * sp->H));
  memset(&k->g, 0, sizeof k->g);
  return plan_open(&k->e, H_CUDA, sp) && CHECK(cudaStreamCreate(&k->g.stream) == cudaSuccess);
}

/* A new round: page tables for the first B requests' lens, a new q, out and lse poisoned. */
static void cuda_case_round(cuda_case *k, int64_t B, const int64_t *lens, h_rng *rng) {
  kv_tables(&k->c, B, lens, rng);
  for (int64_t i = 0; i < k->s.q.count; ++i)
    h_set(&k->s.q, i, h_rng_normal(rng) * 1.5);
  h_buf_upload(&k->s.q);
  qo_poison(&k->s);
}

static void cuda_case_close(cuda_case *k) {
  graph_capture_free(&k->g);
  if (k->e.plan)
    plan_close(&k->e);
  free(k->ref_out);
  free(k->ref_lse);
  extras_free(&k->x);
  qo_free(&k->s);
  kv_free(&k->c);
}

/* One graph captured from ignis_decode_run at the largest batch; each replay follows a plan_update
 * (outside the graph) with new lengths, page tables, batch size and q, and must match the
 * reference for the rows of its batch and leave the rows past it unwritten. */
static void test_graph_replay(void) {
  /* cfg 2: the page kernel's shape (CUDA on sm_90), captured for a 128-request batch of short
   * requests it takes unsplit; the replays' smaller batches and longer requests split, so the
   * captured page kernel runs split schedules (of either planner) and merges them itself */
  enum { MAX_B = 128 };
  for (int cfg = 0; cfg < 3; ++cfg) {
    const int page = cfg == 2;
    if (!h_selected(page ? "graph replay page shape" : "graph replay"))
      continue;
    const int64_t Bmax = page ? MAX_B : 8, P = 16, Hkv = page ? 8 : 2, group = 4, H = Hkv * group, D = 128;
    const int64_t max_kv_len = page ? 640 : 4000;
    const ignis_dtype q_dtype = cfg == 1 ? IGNIS_F16 : IGNIS_BF16;
    const ignis_dtype kv_dtype = cfg == 1 ? IGNIS_F16 : page ? IGNIS_BF16 : IGNIS_FP8_E4M3;
    const int64_t q_len = cfg == 0 ? 2 : 1;
    attn_opts o = opts_for_kv(opts_variant(cfg == 0 ? 6 : cfg == 1 ? 9 : 10), kv_dtype);
    h_case(
        "decode CUDA graph replay: max_batch=%lld q_len=%lld P=%lld Hkv=%lld group=%lld D=%lld q=%s kv=%s %s",
        (long long)Bmax, (long long)q_len, (long long)P, (long long)Hkv, (long long)group, (long long)D,
        ignis_dtype_name(q_dtype), ignis_dtype_name(kv_dtype), opts_text(&o));
    h_rng rng = h_rng_make(0x96a9 + (uint64_t)cfg);
    int64_t full[MAX_B];
    for (int64_t b = 0; b < Bmax; ++b)
      full[b] = max_kv_len;
    cuda_case k;
    kv_make(&k.c, H_CUDA, kv_dtype, Bmax, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, page, full, 0, &o, &rng);
    if (page) { /* captured on requests of 256 keys (no split), the pages' room kept for the replays */
      int64_t capture_lens[MAX_B];
      for (int64_t b = 0; b < Bmax; ++b)
        capture_lens[b] = 256;
      kv_tables(&k.c, Bmax, capture_lens, &rng);
    }
    const double sink_hi = log((double)max_kv_len) + 1.0;
    plan_spec sp = {H, Hkv, D, P, q_len, Bmax, max_kv_len, 0, q_dtype, kv_dtype, SPLIT_AUTO, o};
    int ready = cuda_case_open(&k, &sp, 1, sink_hi, &rng);
    if (ready) {
      ready = CHECK_STATUS(
          ignis_decode_plan_update(k.e.plan, i32(&k.c.indptr), i32(&k.c.last), Bmax, k.e.ws, k.e.ws_bytes,
                                   k.g.stream),
          IGNIS_OK);
      cudaError_t begin = cudaStreamBeginCapture(k.g.stream, cudaStreamCaptureModeGlobal);
      ready &= graph_capture_end(&k.g, begin,
                                 ignis_decode_run(k.e.plan, &k.s.tq, &k.c.cache, extras_of(&k.x), &k.s.tout,
                                                  o.with_lse ? &k.s.tlse : NULL, k.e.ws, k.e.ws_bytes, k.g.stream));
    }
    static const int64_t small_batches[6] = {8, 3, 1, 6, 0, 8}, page_batches[6] = {MAX_B, 3, 1, 100, 0, MAX_B};
    for (size_t rep = 0; ready && rep < 6; ++rep) {
      const int64_t b = page ? page_batches[rep] : small_batches[rep];
      int64_t lens[MAX_B];
      for (int64_t i = 0; i < b; ++i)
        lens[i] = i == 0 && rep % 2 == 0 ? max_kv_len
                  : i % 4 == 1           ? (int64_t)(rep % 2)
                                         : h_rng_int(&rng, 1, max_kv_len);
      cuda_case_round(&k, b, lens, &rng);
      if (!CHECK_STATUS(
              ignis_decode_plan_update(k.e.plan, i32(&k.c.indptr), i32(&k.c.last), b, k.e.ws, k.e.ws_bytes,
                                       k.g.stream),
              IGNIS_OK))
        break;
      cudaError_t launch = cudaGraphLaunch(k.g.exec, k.g.stream);
      if (!CHECKF(launch == cudaSuccess, "replay %zu: %s", rep, cudaGetErrorString(launch)))
        break;
      /* the reference sees the batch the replay was planned for */
      ignis_paged_kv_cache now = k.c.cache;
      now.indptr.shape[0] = b + 1;
      now.last_page_len.shape[0] = b;
      ref_cache rc = kv_ref(&k.c); /* (a combined cache's V lies in c.k) */
      rc.cache = &now;
      qo_set sub = qo_sub(&k.s, b * q_len);
      ref_decode(&rc, &sub, q_len, &o, extras_sinks(&k.x), k.ref_out, k.ref_lse);
      char what[64];
      snprintf(what, sizeof what, "replay %zu (batch %lld)", rep, (long long)b);
      qo_check(&sub, k.ref_out, k.ref_lse, o.with_lse, 1.0, what);
      qo_sub_free(&sub);
    }
    cuda_case_close(&k);
  }
}
#endif

/* ---- block-table runs ------------------------------------------------------------------------ */
/* The batch's pages as a block table (ignis_block_table_kv_cache): row b holds request b's pages,
 * rows of `width` entries at a stride of width + pad, every other entry poisoned (-7, or a page past
 * the pool), so a kernel reading an entry past a request's pages shows. */
typedef struct block_table {
  h_buf table, seq_lens;
  int64_t width, stride;
  ignis_block_table_kv_cache cache;
} block_table;

/* Rows and lengths of the first B requests of c's index arrays (host mirrors), uploaded. */
static void bt_fill(block_table *t, const kv_batch *c, int64_t B) {
  for (int64_t e = 0; e < t->table.count; ++e)
    h_set(&t->table, e, e % 2 ? -7.0 : (double)(c->num_pages + 5));
  const int32_t *indptr = i32(&c->indptr), *indices = i32(&c->indices), *last = i32(&c->last);
  for (int64_t b = 0; b < B; ++b) {
    int64_t pages = indptr[b + 1] - indptr[b];
    for (int64_t i = 0; i < pages; ++i)
      h_set(&t->table, b * t->stride + i, (double)indices[indptr[b] + i]);
    h_set(&t->seq_lens, b, pages ? (double)((pages - 1) * c->P + last[b]) : 0.0);
  }
  h_buf_upload(&t->table);
  h_buf_upload(&t->seq_lens);
}

static void bt_make(block_table *t, h_backend backend, const kv_batch *c, int64_t width, int64_t pad) {
  memset(t, 0, sizeof *t);
  t->width = width;
  t->stride = width + pad;
  t->table = h_buf_alloc(backend, IGNIS_I32, c->B * t->stride + 1);
  t->seq_lens = h_buf_alloc(backend, IGNIS_I32, c->B + 1);
  bt_fill(t, c, c->B);
  t->cache = (ignis_block_table_kv_cache)IGNIS_BLOCK_TABLE_KV_CACHE_INIT;
  t->cache.layout = c->layout;
  t->cache.k_cache = c->cache.k_cache;
  t->cache.v_cache = c->cache.v_cache;
  t->cache.block_tables = h_view(&t->table, 0, 2, (int64_t[]){c->B, width}, (int64_t[]){t->stride, 1});
  t->cache.seq_lens = h_view(&t->seq_lens, 0, 1, (int64_t[]){c->B}, NULL);
}

static void bt_free(block_table *t) {
  h_buf_free(&t->table);
  h_buf_free(&t->seq_lens);
}

static int bt_run(plan_env *e, const block_table *t, int64_t max_seq_len, qo_set *s, extras_set *x, int with_lse,
                  void *stream) {
  return CHECK_STATUS(ignis_decode_run_block_table(e->plan, &s->tq, &t->cache, max_seq_len, extras_of(x), &s->tout,
                                                   with_lse ? &s->tlse : NULL, e->ws, e->ws_bytes, stream),
                      IGNIS_OK);
}

/* Bytes of out and lse after a run (downloaded), to compare runs bit for bit. */
static unsigned char *qo_bytes(qo_set *s) {
  h_buf_download(&s->out);
  h_buf_download(&s->lse);
  size_t ob = (size_t)s->out.count * s->out.elem_size, lb = (size_t)s->lse.count * s->lse.elem_size;
  unsigned char *bytes = malloc(ob + lb);
  memcpy(bytes, s->out.host, ob);
  memcpy(bytes + ob, s->lse.host, lb);
  return bytes;
}

/* One batch through ignis_decode_run_block_table against the reference: for each split policy,
 * with max_seq_len the longest request, the plan's max_kv_len, and a third of the longest (requests
 * longer than the bound still computed in full); with `uniform` lengths, or mixed ones below a wave
 * (auto or disabled splits), the run gives the bits of ignis_decode_plan_update + ignis_decode_run
 * on the same plan (the same split). */
static void block_table_case(h_backend backend, const batch_shape *bs, attn_opts o, int uniform, h_rng *rng) {
  o = opts_for_kv(o, bs->kv_dtype);
  const int64_t H = bs->Hkv * bs->group, D = bs->D, q_len = bs->q_len, rows = bs->B * q_len;
  h_case("block-table decode on %s: B=%lld q_len=%lld P=%lld Hkv=%lld group=%lld D=%lld q=%s kv=%s %s %s "
         "max_len=%lld%s %s",
         h_backend_name(backend), (long long)bs->B, (long long)q_len, (long long)bs->P, (long long)bs->Hkv,
         (long long)bs->group, (long long)D, ignis_dtype_name(bs->q_dtype), ignis_dtype_name(bs->kv_dtype),
         bs->layout == IGNIS_KV_LAYOUT_NHD ? "NHD" : "HND", bs->combined ? "combined" : "separate",
         (long long)bs->max_len, uniform ? " uniform" : "", opts_text(&o));
  int64_t *lens = NULL;
  if (uniform) {
    lens = malloc(sizeof(int64_t) * (size_t)bs->B);
    for (int64_t b = 0; b < bs->B; ++b)
      lens[b] = bs->max_len;
  }
  kv_batch c;
  kv_make(&c, backend, bs->kv_dtype, bs->B, bs->P, bs->Hkv, D, bs->layout, bs->combined, lens, bs->max_len, &o,
          rng);
  const int64_t max_len = kv_max_len(&c), max_pages = (max_len + bs->P - 1) / bs->P;
  block_table t;
  bt_make(&t, backend, &c, max_pages + 2, backend == H_CUDA ? 3 : 1);
  const ignis_dtype out_dtype = bs->q_dtype == IGNIS_FP8_E4M3 ? IGNIS_BF16 : bs->q_dtype;
  qo_set s;
  qo_make(&s, backend, out_dtype, 3, rows, H, D, bs->strided, rng, 1.5);
  if (bs->q_dtype != out_dtype)
    qo_quantize_q(&s);
  extras_set x;
  extras_make(&x, backend, &o, H, log((double)max_len + 1.0) + 1.0, rng);
  double *ref_out = malloc(sizeof(double) * (size_t)(rows * H * D + 1)),
         *ref_lse = malloc(sizeof(double) * (size_t)(rows * H + 1));
  ref_cache rc = kv_ref(&c);
  ref_decode(&rc, &s, q_len, &o, extras_sinks(&x), ref_out, ref_lse);
  const int64_t fixed_pages = 96 / bs->P > 1 ? 96 / bs->P : 1;
  /* mixed lengths: a batch of two or more requests below one wave (B x Hkv blocks under the SMs x
   * the fewest blocks per SM any decode kernel of head dim <= 128 keeps, 2; 1 past it; the CPU
   * plans for IGNIS_DECODE_CPU_NOMINAL_SMS x IGNIS_DECODE_BLOCKS_PER_SM) is planned from its
   * lengths, so with auto splits it runs the planned path's schedule; disabled splits are one item
   * per request on both paths */
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  CHECK_STATUS(ignis_get_device_info(h_backend_device(backend), &info), IGNIS_OK);
  const int64_t wave_floor = backend == H_CUDA ? info.multiprocessor_count * (D <= 128 ? 2 : 1)
                                               : IGNIS_DECODE_CPU_NOMINAL_SMS * IGNIS_DECODE_BLOCKS_PER_SM;
  const int below_wave = bs->B >= 2 && bs->B * bs->Hkv < wave_floor;
  for (int mode = 0; mode < 3; ++mode) {
    plan_spec sp = {H,        bs->Hkv,     D,           bs->P,           q_len, bs->B + 1, max_len + 40, fixed_pages,
                    bs->q_dtype, bs->kv_dtype, (split_mode)mode, o};
    plan_env e;
    if (!plan_open(&e, backend, &sp))
      continue;
    const int64_t bounds[3] = {max_len, max_len + 40, max_len / 3};
    for (int k = 0; k < 3; ++k) {
      qo_poison(&s);
      if (!bt_run(&e, &t, bounds[k], &s, &x, o.with_lse, NULL))
        continue;
      char what[96];
      snprintf(what, sizeof what, "split %s, max_seq_len %lld", split_names[mode], (long long)bounds[k]);
      qo_check(&s, ref_out, ref_lse, o.with_lse, tol_scale_for(max_len), what);
    }
    if (uniform || (mode != SPLIT_FIXED && below_wave)) { /* the same split as the planned path: the same bits */
      qo_poison(&s);
      unsigned char *table_bits = bt_run(&e, &t, max_len, &s, &x, o.with_lse, NULL) ? qo_bytes(&s) : NULL;
      qo_poison(&s);
      if (table_bits && plan_update(&e, &c) && plan_run(&e, &c, &s, &x, o.with_lse)) {
        unsigned char *plan_bits = qo_bytes(&s);
        CHECKF(memcmp(table_bits, plan_bits,
                      (size_t)s.out.count * s.out.elem_size + (size_t)s.lse.count * s.lse.elem_size) == 0,
               "split %s%s: the block-table run differs from the planned run", split_names[mode],
               uniform ? "" : ", mixed lengths");
        free(plan_bits);
      }
      free(table_bits);
    }
    plan_close(&e);
  }
  CHECK(h_buf_changed(&s.q, NULL) == 0 && h_buf_changed(&c.k, NULL) == 0 && h_buf_changed(&t.table, NULL) == 0);
  free(ref_out);
  free(ref_lse);
  free(lens);
  extras_free(&x);
  qo_free(&s);
  bt_free(&t);
  kv_free(&c);
}

static void test_block_table(h_backend backend) {
  const int cuda = backend == H_CUDA;
  h_rng rng = h_rng_make(0xb10c + (uint64_t)backend);
  const batch_shape shapes[] = {
      /* B, P, Hkv, group, D, q_len, max_len, q, kv, layout, combined, strided */
      {5, 16, 2, 4, 128, 1, 1500, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_NHD, 0, 1, NULL},
      {3, 1, 1, 8, 64, 1, 700, IGNIS_F16, IGNIS_F16, IGNIS_KV_LAYOUT_HND, 1, 0, NULL},
      {4, 16, 2, 2, 128, 3, 900, IGNIS_BF16, IGNIS_FP8_E4M3, IGNIS_KV_LAYOUT_HND, 0, 0, NULL},
      {2, 64, 4, 1, 256, 1, 1200, IGNIS_F16, IGNIS_F16, IGNIS_KV_LAYOUT_NHD, 1, 1, NULL},
      {3, 16, 2, 4, 128, 2, 800, IGNIS_FP8_E4M3, IGNIS_FP8_E4M3, IGNIS_KV_LAYOUT_NHD, 0, 0, NULL},
      {cuda ? 40 : 6, 16, 8, 4, 128, 1, cuda ? 3000 : 600, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_HND, 0, 0, NULL},
      /* 16 query rows per block (the m16 kernel and its merge kernel on CUDA) */
      {6, 16, 2, 8, 128, 2, 1000, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_NHD, 0, 0, NULL},
      /* lengths 0..8192 mixed, as engines batch them (bench/decode_block_table.py's mixed row) */
      {cuda ? 24 : 6, 16, 8, 4, 128, 1, cuda ? 8192 : 2000, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_NHD, 1, 0, NULL},
      {3, 16, 2, 8, 512, 1, 2100, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_NHD, 0, 1, NULL},
      {2, 16, 1, 4, 512, 3, 700, IGNIS_F16, IGNIS_FP8_E4M3, IGNIS_KV_LAYOUT_HND, 1, 0, NULL},
  };
  int variant = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int uniform = 0; uniform < 2; ++uniform)
      block_table_case(backend, &shapes[i], opts_variant(variant++), uniform, &rng);
  if (cuda) { /* batches that fill the GPU unsplit (the page kernel's shape on sm_90), and more than a wave */
    const batch_shape page = {264, 16, 8, 4, 128, 1, 512, IGNIS_BF16, IGNIS_BF16, IGNIS_KV_LAYOUT_NHD, 1, 0, NULL};
    block_table_case(backend, &page, opts_variant(0), 1, &rng);
    block_table_case(backend, &page, opts_variant(3), 0, &rng);
  }
}

#ifdef IGNIS_HAVE_CUDA
/* One captured graph of ignis_decode_run_block_table (max_seq_len fixed at capture), replayed with
 * new seq_lens, block tables and q written in place, some requests longer than the capture's bound
 * and padding rows of length 0 (as engines pad a CUDA-graph batch); every replay against the
 * reference. cfg 1: the page kernel's shape, captured on a batch it takes unsplit. */
static void test_block_table_graph(void) {
  enum { MAX_B = 132 };
  for (int cfg = 0; cfg < 2; ++cfg) {
    if (!h_selected("block table graph"))
      continue;
    const int page = cfg == 1;
    const int64_t Bmax = page ? MAX_B : 6, P = 16, Hkv = page ? 8 : 2, group = 4, H = Hkv * group, D = 128;
    const int64_t capacity = page ? 1024 : 4096, bound = page ? 256 : 1000;
    const ignis_dtype q_dtype = IGNIS_BF16, kv_dtype = page ? IGNIS_BF16 : IGNIS_FP8_E4M3;
    attn_opts o = opts_for_kv(opts_variant(page ? 10 : 6), kv_dtype);
    h_case("block-table decode CUDA graph replay: batch=%lld P=%lld Hkv=%lld group=%lld D=%lld kv=%s bound=%lld %s",
           (long long)Bmax, (long long)P, (long long)Hkv, (long long)group, (long long)D, ignis_dtype_name(kv_dtype),
           (long long)bound, opts_text(&o));
    h_rng rng = h_rng_make(0x9b7 + (uint64_t)cfg);
    int64_t lens[MAX_B];
    for (int64_t b = 0; b < Bmax; ++b)
      lens[b] = capacity;
    cuda_case k;
    kv_make(&k.c, H_CUDA, kv_dtype, Bmax, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, page, lens, 0, &o, &rng);
    block_table t;
    bt_make(&t, H_CUDA, &k.c, capacity / P, 5);
    for (int64_t b = 0; b < Bmax; ++b)
      lens[b] = bound;
    kv_tables(&k.c, Bmax, lens, &rng);
    bt_fill(&t, &k.c, Bmax);
    const double sink_hi = log((double)capacity) + 1.0;
    plan_spec sp = {H, Hkv, D, P, 1, Bmax, capacity, 0, q_dtype, kv_dtype, SPLIT_AUTO, o};
    int ready = cuda_case_open(&k, &sp, 0, sink_hi, &rng);
    if (ready) {
      cudaError_t begin = cudaStreamBeginCapture(k.g.stream, cudaStreamCaptureModeGlobal);
      ready = graph_capture_end(&k.g, begin,
                                ignis_decode_run_block_table(k.e.plan, &k.s.tq, &t.cache, bound, extras_of(&k.x),
                                                             &k.s.tout, o.with_lse ? &k.s.tlse : NULL, k.e.ws,
                                                             k.e.ws_bytes, k.g.stream));
    }
    for (int rep = 0; ready && rep < 5; ++rep) {
      for (int64_t b = 0; b < Bmax; ++b) /* padding rows, short, at the bound, past it, the capacity */
        lens[b] = b % 5 == 4 && rep > 0 ? 0
                  : rep == 0            ? bound
                  : b % 5 == 1          ? capacity
                                        : h_rng_int(&rng, 1, rep % 2 ? bound : capacity);
      cuda_case_round(&k, Bmax, lens, &rng);
      bt_fill(&t, &k.c, Bmax);
      cudaError_t launch = cudaGraphLaunch(k.g.exec, k.g.stream);
      if (!CHECKF(launch == cudaSuccess, "replay %d: %s", rep, cudaGetErrorString(launch)))
        break;
      ref_cache rc = kv_ref(&k.c);
      ref_decode(&rc, &k.s, 1, &o, extras_sinks(&k.x), k.ref_out, k.ref_lse);
      char what[64];
      snprintf(what, sizeof what, "replay %d", rep);
      qo_check(&k.s, k.ref_out, k.ref_lse, o.with_lse, 1.0, what);
    }
    bt_free(&t);
    cuda_case_close(&k);
  }
}

/* Block-table runs right after the kernel that writes their seq_lens, on one stream, as an engine
 * derives them (ignis_get_seq_lens from kv_indptr / kv_last_page_len), over stale lengths (zero)
 * and with new lengths every round, in batches below a wave (planned from their lengths by the
 * attention blocks, which read them before their wait on that kernel and must end up with the
 * written ones: decode_length_item). cfg 0: 4 query rows a block (transposed kernel, merges in
 * the kernel); cfg 1: q_len 2 x group 8 (m16 kernel, its merge kernel). */
static void test_block_table_device_lengths(void) {
  enum { B = 24 };
  for (int cfg = 0; cfg < 2; ++cfg) {
    if (!h_selected("block table device lengths"))
      continue;
    const int64_t P = 16, Hkv = 8, group = cfg ? 8 : 4, H = Hkv * group, D = 128, q_len = cfg ? 2 : 1;
    const int64_t capacity = 4096;
    attn_opts o = opts_for_kv(opts_variant(0), IGNIS_BF16);
    h_case("block-table decode after ignis_get_seq_lens: batch=%d P=%lld Hkv=%lld group=%lld q_len=%lld D=%lld",
           B, (long long)P, (long long)Hkv, (long long)group, (long long)q_len, (long long)D);
    h_rng rng = h_rng_make(0x5e91 + (uint64_t)cfg);
    int64_t lens[B];
    for (int64_t b = 0; b < B; ++b)
      lens[b] = capacity;
    cuda_case k;
    kv_make(&k.c, H_CUDA, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens, 0, &o, &rng);
    block_table t;
    bt_make(&t, H_CUDA, &k.c, capacity / P, 3);
    const double sink_hi = log((double)capacity) + 1.0;
    plan_spec sp = {H, Hkv, D, P, q_len, B, capacity, 0, IGNIS_BF16, IGNIS_BF16, SPLIT_AUTO, o};
    int ready = cuda_case_open(&k, &sp, 0, sink_hi, &rng);
    const ignis_tensor indptr = h_view(&k.c.indptr, 0, 1, (int64_t[]){B + 1}, NULL),
                       last = h_view(&k.c.last, 0, 1, (int64_t[]){B}, NULL);
    for (int rep = 0; ready && rep < 6; ++rep) {
      for (int64_t b = 0; b < B; ++b) /* mixed, some long enough to split, a few empty */
        lens[b] = b % 7 == 3 ? 0 : b % 5 == 1 ? capacity - (int64_t)rep : h_rng_int(&rng, 1, capacity);
      cuda_case_round(&k, B, lens, &rng);
      bt_fill(&t, &k.c, B);
      char what[64];
      snprintf(what, sizeof what, "round %d", rep);
      const cudaError_t zeroed = cudaMemsetAsync(t.seq_lens.data, 0, sizeof(int32_t) * B, k.g.stream);
      if (!CHECKF(zeroed == cudaSuccess, "%s: %s", what, cudaGetErrorString(zeroed)) ||
          !CHECK_STATUS(ignis_get_seq_lens(&indptr, &last, P, &t.cache.seq_lens, k.g.stream), IGNIS_OK) ||
          !bt_run(&k.e, &t, capacity, &k.s, &k.x, o.with_lse, k.g.stream))
        break;
      ref_cache rc = kv_ref(&k.c);
      ref_decode(&rc, &k.s, q_len, &o, extras_sinks(&k.x), k.ref_out, k.ref_lse);
      qo_check(&k.s, k.ref_out, k.ref_lse, o.with_lse, 1.0, what);
    }
    bt_free(&t);
    cuda_case_close(&k);
  }
}
#endif

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
  attn_opts o = opts_variant(0);
  kv_batch c;
  kv_make(&c, backend, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens, 0, &o, &rng);
  qo_set s;
  qo_make(&s, backend, IGNIS_BF16, 3, B, H, D, 0, &rng, 1.0);
  qo_poison(&s);
  plan_spec sp = {H, Hkv, D, P, 1, B, 8, 0, IGNIS_BF16, IGNIS_BF16, SPLIT_AUTO, o};
  plan_env e;
  plan_open(&e, backend, &sp);
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
  CONFIG_BAD(o_dtype, IGNIS_F16, UNS, "config.o_dtype"); /* a bf16 q writes out in bf16 */
  CONFIG_BAD(q_dtype, IGNIS_FP8_E4M3, INV, "config.kv_dtype"); /* an fp8 q needs an fp8 cache */
  bad = good;
  bad.q_dtype = bad.kv_dtype = IGNIS_FP8_E4M3;
  BAD(ignis_decode_plan_create(&bad, &plan), INV, "config.o_dtype"); /* and a 16-bit o_dtype */
  bad.o_dtype = IGNIS_FP8_E4M3;
  BAD(ignis_decode_plan_create(&bad, &plan), INV, "config.o_dtype");
  bad.o_dtype = IGNIS_F16;
  if (CHECK_STATUS(ignis_decode_plan_create(&bad, &plan), IGNIS_OK))
    CHECK_STATUS(ignis_decode_plan_destroy(plan), IGNIS_OK);
  plan = NULL;
  CONFIG_BAD(num_qo_heads, 5, INV, "config.num_qo_heads");
  CONFIG_BAD(num_kv_heads, 0, INV, "config.num_kv_heads");
  CONFIG_BAD(page_size, 0, INV, "config.page_size");
  CONFIG_BAD(q_dtype, IGNIS_F32, INV, "config.q_dtype");
  CONFIG_BAD(kv_dtype, IGNIS_F16, INV, "config.kv_dtype"); /* q bf16: K/V bf16 or fp8 */
  CONFIG_BAD(kv_dtype, IGNIS_F32, INV, "config.kv_dtype");
  CONFIG_BAD(q_len_per_req, IGNIS_DECODE_MAX_Q_LEN + 1, INV, "config.q_len_per_req");
  CONFIG_BAD(q_len_per_req, -1, INV, "config.q_len_per_req");
  CONFIG_BAD(max_batch_size, 0, INV, "config.max_batch_size");
  CONFIG_BAD(max_kv_len, -1, INV, "config.max_kv_len");
  CONFIG_BAD(fixed_split_size, -1, INV, "config.fixed_split_size");
  CONFIG_BAD(disable_split_kv, 2, INV, "config.disable_split_kv");
  CONFIG_BAD(size, 8, INV, "config.size");
  /* a caller built against the first released layout (no o_dtype): its size ends before o_dtype,
   * and what lies beyond its struct is never read (here an o_dtype the plan would refuse) */
  bad = good;
  bad.size = offsetof(ignis_decode_plan_config, o_dtype);
  bad.o_dtype = IGNIS_FP8_E4M3;
  if (CHECK_STATUS(ignis_decode_plan_create(&bad, &plan), IGNIS_OK))
    CHECK_STATUS(ignis_decode_plan_destroy(plan), IGNIS_OK);
  plan = NULL;
  CONFIG_BAD(options.size, 8, INV, "config.options.size");
  CONFIG_BAD(options.sm_scale, -1.0, INV, "config.options.sm_scale");
  CONFIG_BAD(options.logits_soft_cap, -0.5, INV, "config.options.logits_soft_cap");
  CONFIG_BAD(options.window_left, -2, INV, "config.options.window_left");
  CONFIG_BAD(options.lse_base, (ignis_lse_base)7, INV, "config.options.lse_base");
  CONFIG_BAD(options.pos_encoding_mode, (ignis_pos_encoding)7, INV, "config.options.pos_encoding_mode");
  good.options.pos_encoding_mode = IGNIS_POS_ENCODING_ROPE_LLAMA;
  CONFIG_BAD(options.rope_scale, 0.0, INV, "config.options.rope_scale");
  CONFIG_BAD(options.rope_theta, -1.0, INV, "config.options.rope_theta");
  CONFIG_BAD(options.rope_theta, INFINITY, INV, "config.options.rope_theta");
  good.options.pos_encoding_mode = IGNIS_POS_ENCODING_NONE;
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
#define RUN_X(qt, cache, extras, ot, lt)                                                                     \
  ignis_decode_run(e.plan, (qt), (cache), (extras), (ot), (lt), e.ws, e.ws_bytes, NULL)
#define RUN(qt, cache, ot, lt) RUN_X(qt, cache, NULL, ot, lt)
  BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "plan_update first");
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
  bc.v_cache.dtype = IGNIS_FP8_E4M3; /* V's dtype must be K's, fp8 too */
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.v_cache.dtype");
  bc = c.cache;
  bc.k_cache.dtype = bc.v_cache.dtype = IGNIS_F16;
  BAD(RUN(&s.tq, &bc, &s.tout, &s.tlse), INV, "cache.k_cache.dtype");
  bc = c.cache;
  bc.k_cache.dtype = bc.v_cache.dtype = IGNIS_FP8_E4M3; /* valid K/V dtype, not the plan's */
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

  /* run: extras */
  h_buf sink_buf = h_buf_alloc(backend, IGNIS_F32, 2 * H);
  h_buf_upload(&sink_buf);
  ignis_tensor sinks = h_view(&sink_buf, 0, 1, (int64_t[]){H}, NULL), bad_sinks;
  ignis_attention_extras ex;
#define EXTRAS_BAD(field, value, status, needle)                                                             \
  do {                                                                                                       \
    ex = (ignis_attention_extras)IGNIS_ATTENTION_EXTRAS_INIT;                                                \
    ex.sinks = &sinks;                                                                                       \
    ex.field = value;                                                                                        \
    BAD(RUN_X(&s.tq, &c.cache, &ex, &s.tout, &s.tlse), status, needle);                                      \
  } while (0)
  EXTRAS_BAD(size, 4, INV, "extras.size");
  EXTRAS_BAD(k_scale, 0.0, INV, "extras.k_scale");
  EXTRAS_BAD(k_scale, -1.0, INV, "extras.k_scale");
  EXTRAS_BAD(k_scale, NAN, INV, "extras.k_scale");
  EXTRAS_BAD(k_scale, INFINITY, INV, "extras.k_scale");
  EXTRAS_BAD(v_scale, 0.0, INV, "extras.v_scale");
  EXTRAS_BAD(v_scale, -2.0, INV, "extras.v_scale");
  bad_sinks = h_view(&sink_buf, 0, 1, (int64_t[]){H + 1}, NULL);
  EXTRAS_BAD(sinks, &bad_sinks, INV, "extras.sinks");
  bad_sinks = h_view(&sink_buf, 0, 2, (int64_t[]){1, H}, NULL);
  EXTRAS_BAD(sinks, &bad_sinks, INV, "extras.sinks");
  bad_sinks = sinks;
  bad_sinks.dtype = IGNIS_BF16;
  EXTRAS_BAD(sinks, &bad_sinks, INV, "extras.sinks.dtype");
  bad_sinks = sinks;
  bad_sinks.strides[0] = 2;
  EXTRAS_BAD(sinks, &bad_sinks, UNS, "extras.sinks.strides[-1]");
  if (backend == H_CUDA) { /* sinks must live with q */
    bad_sinks = sinks;
    bad_sinks.device = h_backend_device(H_CPU);
    bad_sinks.data = sink_buf.host;
    EXTRAS_BAD(sinks, &bad_sinks, INV, "extras.sinks");
  }
#undef EXTRAS_BAD

  /* a plan for q_len_per_req = 2 needs 2 rows of q per request */
  {
    plan_spec sp2 = sp;
    sp2.q_len = 2;
    plan_env e2;
    if (plan_open(&e2, backend, &sp2)) {
      CHECK_STATUS(ignis_decode_plan_update(e2.plan, indptr, last, B, e2.ws, e2.ws_bytes, NULL), IGNIS_OK);
      BAD(ignis_decode_run(e2.plan, &s.tq, &c.cache, NULL, &s.tout, &s.tlse, e2.ws, e2.ws_bytes, NULL), INV,
          "q.shape[0]");
      plan_close(&e2);
    }
  }
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
    lp[1] = 5; /* past the page size */
    BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "cache.last_page_len[1]");
    lp[1] = 2; /* valid, but not the planned length */
    BAD(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), INV, "planned");
    lp[1] = 3;
  }
  CHECK_STATUS(RUN(&s.tq, &c.cache, &s.tout, &s.tlse), IGNIS_OK);
  qo_poison(&s);
#undef RUN
#undef RUN_X

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
#define SINGLE_X(qt, kt, vt, layout, extras, ot, lt)                                                         \
  ignis_single_decode((qt), (kt), (vt), (layout), NULL, (extras), (ot), (lt), wsp, wsb, NULL)
#define SINGLE(qt, kt, vt, layout, ot, lt) SINGLE_X(qt, kt, vt, layout, NULL, ot, lt)
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
    ignis_tensor bk2 = tk;
    bk2.dtype = IGNIS_F16;
    BAD(SINGLE(&q1, &bk2, &bk, IGNIS_KV_LAYOUT_NHD, &o1, &l1), INV, "k.dtype"); /* f16 K/V with bf16 q */
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
    BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &bad_options, NULL, &o1, &l1, wsp, wsb, NULL),
        INV, "options.window_left");
    bad_options = (ignis_attention_options)IGNIS_ATTENTION_OPTIONS_INIT;
    bad_options.pos_encoding_mode = IGNIS_POS_ENCODING_ROPE_LLAMA;
    bad_options.rope_scale = -1.0;
    BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &bad_options, NULL, &o1, &l1, wsp, wsb, NULL),
        INV, "options.rope_scale");
    ex = (ignis_attention_extras)IGNIS_ATTENTION_EXTRAS_INIT;
    ex.k_scale = 0.0;
    BAD(SINGLE_X(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &ex, &o1, &l1), INV, "extras.k_scale");
    ex = (ignis_attention_extras)IGNIS_ATTENTION_EXTRAS_INIT;
    bad_sinks = h_view(&sink_buf, 0, 1, (int64_t[]){H - 1}, NULL);
    ex.sinks = &bad_sinks;
    BAD(SINGLE_X(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &ex, &o1, &l1), INV, "extras.sinks");
    if (backend == H_CUDA) {
      BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, NULL, NULL, &o1, &l1, ws.data, bytes - 300,
                              NULL),
          IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
      BAD(ignis_single_decode(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, NULL, NULL, &o1, &l1, NULL, 0, NULL),
          IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
    }
    BAD(ignis_single_decode_workspace_size(H, 96, L, &bytes), UNS, "head_dim");
    BAD(ignis_single_decode_workspace_size(0, D, L, &bytes), INV, "num_qo_heads");
    ex = (ignis_attention_extras)IGNIS_ATTENTION_EXTRAS_INIT;
    ex.sinks = &sinks;
    CHECK_STATUS(SINGLE_X(&q1, &tk, &tv, IGNIS_KV_LAYOUT_NHD, &ex, &o1, &l1), IGNIS_OK);
#undef SINGLE
#undef SINGLE_X
    h_buf_free(&ws);
    h_buf_free(&k);
    h_buf_free(&v);
  }
  h_buf_free(&sink_buf);
  plan_close(&e);
  qo_free(&s);
  kv_free(&c);
}

/* The kernel each plan records (ignis_decode_plan_kernel): the CPU backend's one kernel; on CUDA
 * the transposed kernel for blocks of at most 8 query rows, the m16 kernel above, and the page
 * kernel (sm_90, NHD with 8 KV heads at head dim 128, pages of 16) once an unsplit batch fills
 * its waves, which batch 1 does not. The knobs that move these choices skip their part. */
/* ignis_decode_plan_copy_index_arrays: the last update's kv_indptr / kv_last_page_len land in the
 * front of the caller's buffers (the rest untouched), after each update; bad buffers are refused
 * naming them, nothing written. */
static void test_copy_index_arrays(h_backend backend) {
  h_case("decode plan index arrays into caller buffers on %s", h_backend_name(backend));
  h_rng rng = h_rng_make(0xc0b1 + (uint64_t)backend);
  const int64_t B = 5, P = 16, Hkv = 2, D = 64, H = 4;
  attn_opts o = opts_variant(0);
  kv_batch c;
  kv_make(&c, backend, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, NULL, 300, &o, &rng);
  plan_spec sp = {H, Hkv, D, P, 1, B + 3, 400, 0, IGNIS_BF16, IGNIS_BF16, SPLIT_AUTO, o};
  plan_env e;
  if (!plan_open(&e, backend, &sp)) {
    kv_free(&c);
    return;
  }
  h_buf indptr = h_buf_alloc(backend, IGNIS_I32, B + 4), last = h_buf_alloc(backend, IGNIS_I32, B + 3);
  for (int64_t i = 0; i < indptr.count; ++i)
    h_set(&indptr, i, -3.0);
  for (int64_t i = 0; i < last.count; ++i)
    h_set(&last, i, -3.0);
  h_buf_upload(&indptr);
  h_buf_upload(&last);
  ignis_tensor ti = h_view(&indptr, 0, 1, (int64_t[]){indptr.count}, NULL);
  ignis_tensor tl = h_view(&last, 0, 1, (int64_t[]){last.count}, NULL);
  for (int64_t batch = B; batch >= B - 2; batch -= 2) {
    if (!CHECK_STATUS(ignis_decode_plan_update(e.plan, i32(&c.indptr), i32(&c.last), batch, e.ws, e.ws_bytes, NULL),
                      IGNIS_OK) ||
        !CHECK_STATUS(ignis_decode_plan_copy_index_arrays(e.plan, &ti, &tl, NULL), IGNIS_OK))
      break;
    h_buf_download(&indptr);
    h_buf_download(&last);
    for (int64_t b = 0; b < indptr.count; ++b)
      CHECKF(h_get(&indptr, b) == (b <= batch ? (double)i32(&c.indptr)[b] : b <= B ? (double)i32(&c.indptr)[b] : -3.0),
             "batch %lld: kv_indptr[%lld] = %g", (long long)batch, (long long)b, h_get(&indptr, b));
    for (int64_t b = 0; b < last.count; ++b)
      CHECKF(h_get(&last, b) == (b < B ? (double)i32(&c.last)[b] : -3.0), "batch %lld: kv_last_page_len[%lld] = %g",
             (long long)batch, (long long)b, h_get(&last, b));
  }
  ignis_tensor short_indptr = ti;
  short_indptr.shape[0] = B - 2; /* the last update had B - 2 requests: B - 1 entries needed */
  CHECK_ERROR(ignis_decode_plan_copy_index_arrays(e.plan, &short_indptr, &tl, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
              "kv_indptr");
  ignis_tensor wrong = tl;
  wrong.dtype = IGNIS_I64;
  CHECK_ERROR(ignis_decode_plan_copy_index_arrays(e.plan, &ti, &wrong, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
              "kv_last_page_len");
  CHECK_ERROR(ignis_decode_plan_copy_index_arrays(NULL, &ti, &tl, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "plan");
  h_buf_free(&indptr);
  h_buf_free(&last);
  plan_close(&e);
  kv_free(&c);
}

/* ignis_decode_run_block_table's own checks: each names the parameter and writes nothing. */
static void test_block_table_bad_inputs(h_backend backend) {
  h_case("block-table decode bad inputs on %s", h_backend_name(backend));
  h_rng rng = h_rng_make(0xbad7 + (uint64_t)backend);
  const int64_t B = 2, P = 4, Hkv = 2, D = 64, H = 4;
  const int64_t lens[2] = {6, 3};
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT;
  attn_opts o = opts_variant(0);
  kv_batch c;
  kv_make(&c, backend, IGNIS_BF16, B, P, Hkv, D, IGNIS_KV_LAYOUT_NHD, 0, lens, 0, &o, &rng);
  block_table t;
  bt_make(&t, backend, &c, 3, 1);
  qo_set s;
  qo_make(&s, backend, IGNIS_BF16, 3, B, H, D, 0, &rng, 1.0);
  qo_poison(&s);
  plan_spec sp = {H, Hkv, D, P, 1, B, 8, 0, IGNIS_BF16, IGNIS_BF16, SPLIT_AUTO, o};
  plan_env e;
  plan_open(&e, backend, &sp);
#define BT_RUN(plan, qt, cache, len, ot, lt)                                                                 \
  ignis_decode_run_block_table((plan), (qt), (cache), (len), NULL, (ot), (lt), e.ws, e.ws_bytes, NULL)
  ignis_block_table_kv_cache bc = t.cache;
  BAD(BT_RUN(NULL, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "plan");
  BAD(BT_RUN(e.plan, &s.tq, NULL, 8, &s.tout, &s.tlse), INV, "cache");
  BAD(BT_RUN(e.plan, &s.tq, &bc, 9, &s.tout, &s.tlse), INV, "max_seq_len");
  BAD(BT_RUN(e.plan, &s.tq, &bc, -1, &s.tout, &s.tlse), INV, "max_seq_len");
  bc.size = 8;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "cache.size");
  bc = t.cache;
  bc.block_tables.dtype = IGNIS_I64;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "cache.block_tables.dtype");
  bc = t.cache;
  bc.block_tables.ndim = 1;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "cache.block_tables.ndim");
  bc = t.cache;
  bc.block_tables.strides[1] = 2;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), IGNIS_ERROR_UNSUPPORTED, "cache.block_tables.strides[-1]");
  bc = t.cache;
  bc.seq_lens.shape[0] = B + 1;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "cache.seq_lens");
  bc = t.cache;
  bc.k_cache.dtype = bc.v_cache.dtype = IGNIS_F16;
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "kv_dtype");
  bc = t.cache;
  bc.block_tables.shape[0] = bc.seq_lens.shape[0] = B + 1; /* more requests than the plan's max_batch_size */
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "max_batch_size");
  bc = t.cache;
  bc.block_tables.shape[0] = bc.seq_lens.shape[0] = 1; /* q has rows for two */
  BAD(BT_RUN(e.plan, &s.tq, &bc, 8, &s.tout, &s.tlse), INV, "q.shape[0]");
  ignis_tensor lt = s.tlse;
  lt.dtype = IGNIS_F16;
  BAD(BT_RUN(e.plan, &s.tq, &t.cache, 8, &s.tout, &lt), INV, "lse.dtype");
  if (backend == H_CPU) { /* host contents */
    h_set(&t.seq_lens, 1, 13.0); /* 3 pages of 4 hold at most 12 */
    h_buf_upload(&t.seq_lens);
    BAD(BT_RUN(e.plan, &s.tq, &t.cache, 8, &s.tout, &s.tlse), INV, "cache.seq_lens[1]");
    h_set(&t.seq_lens, 1, 3.0);
    h_set(&t.table, t.stride, (double)c.num_pages);
    h_buf_upload(&t.seq_lens);
    h_buf_upload(&t.table);
    BAD(BT_RUN(e.plan, &s.tq, &t.cache, 8, &s.tout, &s.tlse), INV, "cache.block_tables[1, 0]");
    bt_fill(&t, &c, B);
  }
  CHECK_STATUS(BT_RUN(e.plan, &s.tq, &t.cache, 8, &s.tout, &s.tlse), IGNIS_OK);
#undef BT_RUN
  plan_close(&e);
  qo_free(&s);
  bt_free(&t);
  kv_free(&c);
}

static int plan_kernel_of_dim_is(h_backend backend, int64_t D, int64_t H, int64_t Hkv, int64_t batch,
                                 const char *want) {
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_qo_heads = H;
  config.num_kv_heads = Hkv;
  config.head_dim = D;
  config.page_size = 16;
  config.max_batch_size = batch;
  config.max_kv_len = 16;
  ignis_decode_plan *plan = NULL;
  if (!CHECK_STATUS(ignis_decode_plan_create(&config, &plan), IGNIS_OK))
    return 0;
  size_t bytes = 0;
  CHECK_STATUS(ignis_decode_workspace_size(plan, &bytes), IGNIS_OK);
  h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
  int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(batch + 1)), *last = malloc(sizeof(int32_t) * (size_t)batch);
  for (int64_t b = 0; b <= batch; ++b)
    indptr[b] = (int32_t)b;
  for (int64_t b = 0; b < batch; ++b)
    last[b] = 16;
  const char *name = NULL;
  CHECK_STATUS(ignis_decode_plan_kernel(plan, &name), IGNIS_OK);
  const char *before = name;
  CHECK_STATUS(ignis_decode_plan_update(plan, indptr, last, batch, bytes ? ws.data : NULL, bytes, NULL), IGNIS_OK);
  CHECK_STATUS(ignis_decode_plan_kernel(plan, &name), IGNIS_OK);
  int matches = name != NULL && strcmp(name, want) == 0;
  if (strcmp(want, "decode_page") != 0)
    CHECKF(matches && strcmp(before, want) == 0, "%s, H %lld / %lld, batch %lld: kernel %s before the update, %s after; want %s",
           h_backend_name(backend), (long long)H, (long long)Hkv, (long long)batch, before, name ? name : "NULL", want);
  CHECK_ERROR(ignis_decode_plan_kernel(plan, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "name");
  free(indptr);
  free(last);
  h_buf_free(&ws);
  CHECK_STATUS(ignis_decode_plan_destroy(plan), IGNIS_OK);
  return matches;
}

static int plan_kernel_is(h_backend backend, int64_t H, int64_t Hkv, int64_t batch, const char *want) {
  return plan_kernel_of_dim_is(backend, 128, H, Hkv, batch, want);
}

static void test_kernel_choice(h_backend backend) {
  h_case("kernel choice (%s)", h_backend_name(backend));
  if (backend == H_CPU) {
    plan_kernel_is(backend, 32, 8, 4, "cpu");
    plan_kernel_is(backend, 32, 2, 4, "cpu");
    plan_kernel_of_dim_is(backend, 512, 32, 8, 4, "cpu");
    return;
  }
  /* head dim 512: the m16 kernel for any rows (the transposed and page kernels do not take it) */
  plan_kernel_of_dim_is(backend, 512, 32, 8, 1, "decode_m16");
  plan_kernel_of_dim_is(backend, 512, 32, 8, 4096, "decode_m16");
  if (getenv("IGNIS_DECODE_TRANSPOSED_ROWS") == NULL) {
    plan_kernel_is(backend, 32, 8, 1, "decode_transposed");
    plan_kernel_is(backend, 32, 2, 1, "decode_m16");
  }
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  CHECK_STATUS(ignis_get_device_info(h_backend_device(backend), &info), IGNIS_OK);
  if (getenv("IGNIS_DECODE_PAGE_KERNEL") != NULL || info.compute_capability < 90)
    return;
  CHECKF(!plan_kernel_is(backend, 32, 8, 1, "decode_page"), "batch 1 took the page kernel");
  int page = 0;
  for (int64_t m = 1; m <= 4 && !page; ++m)
    page = plan_kernel_is(backend, 32, 8, m * info.multiprocessor_count, "decode_page");
  CHECKF(page, "no batch of 1 to 4 x %d unsplit requests took the page kernel", info.multiprocessor_count);
}

int main(void) {
  h_init("test_decode");
  /* IGNIS_TEST_ONLY picks case groups by name: "planner", "single", "batch", "invariance", "bad
   * input", "workspace bound", "graph replay", "workspace sharing", "kernel choice", "block table" (with
   * "block table graph" and "block table device lengths"), "index arrays"; "page shape" the page kernel's cases of the batch,
   * invariance and graph-replay groups (e.g. for compute-sanitizer racecheck with
   * IGNIS_DECODE_PAGE_KERNEL=always) */
  if (h_selected("planner"))
    test_planner();
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    if (h_quick() && backend == H_CPU && h_backend_count() > 1)
      continue; /* the sanitizer looks at the GPU cases */
    if (h_selected("single"))
      test_single(backend);
    test_batch(backend);
    test_invariance_and_reuse(backend);
    if (h_selected("bad input"))
      test_bad_inputs(backend);
    if (h_selected("workspace bound"))
      test_workspace_bound(backend);
    if (h_selected("kernel choice"))
      test_kernel_choice(backend);
    if (h_selected("index arrays"))
      test_copy_index_arrays(backend);
    if (h_selected("block table")) {
      test_block_table(backend);
      test_block_table_bad_inputs(backend);
    }
  }
#ifdef IGNIS_HAVE_CUDA
  if (h_backend_count() > 1) {
    test_graph_replay();
    test_block_table_graph();
    test_block_table_device_lengths();
    if (h_selected("workspace sharing"))
      test_workspace_sharing();
  }
#endif
  return h_finish();
}
