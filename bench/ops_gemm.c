/* Registry entries of the GEMM family (include/ignis/gemm.h): the 16-bit product (plain and
 * batched), fp8 with per-tensor scales and the block-scaled fp8 product. M is --tokens, N --hidden,
 * K --inner, the batch --batch. The weight is stored [N, K] row-major, as models keep it, and handed
 * to ignis_mm / ignis_mm_fp8 transposed (the NT form). The case dtype is the 16-bit operands' dtype
 * for mm and the output's for the fp8 forms (their inputs are fp8 e4m3).
 *
 * Counted in FLOPs: 2 * M * N * K per product (times the batch). Bytes (for reference): a, b and
 * out once each, the scales at their size.
 *
 * Suite shapes (issue 18): bf16 and per-tensor fp8 at M 4096 and M 64 with N 7168, K 2048 (a
 * prefill-sized and a decode-sized projection), block-scaled fp8 at M 4096 N 7168 K 16384 and
 * M 64 N 2112 K 7168 (DeepSeek-V3's shapes), a batched bf16 product; small shapes on the host.
 *
 * Grouped forms (ignis_grouped_mm, ignis_grouped_mm_fp8_blockscale): --batch groups of --tokens
 * rows each (m_indptr = g * tokens, int32, on the device), one weight [N, K] per group; a is
 * [batch * tokens, K]. Counted as batch products of M x N x K. Suite: 8 groups x 4096 rows, N 4096,
 * K 7168 (issue 18's grouped bar), bf16 and fp8 block-scaled (a_scale K-major [rows, K/128],
 * b_scale [G, N/128, K/128]). */
#include <stdio.h>

#include "bench.h"

static int64_t gemm_flops(const bench_case *c) {
  return 2 * (c->batch > 0 ? c->batch : 1) * c->tokens * c->hidden * c->inner;
}

static void shape_gemm(const bench_case *c, char *text, size_t size) {
  if (c->batch > 0)
    snprintf(text, size, "B%lld M%lld N%lld K%lld", (long long)c->batch, (long long)c->tokens,
             (long long)c->hidden, (long long)c->inner);
  else
    snprintf(text, size, "M%lld N%lld K%lld", (long long)c->tokens, (long long)c->hidden,
             (long long)c->inner);
}

/* The weight [.., N, K] as the logical [.., K, N] operand: its last two dims swapped. */
static ignis_tensor transposed(const ignis_tensor *w) {
  ignis_tensor t = *w;
  int d = t.ndim - 2;
  t.shape[d] = w->shape[d + 1];
  t.shape[d + 1] = w->shape[d];
  t.strides[d] = w->strides[d + 1];
  t.strides[d + 1] = w->strides[d];
  return t;
}

/* ---- 16-bit: a [M, K], weight [N, K], out [M, N] (batched: a leading batch dim on each) ------- */
static int describe_mm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("a", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->inner);
  s[1] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden, c->inner);
  s[2] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 3;
}

static int describe_bmm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("a", c->dtype, BENCH_FILL_RANDOM, c->batch, c->tokens, c->inner);
  s[1] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->batch, c->hidden, c->inner);
  s[2] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->batch, c->tokens, c->hidden));
  return 3;
}

static ignis_status call_mm(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor b = transposed(&t[1]);
  return ignis_mm(&t[0], &b, NULL, &t[2], stream);
}

/* ---- fp8 per-tensor: a, weight e4m3; scales f32 [1]; out in the case dtype ---------------------- */
static int describe_mm_fp8(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("a", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->tokens, c->inner);
  s[1] = BENCH_SPEC("weight", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->hidden, c->inner);
  s[2] = BENCH_SPEC("a_scale", IGNIS_F32, BENCH_FILL_RANDOM, 1);
  s[3] = BENCH_SPEC("b_scale", IGNIS_F32, BENCH_FILL_RANDOM, 1);
  s[4] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 5;
}

static ignis_status call_mm_fp8(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor b = transposed(&t[1]);
  return ignis_mm_fp8(&t[0], &b, &t[2], &t[3], &t[4], stream);
}

/* ---- block-scaled fp8: a_scale [M, K/128] (K-major), b_scale [N/128, K/128] ------------------- */
static int describe_blockscale(const bench_case *c, bench_tensor_spec *s) {
  int64_t kb = (c->inner + 127) / 128, nb = (c->hidden + 127) / 128;
  s[0] = BENCH_SPEC("a", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->tokens, c->inner);
  s[1] = BENCH_SPEC("weight", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->hidden, c->inner);
  s[2] = BENCH_SPEC("a_scale", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, kb);
  s[3] = BENCH_SPEC("b_scale", IGNIS_F32, BENCH_FILL_RANDOM, nb, kb);
  s[4] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 5;
}

static ignis_status call_blockscale(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_mm_fp8_blockscale(&t[0], &t[1], &t[2], &t[3], &t[4], stream);
}

/* ---- grouped: a [G * M, K], weights [G, N, K], m_indptr [G + 1], out [G * M, N] ---------------- */
static int describe_grouped(const bench_case *c, bench_tensor_spec *s) {
  const int64_t rows = c->batch * c->tokens;
  s[0] = BENCH_SPEC("a", c->dtype, BENCH_FILL_RANDOM, rows, c->inner);
  s[1] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->batch, c->hidden, c->inner);
  s[2] = BENCH_SPEC("m_indptr", IGNIS_I32, BENCH_FILL_QO_INDPTR, c->batch + 1);
  s[3] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, rows, c->hidden));
  return 4;
}

static ignis_status call_grouped(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_grouped_mm(&t[0], &t[1], &t[2], NULL, &t[3], stream);
}

static int describe_grouped_fp8(const bench_case *c, bench_tensor_spec *s) {
  const int64_t rows = c->batch * c->tokens, kb = (c->inner + 127) / 128, nb = (c->hidden + 127) / 128;
  s[0] = BENCH_SPEC("a", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, rows, c->inner);
  s[1] = BENCH_SPEC("weight", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->batch, c->hidden, c->inner);
  s[2] = BENCH_SPEC("a_scale", IGNIS_F32, BENCH_FILL_RANDOM, rows, kb);
  s[3] = BENCH_SPEC("b_scale", IGNIS_F32, BENCH_FILL_RANDOM, c->batch, nb, kb);
  s[4] = BENCH_SPEC("m_indptr", IGNIS_I32, BENCH_FILL_QO_INDPTR, c->batch + 1);
  s[5] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, rows, c->hidden));
  return 6;
}

static ignis_status call_grouped_fp8(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_grouped_mm_fp8_blockscale(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], stream);
}

#define GEMM_DIMS (BENCH_DIM_TOKENS | BENCH_DIM_HIDDEN | BENCH_DIM_INNER)
#define GEMM_ENTRY                                                                                           \
  .family = &bench_family_gemm, .dtypes = BENCH_DTYPES_HALF, .flops = gemm_flops,                            \
  .flops_rule = "2*M*N*K per product (times the batch)"
#define GEMM_TINY BENCH_DIMS(.tokens = 4, .hidden = 128, .inner = 256)
/* clang-format off */
#define GEMM_SHAPE(group, m, n, k) BENCH_SHAPE(group, .tokens = m, .hidden = n, .inner = k, .dtype = IGNIS_BF16)
#define BMM_SHAPE(group, b, m, n, k)                                                                         \
  BENCH_SHAPE(group, .batch = b, .tokens = m, .hidden = n, .inner = k, .dtype = IGNIS_BF16)
/* clang-format on */

static const bench_routine gemm_routines[] = {
    {GEMM_ENTRY, .name = "mm", .tiny = GEMM_TINY,
     .summary = "16-bit GEMM a[M,K] x weight[N,K]^T (cuBLASLt on CUDA)", .functions = "ignis_mm",
     .dims = GEMM_DIMS, .bytes_rule = "a + weight + out (es each)",
     .gpu_suite = BENCH_SUITE(GEMM_SHAPE(1, 4096, 7168, 2048), GEMM_SHAPE(3, 64, 7168, 2048)),
     .host_suite = BENCH_SUITE(GEMM_SHAPE(1, 64, 256, 512)), .describe = describe_mm, .call = call_mm},
    {GEMM_ENTRY, .name = "bmm", .summary = "batched 16-bit GEMM, one weight per batch entry",
     .functions = "ignis_mm", .dims = GEMM_DIMS | BENCH_DIM_BATCH, .bytes_rule = "a + weight + out (es each)",
     .tiny = BENCH_DIMS(.tokens = 4, .hidden = 128, .inner = 256, .batch = 2),
     .gpu_suite = BENCH_SUITE(BMM_SHAPE(2, 8, 512, 1024, 1024)),
     .host_suite = BENCH_SUITE(BMM_SHAPE(2, 2, 32, 128, 256)), .describe = describe_bmm, .call = call_mm},
    {GEMM_ENTRY, .name = "mm_fp8", .tiny = GEMM_TINY,
     .summary = "fp8 e4m3 GEMM with per-tensor f32 scales (bmm_fp8)", .functions = "ignis_mm_fp8",
     .dims = GEMM_DIMS, .bytes_rule = "a + weight (1 byte each) + out (es)",
     .gpu_suite = BENCH_SUITE(GEMM_SHAPE(1, 4096, 7168, 2048), GEMM_SHAPE(3, 64, 7168, 2048)),
     .host_suite = BENCH_SUITE(GEMM_SHAPE(1, 64, 256, 512)), .describe = describe_mm_fp8,
     .call = call_mm_fp8},
    {GEMM_ENTRY, .name = "mm_fp8_blockscale", .tiny = GEMM_TINY,
     .summary = "fp8 e4m3 GEMM, 1x128 activation and 128x128 weight scales (DeepSeek-V3)",
     .functions = "ignis_mm_fp8_blockscale", .dims = GEMM_DIMS,
     .bytes_rule = "a + weight (1 byte each) + scales (4 bytes each) + out (es)",
     .gpu_suite = BENCH_SUITE(GEMM_SHAPE(1, 4096, 7168, 16384), GEMM_SHAPE(3, 64, 2112, 7168)),
     .host_suite = BENCH_SUITE(GEMM_SHAPE(1, 64, 256, 512)), .describe = describe_blockscale,
     .call = call_blockscale},
    {GEMM_ENTRY, .name = "grouped_mm",
     .summary = "grouped 16-bit GEMM: --batch groups of --tokens rows (MoE)", .functions = "ignis_grouped_mm",
     .dims = GEMM_DIMS | BENCH_DIM_BATCH, .bytes_rule = "a + weights + out (es each)",
     .tiny = BENCH_DIMS(.tokens = 4, .hidden = 128, .inner = 256, .batch = 2),
     .gpu_suite = BENCH_SUITE(BMM_SHAPE(2, 8, 4096, 4096, 7168)),
     .host_suite = BENCH_SUITE(BMM_SHAPE(2, 4, 16, 128, 256)), .describe = describe_grouped,
     .call = call_grouped},
    {GEMM_ENTRY, .name = "grouped_mm_fp8_blockscale",
     .summary = "grouped fp8 e4m3 GEMM, 1x128 / 128x128 scales (DeepSeek-V3 MoE experts)",
     .functions = "ignis_grouped_mm_fp8_blockscale", .dims = GEMM_DIMS | BENCH_DIM_BATCH,
     .bytes_rule = "a + weights (1 byte each) + scales (4 bytes each) + out (es)",
     .tiny = BENCH_DIMS(.tokens = 4, .hidden = 128, .inner = 256, .batch = 2),
     .gpu_suite = BENCH_SUITE(BMM_SHAPE(2, 8, 4096, 4096, 7168)),
     .host_suite = BENCH_SUITE(BMM_SHAPE(2, 4, 16, 128, 256)), .describe = describe_grouped_fp8,
     .call = call_grouped_fp8},
};

const bench_family bench_family_gemm = {"gemm", shape_gemm, NULL, BENCH_TABLE(gemm_routines)};
