/* Tests of the paged KV cache ops (include/ignis/paged_kv.h): get_seq_lens,
 * get_batch_indices_positions and append_paged_kv_cache, on every backend, against references
 * written here from the header's formulas.
 *
 * Each case builds a batch of requests with random lengths after the append (some 0, some ending
 * mid-page) and random appended counts (some 0), gives their pages a random permutation of a cache
 * with spare pages, derives seq_lens and (batch_indices, positions) with the ops, checks them, and
 * appends with them. Page sizes 1, 5, 16, 64; NHD and HND; f16, bf16, f32, fp8 e4m3 and e5m2;
 * separate K/V tensors with padded strides, or K and V as the two views of one
 * [pages, 2, ...] buffer; append data contiguous or with padded token/head strides. The cache is
 * poisoned first: every appended token must land byte-exact in its slot of K and V, and nothing
 * else in the cache buffers may change.
 *
 * Bad inputs: host index contents (indptr not monotonic, last_page_len 0 or > page_size, indices
 * past the cache, batch index or position out of range) are rejected on the CPU backend with the
 * parameter named; on CUDA the same out-of-range tokens are skipped (status OK, nothing written).
 * Shape and dtype mismatches are rejected on every backend; nothing is ever written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static const ignis_dtype cache_dtypes[5] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32, IGNIS_FP8_E4M3, IGNIS_FP8_E5M2};

typedef struct kv_case {
  int64_t page_size, heads, head_dim, batch;
  ignis_kv_layout layout;
  ignis_dtype dtype;
  int combined;      /* K and V are views of one [pages, 2, ...] buffer */
  int padded_append; /* append data with padded token/head strides */
} kv_case;

/* A cache tensor in its layout: [pages, page, H, D] (NHD) or [pages, H, page, D] (HND), given the
 * page/token/head strides. */
static ignis_tensor cache_view(const h_buf *buf, int64_t offset, const kv_case *c, int64_t pages, int64_t sp,
                               int64_t st, int64_t sh) {
  int nhd = c->layout == IGNIS_KV_LAYOUT_NHD;
  int64_t shape[4] = {pages, nhd ? c->page_size : c->heads, nhd ? c->heads : c->page_size, c->head_dim};
  int64_t strides[4] = {sp, nhd ? st : sh, nhd ? sh : st, 1};
  return h_view(buf, offset, 4, shape, strides);
}

static int64_t i32_at(const h_buf *b, int64_t i) {
  return (int64_t)h_get(b, i);
}

static void run_case(h_backend backend, const kv_case *c, h_rng *rng) {
  h_case("paged_kv on %s: page_size=%lld heads=%lld head_dim=%lld batch=%lld %s %s%s%s", h_backend_name(backend),
         (long long)c->page_size, (long long)c->heads, (long long)c->head_dim, (long long)c->batch,
         c->layout == IGNIS_KV_LAYOUT_NHD ? "NHD" : "HND", ignis_dtype_name(c->dtype),
         c->combined ? " combined" : " separate", c->padded_append ? " padded-append" : "");
  const int64_t B = c->batch, P = c->page_size, H = c->heads, D = c->head_dim;
  int64_t *len = calloc((size_t)B, sizeof(int64_t)), *app = calloc((size_t)B, sizeof(int64_t));
  int64_t total_pages = 0, nnz = 0;
  for (int64_t b = 0; b < B; ++b) {
    int kind = (int)h_rng_int(rng, 0, 4);
    len[b] = kind == 0 ? 0 : kind == 1 ? P * h_rng_int(rng, 1, 3) : h_rng_int(rng, 1, 3 * P + 2);
    app[b] = kind == 2 ? 0 : h_rng_int(rng, 0, len[b] < 2 * P + 3 ? len[b] : 2 * P + 3);
    total_pages += (len[b] + P - 1) / P;
    nnz += app[b];
  }
  const int64_t num_pages = total_pages + 3;
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)num_pages);
  for (int64_t i = 0; i < num_pages; ++i)
    perm[i] = i;
  for (int64_t i = num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(rng, 0, i), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }

  h_buf indptr = h_buf_alloc(backend, IGNIS_I32, B + 1), indices = h_buf_alloc(backend, IGNIS_I32, total_pages);
  h_buf last = h_buf_alloc(backend, IGNIS_I32, B), append_indptr = h_buf_alloc(backend, IGNIS_I32, B + 1);
  h_buf seq_lens = h_buf_alloc(backend, IGNIS_I32, B);
  h_buf batch_idx = h_buf_alloc(backend, IGNIS_I32, nnz), positions = h_buf_alloc(backend, IGNIS_I32, nnz);
  int64_t page_acc = 0, app_acc = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t pages = (len[b] + P - 1) / P;
    h_set(&indptr, b, (double)page_acc);
    h_set(&append_indptr, b, (double)app_acc);
    for (int64_t i = 0; i < pages; ++i)
      h_set(&indices, page_acc + i, (double)perm[page_acc + i]);
    h_set(&last, b, pages ? (double)(len[b] - (pages - 1) * P) : 0.0);
    page_acc += pages;
    app_acc += app[b];
  }
  h_set(&indptr, B, (double)page_acc);
  h_set(&append_indptr, B, (double)app_acc);
  h_buf_poison(&seq_lens);
  h_buf_poison(&batch_idx);
  h_buf_poison(&positions);

  /* Cache buffers and views. */
  const int64_t page_elems = P * H * D;
  int64_t sp, st, sh, k_off = 0, v_off;
  h_buf k_buf, v_buf;
  int nhd = c->layout == IGNIS_KV_LAYOUT_NHD;
  if (c->combined) {
    sp = 2 * page_elems;
    st = nhd ? H * D : D;
    sh = nhd ? D : P * D;
    v_off = page_elems;
    k_buf = h_buf_alloc(backend, c->dtype, num_pages * sp);
    v_buf = k_buf;
  } else {
    int64_t row = D + 3; /* padded rows */
    st = nhd ? H * row : row;
    sh = nhd ? row : P * row;
    sp = P * H * row + 5;
    v_off = 2;
    k_buf = h_buf_alloc(backend, c->dtype, num_pages * sp + 4);
    v_buf = h_buf_alloc(backend, c->dtype, num_pages * sp + 4);
  }
  h_buf_poison(&k_buf);
  if (!c->combined)
    h_buf_poison(&v_buf);

  /* Append data. */
  const int64_t a_row = c->padded_append ? D + 1 : D, a_tok = c->padded_append ? H * a_row + 2 : H * D;
  h_buf key = h_buf_alloc(backend, c->dtype, nnz * a_tok + 2), value = h_buf_alloc(backend, c->dtype, nnz * a_tok + 2);
  for (int64_t i = 0; i < key.count; ++i) {
    h_set(&key, i, h_rng_normal(rng) * 4.0);
    h_set(&value, i, h_rng_normal(rng) * 4.0);
  }
  h_buf *all[] = {&indptr, &indices, &last, &append_indptr, &seq_lens, &batch_idx, &positions, &k_buf, &key, &value};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_upload(all[i]);
  if (!c->combined)
    h_buf_upload(&v_buf);

  ignis_tensor t_indptr = h_view(&indptr, 0, 1, (int64_t[]){B + 1}, NULL);
  ignis_tensor t_indices = h_view(&indices, 0, 1, (int64_t[]){total_pages}, NULL);
  ignis_tensor t_last = h_view(&last, 0, 1, (int64_t[]){B}, NULL);
  ignis_tensor t_app = h_view(&append_indptr, 0, 1, (int64_t[]){B + 1}, NULL);
  ignis_tensor t_seq = h_view(&seq_lens, 0, 1, (int64_t[]){B}, NULL);
  ignis_tensor t_bi = h_view(&batch_idx, 0, 1, (int64_t[]){nnz}, NULL);
  ignis_tensor t_pos = h_view(&positions, 0, 1, (int64_t[]){nnz}, NULL);

  CHECK_STATUS(ignis_get_seq_lens(&t_indptr, &t_last, P, &t_seq, NULL), IGNIS_OK);
  CHECK_STATUS(ignis_get_batch_indices_positions(&t_app, &t_seq, &t_bi, &t_pos, NULL), IGNIS_OK);

  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.layout = c->layout;
  cache.k_cache = cache_view(&k_buf, k_off, c, num_pages, sp, st, sh);
  cache.v_cache = cache_view(&v_buf, v_off, c, num_pages, sp, st, sh);
  cache.indptr = t_indptr;
  cache.indices = t_indices;
  cache.last_page_len = t_last;
  int64_t a_shape[3] = {nnz, H, D}, a_strides[3] = {a_tok, a_row, 1};
  ignis_tensor t_key = h_view(&key, 0, 3, a_shape, a_strides), t_value = h_view(&value, 1, 3, a_shape, a_strides);
  CHECK_STATUS(ignis_append_paged_kv_cache(&t_key, &t_value, &t_bi, &t_pos, &cache, NULL), IGNIS_OK);

  h_buf_download(&seq_lens);
  h_buf_download(&batch_idx);
  h_buf_download(&positions);
  h_buf_download(&k_buf);
  if (!c->combined)
    h_buf_download(&v_buf);
  int bad_seq = 0, bad_index = 0;
  for (int64_t b = 0; b < B; ++b)
    bad_seq += i32_at(&seq_lens, b) != len[b];
  CHECKF(bad_seq == 0, "%d seq_lens differ", bad_seq);
  unsigned char *k_mask = calloc((size_t)k_buf.count, 1), *v_mask = calloc((size_t)v_buf.count, 1);
  int64_t wrong_k = 0, wrong_v = 0, t = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < app[b]; ++j, ++t) {
      int64_t pos = len[b] - app[b] + j;
      bad_index += i32_at(&batch_idx, t) != b || i32_at(&positions, t) != pos;
      int64_t page = perm[i32_at(&indptr, b) + pos / P], slot = pos % P;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          int64_t dst = page * sp + slot * st + h * sh + d, src = t * a_tok + h * a_row + d;
          k_mask[k_off + dst] = 1;
          (c->combined ? k_mask : v_mask)[v_off + dst] = 1;
          wrong_k += memcmp((char *)k_buf.host + (k_off + dst) * k_buf.elem_size,
                            (char *)key.host + src * key.elem_size, key.elem_size) != 0;
          wrong_v += memcmp((char *)v_buf.host + (v_off + dst) * v_buf.elem_size,
                            (char *)value.host + (src + 1) * value.elem_size, value.elem_size) != 0;
        }
    }
  CHECKF(bad_index == 0, "%d (batch_index, position) pairs differ", bad_index);
  CHECKF(wrong_k == 0 && wrong_v == 0, "%lld K and %lld V elements not copied exactly", (long long)wrong_k,
         (long long)wrong_v);
  int64_t changed = h_buf_changed(&k_buf, k_mask) + (c->combined ? 0 : h_buf_changed(&v_buf, v_mask));
  CHECKF(changed == 0, "%lld cache elements changed outside the appended slots", (long long)changed);
  CHECK(h_buf_changed(&key, NULL) == 0 && h_buf_changed(&value, NULL) == 0 && h_buf_changed(&indices, NULL) == 0);

  free(k_mask);
  free(v_mask);
  free(len);
  free(app);
  free(perm);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_free(all[i]);
  if (!c->combined)
    h_buf_free(&v_buf);
}

static void test_correctness(h_backend backend) {
  static const int64_t page_sizes[] = {1, 5, 16, 64};
  static const int64_t dims[][2] = {{1, 8}, {3, 64}, {2, 7}, {4, 128}};
  h_rng rng = h_rng_make(0x7061676564 + (uint64_t)backend);
  int variant = 0;
  for (size_t ps = 0; ps < sizeof page_sizes / sizeof page_sizes[0]; ++ps)
    for (int layout = 0; layout < 2; ++layout)
      for (size_t dm = 0; dm < sizeof dims / sizeof dims[0]; ++dm)
        for (int combined = 0; combined < 2; ++combined, ++variant) {
          kv_case c;
          memset(&c, 0, sizeof c);
          c.page_size = page_sizes[ps];
          c.layout = (ignis_kv_layout)layout;
          c.heads = dims[dm][0];
          c.head_dim = dims[dm][1];
          c.batch = 1 + variant % 6;
          c.dtype = cache_dtypes[variant % 5];
          c.combined = combined;
          c.padded_append = variant % 3 == 1;
          run_case(backend, &c, &rng);
        }
}

/* ---- bad inputs --------------------------------------------------------------------------------- */
enum { BP = 4, BH = 2, BD = 8, BPAGES = 5, BB = 2, BNNZ = 3 };

typedef struct bad_ctx {
  h_buf k, v, key, value, indptr, indices, last, bi, pos, seq;
} bad_ctx;

/* Poison the cache and seq_lens again (and take new snapshots), undoing valid writes. */
static void restore_outputs(bad_ctx *x) {
  h_buf *outputs[] = {&x->k, &x->v, &x->seq};
  for (int i = 0; i < 3; ++i) {
    h_buf_poison(outputs[i]);
    h_buf_upload(outputs[i]);
  }
}

static int all_untouched(bad_ctx *x) {
  return h_buf_untouched(&x->k) && h_buf_untouched(&x->v) && h_buf_untouched(&x->key) &&
         h_buf_untouched(&x->value) && h_buf_untouched(&x->indptr) && h_buf_untouched(&x->indices) &&
         h_buf_untouched(&x->last) && h_buf_untouched(&x->bi) && h_buf_untouched(&x->pos) &&
         h_buf_untouched(&x->seq);
}

#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(all_untouched(&ctx), "a rejected call changed a buffer");                                         \
  } while (0)

/* A bad index value: rejected on the host. On CUDA the kernel cannot be told: the call succeeds,
 * the tokens whose indices are out of range are skipped, the others are written. When every
 * token is bad (all_bad) nothing may change; either way the cache is restored afterwards. */
#define BAD_CONTENTS(call, needle, all_bad)                                                                  \
  do {                                                                                                       \
    if (backend == H_CPU) {                                                                                  \
      BAD(call, IGNIS_ERROR_INVALID_ARGUMENT, needle);                                                       \
    } else {                                                                                                 \
      CHECK_STATUS(call, IGNIS_OK);                                                                          \
      if (all_bad)                                                                                           \
        CHECKF(all_untouched(&ctx), "an out-of-range token was written");                                    \
      restore_outputs(&ctx);                                                                                 \
    }                                                                                                        \
  } while (0)

/* Set element i of an index buffer, upload, run, restore. */
#define WITH_INDEX(buf, i, value, body)                                                                      \
  do {                                                                                                       \
    double saved_ = h_get(&(buf), i);                                                                        \
    h_set(&(buf), i, value);                                                                                 \
    h_buf_upload(&(buf));                                                                                    \
    body;                                                                                                    \
    h_set(&(buf), i, saved_);                                                                                \
    h_buf_upload(&(buf));                                                                                    \
  } while (0)

static void test_bad_inputs(h_backend backend) {
  h_case("paged_kv bad inputs on %s", h_backend_name(backend));
  bad_ctx ctx;
  ctx.k = h_buf_alloc(backend, IGNIS_BF16, BPAGES * BP * BH * BD);
  ctx.v = h_buf_alloc(backend, IGNIS_BF16, BPAGES * BP * BH * BD);
  ctx.key = h_buf_alloc(backend, IGNIS_BF16, BNNZ * BH * BD);
  ctx.value = h_buf_alloc(backend, IGNIS_BF16, BNNZ * BH * BD);
  ctx.indptr = h_buf_alloc(backend, IGNIS_I32, BB + 1);
  ctx.indices = h_buf_alloc(backend, IGNIS_I32, 3);
  ctx.last = h_buf_alloc(backend, IGNIS_I32, BB);
  ctx.bi = h_buf_alloc(backend, IGNIS_I32, BNNZ);
  ctx.pos = h_buf_alloc(backend, IGNIS_I32, BNNZ);
  ctx.seq = h_buf_alloc(backend, IGNIS_I32, BB);
  /* Request 0: pages 4, 1 (6 tokens); request 1: page 2 (3 tokens). Append: (0, 4), (0, 5), (1, 2). */
  const int indptr_v[] = {0, 2, 3}, indices_v[] = {4, 1, 2}, last_v[] = {2, 3}, bi_v[] = {0, 0, 1}, pos_v[] = {4, 5, 2};
  for (int i = 0; i < 3; ++i) {
    h_set(&ctx.indptr, i, indptr_v[i]);
    h_set(&ctx.indices, i, indices_v[i]);
    h_set(&ctx.bi, i, bi_v[i]);
    h_set(&ctx.pos, i, pos_v[i]);
  }
  for (int i = 0; i < 2; ++i)
    h_set(&ctx.last, i, last_v[i]);
  for (int64_t i = 0; i < ctx.key.count; ++i) {
    h_set(&ctx.key, i, (double)(i % 13));
    h_set(&ctx.value, i, -(double)(i % 11));
  }
  h_buf_poison(&ctx.k);
  h_buf_poison(&ctx.v);
  h_buf_poison(&ctx.seq);
  h_buf *bufs[] = {&ctx.k, &ctx.v, &ctx.key, &ctx.value, &ctx.indptr, &ctx.indices, &ctx.last, &ctx.bi, &ctx.pos, &ctx.seq};
  for (int i = 0; i < 10; ++i)
    h_buf_upload(bufs[i]);
  int64_t cshape[4] = {BPAGES, BP, BH, BD}, ashape[3] = {BNNZ, BH, BD};
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT, bad;
  cache.k_cache = h_view(&ctx.k, 0, 4, cshape, NULL);
  cache.v_cache = h_view(&ctx.v, 0, 4, cshape, NULL);
  cache.indptr = h_view(&ctx.indptr, 0, 1, (int64_t[]){BB + 1}, NULL);
  cache.indices = h_view(&ctx.indices, 0, 1, (int64_t[]){3}, NULL);
  cache.last_page_len = h_view(&ctx.last, 0, 1, (int64_t[]){BB}, NULL);
  ignis_tensor key = h_view(&ctx.key, 0, 3, ashape, NULL), value = h_view(&ctx.value, 0, 3, ashape, NULL);
  ignis_tensor bi = h_view(&ctx.bi, 0, 1, (int64_t[]){BNNZ}, NULL), pos = h_view(&ctx.pos, 0, 1, (int64_t[]){BNNZ}, NULL);
  ignis_tensor seq = h_view(&ctx.seq, 0, 1, (int64_t[]){BB}, NULL);
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  ignis_tensor t;
#define APPEND(c) ignis_append_paged_kv_cache(&key, &value, &bi, &pos, (c), NULL)

  /* Index contents. */
  WITH_INDEX(ctx.indptr, 1, 4, BAD_CONTENTS(APPEND(&cache), "cache.indptr", 0));
  WITH_INDEX(ctx.indptr, 1, 4, BAD_CONTENTS(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, BP, &seq, NULL),
                                            "kv_indptr", 0));
  WITH_INDEX(ctx.last, 1, 0, BAD_CONTENTS(APPEND(&cache), "cache.last_page_len[1]", 0));
  WITH_INDEX(ctx.last, 0, BP + 1, BAD_CONTENTS(APPEND(&cache), "cache.last_page_len[0]", 0));
  WITH_INDEX(ctx.last, 0, BP + 1,
             BAD_CONTENTS(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, BP, &seq, NULL), "kv_last_page_len[0]", 0));
  WITH_INDEX(ctx.indices, 1, BPAGES, BAD_CONTENTS(APPEND(&cache), "cache.indices[1]", 0));
  WITH_INDEX(ctx.indices, 2, -1, BAD_CONTENTS(APPEND(&cache), "cache.indices[2]", 0));
  WITH_INDEX(ctx.bi, 2, BB, BAD_CONTENTS(APPEND(&cache), "batch_indices[2]", 0));
  WITH_INDEX(ctx.pos, 2, BP, BAD_CONTENTS(APPEND(&cache), "positions[2]", 0));
  WITH_INDEX(ctx.pos, 0, -1, BAD_CONTENTS(APPEND(&cache), "positions[0]", 0));
  /* The three tokens at once on CUDA: all skipped. */
  if (backend == H_CUDA) {
    for (int i = 0; i < 3; ++i)
      h_set(&ctx.pos, i, i == 0 ? -1 : i == 1 ? 2 * BP : BP);
    h_buf_upload(&ctx.pos);
    CHECK_STATUS(APPEND(&cache), IGNIS_OK);
    CHECKF(all_untouched(&ctx), "an out-of-range token was written");
    for (int i = 0; i < 3; ++i)
      h_set(&ctx.pos, i, pos_v[i]);
    h_buf_upload(&ctx.pos);
  }

  /* Shapes. */
  bad = cache;
  bad.v_cache.shape[2] = BH - 1;
  BAD(APPEND(&bad), INV, "cache.v_cache.shape[2]");
  t = key;
  t.shape[1] = BH - 1;
  BAD(ignis_append_paged_kv_cache(&t, &value, &bi, &pos, &cache, NULL), INV, "append_key.shape[1]");
  t = value;
  t.shape[2] = BD - 2;
  BAD(ignis_append_paged_kv_cache(&key, &t, &bi, &pos, &cache, NULL), INV, "append_value.shape[2]");
  t = key;
  t.shape[2] = BD / 2;
  BAD(ignis_append_paged_kv_cache(&t, &value, &bi, &pos, &cache, NULL), INV, "append_key.shape[2]");
  t = pos;
  t.shape[0] = BNNZ - 1;
  BAD(ignis_append_paged_kv_cache(&key, &value, &bi, &t, &cache, NULL), INV, "positions.shape[0]");
  bad = cache;
  bad.last_page_len.shape[0] = BB + 1;
  BAD(APPEND(&bad), INV, "cache.last_page_len.shape[0]");
  bad = cache;
  bad.k_cache.ndim = 3;
  BAD(APPEND(&bad), INV, "cache.k_cache.ndim");
  bad = cache;
  bad.layout = IGNIS_KV_LAYOUT_HND; /* page size now read as BH = 2, heads as BP = 4: heads mismatch */
  BAD(APPEND(&bad), INV, "append_key.shape[1]");
  bad = cache;
  bad.k_cache.shape[1] = bad.v_cache.shape[1] = 300;
  BAD(APPEND(&bad), INV, "page size");
  bad = cache;
  bad.k_cache.strides[3] = 2;
  bad.k_cache.shape[3] = bad.v_cache.shape[3] = BD / 2;
  BAD(APPEND(&bad), UNS, "cache.k_cache.strides[-1]");
  bad = cache;
  bad.size = 8;
  BAD(APPEND(&bad), INV, "cache.size");
  BAD(APPEND(NULL), INV, "cache is NULL");
  bad = cache;
  bad.v_cache = bad.k_cache;
  BAD(APPEND(&bad), INV, "cache.v_cache overlaps cache.k_cache");

  /* dtypes */
  t = key;
  t.dtype = IGNIS_F16;
  BAD(ignis_append_paged_kv_cache(&t, &value, &bi, &pos, &cache, NULL), INV, "append_key.dtype");
  t = value;
  t.dtype = IGNIS_FP8_E4M3;
  t.shape[2] = BD;
  BAD(ignis_append_paged_kv_cache(&key, &t, &bi, &pos, &cache, NULL), INV, "append_value.dtype");
  bad = cache;
  bad.v_cache.dtype = IGNIS_F16;
  BAD(APPEND(&bad), INV, "cache.v_cache.dtype");
  bad = cache;
  bad.k_cache.dtype = bad.v_cache.dtype = IGNIS_I32;
  bad.k_cache.shape[3] = bad.v_cache.shape[3] = BD / 2;
  BAD(APPEND(&bad), INV, "cache.k_cache.dtype");
  bad = cache;
  bad.indices.dtype = IGNIS_I64;
  bad.indices.shape[0] = 1;
  BAD(APPEND(&bad), INV, "cache.indices.dtype");
  t = bi;
  t.dtype = IGNIS_U8;
  BAD(ignis_append_paged_kv_cache(&key, &value, &t, &pos, &cache, NULL), INV, "batch_indices.dtype");
  t = seq;
  t.dtype = IGNIS_F32;
  BAD(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, BP, &t, NULL), INV, "seq_lens.dtype");

  /* get_seq_lens / get_batch_indices_positions arguments */
  BAD(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, 0, &seq, NULL), INV, "page_size");
  BAD(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, 257, &seq, NULL), INV, "page_size");
  t = seq;
  t.shape[0] = BB + 1;
  BAD(ignis_get_seq_lens(&cache.indptr, &cache.last_page_len, BP, &t, NULL), INV, "seq_lens.shape[0]");
  {
    /* append_indptr = cache.indptr ({0, 2, 3}); seq_lens = last ({2, 3}): request 0 appends 2 <= 2. */
    ignis_tensor out_bi = bi, out_pos = pos;
    BAD(ignis_get_batch_indices_positions(&cache.indptr, &cache.last_page_len, &out_bi, &out_bi, NULL), INV,
        "positions overlaps batch_indices");
    t = cache.last_page_len;
    t.shape[0] = BB + 1;
    BAD(ignis_get_batch_indices_positions(&cache.indptr, &t, &out_bi, &out_pos, NULL), INV, "seq_lens.shape[0]");
    out_bi.shape[0] = 2; /* append_indptr[2] = 3 > nnz = 2 */
    out_pos.shape[0] = 2;
    BAD_CONTENTS(ignis_get_batch_indices_positions(&cache.indptr, &cache.last_page_len, &out_bi, &out_pos, NULL),
                 "append_indptr[2]", 0);
    WITH_INDEX(ctx.last, 0, 1, BAD_CONTENTS(ignis_get_batch_indices_positions(&cache.indptr, &cache.last_page_len, &bi,
                                                                            &pos, NULL),
                                            "seq_lens[0]", 0));
  }
#undef APPEND
  for (int i = 0; i < 10; ++i)
    h_buf_free(bufs[i]);
}

/* ignis_paged_kv_longest: the longest request of a host page table, requests without pages 0. */
static void test_longest(void) {
  h_case("paged_kv_longest");
  const int32_t indptr[] = {0, 3, 3, 4, 9};
  const int32_t last[] = {5, 0, 16, 1};
  CHECK(ignis_paged_kv_longest(indptr, last, 4, 16) == 65);  /* 4 * 16 + 1 */
  CHECK(ignis_paged_kv_longest(indptr, last, 3, 16) == 37);  /* 2 * 16 + 5 */
  CHECK(ignis_paged_kv_longest(indptr + 1, last + 1, 1, 16) == 0);
  CHECK(ignis_paged_kv_longest(indptr, last, 0, 16) == 0);
}

int main(void) {
  h_init("test_paged_kv");
  test_longest();
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_correctness(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
