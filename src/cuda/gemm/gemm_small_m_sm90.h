/* The Hopper small-M GEMM (gemm_small_m_sm90.cu): a dense ignis_mm_fp8_blockscale (or 16-bit
 * ignis_mm) call with a few rows of activations (decode: M up to 64) as one weight-streaming wgmma kernel,
 * the weight on the 64-row side of wgmma and the activation rows on its narrow side, K split across
 * blocks. gemm_cublaslt.c asks ignis_cuda_gemm_small_m_sm90_takes after the small-M grouped kernel
 * (grouped_skinny.h) and before the other paths (it says yes only with IGNIS_GEMM_SM90=all), and hands it the
 * split-K room of its per-(device, stream) workspace. The entry points are public here for
 * bench/micro/grouped_skinny.cu, which times this kernel against the others on the dense decode shapes. */
#ifndef IGNIS_CUDA_GEMM_GEMM_SMALL_M_SM90_H
#define IGNIS_CUDA_GEMM_GEMM_SMALL_M_SM90_H

#include <stddef.h>

#include "core/gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rows (M) from which the library routes a dense block-scaled product here (with
 * IGNIS_GEMM_SM90=all) rather than to the small-M grouped kernel, and the most it takes. */
#define IGNIS_GEMM_SMALL_M_SM90_MIN_M 17
#define IGNIS_GEMM_SMALL_M_SM90_MAX_M 64

/* 1 if the kernel can run the call: no batch, b in the NT form (b_stride_k == 1), 1 <= M <=
 * IGNIS_GEMM_SMALL_M_SM90_MAX_M, and IGNIS_GEMM_FP8_BLOCK (e4m3 x e4m3, 128x128 weight-scale blocks,
 * out bf16 or f16) or IGNIS_GEMM_PLAIN (bf16 x bf16 or f16 x f16, no bias, out bf16, f16 or f32; never
 * routed, timed by bench/micro/grouped_skinny.cu), K a multiple of 16
 * bytes, a and b 16-byte aligned with row strides of whole 16-byte units, sizes below 2^30, a build
 * with sm_90a on a compute capability 9.0 device whose driver has cuTensorMapEncodeTiled, and
 * IGNIS_GEMM_SM90 not "0". */
int ignis_cuda_gemm_small_m_sm90_fits(const ignis_gemm_params *p, int32_t device);

/* 1 if the library routes the call here: it fits, M >= IGNIS_GEMM_SMALL_M_SM90_MIN_M and
 * IGNIS_GEMM_SM90 is "all" (by default cuBLASLt, faster on the H100, keeps these calls). */
int ignis_cuda_gemm_small_m_sm90_takes(const ignis_gemm_params *p, int32_t device);

/* Runs the call on `stream` (makes `device` current for the launch), planned for per_sm (1 or 2)
 * resident blocks per SM (2: half the ring of stages each), with `consumers` warpgroups per block
 * taking turns over the K blocks (1, 2 or 4; 4 only up to 32 rows; 0: the library's choice), each with
 * `depth` K blocks in flight (2: the next block's wgmma issued before this one's are waited for;
 * otherwise 1). K is split
 * across up to max_splits blocks (at most 8) per 64 weight rows where the weight tiles alone leave room for
 * more blocks; the splits' f32 sums go to partials (room for partial_floats), and the last block of each tile
 * to finish (counters: counters_count unsigned, zero between calls, left zero) adds them in split order, so
 * every call writes the same bits. With no room (partials or counters NULL) K is not split. */
ignis_status ignis_cuda_gemm_small_m_sm90(const ignis_gemm_params *p, int32_t device, void *stream,
                                          float *partials, size_t partial_floats, unsigned *counters,
                                          int counters_count, int max_splits, int per_sm, int consumers,
                                          int depth);

#ifdef __cplusplus
}
#endif
#endif
