/* An fp8 e4m3 query for the attention kernels (decode.cu, prefill.cu): a plan whose q is fp8 (an fp8
 * KV cache, as FlashInfer's fp8 prefill / decode takes it) runs its kernels in out's 16-bit dtype,
 * so before them the run converts q, exactly (every e4m3 value is an f16 and a bf16 value), into
 * the contiguous copy in its workspace (core/params.h: q_scratch), with one kernel on the stream.
 *
 * The grid is fixed by the plan's maxima, so a captured CUDA graph serves every later batch; each
 * thread converts 8 elements per step over the rows of the batch, whose count it reads on the
 * device (the schedule's batch size times q_len for decode; the end of the last request's rows
 * for prefill). Rows past it are not read, so q may be as short as the batch. */
#ifndef IGNIS_CUDA_ATTENTION_Q_CONVERT_CUH
#define IGNIS_CUDA_ATTENTION_Q_CONVERT_CUH

#include <cuda_fp8.h>

#include "cuda/attention/attention_tile.cuh"
#include "cuda/common/cuda_common.cuh"
#include "sched/schedule.h"

enum { Q_CONVERT_THREADS = 256, Q_CONVERT_MAX_BLOCKS = 132 * 8 };

/* Where the rows to convert are and how many the batch has. */
struct q_convert_source {
  const uint8_t *q;
  int64_t stride_row, stride_head; /* elements (bytes) */
  int64_t heads, dim;              /* dim: a multiple of 8 */
  int64_t max_rows;                /* the plan's: the grid's bound */
  const int32_t *batch_size;       /* [1] on the device; NULL: max_rows rows (a batch the host knows) */
  int32_t q_len;                   /* decode: rows per request; 0: prefill, rows from requests */
  const ignis_prefill_request *requests;
};

__device__ __forceinline__ int64_t q_convert_rows(const q_convert_source &s) {
  if (s.batch_size == nullptr)
    return s.max_rows;
  const int32_t batch = *s.batch_size;
  int64_t rows = s.q_len > 0                  ? (int64_t)batch * s.q_len
                 : batch > 0 && s.requests    ? (int64_t)s.requests[batch - 1].q_start + s.requests[batch - 1].q_len
                                              : 0;
  return rows < s.max_rows ? rows : s.max_rows;
}

template <typename QT>
__global__ void __launch_bounds__(Q_CONVERT_THREADS) q_convert_kernel(const q_convert_source s, QT *dst) {
  ignis_pdl_wait();
  const int64_t pieces = s.dim / 8, per_row = s.heads * pieces;
  const int64_t total = q_convert_rows(s) * per_row;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / per_row, h = i / pieces % s.heads, d = i % pieces * 8;
    const uint2 bits = *reinterpret_cast<const uint2 *>(s.q + row * s.stride_row + h * s.stride_head + d);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(&bits);
    float x[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      __nv_fp8_e4m3 v;
      v.__x = b[e];
      x[e] = static_cast<float>(v);
    }
    ignis_store_floats(dst + (row * s.heads + h) * s.dim + d, x);
  }
  ignis_pdl_launch_dependents();
}

/* Launch the conversion into dst (QT: the kernels' 16-bit dtype): q, its strides and the first 8
 * bytes of each piece must be 8-byte aligned (checked: IGNIS_ERROR_UNSUPPORTED otherwise). */
template <typename QT> static inline ignis_status q_convert(const q_convert_source &s, QT *dst, cudaStream_t stream) {
  if ((uintptr_t)s.q % 8 != 0 || s.stride_row % 8 != 0 || s.stride_head % 8 != 0 || s.dim % 8 != 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "attention: an fp8 q must be 8-byte aligned, with strides of multiples of 8 bytes");
  const int64_t vectors = s.max_rows * s.heads * (s.dim / 8);
  int64_t blocks = (vectors + Q_CONVERT_THREADS - 1) / Q_CONVERT_THREADS;
  blocks = blocks < 1 ? 1 : blocks > Q_CONVERT_MAX_BLOCKS ? Q_CONVERT_MAX_BLOCKS : blocks;
  IGNIS_CUDA_CHECK(ignis_launch(q_convert_kernel<QT>, dim3((unsigned)blocks), dim3(Q_CONVERT_THREADS), 0, stream, s,
                                dst));
  return ignis_check_launch("attention q conversion");
}

/* The conversion into scratch of the kernels' 16-bit dtype (f16 or bf16, else unsupported). */
static inline ignis_status q_convert_to(ignis_dtype dtype, const q_convert_source &s, void *scratch,
                                        cudaStream_t stream) {
  return attention_by_dtype(dtype, "attention", [&](auto qt) {
    return q_convert(s, static_cast<decltype(qt) *>(scratch), stream);
  });
}

#endif
