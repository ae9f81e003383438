/* Micro benchmark of the small-M grouped GEMM (MoE decode, issue 19): the compile-time shapes of
 * ignis' weight-streaming kernel (src/cuda/gemm/grouped_skinny.cuh) and its plan against the
 * library's call of it and the 128x128 grouped kernel (src/cuda/gemm/grouped_gemm.cu, what
 * IGNIS_GEMM_GROUPED_SKINNY=0 runs), on the MoE decode shapes: Qwen3-30B-A3B (E128 top-8, bf16)
 * fc1 N1536 K2048 and fc2 N2048 K768 at T1 and T16; Mixtral-8x7B (E8 top-2, bf16) fc1 N28672 K4096
 * and fc2 N4096 K14336 at T1 and T16; DeepSeek-V3 (E256 top-8, fp8 e4m3 with 128x128 weight and
 * 1x128 activation scales, f32) fc1 N4096 K7168 and fc2 N7168 K2048 at T1, T16 and T64; and the
 * dense block-scaled fp8 products of decode that ignis_mm_fp8_blockscale sends to this kernel as one
 * group up to M 16 ("dense fp8": M 4 to 64 rows, to show where cuBLASLt wins, N2112 K7168 and
 * N7168 K2048; the calls rotate over 16 copies of the weight, picked by weight_indices, so it comes
 * from HBM), and the dense 16-bit products of decode (bf16 N7168 K2048 and N4096 K4096 at M 1 to
 * 64: ignis_mm's shapes, issue 18's 1.5x-floor bar; baseline cuBLASLt, "library" the routed
 * ignis_mm call). For every dense shape the rows "sm90 swap-AB" are the Hopper small-M kernel
 * (src/cuda/gemm/gemm_small_m_sm90.cu): K split across at most 8 or 4 blocks or none, with the
 * library's consumer warpgroups (2) or 1 or 4, planned for one block per SM or "2/SM" (half the
 * ring each). Built by
 * CMake as build/ignis_grouped_skinny when CUDA is on. Usage: ignis_grouped_skinny [model] (only the
 * shapes whose model name contains `model`, e.g. "dense").
 *
 * Rows: "128x128 (SKINNY=0)" is ignis_grouped_mm / ignis_grouped_mm_fp8_blockscale with
 * IGNIS_GEMM_GROUPED_SKINNY=0 (set by this program before the library reads it), for the dense
 * shapes "cuBLASLt (SKINNY=0)" is ignis_mm_fp8_blockscale likewise (cuBLASLt); "library" the
 * small-M path as the library runs it (ignis_cuda_grouped_skinny), then variants: "rR uU" = R 16-row
 * tiles per warp, U steps of 64 bytes of K per batch, "pf" = the next batch prefetched, "ef" =
 * weight loads marked L2 evict-first, "mb1" = __launch_bounds__ minimum of 1 block per SM (more
 * registers), "ntN" = chunks of 8 N rows whatever the plan says, "splitS" = K split across up to
 * S blocks (dense shapes only: the room the dense GEMM has), "/S" = the plan aims at S blocks per
 * SM. For the dense shapes "library" is ignis_cuda_gemm_grouped_skinny, the dense path with its
 * split-K room, whether or not the library routes that M there (include/ignis/gemm.h). The plan
 * column: slots x slices of N x splits of K (rows per chunk, warps splitting K). The library's
 * shapes are LIBRARY_CONFIG,
 * LIBRARY_CONFIG_FP8 and PER_SM in src/cuda/gemm/grouped_skinny.cu ("r16 u4 pf /4" for 16-bit,
 * "r16 u2 pf /4" for fp8); a faster variant becomes the library's by copying its template
 * arguments there.
 *
 * Data: weights of every expert uniform in [-1, 1) (bf16) or [-2, 2) (e4m3), activations likewise,
 * scales uniform in [0.01, 0.1). Routing: each token picks top_k distinct experts at random; calls
 * rotate over SETS routings (their own m_indptr), so consecutive calls read mostly different
 * experts and the weights come from HBM. "active" is the mean number of experts a call reads.
 * Check: routing 0 of every row against an fp64 reference computed on the GPU; err/bound is the
 * worst |out - ref| / (2^-8 |ref| + K 2^-24 sum |terms|), at most 1 to pass; "same" says whether a
 * second call gives the same bits.
 *
 * Timing (bench/micro/timing.cuh): each sample is a burst of calls queued behind a GPU spin (host
 * launch cost does not show), between two events; the median of the samples (TIMING).
 * Columns: µs per call, GB/s of the weights actually read (active experts x N x K x element size, over the
 * time), "x floor" = the time over those bytes / the read bandwidth measured here (a streaming read of 1 GiB;
 * the issue's bar is at most 1.5), "x copy floor" the same over the device-to-device copy bandwidth measured
 * here (bytes read + written per second of a 512 MiB cudaMemcpy), and "vs base" the ratio to the
 * first row (the 128x128 kernel, or cuBLASLt for the dense shapes; above 1: faster). */
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemm/gemm_small_m_sm90.h"
#include "cuda/gemm/grouped_skinny.cuh"
#include "cuda/gemm/grouped_skinny.h"
#include "ignis/ignis.h"
#include "timing.cuh"

typedef __nv_bfloat16 bf16;
typedef ignis_grouped_skinny_e4m3 e4m3;
enum { SETS = 16 };
static const micro_timing TIMING = {3, 15, 20, 2000000}; /* warmup, samples, burst, spin */

/* ---- kernels of the harness ------------------------------------------------------------------ */
__device__ float hash_uniform(size_t i, uint32_t seed) { /* [-1, 1) */
  uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) * 40503u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  h *= 3266489917u;
  h ^= h >> 16;
  return (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_bf16(bf16 *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16_rn(hash_uniform(i, seed));
}

__global__ void fill_e4m3(unsigned char *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = (unsigned char)__nv_cvt_float_to_fp8(2.0f * hash_uniform(i, seed), __NV_SATFINITE, __NV_E4M3);
}

__global__ void fill_scales(float *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = 0.055f + 0.045f * hash_uniform(i, seed);
}

__device__ double element(const void *base, bool fp8, size_t i) {
  if (fp8)
    return (double)static_cast<float>(reinterpret_cast<const __nv_fp8_e4m3 *>(base)[i]);
  return (double)__bfloat162float(static_cast<const bf16 *>(base)[i]);
}

/* ref[m, n] in fp64 (per 128-wide K block, scaled, for fp8) and the sum of |terms| */
__global__ void reference(const void *a, const void *w, bool fp8, const int *row_group, int m, int n, int k,
                          const float *a_scale, const float *b_scale, double *ref, double *abs_sum) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m * n)
    return;
  const int row = i / n, col = i % n, g = row_group[row], kbs = (k + 127) / 128, nbs = (n + 127) / 128;
  double s = 0, s_abs = 0;
  for (int kb = 0; kb < kbs; ++kb) {
    double part = 0, part_abs = 0;
    for (int kk = kb * 128; kk < k && kk < kb * 128 + 128; ++kk) {
      const double term =
          element(a, fp8, (size_t)row * k + kk) * element(w, fp8, ((size_t)g * n + col) * k + kk);
      part += term;
      part_abs += fabs(term);
    }
    const double scale = fp8 ? (double)a_scale[(size_t)row * kbs + kb] *
                                   (double)b_scale[((size_t)g * nbs + col / 128) * kbs + kb]
                             : 1.0;
    s += part * scale;
    s_abs += part_abs * scale;
  }
  ref[i] = s;
  abs_sum[i] = s_abs;
}

/* ---- variants ---------------------------------------------------------------------------------- */
typedef ignis_status (*variant_fn)(const ignis_grouped_skinny_args &, int, int, cudaStream_t,
                                   ignis_grouped_skinny_plan *, int, const ignis_grouped_skinny_split_room *);

template <typename T, typename Cfg>
static ignis_status run_variant(const ignis_grouped_skinny_args &args, int sms, int per_sm,
                                cudaStream_t stream, ignis_grouped_skinny_plan *plan, int nt,
                                const ignis_grouped_skinny_split_room *room) {
  return ignis_grouped_skinny_launch<T, Cfg>(args, sms, per_sm, stream, plan, nt, room);
}

struct variant {
  const char *name;
  variant_fn fn;
  int per_sm;
  int nt;     /* 0: the plan's rows per chunk; else 8 nt */
  int splits; /* dense shapes: the most splits of K (0 or 1: none) */
};

template <int RT, int U, bool PF, int LOAD, int MB>
using config = ignis_grouped_skinny_config<RT, U, PF, LOAD, MB>;
enum { PLAIN = IGNIS_SKINNY_LOAD_PLAIN, EF = IGNIS_SKINNY_LOAD_EVICT_FIRST };

static const variant VARIANTS_16[] = {
    {"r16 u4 pf /4", run_variant<bf16, config<1, 4, true, PLAIN, 2>>, 4},
    {"r16 u4 pf /2", run_variant<bf16, config<1, 4, true, PLAIN, 2>>, 2},
    {"r16 u4 pf /8", run_variant<bf16, config<1, 4, true, PLAIN, 2>>, 8},
    {"r16 u2 pf /4", run_variant<bf16, config<1, 2, true, PLAIN, 2>>, 4},
    {"r16 u8 /4", run_variant<bf16, config<1, 8, false, PLAIN, 2>>, 4},
    {"r32 u2 pf /4", run_variant<bf16, config<2, 2, true, PLAIN, 2>>, 4},
    {"r16 u4 pf ef /4", run_variant<bf16, config<1, 4, true, EF, 2>>, 4},
};
static const variant VARIANTS_FP8[] = {
    {"r16 u2 pf /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4},
    {"r16 u2 pf /2", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 2},
    {"r16 u2 pf /8", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 8},
    {"r16 u4 pf mb1 /4", run_variant<e4m3, config<1, 4, true, PLAIN, 1>>, 4},
    {"r32 u2 pf mb1 /4", run_variant<e4m3, config<2, 2, true, PLAIN, 1>>, 4},
    {"r16 u2 pf ef /4", run_variant<e4m3, config<1, 2, true, EF, 2>>, 4},
    {"r16 u2 pf nt1 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 1},
    {"r16 u2 pf nt2 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 2},
    {"r16 u2 pf split2 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 0, 2},
    {"r16 u2 pf split4 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 0, 4},
    {"r16 u2 pf split8 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 0, 8},
    {"r16 u2 pf nt2 split8 /4", run_variant<e4m3, config<1, 2, true, PLAIN, 2>>, 4, 2, 8},
    {"r16 u4 pf mb1 split8 /4", run_variant<e4m3, config<1, 4, true, PLAIN, 1>>, 4, 0, 8},
};

/* ---- shapes ------------------------------------------------------------------------------------ */
struct shape {
  const char *model;
  int fp8, experts, top_k, n, k, tokens;
  int dense; /* a dense product of `tokens` rows: one group, no m_indptr, weight_indices [s] picks
                set s's weight of `experts` (= SETS) copies */
};

static const shape SHAPES[] = {
    {"Qwen3 fc1", 0, 128, 8, 1536, 2048, 1},       {"Qwen3 fc1", 0, 128, 8, 1536, 2048, 16},
    {"Qwen3 fc2", 0, 128, 8, 2048, 768, 1},        {"Qwen3 fc2", 0, 128, 8, 2048, 768, 16},
    {"Mixtral fc1", 0, 8, 2, 28672, 4096, 1},      {"Mixtral fc1", 0, 8, 2, 28672, 4096, 16},
    {"Mixtral fc2", 0, 8, 2, 4096, 14336, 1},      {"Mixtral fc2", 0, 8, 2, 4096, 14336, 16},
    {"DeepSeek fc1", 1, 256, 8, 4096, 7168, 1},    {"DeepSeek fc1", 1, 256, 8, 4096, 7168, 16},
    {"DeepSeek fc1", 1, 256, 8, 4096, 7168, 64},   {"DeepSeek fc2", 1, 256, 8, 7168, 2048, 1},
    {"DeepSeek fc2", 1, 256, 8, 7168, 2048, 16},   {"DeepSeek fc2", 1, 256, 8, 7168, 2048, 64},
    {"dense fp8", 1, SETS, 1, 2112, 7168, 4, 1},   {"dense fp8", 1, SETS, 1, 2112, 7168, 16, 1},
    {"dense fp8", 1, SETS, 1, 2112, 7168, 32, 1},  {"dense fp8", 1, SETS, 1, 2112, 7168, 64, 1},
    {"dense fp8", 1, SETS, 1, 7168, 2048, 16, 1},  {"dense fp8", 1, SETS, 1, 7168, 2048, 64, 1},
    {"dense bf16", 0, SETS, 1, 7168, 2048, 1, 1},  {"dense bf16", 0, SETS, 1, 7168, 2048, 4, 1},
    {"dense bf16", 0, SETS, 1, 7168, 2048, 16, 1}, {"dense bf16", 0, SETS, 1, 7168, 2048, 64, 1},
    {"dense bf16", 0, SETS, 1, 4096, 4096, 1, 1},  {"dense bf16", 0, SETS, 1, 4096, 4096, 16, 1},
    {"dense bf16", 0, SETS, 1, 4096, 4096, 64, 1},
};

/* Token t picks top_k distinct experts; returns the offsets and the rows' experts. */
static int route(int tokens, int top_k, int experts, uint64_t *state, std::vector<int> &indptr,
                 std::vector<int> &row_group) {
  std::vector<int> count(experts, 0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> picked;
    while ((int)picked.size() < top_k) {
      *state = *state * 6364136223846793005ull + 1442695040888963407ull;
      const int e = (int)((*state >> 33) % (uint64_t)experts);
      if (std::find(picked.begin(), picked.end(), e) == picked.end())
        picked.push_back(e);
    }
    for (int e : picked)
      count[e] += 1;
  }
  indptr.assign(experts + 1, 0);
  int active = 0;
  for (int e = 0; e < experts; ++e) {
    indptr[e + 1] = indptr[e] + count[e];
    active += count[e] > 0;
  }
  row_group.assign(indptr[experts], 0);
  for (int e = 0; e < experts; ++e)
    for (int r = indptr[e]; r < indptr[e + 1]; ++r)
      row_group[r] = e;
  return active;
}

static ignis_tensor tensor(void *data, ignis_dtype dtype, int ndim, const int64_t *shape) {
  ignis_tensor t;
  IK(ignis_tensor_init(&t, data, dtype, ndim, shape, ignis_device{IGNIS_DEVICE_CUDA, 0}));
  return t;
}

/* the worst err/bound of a bf16 out against ref, and its bits */
static double check(const bf16 *out_dev, const std::vector<double> &ref, const std::vector<double> &abs_sum,
                    int k, std::vector<uint16_t> &bits) {
  bits.resize(ref.size());
  CK(cudaMemcpy(bits.data(), out_dev, bits.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t word = (uint32_t)bits[i] << 16;
    float v;
    memcpy(&v, &word, 4);
    const double bound = ldexp(fabs(ref[i]), -8) + k * ldexp(abs_sum[i], -24) + 1e-30;
    worst = std::max(worst, std::isfinite(v) ? fabs(v - ref[i]) / bound : INFINITY);
  }
  return worst;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : nullptr;
  setenv("IGNIS_GEMM_GROUPED_SKINNY", "0", 1); /* the library's call: the 128x128 kernel */
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  unsigned *sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  /* the split-K room of the dense shapes (what gemm_cublaslt.c hands the dense path) */
  const size_t partial_floats = 4u << 20;
  const int counters_count = 16384;
  float *partials = nullptr;
  unsigned *counters = nullptr;
  CK(cudaMalloc(&partials, partial_floats * 4));
  CK(cudaMalloc(&counters, counters_count * sizeof(unsigned)));
  CK(cudaMemset(counters, 0, counters_count * sizeof(unsigned)));
  double read_bw = 0, copy_bw = 0;
  micro_bandwidths(stream, TIMING, sink, sms, &read_bw, &copy_bw);
  printf("# ignis_grouped_skinny: %s, %d SMs, L2 %d MiB, read bandwidth %.0f GB/s (streaming read of 1 GiB), "
         "copy %.0f GB/s (read + write); %d routings rotate\n",
         prop.name, sms, prop.l2CacheSize >> 20, read_bw / 1e9, copy_bw / 1e9, SETS);
  printf("| model | T | M | active | N | K | path | plan | us | GB/s | x floor | x copy floor | vs base | "
         "err/bound | same |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

  int failures = 0;
  uint64_t state = 12345;
  for (const shape &sh : SHAPES) {
    if (only && !strstr(sh.model, only))
      continue;
    const int g_count = sh.experts, n = sh.n, k = sh.k, m = sh.tokens * (sh.dense ? 1 : sh.top_k),
              es = sh.fp8 ? 1 : 2;
    const int kbs = (k + 127) / 128, nbs = (n + 127) / 128;
    const size_t w_elems = (size_t)g_count * n * k;
    void *a = nullptr, *w = nullptr;
    bf16 *out = nullptr;
    float *a_scale = nullptr, *b_scale = nullptr;
    CK(cudaMalloc(&a, (size_t)m * k * es));
    CK(cudaMalloc(&w, w_elems * es));
    CK(cudaMalloc(&out, (size_t)m * n * 2));
    if (sh.fp8) {
      CK(cudaMalloc(&a_scale, (size_t)m * kbs * 4));
      CK(cudaMalloc(&b_scale, (size_t)g_count * nbs * kbs * 4));
      fill_e4m3<<<1024, 256, 0, stream>>>(static_cast<unsigned char *>(a), (size_t)m * k, 11);
      fill_e4m3<<<8192, 256, 0, stream>>>(static_cast<unsigned char *>(w), w_elems, 13);
      fill_scales<<<64, 256, 0, stream>>>(a_scale, (size_t)m * kbs, 17);
      fill_scales<<<1024, 256, 0, stream>>>(b_scale, (size_t)g_count * nbs * kbs, 19);
    } else {
      fill_bf16<<<1024, 256, 0, stream>>>(static_cast<bf16 *>(a), (size_t)m * k, 11);
      fill_bf16<<<8192, 256, 0, stream>>>(static_cast<bf16 *>(w), w_elems, 13);
    }

    /* routings, their offsets on the device, the bytes of the experts each reads */
    std::vector<int *> indptr_dev(SETS);
    std::vector<int> indptr, row_group0(m, 0);
    double active = 0;
    for (int s = 0; s < SETS; ++s) {
      if (sh.dense) { /* indptr_dev[s]: weight_indices [s] */
        active += 1;
        CK(cudaMalloc(&indptr_dev[s], sizeof(int)));
        CK(cudaMemcpy(indptr_dev[s], &s, sizeof(int), cudaMemcpyHostToDevice));
        continue;
      }
      std::vector<int> row_group;
      active += route(sh.tokens, sh.top_k, g_count, &state, indptr, row_group);
      if (s == 0)
        row_group0 = row_group;
      CK(cudaMalloc(&indptr_dev[s], (g_count + 1) * sizeof(int)));
      CK(cudaMemcpy(indptr_dev[s], indptr.data(), (g_count + 1) * sizeof(int), cudaMemcpyHostToDevice));
    }
    active /= SETS;
    const double bytes = active * n * (double)k * es;

    int *row_group_dev = nullptr;
    double *ref_dev = nullptr, *abs_dev = nullptr;
    CK(cudaMalloc(&row_group_dev, m * sizeof(int)));
    CK(cudaMemcpy(row_group_dev, row_group0.data(), m * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&ref_dev, (size_t)m * n * 8));
    CK(cudaMalloc(&abs_dev, (size_t)m * n * 8));
    reference<<<(m * n + 255) / 256, 256, 0, stream>>>(a, w, sh.fp8, row_group_dev, m, n, k, a_scale, b_scale,
                                                       ref_dev, abs_dev);
    std::vector<double> ref((size_t)m * n), abs_sum((size_t)m * n);
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(ref.data(), ref_dev, ref.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(abs_sum.data(), abs_dev, abs_sum.size() * 8, cudaMemcpyDeviceToHost));

    /* the calls: params for the kernel paths, tensors for the public API */
    const ignis_dtype in_dtype = sh.fp8 ? IGNIS_FP8_E4M3 : IGNIS_BF16;
    const int64_t a_shape[2] = {m, k}, w_shape[3] = {g_count, n, k}, o_shape[2] = {m, n},
                  i_shape[1] = {g_count + 1};
    const int64_t sa_shape[2] = {m, kbs}, sb_shape[3] = {g_count, nbs, kbs};
    const ignis_tensor ta = tensor(a, in_dtype, 2, a_shape), tw = tensor(w, in_dtype, 3, w_shape);
    ignis_tensor to = tensor(out, IGNIS_BF16, 2, o_shape);
    ignis_tensor tsa = {}, tsb = {};
    if (sh.fp8) {
      tsa = tensor(a_scale, IGNIS_F32, 2, sa_shape);
      tsb = tensor(b_scale, IGNIS_F32, 3, sb_shape);
    }
    std::vector<ignis_tensor> tind(SETS), tw_dense(SETS), tsb_dense(SETS);
    const int64_t w2_shape[2] = {n, k}, sb2_shape[2] = {nbs, kbs};
    std::vector<ignis_grouped_gemm_params> params(SETS);
    std::vector<ignis_gemm_params> dense(SETS);
    std::vector<ignis_grouped_skinny_args> args(SETS);
    for (int s = 0; s < SETS; ++s) {
      tind[s] = tensor(indptr_dev[s], IGNIS_I32, 1, i_shape);
      ignis_grouped_gemm_params p = {};
      p.fp8 = sh.fp8;
      p.groups = p.num_weights = g_count;
      p.m = m;
      p.n = n;
      p.k = k;
      p.a_dtype = in_dtype;
      p.out_dtype = IGNIS_BF16;
      p.index_dtype = IGNIS_I32;
      p.scale_dtype = IGNIS_F32;
      p.a = a;
      p.a_row_stride = k;
      p.b = w;
      p.b_group_stride = (int64_t)n * k;
      p.b_stride_n = k;
      p.b_stride_k = 1;
      p.out = out;
      p.out_row_stride = n;
      p.m_indptr = indptr_dev[s];
      if (sh.dense) {
        p.groups = 1;
        p.m_indptr = nullptr;
        p.weight_indices = indptr_dev[s];
        p.weight_index_dtype = IGNIS_I32;
        tw_dense[s] = tensor(static_cast<unsigned char *>(w) + (size_t)s * n * k, in_dtype, 2, w2_shape);
        if (sh.fp8)
          tsb_dense[s] = tensor(b_scale + (size_t)s * nbs * kbs, IGNIS_F32, 2, sb2_shape);
        ignis_gemm_params d = {};
        d.kind = sh.fp8 ? IGNIS_GEMM_FP8_BLOCK : IGNIS_GEMM_PLAIN;
        d.batch = 1;
        d.m = m;
        d.n = n;
        d.k = k;
        d.a_dtype = d.b_dtype = in_dtype;
        d.out_dtype = IGNIS_BF16;
        d.scale_dtype = IGNIS_F32;
        d.a = a;
        d.a_row_stride = k;
        d.b = static_cast<unsigned char *>(w) + (size_t)s * n * k;
        d.b_stride_k = 1;
        d.b_stride_n = k;
        d.out = out;
        d.out_row_stride = n;
        d.a_scale = a_scale;
        d.b_scale = sh.fp8 ? b_scale + (size_t)s * nbs * kbs : nullptr;
        d.a_scale_stride_m = kbs;
        d.a_scale_stride_k = 1;
        d.b_scale_stride_n = kbs;
        d.b_scale_stride_k = 1;
        d.b_scale_block_n = 128;
        dense[s] = d;
      }
      p.a_scale = a_scale;
      p.b_scale = b_scale;
      p.a_scale_stride_m = kbs;
      p.a_scale_stride_k = 1;
      p.b_scale_stride_g = (int64_t)nbs * kbs;
      p.b_scale_stride_n = kbs;
      p.b_scale_stride_k = 1;
      params[s] = p;
      args[s] = ignis_grouped_skinny_args_of(&p);
    }

    struct row {
      const char *name;
      char plan[64];
      double us, worst;
      bool same;
    };
    std::vector<row> rows;
    auto measure = [&](const char *name, const char *plan, auto call) {
      row r;
      r.name = name;
      snprintf(r.plan, sizeof r.plan, "%s", plan);
      std::vector<uint16_t> first, second;
      CK(cudaMemsetAsync(out, 0xff, (size_t)m * n * 2, stream));
      call(0);
      CK(cudaStreamSynchronize(stream));
      r.worst = check(out, ref, abs_sum, k, first);
      CK(cudaMemsetAsync(out, 0xff, (size_t)m * n * 2, stream));
      call(0);
      CK(cudaStreamSynchronize(stream));
      check(out, ref, abs_sum, k, second);
      r.same = first == second;
      r.us = micro_time_us(stream, TIMING, SETS, call);
      failures += !(r.worst <= 1.0) || !r.same;
      rows.push_back(r);
    };
    measure(sh.dense ? "cuBLASLt (SKINNY=0)" : "128x128 (SKINNY=0)", "-", [&](int s) {
      if (sh.dense && !sh.fp8)
        IK(ignis_cuda_gemm_cublaslt(&dense[s], 0, stream));
      else if (sh.dense)
        IK(ignis_mm_fp8_blockscale(&ta, &tw_dense[s], &tsa, &tsb_dense[s], &to, stream));
      else if (sh.fp8)
        IK(ignis_grouped_mm_fp8_blockscale(&ta, &tw, &tsa, &tsb, &tind[s], &to, stream));
      else
        IK(ignis_grouped_mm(&ta, &tw, &tind[s], nullptr, &to, stream));
    });
    if (sh.dense) {
      measure("library", "-", [&](int s) {
        if (sh.fp8)
          IK(ignis_cuda_gemm_grouped_skinny(&dense[s], 0, stream, partials, partial_floats, counters,
                                            counters_count));
        else
          IK(ignis_cuda_gemm(&dense[s], 0, stream));
      });
      if (ignis_cuda_gemm_small_m_sm90_fits(&dense[0], 0)) /* the Hopper small-M kernel */
        for (int v = 0; v < 10; ++v) {
          static const char *const names[10] = {
              "sm90 swap-AB split<=8",    "sm90 swap-AB split<=4",  "sm90 swap-AB unsplit",
              "sm90 swap-AB 1 consumer",  "sm90 swap-AB 4 consumers", "sm90 swap-AB 2/SM",
              "sm90 swap-AB 2/SM 1 cons", "sm90 swap-AB depth 2",   "sm90 swap-AB 1 cons depth 2",
              "sm90 swap-AB 4 cons depth 2"};
          static const int max_splits[10] = {8, 4, 1, 8, 8, 8, 8, 8, 8, 8},
                           per_sm[10] = {1, 1, 1, 1, 1, 2, 2, 1, 1, 1},
                           consumers[10] = {0, 0, 0, 1, 4, 0, 1, 0, 1, 4},
                           depth[10] = {1, 1, 1, 1, 1, 1, 1, 2, 2, 2};
          measure(names[v], "-", [&](int s) {
            IK(ignis_cuda_gemm_small_m_sm90(&dense[s], 0, stream, partials, partial_floats, counters,
                                            counters_count, max_splits[v], per_sm[v], consumers[v], depth[v]));
          });
        }
    } else
      measure("library", "-", [&](int s) { IK(ignis_cuda_grouped_skinny(&params[s], 0, stream)); });
    const variant *variants = sh.fp8 ? VARIANTS_FP8 : VARIANTS_16;
    const size_t count =
        sh.fp8 ? sizeof VARIANTS_FP8 / sizeof(variant) : sizeof VARIANTS_16 / sizeof(variant);
    for (size_t v = 0; v < count; ++v) {
      if (variants[v].splits > 1 && !sh.dense)
        continue;
      const ignis_grouped_skinny_split_room room = {partials, partial_floats, counters, counters_count,
                                                    variants[v].splits};
      const ignis_grouped_skinny_split_room *r = variants[v].splits > 1 ? &room : nullptr;
      ignis_grouped_skinny_plan plan = {};
      IK(variants[v].fn(args[0], sms, variants[v].per_sm, stream, &plan, variants[v].nt, r));
      char text[80];
      snprintf(text, sizeof text, "%d x %d x %d (rows %d, k/%d)", plan.slots, plan.n_blocks, plan.splits,
               8 * plan.nt, plan.k_warps);
      measure(variants[v].name, text, [&](int s) {
        IK(variants[v].fn(args[s], sms, variants[v].per_sm, stream, nullptr, variants[v].nt, r));
      });
    }
    const double floor_us = bytes / read_bw * 1e6, copy_floor_us = bytes / copy_bw * 1e6,
                 base_us = rows[0].us;
    for (const row &r : rows)
      printf("| %s | %d | %d | %.1f | %d | %d | %s | %s | %.2f | %.0f | %.2f | %.2f | %.2f | %.3f | %s |\n",
             sh.model, sh.tokens, m, active, n, k, r.name, r.plan, r.us, bytes / (r.us * 1e-6) / 1e9,
             r.us / floor_us, r.us / copy_floor_us, base_us / r.us, r.worst, r.same ? "yes" : "NO");
    fflush(stdout);

    for (int s = 0; s < SETS; ++s)
      CK(cudaFree(indptr_dev[s]));
    void *buffers[] = {a, w, out, a_scale, b_scale, row_group_dev, ref_dev, abs_dev};
    for (void *b : buffers)
      if (b)
        CK(cudaFree(b));
  }
  CK(cudaFree(partials));
  CK(cudaFree(counters));
  printf("# %s\n", failures ? "FAILED: some path is wrong or not deterministic (err/bound > 1 or same NO)"
                            : "all paths within bounds and deterministic");
  return failures ? 1 : 0;
}
