/* The CUDA grouped GEMM kernels and who takes which call (include/ignis/gemm.h says the rules in
 * prose): ignis_cuda_grouped_gemm (cuda_backend.h) runs the Hopper kernel of grouped_gemm_sm90.cu
 * when ignis_cuda_grouped_gemm_sm90_takes says so, else the mma.sync kernel of grouped_gemm.cu;
 * gemm_cublaslt.c sends a dense block-scaled fp8 product (one group of all M rows) to the Hopper
 * kernel when ignis_cuda_gemm_sm90_takes says so, else to cuBLASLt. The environment variable
 * IGNIS_GEMM_SM90 (read once) chooses: "0" neither, "grouped" the grouped ops only, anything else
 * or unset both. The entry points of each kernel are public here for bench/micro/grouped_gemm_sm90.cu,
 * which times them against each other in one process. */
#ifndef IGNIS_CUDA_GEMM_GROUPED_GEMM_SM90_H
#define IGNIS_CUDA_GEMM_GROUPED_GEMM_SM90_H

#include "core/gemm_params.h"
#include "core/grouped_gemm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* IGNIS_GEMM_SM90, read once: "0" off, "all" the grouped ops and the dense block-scaled GEMMs
 * (this file's kernel from M 128, gemm_small_m_sm90.h's up to M 32, and its 16-bit form up to M
 * 16), anything else the grouped ops only. */
typedef enum ignis_gemm_sm90_mode {
  IGNIS_GEMM_SM90_OFF = 0,
  IGNIS_GEMM_SM90_GROUPED = 1,
  IGNIS_GEMM_SM90_ALL = 2
} ignis_gemm_sm90_mode;
ignis_gemm_sm90_mode ignis_cuda_gemm_sm90_mode(void);

/* 1 if ignis' Hopper GEMM kernels can run on CUDA device `device`: the build compiled sm_90a, the
 * device is compute capability 9.0 and the driver provides cuTensorMapEncodeTiled. */
int ignis_cuda_gemm_sm90_device(int32_t device);

/* 1 if the Hopper kernel takes the grouped call on CUDA device `device`: the build compiled sm_90a,
 * the device is compute capability 9.0, IGNIS_GEMM_SM90 is not "0", the driver provides
 * cuTensorMapEncodeTiled, b in the NT form (b_stride_k == 1), K > 0 a multiple of 8 (16-bit) or 16
 * (fp8), N a multiple of 8, a, b and out 16-byte aligned with row and group strides of whole
 * 16-byte units, weights that do not overlap (b_group_stride >= N * b_stride_n when W > 1), and
 * sizes below 2^30. */
int ignis_cuda_grouped_gemm_sm90_takes(const ignis_grouped_gemm_params *p, int32_t device);
/* Runs the Hopper kernel (the caller checked ignis_cuda_grouped_gemm_sm90_takes); makes `device`
 * current for the launch. m_indptr may be NULL: one group of all M rows. */
ignis_status ignis_cuda_grouped_gemm_sm90(const ignis_grouped_gemm_params *p, int32_t device, void *stream);
/* The mma.sync kernel (sm_80+), whatever the Hopper kernel would take. */
ignis_status ignis_cuda_grouped_gemm_mma(const ignis_grouped_gemm_params *p, int32_t device, void *stream);

/* 1 if a dense ignis_mm_fp8_blockscale call runs on the Hopper kernel: IGNIS_GEMM_FP8_BLOCK, no batch,
 * 128x128 weight-scale blocks (b_scale_block_n == 128), M >= 128, out bf16 or f16, IGNIS_GEMM_SM90
 * neither "0" nor "grouped", and the rules of ignis_cuda_grouped_gemm_sm90_takes. */
int ignis_cuda_gemm_sm90_takes(const ignis_gemm_params *p, int32_t device);
/* Runs it as one group (no m_indptr). */
ignis_status ignis_cuda_gemm_sm90(const ignis_gemm_params *p, int32_t device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
