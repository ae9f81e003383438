/* Repacking of the block-scaled fp8 GEMM's scales into cuBLASLt's layouts (gemm_scales.h): one
 * thread per packed scale, the activations' scales first, then the weight's; UE8M0 exponents e
 * decode to 2^(e - 127) (255: NaN), as the CPU backend reads them. The padding entries of the
 * weight's leading dimension are written as 0 and never read. Launched without PDL: it is tiny and
 * the GEMM after it is cuBLASLt's. */
#include "cuda/common/cuda_common.cuh"
#include "cuda/gemm/gemm_scales.h"

__device__ __forceinline__ float load_scale(const void *base, ignis_dtype dtype, int64_t i) {
  if (dtype == IGNIS_F32)
    return static_cast<const float *>(base)[i];
  unsigned e = static_cast<const unsigned char *>(base)[i];
  return e == 255u ? __int_as_float(0x7fc00000) : ldexpf(1.0f, static_cast<int>(e) - 127);
}

/* b_count: n_blocks * b_ld packed 128x128 scales, or N * k_blocks per-row ones (per_row). */
__global__ void pack_scales(ignis_gemm_params p, float *a_packed, float *b_packed, int64_t k_blocks,
                            int64_t b_ld, int64_t b_count, bool per_row) {
  const int64_t a_count = p.m * k_blocks, total = a_count + b_count;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (i < a_count) {
      int64_t m = i % p.m, kb = i / p.m;
      a_packed[i] = load_scale(p.a_scale, p.scale_dtype, m * p.a_scale_stride_m + kb * p.a_scale_stride_k);
    } else if (per_row) {
      int64_t j = i - a_count, n = j % p.n, kb = j / p.n;
      b_packed[j] = load_scale(p.b_scale, p.scale_dtype, n * p.b_scale_stride_n + kb * p.b_scale_stride_k);
    } else {
      int64_t j = i - a_count, kb = j % b_ld, nb = j / b_ld;
      b_packed[j] = kb < k_blocks ? load_scale(p.b_scale, p.scale_dtype,
                                               nb * p.b_scale_stride_n + kb * p.b_scale_stride_k)
                                  : 0.0f;
    }
  }
}

extern "C" ignis_status ignis_cuda_gemm_pack_scales(const ignis_gemm_params *p, float *a_packed,
                                                    float *b_packed, int64_t b_ld, void *stream) {
  const int64_t k_blocks = (p->k + IGNIS_GEMM_SCALE_BLOCK - 1) / IGNIS_GEMM_SCALE_BLOCK;
  const bool per_row = p->b_scale_block_n == 1;
  const int64_t n_blocks = (p->n + IGNIS_GEMM_SCALE_BLOCK - 1) / IGNIS_GEMM_SCALE_BLOCK;
  const int64_t b_count = per_row ? p->n * k_blocks : n_blocks * b_ld;
  const int64_t total = p->m * k_blocks + b_count;
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > 4096)
    blocks = 4096;
  pack_scales<<<(unsigned)blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      *p, a_packed, b_packed, k_blocks, b_ld, b_count, per_row);
  return ignis_check_launch("ignis GEMM: the scale repacking kernel");
}
