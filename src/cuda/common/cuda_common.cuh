/* Device helpers shared by every CUDA kernel of ignis, and the host-side launch helpers.
 *
 * Device side: conversion of f16/bf16/f32 to and from f32 (ignis_to_float / ignis_from_float),
 * 16-byte vector loads and stores (ignis_vec: 16 bytes holding 16/sizeof(T) elements), warp and
 * block sum reductions; row addressing of the 2-level row layout (ignis_split_row,
 * ignis_row_offset) and its host-side alignment check (ignis_rows_aligned16); loads with cache
 * hints and chunks of N elements to and from f32 (ignis_load_floats / ignis_store_floats, 16-byte
 * accesses where N fills whole vectors; ignis_store_raw is the one-instruction 16-byte store).
 * Host side: IGNIS_CUDA_CHECK for runtime calls inside a launcher (sets the error message and
 * returns IGNIS_ERROR_CUDA), ignis_check_launch after a kernel launch, and a device guard that
 * makes the tensors' device current for a launch and restores the caller's device after.
 *
 * Programmatic dependent launch (PDL, sm_90+): ignis_launch(kernel, grid, block, smem, stream,
 * args...) launches through cudaLaunchKernelEx with programmatic stream serialization allowed when
 * the current device has compute capability >= 9.0 and the environment does not set
 * IGNIS_DISABLE_PDL=1 (both read once and cached). Such a kernel may start while the kernel before
 * it in the stream is still running, so every kernel launched this way calls ignis_pdl_wait()
 * (griddepcontrol.wait: returns once the preceding grid has completed and its memory is visible;
 * a no-op when the launch had no programmatic dependency or below sm_90) before its first global
 * memory access, read or write (two exceptions: a plan's schedule, which an asynchronous copy
 * wrote before any kernel this launch can overlap, e.g. decode's work items and the decode merge
 * kernel's partial counts; and reads from L2 that the kernel repeats after the wait and whose
 * results it discards where they changed: decode_length_item's lengths). ignis_pdl_launch_dependents() (griddepcontrol.launch_dependents)
 * is only a scheduling hint: once every block of this grid has called it or exited, the next
 * PDL-launched kernel may begin launching and wait in its own ignis_pdl_wait(); kernels call it
 * after issuing their last loads so the next launch overlaps their tail. Correctness rests on the
 * waits alone, so any sequence of kernels, PDL-launched or not, and CUDA-graph stream capture
 * (which records the dependency as a programmatic graph edge) stay correct. */
#ifndef IGNIS_CUDA_COMMON_CUH
#define IGNIS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_backend.h"
#include "core/env.h"
#include "core/error.h"

/* ---- element conversion ------------------------------------------------------------------- */
__device__ __forceinline__ float ignis_to_float(float x) { return x; }
__device__ __forceinline__ float ignis_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float ignis_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T ignis_from_float(float x);
template <> __device__ __forceinline__ float ignis_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half ignis_from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 ignis_from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/* ---- 16-byte vectors ----------------------------------------------------------------------- */
template <typename T> struct alignas(16) ignis_vec {
  static constexpr int size = 16 / sizeof(T);
  T elems[16 / sizeof(T)];
};

/* Plain 16-byte load/store (ptr must be 16-byte aligned). */
template <typename T> __device__ __forceinline__ ignis_vec<T> ignis_load_vec(const T *ptr) {
  ignis_vec<T> v;
  *reinterpret_cast<uint4 *>(&v) = *reinterpret_cast<const uint4 *>(ptr);
  return v;
}
template <typename T> __device__ __forceinline__ void ignis_store_vec(T *ptr, const ignis_vec<T> &v) {
  *reinterpret_cast<uint4 *>(ptr) = *reinterpret_cast<const uint4 *>(&v);
}
/* Streaming load: data read once, do not keep in L1/L2 longer than needed. */
template <typename T> __device__ __forceinline__ ignis_vec<T> ignis_load_vec_stream(const T *ptr) {
  ignis_vec<T> v;
  *reinterpret_cast<uint4 *>(&v) = __ldcs(reinterpret_cast<const uint4 *>(ptr));
  return v;
}
template <typename T> __device__ __forceinline__ void ignis_store_vec_stream(T *ptr, const ignis_vec<T> &v) {
  __stcs(reinterpret_cast<uint4 *>(ptr), *reinterpret_cast<const uint4 *>(&v));
}

/* ---- reductions ---------------------------------------------------------------------------- */
__device__ __forceinline__ float ignis_warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/* Inclusive prefix sum over the lanes of a full warp: lane l gets the sum of lanes 0..l. */
template <typename T> __device__ __forceinline__ T ignis_warp_inclusive_sum(T v) {
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) >= offset)
      v += up;
  }
  return v;
}

/* Sum over the block; every thread gets the result. `scratch` holds >= 32 floats of shared memory
 * and may be reused after the call returns (the function ends with a barrier). */
__device__ __forceinline__ float ignis_block_sum(float x, float *scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int num_warps = (blockDim.x + 31) >> 5;
  x = ignis_warp_sum(x);
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  float total = lane < num_warps ? scratch[lane] : 0.0f;
  total = ignis_warp_sum(total);
  __syncthreads();
  return total;
}

/* ---- host side ----------------------------------------------------------------------------- */
#define IGNIS_CUDA_CHECK(call)                                                                     \
  do {                                                                                             \
    cudaError_t ignis_cuda_err_ = (call);                                                          \
    if (ignis_cuda_err_ != cudaSuccess)                                                            \
      return ignis_set_error(IGNIS_ERROR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call,       \
                             cudaGetErrorString(ignis_cuda_err_));                                 \
  } while (0)

/* After a launch: report a launch failure (bad configuration, no kernel image for this GPU). */
static inline ignis_status ignis_check_launch(const char *what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "%s: kernel launch failed: %s", what, cudaGetErrorString(err));
  return IGNIS_OK;
}

/* Makes `device` current for its lifetime; restores the previous device when destroyed. */
struct ignis_device_guard {
  int previous = -1;
  cudaError_t status = cudaSuccess;
  explicit ignis_device_guard(int device) {
    status = cudaGetDevice(&previous);
    if (status == cudaSuccess && previous != device)
      status = cudaSetDevice(device);
    else
      previous = -1;
  }
  ~ignis_device_guard() {
    if (previous >= 0)
      cudaSetDevice(previous);
  }
  ignis_device_guard(const ignis_device_guard &) = delete;
  ignis_device_guard &operator=(const ignis_device_guard &) = delete;
};

/* Start of a launcher: make the tensors' device current or return the CUDA error. */
#define IGNIS_CUDA_ON_DEVICE(device)                                                               \
  ignis_device_guard ignis_guard_(device);                                                         \
  if (ignis_guard_.status != cudaSuccess)                                                          \
  return ignis_set_error(IGNIS_ERROR_CUDA, "cannot make cuda:%d current: %s", (int)(device),      \
                         cudaGetErrorString(ignis_guard_.status))

/* Number of multiprocessors of the current device (cached per device ordinal). */
int ignis_cuda_sm_count(int device);

/* ---- rows of the 2-level row layout (core/params.h) ------------------------------------------ */
/* Split a flat row index into (outer, inner); 32-bit division whenever the values allow it. */
__device__ __forceinline__ void ignis_split_row(int64_t row, int64_t num_rows_inner, int64_t *outer,
                                                int64_t *inner) {
  if (((uint64_t)row | (uint64_t)num_rows_inner) <= 0xffffffffull) {
    uint32_t q = (uint32_t)row / (uint32_t)num_rows_inner;
    *outer = q;
    *inner = (uint32_t)row - q * (uint32_t)num_rows_inner;
  } else {
    *outer = row / num_rows_inner;
    *inner = row - *outer * num_rows_inner;
  }
}

/* Element offset of row (outer, inner). */
__device__ __forceinline__ int64_t ignis_row_offset(int64_t outer, int64_t inner, ignis_row_layout layout) {
  return outer * layout.stride_outer + inner * layout.stride_inner;
}

/* Host: 1 if every row of the layout starts 16-byte aligned (the base pointer and the byte strides
 * are multiples of 16). A stride over a single row never moves the address and is not checked. */
static inline int ignis_rows_aligned16(const void *data, ignis_row_layout layout, int64_t num_rows_outer,
                                       int64_t num_rows_inner, size_t elem_size) {
  if ((uintptr_t)data % 16 != 0)
    return 0;
  if (num_rows_outer > 1 && layout.stride_outer * (int64_t)elem_size % 16 != 0)
    return 0;
  if (num_rows_inner > 1 && layout.stride_inner * (int64_t)elem_size % 16 != 0)
    return 0;
  return 1;
}

/* ---- chunks of N elements to and from f32 ----------------------------------------------------- */
/* Cache hint of a load: default, read-only path (data not written by the kernel), streaming
 * (read once: evict first), or L2 only (ld.global.cg: data other blocks of the running grid wrote,
 * which a stale L1 line must not hide). */
enum ignis_cache_hint {
  IGNIS_CACHE_DEFAULT = 0,
  IGNIS_CACHE_READ_ONLY = 1,
  IGNIS_CACHE_STREAM = 2,
  IGNIS_CACHE_L2 = 3
};

template <int HINT, typename U> __device__ __forceinline__ U ignis_load_hinted(const U *ptr) {
  if constexpr (HINT == IGNIS_CACHE_STREAM)
    return __ldcs(ptr);
  else if constexpr (HINT == IGNIS_CACHE_L2)
    return __ldcg(ptr);
  else if constexpr (HINT == IGNIS_CACHE_READ_ONLY)
    return __ldg(ptr);
  else
    return *ptr;
}

/* A 32-bit word of T (one float, or two f16/bf16) to and from f32. Registers hold 16-byte vectors
 * as uint4 words: an array of 16-bit elements would take one register per element. */
template <typename T> __device__ __forceinline__ void ignis_unpack_word(uint32_t word, float *out);
template <> __device__ __forceinline__ void ignis_unpack_word<float>(uint32_t word, float *out) {
  out[0] = __uint_as_float(word);
}
template <> __device__ __forceinline__ void ignis_unpack_word<__half>(uint32_t word, float *out) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&word));
  out[0] = f.x;
  out[1] = f.y;
}
template <> __device__ __forceinline__ void ignis_unpack_word<__nv_bfloat16>(uint32_t word, float *out) {
  out[0] = __uint_as_float(word << 16);
  out[1] = __uint_as_float(word & 0xffff0000u);
}

/* Rounds to nearest even (two f16/bf16 at once: cvt.rn.{f16,bf16}x2.f32). */
template <typename T> __device__ __forceinline__ uint32_t ignis_pack_word(const float *in);
template <> __device__ __forceinline__ uint32_t ignis_pack_word<float>(const float *in) {
  return __float_as_uint(in[0]);
}
template <> __device__ __forceinline__ uint32_t ignis_pack_word<__half>(const float *in) {
  __half2 h = __floats2half2_rn(in[0], in[1]);
  return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t ignis_pack_word<__nv_bfloat16>(const float *in) {
  __nv_bfloat162 h = __floats2bfloat162_rn(in[0], in[1]);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* The 16 / sizeof(T) elements of a raw 16-byte vector as f32, and back (rounded). */
template <typename T> __device__ __forceinline__ void ignis_raw_to_floats(uint4 raw, float *out) {
  constexpr int per_word = 4 / sizeof(T);
  ignis_unpack_word<T>(raw.x, out);
  ignis_unpack_word<T>(raw.y, out + per_word);
  ignis_unpack_word<T>(raw.z, out + 2 * per_word);
  ignis_unpack_word<T>(raw.w, out + 3 * per_word);
}
template <typename T> __device__ __forceinline__ uint4 ignis_floats_to_raw(const float *in) {
  constexpr int per_word = 4 / sizeof(T);
  return make_uint4(ignis_pack_word<T>(in), ignis_pack_word<T>(in + per_word),
                    ignis_pack_word<T>(in + 2 * per_word), ignis_pack_word<T>(in + 3 * per_word));
}

/* One 16-byte global store (ptr 16-byte aligned). Written as PTX because a uint4 assignment can
 * reach the machine code as four 32-bit stores when the compiler cannot see the alignment. */
__device__ __forceinline__ void ignis_store_raw(void *ptr, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/* Load N consecutive elements as f32. When N elements fill whole 16-byte vectors the access is
 * 16-byte wide (ptr must then be 16-byte aligned); otherwise element by element. */
template <int HINT, typename T, int N>
__device__ __forceinline__ void ignis_load_floats(const T *ptr, float (&out)[N]) {
  if constexpr (N * sizeof(T) % 16 == 0) {
    constexpr int per_vec = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < N / per_vec; ++c)
      ignis_raw_to_floats<T>(ignis_load_hinted<HINT>(reinterpret_cast<const uint4 *>(ptr) + c),
                             out + c * per_vec);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      out[k] = ignis_to_float(ignis_load_hinted<HINT>(ptr + k));
  }
}

/* Store N f32 values rounded to T; 16-byte stores when N elements fill whole vectors. */
template <typename T, int N>
__device__ __forceinline__ void ignis_store_floats(T *ptr, const float (&in)[N]) {
  if constexpr (N * sizeof(T) % 16 == 0) {
    constexpr int per_vec = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < N / per_vec; ++c)
      ignis_store_raw(ptr + c * per_vec, ignis_floats_to_raw<T>(in + c * per_vec));
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      ptr[k] = ignis_from_float<T>(in[k]);
  }
}

/* ---- programmatic dependent launch ------------------------------------------------------------ */
/* Wait for the preceding grid (completed, memory visible) before touching global memory. */
__device__ __forceinline__ void ignis_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* Let the next PDL-launched kernel begin launching (a hint; see the header comment). */
__device__ __forceinline__ void ignis_pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#define IGNIS_CUDA_MAX_DEVICES 64 /* per-device host caches below */

/* Host: compute capability of CUDA device `device` as 10 * major + minor (90: H100 / H200), cached
 * per device; 0 when the runtime cannot tell. */
inline int ignis_compute_capability(int device) {
  static std::atomic<int> known[IGNIS_CUDA_MAX_DEVICES]; /* 0 unknown, else 10 * major + minor */
  const bool cached = device >= 0 && device < IGNIS_CUDA_MAX_DEVICES;
  int cc = cached ? known[device].load(std::memory_order_relaxed) : 0;
  if (cc == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    cc = 10 * major + minor;
    if (cached)
      known[device].store(cc, std::memory_order_relaxed);
  }
  return cc;
}

/* Host: 1 if launches on the current device use PDL (compute capability >= 9.0; IGNIS_DISABLE_PDL=1
 * in the environment, read once, turns it off). */
inline bool ignis_pdl_enabled(void) {
  static const bool disabled = [] {
    const char *value = ignis_env(IGNIS_ENV_DISABLE_PDL);
    return value != nullptr && strcmp(value, "1") == 0;
  }();
  if (disabled)
    return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return false;
  return ignis_compute_capability(device) >= 90;
}

/* Host: let Kernel use `bytes` of dynamic shared memory on the current device. The attribute is
 * set once per kernel and device (the largest size asked so far is remembered), so a run path does
 * not repeat the runtime call; sizes up to the default 48 KB need nothing. */
template <auto Kernel> static inline cudaError_t ignis_allow_dynamic_smem(size_t bytes) {
  static std::atomic<size_t> allowed[IGNIS_CUDA_MAX_DEVICES];
  if (bytes <= 48 * 1024)
    return cudaSuccess;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess)
    return err;
  const bool cached = device >= 0 && device < IGNIS_CUDA_MAX_DEVICES;
  if (cached && allowed[device].load(std::memory_order_relaxed) >= bytes)
    return cudaSuccess;
  err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (err == cudaSuccess && cached)
    allowed[device].store(bytes, std::memory_order_relaxed);
  return err;
}

/* Host: resident blocks per SM of Kernel at `threads` threads and `bytes` of dynamic shared memory
 * on the current device (occupancy calculator; cached per device, once known). 1 when the runtime
 * cannot tell (not cached: asked again next time). */
template <auto Kernel> static inline int ignis_resident_blocks(int threads, size_t bytes) {
  static std::atomic<int> known[IGNIS_CUDA_MAX_DEVICES]; /* 0 unknown */
  int device = 0;
  const bool cached = cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < IGNIS_CUDA_MAX_DEVICES;
  int blocks = cached ? known[device].load(std::memory_order_relaxed) : 0;
  if (blocks > 0)
    return blocks;
  if (ignis_allow_dynamic_smem<Kernel>(bytes) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, threads, bytes) != cudaSuccess)
    blocks = 0;
  (void)cudaGetLastError();
  if (blocks <= 0)
    return 1;
  if (cached)
    known[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

/* Host: launch kernel<<<grid, block, smem, stream>>>(args...) with PDL where ignis_pdl_enabled();
 * returns the launch's error. The kernel must call ignis_pdl_wait() before any global access
 * (but reads of a plan's schedule, see above). */
template <typename... Params, typename... Args>
static inline cudaError_t ignis_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                       cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  if (ignis_pdl_enabled()) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

#endif
