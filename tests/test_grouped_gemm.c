/* Tests of the grouped GEMM ops (include/ignis/gemm.h): ignis_grouped_mm and
 * ignis_grouped_mm_fp8_blockscale on every backend, against an fp64 reference written here from the
 * header's formulas (inputs read back after rounding to their dtypes; block-scaled sums formed per
 * 128-wide K block).
 *
 * Cases: 1 to 16 groups with odd row counts, empty groups (first, middle, last, all), one huge
 * group (a few thousand rows, many 128-row tiles), a first offset above 0 and rows of a past the
 * last offset (those rows of out must keep their poison), N and K small multiples of 8 (plus odd
 * ones on the CPU), padded row strides, weights stored [N, K] and [K, N], weight_indices (i32 and
 * i64, repeated and skipped weights), m_indptr i32 and i64, out bf16/f16/f32; fp8 block-scaled with
 * f32 and UE8M0 scales, a_scale K-major and MN-major, b_scale [G, N/128, K/128] K-major and
 * MN-major, a partial last K block. The CUDA cases run the shapes its kernels take (K % 8, N % 8,
 * 16-byte rows); on an H100 / H200 the [N, K] cases run the Hopper kernel (grouped_gemm_sm90.cu),
 * the [K, N] ones the mma.sync kernel, and IGNIS_GEMM_SM90=0 sends all of them to the latter. The
 * big cases run on the GPU only, at the shapes of the Hopper kernel's tile edges and of the models
 * (groups of 0, 1, 127, 128, 129 and 4096 rows; N 1024 to 7168, K 2048 and 7168; one huge group; 200
 * groups of which 196 are empty), checked on sampled rows and columns plus a written-everywhere
 * check (compare_rows). Small M (the CUDA weight-streaming kernel: M <= 512, M <= 8 G, tried
 * first): rows spread as MoE routing does (tokens picking top_k distinct groups), all in one
 * group, in two groups of many, or at random, over 2 to 300 groups, 8- and 16-row chunks, K split
 * over up to 8 warps, 16-bit and fp8 with f32 and UE8M0 scales; the model shapes (Qwen3-30B-A3B,
 * Mixtral-like, DeepSeek-V3 N and K) on the GPU only, each repeated to check the bits do not
 * change. Bad inputs: each returns the documented status, the message names the
 * parameter, and out is untouched.
 *
 * Tolerance per element: out's rounding plus the f32 accumulation bound K * 2^-24 * sum |terms|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct operand {
  h_buf buf;
  ignis_tensor t;
} operand;

/* A view over a fresh buffer of `count` elements: ndim, shape, strides (elements), offset. */
static operand make_view(h_backend be, ignis_dtype dtype, int64_t count, int64_t offset, int ndim,
                         const int64_t *shape, const int64_t *strides) {
  operand o;
  o.buf = h_buf_alloc(be, dtype, count);
  o.t = h_view(&o.buf, offset, ndim, shape, strides);
  return o;
}

/* Normal values of the given scale; uniform ones of the same spread for the big cases (cheaper to
 * draw over a hundred million elements). */
static void fill_random(operand *o, h_rng *rng, double scale, int big) {
  for (int64_t i = 0; i < o->buf.count; ++i)
    h_set(&o->buf, i, big ? h_rng_uniform(rng, -1.7 * scale, 1.7 * scale) : scale * h_rng_normal(rng));
  h_buf_upload(&o->buf);
}

static double at2(const operand *o, int64_t r, int64_t c) {
  int64_t idx[2] = {r, c};
  return h_get(&o->buf, h_index(&o->buf, &o->t, idx));
}

static double at3(const operand *o, int64_t g, int64_t r, int64_t c) {
  int64_t idx[3] = {g, r, c};
  return h_get(&o->buf, h_index(&o->buf, &o->t, idx));
}

static operand make_index(h_backend be, ignis_dtype dtype, const int64_t *values, int64_t count) {
  operand o = make_view(be, dtype, count > 0 ? count : 1, 0, 1, &count, NULL);
  for (int64_t i = 0; i < count; ++i)
    h_set(&o.buf, i, (double)values[i]);
  h_buf_upload(&o.buf);
  return o;
}

/* The weights [W, N, K]: stored [W, N, K] (kn 0) or [W, K, N] viewed as [W, N, K] (kn 1), each
 * stored row padded by `pad` elements. */
static operand make_weights(h_backend be, ignis_dtype dtype, int64_t w, int64_t n, int64_t k, int kn,
                            int64_t pad) {
  int64_t rows = kn ? k : n, cols = kn ? n : k, ld = cols + pad, group = (rows * ld + 15) / 16 * 16;
  int64_t shape[3] = {w, n, k};
  int64_t strides[3] = {group, kn ? 1 : ld, kn ? ld : 1};
  return make_view(be, dtype, w * group + 16, 0, 3, shape, strides);
}

/* The reference of out[i, j] (row i in group g) from the operands as read back after rounding: the
 * plain sum over K, or for fp8 (sa != NULL) the per-128-wide-K-block sums scaled by
 * a_scale[i, kb] * b_scale[w, j / 128, kb]; *abs_sum gets the sum of |terms| (for the tolerance). */
typedef struct ref_ctx {
  const operand *a, *b, *sa, *sb;
  const int64_t *indptr, *widx; /* widx NULL: group g multiplies weight g */
  int64_t groups, k;
} ref_ctx;

static double scale_value(const operand *s, double v) {
  return s->t.dtype == IGNIS_F32 ? v : ldexp(1.0, (int)v - 127);
}

static double ref_at(const ref_ctx *c, int64_t g, int64_t i, int64_t j, double *abs_sum) {
  const int64_t w = c->widx ? c->widx[g] : g;
  double s = 0, sa = 0;
  for (int64_t k0 = 0; k0 < c->k; k0 += 128) {
    double part = 0, part_abs = 0;
    for (int64_t kk = k0; kk < c->k && kk < k0 + 128; ++kk) {
      double term = at2(c->a, i, kk) * at3(c->b, w, j, kk);
      part += term;
      part_abs += fabs(term);
    }
    double scale = 1.0;
    if (c->sa)
      scale = scale_value(c->sa, at2(c->sa, i, k0 / 128)) *
              scale_value(c->sb, at3(c->sb, w, j / 128, k0 / 128));
    s += part * scale;
    sa += part_abs * scale;
  }
  *abs_sum = sa;
  return s;
}

/* The accumulation error allowed per unit of sum |terms| for fp8 on CUDA: Hopper's wgmma adds the
 * products of a K block with a shorter mantissa than f32 (the 2^-24 K bound held for mma.sync, not
 * for the Hopper kernel: 2.2x past it on an H100 at K 320); as in test_gemm.c. */
#define FP8_CUDA_ACCUM 0x1p-8

static void cmp_element(h_cmp *cmp, const operand *out, const ref_ctx *c, int64_t g, int64_t i, int64_t j) {
  h_tol tol = h_tol_for(out->t.dtype, 1.0);
  double abs_sum, ref = ref_at(c, g, i, j, &abs_sum);
  double accum = (double)(c->k > 16 ? c->k : 16) * ldexp(1.0, -24);
  if (c->sa && out->buf.backend == H_CUDA && accum < FP8_CUDA_ACCUM)
    accum = FP8_CUDA_ACCUM;
  double bound = tol.atol + tol.rtol * fabs(ref) + abs_sum * accum;
  h_cmp_add(cmp, i * out->t.shape[1] + j, at2(out, i, j), ref, bound);
}

static int64_t group_of(const ref_ctx *c, int64_t i) {
  for (int64_t g = 0; g < c->groups; ++g)
    if (c->indptr[g] <= i && i < c->indptr[g + 1])
      return g;
  return -1;
}

/* Every element of out's buffer outside rows [lo, hi) x [0, n) kept its poison. */
static void check_rest_untouched(operand *out, int64_t lo, int64_t hi, int64_t n, const char *what) {
  unsigned char *mask = calloc((size_t)out->buf.count, 1);
  for (int64_t i = lo; i < hi; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t idx[2] = {i, j};
      mask[h_index(&out->buf, &out->t, idx)] = 1;
    }
  CHECKF(h_buf_changed(&out->buf, mask) == 0, "%s: elements outside the groups' rows were written", what);
  free(mask);
}

/* Compare out's rows m_indptr[0] .. m_indptr[G] with the reference, and check every other element of
 * out's buffer kept its poison. sampled (the big GPU-only cases, whose full fp64 reference would take
 * minutes): every element of those rows must be written (finite, no poison), and the values are
 * compared on sampled rows (each group's first and last rows, those at 127, 128 and 256 past its
 * start, random ones) and columns (both ends, the 128- and 256-wide tile edges, random ones). */
static void compare_rows(operand *out, const ref_ctx *c, int sampled, h_rng *rng, const char *what) {
  const int64_t lo = c->indptr[0], hi = c->indptr[c->groups], n = out->t.shape[1];
  h_buf_download(&out->buf);
  h_cmp cmp;
  h_cmp_init(&cmp);
  if (!sampled) {
    for (int64_t g = 0; g < c->groups; ++g)
      for (int64_t i = c->indptr[g]; i < c->indptr[g + 1]; ++i)
        for (int64_t j = 0; j < n; ++j)
          cmp_element(&cmp, out, c, g, i, j);
  } else {
    int64_t rows[96], cols[64];
    int nr = 0, nc = 0;
    for (int64_t g = 0; g < c->groups && nr < 72; ++g) {
      const int64_t offsets[] = {0, 127, 128, 256};
      for (int o = 0; o < 4; ++o)
        if (c->indptr[g] + offsets[o] < c->indptr[g + 1])
          rows[nr++] = c->indptr[g] + offsets[o];
      if (c->indptr[g + 1] > c->indptr[g])
        rows[nr++] = c->indptr[g + 1] - 1;
    }
    while (nr < 96 && hi > lo)
      rows[nr++] = h_rng_int(rng, lo, hi - 1);
    const int64_t edges[] = {0, 1, 126, 127, 128, 129, 254, 255, 256, 257, n - 2, n - 1};
    for (int e = 0; e < 12; ++e)
      if (edges[e] >= 0 && edges[e] < n)
        cols[nc++] = edges[e];
    while (nc < 64)
      cols[nc++] = h_rng_int(rng, 0, n - 1);
    for (int r = 0; r < nr; ++r)
      for (int q = 0; q < nc; ++q)
        cmp_element(&cmp, out, c, group_of(c, rows[r]), rows[r], cols[q]);
    int64_t unwritten = 0;
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double v = at2(out, i, j);
        unwritten += !isfinite(v);
      }
    CHECKF(unwritten == 0, "%s: %lld elements of the groups' rows are not finite (unwritten?)", what,
           (long long)unwritten);
  }
  CHECK_CMP(&cmp, what);
  check_rest_untouched(out, lo, hi, n, what);
}

/* Compare out's rows m_indptr[0] .. m_indptr[G] with ref (M x N) (a precomputed fp64 reference and
 * the sums of |terms| per element), and check every other element of out's buffer kept its poison. */
static void compare_rows_ref(operand *out, const double *ref, const double *abs_sum, int64_t lo, int64_t hi,
                             int64_t n, int64_t k, const char *what) {
  h_buf_download(&out->buf);
  h_cmp cmp;
  h_cmp_init(&cmp);
  h_tol tol = h_tol_for(out->t.dtype, 1.0);
  for (int64_t i = lo; i < hi; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t r = i * n + j;
      double bound =
          tol.atol + tol.rtol * fabs(ref[r]) + abs_sum[r] * (double)(k > 16 ? k : 16) * ldexp(1.0, -24);
      h_cmp_add(&cmp, r, at2(out, i, j), ref[r], bound);
    }
  CHECK_CMP(&cmp, what);
  check_rest_untouched(out, lo, hi, n, what);
}

/* Offsets from lengths: indptr[0] = first, then the running sum. */
static int64_t make_offsets(const int64_t *lens, int64_t groups, int64_t first, int64_t *indptr) {
  indptr[0] = first;
  for (int64_t g = 0; g < groups; ++g)
    indptr[g + 1] = indptr[g] + lens[g];
  return indptr[groups];
}

/* ---- ignis_grouped_mm ----------------------------------------------------------------------- */
typedef struct mm_case {
  ignis_dtype in, out;
  int64_t groups;
  const int64_t *lens;
  int64_t first, tail; /* rows of a before the first offset / after the last */
  int64_t n, k;
  int kn;              /* weights stored [K, N] */
  int64_t num_weights; /* > 0: weight_indices used, W weights */
  ignis_dtype index_dtype;
  int big; /* GPU only (the CPU GEMM would take minutes), checked on samples (compare_rows); not
            * under IGNIS_TEST_QUICK (the sanitizer runs) */
} mm_case;

static void run_mm(h_backend be, const mm_case *c, h_rng *rng) {
  const int cuda = be == H_CUDA;
  if ((cuda && (c->n % 8 || c->k % 8)) || (c->big && (!cuda || h_quick())))
    return;
  int64_t indptr[260];
  const int64_t end = make_offsets(c->lens, c->groups, c->first, indptr), m = end + c->tail;
  const int64_t w = c->num_weights > 0 ? c->num_weights : c->groups;
  h_case("grouped_mm %s %s->%s G%lld M%lld N%lld K%lld %s%s idx %s", h_backend_name(be),
         ignis_dtype_name(c->in), ignis_dtype_name(c->out), (long long)c->groups, (long long)m,
         (long long)c->n, (long long)c->k, c->kn ? "[K,N]" : "[N,K]",
         c->num_weights > 0 ? " weight_indices" : "", ignis_dtype_name(c->index_dtype));
  const int64_t pad = cuda ? 8 : 3;
  int64_t a_shape[2] = {m, c->k}, a_strides[2] = {c->k + pad, 1};
  operand a = make_view(be, c->in, m * (c->k + pad) + 16, 0, 2, a_shape, a_strides);
  operand b = make_weights(be, c->in, w, c->n, c->k, c->kn, pad);
  int64_t o_shape[2] = {m, c->n}, o_strides[2] = {c->n + pad, 1};
  operand out = make_view(be, c->out, m * (c->n + pad) + 16, 0, 2, o_shape, o_strides);
  fill_random(&a, rng, 1.0, c->big);
  fill_random(&b, rng, 1.0, c->big);
  operand ind = make_index(be, c->index_dtype, indptr, c->groups + 1);
  int64_t widx[256];
  for (int64_t g = 0; g < c->groups; ++g)
    widx[g] = (g * 7 + 3) % w;
  operand wi = {0};
  if (c->num_weights > 0)
    wi = make_index(be, c->index_dtype == IGNIS_I32 ? IGNIS_I64 : IGNIS_I32, widx, c->groups);
  h_buf_poison(&out.buf);
  h_buf_upload(&out.buf);
  CHECK_STATUS(ignis_grouped_mm(&a.t, &b.t, &ind.t, c->num_weights > 0 ? &wi.t : NULL, &out.t, NULL),
               IGNIS_OK);
  const ref_ctx ref = {&a, &b, NULL, NULL, indptr, c->num_weights > 0 ? widx : NULL, c->groups, c->k};
  compare_rows(&out, &ref, c->big, rng, "ignis_grouped_mm");
  h_buf_free(&a.buf);
  h_buf_free(&b.buf);
  h_buf_free(&out.buf);
  h_buf_free(&ind.buf);
  if (c->num_weights > 0)
    h_buf_free(&wi.buf);
}

static void test_grouped_mm(h_backend be) {
  h_rng rng = h_rng_make(18);
  static const int64_t one[] = {77};
  static const int64_t four[] = {3, 0, 130, 17};
  static const int64_t eight[] = {0, 1, 255, 9, 0, 64, 33, 0};
  static const int64_t empty[] = {0, 0, 0};
  static const int64_t sixteen[] = {5, 12, 0, 7, 129, 3, 1, 0, 40, 2, 2, 2, 90, 0, 11, 6};
  static const int64_t huge[] = {0, 2500, 0};
  static const int64_t edges[] = {0, 1, 127, 128, 129, 4096}, huge_one[] = {0, 4173, 0}, pair[] = {129, 1000};
  static int64_t sparse[200];
  sparse[3] = 1;
  sparse[50] = 300;
  sparse[120] = 129;
  sparse[199] = 64;
  const ignis_dtype B = IGNIS_BF16, H = IGNIS_F16, F = IGNIS_F32, I32 = IGNIS_I32, I64 = IGNIS_I64;
  const mm_case cases[] = {
      {B, B, 1, one, 0, 0, 64, 96, 0, 0, I32, 0},
      {B, B, 4, four, 0, 0, 136, 72, 0, 0, I32, 0},
      {H, H, 8, eight, 5, 7, 64, 128, 0, 0, I64, 0},
      {B, F, 8, eight, 0, 0, 40, 200, 1, 0, I32, 0},   /* [K, N] weights, f32 out */
      {H, B, 4, four, 2, 0, 128, 64, 1, 0, I64, 0},    /* [K, N], f16 in -> bf16 out */
      {B, B, 3, empty, 4, 3, 64, 64, 0, 0, I32, 0},    /* every group empty */
      {B, B, 16, sixteen, 0, 0, 48, 56, 0, 5, I32, 0}, /* weight_indices, 5 weights */
      {H, F, 16, sixteen, 1, 2, 24, 40, 1, 3, I64, 0}, /* weight_indices with [K, N] */
      {B, B, 3, huge, 0, 0, 72, 64, 0, 0, I32, 0},     /* one huge group */
      {B, B, 4, four, 0, 0, 33, 21, 0, 0, I32, 0},     /* CPU only: odd N and K */
      {B, F, 4, four, 0, 0, 136, 72, 0, 0, I64, 0},    /* f32 out, K past the last 64-wide step */
      {H, H, 4, four, 1, 1, 256, 200, 0, 0, I32, 0},   /* K 200: a partial last K stage */
      /* GPU only, checked on samples: the Hopper kernel's tile edges (groups of 1, 127, 128, 129
       * rows; 256-wide tiles with a partial last one at N 2112), one huge group, many empty groups */
      {B, B, 6, edges, 0, 0, 2112, 2048, 0, 0, I64, 1},
      {H, H, 3, huge_one, 3, 5, 4096, 7168, 0, 1, I32, 1}, /* one weight for every group */
      {B, F, 200, sparse, 2, 0, 1024, 2048, 0, 7, I32, 1}, /* 200 groups, 196 empty */
      {B, B, 2, pair, 0, 0, 7168, 7168, 0, 1, I64, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_mm(be, &cases[i], &rng);
}

/* ---- ignis_grouped_mm_fp8_blockscale ---------------------------------------------------------- */
typedef struct fp8_case {
  int64_t groups;
  const int64_t *lens;
  int64_t first, tail, n, k;
  ignis_dtype scale_dtype;
  int a_mn, b_mn; /* scale tensors given transposed (FlashInfer's "MN" major mode) */
  ignis_dtype out;
  int big; /* GPU only, checked on samples */
} fp8_case;

static void fill_scales(operand *s, h_rng *rng) {
  for (int64_t i = 0; i < s->buf.count; ++i)
    h_set(&s->buf, i,
          s->t.dtype == IGNIS_F32 ? h_rng_uniform(rng, 0.01, 0.1) : (double)h_rng_int(rng, 118, 128));
  h_buf_upload(&s->buf);
}

static void run_fp8(h_backend be, const fp8_case *c, h_rng *rng) {
  const int cuda = be == H_CUDA;
  if ((cuda && (c->n % 8 || c->k % 16)) || (c->big && (!cuda || h_quick())))
    return;
  int64_t indptr[260];
  const int64_t end = make_offsets(c->lens, c->groups, c->first, indptr), m = end + c->tail;
  const int64_t kb = (c->k + 127) / 128, nb = (c->n + 127) / 128;
  h_case("grouped_mm_fp8_blockscale %s G%lld M%lld N%lld K%lld scales %s a %s b %s -> %s", h_backend_name(be),
         (long long)c->groups, (long long)m, (long long)c->n, (long long)c->k,
         ignis_dtype_name(c->scale_dtype), c->a_mn ? "MN" : "K", c->b_mn ? "MN" : "K",
         ignis_dtype_name(c->out));
  const int64_t pad = cuda ? 16 : 3;
  int64_t a_shape[2] = {m, c->k}, a_strides[2] = {c->k + pad, 1};
  operand a = make_view(be, IGNIS_FP8_E4M3, m * (c->k + pad) + 16, 0, 2, a_shape, a_strides);
  operand b = make_weights(be, IGNIS_FP8_E4M3, c->groups, c->n, c->k, 0, pad);
  int64_t o_shape[2] = {m, c->n}, o_strides[2] = {c->n + 8, 1};
  operand out = make_view(be, c->out, m * (c->n + 8) + 16, 0, 2, o_shape, o_strides);
  fill_random(&a, rng, 2.0, c->big);
  fill_random(&b, rng, 2.0, c->big);
  int64_t sa_shape[2] = {m, kb}, sa_strides[2] = {c->a_mn ? 1 : kb, c->a_mn ? m : 1};
  operand sa = make_view(be, c->scale_dtype, m * kb + 1, 0, 2, sa_shape, sa_strides);
  int64_t sb_shape[3] = {c->groups, nb, kb}, sb_strides[3] = {nb * kb, c->b_mn ? 1 : kb, c->b_mn ? nb : 1};
  operand sb = make_view(be, c->scale_dtype, c->groups * nb * kb + 1, 0, 3, sb_shape, sb_strides);
  fill_scales(&sa, rng);
  fill_scales(&sb, rng);
  operand ind = make_index(be, IGNIS_I32, indptr, c->groups + 1);
  h_buf_poison(&out.buf);
  h_buf_upload(&out.buf);
  CHECK_STATUS(ignis_grouped_mm_fp8_blockscale(&a.t, &b.t, &sa.t, &sb.t, &ind.t, &out.t, NULL), IGNIS_OK);
  const ref_ctx ref = {&a, &b, &sa, &sb, indptr, NULL, c->groups, c->k};
  compare_rows(&out, &ref, c->big, rng, "ignis_grouped_mm_fp8_blockscale");
  operand all[] = {a, b, out, sa, sb, ind};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_free(&all[i].buf);
}

static void test_grouped_fp8(h_backend be) {
  h_rng rng = h_rng_make(19);
  static const int64_t one[] = {45};
  static const int64_t four[] = {3, 0, 130, 17};
  static const int64_t eight[] = {0, 1, 129, 9, 0, 64, 33, 0};
  static const int64_t huge[] = {0, 1500};
  static const int64_t three[] = {5, 200, 60}, edges[] = {0, 1, 127, 128, 129, 4096},
                       big_four[] = {4096, 0, 300, 1};
  const ignis_dtype F = IGNIS_F32, U = IGNIS_U8, B = IGNIS_BF16, H = IGNIS_F16;
  const fp8_case cases[] = {
      {1, one, 0, 0, 128, 256, F, 0, 0, B, 0},
      {4, four, 0, 3, 256, 384, F, 1, 1, B, 0},  /* FlashInfer's default MN-major scales */
      {8, eight, 2, 0, 136, 320, U, 0, 1, H, 0}, /* UE8M0, partial N and K blocks */
      {2, huge, 0, 0, 128, 512, F, 1, 0, B, 0},  /* one huge group */
      {4, four, 0, 0, 200, 200, U, 1, 1, B, 0},  /* CPU only: K not a multiple of 16 */
      {3, three, 0, 2, 256, 336, F, 0, 0, B, 0}, /* K 336: a partial last scale block */
      /* GPU only, checked on samples: the Hopper kernel's tile edges, DeepSeek-V3's K 7168 */
      {6, edges, 0, 0, 2112, 7168, F, 0, 1, B, 1},
      {4, big_four, 7, 0, 4096, 2048, U, 1, 0, H, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_fp8(be, &cases[i], &rng);
}

/* ---- small M: the weight-streaming kernel's calls (M <= 512, M <= 8 G, NT weights) -------------- */
/* How the rows fall into groups: tokens that each pick top_k distinct groups (MoE routing), every
 * row in one group, rows in only two groups of many, or each row in a uniformly random group. */
typedef enum spread { ROUTED, ONE_GROUP, TWO_GROUPS, RANDOM } spread;

typedef struct small_case {
  ignis_dtype in, out;           /* in IGNIS_FP8_E4M3: ignis_grouped_mm_fp8_blockscale */
  int64_t groups, tokens, top_k; /* M = tokens * top_k (top_k 1 for the spreads other than ROUTED) */
  spread how;
  int64_t first, tail, n, k;
  int cuda_only;           /* the model shapes: too slow for the CPU backend's test time */
  int64_t num_weights;     /* > 0: weight_indices over that many weights (16-bit only) */
  ignis_dtype scale_dtype; /* fp8 */
  int a_mn;                /* fp8: a_scale given transposed (FlashInfer's MN mode) */
} small_case;

static void spread_rows(const small_case *c, h_rng *rng, int64_t *lens) {
  const int64_t m = c->tokens * c->top_k;
  for (int64_t g = 0; g < c->groups; ++g)
    lens[g] = 0;
  if (c->how == ROUTED) {
    int64_t picked[16];
    for (int64_t tok = 0; tok < c->tokens; ++tok)
      for (int64_t j = 0; j < c->top_k; ++j) {
        int64_t g, seen;
        do {
          g = h_rng_int(rng, 0, c->groups - 1);
          seen = 0;
          for (int64_t i = 0; i < j; ++i)
            seen |= picked[i] == g;
        } while (seen);
        picked[j] = g;
        lens[g] += 1;
      }
  } else if (c->how == ONE_GROUP) {
    lens[c->groups / 2] = m;
  } else if (c->how == TWO_GROUPS) {
    lens[0] = m > 1 ? 1 : 0;
    lens[c->groups - 1] = m - lens[0];
  } else {
    for (int64_t i = 0; i < m; ++i)
      lens[h_rng_int(rng, 0, c->groups - 1)] += 1;
  }
}

/* Every element of a buffer as a double (the inputs, read once for a fast reference). */
static double *to_doubles(const h_buf *buf) {
  double *d = malloc((size_t)buf->count * sizeof(double));
  for (int64_t i = 0; i < buf->count; ++i)
    d[i] = h_get(buf, i);
  return d;
}

static void run_small(h_backend be, const small_case *c, h_rng *rng) {
  const int cuda = be == H_CUDA, fp8 = c->in == IGNIS_FP8_E4M3;
  if (c->cuda_only && (!cuda || h_quick())) /* the sanitizer runs keep the small shapes */
    return;
  int64_t lens[512], indptr[513];
  spread_rows(c, rng, lens);
  const int64_t rows = c->tokens * c->top_k, end = make_offsets(lens, c->groups, c->first, indptr);
  const int64_t m = end + c->tail, n = c->n, k = c->k, kb = (k + 127) / 128, nb = (n + 127) / 128;
  const int64_t w = c->num_weights > 0 ? c->num_weights : c->groups;
  static const char *const spreads[] = {"routed", "one group", "two groups", "random"};
  h_case("small-M grouped %s %s %s->%s G%lld rows %lld (%s) M%lld N%lld K%lld%s%s", fp8 ? "fp8" : "mm",
         h_backend_name(be), ignis_dtype_name(c->in), ignis_dtype_name(c->out), (long long)c->groups,
         (long long)rows, spreads[c->how], (long long)m, (long long)n, (long long)k,
         c->num_weights > 0 ? " weight_indices" : "",
         fp8 ? (c->scale_dtype == IGNIS_U8 ? " UE8M0" : " f32 scales") : "");
  /* The weights overlap: weight w starts `shift` elements after weight w - 1, so many groups of a
   * model-sized [N, K] fit in memory and each still has its own values. */
  const int64_t shift = cuda ? 4096 : 40, ldb = k + (cuda ? 16 : 3);
  int64_t b_shape[3] = {w, n, k}, b_strides[3] = {shift, ldb, 1};
  operand b = make_view(be, c->in, (w - 1) * shift + n * ldb + 16, 0, 3, b_shape, b_strides);
  int64_t a_shape[2] = {m, k}, a_strides[2] = {k + (cuda ? 16 : 5), 1};
  operand a = make_view(be, c->in, m * a_strides[0] + 16, 0, 2, a_shape, a_strides);
  int64_t o_shape[2] = {m, n}, o_strides[2] = {n + 8, 1};
  operand out = make_view(be, c->out, m * o_strides[0] + 16, 0, 2, o_shape, o_strides);
  fill_random(&a, rng, fp8 ? 2.0 : 1.0, 0);
  fill_random(&b, rng, fp8 ? 2.0 : 1.0, 0);
  operand ind = make_index(be, c->groups % 2 ? IGNIS_I64 : IGNIS_I32, indptr, c->groups + 1);
  int64_t widx[512];
  for (int64_t g = 0; g < c->groups; ++g)
    widx[g] = (g * 5 + 1) % w;
  operand wi = {0}, sa = {0}, sb = {0};
  if (c->num_weights > 0)
    wi = make_index(be, IGNIS_I32, widx, c->groups);
  if (fp8) {
    int64_t sa_shape[2] = {m, kb}, sa_strides[2] = {c->a_mn ? 1 : kb, c->a_mn ? m : 1};
    sa = make_view(be, c->scale_dtype, m * kb + 1, 0, 2, sa_shape, sa_strides);
    int64_t sb_shape[3] = {c->groups, nb, kb};
    sb = make_view(be, c->scale_dtype, c->groups * nb * kb, 0, 3, sb_shape, NULL);
    fill_scales(&sa, rng);
    fill_scales(&sb, rng);
  }
  h_buf_poison(&out.buf);
  h_buf_upload(&out.buf);
  if (fp8)
    CHECK_STATUS(ignis_grouped_mm_fp8_blockscale(&a.t, &b.t, &sa.t, &sb.t, &ind.t, &out.t, NULL), IGNIS_OK);
  else
    CHECK_STATUS(ignis_grouped_mm(&a.t, &b.t, &ind.t, c->num_weights > 0 ? &wi.t : NULL, &out.t, NULL),
                 IGNIS_OK);

  double *ad = to_doubles(&a.buf), *bd = to_doubles(&b.buf);
  double *ref = calloc((size_t)(m * n + 1), sizeof(double)),
         *abs_sum = calloc((size_t)(m * n + 1), sizeof(double));
  for (int64_t g = 0; g < c->groups; ++g) {
    const int64_t wg = c->num_weights > 0 ? widx[g] : g;
    for (int64_t i = indptr[g]; i < indptr[g + 1]; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const double *ar = ad + i * a_strides[0], *br = bd + wg * shift + j * ldb;
        double sum = 0, sum_abs = 0;
        for (int64_t blk = 0; blk < kb; ++blk) {
          double part = 0, part_abs = 0;
          for (int64_t kk = blk * 128; kk < k && kk < (blk + 1) * 128; ++kk) {
            part += ar[kk] * br[kk];
            part_abs += fabs(ar[kk] * br[kk]);
          }
          const double scale =
              fp8 ? scale_value(&sa, at2(&sa, i, blk)) * scale_value(&sb, at3(&sb, g, j / 128, blk)) : 1.0;
          sum += part * scale;
          sum_abs += part_abs * scale;
        }
        ref[i * n + j] = sum;
        abs_sum[i * n + j] = sum_abs;
      }
  }
  compare_rows_ref(&out, ref, abs_sum, indptr[0], end, n, k, "small-M grouped GEMM");
  if (cuda) { /* the same bits on a second call */
    const size_t bytes = (size_t)out.buf.count * out.buf.elem_size;
    unsigned char *first = malloc(bytes);
    memcpy(first, out.buf.host, bytes);
    if (fp8)
      CHECK_STATUS(ignis_grouped_mm_fp8_blockscale(&a.t, &b.t, &sa.t, &sb.t, &ind.t, &out.t, NULL), IGNIS_OK);
    else
      CHECK_STATUS(ignis_grouped_mm(&a.t, &b.t, &ind.t, c->num_weights > 0 ? &wi.t : NULL, &out.t, NULL),
                   IGNIS_OK);
    h_buf_download(&out.buf);
    CHECKF(memcmp(first, out.buf.host, bytes) == 0, "a second call gave different bits");
    free(first);
  }
  free(ad);
  free(bd);
  free(ref);
  free(abs_sum);
  operand all[] = {a, b, out, ind, wi, sa, sb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (all[i].buf.host)
      h_buf_free(&all[i].buf);
}

static void test_small_m(h_backend be) {
  h_rng rng = h_rng_make(20);
  const ignis_dtype B = IGNIS_BF16, H = IGNIS_F16, F = IGNIS_F32, E = IGNIS_FP8_E4M3, U = IGNIS_U8;
  const small_case cases[] = {
      /* in out  G    T   top_k spread      first tail  N     K    cuda W  scales a_mn */
      /* model shapes (GPU only): Qwen3-30B-A3B, Mixtral, DeepSeek-V3 decode */
      {B, B, 128, 1, 8, ROUTED, 0, 0, 1536, 2048, 1, 0, F, 0},     /* Qwen3 fc1, T1 */
      {B, B, 128, 16, 8, ROUTED, 0, 0, 2048, 768, 1, 0, F, 0},     /* Qwen3 fc2, T16 (M 128) */
      {B, F, 128, 64, 1, ONE_GROUP, 3, 2, 1536, 2048, 1, 0, F, 0}, /* one group takes all 64 rows */
      {H, H, 128, 16, 1, TWO_GROUPS, 0, 0, 2048, 768, 1, 0, F, 0}, /* mostly empty */
      {B, B, 8, 1, 2, ROUTED, 0, 0, 4096, 2048, 1, 0, F, 0},       /* Mixtral-like, T1 */
      {B, B, 8, 64, 1, RANDOM, 0, 0, 4096, 2048, 1, 0, F, 0},      /* 8 rows per group: 16-row chunks */
      {B, H, 8, 1, 1, ROUTED, 0, 0, 7168, 2048, 1, 0, F, 0},       /* M 1 */
      {H, F, 128, 2, 1, RANDOM, 1, 1, 2048, 768, 1, 37, F, 0},     /* weight_indices */
      {E, B, 256, 1, 8, ROUTED, 0, 0, 4096, 7168, 1, 0, F, 0},     /* DeepSeek fc1, T1 */
      {E, B, 256, 2, 8, ROUTED, 0, 0, 7168, 2048, 1, 0, U, 1},     /* DeepSeek fc2, T2, UE8M0 */
      {E, H, 256, 64, 1, ONE_GROUP, 0, 0, 2048, 7168, 1, 0, F, 1},
      {E, B, 256, 8, 1, TWO_GROUPS, 2, 0, 1536, 2048, 1, 0, U, 0},
      {E, B, 8, 64, 1, RANDOM, 0, 0, 2048, 2048, 1, 0, F, 0}, /* 8 rows per group: 16-row chunks */
      /* small and odd shapes, both backends */
      {B, B, 5, 7, 1, RANDOM, 2, 3, 24, 40, 0, 0, F, 0},
      {H, F, 3, 1, 1, ROUTED, 0, 0, 8, 8, 0, 0, F, 0},
      {B, B, 300, 20, 1, RANDOM, 0, 1, 16, 24, 0, 0, F, 0}, /* G past one block's 256-group search step */
      {B, F, 300, 3, 1, TWO_GROUPS, 0, 0, 40, 48, 0, 0, F, 0},
      {B, B, 2, 16, 1, ONE_GROUP, 0, 0, 40, 56, 0, 0, F, 0}, /* 16-row chunks */
      {H, H, 6, 8, 2, ROUTED, 1, 0, 72, 136, 0, 4, F, 0},    /* weight_indices, a partial batch of K */
      {E, B, 4, 12, 1, RANDOM, 0, 0, 136, 208, 0, 0, U, 1},  /* partial N and K scale blocks */
      {E, H, 3, 5, 1, RANDOM, 1, 2, 8, 16, 0, 0, F, 0},
      {E, B, 12, 4, 2, ROUTED, 0, 0, 264, 400, 0, 0, F, 1},
      {B, B, 4, 3, 1, RANDOM, 0, 0, 32, 1032, 0, 0, F, 0}, /* K over 8 warps: a ragged one, idle ones */
      {E, B, 5, 4, 1, RANDOM, 0, 0, 24, 1040, 0, 0, U, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    run_small(be, &cases[i], &rng);
}

/* ---- bad inputs ------------------------------------------------------------------------------ */
static void test_bad_inputs(h_backend be) {
  enum { G = 3, M = 20, N = 128, K = 256 };
  h_case("grouped gemm bad inputs on %s", h_backend_name(be));
  h_rng rng = h_rng_make(7);
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  int64_t a_shape[2] = {M, K}, o_shape[2] = {M, N};
  operand a = make_view(be, IGNIS_BF16, M * K, 0, 2, a_shape, NULL);
  operand b = make_weights(be, IGNIS_BF16, G, N, K, 0, 0);
  operand out = make_view(be, IGNIS_BF16, M * N, 0, 2, o_shape, NULL);
  fill_random(&a, &rng, 1.0, 0);
  fill_random(&b, &rng, 1.0, 0);
  const int64_t good[] = {0, 5, 5, 20}, decreasing[] = {0, 6, 5, 20}, past[] = {0, 5, 5, 21},
                widx_bad[] = {0, 3, 1};
  operand ind = make_index(be, IGNIS_I32, good, G + 1);
  operand dec = make_index(be, IGNIS_I32, decreasing, G + 1), pst = make_index(be, IGNIS_I32, past, G + 1);
  operand wbad = make_index(be, IGNIS_I64, widx_bad, G);
  operand ind_f = make_view(be, IGNIS_F32, G + 1, 0, 1, (int64_t[]){G + 1}, NULL);
  h_buf_poison(&out.buf);
  h_buf_upload(&out.buf);
  ignis_tensor t, o;

  t = b.t;
  t.shape[2] = K - 8;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &t, &ind.t, NULL, &out.t, NULL), INV, "do not multiply");
  o = out.t;
  o.shape[1] = N - 8;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind.t, NULL, &o, NULL), INV, "out.shape[1]");
  o = out.t;
  o.shape[0] = M - 1;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind.t, NULL, &o, NULL), INV, "out.shape[0]");
  t = b.t;
  t.shape[0] = G + 1;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &t, &ind.t, NULL, &out.t, NULL), INV, "b.shape[0]");
  CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind_f.t, NULL, &out.t, NULL), INV, "m_indptr");
  t = b.t;
  t.dtype = IGNIS_F16;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &t, &ind.t, NULL, &out.t, NULL), INV, "b.dtype");
  t = a.t;
  t.dtype = IGNIS_F32;
  CHECK_ERROR(ignis_grouped_mm(&t, &b.t, &ind.t, NULL, &out.t, NULL), INV, "a.dtype");
  t = b.t;
  t.strides[1] = 2;
  t.strides[2] = 2 * N;
  CHECK_ERROR(ignis_grouped_mm(&a.t, &t, &ind.t, NULL, &out.t, NULL), UNS, "b.strides");
  t = a.t;
  t.strides[0] = K - 1;
  CHECK_ERROR(ignis_grouped_mm(&t, &b.t, &ind.t, NULL, &out.t, NULL), INV, "a.strides[0]");
  t = ind.t; /* G + 1 entries where weight_indices has G */
  CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind.t, &t, &out.t, NULL), INV, "weight_indices");
  o = out.t;
  o.data = a.t.data; /* out overlapping a */
  CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind.t, NULL, &o, NULL), INV, "overlaps a");
  if (be == H_CPU) { /* values of the index arrays: checked where the host can read them */
    CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &dec.t, NULL, &out.t, NULL), INV, "m_indptr[2]");
    CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &pst.t, NULL, &out.t, NULL), INV, "m_indptr[3]");
    CHECK_ERROR(ignis_grouped_mm(&a.t, &b.t, &ind.t, &wbad.t, &out.t, NULL), INV, "weight_indices[1]");
  } else {
    t = a.t;
    t.data = (char *)t.data + 2; /* rows no longer 16-byte aligned */
    t.shape[0] = M - 1;
    o = out.t;
    o.shape[0] = M - 1;
    operand small = make_index(be, IGNIS_I32, (const int64_t[]){0, 5, 5, 19}, G + 1);
    CHECK_ERROR(ignis_grouped_mm(&t, &b.t, &small.t, NULL, &o, NULL), UNS, "a.data");
    h_buf_free(&small.buf);
  }
  CHECK(h_buf_untouched(&out.buf));

  /* fp8 block-scaled */
  operand a8 = make_view(be, IGNIS_FP8_E4M3, M * K, 0, 2, a_shape, NULL);
  operand b8 = make_weights(be, IGNIS_FP8_E4M3, G, N, K, 0, 0);
  fill_random(&a8, &rng, 1.0, 0);
  fill_random(&b8, &rng, 1.0, 0);
  int64_t sa_shape[2] = {M, K / 128}, sb_shape[3] = {G, N / 128, K / 128};
  operand sa = make_view(be, IGNIS_F32, M * (K / 128), 0, 2, sa_shape, NULL);
  operand sb = make_view(be, IGNIS_F32, G * (N / 128) * (K / 128), 0, 3, sb_shape, NULL);
  operand sbu = make_view(be, IGNIS_U8, G * (N / 128) * (K / 128), 0, 3, sb_shape, NULL);
  fill_scales(&sa, &rng);
  fill_scales(&sb, &rng);
  fill_scales(&sbu, &rng);
  t = sa.t;
  t.shape[1] = K / 128 + 1;
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &t, &sb.t, &ind.t, &out.t, NULL), INV,
              "a_scale.shape[1]");
  t = sb.t;
  t.shape[1] = 2;
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &sa.t, &t, &ind.t, &out.t, NULL), INV,
              "b_scale.shape[1]");
  t = sb.t;
  t.ndim = 2;
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &sa.t, &t, &ind.t, &out.t, NULL), INV, "b_scale");
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &sa.t, &sbu.t, &ind.t, &out.t, NULL), INV,
              "b_scale.dtype");
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a.t, &b8.t, &sa.t, &sb.t, &ind.t, &out.t, NULL), INV,
              "a.dtype");
  t = b8.t;
  t.strides[1] = 1;
  t.strides[2] = N;
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &t, &sa.t, &sb.t, &ind.t, &out.t, NULL), UNS,
              "K-contiguous");
  o = out.t;
  o.dtype = IGNIS_F32;
  CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &sa.t, &sb.t, &ind.t, &o, NULL), INV,
              "out.dtype");
  if (be == H_CPU)
    CHECK_ERROR(ignis_grouped_mm_fp8_blockscale(&a8.t, &b8.t, &sa.t, &sb.t, &dec.t, &out.t, NULL), INV,
                "m_indptr[2]");
  CHECK(h_buf_untouched(&out.buf));

  operand all[] = {a, b, out, ind, dec, pst, wbad, ind_f, a8, b8, sa, sb, sbu};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_free(&all[i].buf);
}

int main(void) {
  h_init("test_grouped_gemm");
  for (int i = 0; i < h_backend_count(); ++i) {
    h_backend be = h_backend_at(i);
    if (be == H_CPU && h_quick()) /* IGNIS_TEST_QUICK (the sanitizer runs): the GPU cases only */
      continue;
    test_grouped_mm(be);
    test_grouped_fp8(be);
    test_small_m(be);
    test_bad_inputs(be);
  }
  return h_finish();
}
