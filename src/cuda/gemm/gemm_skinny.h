/* ignis' own small-M 16-bit GEMM (gemm_skinny.cu, kernel in skinny.cuh), the CUDA path of the
 * decode-sized ignis_mm calls: which calls it takes, and the launch. gemm_cublaslt.c routes a call
 * here when ignis_cuda_skinny_takes says so and hands it the per-(device, stream) workspace:
 * partials (room for partial_floats f32, the split-K sums) and counters (counters_count unsigned,
 * zero between calls; the kernel leaves them zero). */
#ifndef IGNIS_CUDA_GEMM_SKINNY_H
#define IGNIS_CUDA_GEMM_SKINNY_H

#include <stddef.h>

#include "core/gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the call runs on the small-M kernel: a 16-bit product (IGNIS_GEMM_PLAIN) without batch
 * (batch 1), b in the NT form (the weight [N, K], K-contiguous), 1 <= M <= 64, K > 0 a multiple of
 * 8, a and b 16-byte aligned with row strides of whole 16-byte units, N and K below 2^31, a device
 * of compute capability 8.0 or later, and IGNIS_GEMM_SKINNY not "0". */
int ignis_cuda_skinny_takes(const ignis_gemm_params *p, int32_t device);

/* Launch on `stream`; `device` is current. */
ignis_status ignis_cuda_skinny_gemm(const ignis_gemm_params *p, int32_t device, float *partials,
                                    size_t partial_floats, unsigned *counters, int counters_count,
                                    void *stream);

#ifdef __cplusplus
}
#endif
#endif
