/* The flat params of the grouped GEMM ops (include/ignis/gemm.h: ignis_grouped_mm,
 * ignis_grouped_mm_fp8_blockscale), filled by src/core/op_grouped_gemm.c and read by the backends'
 * grouped_gemm entry point.
 *
 * G groups share one activation matrix a [M, K] and one output out [M, N]; group g owns the rows
 * m_indptr[g] .. m_indptr[g + 1] of both and multiplies them by the weight b[w] (w = g, or
 * weight_indices[g]). Element addresses, in elements of each tensor's dtype:
 *   a[m, k]       = a   + m * a_row_stride + k
 *   b[w, n, k]    = b   + w * b_group_stride + n * b_stride_n + k * b_stride_k
 *                   (b_stride_k == 1: each weight stored [N, K]; else b_stride_n == 1: [K, N])
 *   out[m, n]     = out + m * out_row_stride + n
 *   m_indptr[g], weight_indices[g]  contiguous, index_dtype / weight_index_dtype (i32 or i64)
 * Block-scaled fp8 (fp8 != 0): a_scale[m, kb] = a_scale + m * a_scale_stride_m + kb * a_scale_stride_k
 * and b_scale[g, nb, kb] = b_scale + g * b_scale_stride_g + nb * b_scale_stride_n + kb * b_scale_stride_k
 * (kb = k / 128, nb = n / 128), f32 or u8 UE8M0 (scale_dtype).
 *
 * The host knows G, N, K and M (a's row count, an upper bound on the rows the groups cover); it
 * never reads m_indptr or weight_indices on a device backend. */
#ifndef IGNIS_CORE_GROUPED_GEMM_PARAMS_H
#define IGNIS_CORE_GROUPED_GEMM_PARAMS_H

#include <stdint.h>
#include <string.h>

#include "core/gemm_params.h"
#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_grouped_gemm_params {
  int fp8; /* block-scaled fp8 (1x128 for a, 128x128 per group for b) */
  int64_t groups, num_weights, m, n, k;
  ignis_dtype a_dtype, out_dtype, index_dtype, weight_index_dtype, scale_dtype;
  const void *a;
  int64_t a_row_stride;
  const void *b;
  int64_t b_group_stride, b_stride_n, b_stride_k;
  void *out;
  int64_t out_row_stride;
  const void *m_indptr;
  const void *weight_indices; /* NULL: group g uses weight g */
  const void *a_scale, *b_scale;
  int64_t a_scale_stride_m, a_scale_stride_k;
  int64_t b_scale_stride_g, b_scale_stride_n, b_scale_stride_k;
} ignis_grouped_gemm_params;

/* A dense block-scaled fp8 product (IGNIS_GEMM_FP8_BLOCK, batch 1, 128x128 weight blocks) as one
 * group of all M rows, with no m_indptr: the form in which the grouped kernels that accept a NULL
 * m_indptr (grouped_gemm_sm90.cu, grouped_skinny.cuh) run it. */
static inline ignis_grouped_gemm_params ignis_grouped_params_of_dense(const ignis_gemm_params *p) {
  ignis_grouped_gemm_params g;
  memset(&g, 0, sizeof g);
  g.fp8 = 1;
  g.groups = 1;
  g.num_weights = 1;
  g.m = p->m;
  g.n = p->n;
  g.k = p->k;
  g.a_dtype = p->a_dtype;
  g.out_dtype = p->out_dtype;
  g.index_dtype = IGNIS_I32;
  g.weight_index_dtype = IGNIS_I32;
  g.scale_dtype = p->scale_dtype;
  g.a = p->a;
  g.a_row_stride = p->m > 1 ? p->a_row_stride : p->k;
  g.b = p->b;
  g.b_stride_k = p->b_stride_k;
  g.b_stride_n = p->b_stride_n;
  g.b_group_stride = p->n * p->b_stride_n;
  g.out = p->out;
  g.out_row_stride = p->out_row_stride;
  g.a_scale = p->a_scale;
  g.b_scale = p->b_scale;
  g.a_scale_stride_m = p->a_scale_stride_m;
  g.a_scale_stride_k = p->a_scale_stride_k;
  g.b_scale_stride_n = p->b_scale_stride_n;
  g.b_scale_stride_k = p->b_scale_stride_k;
  return g;
}

#ifdef __cplusplus
}
#endif
#endif
