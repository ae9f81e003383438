/* CPU backend of fp8 quantization (include/ignis/quant.h), the plain statement of the math: per row,
 * the prologue's f32 values into a row buffer (the input; RMSNorm / LayerNorm as src/cpu/norm.c
 * computes them, with the fused residual add; silu(a) * b as src/cpu/activation.c), then each value
 * v quantized as fp8(sat(v * (1 / s))) with the scale rules of core/quant_math.h, rounding to
 * nearest even (ignis_cpu_to_fp8, cpu/cpu_common.h). Rows in parallel; the dynamic per-tensor
 * absmax is a max-reduction over the rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/quant_math.h"
#include "cpu/activation_common.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"
#include "cpu/norm_common.h"

static int64_t row_offset(ignis_row_layout layout, int64_t row, int64_t num_rows_inner) {
  return row / num_rows_inner * layout.stride_outer + row % num_rows_inner * layout.stride_inner;
}

/* The prologue of row r into v (scratch: 3 * hidden floats, v first). */
static void row_values(const ignis_quant_params *p, int64_t r, float *scratch) {
  const int64_t n = p->hidden;
  float *v = scratch, *w = scratch + n, *b = scratch + 2 * n;
  const void *in = ignis_cpu_at(p->input, p->dtype, row_offset(p->input_layout, r, p->num_rows_inner));
  if (p->prologue == IGNIS_QUANT_PLAIN) {
    ignis_cpu_load_row(in, p->dtype, n, v);
    return;
  }
  if (p->prologue == IGNIS_QUANT_SILU_MUL) {
    ignis_cpu_load_row(in, p->dtype, n, v);
    ignis_cpu_load_row(ignis_cpu_at(in, p->dtype, n), p->dtype, n, w);
    for (int64_t h = 0; h < n; ++h)
      v[h] = ignis_cpu_activate(IGNIS_ACT_SILU, v[h]) * w[h];
    return;
  }
  ignis_cpu_load_row(in, p->dtype, n, v);
  if (p->residual) {
    void *res = ignis_cpu_at_mut(p->residual, p->dtype, row_offset(p->residual_layout, r, p->num_rows_inner));
    ignis_cpu_load_row(res, p->dtype, n, w);
    for (int64_t h = 0; h < n; ++h)
      v[h] += w[h];
    ignis_cpu_store_row(res, p->dtype, n, v);
  }
  float mean, rstd;
  ignis_cpu_norm_stats(p->norm_kind, v, n, p->eps, &mean, &rstd);
  ignis_cpu_load_row(p->weight, p->weight_dtype, n, w);
  if (p->bias)
    ignis_cpu_load_row(p->bias, p->weight_dtype, n, b);
  ignis_cpu_norm_apply(v, w, p->bias ? b : NULL, n, mean, rstd, 0.0f);
  if (p->normed_out) {
    void *normed =
        ignis_cpu_at_mut(p->normed_out, p->dtype, row_offset(p->normed_layout, r, p->num_rows_inner));
    ignis_cpu_store_row(normed, p->dtype, n, v);
    ignis_cpu_load_row(normed, p->dtype, n, v); /* quantize the rounded values */
  }
}

static void quantize_span(const ignis_quant_params *p, const float *v, int64_t n, float scale, uint8_t *out) {
  const float inv = 1.0f / scale;
  for (int64_t h = 0; h < n; ++h)
    out[h] = ignis_cpu_to_fp8(p->out_dtype, v[h] * inv, p->fp8_max);
}

static void quantize_row(const ignis_quant_params *p, int64_t r, const float *v) {
  uint8_t *out = (uint8_t *)p->out + row_offset(p->out_layout, r, p->num_rows_inner);
  if (p->scale_mode == IGNIS_QUANT_SCALE_STATIC) {
    quantize_span(p, v, p->hidden, *(const float *)p->scale, out);
    return;
  }
  for (int64_t g = 0; g < p->hidden / p->group_size; ++g) {
    const float *group = v + g * p->group_size;
    float absmax = 0.0f;
    for (int64_t h = 0; h < p->group_size; ++h)
      absmax = ignis_quant_absmax_fold(absmax, group[h]);
    const float s = ignis_quant_scale(absmax, p->min_absmax, p->fp8_max, p->ue8m0);
    const int64_t at = r * p->scale_stride_row + g * p->scale_stride_group;
    if (p->scale_dtype == IGNIS_U8)
      ((uint8_t *)p->scale)[at] = ignis_quant_e8m0(s);
    else
      ((float *)p->scale)[at] = s;
    quantize_span(p, group, p->group_size, s, out + g * p->group_size);
  }
}

ignis_status ignis_cpu_quant(const ignis_quant_params *p, int32_t device, void *stream) {
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  const int absmax_pass = p->scale_mode == IGNIS_QUANT_SCALE_ABSMAX;
  int failed = 0;
  float absmax = 0.0f;
#ifdef _OPENMP
#pragma omp parallel if (rows * p->hidden >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS) reduction(max : absmax)
#endif
  {
    float *scratch = malloc((size_t)p->hidden * 3 * sizeof(float));
    if (!scratch) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (int64_t r = 0; r < rows; ++r) {
        row_values(p, r, scratch);
        if (absmax_pass) {
          for (int64_t h = 0; h < p->hidden; ++h)
            absmax = ignis_quant_absmax_fold(absmax, scratch[h]);
        } else {
          quantize_row(p, r, scratch);
        }
      }
    }
    free(scratch);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu quant: out of host memory for a row buffer");
  if (absmax_pass)
    *(float *)p->scale = fmaxf(*(float *)p->scale, absmax);
  return IGNIS_OK;
}

ignis_status ignis_cpu_quant_absmax_begin(float *scale, int32_t device, void *stream) {
  *scale = 0.0f;
  return IGNIS_OK;
}

ignis_status ignis_cpu_quant_absmax_finish(float *scale, float min_absmax, float fp8_max, int32_t device,
                                           void *stream) {
  *scale = ignis_quant_scale(*scale, min_absmax, fp8_max, 0);
  return IGNIS_OK;
}
