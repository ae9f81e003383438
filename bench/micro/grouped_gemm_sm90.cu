/* Micro benchmark of ignis' Hopper grouped GEMM (src/cuda/gemm/grouped_gemm_sm90.cu, issues 18 and
 * 19) against the mma.sync grouped kernel it replaces (grouped_gemm.cu) and cuBLASLt, in one
 * process on the same data. Built by CMake as build/ignis_grouped_gemm_sm90 when CUDA is on; a run
 * takes about half a minute on an H100 / H200. Usage: ignis_grouped_gemm_sm90.
 *
 * Shapes (bf16 out):
 *   bf16 dense      M 4096 N 7168 K 2048, one group                 (cuBLASLt's 630 TF anchor)
 *   bf16 grouped    8 x 4096 rows, N 28672 (14336 x 2) K 4096       (Mixtral fc1; issue 19: 550 TF)
 *   fp8 block dense M 4096 N 7168 K 16384, 1x128 / 128x128 f32 scales (issue 18: 1400 TF)
 *   fp8 block grp   8 x 4096 rows, N 4096 K 7168                    (issue 18: 1300 TF)
 * Rows: "sm90" = ignis_cuda_grouped_gemm_sm90 (what ignis_grouped_mm runs on these shapes, the
 * dense ones as one group); "mma.sync" = ignis_cuda_grouped_gemm_mma (the old kernel, what
 * IGNIS_GEMM_SM90=0 runs); "cuBLASLt" = ignis_cuda_gemm_cublaslt (what ignis_mm /
 * ignis_mm_fp8_blockscale run by default), one call per group for the grouped shapes
 * (its fp8 block path repacks the scales each call, as the library does); for the dense fp8 shape
 * also "library" = ignis_cuda_gemm, the routed call ignis_mm_fp8_blockscale makes (cuBLASLt
 * unless IGNIS_GEMM_SM90 is "all").
 *
 * Checks: "diff vs sm90" is the largest |out - out_sm90| over the whole output; "err/bound" is the
 * worst |out - ref| / (2^-8 |ref| + 2^-12 sum |terms|) over SAMPLED_POINTS random elements whose
 * fp64 reference is computed on the GPU (the 2^-12 allows the fp8 tensor cores' reduced accumulation
 * inside a 128-wide K block and f32 rounding; bf16 rounding of out is 2^-8), at most 1 to pass.
 *
 * Timing (bench/micro/timing.cuh): each sample is a burst of calls queued behind a GPU spin (host
 * launch cost does not show) between two events; the median of the samples (TIMING).
 * TFLOP/s = 2 rows N K / time; "vs cuBLASLt" above 1 means faster. Inputs are not rotated: a and b of the smallest shape (16 + 29
 * MB) may partly stay in the 50 MB L2 across calls, for every row alike. */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "check.h"
#include "timing.cuh"
#include "core/gemm_params.h"
#include "core/grouped_gemm_params.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemm/grouped_gemm_sm90.h"

typedef __nv_bfloat16 bf16;
enum { SAMPLED_POINTS = 512 };
static const micro_timing TIMING = {2, 7, 5, 4000000}; /* warmup, samples, burst, spin (~2 ms) */

/* ---- kernels of the harness ------------------------------------------------------------------ */
__device__ float uniform_at(size_t i, uint32_t seed) {
  uint32_t h = (uint32_t)i * 2654435761u ^ seed ^ (uint32_t)(i >> 32) * 40503u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  h *= 3266489917u;
  h ^= h >> 16;
  return (float)(h >> 8) * (1.0f / 16777216.0f); /* [0, 1) */
}

__global__ void fill_bf16(bf16 *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16_rn(2.0f * uniform_at(i, seed) - 1.0f);
}

__global__ void fill_e4m3(__nv_fp8_e4m3 *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = __nv_fp8_e4m3(4.0f * uniform_at(i, seed) - 2.0f);
}

__global__ void fill_scales(float *x, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = 0.5f + uniform_at(i, seed);
}

/* fp64 reference of out[rows[s], cols[s]] (weight weights[s]); a [M, K], b [W, N, K], scales
 * a_scale [M, KB] and b_scale [W, NB, KB] (fp8 only), all contiguous. */
__global__ void sampled_reference(const void *a, const void *b, bool fp8, const float *a_scale,
                                  const float *b_scale, const int *rows, const int *cols, const int *weights,
                                  int samples, int n, int k, double *ref, double *abs_sum) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= samples)
    return;
  const int64_t row = rows[s], col = cols[s], w = weights[s], kb_count = (k + 127) / 128,
                nb = (n + 127) / 128;
  double total = 0, total_abs = 0;
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    double part = 0, part_abs = 0;
    for (int64_t kk = kb * 128; kk < k && kk < kb * 128 + 128; ++kk) {
      double x, y;
      if (fp8) {
        x = (float)static_cast<const __nv_fp8_e4m3 *>(a)[row * k + kk];
        y = (float)static_cast<const __nv_fp8_e4m3 *>(b)[(w * n + col) * k + kk];
      } else {
        x = __bfloat162float(static_cast<const bf16 *>(a)[row * k + kk]);
        y = __bfloat162float(static_cast<const bf16 *>(b)[(w * n + col) * k + kk]);
      }
      part += x * y;
      part_abs += fabs(x * y);
    }
    const double scale =
        fp8 ? (double)a_scale[row * kb_count + kb] * b_scale[(w * nb + col / 128) * kb_count + kb] : 1.0;
    total += part * scale;
    total_abs += part_abs * scale;
  }
  ref[s] = total;
  abs_sum[s] = total_abs;
}

__global__ void max_abs_diff(const bf16 *x, const bf16 *y, size_t count, unsigned *result) {
  float worst = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x) {
    const float d = fabsf(__bfloat162float(x[i]) - __bfloat162float(y[i]));
    worst = d > worst || d != d ? d : worst;
  }
  atomicMax(result, __float_as_uint(worst));
}

/* ms per call of call() (bench/micro/timing.cuh) */
template <typename F> static double time_call(cudaStream_t stream, F call) {
  return micro_time_us(stream, TIMING, 1, [&](int) { call(); }) * 1e-3;
}

/* ---- one shape ------------------------------------------------------------------------------------ */
struct shape {
  const char *name;
  bool fp8;
  int groups, rows_per_group, n, k;
};

struct row {
  const char *name;
  double ms, diff, worst;
};

static int failures = 0;

static void run_shape(const shape &sh, cudaStream_t stream) {
  const int64_t m = (int64_t)sh.groups * sh.rows_per_group, n = sh.n, k = sh.k, g = sh.groups;
  const int64_t es = sh.fp8 ? 1 : 2, kb = (k + 127) / 128, nb = (n + 127) / 128;
  void *a = nullptr, *b = nullptr;
  float *a_scale = nullptr, *b_scale = nullptr;
  int *indptr = nullptr;
  CK(cudaMalloc(&a, (size_t)(m * k * es)));
  CK(cudaMalloc(&b, (size_t)(g * n * k * es)));
  if (sh.fp8) {
    CK(cudaMalloc(&a_scale, (size_t)(m * kb) * sizeof(float)));
    CK(cudaMalloc(&b_scale, (size_t)(g * nb * kb) * sizeof(float)));
    fill_e4m3<<<4096, 256, 0, stream>>>(static_cast<__nv_fp8_e4m3 *>(a), (size_t)(m * k), 11u);
    fill_e4m3<<<4096, 256, 0, stream>>>(static_cast<__nv_fp8_e4m3 *>(b), (size_t)(g * n * k), 23u);
    fill_scales<<<1024, 256, 0, stream>>>(a_scale, (size_t)(m * kb), 37u);
    fill_scales<<<1024, 256, 0, stream>>>(b_scale, (size_t)(g * nb * kb), 41u);
  } else {
    fill_bf16<<<4096, 256, 0, stream>>>(static_cast<bf16 *>(a), (size_t)(m * k), 11u);
    fill_bf16<<<4096, 256, 0, stream>>>(static_cast<bf16 *>(b), (size_t)(g * n * k), 23u);
  }
  std::vector<int> h_indptr(g + 1);
  for (int64_t i = 0; i <= g; ++i)
    h_indptr[i] = (int)(i * sh.rows_per_group);
  CK(cudaMalloc(&indptr, (g + 1) * sizeof(int)));
  CK(cudaMemcpyAsync(indptr, h_indptr.data(), (g + 1) * sizeof(int), cudaMemcpyHostToDevice, stream));

  /* outputs: sm90 first (the others are compared with it) */
  enum { OUT_SM90, OUT_MMA, OUT_LT, OUT_LIB, OUTS };
  bf16 *out[OUTS];
  for (int o = 0; o < OUTS; ++o) {
    CK(cudaMalloc(&out[o], (size_t)(m * n) * sizeof(bf16)));
    CK(cudaMemsetAsync(out[o], 0xff, (size_t)(m * n) * sizeof(bf16), stream)); /* NaN: unwritten shows */
  }

  auto grouped = [&](bf16 *o) {
    ignis_grouped_gemm_params p;
    memset(&p, 0, sizeof p);
    p.fp8 = sh.fp8;
    p.groups = g;
    p.num_weights = g;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a_dtype = sh.fp8 ? IGNIS_FP8_E4M3 : IGNIS_BF16;
    p.out_dtype = IGNIS_BF16;
    p.index_dtype = IGNIS_I32;
    p.weight_index_dtype = IGNIS_I32;
    p.scale_dtype = IGNIS_F32;
    p.a = a;
    p.a_row_stride = k;
    p.b = b;
    p.b_group_stride = n * k;
    p.b_stride_n = k;
    p.b_stride_k = 1;
    p.out = o;
    p.out_row_stride = n;
    p.m_indptr = indptr;
    p.a_scale = a_scale;
    p.b_scale = b_scale;
    p.a_scale_stride_m = kb;
    p.a_scale_stride_k = 1;
    p.b_scale_stride_g = nb * kb;
    p.b_scale_stride_n = kb;
    p.b_scale_stride_k = 1;
    return p;
  };
  /* the dense product of group gi */
  auto dense = [&](bf16 *o, int64_t gi) {
    const int64_t r0 = gi * sh.rows_per_group;
    ignis_gemm_params p;
    memset(&p, 0, sizeof p);
    p.kind = sh.fp8 ? IGNIS_GEMM_FP8_BLOCK : IGNIS_GEMM_PLAIN;
    p.batch = 1;
    p.m = sh.rows_per_group;
    p.n = n;
    p.k = k;
    p.a_dtype = p.b_dtype = sh.fp8 ? IGNIS_FP8_E4M3 : IGNIS_BF16;
    p.out_dtype = IGNIS_BF16;
    p.scale_dtype = IGNIS_F32;
    p.a = static_cast<const char *>(a) + r0 * k * es;
    p.a_row_stride = k;
    p.b = static_cast<const char *>(b) + gi * n * k * es;
    p.b_stride_k = 1;
    p.b_stride_n = k;
    p.out = o + r0 * n;
    p.out_row_stride = n;
    if (sh.fp8) {
      p.a_scale = a_scale + r0 * kb;
      p.b_scale = b_scale + gi * nb * kb;
      p.a_scale_stride_m = kb;
      p.a_scale_stride_k = 1;
      p.b_scale_stride_n = kb;
      p.b_scale_stride_k = 1;
      p.b_scale_block_n = IGNIS_GEMM_SCALE_BLOCK;
    }
    return p;
  };

  std::vector<row> rows;
  const ignis_grouped_gemm_params p_sm90 = grouped(out[OUT_SM90]), p_mma = grouped(out[OUT_MMA]);
  const bool sm90 = ignis_cuda_grouped_gemm_sm90_takes(&p_sm90, 0);
  if (sm90)
    rows.push_back({"sm90 (wgmma, TMA)",
                    time_call(stream, [&] { IK(ignis_cuda_grouped_gemm_sm90(&p_sm90, 0, stream)); }), 0, 0});
  rows.push_back({"mma.sync (old)",
                  time_call(stream, [&] { IK(ignis_cuda_grouped_gemm_mma(&p_mma, 0, stream)); }), 0, 0});
  std::vector<ignis_gemm_params> p_lt(g);
  for (int64_t gi = 0; gi < g; ++gi)
    p_lt[gi] = dense(out[OUT_LT], gi);
  const bool lt = ignis_cuda_gemm_cublaslt(&p_lt[0], 0, stream) == IGNIS_OK; /* cuBLASLt loads */
  if (lt)
    rows.push_back({g > 1 ? "cuBLASLt (a call per group)" : "cuBLASLt",
                    time_call(stream,
                              [&] {
                                for (int64_t gi = 0; gi < g; ++gi)
                                  IK(ignis_cuda_gemm_cublaslt(&p_lt[gi], 0, stream));
                              }),
                    0, 0});
  else
    printf("# %s: no cuBLASLt row: %s\n", sh.name, ignis_last_error());
  const int outs_of[] = {sm90 ? OUT_SM90 : -1, OUT_MMA, lt ? OUT_LT : -1};
  std::vector<int> row_out;
  for (int o : outs_of)
    if (o >= 0)
      row_out.push_back(o);
  const ignis_gemm_params p_lib = dense(out[OUT_LIB], 0);
  const bool routed = ignis_cuda_gemm_sm90_takes(&p_lib, 0);
  if (sh.fp8 && g == 1 && (routed || lt)) {
    rows.push_back(
        {routed ? "library (ignis_mm_fp8_blockscale: sm90)" : "library (ignis_mm_fp8_blockscale: cuBLASLt)",
         time_call(stream, [&] { IK(ignis_cuda_gemm(&p_lib, 0, stream)); }), 0, 0});
    row_out.push_back(OUT_LIB);
  }
  CK(cudaStreamSynchronize(stream));

  /* sampled fp64 reference */
  srand(7);
  std::vector<int> h_rows(SAMPLED_POINTS), h_cols(SAMPLED_POINTS), h_w(SAMPLED_POINTS);
  for (int s = 0; s < SAMPLED_POINTS; ++s) {
    h_rows[s] = (int)(((int64_t)rand() * RAND_MAX + rand()) % m);
    h_cols[s] = (int)(rand() % n);
    h_w[s] = h_rows[s] / sh.rows_per_group;
  }
  int *d_rows, *d_cols, *d_w;
  double *d_ref, *d_abs;
  CK(cudaMalloc(&d_rows, SAMPLED_POINTS * sizeof(int)));
  CK(cudaMalloc(&d_cols, SAMPLED_POINTS * sizeof(int)));
  CK(cudaMalloc(&d_w, SAMPLED_POINTS * sizeof(int)));
  CK(cudaMalloc(&d_ref, SAMPLED_POINTS * sizeof(double)));
  CK(cudaMalloc(&d_abs, SAMPLED_POINTS * sizeof(double)));
  CK(cudaMemcpyAsync(d_rows, h_rows.data(), SAMPLED_POINTS * sizeof(int), cudaMemcpyHostToDevice, stream));
  CK(cudaMemcpyAsync(d_cols, h_cols.data(), SAMPLED_POINTS * sizeof(int), cudaMemcpyHostToDevice, stream));
  CK(cudaMemcpyAsync(d_w, h_w.data(), SAMPLED_POINTS * sizeof(int), cudaMemcpyHostToDevice, stream));
  sampled_reference<<<(SAMPLED_POINTS + 127) / 128, 128, 0, stream>>>(
      a, b, sh.fp8, a_scale, b_scale, d_rows, d_cols, d_w, SAMPLED_POINTS, (int)n, (int)k, d_ref, d_abs);
  std::vector<double> ref(SAMPLED_POINTS), abs_sum(SAMPLED_POINTS);
  CK(cudaStreamSynchronize(stream)); /* the copies below run on the legacy stream */
  CK(cudaMemcpy(ref.data(), d_ref, SAMPLED_POINTS * sizeof(double), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(abs_sum.data(), d_abs, SAMPLED_POINTS * sizeof(double), cudaMemcpyDeviceToHost));
  unsigned *d_diff;
  CK(cudaMalloc(&d_diff, sizeof(unsigned)));
  for (size_t r = 0; r < rows.size(); ++r) {
    bf16 *o = out[row_out[r]];
    CK(cudaMemsetAsync(d_diff, 0, sizeof(unsigned), stream));
    max_abs_diff<<<1024, 256, 0, stream>>>(o, out[sm90 ? OUT_SM90 : OUT_MMA], (size_t)(m * n), d_diff);
    CK(cudaStreamSynchronize(stream));
    unsigned bits = 0;
    CK(cudaMemcpy(&bits, d_diff, sizeof bits, cudaMemcpyDeviceToHost));
    float diff;
    memcpy(&diff, &bits, sizeof diff);
    rows[r].diff = diff;
    double worst = 0;
    for (int s = 0; s < SAMPLED_POINTS; ++s) {
      bf16 v;
      CK(cudaMemcpy(&v, o + (int64_t)h_rows[s] * n + h_cols[s], sizeof v, cudaMemcpyDeviceToHost));
      const double got = __bfloat162float(v),
                   bound = ldexp(fabs(ref[s]), -8) + ldexp(abs_sum[s], -12) + 1e-30;
      worst = std::max(worst, std::isfinite(got) ? fabs(got - ref[s]) / bound : INFINITY);
    }
    rows[r].worst = worst;
    failures += !(worst <= 1.0) || !(diff == diff);
  }

  const double flop = 2.0 * (double)m * n * k, base_ms = lt ? rows[sm90 ? 2 : 1].ms : NAN;
  for (const row &r : rows)
    printf("| %s | %s | %.3f | %.0f | %.2f | %.3g | %.3f |\n", sh.name, r.name, r.ms,
           flop / (r.ms * 1e-3) / 1e12, base_ms / r.ms, r.diff, r.worst);
  if (!sm90)
    printf(
        "| %s | sm90: not taken (not an sm_90a build on an H100 / H200, or IGNIS_GEMM_SM90=0) | | | | | |\n",
        sh.name);
  fflush(stdout);

  for (int o = 0; o < OUTS; ++o)
    CK(cudaFree(out[o]));
  void *bufs[] = {a, b, a_scale, b_scale, indptr, d_rows, d_cols, d_w, d_ref, d_abs, d_diff};
  for (void *p : bufs)
    if (p)
      CK(cudaFree(p));
}

int main() {
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# ignis_grouped_gemm_sm90: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
         prop.l2CacheSize >> 20);
  printf("| shape | kernel | ms | TFLOP/s | vs cuBLASLt | diff vs sm90 | err/bound |\n"
         "|---|---|---|---|---|---|---|\n");
  static const shape SHAPES[] = {
      {"bf16 M4096 N7168 K2048", false, 1, 4096, 7168, 2048},
      {"bf16 8x4096 N28672 K4096", false, 8, 4096, 28672, 4096},
      {"fp8 block M4096 N7168 K16384", true, 1, 4096, 7168, 16384},
      {"fp8 block 8x4096 N4096 K7168", true, 8, 4096, 4096, 7168},
  };
  for (const shape &sh : SHAPES)
    run_shape(sh, stream);
  printf("# %s\n",
         failures ? "FAILED: some kernel is wrong (err/bound > 1 or NaN)" : "all kernels within bounds");
  return failures ? 1 : 0;
}
