/* The row math the CPU norm ops (cpu/norm.c) and the fused norm + fp8 quantization (cpu/quant.c)
 * share, so both normalize a row identically: the statistics (sums in double; LayerNorm's mean
 * first, then the centered mean square; rstd = 1 / sqrtf(mean square + eps) in f32) and the
 * affine step y = (x - mean) * rstd * (w + weight_offset) [+ b]. */
#ifndef IGNIS_CPU_NORM_COMMON_H
#define IGNIS_CPU_NORM_COMMON_H

#include <math.h>
#include <stdint.h>

#include "core/params.h"

static inline void ignis_cpu_norm_stats(ignis_norm_kind kind, const float *x, int64_t n, float eps,
                                        float *mean, float *rstd) {
  float m = 0.0f;
  if (kind == IGNIS_NORM_LAYER) {
    double sum = 0.0;
    for (int64_t h = 0; h < n; ++h)
      sum += x[h];
    m = (float)(sum / (double)n);
  }
  double sum_sq = 0.0;
  for (int64_t h = 0; h < n; ++h) {
    const float centered = x[h] - m;
    sum_sq += (double)centered * centered;
  }
  *mean = m;
  *rstd = 1.0f / sqrtf((float)(sum_sq / (double)n) + eps);
}

/* x[h] = (x[h] - mean) * rstd * (w[h] + weight_offset), plus b[h] when b is not NULL; in place. */
static inline void ignis_cpu_norm_apply(float *x, const float *w, const float *b, int64_t n, float mean,
                                        float rstd, float weight_offset) {
  for (int64_t h = 0; h < n; ++h) {
    const float y = (x[h] - mean) * rstd * (w[h] + weight_offset);
    x[h] = b ? y + b[h] : y;
  }
}

#endif
