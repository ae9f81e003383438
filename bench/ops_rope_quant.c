/* Registry entries of RoPE fused with fp8 quantization (include/ignis/rope.h): the plain form on
 * DeepSeek-V3's MLA shapes (128 query heads, rope 64, nope 512, one shared 2-D k) and Llama's GQA
 * shape (32/8 heads, d128 all rotary), and the two paged appends on the same shapes.
 *
 * Dims: tokens, q_heads, k_heads (0 for MLA's 2-D k), head_dim = the rope dim, hidden = the nope
 * dim; the appends use batch x kv_len tokens (every request appends all of its tokens, as a
 * prefill does) in pages of page_size taken in a random order. Inputs are the case's dtype (f16 or
 * bf16), outputs and caches fp8 e4m3. Bytes: every input read once (the cos/sin cache counted as
 * the rows gathered), every output written once; the caches count the tokens written. */
#include <stdio.h>

#include "bench.h"

static int64_t max_position(const bench_case *c) {
  return c->tokens > BENCH_MAX_POSITION ? c->tokens : BENCH_MAX_POSITION;
}

/* q_rope, k_rope, q_nope, k_nope (no nope parts when hidden is 0), cos_sin_cache, pos_ids. */
static int describe_sources(const bench_case *c, bench_tensor_spec *s) {
  const int64_t t = c->tokens, hq = c->q_heads, r = c->head_dim, n = c->hidden;
  int k = 0;
  s[k++] = BENCH_SPEC("q_rope", c->dtype, BENCH_FILL_RANDOM, t, hq, r);
  s[k++] = c->k_heads ? BENCH_SPEC("k_rope", c->dtype, BENCH_FILL_RANDOM, t, c->k_heads, r)
                      : BENCH_SPEC("k_rope", c->dtype, BENCH_FILL_RANDOM, t, r);
  if (n > 0) {
    s[k++] = BENCH_SPEC("q_nope", c->dtype, BENCH_FILL_RANDOM, t, hq, n);
    s[k++] = c->k_heads ? BENCH_SPEC("k_nope", c->dtype, BENCH_FILL_RANDOM, t, c->k_heads, n)
                        : BENCH_SPEC("k_nope", c->dtype, BENCH_FILL_RANDOM, t, n);
  }
  bench_tensor_spec cache = BENCH_SPEC("cos_sin_cache", IGNIS_F32, BENCH_FILL_COS_SIN, max_position(c), r);
  cache.shared = 1;
  cache.bytes_moved = t * r * 4;
  s[k++] = cache;
  s[k++] = BENCH_SPEC("pos_ids", IGNIS_I64, BENCH_FILL_POSITIONS, t);
  return k;
}

/* The outputs shaped as the sources [0, count), in fp8. */
static int describe_outputs(const bench_case *c, bench_tensor_spec *s, int from, int count, int k) {
  static const char *const names[4] = {"q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"};
  for (int i = 0; i < count; ++i) {
    bench_tensor_spec o = s[from + i];
    o.name = names[i];
    o.dtype = IGNIS_FP8_E4M3;
    o.bytes_moved /= (int64_t)ignis_dtype_size(c->dtype);
    s[k++] = bench_output(o);
  }
  return k;
}

/* Sources first, then the outputs: q_rope_out, k_rope_out (and q_nope_out, k_nope_out). */
static int describe_plain(const bench_case *c, bench_tensor_spec *s) {
  const int parts = c->hidden > 0 ? 4 : 2;
  int k = describe_sources(c, s);
  /* the outputs follow the parts' order: q_rope, k_rope, q_nope, k_nope */
  return describe_outputs(c, s, 0, parts, k);
}

static ignis_status call_plain(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  if (c->hidden > 0)
    return ignis_rope_quantize_fp8(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], 1, 1.0f, 1.0f, &t[6], &t[7],
                                   &t[8], &t[9], stream);
  return ignis_rope_quantize_fp8(&t[0], &t[1], NULL, NULL, &t[2], &t[3], 1, 1.0f, 1.0f, &t[4], &t[5], NULL,
                                 NULL, stream);
}

/* The page table of an append case after the sources: batch_indices, positions, kv_indices,
 * kv_indptr. */
static int describe_page_table(const bench_case *c, bench_tensor_spec *s, int k) {
  s[k++] = BENCH_SPEC("batch_indices", IGNIS_I32, BENCH_FILL_APPEND_BATCH, c->tokens);
  s[k++] = BENCH_SPEC("positions", IGNIS_I32, BENCH_FILL_APPEND_POSITION, c->tokens);
  s[k++] = BENCH_SPEC("kv_indices", IGNIS_I32, BENCH_FILL_PAGE_INDICES, bench_num_pages(c));
  s[k++] = BENCH_SPEC("kv_indptr", IGNIS_I32, BENCH_FILL_PAGE_INDPTR, c->batch + 1);
  return k;
}

static bench_tensor_spec cache_spec(const char *name, bench_tensor_spec s, int64_t bytes) {
  s.name = name;
  s = bench_inout(s);
  s.write_only = 1;
  s.bytes_moved = bytes;
  return s;
}

/* MLA: q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, batch_indices, positions,
 * kv_indices, kv_indptr, ckv_cache, kpe_cache, q_rope_out, q_nope_out. */
static int describe_append_mla(const bench_case *c, bench_tensor_spec *s) {
  int k = describe_page_table(c, s, describe_sources(c, s));
  const int64_t pages = bench_num_pages(c), t = c->tokens;
  s[k++] = cache_spec("ckv_cache",
                      BENCH_SPEC("", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, pages, c->page_size, c->hidden),
                      t * c->hidden);
  s[k++] = cache_spec("kpe_cache",
                      BENCH_SPEC("", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, pages, c->page_size, c->head_dim),
                      t * c->head_dim);
  k = describe_outputs(c, s, 0, 1, k);
  s[k] = s[2];
  s[k].name = "q_nope_out";
  s[k].dtype = IGNIS_FP8_E4M3;
  s[k].bytes_moved /= (int64_t)ignis_dtype_size(c->dtype);
  s[k] = bench_output(s[k]);
  return k + 1;
}

static ignis_status call_append_mla(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_rope_quantize_fp8_append_paged_mla_kv_cache(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6],
                                                           &t[7], &t[10], &t[11], &t[8], &t[9], 1, 1.0f, 1.0f,
                                                           &t[12], &t[13], stream);
}

/* GQA (no nope parts): q_rope, k_rope, cos_sin_cache, pos_ids, batch_indices, positions,
 * kv_indices, kv_indptr, v, k_cache, v_cache, q_rope_out. */
static int describe_append_gqa(const bench_case *c, bench_tensor_spec *s) {
  int k = describe_page_table(c, s, describe_sources(c, s));
  const int64_t pages = bench_num_pages(c), t = c->tokens, d = c->head_dim + c->hidden;
  s[k++] = BENCH_SPEC("v", c->dtype, BENCH_FILL_RANDOM, t, c->k_heads, d);
  bench_tensor_spec kv =
      BENCH_SPEC("", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, pages, c->page_size, c->k_heads, d);
  s[k++] = cache_spec("k_cache", kv, t * c->k_heads * d);
  s[k++] = cache_spec("v_cache", kv, t * c->k_heads * d);
  return describe_outputs(c, s, 0, 1, k);
}

static ignis_status call_append_gqa(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.k_cache = t[9];
  cache.v_cache = t[10];
  cache.indices = t[6];
  cache.indptr = t[7];
  return ignis_rope_quantize_fp8_append_paged_kv_cache(&t[0], &t[1], NULL, NULL, &t[8], &t[2], &t[3], &t[4],
                                                       &t[5], &cache, 1, 1.0f, 1.0f, &t[11], NULL, stream);
}

/* "4096tok 128h r64 n512 mla", "B4 L1k 32/8h r128 p16" */
static void shape_rope_quant(const bench_case *c, char *text, size_t size) {
  char heads[32], tokens[48];
  if (c->k_heads)
    snprintf(heads, sizeof heads, "%lld/%lldh", (long long)c->q_heads, (long long)c->k_heads);
  else
    snprintf(heads, sizeof heads, "%lldh", (long long)c->q_heads);
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE) {
    char kv_len[24];
    bench_format_count(c->kv_len, kv_len, sizeof kv_len);
    snprintf(tokens, sizeof tokens, "B%lld L%s", (long long)c->batch, kv_len);
  } else {
    snprintf(tokens, sizeof tokens, "%lldtok", (long long)c->tokens);
  }
  char page[24] = "";
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE)
    snprintf(page, sizeof page, " p%lld", (long long)c->page_size);
  snprintf(text, size, "%s %s r%lld n%lld%s%s", tokens, heads, (long long)c->head_dim, (long long)c->hidden,
           page, c->k_heads ? "" : " mla");
}

/* Appends: every request appends all of its kv_len tokens. */
static void complete_rope_quant(bench_case *c) {
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE)
    c->tokens = c->batch * c->kv_len;
}

#define RQ_DIMS                                                                                              \
  (BENCH_DIM_TOKENS | BENCH_DIM_Q_HEADS | BENCH_DIM_K_HEADS | BENCH_DIM_HEAD_DIM | BENCH_DIM_HIDDEN)
/* The MLA forms have no k heads; the GQA append no nope part (its call passes none). */
#define RQ_MLA_DIMS (BENCH_DIM_TOKENS | BENCH_DIM_Q_HEADS | BENCH_DIM_HEAD_DIM | BENCH_DIM_HIDDEN)
#define RQ_PAGED_DIMS                                                                                        \
  (BENCH_DIM_BATCH | BENCH_DIM_KV_LEN | BENCH_DIM_PAGE_SIZE | BENCH_DIM_Q_HEADS | BENCH_DIM_HEAD_DIM)
/* DeepSeek-V3 MLA: 128 heads, rope 64, nope 512, k 2-D; Llama GQA: 32/8 heads, d128 rotary. */
#define RQ_MLA(group, t)                                                                                     \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .q_heads = 128, .head_dim = 64, .hidden = 512)
#define RQ_GQA(group, t)                                                                                     \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .q_heads = 32, .k_heads = 8, .head_dim = 128)
#define RQ_MLA_PAGED(group, b, l, p)                                                                         \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .kv_len = (l), .page_size = (p), .q_heads = 128,     \
              .head_dim = 64, .hidden = 512)
#define RQ_GQA_PAGED(group, b, l, p)                                                                         \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .kv_len = (l), .page_size = (p), .q_heads = 32,      \
              .k_heads = 8, .head_dim = 128)
#define RQ_ENTRY .family = &bench_family_rope_quant, .dtypes = BENCH_DTYPES_HALF

static const bench_routine rope_quant_routines[] = {
    {RQ_ENTRY, .name = "mla_rope_quantize_fp8",
     .summary = "RoPE + fp8 e4m3 of MLA q/k (k 2-D: one shared head), cos/sin cache, i64 positions",
     .functions = "ignis_rope_quantize_fp8", .dims = RQ_MLA_DIMS,
     .bytes_rule =
         "q, k rope+nope read (T*(Hq+1)*(R+N)*es) + written in fp8 (T*(Hq+1)*(R+N)) + pos_ids (T*8) "
         "+ cache rows (T*R*4)",
     .tiny = BENCH_DIMS(.tokens = 3, .q_heads = 2, .head_dim = 64, .hidden = 32),
     .gpu_suite = BENCH_SUITE(RQ_MLA(1, 4096), RQ_MLA(3, 128), RQ_MLA(3, 1)),
     .host_suite = BENCH_SUITE(RQ_MLA(1, 16)), .describe = describe_plain, .call = call_plain},
    {RQ_ENTRY, .name = "rope_quantize_fp8",
     .summary = "RoPE + fp8 e4m3 of GQA q/k (no nope part), cos/sin cache, i64 positions",
     .functions = "ignis_rope_quantize_fp8", .dims = RQ_DIMS,
     .bytes_rule = "q, k read (T*(Hq+Hk)*R*es) + written in fp8 (T*(Hq+Hk)*R) + pos_ids (T*8) + cache rows "
                   "(T*R*4)",
     .tiny = BENCH_DIMS(.tokens = 3, .q_heads = 2, .k_heads = 1, .head_dim = 64),
     .gpu_suite = BENCH_SUITE(RQ_GQA(1, 4096), RQ_GQA(2, 16384), RQ_GQA(3, 128), RQ_GQA(3, 1)),
     .host_suite = BENCH_SUITE(RQ_GQA(1, 256)), .describe = describe_plain, .call = call_plain},
    {RQ_ENTRY, .name = "mla_rope_quantize_fp8_append",
     .summary = "RoPE + fp8 of MLA q/k, k appended to the ckv/kpe page cache",
     .functions = "ignis_rope_quantize_fp8_append_paged_mla_kv_cache",
     .dims = RQ_PAGED_DIMS | BENCH_DIM_HIDDEN,
     .bytes_rule = "as mla_rope_quantize_fp8, k written into the caches (T*(R+N)) + batch_indices, positions "
                   "(T*4 each) + page table",
     .tiny = BENCH_DIMS(.batch = 2, .kv_len = 5, .page_size = 4, .q_heads = 2, .head_dim = 64, .hidden = 32),
     .gpu_suite = BENCH_SUITE(RQ_MLA_PAGED(1, 4, 1024, 64), RQ_MLA_PAGED(3, 64, 1, 64)),
     .host_suite = BENCH_SUITE(RQ_MLA_PAGED(1, 2, 8, 64)), .describe = describe_append_mla,
     .call = call_append_mla},
    {RQ_ENTRY, .name = "rope_quantize_fp8_append",
     .summary = "RoPE + fp8 of GQA q/k, k and v appended to an fp8 paged KV cache (NHD)",
     .functions = "ignis_rope_quantize_fp8_append_paged_kv_cache", .dims = RQ_PAGED_DIMS | BENCH_DIM_K_HEADS,
     .bytes_rule =
         "q, k, v read (T*(Hq+2Hk)*R*es) + q written in fp8 and k, v into the cache (T*(Hq+2Hk)*R) + "
         "batch_indices, positions (T*4 each) + page table",
     .tiny = BENCH_DIMS(.batch = 2, .kv_len = 5, .page_size = 4, .q_heads = 2, .k_heads = 1, .head_dim = 64),
     .gpu_suite = BENCH_SUITE(RQ_GQA_PAGED(1, 4, 1024, 16), RQ_GQA_PAGED(3, 64, 1, 16)),
     .host_suite = BENCH_SUITE(RQ_GQA_PAGED(1, 2, 64, 16)), .describe = describe_append_gqa,
     .call = call_append_gqa},
};

const bench_family bench_family_rope_quant = {"rope_quant", shape_rope_quant, complete_rope_quant,
                                              BENCH_TABLE(rope_quant_routines)};
