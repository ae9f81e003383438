/* Read/write mix ceilings of a CUDA device, for the header of `ignis bench` (issue 22): the copy
 * ceiling (cudaMemcpy) is one mix only, and an op that reads twice what it writes (the gated
 * activations) can stream faster than a copy. A probe kernel reads R streams and writes W streams
 * of equal length (256 MiB each, 16-byte vectors: out_j[i] = in_0[i] ^ in_1[i] ^ j), for the mixes
 * of the memory-bound ops: 1 read 0 written (decode, sampling), 1:1 (RMSNorm, RoPE out of place),
 * 2:1 (gated activations), 2:2 (fused add + RMSNorm, RoPE in place). Each mix is run in several
 * variants, and its ceiling is the best of them:
 *   - threads per block T, units per thread U and 16-byte chunks per unit W (W 2: a thread reads
 *     32 contiguous bytes by two loads), so 2 * U * W loads are in flight per thread before use;
 *   - loads plain, read-only (ld.global.nc), streaming (ld.global.cs) or L1 no-allocate with an L2
 *     evict-first policy; stores plain, streaming (st.global.cs) or L1 no-allocate, L2 evict-first.
 * One block per tile of T * U * W vectors. The read-only mix keeps its loads alive by a store that
 * a value never taken guards. Timed like the copy ceiling: events around each launch after warm-up,
 * median of PROBE_SAMPLES; GB/s counts every byte read and written.
 *
 * Uses the CUDA runtime only (bench/ stays on the public API of the library). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "bench.h"
}

#define PROBE_STREAM_BYTES ((size_t)256 << 20)
#define PROBE_WARMUP 2
#define PROBE_SAMPLES 9

enum { LOAD_PLAIN = 0, LOAD_READ_ONLY = 1, LOAD_STREAM = 2, LOAD_EVICT_FIRST = 3 };
enum { STORE_PLAIN = 0, STORE_STREAM = 1, STORE_EVICT_FIRST = 2 };

struct probe_args {
  const uint4 *in[2];
  uint4 *out[2];
  int64_t vectors; /* per stream, a multiple of every variant's tile */
};

template <int LOAD> __device__ __forceinline__ uint4 probe_load(const uint4 *ptr, uint64_t policy) {
  uint4 v;
  if constexpr (LOAD == LOAD_PLAIN)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else if constexpr (LOAD == LOAD_READ_ONLY)
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else if constexpr (LOAD == LOAD_STREAM)
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr), "l"(policy));
  return v;
}

template <int STORE> __device__ __forceinline__ void probe_store(uint4 *ptr, uint4 v, uint64_t policy) {
  if constexpr (STORE == STORE_PLAIN)
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else if constexpr (STORE == STORE_STREAM)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  else
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(ptr),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
}

template <int R, int W, int T, int U, int WIDTH, int LOAD, int STORE>
__global__ void __launch_bounds__(T) mix_probe(probe_args a) {
  constexpr bool POLICY = LOAD == LOAD_EVICT_FIRST || STORE == STORE_EVICT_FIRST;
  uint64_t policy = 0;
  if (POLICY)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const int64_t first = (int64_t)blockIdx.x * T * U * WIDTH;
  uint4 v[R][U][WIDTH];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < U; ++i)
#pragma unroll
      for (int w = 0; w < WIDTH; ++w)
        v[r][i][w] = probe_load<LOAD>(a.in[r] + first + (i * T + (int)threadIdx.x) * WIDTH + w, policy);
  uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int w = 0; w < WIDTH; ++w) {
      uint4 x = v[0][i][w];
      if (R == 2)
        x = make_uint4(x.x ^ v[R - 1][i][w].x, x.y ^ v[R - 1][i][w].y, x.z ^ v[R - 1][i][w].z,
                       x.w ^ v[R - 1][i][w].w);
      const int64_t at = first + (i * T + (int)threadIdx.x) * WIDTH + w;
#pragma unroll
      for (int j = 0; j < W; ++j)
        probe_store<STORE>(a.out[j] + at, make_uint4(x.x ^ j, x.y, x.z, x.w), policy);
      if (W == 0)
        acc = make_uint4(acc.x ^ x.x, acc.y + x.y, acc.z ^ x.z, acc.w + x.w);
    }
  if (W == 0 && acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == 0x85ebca6bu && acc.w == 0xc2b2ae35u)
    a.out[0][first + threadIdx.x] = acc; /* never in practice: keeps the loads */
}

typedef void (*probe_kernel)(probe_args);

struct probe_variant {
  const char *name;
  int tile; /* vectors per block */
  int threads;
  probe_kernel kernel;
};

#define PROBE_VARIANTS(R, W)                                                                                 \
  {                                                                                                          \
    {"T256 U4 16B ld st", 256 * 4, 256, mix_probe<R, W, 256, 4, 1, LOAD_PLAIN, STORE_PLAIN>},                \
        {"T256 U4 16B ld.cs st.cs", 256 * 4, 256, mix_probe<R, W, 256, 4, 1, LOAD_STREAM, STORE_STREAM>},    \
        {"T256 U8 16B ld.cs st", 256 * 8, 256, mix_probe<R, W, 256, 8, 1, LOAD_STREAM, STORE_PLAIN>},        \
        {"T256 U2 32B ld.nc st", 256 * 4, 256, mix_probe<R, W, 256, 2, 2, LOAD_READ_ONLY, STORE_PLAIN>},     \
        {"T256 U2 32B ld.cs st.cs", 256 * 4, 256, mix_probe<R, W, 256, 2, 2, LOAD_STREAM, STORE_STREAM>},    \
        {"T256 U4 32B ld.na.ef st.na.ef", 256 * 8, 256,                                                      \
         mix_probe<R, W, 256, 4, 2, LOAD_EVICT_FIRST, STORE_EVICT_FIRST>},                                   \
        {"T1024 U1 16B ld.nc st", 1024, 1024, mix_probe<R, W, 1024, 1, 1, LOAD_READ_ONLY, STORE_PLAIN>},     \
        {"T512 U2 32B ld.nc st.cs", 512 * 4, 512, mix_probe<R, W, 512, 2, 2, LOAD_READ_ONLY, STORE_STREAM>}, \
        {"T256 U1 16B ld.nc st", 256, 256, mix_probe<R, W, 256, 1, 1, LOAD_READ_ONLY, STORE_PLAIN>}, {       \
      "T1024 U1 16B ld st", 1024, 1024, mix_probe<R, W, 1024, 1, 1, LOAD_PLAIN, STORE_PLAIN>                 \
    }                                                                                                        \
  }
#define PROBE_VARIANT_COUNT 10

static const probe_variant variants_r1w0[PROBE_VARIANT_COUNT] = PROBE_VARIANTS(1, 0);
static const probe_variant variants_r1w1[PROBE_VARIANT_COUNT] = PROBE_VARIANTS(1, 1);
static const probe_variant variants_r2w1[PROBE_VARIANT_COUNT] = PROBE_VARIANTS(2, 1);
static const probe_variant variants_r2w2[PROBE_VARIANT_COUNT] = PROBE_VARIANTS(2, 2);

static int cuda_fail(const char *what, cudaError_t error) {
  return bench_fail("mix probe: %s failed: %s", what, cudaGetErrorString(error));
}

static int compare_us(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median microseconds of one variant. */
static int time_variant(const probe_variant *v, const probe_args *args, cudaStream_t stream,
                        cudaEvent_t *events, double *us) {
  const unsigned blocks = (unsigned)(args->vectors / v->tile);
  for (int i = 0; i < PROBE_WARMUP; ++i)
    v->kernel<<<blocks, v->threads, 0, stream>>>(*args);
  cudaError_t error = cudaEventRecord(events[0], stream);
  for (int i = 0; error == cudaSuccess && i < PROBE_SAMPLES; ++i) {
    v->kernel<<<blocks, v->threads, 0, stream>>>(*args);
    error = cudaEventRecord(events[i + 1], stream);
  }
  if (error == cudaSuccess)
    error = cudaEventSynchronize(events[PROBE_SAMPLES]);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return cuda_fail(v->name, error);
  double samples[PROBE_SAMPLES];
  for (int i = 0; i < PROBE_SAMPLES; ++i) {
    float ms = 0;
    if ((error = cudaEventElapsedTime(&ms, events[i], events[i + 1])) != cudaSuccess)
      return cuda_fail("cudaEventElapsedTime", error);
    samples[i] = (double)ms * 1e3;
  }
  qsort(samples, PROBE_SAMPLES, sizeof samples[0], compare_us);
  *us = samples[PROBE_SAMPLES / 2];
  return 0;
}

static int probe_mixes(ignis_device device, void *const *buffers, cudaStream_t stream, cudaEvent_t *events,
                       bench_mix_ceiling *out) {
  static const struct {
    int reads, writes;
    const probe_variant *variants;
  } mixes[BENCH_MIX_COUNT] = {
      {1, 0, variants_r1w0}, {1, 1, variants_r1w1}, {2, 1, variants_r2w1}, {2, 2, variants_r2w2}};
  probe_args args = {{(const uint4 *)buffers[0], (const uint4 *)buffers[1]},
                     {(uint4 *)buffers[2], (uint4 *)buffers[3]},
                     (int64_t)(PROBE_STREAM_BYTES / 16)};
  for (int m = 0; m < BENCH_MIX_COUNT; ++m) {
    bench_mix_ceiling *c = &out[m];
    c->reads = mixes[m].reads;
    c->writes = mixes[m].writes;
    c->gbps = 0;
    c->variants = PROBE_VARIANT_COUNT;
    const double bytes = (double)PROBE_STREAM_BYTES * (mixes[m].reads + mixes[m].writes);
    for (int v = 0; v < PROBE_VARIANT_COUNT; ++v) {
      double us;
      if (time_variant(&mixes[m].variants[v], &args, stream, events, &us) != 0)
        return -1;
      const double gbps = bytes / (us * 1e-6) / 1e9;
      if (gbps > c->gbps) {
        c->gbps = gbps;
        snprintf(c->best, sizeof c->best, "%s", mixes[m].variants[v].name);
      }
    }
  }
  return bench_device_sync(device);
}

int bench_measure_mix_ceilings(ignis_device device, bench_mix_ceiling *out) {
  if (device.type != IGNIS_DEVICE_CUDA)
    return bench_fail("the read/write mix probe runs on CUDA devices only");
  void *stream_ptr = NULL;
  if (bench_device_stream(device, &stream_ptr) != 0)
    return -1;
  cudaStream_t stream = (cudaStream_t)stream_ptr;
  void *buffers[4] = {NULL, NULL, NULL, NULL};
  int rc = 0;
  for (int i = 0; rc == 0 && i < 4; ++i) {
    rc = bench_device_alloc(device, PROBE_STREAM_BYTES, &buffers[i]);
    if (rc == 0)
      rc = bench_fill_random(device, buffers[i], (int64_t)PROBE_STREAM_BYTES, IGNIS_F32, 11 + (uint64_t)i);
  }
  cudaEvent_t events[PROBE_SAMPLES + 1] = {};
  for (int i = 0; rc == 0 && i <= PROBE_SAMPLES; ++i) {
    cudaError_t error = cudaEventCreate(&events[i]);
    if (error != cudaSuccess)
      rc = cuda_fail("cudaEventCreate", error);
  }
  if (rc == 0)
    rc = bench_device_sync(device);
  if (rc == 0)
    rc = probe_mixes(device, buffers, stream, events, out);
  for (int i = 0; i <= PROBE_SAMPLES; ++i)
    if (events[i])
      cudaEventDestroy(events[i]);
  for (int i = 0; i < 4; ++i)
    if (buffers[i])
      bench_device_free(device, buffers[i]);
  return rc;
}
