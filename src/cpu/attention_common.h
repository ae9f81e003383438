/* What the CPU attention backends (decode.c, prefill.c) share: the scratch each call owns (partial
 * rows of split items, the fp8 decode table, the RoPE frequencies), loading a cache row as doubles
 * times its scale, the Llama RoPE rotation, the ALiBi slope and sink score of a head, the base-2
 * score of one key and the online-softmax step it feeds, and finishing a row: joining the sink,
 * normalising, and writing out / lse or a partial row, or merging a request's partial rows.
 *
 * All math is in double, scores in base 2 (s = x * log2(e)); a row's state is its running maximum
 * m, sum l and weighted value sum acc. The per-key helpers are inline; the rest lives in
 * attention_common.c. */
#ifndef IGNIS_CPU_ATTENTION_COMMON_H
#define IGNIS_CPU_ATTENTION_COMMON_H

#include <math.h>

#include "core/params.h"
#include "cpu/cpu_common.h"

/* Query rows attended together, so each key and value row is loaded once per block. */
#define IGNIS_CPU_ATTENTION_ROW_BLOCK 8
#define IGNIS_CPU_ATTENTION_MAX_HEAD_DIM 512
#define IGNIS_CPU_LOG2E 1.4426950408889634

typedef struct ignis_cpu_attention_scratch {
  float *partial_out; /* [partial rows, head_dim_vo]; the caller picks the row numbering */
  float *partial_lse; /* [partial rows], base 2 */
  float fp8_table[256];
  double rope_freq[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM / 2]; /* rope_rcp_scale * theta^(-2t / head_dim) */
} ignis_cpu_attention_scratch;

/* Zeroed scratch with room for partial_rows rows of head_dim_vo; NULL when out of memory. */
ignis_cpu_attention_scratch *ignis_cpu_attention_scratch_new(int64_t partial_rows, int64_t head_dim_vo);
void ignis_cpu_attention_scratch_free(ignis_cpu_attention_scratch *scratch);

/* The fp8 table when kv_dtype is fp8, the RoPE frequencies (over head_dim_qk) when rope is set. */
void ignis_cpu_attention_fill_tables(ignis_cpu_attention_scratch *scratch, ignis_dtype kv_dtype, int rope,
                                     int64_t head_dim_qk, float rope_rcp_scale, float rope_log2_theta);

static inline int ignis_cpu_is_fp8(ignis_dtype dtype) {
  return dtype == IGNIS_FP8_E4M3 || dtype == IGNIS_FP8_E5M2;
}

/* Element offsets of the key and value in slot `slot` of page `page` (0 for contiguous caches). */
static inline void ignis_cpu_attention_kv_offsets(const ignis_paged_kv_params *cache, int64_t page,
                                                  int64_t slot, int64_t kv_head, int64_t *k_offset,
                                                  int64_t *v_offset) {
  *k_offset = page * cache->k_stride_page + slot * cache->k_stride_token + kv_head * cache->k_stride_head;
  *v_offset = page * cache->v_stride_page + slot * cache->v_stride_token + kv_head * cache->v_stride_head;
}

/* RoPE (Llama, non-interleaved halves): element t pairs with t + head_dim/2, angle pos * freq[t]. */
static inline void ignis_cpu_attention_rope(const ignis_cpu_attention_scratch *scratch, int64_t head_dim,
                                            int64_t pos, double *x) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < half; ++t) {
    double angle = (double)pos * scratch->rope_freq[t], c = cos(angle), s = sin(angle);
    double a = x[t], b = x[t + half];
    x[t] = a * c - b * s;
    x[t + half] = b * c + a * s;
  }
}

/* n elements of a cache (f16, bf16 or fp8) from element offset, times scale, as doubles. */
static inline void ignis_cpu_attention_load_kv(const ignis_cpu_attention_scratch *scratch, ignis_dtype dtype,
                                               const void *base, int64_t offset, int64_t n, float scale,
                                               double *out) {
  if (ignis_cpu_is_fp8(dtype)) {
    const uint8_t *row = (const uint8_t *)base + offset;
    for (int64_t d = 0; d < n; ++d)
      out[d] = (double)scale * scratch->fp8_table[row[d]];
    return;
  }
  float row[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM];
  ignis_cpu_load_row(ignis_cpu_at(base, dtype, offset), dtype, n, row);
  for (int64_t d = 0; d < n; ++d)
    out[d] = (double)scale * row[d];
}

/* A key row as ignis_cpu_attention_load_kv loads it, then rotated at rope_pos (RoPE) unless
 * rope_pos < 0. */
static inline void ignis_cpu_attention_load_key(const ignis_cpu_attention_scratch *scratch, ignis_dtype dtype,
                                                const void *base, int64_t offset, int64_t n, float scale,
                                                int64_t rope_pos, double *out) {
  ignis_cpu_attention_load_kv(scratch, dtype, base, offset, n, scale, out);
  if (rope_pos >= 0)
    ignis_cpu_attention_rope(scratch, n, rope_pos, out);
}

/* n elements of a query (dtype f32, f16 or bf16) from element offset, as doubles, rotated at
 * rope_pos (RoPE) unless rope_pos < 0. */
static inline void ignis_cpu_attention_load_query(const ignis_cpu_attention_scratch *scratch,
                                                  const void *base, ignis_dtype dtype, int64_t offset,
                                                  int64_t n, int64_t rope_pos, double *out) {
  float row[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM];
  ignis_cpu_load_row(ignis_cpu_at(base, dtype, offset), dtype, n, row);
  for (int64_t d = 0; d < n; ++d)
    out[d] = row[d];
  if (rope_pos >= 0)
    ignis_cpu_attention_rope(scratch, n, rope_pos, out);
}

/* ALiBi slope of head h of num_heads (the closest power of two, then the interleaved rest). */
double ignis_cpu_alibi_slope(int64_t h, int64_t num_heads);

/* Base-2 sink score of head h, or -inf without sinks (NULL). */
static inline double ignis_cpu_sink2(const float *sinks, int64_t h) {
  return sinks ? (double)sinks[h] * IGNIS_CPU_LOG2E : -INFINITY;
}

/* Base-2 score of key k for query q (head_dim D) at key - query position distance:
 * x = sm_scale * <q, k> + slope * distance, x = cap * tanh(x / cap) when cap > 0. */
static inline double ignis_cpu_attention_score(const double *q, const double *k, int64_t D, double sm_scale,
                                               double slope, int64_t distance, double cap) {
  double dot = 0.0;
  for (int64_t d = 0; d < D; ++d)
    dot += q[d] * k[d];
  double x = sm_scale * dot + slope * (double)distance;
  if (cap > 0.0)
    x = cap * tanh(x / cap);
  return x * IGNIS_CPU_LOG2E;
}

/* Online softmax: fold a key of base-2 score s (> -inf) and value v (head_dim D) into (m, l, acc).
 * It is also the CPU's one merge of attention states (a state's LSE as s, its values as v):
 * ignis_cpu_attention_merge and the merge_state ops (merge_state.c) fold with it and finish with
 * ignis_cpu_attention_finish. */
static inline void ignis_cpu_softmax_push(double s, const double *v, int64_t D, double *m, double *l,
                                          double *acc) {
  if (s > *m) {
    double rescale = exp2(*m - s);
    *l *= rescale;
    for (int64_t d = 0; d < D; ++d)
      acc[d] *= rescale;
    *m = s;
  }
  double weight = exp2(s - *m);
  *l += weight;
  for (int64_t d = 0; d < D; ++d)
    acc[d] += weight * v[d];
}

/* Finish a state (m, l, acc) with an extra empty-valued state of base-2 score sink2 (-inf: none):
 * out_row = acc / total (0 when l is 0); returns lse2 (-inf when nothing joined). NaN propagates. */
double ignis_cpu_attention_finish(double m, double l, const double *acc, double sink2, int64_t D,
                                  float *out_row);

/* Merge partial rows first_row + c * row_stride, c in [0, count) (rows of LSE -inf skipped), then
 * join sink2 and finish as above; returns lse2. */
double ignis_cpu_attention_merge(const ignis_cpu_attention_scratch *scratch, int64_t first_row,
                                 int64_t row_stride, int64_t count, double sink2, int64_t D, float *out_row);

/* Keep a finished row as partial row `row`. */
void ignis_cpu_attention_store_partial(const ignis_cpu_attention_scratch *scratch, int64_t row, int64_t D,
                                       const float *out_row, double lse2);

/* Write a finished row to out (dtype, element offset out_offset) and, when lse is not NULL,
 * lse[lse_offset] = lse2 * lse_scale. */
void ignis_cpu_attention_store_out(void *out, ignis_dtype dtype, int64_t out_offset, int64_t D,
                                   const float *out_row, float *lse, int64_t lse_offset, float lse_scale,
                                   double lse2);

#endif
