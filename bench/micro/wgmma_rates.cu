/* Micro benchmark of the wgmma forms the MLA kernels issue (issue 21; notes/PERF.md, "MLA on wgmma
 * by default"): how many cycles one instruction of each form holds a warpgroup's tensor pipe, with
 * its operands in shared memory as the kernels lay them out (128-byte swizzle, common/hopper.cuh),
 * issued back to back in commit groups of 32, one or two warpgroups a block, one block per SM.
 * Values are zeros: the rate, not the result, is measured.
 *
 * Forms (what issues them):
 *   n16 ss      m64n16k16, A and B K-major         the swapped kernel's scores (S^T = K Q^T)
 *   n16 ss tA   m64n16k16, A MN-major              the swapped kernel's output (O^T = V^T P^T)
 *   n32 ss      m64n32k16                          the split-score form's scores
 *   n64 ss      m64n64k16                          the one scorer's scores
 *   n256 ss tB  m64n256k16, B MN-major             P V from shared memory (warpgroup 1)
 *   n256 rs tB  m64n256k16, A in registers         P V from registers (warpgroup 0)
 * Each small form runs with CHAINS independent accumulators (1: every instruction waits on the one
 * before, as a k-loop into one tile; 8: eight tiles in turn, as the swapped kernel's 8 blocks of
 * 64 output dims). Prints cycles per instruction (clock64 over the loop, warpgroup 0's first
 * thread, median over the blocks) and the dense-peak fraction that rate is (an SM does 1024 16-bit
 * multiply-adds a cycle).
 *
 *     build-gpu/ignis_wgmma_rates          (built with the CUDA backend; runs on sm_90a only) */
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"
#include "cuda/common/hopper.cuh"

namespace {

constexpr int ITERS = 64, GROUP = 32;
constexpr int SMEM = 1024 + 8 * 1024 + 32 * 1024; /* slack, A (64 x 64), B (256 x 64) */

enum Form { N16, N16_TA, N32, N64, N256_TB, N256_RS };

template <Form F> struct FormInfo;
template <> struct FormInfo<N16> { static constexpr int N = 16; static constexpr const char *name = "n16 ss"; };
template <> struct FormInfo<N16_TA> { static constexpr int N = 16; static constexpr const char *name = "n16 ss tA"; };
template <> struct FormInfo<N32> { static constexpr int N = 32; static constexpr const char *name = "n32 ss"; };
template <> struct FormInfo<N64> { static constexpr int N = 64; static constexpr const char *name = "n64 ss"; };
template <> struct FormInfo<N256_TB> { static constexpr int N = 256; static constexpr const char *name = "n256 ss tB"; };
template <> struct FormInfo<N256_RS> { static constexpr int N = 256; static constexpr const char *name = "n256 rs tB"; };

template <Form F, int CHAINS, int WARPGROUPS>
__global__ void __launch_bounds__(128 * WARPGROUPS, 1) rates_kernel(long long *cycles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int N = FormInfo<F>::N, ACC = N / 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = ignis_smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint4 *const zero = reinterpret_cast<uint4 *>(smem_raw + (base - raw));
  for (int i = threadIdx.x; i < (SMEM - 1024) / 16; i += blockDim.x)
    zero[i] = make_uint4(0, 0, 0, 0);
  ignis_fence_proxy_async();
  __syncthreads();
  const uint32_t a = base, b = base + 8 * 1024;
  float d[CHAINS][ACC];
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
#pragma unroll
    for (int i = 0; i < ACC; ++i)
      d[c][i] = 0.0f;
  const uint32_t z = threadIdx.x >> 10; /* 0, not known to the compiler: A fragments in registers */
  uint32_t frag[4][4]; /* four distinct fragments, as the kernel's four key steps */
#pragma unroll
  for (int f = 0; f < 4; ++f)
#pragma unroll
    for (int v = 0; v < 4; ++v)
      frag[f][v] = z * (uint32_t)(4 * f + v + 1);
  const long long start = clock64();
  for (int it = 0; it < ITERS; ++it) {
    ignis_wgmma_fence();
#pragma unroll
    for (int k = 0; k < GROUP; ++k) {
      const int c = k % CHAINS, step = (k / CHAINS) & 3;
      if constexpr (F == N16 || F == N32 || F == N64)
        ignis_wgmma_m64n_small<IGNIS_WGMMA_BF16, N>(d[c], ignis_wgmma_desc(a + step * 32),
                                                    ignis_wgmma_desc(b + step * 32), 1);
      else if constexpr (F == N16_TA)
        ignis_wgmma_m64n_small<IGNIS_WGMMA_BF16, N, true>(d[c], ignis_wgmma_desc(a + step * 2048, 8192),
                                                          ignis_wgmma_desc(b + step * 32), 1);
      else if constexpr (F == N256_TB)
        ignis_wgmma_m64n256<IGNIS_WGMMA_BF16, true>(d[c], ignis_wgmma_desc(a + step * 32),
                                                    ignis_wgmma_desc(b + step * 2048, 8192), 1);
      else
        ignis_wgmma_rs<IGNIS_WGMMA_BF16, 256>(d[c], frag[k & 3], ignis_wgmma_desc(b + step * 2048, 8192));
    }
    ignis_wgmma_commit();
    ignis_wgmma_wait<0>();
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
      ignis_wgmma_pin(d[c]);
  }
  const long long stop = clock64();
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c)
#pragma unroll
    for (int i = 0; i < ACC; ++i)
      sum += d[c][i];
  if (threadIdx.x == 0)
    cycles[blockIdx.x] = sum == 1.0f ? 0 : stop - start; /* sum is 0: keeps the products live */
#else
  if (threadIdx.x == 0)
    cycles[blockIdx.x] = 0;
#endif
}

template <Form F, int CHAINS, int WARPGROUPS> void run(int sms, long long *cycles_dev) {
  constexpr int N = FormInfo<F>::N;
  auto kernel = rates_kernel<F, CHAINS, WARPGROUPS>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  kernel<<<sms, 128 * WARPGROUPS, SMEM>>>(cycles_dev); /* warm-up */
  kernel<<<sms, 128 * WARPGROUPS, SMEM>>>(cycles_dev);
  CK(cudaDeviceSynchronize());
  std::vector<long long> cycles(sms);
  CK(cudaMemcpy(cycles.data(), cycles_dev, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double per = (double)cycles[sms / 2] / (ITERS * GROUP);
  /* multiply-adds a cycle on the SM: every warpgroup's instructions share the tensor cores */
  const double macs = 64.0 * N * 16 * WARPGROUPS / per;
  printf("| %-10s | %d | %d | %8.1f | %5.1f%% |\n", FormInfo<F>::name, CHAINS, WARPGROUPS, per,
         100.0 * macs / 1024.0);
}

} // namespace

int main() {
  int device = 0, sms = 0, major = 0, minor = 0;
  CK(cudaGetDevice(&device));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major * 10 + minor != 90) {
    printf("ignis_wgmma_rates: needs compute capability 9.0 (this device is %d.%d)\n", major, minor);
    return 0;
  }
  long long *cycles = nullptr;
  CK(cudaMalloc(&cycles, sizeof(long long) * sms));
  printf("| form | chains | warpgroups | cycles an instruction (each warpgroup) | of dense peak |\n");
  printf("|---|---|---|---|---|\n");
  run<N16, 1, 1>(sms, cycles);
  run<N16, 8, 1>(sms, cycles);
  run<N16, 8, 2>(sms, cycles);
  run<N16_TA, 8, 1>(sms, cycles);
  run<N16_TA, 8, 2>(sms, cycles);
  run<N32, 1, 1>(sms, cycles);
  run<N32, 4, 1>(sms, cycles);
  run<N64, 1, 1>(sms, cycles);
  run<N64, 2, 1>(sms, cycles);
  run<N64, 2, 2>(sms, cycles);
  run<N256_TB, 1, 1>(sms, cycles);
  run<N256_TB, 1, 2>(sms, cycles);
  run<N256_RS, 1, 1>(sms, cycles);
  run<N256_RS, 1, 2>(sms, cycles);
  CK(cudaFree(cycles));
  return 0;
}
