/* ignis' small-M grouped GEMM (grouped_skinny.cu, kernel in grouped_skinny.cuh), the CUDA path of
 * the decode-sized ignis_grouped_mm and ignis_grouped_mm_fp8_blockscale calls: which calls it
 * takes, and the launch. ignis_cuda_grouped_gemm (grouped_gemm.cu) asks first and hands the call
 * here when ignis_cuda_grouped_skinny_takes says so; it needs no workspace. The decode-sized dense
 * block-scaled fp8 products (ignis_mm_fp8_blockscale) run on it too, as one group. */
#ifndef IGNIS_CUDA_GEMM_GROUPED_SKINNY_H
#define IGNIS_CUDA_GEMM_GROUPED_SKINNY_H

#include <stddef.h>

#include "core/grouped_gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the call runs on the small-M kernel: weights in the NT form (b_stride_k == 1), 1 <= M <= 512
 * and M <= 8 G, the shapes and alignments the grouped kernel takes (K a multiple of 16 bytes, N of
 * 8, a, b and out 16-byte aligned with leading strides of whole 16-byte units, sizes below 2^30),
 * a device of compute capability 8.0 (16-bit) or 8.9 (fp8) or later, and
 * IGNIS_GEMM_GROUPED_SKINNY not "0". */
int ignis_cuda_grouped_skinny_takes(const ignis_grouped_gemm_params *p, int32_t device);

/* Launch on `stream` (makes `device` current for the launch). */
ignis_status ignis_cuda_grouped_skinny(const ignis_grouped_gemm_params *p, int32_t device, void *stream);

/* 1 if a dense ignis_mm_fp8_blockscale call runs on this kernel as one group of all M rows (no
 * m_indptr): IGNIS_GEMM_FP8_BLOCK, e4m3 x e4m3, no batch, 128x128 weight-scale blocks, 1 <= M <=
 * IGNIS_GROUPED_SKINNY_MAX_DENSE_M, out bf16 or f16, and the shape, alignment, device and
 * environment rules above. gemm_cublaslt.c asks before anything else. */
int ignis_cuda_gemm_grouped_skinny_takes(const ignis_gemm_params *p, int32_t device);

/* Runs that call (the caller checked ignis_cuda_gemm_grouped_skinny_takes), K split across blocks
 * where one group gives too few: partials room for partial_floats f32 (split sums), counters
 * counters_count unsigned, zero between calls (the kernel leaves them zero); gemm_cublaslt.c hands
 * it the per-(device, stream) workspace it gives the 16-bit small-M kernel. */
ignis_status ignis_cuda_gemm_grouped_skinny(const ignis_gemm_params *p, int32_t device, void *stream,
                                            float *partials, size_t partial_floats, unsigned *counters,
                                            int counters_count);

#ifdef __cplusplus
}
#endif
#endif
