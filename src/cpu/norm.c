/* CPU backend of the norm ops: one pass per row in f32, rows in parallel. For the fused forms the
 * row sum x + residual is kept in f32 for the norm and stored rounded into residual, as the CUDA
 * kernel does. LayerNorm uses the two-pass mean/variance for accuracy. */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu/cpu_common.h"
#include "cpu/norm_common.h"

/* scratch holds 3 * hidden floats: the row, the weight, the bias. */
static void norm_row(const ignis_norm_params *p, int64_t outer, int64_t inner, float *scratch) {
  int64_t n = p->hidden;
  float *x = scratch, *w = scratch + n, *b = scratch + 2 * n;
  int64_t in_off = outer * p->input_layout.stride_outer + inner * p->input_layout.stride_inner;
  int64_t out_off = outer * p->out_layout.stride_outer + inner * p->out_layout.stride_inner;
  ignis_cpu_load_row(ignis_cpu_at(p->input, p->dtype, in_off), p->dtype, n, x);
  if (p->residual) {
    int64_t res_off = outer * p->residual_layout.stride_outer + inner * p->residual_layout.stride_inner;
    void *res = ignis_cpu_at_mut(p->residual, p->dtype, res_off);
    ignis_cpu_load_row(res, p->dtype, n, w); /* w is free until the weight is loaded */
    for (int64_t h = 0; h < n; ++h)
      x[h] += w[h];
    ignis_cpu_store_row(res, p->dtype, n, x);
  }
  float mean, rstd;
  ignis_cpu_norm_stats(p->kind, x, n, p->eps, &mean, &rstd);
  ignis_cpu_load_row(p->weight, p->weight_dtype, n, w);
  if (p->bias)
    ignis_cpu_load_row(p->bias, p->weight_dtype, n, b);
  ignis_cpu_norm_apply(x, w, p->bias ? b : NULL, n, mean, rstd, p->weight_offset);
  ignis_cpu_store_row(ignis_cpu_at_mut(p->out, p->dtype, out_off), p->dtype, n, x);
}

ignis_status ignis_cpu_norm(const ignis_norm_params *p, int32_t device, void *stream) {
  int64_t rows = p->num_rows_outer * p->num_rows_inner;
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (rows * p->hidden >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    float *scratch = malloc((size_t)p->hidden * 3 * sizeof(float));
    if (!scratch) {
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (int64_t r = 0; r < rows; ++r)
        norm_row(p, r / p->num_rows_inner, r % p->num_rows_inner, scratch);
    }
    free(scratch);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu norm: out of host memory for a row buffer");
  return IGNIS_OK;
}
