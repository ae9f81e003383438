/* CPU backend of the GEMM ops (include/ignis/gemm.h): every form, every layout, f32 accumulation.
 *
 * The output is cut into tiles of ROW_TILE rows by COL_TILE columns, run in parallel. A tile decodes
 * its COL_TILE columns of b into an f32 panel (column j's K values contiguous), then for each of its
 * rows decodes the row of a to f32 and forms the dot products. fp8 decodes exactly (every e4m3 and
 * e5m2 value is an f32). The scales are applied as the GPU applies them: per-tensor fp8 scales
 * multiply the finished f32 sum; block-scaled fp8 forms each 128-wide K block's partial sum in f32
 * and adds it times a_scale[m, kb] * b_scale[n / 128, kb] (b_scale[n, kb] for per-row weight scales). Bias is
 * added to the f32 result, and out is rounded once. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

enum { ROW_TILE = 32, COL_TILE = 64 };

static float load_element(const void *base, ignis_dtype dtype, int64_t i) {
  switch (dtype) {
  case IGNIS_FP8_E4M3:
    return ignis_fp8_e4m3_to_f32(((const uint8_t *)base)[i]);
  case IGNIS_FP8_E5M2:
    return ignis_fp8_e5m2_to_f32(((const uint8_t *)base)[i]);
  default:
    return ignis_cpu_load(base, dtype, i);
  }
}

/* A block scale: f32, or a UE8M0 exponent e meaning 2^(e - 127) (255: NaN). */
static float load_scale(const void *base, ignis_dtype dtype, int64_t i) {
  if (dtype == IGNIS_F32)
    return ((const float *)base)[i];
  uint8_t e = ((const uint8_t *)base)[i];
  return e == 255 ? NAN : ldexpf(1.0f, (int)e - 127);
}

/* Eight independent partial sums: the loop vectorizes without reassociating anything. */
static float dot(const float *x, const float *y, int64_t n) {
  float lane[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      lane[l] += x[i + l] * y[i + l];
  float sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
  for (; i < n; ++i)
    sum += x[i] * y[i];
  return sum;
}

/* One output tile: batch bt, rows m0 .. m0 + rows, columns n0 .. n0 + cols. panel holds
 * COL_TILE * K floats, row K floats, acc COL_TILE floats. */
static void gemm_tile(const ignis_gemm_params *p, int64_t bt, int64_t m0, int64_t rows, int64_t n0,
                      int64_t cols, float *panel, float *row, float *acc) {
  const int64_t k = p->k;
  const int64_t b_base = bt * p->b_batch_stride;
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t kk = 0; kk < k; ++kk)
      panel[j * k + kk] =
          load_element(p->b, p->b_dtype, b_base + kk * p->b_stride_k + (n0 + j) * p->b_stride_n);
  float tensor_scale = 1.0f;
  if (p->kind == IGNIS_GEMM_FP8_TENSOR)
    tensor_scale = ((const float *)p->a_scale)[0] * ((const float *)p->b_scale)[0];
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = m0 + i;
    const int64_t a_off = bt * p->a_batch_stride + m * p->a_row_stride;
    for (int64_t kk = 0; kk < k; ++kk)
      row[kk] = load_element(p->a, p->a_dtype, a_off + kk);
    if (p->kind == IGNIS_GEMM_FP8_BLOCK) {
      for (int64_t j = 0; j < cols; ++j)
        acc[j] = 0.0f;
      for (int64_t k0 = 0, kb = 0; k0 < k; k0 += IGNIS_GEMM_SCALE_BLOCK, ++kb) {
        int64_t len = k - k0 < IGNIS_GEMM_SCALE_BLOCK ? k - k0 : IGNIS_GEMM_SCALE_BLOCK;
        float sa = load_scale(p->a_scale, p->scale_dtype, m * p->a_scale_stride_m + kb * p->a_scale_stride_k);
        for (int64_t j = 0; j < cols; ++j) {
          int64_t nb = (n0 + j) / p->b_scale_block_n;
          float sb =
              load_scale(p->b_scale, p->scale_dtype, nb * p->b_scale_stride_n + kb * p->b_scale_stride_k);
          acc[j] += dot(row + k0, panel + j * k + k0, len) * (sa * sb);
        }
      }
    } else {
      for (int64_t j = 0; j < cols; ++j)
        acc[j] = dot(row, panel + j * k, k) * tensor_scale;
    }
    void *out = ignis_cpu_at_mut(p->out, p->out_dtype, bt * p->out_batch_stride + m * p->out_row_stride + n0);
    for (int64_t j = 0; j < cols; ++j) {
      float v = acc[j];
      if (p->bias)
        v += ignis_cpu_load(p->bias, p->bias_dtype, n0 + j);
      ignis_cpu_store(out, p->out_dtype, j, v);
    }
  }
}

ignis_status ignis_cpu_gemm(const ignis_gemm_params *p, int32_t device, void *stream) {
  const int64_t row_tiles = (p->m + ROW_TILE - 1) / ROW_TILE;
  const int64_t col_tiles = (p->n + COL_TILE - 1) / COL_TILE;
  const int64_t tiles = p->batch * row_tiles * col_tiles;
  const int64_t k = p->k > 0 ? p->k : 1;
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->batch * p->m * p->n * k >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    float *scratch = malloc((size_t)(COL_TILE * k + k + COL_TILE) * sizeof(float));
    if (!scratch) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
      failed = 1;
    }
    /* every thread meets the loop (a worksharing construct), with or without its scratch */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (int64_t t = 0; t < tiles; ++t) {
      if (!scratch)
        continue;
      /* column tiles innermost: consecutive tiles of a thread share rows of a in cache */
      int64_t ct = t % col_tiles, rt = (t / col_tiles) % row_tiles, bt = t / (col_tiles * row_tiles);
      int64_t m0 = rt * ROW_TILE, n0 = ct * COL_TILE;
      int64_t rows = p->m - m0 < ROW_TILE ? p->m - m0 : ROW_TILE;
      int64_t cols = p->n - n0 < COL_TILE ? p->n - n0 : COL_TILE;
      gemm_tile(p, bt, m0, rows, n0, cols, scratch, scratch + COL_TILE * k, scratch + COL_TILE * k + k);
    }
    free(scratch);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu gemm: out of host memory for a tile's panel");
  return IGNIS_OK;
}
