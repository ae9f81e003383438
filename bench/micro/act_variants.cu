/* Micro benchmark of the memory shapes of the large memory-bound ops (issue 22): which launch
 * shape streams the gated activations (silu, gelu, gelu_tanh _and_mul, 16384 x (2 x 8192) bf16)
 * and the fused residual add + RMSNorm (16384 x 8192 bf16) fastest on this GPU, against the
 * library's own kernels on the same data in the same process. Built by CMake as
 * build/ignis_act_variants when CUDA is on; tools/gpu-check runs it in its bench step (a few
 * seconds). Usage: ignis_act_variants [rows=16384] (the variants are sized for hidden 8192).
 *
 * Activation variants are the library's kernel itself (src/cuda/activation/gated.cuh) at other
 * template shapes: threads per block (T), 16-byte units per thread and tile of each half (U),
 * 16-byte chunks per unit (W: 2 = 32 contiguous bytes per thread), the blocks per SM the register
 * budget must allow (M, __launch_bounds__'s minimum), load and store cache policies, and a
 * persistent grid (P: blocks per SM) or one block per row group. The library row calls
 * ignis_silu_and_mul / ignis_gelu_and_mul / ignis_gelu_tanh_and_mul. A variant's output is
 * compared word for word with the library's on the same input ("same" must be yes: the shape never
 * changes the math).
 *
 * Reading it: the activation row marked "library's LARGE_SHAPE" is what the library launches at
 * this size (its library row should time the same); a faster variant with "same" yes becomes the
 * library's by copying its template arguments into LARGE_SHAPE (src/cuda/activation/activation.cu).
 *
 * Norm variants: a fused add + RMSNorm written here with the library's math (x = input + residual
 * in f32, residual = x rounded, input = x * rstd * weight, one row per block of T threads holding
 * the row in registers, U units of W chunks per thread), against ignis_fused_add_rmsnorm. The
 * residual must match bit for bit; the normalized output may differ by the reduction order
 * (max difference printed in bf16 ulps of the value, normally <= 1).
 *
 * Timing: every call is launched with programmatic dependent launch, as the library launches. Each
 * sample is a burst of BURST calls between two events, the calls rotating over SETS input sets (the
 * sets together far larger than the L2), time per call = burst time / BURST. The variants run in
 * ROUNDS rounds (each variant SAMPLES_PER_ROUND samples per round, in the same order), so drift of
 * the clocks is shared; the time quoted is the median of all samples. GB/s counts the bytes a call
 * must move: activation 2*H*2 read + H*2 written per row; norm 4*H*2 per row + the weight. */
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "cuda/activation/gated.cuh"
#include "ignis/ignis.h"

typedef __nv_bfloat16 bf16;
enum { SETS = 3, BURST = 5, ROUNDS = 3, SAMPLES_PER_ROUND = 7, WARMUP = 3 };

/* ---- activation variants: the library kernel at other shapes ---------------------------------- */
typedef cudaError_t (*act_launch)(const ignis_activation_params *, cudaStream_t, int64_t);

struct act_variant {
  const char *load, *store;
  /* per_sm > 0: a persistent grid of per_sm blocks per SM */
  int threads, units, width, min_blocks, row_blocks, per_sm;
  act_launch launch;
  std::vector<double> us[3];
};

static const char *load_name(int load) {
  static const char *names[] = {"ld", "ld.nc", "ld.cs", "ld.nc.L2::256B", "ld.nc.na.L2ef"};
  return names[load];
}
static const char *store_name(int store) {
  static const char *names[] = {"st", "st.cs", "st.na.L2ef"};
  return names[store];
}

template <int T, int U, int W, int L, int S, int M, int RB = 0> static act_variant act(int per_sm) {
  using shape = gated_shape<T, U, W, L, S, M, RB>;
  return act_variant{
      load_name(L), store_name(S), T, U, W, M, RB, per_sm, ignis_launch_gated<bf16, 8, shape>, {}};
}

/* M: __launch_bounds__ minimum blocks per SM (registers per thread <= 65536 / (M * T)); RB: blocks
 * per row (0: one per tile; 1: one block walks the row's tiles, as FlashInfer's kernel does). */
#define LD(x) GATED_LOAD_##x
#define ST(x) GATED_STORE_##x
static std::vector<act_variant> act_variants() {
  return {
      /* the library's SMALL_SHAPE (the kernel before issue 22) */
      act<256, 4, 1, LD(STREAM), ST(PLAIN), 1>(0),
      act<256, 1, 1, LD(READ_ONLY), ST(PLAIN), 6, 1>(0), /* the library's LARGE_SHAPE */
      act<256, 1, 1, LD(READ_ONLY), ST(PLAIN), 1, 1>(0),
      act<256, 1, 1, LD(READ_ONLY), ST(PLAIN), 8, 1>(0),
      act<256, 1, 1, LD(READ_ONLY), ST(PLAIN), 6, 0>(0),
      act<256, 1, 1, LD(PLAIN), ST(PLAIN), 6, 1>(0),
      act<256, 1, 1, LD(STREAM), ST(PLAIN), 6, 1>(0),
      act<256, 1, 1, LD(STREAM), ST(STREAM), 6, 1>(0),
      act<256, 1, 1, LD(EVICT_FIRST), ST(EVICT_FIRST), 6, 1>(0),
      act<256, 1, 2, LD(READ_ONLY), ST(PLAIN), 4, 1>(0),
      act<256, 2, 1, LD(READ_ONLY), ST(PLAIN), 4, 1>(0),
      act<512, 1, 1, LD(READ_ONLY), ST(PLAIN), 3, 1>(0),
      act<1024, 1, 1, LD(READ_ONLY), ST(PLAIN), 2>(0),
      act<1024, 1, 1, LD(READ_ONLY), ST(PLAIN), 1>(0),
      act<1024, 1, 1, LD(PLAIN), ST(PLAIN), 2>(0),
      act<1024, 1, 1, LD(STREAM), ST(PLAIN), 2>(0),
      act<1024, 1, 1, LD(STREAM), ST(STREAM), 2>(0),
      act<1024, 1, 1, LD(READ_ONLY), ST(STREAM), 2>(0),
      act<1024, 1, 1, LD(EVICT_FIRST), ST(EVICT_FIRST), 2>(0),
      act<1024, 1, 1, LD(READ_ONLY_256B), ST(PLAIN), 2>(0),
      act<512, 2, 1, LD(READ_ONLY), ST(PLAIN), 2>(0),
      act<512, 1, 2, LD(READ_ONLY), ST(PLAIN), 2>(0),
      act<512, 1, 1, LD(READ_ONLY), ST(PLAIN), 4>(0),
      act<512, 2, 1, LD(STREAM), ST(STREAM), 2>(0),
      act<512, 1, 2, LD(EVICT_FIRST), ST(STREAM), 2>(0),
      act<256, 4, 1, LD(READ_ONLY), ST(PLAIN), 1>(0),
      act<256, 2, 2, LD(READ_ONLY), ST(PLAIN), 3>(0),
      act<256, 1, 4, LD(READ_ONLY), ST(PLAIN), 3>(0),
      act<256, 4, 1, LD(STREAM), ST(STREAM), 1>(0),
      act<256, 2, 1, LD(READ_ONLY), ST(PLAIN), 4>(0),
      act<256, 2, 2, LD(EVICT_FIRST), ST(EVICT_FIRST), 3>(0),
      act<128, 4, 2, LD(READ_ONLY), ST(PLAIN), 1>(0),
      act<128, 8, 1, LD(STREAM), ST(PLAIN), 1>(0),
      act<1024, 1, 1, LD(READ_ONLY), ST(PLAIN), 2>(2),
      act<512, 2, 1, LD(READ_ONLY), ST(PLAIN), 2>(2),
      act<256, 4, 1, LD(STREAM), ST(PLAIN), 1>(3),
  };
}

/* ---- norm variants ----------------------------------------------------------------------------- */
/* Sum over the block (T threads, one row); every thread gets it. */
template <int T> __device__ __forceinline__ float block_row_sum(float x, float *scratch) {
  x = ignis_warp_sum(x);
  if (T == 32)
    return x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  return ignis_warp_sum(lane < T / 32 ? scratch[lane] : 0.0f);
}

/* One row per block; hidden == T * U * W * 8 == 8192 (nrm() asserts it). */
template <int T, int U, int W, int L, int S, int M>
__global__ void __launch_bounds__(T, M)
    fused_norm_variant(bf16 *input, bf16 *residual, const bf16 *weight, int64_t hidden, float eps) {
  __shared__ float scratch[32];
  constexpr bool POLICY = L == GATED_LOAD_EVICT_FIRST || S == GATED_STORE_EVICT_FIRST;
  const uint64_t policy = POLICY ? gated_evict_first_policy() : 0;
  bf16 *in_row = input + (int64_t)blockIdx.x * hidden, *res_row = residual + (int64_t)blockIdx.x * hidden;
  ignis_pdl_wait();
  uint4 in[U][W], res[U][W];
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const int c = (i * T + (int)threadIdx.x) * W + w;
      in[i][w] = gated_load_vec<L>(in_row + c * 8, policy);
      res[i][w] = gated_load_vec<L>(res_row + c * 8, policy);
    }
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int w = 0; w < W; ++w)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(weight + ((i * T + (int)threadIdx.x) * W + w) * 8));
  ignis_pdl_launch_dependents();
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const int c = (i * T + (int)threadIdx.x) * W + w;
      float x[8], r[8];
      ignis_raw_to_floats<bf16>(in[i][w], x);
      ignis_raw_to_floats<bf16>(res[i][w], r);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        x[k] += r[k];
        sum += x[k] * x[k];
      }
      gated_store_vec<S>(res_row + c * 8, ignis_floats_to_raw<bf16>(x), policy);
    }
  const float rstd = rsqrtf(block_row_sum<T>(sum, scratch) * (1.0f / (float)hidden) + eps);
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const int c = (i * T + (int)threadIdx.x) * W + w;
      float x[8], r[8], wt[8], y[8];
      ignis_raw_to_floats<bf16>(in[i][w], x);
      ignis_raw_to_floats<bf16>(res[i][w], r);
      ignis_raw_to_floats<bf16>(__ldg(reinterpret_cast<const uint4 *>(weight + c * 8)), wt);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        y[k] = (x[k] + r[k]) * rstd * wt[k];
      gated_store_vec<S>(in_row + c * 8, ignis_floats_to_raw<bf16>(y), policy);
    }
}

typedef cudaError_t (*norm_launch)(bf16 *, bf16 *, const bf16 *, int64_t, int64_t, float, cudaStream_t);

template <int T, int U, int W, int L, int S, int M>
static cudaError_t launch_norm(bf16 *input, bf16 *residual, const bf16 *weight, int64_t rows, int64_t hidden,
                               float eps, cudaStream_t stream) {
  return ignis_launch(fused_norm_variant<T, U, W, L, S, M>, dim3((unsigned)rows), dim3(T), 0, stream, input,
                      residual, weight, hidden, eps);
}

struct norm_variant {
  const char *load, *store;
  int threads, units, width, min_blocks;
  norm_launch launch;
  std::vector<double> us;
};

template <int T, int U, int W, int L, int S, int M> static norm_variant nrm() {
  static_assert(T * U * W * 8 == 8192, "a block holds one row of 8192 bf16");
  return norm_variant{load_name(L), store_name(S), T, U, W, M, launch_norm<T, U, W, L, S, M>, {}};
}

/* Units per thread U and width W of each block size, for rows of 8192 (U * W * T * 8 == 8192). */
static std::vector<norm_variant> norm_variants() {
  return {
      nrm<256, 4, 1, LD(STREAM), ST(PLAIN), 1>(), /* the library's shape at this size */
      nrm<256, 4, 1, LD(STREAM), ST(STREAM), 1>(),
      nrm<256, 2, 2, LD(STREAM), ST(STREAM), 1>(),
      nrm<256, 4, 1, LD(EVICT_FIRST), ST(EVICT_FIRST), 1>(),
      nrm<256, 4, 1, LD(STREAM), ST(STREAM), 4>(),
      nrm<512, 2, 1, LD(STREAM), ST(PLAIN), 2>(),
      nrm<512, 2, 1, LD(STREAM), ST(STREAM), 2>(),
      nrm<512, 1, 2, LD(STREAM), ST(STREAM), 2>(),
      nrm<512, 2, 1, LD(EVICT_FIRST), ST(STREAM), 2>(),
      nrm<1024, 1, 1, LD(PLAIN), ST(PLAIN), 1>(), /* FlashInfer's block (it keeps x in shared memory) */
      nrm<1024, 1, 1, LD(READ_ONLY), ST(PLAIN), 1>(),
      nrm<512, 2, 1, LD(READ_ONLY), ST(PLAIN), 2>(),
      nrm<1024, 1, 1, LD(STREAM), ST(STREAM), 1>(),
      nrm<1024, 1, 1, LD(STREAM), ST(STREAM), 2>(),
      nrm<1024, 1, 1, LD(EVICT_FIRST), ST(EVICT_FIRST), 2>(),
      nrm<128, 8, 1, LD(STREAM), ST(PLAIN), 1>(),
      nrm<128, 4, 2, LD(STREAM), ST(STREAM), 1>(),
  };
}

/* ---- helpers ------------------------------------------------------------------------------------ */
__global__ void fill_bf16(bf16 *data, int64_t count, uint64_t seed) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = __float2bfloat16_rn((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f); /* uniform in [-1, 1) */
  }
}

/* counts[0]: elements that differ; counts[1]: the largest difference, in bf16 ulps of b. */
__global__ void compare_bf16(const bf16 *a, const bf16 *b, int64_t count, unsigned long long *counts) {
  unsigned long long differ = 0;
  unsigned worst = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const unsigned short x = __bfloat16_as_ushort(a[i]), y = __bfloat16_as_ushort(b[i]);
    if (x != y) {
      ++differ;
      const float fx = __bfloat162float(a[i]), fy = __bfloat162float(b[i]);
      const float ulp = fmaxf(fabsf(fy) * (1.0f / 128.0f), 1e-30f);
      worst = max(worst, (unsigned)fminf(fabsf(fx - fy) / ulp, 1e6f));
    }
  }
  if (differ)
    atomicAdd(&counts[0], differ);
  if (worst)
    atomicMax(&counts[1], (unsigned long long)worst);
}

static void fill(bf16 *data, int64_t count, uint64_t seed) {
  fill_bf16<<<1024, 256>>>(data, count, seed);
  CK(cudaGetLastError());
}

static void compare(const bf16 *a, const bf16 *b, int64_t count, unsigned long long *counts_dev,
                    unsigned long long out[2]) {
  CK(cudaMemset(counts_dev, 0, 2 * sizeof(unsigned long long)));
  compare_bf16<<<1024, 256>>>(a, b, count, counts_dev);
  CK(cudaMemcpy(out, counts_dev, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Time `call(set)` as SAMPLES_PER_ROUND bursts; appends microseconds per call to us. */
template <typename F>
static void time_bursts(cudaStream_t stream, cudaEvent_t *events, F call, std::vector<double> &us) {
  for (int i = 0; i < WARMUP; ++i)
    call(i % SETS);
  for (int s = 0; s < SAMPLES_PER_ROUND; ++s) {
    CK(cudaEventRecord(events[2 * s], stream));
    for (int b = 0; b < BURST; ++b)
      call((s * BURST + b) % SETS);
    CK(cudaEventRecord(events[2 * s + 1], stream));
  }
  CK(cudaStreamSynchronize(stream));
  for (int s = 0; s < SAMPLES_PER_ROUND; ++s) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, events[2 * s], events[2 * s + 1]));
    us.push_back(ms * 1e3 / BURST);
  }
}

static ignis_tensor tensor2(void *data, int64_t rows, int64_t cols) {
  ignis_tensor t;
  const int64_t shape[2] = {rows, cols};
  IK(ignis_tensor_init(&t, data, IGNIS_BF16, 2, shape, ignis_device{IGNIS_DEVICE_CUDA, 0}));
  return t;
}

static ignis_status library_act(int kind, const ignis_tensor *in, ignis_tensor *out, cudaStream_t stream) {
  return kind == 0   ? ignis_silu_and_mul(in, out, stream)
         : kind == 1 ? ignis_gelu_and_mul(in, out, stream)
                     : ignis_gelu_tanh_and_mul(in, out, stream);
}

int main(int argc, char **argv) {
  const int64_t rows = argc > 1 ? atoll(argv[1]) : 16384, hidden = 8192;
  if (rows <= 0) {
    fprintf(stderr, "ignis_act_variants: rows must be positive (got %s)\n", argv[1]);
    return 2;
  }
  CK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int sms = prop.multiProcessorCount;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t events[2 * SAMPLES_PER_ROUND];
  for (auto &e : events)
    CK(cudaEventCreate(&e));
  unsigned long long *counts_dev;
  CK(cudaMalloc(&counts_dev, 2 * sizeof(unsigned long long)));

  /* ---- gated activations ---- */
  const int64_t in_elems = rows * 2 * hidden, out_elems = rows * hidden;
  bf16 *act_in, *act_out, *act_ref;
  CK(cudaMalloc(&act_in, (size_t)SETS * in_elems * sizeof(bf16)));
  CK(cudaMalloc(&act_out, (size_t)SETS * out_elems * sizeof(bf16)));
  CK(cudaMalloc(&act_ref, (size_t)out_elems * sizeof(bf16)));
  fill(act_in, SETS * in_elems, 1);
  fill(act_out, SETS * out_elems, 2);
  ignis_tensor in_t[SETS], out_t[SETS];
  ignis_activation_params params[SETS];
  for (int s = 0; s < SETS; ++s) {
    in_t[s] = tensor2(act_in + s * in_elems, rows, 2 * hidden);
    out_t[s] = tensor2(act_out + s * out_elems, rows, hidden);
    params[s] = ignis_activation_params{};
    params[s].kind = IGNIS_ACT_SILU;
    params[s].num_rows_outer = 1;
    params[s].num_rows_inner = rows;
    params[s].hidden = hidden;
    params[s].dtype = IGNIS_BF16;
    params[s].input = act_in + s * in_elems;
    params[s].input_layout = ignis_row_layout{0, 2 * hidden};
    params[s].out = act_out + s * out_elems;
    params[s].out_layout = ignis_row_layout{0, hidden};
  }
  const double act_bytes = (double)rows * hidden * 2 * 3;
  std::vector<act_variant> variants = act_variants();
  std::vector<double> library_us[3];
  const char *kinds[3] = {"silu", "gelu", "gelu_tanh"};
  const ignis_activation_kind kind_ids[3] = {IGNIS_ACT_SILU, IGNIS_ACT_GELU, IGNIS_ACT_GELU_TANH};
  /* same[v][k]: the variant's output equals the library's on set 0 */
  std::vector<std::array<int, 3>> same(variants.size());
  for (int k = 0; k < 3; ++k) {
    IK(library_act(k, &in_t[0], &out_t[0], stream));
    CK(cudaMemcpyAsync(act_ref, act_out, out_elems * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    CK(cudaStreamSynchronize(stream));
    for (size_t v = 0; v < variants.size(); ++v) {
      ignis_activation_params p = params[0];
      p.kind = kind_ids[k];
      CK(cudaMemsetAsync(act_out, 0xff, out_elems * sizeof(bf16), stream));
      CK(variants[v].launch(&p, stream, variants[v].per_sm ? (int64_t)variants[v].per_sm * sms : 0));
      CK(cudaStreamSynchronize(stream));
      unsigned long long diff[2];
      compare(act_out, act_ref, out_elems, counts_dev, diff);
      same[v][k] = diff[0] == 0;
    }
  }
  for (int round = 0; round < ROUNDS; ++round)
    for (int k = 0; k < 3; ++k) {
      time_bursts(
          stream, events, [&](int s) { IK(library_act(k, &in_t[s], &out_t[s], stream)); }, library_us[k]);
      for (auto &v : variants)
        time_bursts(
            stream, events,
            [&](int s) {
              ignis_activation_params p = params[s];
              p.kind = kind_ids[k];
              CK(v.launch(&p, stream, v.per_sm ? (int64_t)v.per_sm * sms : 0));
            },
            v.us[k]);
    }
  CK(cudaGetLastError());

  printf("# ignis_act_variants on %s (%d SMs): gated activations %lldx(2x%lld) bf16, %.1f MB per call; "
         "median of %d bursts of %d calls over %d input sets (%.2f GiB)\n",
         prop.name, sms, (long long)rows, (long long)hidden, act_bytes / 1e6, ROUNDS * SAMPLES_PER_ROUND,
         BURST, SETS, (double)SETS * (in_elems + out_elems) * 2 / (1 << 30));
  printf("%-10s %-46s %9s %8s %7s %5s\n", "op", "variant (T thr, U units x W 16B, M, RB/row, P/SM)", "us",
         "GB/s", "vs lib", "same");
  for (int k = 0; k < 3; ++k) {
    const double lib = median(library_us[k]);
    printf("%-10s %-46s %9.2f %8.1f %7s %5s\n", kinds[k], "library (ignis_*_and_mul)", lib,
           act_bytes / lib / 1e3, "1.000", "-");
    size_t best = 0;
    for (size_t v = 0; v < variants.size(); ++v) {
      const double us = median(variants[v].us[k]);
      if (us < median(variants[best].us[k]))
        best = v;
      char name[96], grid[16] = "";
      if (variants[v].per_sm)
        snprintf(grid, sizeof grid, " P%d", variants[v].per_sm);
      else if (variants[v].row_blocks)
        snprintf(grid, sizeof grid, " RB%d", variants[v].row_blocks);
      snprintf(name, sizeof name, "T%d U%d W%d M%d %s %s%s", variants[v].threads, variants[v].units,
               variants[v].width, variants[v].min_blocks, variants[v].load, variants[v].store, grid);
      printf("%-10s %-46s %9.2f %8.1f %7.3f %5s\n", kinds[k], name, us, act_bytes / us / 1e3, lib / us,
             same[v][k] ? "yes" : "NO");
    }
    printf("# %s best: T%d U%d W%d M%d %s %s RB%d P%d, %.1f GB/s (library %.1f)\n", kinds[k],
           variants[best].threads, variants[best].units, variants[best].width, variants[best].min_blocks,
           variants[best].load, variants[best].store, variants[best].row_blocks, variants[best].per_sm,
           act_bytes / median(variants[best].us[k]) / 1e3, act_bytes / lib / 1e3);
  }
  CK(cudaFree(act_in));
  CK(cudaFree(act_out));
  CK(cudaFree(act_ref));

  /* ---- fused add + RMSNorm ---- */
  const int64_t elems = rows * hidden;
  const float eps = 1e-6f;
  bf16 *x, *r, *w, *x0, *r0, *x_ref, *r_ref;
  CK(cudaMalloc(&x, (size_t)SETS * elems * sizeof(bf16)));
  CK(cudaMalloc(&r, (size_t)SETS * elems * sizeof(bf16)));
  CK(cudaMalloc(&w, (size_t)SETS * hidden * sizeof(bf16)));
  CK(cudaMalloc(&x0, (size_t)elems * sizeof(bf16)));
  CK(cudaMalloc(&r0, (size_t)elems * sizeof(bf16)));
  CK(cudaMalloc(&x_ref, (size_t)elems * sizeof(bf16)));
  CK(cudaMalloc(&r_ref, (size_t)elems * sizeof(bf16)));
  fill(x, SETS * elems, 3);
  fill(r, SETS * elems, 4);
  fill(w, SETS * hidden, 5);
  CK(cudaMemcpy(x0, x, elems * sizeof(bf16), cudaMemcpyDeviceToDevice));
  CK(cudaMemcpy(r0, r, elems * sizeof(bf16), cudaMemcpyDeviceToDevice));
  ignis_tensor xt[SETS], rt[SETS], wt[SETS];
  for (int s = 0; s < SETS; ++s) {
    xt[s] = tensor2(x + s * elems, rows, hidden);
    rt[s] = tensor2(r + s * elems, rows, hidden);
    const int64_t shape[1] = {hidden};
    IK(ignis_tensor_init(&wt[s], w + s * hidden, IGNIS_BF16, 1, shape, ignis_device{IGNIS_DEVICE_CUDA, 0}));
  }
  IK(ignis_fused_add_rmsnorm(&xt[0], &rt[0], &wt[0], eps, stream));
  CK(cudaMemcpyAsync(x_ref, x, elems * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
  CK(cudaMemcpyAsync(r_ref, r, elems * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
  std::vector<norm_variant> norms = norm_variants();
  /* per variant: residual elements that differ, out elements that differ, out's largest difference in ulps */
  std::vector<std::array<unsigned long long, 3>> checks(norms.size());
  for (size_t v = 0; v < norms.size(); ++v) {
    CK(cudaMemcpyAsync(x, x0, elems * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    CK(cudaMemcpyAsync(r, r0, elems * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    CK(norms[v].launch(x, r, w, rows, hidden, eps, stream));
    CK(cudaStreamSynchronize(stream));
    unsigned long long dr[2], dx[2];
    compare(r, r_ref, elems, counts_dev, dr);
    compare(x, x_ref, elems, counts_dev, dx);
    checks[v] = {dr[0], dx[0], dx[1]};
  }
  std::vector<double> norm_library_us;
  for (int round = 0; round < ROUNDS; ++round) {
    time_bursts(
        stream, events, [&](int s) { IK(ignis_fused_add_rmsnorm(&xt[s], &rt[s], &wt[s], eps, stream)); },
        norm_library_us);
    for (auto &v : norms)
      time_bursts(
          stream, events,
          [&](int s) {
            CK(v.launch(x + s * elems, r + s * elems, w + s * hidden, rows, hidden, eps, stream));
          },
          v.us);
  }
  CK(cudaGetLastError());
  const double norm_bytes = (double)rows * hidden * 2 * 4 + hidden * 2;
  const double lib = median(norm_library_us);
  printf(
      "# fused_add_rmsnorm %lldx%lld bf16, %.1f MB per call; same timing; residual must match bit for bit, "
      "out within 1 ulp\n",
      (long long)rows, (long long)hidden, norm_bytes / 1e6);
  printf("%-10s %-46s %9s %8s %7s %s\n", "op", "variant (T threads = one row, U units x W 16B chunks)", "us",
         "GB/s", "vs lib", "residual/out differ, max ulps");
  printf("%-10s %-46s %9.2f %8.1f %7s %s\n", "fused_add", "library (ignis_fused_add_rmsnorm)", lib,
         norm_bytes / lib / 1e3, "1.000", "-");
  size_t best = 0;
  for (size_t v = 0; v < norms.size(); ++v) {
    const double us = median(norms[v].us);
    if (us < median(norms[best].us))
      best = v;
    char name[96];
    snprintf(name, sizeof name, "T%d U%d W%d M%d %s %s", norms[v].threads, norms[v].units, norms[v].width,
             norms[v].min_blocks, norms[v].load, norms[v].store);
    printf("%-10s %-46s %9.2f %8.1f %7.3f %llu/%llu, %llu\n", "fused_add", name, us, norm_bytes / us / 1e3,
           lib / us, checks[v][0], checks[v][1], checks[v][2]);
  }
  printf("# fused_add best: T%d U%d W%d M%d %s %s, %.1f GB/s (library %.1f)\n", norms[best].threads,
         norms[best].units, norms[best].width, norms[best].min_blocks, norms[best].load, norms[best].store,
         norm_bytes / median(norms[best].us) / 1e3, norm_bytes / lib / 1e3);
  for (bf16 *p : {x, r, w, x0, r0, x_ref, r_ref})
    CK(cudaFree(p));
  CK(cudaFree(counts_dev));
  return 0;
}
