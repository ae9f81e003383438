/* Device helpers shared by every CUDA kernel of ignis, and the host-side launch helpers.
 *
 * Device side: conversion of f16/bf16/f32 to and from f32 (ignis_to_float / ignis_from_float),
 * 16-byte vector loads and stores (ignis_vec: 16 bytes holding 16/sizeof(T) elements), warp and
 * block sum reductions.
 * Host side: IGNIS_CUDA_CHECK for runtime calls inside a launcher (sets the error message and
 * returns IGNIS_ERROR_CUDA), ignis_check_launch after a kernel launch, and a device guard that
 * makes the tensors' device current for a launch and restores the caller's device after. */
#ifndef IGNIS_CUDA_COMMON_CUH
#define IGNIS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/backend.h"
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

#endif
