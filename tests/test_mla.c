/* Tests of MLA attention and the latent-cache append (include/ignis/mla.h) on every backend,
 * against an fp64 reference written here from the header's formulas over the same paged latent
 * cache: scores sm_scale * (<q_nope, ckv_j> + <q_pe, kpe_j>) over 576 dimensions, outputs over the
 * 512 ckv values, causal alignment to the end of each request's keys.
 *
 * Cases: page sizes 1, 16 and 64 with pages permuted (and spare pages never read), lengths from 1
 * to a few thousand including lengths ending mid-page, empty requests (no keys; no query tokens),
 * query lengths 1 to 4 (speculative decode) and a chunked-prefill batch, heads 16, 32 and 128,
 * f16 and bf16, both LSE bases, causal and not, separate caches and two views of one
 * [pages, page_size, 576] buffer, fp8 e4m3 caches with ckv_scale / kpe_scale, a batch of one long
 * request (split-KV and its merge) and one row
 * more in out / lse than the batch has (never written). Outputs are poisoned first. Bad inputs:
 * status, parameter named, nothing written. The append writes rows at the pages and slots of
 * their positions and nothing else. Head counts 8, 16, 20 and 32 run on the CUDA backend's narrow
 * kernel (16- and 32-row tiles), 128 on the wide one, and 16 once more on the wide one
 * (IGNIS_MLA_TILE_ROWS=64). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "sched/mla_plan.h"

#define CKV 512
#define KPE 64
#define KV_DIM 576

typedef struct mla_case {
  const char *name;
  int64_t heads, page_size, batch;
  int32_t q_len[6], kv_len[6];
  int causal, combined;
  ignis_dtype dtype;
  ignis_lse_base base;
  int expect_split;            /* 1: the plan must merge split requests */
  ignis_dtype kv_dtype;        /* 0: dtype; else the cache's (fp8 e4m3) */
  double ckv_scale, kpe_scale; /* 0: 1 */
  double q_scale;              /* 0: 1; else even heads' queries times it, odd heads' divided */
} mla_case;

static ignis_dtype cache_dtype(const mla_case *c) {
  return c->kv_dtype ? c->kv_dtype : c->dtype;
}

/* NaN into every cache row no request holds (the slots past a request's length in its last page, and
 * the spare pages) of a buffer of `width` values a row: no kernel may let them reach a result (a
 * value zero-weighted by a masked score is still NaN in a product). */
static void poison_unused_rows(const mla_case *c, const int32_t *kv_indptr, const int32_t *indices,
                               int64_t num_pages, h_buf *buf, int64_t width) {
  const int64_t rows = num_pages * c->page_size;
  char *held = calloc((size_t)rows, 1);
  for (int64_t b = 0; b < c->batch; ++b)
    for (int64_t j = 0; j < c->kv_len[b]; ++j)
      held[indices[kv_indptr[b] + j / c->page_size] * c->page_size + j % c->page_size] = 1;
  for (int64_t r = 0; r < rows; ++r)
    if (!held[r])
      for (int64_t i = 0; i < width; ++i)
        h_set(buf, r * width + i, NAN);
  free(held);
}

/* The paged latent cache of a case: pages shuffled over a pool with spares, as views; rows no
 * request holds are NaN (poison_unused_rows). */
typedef struct mla_cache {
  h_buf ckv_buf, kpe_buf; /* kpe_buf unused when combined */
  ignis_tensor ckv, kpe;
  int32_t kv_indptr[7];
  int32_t *indices;
  int64_t num_pages;
} mla_cache;

static void make_cache(h_backend backend, const mla_case *c, h_rng *rng, mla_cache *cache) {
  cache->kv_indptr[0] = 0;
  for (int64_t b = 0; b < c->batch; ++b)
    cache->kv_indptr[b + 1] =
        cache->kv_indptr[b] + (int32_t)((c->kv_len[b] + c->page_size - 1) / c->page_size);
  const int64_t used = cache->kv_indptr[c->batch];
  cache->num_pages = used + 3;
  cache->indices = malloc(sizeof(int32_t) * (size_t)(used + 1));
  int32_t *perm = malloc(sizeof(int32_t) * (size_t)cache->num_pages);
  for (int64_t i = 0; i < cache->num_pages; ++i)
    perm[i] = (int32_t)i;
  for (int64_t i = cache->num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(rng, 0, i);
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < used; ++i)
    cache->indices[i] = perm[i];
  free(perm);
  const int64_t rows = cache->num_pages * c->page_size;
  if (c->combined) {
    cache->ckv_buf = h_buf_alloc(backend, cache_dtype(c), rows * KV_DIM);
    for (int64_t i = 0; i < rows * KV_DIM; ++i)
      h_set(&cache->ckv_buf, i, h_rng_normal(rng));
    poison_unused_rows(c, cache->kv_indptr, cache->indices, cache->num_pages, &cache->ckv_buf, KV_DIM);
    h_buf_upload(&cache->ckv_buf);
    int64_t shape_ckv[3] = {cache->num_pages, c->page_size, CKV},
            shape_kpe[3] = {cache->num_pages, c->page_size, KPE};
    int64_t strides[3] = {c->page_size * KV_DIM, KV_DIM, 1};
    cache->ckv = h_view(&cache->ckv_buf, 0, 3, shape_ckv, strides);
    cache->kpe = h_view(&cache->ckv_buf, CKV, 3, shape_kpe, strides);
    memset(&cache->kpe_buf, 0, sizeof cache->kpe_buf);
    return;
  }
  cache->ckv_buf = h_buf_alloc(backend, cache_dtype(c), rows * CKV);
  cache->kpe_buf = h_buf_alloc(backend, cache_dtype(c), rows * KPE);
  for (int64_t i = 0; i < rows * CKV; ++i)
    h_set(&cache->ckv_buf, i, h_rng_normal(rng));
  for (int64_t i = 0; i < rows * KPE; ++i)
    h_set(&cache->kpe_buf, i, h_rng_normal(rng));
  poison_unused_rows(c, cache->kv_indptr, cache->indices, cache->num_pages, &cache->ckv_buf, CKV);
  poison_unused_rows(c, cache->kv_indptr, cache->indices, cache->num_pages, &cache->kpe_buf, KPE);
  h_buf_upload(&cache->ckv_buf);
  h_buf_upload(&cache->kpe_buf);
  int64_t shape_ckv[3] = {cache->num_pages, c->page_size, CKV},
          shape_kpe[3] = {cache->num_pages, c->page_size, KPE};
  cache->ckv = h_view(&cache->ckv_buf, 0, 3, shape_ckv, NULL);
  cache->kpe = h_view(&cache->kpe_buf, 0, 3, shape_kpe, NULL);
}

static void free_cache(mla_cache *cache) {
  h_buf_free(&cache->ckv_buf);
  if (cache->kpe_buf.host)
    h_buf_free(&cache->kpe_buf);
  free(cache->indices);
}

/* Element c of key j of request b (c < 576: ckv then kpe), from the host mirror, scaled. */
static double key_at(const mla_case *k, const mla_cache *cache, int64_t b, int64_t j, int c) {
  const int64_t page = cache->indices[cache->kv_indptr[b] + j / k->page_size], slot = j % k->page_size;
  const int64_t row = page * k->page_size + slot;
  const double scale = c < CKV ? (k->ckv_scale ? k->ckv_scale : 1.0) : (k->kpe_scale ? k->kpe_scale : 1.0);
  if (k->combined)
    return scale * h_get(&cache->ckv_buf, row * KV_DIM + c);
  return scale *
         (c < CKV ? h_get(&cache->ckv_buf, row * CKV + c) : h_get(&cache->kpe_buf, row * KPE + c - CKV));
}

static void run_case(h_backend backend, const mla_case *k, uint64_t seed) {
  h_case("%s on %s", k->name, h_backend_name(backend));
  h_rng rng = h_rng_make(seed);
  const int64_t H = k->heads;
  int32_t qo_indptr[7] = {0};
  int32_t max_len = 0;
  for (int64_t b = 0; b < k->batch; ++b) {
    qo_indptr[b + 1] = qo_indptr[b] + k->q_len[b];
    max_len = k->kv_len[b] > max_len ? k->kv_len[b] : max_len;
  }
  const int64_t nnz = qo_indptr[k->batch], rows = nnz + 1; /* one row more than planned */
  mla_cache cache;
  make_cache(backend, k, &rng, &cache);
  h_buf q_nope = h_buf_alloc(backend, k->dtype, rows * H * CKV),
        q_pe = h_buf_alloc(backend, k->dtype, rows * H * KPE);
  const double q_scale = k->q_scale ? k->q_scale : 1.0;
  for (int64_t i = 0; i < rows * H * CKV; ++i)
    h_set(&q_nope, i, h_rng_normal(&rng) * ((i / CKV) % H % 2 ? 1.0 / q_scale : q_scale));
  for (int64_t i = 0; i < rows * H * KPE; ++i)
    h_set(&q_pe, i, h_rng_normal(&rng) * ((i / KPE) % H % 2 ? 1.0 / q_scale : q_scale));
  h_buf_upload(&q_nope);
  h_buf_upload(&q_pe);
  h_buf out = h_buf_alloc(backend, k->dtype, rows * H * CKV), lse = h_buf_alloc(backend, IGNIS_F32, rows * H);
  h_buf_poison(&out);
  h_buf_poison(&lse);
  h_buf_upload(&out);
  h_buf_upload(&lse);
  const int64_t used = cache.kv_indptr[k->batch];
  h_buf indices = h_buf_alloc(backend, IGNIS_I32, used > 0 ? used : 1);
  for (int64_t i = 0; i < used; ++i)
    h_set(&indices, i, cache.indices[i]);
  h_buf_upload(&indices);

  ignis_mla_plan_config config = IGNIS_MLA_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_heads = H;
  config.page_size = k->page_size;
  config.q_dtype = k->dtype;
  config.kv_dtype = cache_dtype(k);
  config.causal = k->causal;
  config.sm_scale = 1.0 / sqrt(192.0);
  config.lse_base = k->base;
  config.max_batch_size = k->batch + 2;
  config.max_q_tokens = nnz + 5;
  config.max_kv_len = max_len + 100;
  ignis_mla_plan *plan = NULL;
  CHECK_STATUS(ignis_mla_plan_create(&config, &plan), IGNIS_OK);
  size_t ws_bytes = 0;
  CHECK_STATUS(ignis_mla_workspace_size(plan, &ws_bytes), IGNIS_OK);
  h_buf ws = h_buf_alloc(backend, IGNIS_U8, ws_bytes > 0 ? (int64_t)ws_bytes : 1);
  CHECK_STATUS(ignis_mla_plan_update(plan, qo_indptr, cache.kv_indptr, k->kv_len, k->batch,
                                     ws_bytes ? ws.data : NULL, ws_bytes, NULL),
               IGNIS_OK);
  int64_t num_work = 0, merged = 0;
  CHECK_STATUS(ignis_mla_plan_info(plan, &num_work, &merged), IGNIS_OK);
  if (k->expect_split)
    CHECKF(merged > 0, "expected a split, got %lld merged tokens", (long long)merged);
  int64_t qn_shape[3] = {rows, H, CKV}, qp_shape[3] = {rows, H, KPE}, lse_shape[2] = {rows, H},
          ind_shape[1] = {used};
  ignis_tensor tq_nope = h_view(&q_nope, 0, 3, qn_shape, NULL), tq_pe = h_view(&q_pe, 0, 3, qp_shape, NULL);
  ignis_tensor tout = h_view(&out, 0, 3, qn_shape, NULL), tlse = h_view(&lse, 0, 2, lse_shape, NULL);
  ignis_tensor tind = h_view(&indices, 0, 1, ind_shape, NULL);
  CHECK_STATUS(ignis_mla_run(plan, &tq_nope, &tq_pe, &cache.ckv, &cache.kpe, &tind,
                             k->ckv_scale ? k->ckv_scale : 1.0, k->kpe_scale ? k->kpe_scale : 1.0, &tout,
                             &tlse, ws_bytes ? ws.data : NULL, ws_bytes, NULL),
               IGNIS_OK);
  h_buf_download(&out);
  h_buf_download(&lse);

  /* the reference, in fp64 */
  h_tol tol = h_tol_for(k->dtype, 1.0);
  tol.rtol *= 2.0;
  tol.atol *= 2.0;
  const double value_scale = k->ckv_scale ? k->ckv_scale : 1.0;
  h_cmp cmp_out, cmp_lse;
  h_cmp_init(&cmp_out);
  h_cmp_init(&cmp_lse);
  const double scale = config.sm_scale;
  double *x = malloc(sizeof(double) * (size_t)(max_len > 0 ? max_len : 1));
  double *acc = malloc(sizeof(double) * CKV), *acc_abs = malloc(sizeof(double) * CKV);
  for (int64_t b = 0; b < k->batch; ++b) {
    for (int64_t i = 0; i < k->q_len[b]; ++i) {
      const int64_t t = qo_indptr[b] + i;
      const int64_t last = k->causal ? (int64_t)k->kv_len[b] - k->q_len[b] + i : (int64_t)k->kv_len[b] - 1;
      for (int64_t h = 0; h < H; ++h) {
        double top = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          double dot = 0.0;
          for (int c = 0; c < CKV; ++c)
            dot += h_get(&q_nope, (t * H + h) * CKV + c) * key_at(k, &cache, b, j, c);
          for (int c = 0; c < KPE; ++c)
            dot += h_get(&q_pe, (t * H + h) * KPE + c) * key_at(k, &cache, b, j, CKV + c);
          x[j] = scale * dot;
          top = x[j] > top ? x[j] : top;
        }
        double z = 0.0;
        for (int c = 0; c < CKV; ++c)
          acc[c] = acc_abs[c] = 0.0;
        for (int64_t j = 0; j <= last; ++j) {
          const double e = exp(x[j] - top);
          z += e;
          for (int c = 0; c < CKV; ++c) {
            const double v = key_at(k, &cache, b, j, c);
            acc[c] += e * v;
            acc_abs[c] += e * fabs(v);
          }
        }
        /* The kernels round the probabilities to the 16-bit dtype before P . V (as FlashInfer's
         * do), so an output's error is bounded relative to sum_j p_j |v_j|, not to the sum after
         * cancellation: rtol applies to that, atol is scaled by the values' scale. */
        for (int c = 0; c < CKV; ++c) {
          const int64_t idx = (t * H + h) * CKV + c;
          const double ref = z > 0.0 ? acc[c] / z : 0.0, terms = z > 0.0 ? acc_abs[c] / z : 0.0;
          h_cmp_add(&cmp_out, idx, h_get(&out, idx), ref, tol.atol * value_scale + tol.rtol * terms);
        }
        const double ref_lse =
            z > 0.0 ? (top + log(z)) / (k->base == IGNIS_LSE_BASE2 ? log(2.0) : 1.0) : -INFINITY;
        const double got_lse = h_get(&lse, t * H + h);
        if (ref_lse == -INFINITY)
          CHECKF(got_lse == -INFINITY, "token %lld head %lld: lse %g, expected -inf", (long long)t,
                 (long long)h, got_lse);
        else
          h_cmp_add(&cmp_lse, t * H + h, got_lse, ref_lse, 2e-3 + 1e-4 * fabs(ref_lse));
      }
    }
  }
  CHECK_CMP(&cmp_out, "out");
  CHECK_CMP(&cmp_lse, "lse");
  int64_t untouched = 0;
  for (int64_t i = nnz * H * CKV; i < rows * H * CKV; ++i)
    untouched += h_is_poison(&out, i);
  for (int64_t i = nnz * H; i < rows * H; ++i)
    untouched += h_is_poison(&lse, i);
  CHECKF(untouched == H * (CKV + 1), "rows past the planned batch were written");
  free(x);
  free(acc);
  free(acc_abs);
  CHECK_STATUS(ignis_mla_plan_destroy(plan), IGNIS_OK);
  h_buf_free(&ws);
  h_buf_free(&indices);
  h_buf_free(&q_nope);
  h_buf_free(&q_pe);
  h_buf_free(&out);
  h_buf_free(&lse);
  free_cache(&cache);
}

static const mla_case cases[] = {
    {"decode h16 page64 lengths 1..3001",
     16,
     64,
     5,
     {1, 1, 1, 1, 1},
     {1, 63, 64, 65, 3001},
     1,
     0,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     0,
     0,
     0.0,
     0.0},
    {"speculative q1..4 page1 f16 combined, empty request",
     16,
     1,
     4,
     {1, 2, 3, 4},
     {5, 100, 0, 1000},
     1,
     1,
     IGNIS_F16,
     IGNIS_LSE_NATURAL,
     0,
     0,
     0.0,
     0.0},
    {"h128 page16 q1,2 combined",
     128,
     16,
     2,
     {1, 2},
     {777, 2048},
     1,
     1,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     0,
     0,
     0.0,
     0.0},
    {"batch 1 long (split-KV)", 16, 64, 1, {1}, {4000}, 1, 0, IGNIS_BF16, IGNIS_LSE_BASE2, 1, 0, 0.0, 0.0},
    {"batch 1 q4 h128 page16 (split-KV, tiles)",
     128,
     16,
     1,
     {4},
     {1500},
     1,
     1,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     1,
     0,
     0.0,
     0.0},
    {"chunked prefill, request with no tokens",
     16,
     16,
     3,
     {100, 0, 37},
     {700, 50, 37},
     1,
     0,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     0,
     0,
     0.0,
     0.0},
    {"not causal h32 q3", 32, 64, 2, {3, 1}, {130, 257}, 0, 0, IGNIS_F16, IGNIS_LSE_BASE2, 0, 0, 0.0, 0.0},
    /* 64-row tiles (the wgmma kernel on sm_90a): 40 heads span tokens with their own causal limits,
     * a 16-bit cache with scales; 64 heads at page 64; a 128-head chunk of 16 tokens at page 1 */
    {"h40 q3,2 causal f16 scales (64-row tiles across tokens)", 40, 16, 2, {3, 2}, {300, 90}, 1, 0, IGNIS_F16,
     IGNIS_LSE_NATURAL, 0, 0, 0.5, 2.0},
    {"h64 page64 lengths 1..1000", 64, 64, 4, {1, 1, 1, 1}, {1, 64, 65, 1000}, 1, 1, IGNIS_BF16, IGNIS_LSE_BASE2,
     0, 0, 0.0, 0.0},
    {"h128 q16 page1 chunk", 128, 1, 2, {16, 1}, {300, 129}, 1, 0, IGNIS_BF16, IGNIS_LSE_BASE2, 0, 0, 0.0, 0.0},
    /* 128 heads at pages of 32 and 64: lengths ending mid-page, equal cache scales, a combined
     * cache, split-KV */
    {"h128 page64 q1,2,1 lengths 1..2100", 128, 64, 3, {1, 2, 1}, {1, 130, 2100}, 1, 0, IGNIS_BF16,
     IGNIS_LSE_BASE2, 0, 0, 0.5, 0.5},
    {"batch 1 h128 page32 combined f16 (split-KV)", 128, 32, 1, {1}, {5000}, 1, 1, IGNIS_F16, IGNIS_LSE_NATURAL,
     1, 0, 0.0, 0.0},
    /* the narrow kernel's tiles: 16 rows spanning tokens of 8 heads, each row its causal limit */
    {"h8 q3,5 causal (16-row tiles across tokens)", 8, 16, 2, {3, 5}, {40, 600}, 1, 0, IGNIS_BF16,
     IGNIS_LSE_BASE2, 0, 0, 0.0, 0.0},
    {"h16 q2 page1 f16 (split-KV)", 16, 1, 1, {2}, {5000}, 1, 0, IGNIS_F16, IGNIS_LSE_BASE2, 1, 0, 0.0, 0.0},
    /* bf16 queries far outside f16's range (and far below it) on an fp8 cache, whose CUDA kernel
     * runs in f16 with per-row query scales */
    {"fp8 e4m3 h16 bf16 q at 1e5 and 1e-5",
     16,
     64,
     2,
     {1, 2},
     {300, 1000},
     1,
     0,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     0,
     IGNIS_FP8_E4M3,
     0.5,
     0.25,
     1e5},
    {"fp8 e4m3 h20 q2 (32-row tiles, split)",
     20,
     64,
     1,
     {2},
     {2500},
     1,
     0,
     IGNIS_BF16,
     IGNIS_LSE_NATURAL,
     1,
     IGNIS_FP8_E4M3,
     0.5,
     2.0},
    {"causal q_len > kv_len", 16, 16, 2, {4, 2}, {2, 0}, 1, 0, IGNIS_BF16, IGNIS_LSE_BASE2, 0, 0, 0.0, 0.0},
    {"fp8 e4m3 cache bf16 q, scales, split",
     16,
     64,
     2,
     {1, 2},
     {3000, 70},
     1,
     0,
     IGNIS_BF16,
     IGNIS_LSE_BASE2,
     1,
     IGNIS_FP8_E4M3,
     0.5,
     0.25},
    {"fp8 e4m3 combined cache f16 q, h128 page1",
     128,
     1,
     2,
     {1, 3},
     {40, 300},
     1,
     1,
     IGNIS_F16,
     IGNIS_LSE_BASE2,
     0,
     IGNIS_FP8_E4M3,
     1.5,
     1.0},
};

/* Bad inputs: each call fails naming the parameter and writes nothing. */
static void bad_inputs(h_backend backend) {
  h_case("bad inputs on %s", h_backend_name(backend));
  ignis_mla_plan_config config = IGNIS_MLA_PLAN_CONFIG_INIT;
  config.device = h_backend_device(backend);
  config.num_heads = 16;
  config.page_size = 16;
  config.sm_scale = 0.1;
  config.max_batch_size = 4;
  config.max_q_tokens = 8;
  config.max_kv_len = 64;
  ignis_mla_plan *plan = NULL;
  ignis_mla_plan_config bad = config;
  bad.num_heads = 0;
  CHECK_ERROR(ignis_mla_plan_create(&bad, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.num_heads");
  bad = config;
  bad.head_dim_ckv = 256;
  CHECK_ERROR(ignis_mla_plan_create(&bad, &plan), IGNIS_ERROR_UNSUPPORTED, "config.head_dim_ckv");
  bad = config;
  bad.kv_dtype = IGNIS_FP8_E5M2;
  CHECK_ERROR(ignis_mla_plan_create(&bad, &plan), IGNIS_ERROR_UNSUPPORTED, "config.kv_dtype");
  bad = config;
  bad.sm_scale = 0.0;
  CHECK_ERROR(ignis_mla_plan_create(&bad, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.sm_scale");
  bad = config;
  bad.page_size = 0;
  CHECK_ERROR(ignis_mla_plan_create(&bad, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.page_size");
  CHECK(plan == NULL);
  CHECK_STATUS(ignis_mla_plan_create(&config, &plan), IGNIS_OK);
  size_t ws_bytes = 0;
  CHECK_STATUS(ignis_mla_workspace_size(plan, &ws_bytes), IGNIS_OK);
  h_buf ws = h_buf_alloc(backend, IGNIS_U8, ws_bytes > 0 ? (int64_t)ws_bytes : 1);
  void *w = ws_bytes ? ws.data : NULL;
  int32_t qo[3] = {0, 1, 2}, kv_indptr[3] = {0, 2, 3}, kv_len[2] = {20, 16};
  CHECK_ERROR(ignis_mla_run(plan, NULL, NULL, NULL, NULL, NULL, 1.0, 1.0, NULL, NULL, w, ws_bytes, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "ignis_mla_plan_update");
  int32_t long_len[2] = {40, 16}; /* 2 pages hold 32 */
  CHECK_ERROR(ignis_mla_plan_update(plan, qo, kv_indptr, long_len, 2, w, ws_bytes, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "kv_len_host[0]");
  int32_t qo_many[3] = {0, 5, 9};
  CHECK_ERROR(ignis_mla_plan_update(plan, qo_many, kv_indptr, kv_len, 2, w, ws_bytes, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "qo_indptr_host");
  CHECK_ERROR(ignis_mla_plan_update(plan, qo, kv_indptr, kv_len, 5, w, ws_bytes, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "batch_size");
  CHECK_STATUS(ignis_mla_plan_update(plan, qo, kv_indptr, kv_len, 2, w, ws_bytes, NULL), IGNIS_OK);
  const int64_t pages = 4;
  h_buf q_nope = h_buf_alloc(backend, IGNIS_BF16, 2 * 16 * CKV),
        q_pe = h_buf_alloc(backend, IGNIS_BF16, 2 * 16 * KPE);
  h_buf ckv = h_buf_alloc(backend, IGNIS_BF16, pages * 16 * CKV),
        kpe = h_buf_alloc(backend, IGNIS_BF16, pages * 16 * KPE);
  h_buf kpe_f16 = h_buf_alloc(backend, IGNIS_F16, pages * 16 * KPE);
  h_buf out = h_buf_alloc(backend, IGNIS_BF16, 2 * 16 * CKV), lse = h_buf_alloc(backend, IGNIS_F32, 2 * 16);
  h_buf lse16 = h_buf_alloc(backend, IGNIS_F16, 2 * 16);
  h_buf indices = h_buf_alloc(backend, IGNIS_I32, 3), bad_indices = h_buf_alloc(backend, IGNIS_I32, 3);
  h_set(&indices, 0, 1);
  h_set(&indices, 1, 3);
  h_set(&indices, 2, 0);
  h_set(&bad_indices, 0, 1);
  h_set(&bad_indices, 1, 7);
  h_buf_upload(&indices);
  h_buf_upload(&bad_indices);
  h_buf_poison(&out);
  h_buf_upload(&out);
  h_buf_poison(&lse);
  h_buf_upload(&lse);
  int64_t qn[3] = {2, 16, CKV}, qp[3] = {2, 16, KPE}, qp_wrong[3] = {2, 16, 32}, cn[3] = {pages, 16, CKV},
          cp[3] = {pages, 16, KPE}, ls[2] = {2, 16}, is[1] = {3};
  ignis_tensor tqn = h_view(&q_nope, 0, 3, qn, NULL), tqp = h_view(&q_pe, 0, 3, qp, NULL);
  ignis_tensor tqp_wrong = h_view(&q_pe, 0, 3, qp_wrong, NULL);
  ignis_tensor tckv = h_view(&ckv, 0, 3, cn, NULL), tkpe = h_view(&kpe, 0, 3, cp, NULL);
  ignis_tensor tkpe16 = h_view(&kpe_f16, 0, 3, cp, NULL);
  ignis_tensor tout = h_view(&out, 0, 3, qn, NULL), tlse = h_view(&lse, 0, 2, ls, NULL);
  ignis_tensor tlse16 = h_view(&lse16, 0, 2, ls, NULL);
  ignis_tensor tind = h_view(&indices, 0, 1, is, NULL), tbad = h_view(&bad_indices, 0, 1, is, NULL);
  CHECK_ERROR(
      ignis_mla_run(plan, &tqn, &tqp_wrong, &tckv, &tkpe, &tind, 1.0, 1.0, &tout, &tlse, w, ws_bytes, NULL),
      IGNIS_ERROR_INVALID_ARGUMENT, "q_pe");
  CHECK_ERROR(
      ignis_mla_run(plan, &tqn, &tqp, &tckv, &tkpe16, &tind, 1.0, 1.0, &tout, &tlse, w, ws_bytes, NULL),
      IGNIS_ERROR_INVALID_ARGUMENT, "kpe_cache.dtype");
  CHECK_ERROR(
      ignis_mla_run(plan, &tqn, &tqp, &tckv, &tkpe, &tind, 1.0, 1.0, &tout, &tlse16, w, ws_bytes, NULL),
      IGNIS_ERROR_INVALID_ARGUMENT, "lse.dtype");
  CHECK_ERROR(ignis_mla_run(plan, &tqn, &tqp, &tckv, &tkpe, &tind, 1.0, 1.0, &tqn, &tlse, w, ws_bytes, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "out overlaps q_nope");
  if (backend == H_CPU)
    CHECK_ERROR(
        ignis_mla_run(plan, &tqn, &tqp, &tckv, &tkpe, &tbad, 1.0, 1.0, &tout, &tlse, w, ws_bytes, NULL),
        IGNIS_ERROR_INVALID_ARGUMENT, "kv_indices[1]");
  CHECK(h_buf_untouched(&out));
  CHECK(h_buf_untouched(&lse));
  CHECK_STATUS(
      ignis_mla_run(plan, &tqn, &tqp, &tckv, &tkpe, &tind, 1.0, 1.0, &tout, &tlse, w, ws_bytes, NULL),
      IGNIS_OK);
  CHECK_STATUS(ignis_mla_plan_destroy(plan), IGNIS_OK);
  h_buf *bufs[] = {&ws, &q_nope, &q_pe, &ckv, &kpe, &kpe_f16, &out, &lse, &lse16, &indices, &bad_indices};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
    h_buf_free(bufs[i]);
}

/* append_paged_mla_kv_cache into a combined 576-wide cache: the rows land at their pages and
 * slots, nothing else changes; bad inputs write nothing. */
static void append_case(h_backend backend, ignis_dtype dtype, int64_t page_size) {
  h_case("append page %lld %s on %s", (long long)page_size, ignis_dtype_name(dtype), h_backend_name(backend));
  h_rng rng = h_rng_make(7 + (uint64_t)page_size);
  const int64_t pages = 9, nnz = 5, batch = 2;
  int32_t kv_indptr[3] = {0, 0, 0}, indices[9], last[2];
  const int32_t lens[2] = {(int32_t)(page_size * 2 + 1), (int32_t)(page_size + 3 > 4 ? page_size + 3 : 4)};
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t n = (int32_t)((lens[b] + page_size - 1) / page_size);
    kv_indptr[b + 1] = kv_indptr[b] + n;
    last[b] = (int32_t)(lens[b] - (n - 1) * page_size);
  }
  for (int32_t i = 0; i < kv_indptr[batch]; ++i)
    indices[i] = (int32_t)((i * 4 + 3) % pages);
  const int32_t bi[5] = {0, 1, 0, 1, 1};
  const int32_t pos[5] = {0, lens[1] - 1, lens[0] - 1, 1, (int32_t)(page_size > 1 ? page_size - 1 : 2)};
  h_buf cache = h_buf_alloc(backend, dtype, pages * page_size * KV_DIM);
  h_buf ckv_rows = h_buf_alloc(backend, dtype, nnz * CKV), kpe_rows = h_buf_alloc(backend, dtype, nnz * KPE);
  for (int64_t i = 0; i < nnz * CKV; ++i)
    h_set(&ckv_rows, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < nnz * KPE; ++i)
    h_set(&kpe_rows, i, h_rng_normal(&rng));
  h_buf_upload(&ckv_rows);
  h_buf_upload(&kpe_rows);
  h_buf_poison(&cache);
  h_buf_upload(&cache);
  h_buf i_bi = h_buf_alloc(backend, IGNIS_I32, nnz), i_pos = h_buf_alloc(backend, IGNIS_I32, nnz);
  h_buf i_ind = h_buf_alloc(backend, IGNIS_I32, kv_indptr[batch]),
        i_ptr = h_buf_alloc(backend, IGNIS_I32, batch + 1);
  h_buf i_last = h_buf_alloc(backend, IGNIS_I32, batch);
  for (int64_t t = 0; t < nnz; ++t) {
    h_set(&i_bi, t, bi[t]);
    h_set(&i_pos, t, pos[t]);
  }
  for (int32_t i = 0; i < kv_indptr[batch]; ++i)
    h_set(&i_ind, i, indices[i]);
  for (int64_t b = 0; b <= batch; ++b)
    h_set(&i_ptr, b, kv_indptr[b]);
  for (int64_t b = 0; b < batch; ++b)
    h_set(&i_last, b, last[b]);
  h_buf *ins[] = {&i_bi, &i_pos, &i_ind, &i_ptr, &i_last};
  for (int i = 0; i < 5; ++i)
    h_buf_upload(ins[i]);
  int64_t sc[3] = {pages, page_size, CKV}, sk[3] = {pages, page_size, KPE},
          st[3] = {page_size * KV_DIM, KV_DIM, 1};
  ignis_tensor ckv = h_view(&cache, 0, 3, sc, st), kpe = h_view(&cache, CKV, 3, sk, st);
  int64_t rc[2] = {nnz, CKV}, rk[2] = {nnz, KPE}, n1[1] = {nnz}, ni[1] = {kv_indptr[batch]},
          np[1] = {batch + 1}, nl[1] = {batch};
  ignis_tensor a_ckv = h_view(&ckv_rows, 0, 2, rc, NULL), a_kpe = h_view(&kpe_rows, 0, 2, rk, NULL);
  ignis_tensor t_bi = h_view(&i_bi, 0, 1, n1, NULL), t_pos = h_view(&i_pos, 0, 1, n1, NULL);
  ignis_tensor t_ind = h_view(&i_ind, 0, 1, ni, NULL), t_ptr = h_view(&i_ptr, 0, 1, np, NULL);
  ignis_tensor t_last = h_view(&i_last, 0, 1, nl, NULL);
  ignis_tensor wrong_kpe = h_view(&kpe_rows, 0, 2, rc, NULL);
  CHECK_ERROR(ignis_append_paged_mla_kv_cache(&a_ckv, &wrong_kpe, &t_bi, &t_pos, &ckv, &kpe, &t_ind, &t_ptr,
                                              &t_last, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "append_kpe");
  CHECK(h_buf_untouched(&cache));
  CHECK_STATUS(ignis_append_paged_mla_kv_cache(&a_ckv, &a_kpe, &t_bi, &t_pos, &ckv, &kpe, &t_ind, &t_ptr,
                                               &t_last, NULL),
               IGNIS_OK);
  h_buf_download(&cache);
  unsigned char *written = calloc((size_t)(pages * page_size * KV_DIM), 1);
  int64_t wrong = 0;
  for (int64_t t = 0; t < nnz; ++t) {
    const int64_t page = indices[kv_indptr[bi[t]] + pos[t] / page_size], slot = pos[t] % page_size;
    const int64_t base = (page * page_size + slot) * KV_DIM;
    for (int c = 0; c < KV_DIM; ++c) {
      const double want = c < CKV ? h_get(&ckv_rows, t * CKV + c) : h_get(&kpe_rows, t * KPE + c - CKV);
      wrong += h_get(&cache, base + c) != want;
      written[base + c] = 1;
    }
  }
  CHECKF(wrong == 0, "%lld appended values differ", (long long)wrong);
  CHECKF(h_buf_changed(&cache, written) == 0, "elements outside the appended rows changed");
  free(written);
  h_buf_free(&cache);
  h_buf_free(&ckv_rows);
  h_buf_free(&kpe_rows);
  for (int i = 0; i < 5; ++i)
    h_buf_free(ins[i]);
}

/* The plan's pairs at head counts that are multiples of 128, which the CUDA cluster form runs as one
 * 2-CTA cluster each (mla_wgmma.cuh): an even item count, and items 2i and 2i + 1 in the same query
 * token of the same request and chunk (so the same keys and the same stop). Random batches, split
 * and not. Host only: the planner is pure C. */
static void plan_pairs(void) {
  h_case("plan pairs at 128 and 256 heads");
  h_rng rng = h_rng_make(77);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t heads = trial % 2 ? 256 : 128, batch = h_rng_int(&rng, 1, 6);
    int32_t qo[7] = {0}, kv_indptr[7] = {0}, kv_len[6];
    for (int64_t b = 0; b < batch; ++b) {
      qo[b + 1] = qo[b] + (int32_t)h_rng_int(&rng, trial % 3 == 0 ? 0 : 1, 4);
      kv_len[b] = (int32_t)h_rng_int(&rng, 0, trial % 4 == 0 ? 40000 : 3000);
      kv_indptr[b + 1] = kv_indptr[b] + (kv_len[b] + 63) / 64;
    }
    ignis_mla_planner planner;
    CHECKF(ignis_mla_planner_init(&planner, heads, 0, 6, 24, 40000, IGNIS_MLA_NOMINAL_WAVE) == 0, "init");
    void *image = malloc(ignis_mla_schedule_bytes(&planner));
    ignis_mla_plan_batch(&planner, qo, kv_indptr, kv_len, batch, image);
    const ignis_mla_schedule_header *header = (const ignis_mla_schedule_header *)image;
    const ignis_mla_work *work = ignis_mla_schedule_work(image);
    CHECKF(header->num_work % 2 == 0, "trial %d: %d items", trial, header->num_work);
    for (int i = 0; i + 1 < header->num_work; i += 2) {
      const ignis_mla_work *a = &work[i], *b = &work[i + 1];
      CHECKF(a->q_row == b->q_row && a->kv_start == b->kv_start && a->kv_end == b->kv_end &&
                 a->page_base == b->page_base && a->partial == b->partial &&
                 a->row_start / heads == b->row_start / heads && b->row_start == a->row_start + 64,
             "trial %d: items %d and %d are not one token's pair", trial, i, i + 1);
    }
    free(image);
  }
}

int main(void) {
  h_init("test_mla");
  plan_pairs();
  for (int bi = 0; bi < h_backend_count(); ++bi) {
    const h_backend backend = h_backend_at(bi);
    if (backend == H_CPU && h_quick())
      continue;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
      if (h_selected(cases[i].name))
        run_case(backend, &cases[i], 1000 + i);
    /* 16 heads on the wide kernel's 64-row tiles (IGNIS_MLA_TILE_ROWS=64, read at plan creation) */
    if (h_selected("wide tiles")) {
      setenv("IGNIS_MLA_TILE_ROWS", "64", 1);
      run_case(backend, &cases[0], 2000);
      unsetenv("IGNIS_MLA_TILE_ROWS");
    }
    bad_inputs(backend);
    append_case(backend, IGNIS_BF16, 1);
    append_case(backend, IGNIS_F16, 16);
    append_case(backend, IGNIS_BF16, 64);
    append_case(backend, IGNIS_FP8_E4M3, 16);
  }
  return h_finish();
}
