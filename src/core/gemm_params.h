/* The flat params of the GEMM ops (include/ignis/gemm.h), filled by src/core/op_gemm.c and read by
 * the backends' gemm entry point. Every form is one struct: batch x [M, K] times [K, N].
 *
 * Element addresses, in elements of each tensor's dtype:
 *   a[bt, m, k]   = a   + bt * a_batch_stride   + m * a_row_stride + k
 *   b[bt, k, n]   = b   + bt * b_batch_stride   + k * b_stride_k   + n * b_stride_n
 *                   (b_stride_k == 1: the NT form, a weight stored [N, K]; else b_stride_n == 1)
 *   out[bt, m, n] = out + bt * out_batch_stride + m * out_row_stride + n
 *   bias[n]         (contiguous, or NULL)
 * Scales: per-tensor fp8 (IGNIS_GEMM_FP8_TENSOR) a_scale and b_scale point at one f32 each;
 * block-scaled (IGNIS_GEMM_FP8_BLOCK) a_scale[m, kb] at a_scale + m * a_scale_stride_m +
 * kb * a_scale_stride_k and b_scale[nb, kb] likewise (nb = n / b_scale_block_n, kb = k / 128;
 * b_scale_block_n is 128 for 128x128 weight blocks, 1 for per-row 1x128 weight scales), f32 or u8
 * UE8M0 (scale_dtype). */
#ifndef IGNIS_CORE_GEMM_PARAMS_H
#define IGNIS_CORE_GEMM_PARAMS_H

#include <stdint.h>

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ignis_gemm_kind {
  IGNIS_GEMM_PLAIN = 0,      /* 16-bit inputs */
  IGNIS_GEMM_FP8_TENSOR = 1, /* fp8 inputs, one f32 scale per tensor */
  IGNIS_GEMM_FP8_BLOCK = 2   /* fp8 inputs, 1x128 scales for a, 128x128 for b */
} ignis_gemm_kind;

#define IGNIS_GEMM_SCALE_BLOCK 128

typedef struct ignis_gemm_params {
  ignis_gemm_kind kind;
  int64_t batch, m, n, k;
  ignis_dtype a_dtype, b_dtype, out_dtype;
  ignis_dtype bias_dtype;  /* when bias != NULL */
  ignis_dtype scale_dtype; /* IGNIS_GEMM_FP8_BLOCK: f32 or u8 (UE8M0) */
  const void *a;
  int64_t a_batch_stride, a_row_stride;
  const void *b;
  int64_t b_batch_stride, b_stride_k, b_stride_n;
  void *out;
  int64_t out_batch_stride, out_row_stride;
  const void *bias;
  const void *a_scale, *b_scale;
  int64_t a_scale_stride_m, a_scale_stride_k;
  int64_t b_scale_stride_n, b_scale_stride_k;
  int64_t b_scale_block_n; /* IGNIS_GEMM_FP8_BLOCK: 128 or 1 */
} ignis_gemm_params;

#ifdef __cplusplus
}
#endif
#endif
