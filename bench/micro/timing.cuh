/* Timing pieces shared by the micro benchmarks under bench/micro: a GPU spin that queues a burst of
 * calls before it starts (so the host's issue cost stays out of the measured time), the median, the
 * timed burst itself, and the bandwidth probes a benchmark quotes its floor against (a streaming
 * read of 1 GiB; a device-to-device copy).
 *
 * micro_time_us(stream, timing, sets, call): `timing.warmup` calls, then `timing.samples` bursts of
 * `timing.burst` calls, each burst queued behind a spin of `timing.spin_cycles` and timed with
 * events; returns the median µs per call. call(set) receives set = i % sets for the i-th call, so a
 * benchmark rotates its input copies (sets >= 1) and no call is served from the previous one's L2. */
#pragma once

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"

struct micro_timing {
  int warmup, samples, burst;
  long long spin_cycles; /* 2e6 is ~1 ms on an H100 / H200 */
};

static __global__ void micro_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

/* Reads x once with streaming loads; writes *sink only in the (never taken) case the data asks. */
static __global__ void micro_stream_read(const uint4 *x, size_t count, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x) {
    const uint4 v = __ldcs(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u)
    *sink = acc;
}

static inline double micro_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <typename F>
static double micro_time_us(cudaStream_t stream, const micro_timing &t, int sets, F call) {
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  for (int i = 0; i < t.warmup; ++i)
    call(i % sets);
  std::vector<double> us;
  int next = 0;
  for (int s = 0; s < t.samples; ++s) {
    micro_spin<<<1, 1, 0, stream>>>(t.spin_cycles);
    CK(cudaEventRecord(start, stream));
    for (int b = 0; b < t.burst; ++b)
      call(next++ % sets);
    CK(cudaEventRecord(stop, stream));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1e3 / t.burst);
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  return micro_median(us);
}

/* Bytes per second of a streaming read of 1 GiB on `sms` SMs and, when copy != NULL, of a
 * device-to-device copy (read + write bytes). */
static void micro_bandwidths(cudaStream_t stream, const micro_timing &t, unsigned *sink, int sms, double *read,
                             double *copy) {
  const size_t bytes = (size_t)1 << 30;
  void *x = nullptr, *y = nullptr;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMemsetAsync(x, 1, bytes, stream));
  const double read_us = micro_time_us(stream, t, 1, [&](int) {
    micro_stream_read<<<sms * 4, 512, 0, stream>>>(static_cast<const uint4 *>(x), bytes / 16, sink);
  });
  *read = bytes / (read_us * 1e-6);
  if (copy) {
    CK(cudaMalloc(&y, bytes / 2));
    const double copy_us = micro_time_us(
        stream, t, 1, [&](int) { CK(cudaMemcpyAsync(y, x, bytes / 2, cudaMemcpyDeviceToDevice, stream)); });
    *copy = bytes / (copy_us * 1e-6);
    CK(cudaFree(y));
  }
  CK(cudaFree(x));
}
