/* The scale repacking of the block-scaled fp8 GEMM (gemm_scales.cu), used by gemm_cublaslt.c:
 * the caller's a_scale [M, K/128] and b_scale [N/128, K/128] (any strides, f32 or UE8M0) become
 * f32 in the layouts cuBLASLt reads: a_packed[m + kb * M] (VEC128_32F) and
 * b_packed[kb + nb * b_ld] (BLK128x128_32F), or for per-row weight scales (b_scale_block_n == 1)
 * b_packed[n + kb * N] (VEC128_32F; b_ld unused). One small kernel on `stream`. */
#ifndef IGNIS_CUDA_GEMM_SCALES_H
#define IGNIS_CUDA_GEMM_SCALES_H

#include "core/gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

ignis_status ignis_cuda_gemm_pack_scales(const ignis_gemm_params *p, float *a_packed, float *b_packed,
                                         int64_t b_ld, void *stream);

#ifdef __cplusplus
}
#endif
#endif
