/* CPU backend of the grouped GEMM ops (include/ignis/gemm.h): each non-empty group is one call of
 * the CPU GEMM (src/cpu/gemm.c) on its rows of a and out and its weight, so every layout, dtype
 * and the block-scaled fp8 sums behave exactly as there. The front end has checked m_indptr and
 * weight_indices (host memory). */
#include "cpu/cpu_backend.h"

static int64_t index_at(const void *base, ignis_dtype dtype, int64_t i) {
  return dtype == IGNIS_I32 ? ((const int32_t *)base)[i] : ((const int64_t *)base)[i];
}

static const void *offset(const void *base, ignis_dtype dtype, int64_t elements) {
  return (const char *)base + elements * (int64_t)ignis_dtype_size(dtype);
}

ignis_status ignis_cpu_grouped_gemm(const ignis_grouped_gemm_params *p, int32_t device, void *stream) {
  for (int64_t g = 0; g < p->groups; ++g) {
    const int64_t row0 = index_at(p->m_indptr, p->index_dtype, g);
    const int64_t rows = index_at(p->m_indptr, p->index_dtype, g + 1) - row0;
    if (rows == 0)
      continue;
    const int64_t w = p->weight_indices ? index_at(p->weight_indices, p->weight_index_dtype, g) : g;
    ignis_gemm_params q = {0};
    q.kind = p->fp8 ? IGNIS_GEMM_FP8_BLOCK : IGNIS_GEMM_PLAIN;
    q.batch = 1;
    q.m = rows;
    q.n = p->n;
    q.k = p->k;
    q.a_dtype = p->a_dtype;
    q.b_dtype = p->a_dtype;
    q.out_dtype = p->out_dtype;
    q.a = offset(p->a, p->a_dtype, row0 * p->a_row_stride);
    q.a_row_stride = p->a_row_stride;
    q.b = offset(p->b, p->a_dtype, w * p->b_group_stride);
    q.b_stride_k = p->b_stride_k;
    q.b_stride_n = p->b_stride_n;
    q.out = (void *)offset(p->out, p->out_dtype, row0 * p->out_row_stride);
    q.out_row_stride = p->out_row_stride;
    if (p->fp8) {
      q.scale_dtype = p->scale_dtype;
      q.a_scale = offset(p->a_scale, p->scale_dtype, row0 * p->a_scale_stride_m);
      q.a_scale_stride_m = p->a_scale_stride_m;
      q.a_scale_stride_k = p->a_scale_stride_k;
      q.b_scale = offset(p->b_scale, p->scale_dtype, g * p->b_scale_stride_g);
      q.b_scale_stride_n = p->b_scale_stride_n;
      q.b_scale_stride_k = p->b_scale_stride_k;
      q.b_scale_block_n = IGNIS_GEMM_SCALE_BLOCK;
    }
    ignis_status status = ignis_cpu_gemm(&q, device, stream);
    if (status != IGNIS_OK)
      return status;
  }
  return IGNIS_OK;
}
