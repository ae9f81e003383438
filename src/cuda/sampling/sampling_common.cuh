/* Device helpers shared by the sampling kernels (src/cuda/sampling/*.cu).
 *
 * Rows are read in chunks of 4 consecutive elements (chunk c = elements 4c .. 4c+3). A chunk is one
 * 16-byte (f32) or 8-byte (f16/bf16) load when the row is aligned and the chunk lies inside it;
 * else 4 element loads. Element values are returned as f32; lanes past the row read as 0.
 *
 * Block reductions and scans give the same result on every run: max, argmax (largest score, lowest
 * index on ties; a fixed order), exact 64-bit integer sums, prefix sums and suffix sums over the
 * threads (integer adds modulo 2^64, so their order does not matter). The warps' results meet in a
 * shared slot per warp, which every warp then reads one slot a lane and reduces in hardware (REDUX)
 * instead of every thread walking all 32 slots (~300 instructions a thread a call). They assume a
 * block of whole warps and end with a barrier, so their shared scratch may be reused at once. */
#ifndef IGNIS_CUDA_SAMPLING_COMMON_CUH
#define IGNIS_CUDA_SAMPLING_COMMON_CUH

#include <float.h>

#include "core/philox.h"
#include "cuda/common/cuda_common.cuh"

namespace ignis_sampling {

/* Load chunk c (elements 4c .. 4c+3) of a row of n elements as f32. */
template <typename T>
__device__ __forceinline__ void load_chunk(const T *row, int64_t c, int64_t n, bool vec, float (&v)[4]) {
  const int64_t i0 = c * 4;
  if (vec && i0 + 4 <= n) {
    if constexpr (sizeof(T) == 4) {
      const float4 f = *reinterpret_cast<const float4 *>(row + i0);
      v[0] = f.x;
      v[1] = f.y;
      v[2] = f.z;
      v[3] = f.w;
    } else {
      const uint2 raw = *reinterpret_cast<const uint2 *>(row + i0);
      ignis_unpack_word<T>(raw.x, v);
      ignis_unpack_word<T>(raw.y, v + 2);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = i0 + j < n ? ignis_to_float(row[i0 + j]) : 0.0f;
}

__device__ __forceinline__ float sanitize_prob(float p) {
  return (p > 0.0f && p <= FLT_MAX) ? p : 0.0f;
}

__device__ __forceinline__ float sanitize_logit(float x) {
  return isnan(x) ? -INFINITY : (x > FLT_MAX ? FLT_MAX : x);
}

__device__ __forceinline__ int64_t load_index(const void *base, ignis_dtype dtype, int64_t i) {
  return dtype == IGNIS_I32 ? (int64_t) static_cast<const int32_t *>(base)[i]
                            : static_cast<const int64_t *>(base)[i];
}

__device__ __forceinline__ void store_index(void *base, ignis_dtype dtype, int64_t i, int64_t value) {
  if (dtype == IGNIS_I32)
    static_cast<int32_t *>(base)[i] = (int32_t)value;
  else
    static_cast<int64_t *>(base)[i] = value;
}

__device__ __forceinline__ uint64_t rng_seed(const ignis_philox_source &rng, int64_t row) {
  return rng.seed_arr ? (uint64_t)rng.seed_arr[rng.seed_len == 1 ? 0 : row] : rng.seed;
}

__device__ __forceinline__ uint64_t rng_offset(const ignis_philox_source &rng, int64_t row) {
  return rng.offset_arr ? (uint64_t)rng.offset_arr[rng.offset_len == 1 ? 0 : row] : rng.offset;
}

/* Per-row thresholds of a sampling call, clamped as include/ignis/sampling.h says. */
__device__ __forceinline__ int64_t row_top_k(const ignis_sampling_params &p, int64_t b) {
  return p.top_k_arr ? load_index(p.top_k_arr, p.top_k_dtype, b) : p.top_k_val;
}

__device__ __forceinline__ double row_top_p(const ignis_sampling_params &p, int64_t b) {
  const double v = p.top_p_arr ? (double)p.top_p_arr[b] : p.top_p_val;
  return v > 0.0 ? v : DBL_MIN;
}

__device__ __forceinline__ float row_min_p(const ignis_sampling_params &p, int64_t b) {
  const float v = p.min_p_arr ? p.min_p_arr[b] : p.min_p_val;
  return v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
}

/* The top-k / top-p part of a row's filter: k and p as clamped above, and whether each filters (a k
 * of 0 or >= n does not, nor a p of 1). */
struct row_filter {
  int64_t k;
  double top_p;
  bool use_k, use_p;
};
__device__ __forceinline__ row_filter row_filter_of(const ignis_sampling_params &p, int64_t b, int64_t n) {
  const ignis_sampling_filter filter = p.filter;
  const bool has_k = filter == IGNIS_SAMPLING_TOP_K || filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                     filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const bool has_p = filter == IGNIS_SAMPLING_TOP_P || filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                     filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  row_filter f;
  f.k = has_k ? row_top_k(p, b) : 0;
  f.top_p = has_p ? row_top_p(p, b) : 1.0;
  f.use_k = has_k && f.k > 0 && f.k < n;
  f.use_p = has_p && f.top_p < 1.0;
  return f;
}

/* ---- block reductions ------------------------------------------------------------------------------ */
/* Shared scratch of the reductions: one slot per warp. */
struct reduce_scratch {
  float score[32];
  int64_t index[32];
  uint32_t m[32];
  uint64_t a[32];
  uint64_t b[32];
  uint64_t c[32];
};

/* Targets without REDUX (below sm_80): a shuffle butterfly of op over the warp. */
template <typename T, typename Op> __device__ __forceinline__ T warp_butterfly(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Exact sum over the warp of a 64-bit value, modulo 2^64. sm_80+: three 32-bit hardware reductions
 * (REDUX) of its 24-, 24- and 16-bit parts (each part's sum fits 32 bits), about a third of the
 * instructions of a shuffle tree, and no shuffles, which made nvcc guard the warp-wide operations of
 * the calling passes against divergence. */
__device__ __forceinline__ uint64_t warp_sum_u64(uint64_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t p0 = __reduce_add_sync(0xffffffffu, (uint32_t)v & 0xFFFFFFu);
  const uint32_t p1 = __reduce_add_sync(0xffffffffu, (uint32_t)(v >> 24) & 0xFFFFFFu);
  const uint32_t p2 = __reduce_add_sync(0xffffffffu, (uint32_t)(v >> 48));
  return (uint64_t)p0 + ((uint64_t)p1 << 24) + ((uint64_t)p2 << 48);
#else
  return warp_butterfly(v, [](uint64_t a, uint64_t b) { return a + b; });
#endif
}

/* Sum (modulo 2^32) or max of a 32-bit value over the warp: one REDUX on sm_80+. */
enum warp_op { WARP_SUM = 0, WARP_MAX = 1 };
template <int OP> __device__ __forceinline__ uint32_t warp_reduce_u32(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return OP == WARP_SUM ? __reduce_add_sync(0xffffffffu, v) : __reduce_max_sync(0xffffffffu, v);
#else
  return warp_butterfly(v, [](uint32_t a, uint32_t b) { return OP == WARP_SUM ? a + b : (a > b ? a : b); });
#endif
}
__device__ __forceinline__ uint32_t warp_sum_u32(uint32_t v) {
  return warp_reduce_u32<WARP_SUM>(v);
}
__device__ __forceinline__ uint32_t warp_max_u32(uint32_t v) {
  return warp_reduce_u32<WARP_MAX>(v);
}

/* The warp sum in the type of a block scan (uint32_t or uint64_t). */
template <typename T> __device__ __forceinline__ T warp_total(T v) {
  if constexpr (sizeof(T) == 8)
    return warp_sum_u64(v);
  else
    return warp_sum_u32(v);
}

__device__ __forceinline__ float block_max(float x, reduce_scratch &s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_butterfly(x, [](float a, float b) { return fmaxf(a, b); });
  if (lane == 0)
    s.score[warp] = x;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w)
    m = fmaxf(m, s.score[w]);
  __syncthreads();
  return m;
}

/* (score, index) with the larger score, the lower index on equal scores; index -1 means none. */
__device__ __forceinline__ bool better(float s1, int64_t i1, float s2, int64_t i2) {
  if (i2 < 0)
    return i1 >= 0;
  if (i1 < 0)
    return false;
  return s1 > s2 || (s1 == s2 && i1 < i2);
}

__device__ __forceinline__ int64_t block_argmax(float score, int64_t index, reduce_scratch &s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float os = __shfl_xor_sync(0xffffffffu, score, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (better(os, oi, score, index)) {
      score = os;
      index = oi;
    }
  }
  if (lane == 0) {
    s.score[warp] = score;
    s.index[warp] = index;
  }
  __syncthreads();
  float best_score = 0.0f;
  int64_t best = -1;
  for (int w = 0; w < warps; ++w)
    if (better(s.score[w], s.index[w], best_score, best)) {
      best_score = s.score[w];
      best = s.index[w];
    }
  __syncthreads();
  return best;
}

/* Adds v to a 64-bit sum kept as two 32-bit words (lo, hi) in shared memory: native 32-bit atomics,
 * the carry out of the low word added to the high one. Exact modulo 2^64 in any order. */
__device__ __forceinline__ void shared_add_u64(uint32_t *lo, uint32_t *hi, uint64_t v) {
  const uint32_t low = (uint32_t)v;
  const uint32_t old = atomicAdd(lo, low);
  const uint32_t high = (uint32_t)(v >> 32) + ((uint32_t)(old + low) < old ? 1u : 0u);
  if (high)
    atomicAdd(hi, high);
}

/* Exclusive suffix sums over the threads (for each of the three values, the sum over every higher
 * thread) and the block totals. Exact: integer adds. */
__device__ __forceinline__ void block_suffix3(const uint64_t (&v)[3], uint64_t (&above)[3],
                                              uint64_t (&total)[3], reduce_scratch &s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint64_t inc[3] = {v[0], v[1], v[2]}; /* inclusive suffix within the warp */
#pragma unroll
  for (int o = 1; o < 32; o <<= 1)
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      const uint64_t next = __shfl_down_sync(0xffffffffu, inc[q], o);
      if (lane + o < 32)
        inc[q] += next;
    }
  if (lane == 0) {
    s.a[warp] = inc[0];
    s.b[warp] = inc[1];
    s.c[warp] = inc[2];
  }
  __syncthreads();
  /* The warps' slots, one a lane: every warp sums those above its own and all of them. */
  const bool have = lane < warps;
  const uint64_t slot[3] = {have ? s.a[lane] : 0, have ? s.b[lane] : 0, have ? s.c[lane] : 0};
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    total[q] = warp_sum_u64(slot[q]);
    above[q] = warp_sum_u64(lane > warp ? slot[q] : 0) + inc[q] - v[q];
  }
  __syncthreads();
}

/* The block's max of m and sums of a, b and c, returned in place to every thread. */
__device__ __forceinline__ void block_sums(uint32_t &m, uint64_t &a, uint64_t &b, uint64_t &c,
                                           reduce_scratch &s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  m = warp_max_u32(m);
  a = warp_sum_u64(a);
  b = warp_sum_u64(b);
  c = warp_sum_u64(c);
  if (lane == 0) {
    s.m[warp] = m;
    s.a[warp] = a;
    s.b[warp] = b;
    s.c[warp] = c;
  }
  __syncthreads();
  /* The warps' slots, one a lane, reduced by every warp. */
  const bool have = lane < warps;
  m = warp_max_u32(have ? s.m[lane] : 0u);
  a = warp_sum_u64(have ? s.a[lane] : 0);
  b = warp_sum_u64(have ? s.b[lane] : 0);
  c = warp_sum_u64(have ? s.c[lane] : 0);
  __syncthreads();
}

/* Exclusive prefix sum over the threads (the sum over every lower thread) and the total, in T
 * (uint32_t or uint64_t: unsigned, so a u32 sum wraps as its u64 sum would truncate). */
template <typename T> __device__ __forceinline__ T block_prefix(T v, T &total, reduce_scratch &s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const T inc = ignis_warp_inclusive_sum(v);
  if (lane == 31)
    s.a[warp] = inc;
  __syncthreads();
  const T slot = lane < warps ? (T)s.a[lane] : (T)0;
  total = warp_total<T>(slot);
  const T below = warp_total<T>(lane < warp ? slot : (T)0);
  __syncthreads();
  return below + inc - v;
}

/* Host: rows of `elem`-byte elements at data, row_stride apart, start on whole chunks (so chunk
 * loads and stores can be vectors). */
static inline bool rows_chunk_aligned(const void *data, int64_t row_stride, int64_t rows, size_t elem) {
  const size_t chunk = 4 * elem;
  return (uintptr_t)data % chunk == 0 && (rows <= 1 || (row_stride * (int64_t)elem) % (int64_t)chunk == 0);
}

/* Host: the multi-block path of small batches (split.cu): true when it took the call (launched, or
 * failed to: *status), false when the call belongs to the one-block kernel. The device is current. */
bool ignis_cuda_sampling_split(const ignis_sampling_params *p, int32_t device, void *stream,
                               ignis_status *status);

/* Host: the end of every sampling entry point. `rows` blocks must fit a grid; launch(T()) launches
 * the kernels for row dtype T (f32, f16 or bf16) and returns the launch's error; the result is the
 * status of the launch. */
template <typename Launch>
static inline ignis_status launch_rows(const char *fn, int64_t rows, ignis_dtype dtype, Launch &&launch) {
  if (rows > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %lld rows exceed the grid limit", fn,
                           (long long)rows);
  cudaError_t err;
  switch (dtype) {
  case IGNIS_F32:
    err = launch(float());
    break;
  case IGNIS_F16:
    err = launch(__half());
    break;
  case IGNIS_BF16:
    err = launch(__nv_bfloat16());
    break;
  default:
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: dtype %s reached the CUDA backend", fn,
                           ignis_dtype_name(dtype));
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "%s: kernel launch failed: %s", fn, cudaGetErrorString(err));
  }
  return ignis_check_launch(fn);
}

} // namespace ignis_sampling

#endif
