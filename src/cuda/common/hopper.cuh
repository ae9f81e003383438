/* Hopper (sm_90a) building blocks shared by ignis' warp-specialized kernels: mbarriers, TMA tensor
 * loads, wgmma (descriptors, fences, the m64n128 / m64n256 forms with both operands in shared
 * memory or A in registers), register reallocation and 2-CTA clusters (rank, barrier, remote
 * mbarrier arrival, multicast TMA), plus the host side of TMA: encoding a tensor map through the
 * driver entry point the runtime hands out (cudaGetDriverEntryPointByVersion), so ignis never
 * links libcuda.
 *
 * Shared memory operands are in the canonical K-major 128-byte-swizzle layout that a TMA load with
 * CU_TENSOR_MAP_SWIZZLE_128B writes: rows of 128 bytes (64 16-bit or 128 fp8 elements of K), the
 * 16-byte chunk c of row r stored at chunk c ^ (r & 7), 8-row atoms of 1024 bytes, buffers 1024-byte
 * aligned. Its wgmma descriptor (ignis_wgmma_desc) has SBO = 1024 (the step between 8-row atoms),
 * LBO unused (16), layout "128B swizzle"; a K step of 32 bytes inside the row adds 32 to the start
 * address, and a 64-row slab of a tile adds 8192.
 *
 * Device pieces are only called from kernel bodies compiled for sm_90a (guarded with
 * __CUDA_ARCH_FEAT_SM90_ALL), or (the mbarriers) from the sm_90 paths of the attention kernels
 * (attention_tile.cuh, prefill_wgmma.cuh); the helpers themselves are plain inline functions. Accumulators of
 * m64nN: thread l of warp w (of the warpgroup) holds rows 16 w + l / 4 and + 8; d[4 j + 2 h + e] is
 * row 16 w + l / 4 + 8 h, column 8 j + 2 (l % 4) + e. */
#ifndef IGNIS_CUDA_COMMON_HOPPER_CUH
#define IGNIS_CUDA_COMMON_HOPPER_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/error.h"

/* ---- shared memory and mbarriers -------------------------------------------------------------- */
static __device__ __forceinline__ uint32_t ignis_smem_addr(const void *ptr) {
  return (uint32_t)__cvta_generic_to_shared(ptr);
}
static __device__ __forceinline__ void ignis_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the initialized barriers visible to the async proxy (TMA); a CTA barrier follows. */
static __device__ __forceinline__ void ignis_mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (wgmma
 * operands, bulk and TMA copies into the same bytes). */
static __device__ __forceinline__ void ignis_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
static __device__ __forceinline__ void ignis_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* Arrives and adds `bytes` to the transaction count the current phase waits for. */
static __device__ __forceinline__ void ignis_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
/* Waits until the phase of the given parity has completed. A fresh barrier is in phase 0, so a
 * wait for parity 1 returns at once (how a producer passes its empty slots the first time).
 * CLUSTER_ACQUIRE: the wait acquires at cluster scope, for a barrier other CTAs of the cluster
 * arrive on (ignis_mbar_arrive_cluster), whose released accesses must be ordered before this
 * thread's next. */
#define IGNIS_MBAR_TRY_WAIT(SEM)                                                                   \
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%1], %2;\n"    \
               " selp.u32 %0, 1, 0, p;\n}"                                                           \
               : "=r"(done)                                                                          \
               : "r"(bar), "r"(parity)                                                               \
               : "memory")
template <bool CLUSTER_ACQUIRE = false>
static __device__ __forceinline__ void ignis_mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    if constexpr (CLUSTER_ACQUIRE)
      IGNIS_MBAR_TRY_WAIT(".acquire.cluster");
    else
      IGNIS_MBAR_TRY_WAIT("");
  } while (!done);
}
#undef IGNIS_MBAR_TRY_WAIT

/* ---- TMA ---------------------------------------------------------------------------------------- */
static __device__ __forceinline__ void ignis_tma_prefetch(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
/* Loads the box at coordinates (c0 innermost, c1[, c2]) of `map` into shared memory at dst,
 * counted on bar's transaction count as it lands; out-of-bounds elements are zero. */
static __device__ __forceinline__ void ignis_tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                         int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
static __device__ __forceinline__ void ignis_tma_load_3d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                         int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
               : "memory");
}

/* ignis_tma_load_3d into the same shared offset of every CTA of the cluster named in `mask` (bit r:
 * cluster rank r); each destination's barrier at bar's offset counts the bytes landing there. */
static __device__ __forceinline__ void ignis_tma_load_3d_multicast(uint32_t dst, const CUtensorMap *map,
                                                                   uint32_t bar, int32_t c0, int32_t c1,
                                                                   int32_t c2, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
               : "memory");
}

/* ---- clusters ----------------------------------------------------------------------------------- */
static __device__ __forceinline__ uint32_t ignis_cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
/* Every thread of every CTA of the cluster: this CTA's earlier accesses released, the others'
 * acquired. */
static __device__ __forceinline__ void ignis_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* Arrives on the barrier at bar's shared offset in the cluster's CTA `rank` (this one included). */
static __device__ __forceinline__ void ignis_mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
               " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
               "r"(rank)
               : "memory");
}

/* ---- register reallocation -------------------------------------------------------------------- */
/* Every warp of the warpgroup executes it; the kernel needs __launch_bounds__ so that ptxas knows
 * the starting budget. */
template <int REGS> static __device__ __forceinline__ void ignis_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS> static __device__ __forceinline__ void ignis_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

/* ---- wgmma ------------------------------------------------------------------------------------- */
static __device__ __forceinline__ void ignis_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void ignis_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void ignis_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accesses of accumulator registers across wgmma issue and wait. */
template <int N> static __device__ __forceinline__ void ignis_wgmma_pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}

/* Descriptor of an operand in the 128-byte-swizzle layout starting at shared address addr, 8-row
 * atoms 1024 bytes apart (SBO). K-major operands leave lbo at 16 (unused); an MN-major B operand
 * (B_MN_MAJOR below: rows of the tile run along K, 64-element panels along N) passes the byte step
 * from one 64-element panel of N to the next. */
static __device__ __forceinline__ uint64_t ignis_wgmma_desc(uint32_t addr, uint32_t lbo = 16u) {
  return (uint64_t)((addr & 0x3ffffu) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(1024u >> 4) << 32 |
         1ull << 62;
}

/* Input types of the wgmma forms below (f32 accumulators): K = 16 for the 16-bit types, 32 for e4m3. */
enum ignis_wgmma_type { IGNIS_WGMMA_BF16, IGNIS_WGMMA_F16, IGNIS_WGMMA_E4M3 };

/* Operand lists of the accumulators (64 or 128 f32 registers). */
#define IGNIS_WGMMA_D64                                                                                      \
  "{"                                                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                   \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                         \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                         \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"                           \
  "}"
#define IGNIS_WGMMA_D64_OPERANDS                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),            \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),             \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),             \
      "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),             \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),             \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),             \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),             \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define IGNIS_WGMMA_D128                                                                                     \
  "{"                                                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                   \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                         \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                         \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                         \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                         \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                         \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "             \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"           \
  "}"
#define IGNIS_WGMMA_D128_OPERANDS                                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),            \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),             \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),             \
      "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),             \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),             \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),             \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),             \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),             \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),             \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),             \
      "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),             \
      "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),             \
      "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),             \
      "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),      \
      "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),      \
      "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),      \
      "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* d (+)= A B for a 64 x N tile, A (64 x K) and B (N x K) K-major in shared memory (descriptors a
 * and b), K = 16 (16-bit) or 32 (e4m3); d = A B when accumulate is 0. */
template <ignis_wgmma_type T>
static __device__ __forceinline__ void ignis_wgmma_m64n128(float (&d)[64], uint64_t a, uint64_t b,
                                                           int accumulate) {
  if constexpr (T == IGNIS_WGMMA_BF16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " IGNIS_WGMMA_D64
                 ", %64, %65, p, 1, 1, 0, 0;\n}"
                 : IGNIS_WGMMA_D64_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate));
  else if constexpr (T == IGNIS_WGMMA_F16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " IGNIS_WGMMA_D64
                 ", %64, %65, p, 1, 1, 0, 0;\n}"
                 : IGNIS_WGMMA_D64_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " IGNIS_WGMMA_D64
                 ", %64, %65, p, 1, 1;\n}"
                 : IGNIS_WGMMA_D64_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate));
}

/* B_MN_MAJOR: B stored N-contiguous (the transpose flag; 16-bit types only), as the rows of a key
 * tile are for the V operand of P V. */
template <ignis_wgmma_type T, bool B_MN_MAJOR = false>
static __device__ __forceinline__ void ignis_wgmma_m64n256(float (&d)[128], uint64_t a, uint64_t b,
                                                           int accumulate) {
  static_assert(!B_MN_MAJOR || T != IGNIS_WGMMA_E4M3, "e4m3 wgmma takes K-major operands only");
  constexpr int TB = B_MN_MAJOR ? 1 : 0;
  if constexpr (T == IGNIS_WGMMA_BF16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " IGNIS_WGMMA_D128
                 ", %128, %129, p, 1, 1, 0, %131;\n}"
                 : IGNIS_WGMMA_D128_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate), "n"(TB));
  else if constexpr (T == IGNIS_WGMMA_F16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " IGNIS_WGMMA_D128
                 ", %128, %129, p, 1, 1, 0, %131;\n}"
                 : IGNIS_WGMMA_D128_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate), "n"(TB));
  else
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " IGNIS_WGMMA_D128
                 ", %128, %129, p, 1, 1;\n}"
                 : IGNIS_WGMMA_D128_OPERANDS
                 : "l"(a), "l"(b), "r"(accumulate));
}

/* d += A B for a 64 x N tile (N = 128 or 256, N / 2 accumulators a thread), K = 16: A in registers
 * (per warp the m16n8k16 A fragment of its 16 rows: a[0] rows l / 4, k 2 (l % 4) +0/1; a[1] rows + 8;
 * a[2], a[3] the same at k + 8), B MN-major in shared memory (16-bit types): P V of attention, P
 * packed straight from the score accumulators. */
template <ignis_wgmma_type T, int N>
static __device__ __forceinline__ void ignis_wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  static_assert(T != IGNIS_WGMMA_E4M3, "16-bit A fragments");
  static_assert(N == 128 || N == 256, "N 128 or 256");
  if constexpr (N == 128 && T == IGNIS_WGMMA_BF16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " IGNIS_WGMMA_D64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
                 : IGNIS_WGMMA_D64_OPERANDS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else if constexpr (N == 128)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " IGNIS_WGMMA_D64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"
                 : IGNIS_WGMMA_D64_OPERANDS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else if constexpr (T == IGNIS_WGMMA_BF16)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " IGNIS_WGMMA_D128
                 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}"
                 : IGNIS_WGMMA_D128_OPERANDS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
                 " wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " IGNIS_WGMMA_D128
                 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}"
                 : IGNIS_WGMMA_D128_OPERANDS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

/* d (+)= A B for a 64 x N tile with N = 16, 32 or 64 (N / 2 accumulators per thread), both operands
 * in shared memory (the small-M GEMM's forms: A the weight rows, B the few activation rows), K = 16
 * (16-bit) or 32 (e4m3); d = A B when accumulate is 0. B is K-major; A too, or with A_MN_MAJOR (16-bit
 * types) stored M-contiguous (the transpose flag: V^T of a key tile in MLA's swapped output product,
 * the descriptor's SBO the step between 8-row groups of K). */
#define IGNIS_WGMMA_N16_D "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define IGNIS_WGMMA_N16_OPERANDS                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define IGNIS_WGMMA_N32_D "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define IGNIS_WGMMA_N32_OPERANDS                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),            \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define IGNIS_WGMMA_N64_D                                                                                    \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "    \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define IGNIS_WGMMA_N64_OPERANDS                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),            \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),             \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),             \
      "+f"(d[30]), "+f"(d[31])
template <ignis_wgmma_type T, int N, bool A_MN_MAJOR = false>
static __device__ __forceinline__ void ignis_wgmma_m64n_small(float (&d)[N / 2], uint64_t a, uint64_t b,
                                                              int accumulate) {
  static_assert(N == 16 || N == 32 || N == 64, "N 16, 32 or 64");
  static_assert(!A_MN_MAJOR || T != IGNIS_WGMMA_E4M3, "e4m3 wgmma takes K-major operands only");
  constexpr int TA = A_MN_MAJOR ? 1 : 0;
  if constexpr (N == 16) {
    if constexpr (T == IGNIS_WGMMA_BF16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 " IGNIS_WGMMA_N16_D
                   ", %8, %9, p, 1, 1, %11, 0;\n}"
                   : IGNIS_WGMMA_N16_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else if constexpr (T == IGNIS_WGMMA_F16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 " IGNIS_WGMMA_N16_D
                   ", %8, %9, p, 1, 1, %11, 0;\n}"
                   : IGNIS_WGMMA_N16_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 " IGNIS_WGMMA_N16_D
                   ", %8, %9, p, 1, 1;\n}"
                   : IGNIS_WGMMA_N16_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate));
  } else if constexpr (N == 32) {
    if constexpr (T == IGNIS_WGMMA_BF16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " IGNIS_WGMMA_N32_D
                   ", %16, %17, p, 1, 1, %19, 0;\n}"
                   : IGNIS_WGMMA_N32_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else if constexpr (T == IGNIS_WGMMA_F16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " IGNIS_WGMMA_N32_D
                   ", %16, %17, p, 1, 1, %19, 0;\n}"
                   : IGNIS_WGMMA_N32_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 " IGNIS_WGMMA_N32_D
                   ", %16, %17, p, 1, 1;\n}"
                   : IGNIS_WGMMA_N32_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate));
  } else if constexpr (N == 64) {
    if constexpr (T == IGNIS_WGMMA_BF16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " IGNIS_WGMMA_N64_D
                   ", %32, %33, p, 1, 1, %35, 0;\n}"
                   : IGNIS_WGMMA_N64_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else if constexpr (T == IGNIS_WGMMA_F16)
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " IGNIS_WGMMA_N64_D
                   ", %32, %33, p, 1, 1, %35, 0;\n}"
                   : IGNIS_WGMMA_N64_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate), "n"(TA));
    else
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                   " wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " IGNIS_WGMMA_N64_D
                   ", %32, %33, p, 1, 1;\n}"
                   : IGNIS_WGMMA_N64_OPERANDS
                   : "l"(a), "l"(b), "r"(accumulate));
  }
}
#undef IGNIS_WGMMA_N16_D
#undef IGNIS_WGMMA_N16_OPERANDS
#undef IGNIS_WGMMA_N32_D
#undef IGNIS_WGMMA_N32_OPERANDS
#undef IGNIS_WGMMA_N64_D
#undef IGNIS_WGMMA_N64_OPERANDS

#undef IGNIS_WGMMA_D64
#undef IGNIS_WGMMA_D64_OPERANDS
#undef IGNIS_WGMMA_D128
#undef IGNIS_WGMMA_D128_OPERANDS

/* ---- host: tensor maps ------------------------------------------------------------------------- */
/* The driver's cuTensorMapEncodeTiled, looked up once through the runtime; NULL when the driver has
 * none (then no TMA kernel can run). */
static inline PFN_cuTensorMapEncodeTiled_v12000 ignis_tensor_map_encoder(void) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else /* toolkits before 12.5 have only the unversioned lookup */
    cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

/* A tiled tensor map over `address` (rank dims, innermost first, in elements; strides: the outer
 * rank - 1 strides in bytes), boxes of `box` elements landing in shared memory in the 128-byte
 * swizzle layout, out-of-bounds elements read as zero. `what` names the tensor in the message. */
static inline ignis_status ignis_tensor_map_encode(CUtensorMap *map, CUtensorMapDataType type, int rank,
                                                   const void *address, const cuuint64_t *dims,
                                                   const cuuint64_t *strides, const cuuint32_t *box,
                                                   const char *what) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = ignis_tensor_map_encoder();
  if (!encode)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: the CUDA driver has no cuTensorMapEncodeTiled",
                           what);
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUresult r = encode(map, type, (cuuint32_t)rank, const_cast<void *>(address), dims, strides, box,
                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return ignis_set_error(IGNIS_ERROR_CUDA, "%s: cuTensorMapEncodeTiled failed (CUresult %d)", what, (int)r);
  return IGNIS_OK;
}

/* ignis_tensor_map_encode of a 16-bit tensor for a kernel form that can do without it: false, and
 * no error left behind, where the driver has no encoder or cannot describe the layout (the caller
 * then runs a form without TMA). */
static inline bool ignis_tensor_map_try_u16(CUtensorMap *map, int rank, const void *address, const cuuint64_t *dims,
                                            const cuuint64_t *strides, const cuuint32_t *box) {
  if (ignis_tensor_map_encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, rank, address, dims, strides, box, "TMA form") ==
      IGNIS_OK)
    return true;
  ignis_clear_error();
  return false;
}

#endif
