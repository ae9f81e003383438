/* The Hopper small-M GEMM (gemm_small_m_sm90.cu): a dense ignis_mm_fp8_blockscale (or 16-bit
 * ignis_mm) call with a few rows of activations (decode: M up to 64) as one weight-streaming wgmma kernel,
 * the weight on the 64-row side of wgmma and the activation rows on its narrow side, K split across
 * blocks. gemm_cublaslt.c asks ignis_cuda_gemm_small_m_sm90_takes before the other paths but the
 * 16-bit small-M kernel's (gemm_skinny.h), and hands it the split-K room of its per-(device, stream) workspace.
 * The entry points are public here for bench/micro/grouped_skinny.cu, which times this kernel against
 * the others on the dense decode shapes. */
#ifndef IGNIS_CUDA_GEMM_GEMM_SMALL_M_SM90_H
#define IGNIS_CUDA_GEMM_GEMM_SMALL_M_SM90_H

#include <stddef.h>

#include "core/gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most rows (M) the kernel takes, and the most for which the library routes a dense
 * block-scaled product (FP8) or a 16-bit one (PLAIN) here: where it beat
 * cuBLASLt and the small-M grouped kernel on the H100 (notes/PERF.md, "Hopper small-M GEMM"). */
#define IGNIS_GEMM_SMALL_M_SM90_MAX_M 64
#define IGNIS_GEMM_SMALL_M_SM90_ROUTED_FP8_MAX_M 32
#define IGNIS_GEMM_SMALL_M_SM90_ROUTED_PLAIN_MAX_M 16

/* 1 if the kernel can run the call: no batch, b in the NT form (b_stride_k == 1), 1 <= M <=
 * IGNIS_GEMM_SMALL_M_SM90_MAX_M, and IGNIS_GEMM_FP8_BLOCK (e4m3 x e4m3, 128x128 weight-scale blocks,
 * out bf16 or f16) or IGNIS_GEMM_PLAIN (bf16 x bf16 or f16 x f16, no bias, out bf16, f16 or f32), K a
 * multiple of 16
 * bytes, a and b 16-byte aligned with row strides of whole 16-byte units, sizes below 2^30, a build
 * with sm_90a on a compute capability 9.0 device whose driver has cuTensorMapEncodeTiled, and
 * IGNIS_GEMM_SM90 not "0". */
int ignis_cuda_gemm_small_m_sm90_fits(const ignis_gemm_params *p, int32_t device);

/* 1 if the library routes the call here: it fits (so IGNIS_GEMM_SM90 is not "0") and M is at most
 * IGNIS_GEMM_SMALL_M_SM90_ROUTED_FP8_MAX_M (block-scaled) or _PLAIN_MAX_M (16-bit). */
int ignis_cuda_gemm_small_m_sm90_takes(const ignis_gemm_params *p, int32_t device);

/* Runs the call on `stream` (makes `device` current for the launch), planned for per_sm (1 or 2)
 * resident blocks per SM (2: half the ring of stages each), with `consumers` warpgroups per block
 * taking turns over the K blocks (1, 2 or 4; 4 only up to 32 rows; 0: the library's choice, 4 for
 * block-scaled fp8 up to 32 rows, else 2), each with `depth` K blocks in flight (2: the next block's
 * wgmma issued before this one's are waited for; otherwise 1). K is split across up to max_splits
 * blocks (at most 8; 0: the library's choice, 8 for fp8, 1 for 16-bit) per 64 weight rows where the
 * weight tiles alone leave room for more blocks; the splits' f32 sums go to partials (room for
 * partial_floats), and the last block of each tile to finish (counters: counters_count unsigned,
 * zero between calls, left zero) adds them in split order, so every call writes the same bits. With
 * no room (partials or counters NULL) K is not split. */
ignis_status ignis_cuda_gemm_small_m_sm90(const ignis_gemm_params *p, int32_t device, void *stream,
                                          float *partials, size_t partial_floats, unsigned *counters,
                                          int counters_count, int max_splits, int per_sm, int consumers,
                                          int depth);

#ifdef __cplusplus
}
#endif
#endif
