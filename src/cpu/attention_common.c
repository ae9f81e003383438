/* The out-of-line half of the CPU attention helpers (see attention_common.h): scratch ownership,
 * the per-call tables, the ALiBi slope, and finishing, merging and storing a row. */
#include "cpu/attention_common.h"

#include <stdlib.h>

ignis_cpu_attention_scratch *ignis_cpu_attention_scratch_new(int64_t partial_rows, int64_t head_dim_vo) {
  ignis_cpu_attention_scratch *scratch = calloc(1, sizeof *scratch);
  if (!scratch || partial_rows <= 0)
    return scratch;
  scratch->partial_out = malloc(sizeof(float) * (size_t)(partial_rows * head_dim_vo));
  scratch->partial_lse = malloc(sizeof(float) * (size_t)partial_rows);
  if (!scratch->partial_out || !scratch->partial_lse) {
    ignis_cpu_attention_scratch_free(scratch);
    return NULL;
  }
  return scratch;
}

void ignis_cpu_attention_scratch_free(ignis_cpu_attention_scratch *scratch) {
  if (!scratch)
    return;
  free(scratch->partial_out);
  free(scratch->partial_lse);
  free(scratch);
}

void ignis_cpu_attention_fill_tables(ignis_cpu_attention_scratch *scratch, ignis_dtype kv_dtype, int rope,
                                     int64_t head_dim_qk, float rope_rcp_scale, float rope_log2_theta) {
  if (ignis_cpu_is_fp8(kv_dtype))
    for (int c = 0; c < 256; ++c)
      scratch->fp8_table[c] =
          kv_dtype == IGNIS_FP8_E4M3 ? ignis_fp8_e4m3_to_f32((uint8_t)c) : ignis_fp8_e5m2_to_f32((uint8_t)c);
  if (rope)
    for (int64_t t = 0; t < head_dim_qk / 2; ++t)
      scratch->rope_freq[t] =
          (double)rope_rcp_scale * exp2(-(double)rope_log2_theta * (double)(2 * t) / (double)head_dim_qk);
}

double ignis_cpu_alibi_slope(int64_t h, int64_t num_heads) {
  int64_t n = 1;
  while (n * 2 <= num_heads)
    n *= 2;
  return h < n ? exp2(-8.0 * (double)(h + 1) / (double)n)
               : exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

double ignis_cpu_attention_finish(double m, double l, const double *acc, double sink2, int64_t D,
                                  float *out_row) {
  const int seen = l > 0.0 || isnan(l); /* NaN propagates */
  double top = m > sink2 ? m : sink2;
  double kept = seen ? exp2(m - top) : 0.0, total = l * kept + (sink2 > -INFINITY ? exp2(sink2 - top) : 0.0);
  for (int64_t d = 0; d < D; ++d)
    out_row[d] = seen ? (float)(acc[d] * kept / total) : 0.0f;
  return total > 0.0 || isnan(total) ? top + log2(total) : -INFINITY;
}

double ignis_cpu_attention_merge(const ignis_cpu_attention_scratch *scratch, int64_t first_row,
                                 int64_t row_stride, int64_t count, double sink2, int64_t D, float *out_row) {
  double m = -INFINITY, l = 0.0, acc[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM] = {0}, v[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM];
  for (int64_t c = 0; c < count; ++c) {
    const int64_t row = first_row + c * row_stride;
    const double lse2 = scratch->partial_lse[row];
    if (lse2 == -INFINITY)
      continue;
    for (int64_t d = 0; d < D; ++d)
      v[d] = scratch->partial_out[row * D + d];
    ignis_cpu_softmax_push(lse2, v, D, &m, &l, acc);
  }
  return ignis_cpu_attention_finish(m, l, acc, sink2, D, out_row);
}

void ignis_cpu_attention_store_partial(const ignis_cpu_attention_scratch *scratch, int64_t row, int64_t D,
                                       const float *out_row, double lse2) {
  for (int64_t d = 0; d < D; ++d)
    scratch->partial_out[row * D + d] = out_row[d];
  scratch->partial_lse[row] = (float)lse2;
}

void ignis_cpu_attention_store_out(void *out, ignis_dtype dtype, int64_t out_offset, int64_t D,
                                   const float *out_row, float *lse, int64_t lse_offset, float lse_scale,
                                   double lse2) {
  ignis_cpu_store_row(ignis_cpu_at_mut(out, dtype, out_offset), dtype, D, out_row);
  if (lse)
    lse[lse_offset] = (float)(lse2 * lse_scale);
}
