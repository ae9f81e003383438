/* The Hopper (sm_90a) small-M block-scaled fp8 GEMM (gemm_small_m_sm90.h): out[m, :] = sum over K
 * blocks kb of (a[m, kb] . b[:, kb]) * a_scale[m, kb] * b_scale[n / 128, kb] for a few rows m
 * (decode, M <= 64), where the time is the weight's bytes: each weight element must be read once,
 * by one block, and the whole GPU must be reading. (A 16-bit form, with its K coordinate fixed, is
 * on branch small-m-sm90, not yet run.)
 *
 * Swap AB: a block owns 64 weight rows (n0 .. n0 + 63) and one range of K blocks. wgmma computes
 * out^T tiles, D[64 weight rows, BN tokens] = W[64, 128-byte K block] A[BN, K block]^T with
 * m64nBNk32 e4m3 (BN = 16, 32 or 64: the smallest that holds M; a stage holds 128 bytes of K),
 * both operands read from shared memory where TMA wrote them in the 128-byte swizzle layout
 * (common/hopper.cuh); rows of A past M and K past the end arrive as zeros. So the weight tile, not the
 * activation, sits on the 64-row side, and the few activation rows pad only up to 16, not 64.
 *
 * Block: 160 threads. Warps 0-3 are the consumer warpgroup, warp 4's lane 0 the producer: it
 * issues the TMA loads of every K block of the block's range into a ring of stages (with one block
 * per SM the whole range is in flight at once when it fits: 12 to 16 stages of 10 to 16 KB; half
 * that with two), each stage
 * guarded by a full mbarrier (the producer's arrival with the byte count) and an empty one (one
 * arrival per consumer warp). Per K block the consumers issue 4 wgmma into a zeroed partial tile,
 * wait for them, release the stage and add the partial to the f32 tile scaled by
 * b_scale[n0 / 128, kb] (one per block: 64 rows sit inside a 128-row scale block) times
 * a_scale[token, kb] (one per column; the next block's scales load while this one multiplies).
 *
 * Split K (blockIdx.y): when the weight tiles alone (N / 64 blocks) leave SMs idle, K is cut into
 * `splits` ranges. Each block writes its f32 tile to partials[split, m, n]; the last block of a
 * weight tile to finish (a counter per tile, reset by that block) adds the splits in order
 * 0 .. splits - 1 and writes out, so every call gives the same bits. Unsplit, the consumers write
 * out straight from the accumulators.
 *
 * Launched with PDL (ignis_launch): every thread waits (griddepcontrol.wait) before its first
 * global access. */
#include <limits.h>
#include <string.h>

#include "core/validate.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"
#include "cuda/common/hopper.cuh"
#include "cuda/gemm/gemm_small_m_sm90.h"
#include "cuda/gemm/grouped_gemm_sm90.h"

namespace {

constexpr int BM = 64, THREADS = 160, ROW_BYTES = 128, K_STEP_BYTES = 32;
constexpr int SMEM_BUDGET = 200 * 1024; /* stages; barriers and alignment slack come on top */
constexpr int MAX_STAGES = 16;

template <int BN> struct Config {
  static constexpr int W_BYTES = BM * ROW_BYTES; /* 8 KB */
  static constexpr int A_BYTES = BN * ROW_BYTES;
  static constexpr int STAGE_BYTES = W_BYTES + A_BYTES;
  /* the ring's stages for `per_sm` resident blocks per SM, and its shared memory */
  static constexpr int stages(int per_sm) {
    return SMEM_BUDGET / per_sm / STAGE_BYTES > MAX_STAGES ? MAX_STAGES : SMEM_BUDGET / per_sm / STAGE_BYTES;
  }
  static constexpr int smem_bytes(int stages) {
    return stages * STAGE_BYTES + 2 * stages * 8 + 1024;
  }
  static constexpr int ACC = BN / 2; /* f32 accumulators per thread */
  static_assert(BN == 16 || BN == 32 || BN == 64, "BN 16, 32 or 64");
};

struct Params {
  CUtensorMap map_w, map_a;
  void *out;
  int64_t out_row_stride; /* elements */
  ignis_dtype out_dtype;
  int m, n, k_blocks, kb_per_split, splits, stages;
  const void *a_scale, *b_scale;
  bool scale_u8;
  int64_t a_scale_sm, a_scale_sk, b_scale_sn, b_scale_sk;
  float *partials;
  unsigned *counters;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* the device code below: sm_90a only */
__device__ __forceinline__ void store_out(const Params &p, int64_t token, int64_t col, float v) {
  const int64_t i = token * p.out_row_stride + col;
  if (p.out_dtype == IGNIS_F16)
    static_cast<__half *>(p.out)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16 *>(p.out)[i] = __float2bfloat16_rn(v);
}
#endif

template <int BN>
__global__ void __launch_bounds__(THREADS, 1) small_m_sm90_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef Config<BN> C;
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (ignis_smem_addr(smem) + 1023u) & ~1023u;
  const int stages = p.stages;
  const uint32_t full = base + stages * C::STAGE_BYTES, empty = full + 8 * stages;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * BM, split = blockIdx.y;
  const int kb0 = split * p.kb_per_split;
  const int kb_end = min(p.k_blocks, kb0 + p.kb_per_split);

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      ignis_mbar_init(full + 8 * s, 1);
      ignis_mbar_init(empty + 8 * s, 4); /* lane 0 of each consumer warp */
    }
    ignis_mbar_init_fence();
  }
  __syncthreads();
  ignis_pdl_wait();

  if (warp == 4) { /* ---- producer ---- */
    if (lane == 0) {
      ignis_tma_prefetch(&p.map_w);
      ignis_tma_prefetch(&p.map_a);
      int stage = 0;
      uint32_t phase = 0;
      for (int kb = kb0; kb < kb_end; ++kb) {
        ignis_mbar_wait(empty + 8 * stage, phase ^ 1u);
        const uint32_t dst = base + stage * C::STAGE_BYTES, bar = full + 8 * stage;
        ignis_tma_load_2d(dst, &p.map_w, bar, kb * ROW_BYTES, n0);
        ignis_tma_load_2d(dst + C::W_BYTES, &p.map_a, bar, kb * ROW_BYTES, 0);
        ignis_mbar_arrive_expect_tx(bar, C::STAGE_BYTES);
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
  } else {                                     /* ---- consumers ---- */
    const int row_a = 16 * warp + (lane >> 2); /* the thread's tile rows row_a, row_a + 8 */
    const int col0 = 2 * (lane & 3);           /* its tokens col0 + 8 j + e */
    float acc[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i)
      acc[i] = 0.0f;
    int stage = 0;
    uint32_t phase = 0;
    auto wait_full = [&]() -> uint32_t {
      ignis_mbar_wait(full + 8 * stage, phase);
      return base + stage * C::STAGE_BYTES;
    };
    auto release = [&] {
      if (lane == 0)
        ignis_mbar_arrive(empty + 8 * stage);
      if (++stage == stages) {
        stage = 0;
        phase ^= 1u;
      }
    };
    constexpr int COLUMNS = BN / 4; /* distinct tokens per thread (scales) */
    const int64_t b_sc = (int64_t)(n0 / 128) * p.b_scale_sn;
    int64_t a_sc[COLUMNS];
#pragma unroll
    for (int c = 0; c < COLUMNS; ++c)
      a_sc[c] = (int64_t)min(col0 + 8 * (c >> 1) + (c & 1), p.m - 1) * p.a_scale_sm;
    uint32_t next_a[COLUMNS], next_b;
    auto load_scales = [&](int kb) {
#pragma unroll
      for (int c = 0; c < COLUMNS; ++c)
        next_a[c] = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc[c] + (int64_t)kb * p.a_scale_sk);
      next_b = ignis_block_scale_raw(p.b_scale, p.scale_u8, b_sc + (int64_t)kb * p.b_scale_sk);
    };
    float part[C::ACC];
    load_scales(kb0);
    for (int kb = kb0; kb < kb_end; ++kb) {
      uint32_t cur_a[COLUMNS];
#pragma unroll
      for (int c = 0; c < COLUMNS; ++c)
        cur_a[c] = next_a[c];
      const uint32_t cur_b = next_b;
      if (kb + 1 < kb_end)
        load_scales(kb + 1);
      const uint32_t w_tile = wait_full(), a_tile = w_tile + C::W_BYTES;
      ignis_wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < ROW_BYTES / K_STEP_BYTES; ++ks)
        ignis_wgmma_m64n_small<IGNIS_WGMMA_E4M3, BN>(part, ignis_wgmma_desc(w_tile + ks * K_STEP_BYTES),
                                                     ignis_wgmma_desc(a_tile + ks * K_STEP_BYTES), ks);
      ignis_wgmma_commit();
      ignis_wgmma_wait<0>();
      ignis_wgmma_pin(part);
      release();
      const float b_scale = ignis_block_scale_value(cur_b, p.scale_u8);
#pragma unroll
      for (int c = 0; c < COLUMNS; ++c) {
        const float sc = ignis_block_scale_value(cur_a[c], p.scale_u8) * b_scale;
        const int j = c >> 1, e = c & 1;
        acc[4 * j + e] = fmaf(part[4 * j + e], sc, acc[4 * j + e]);
        acc[4 * j + 2 + e] = fmaf(part[4 * j + 2 + e], sc, acc[4 * j + 2 + e]);
      }
    }
    /* acc[4 j + 2 h + e]: tile row row_a + 8 h, token col0 + 8 j + e */
    float *part_out = p.splits > 1 ? p.partials + (int64_t)split * p.m * p.n : nullptr;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int token = col0 + 8 * j + e, col = n0 + row_a + 8 * h;
          if (token >= p.m || col >= p.n)
            continue;
          if (part_out)
            __stcg(part_out + (int64_t)token * p.n + col, acc[4 * j + 2 * h + e]);
          else
            store_out(p, token, col, acc[4 * j + 2 * h + e]);
        }
  }
  if (p.splits == 1)
    return;

  /* split K: the last block of this weight tile to arrive adds the splits in order 0 .. S-1 */
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  unsigned *counter = p.counters + blockIdx.x;
  if (tid == 0)
    is_last = atomicAdd(counter, 1u) == (unsigned)p.splits - 1;
  __syncthreads();
  if (!is_last)
    return;
  __threadfence();
  const int cols = min(BM, p.n - n0);
  const int64_t split_stride = (int64_t)p.m * p.n;
  for (int i = tid; i < p.m * cols; i += THREADS) {
    const int token = i / cols, col = n0 + (i - token * cols);
    const float *src = p.partials + (int64_t)token * p.n + col;
    float sum = 0.0f;
    for (int s = 0; s < p.splits; ++s)
      sum += __ldcg(src + s * split_stride);
    store_out(p, token, col, sum);
  }
  if (tid == 0)
    *counter = 0u;
#endif
}

/* ---- host --------------------------------------------------------------------------------------- */
bool aligned16(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

template <int BN> ignis_status launch(Params p, int n_tiles, int per_sm, cudaStream_t stream) {
  typedef Config<BN> C;
  p.stages = C::stages(per_sm);
  const int smem = C::smem_bytes(p.stages);
  cudaError_t err = ignis_allow_dynamic_smem<small_m_sm90_kernel<BN>>(C::smem_bytes(C::stages(1)));
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA,
                           "ignis small-M GEMM (sm90): cannot allow %d bytes of shared memory: %s",
                           C::smem_bytes(C::stages(1)), cudaGetErrorString(err));
  err = ignis_launch(small_m_sm90_kernel<BN>, dim3(n_tiles, p.splits), dim3(THREADS), smem, stream, p);
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis small-M GEMM (sm90): launch failed: %s",
                           cudaGetErrorString(err));
  return IGNIS_OK;
}

ignis_status launch_for_rows(const Params &p, int n_tiles, int per_sm, cudaStream_t stream) {
  if (p.m <= 16)
    return launch<16>(p, n_tiles, per_sm, stream);
  if (p.m <= 32)
    return launch<32>(p, n_tiles, per_sm, stream);
  return launch<64>(p, n_tiles, per_sm, stream);
}

} // namespace

extern "C" int ignis_cuda_gemm_small_m_sm90_fits(const ignis_gemm_params *p, int32_t device) {
  const int64_t limit = (int64_t)1 << 30;
  if (p->kind != IGNIS_GEMM_FP8_BLOCK || p->batch != 1 || p->b_stride_k != 1 || p->m < 1 ||
      p->m > IGNIS_GEMM_SMALL_M_SM90_MAX_M || p->n < 1 || p->n >= limit || p->k <= 0 || p->k >= limit)
    return 0;
  if (p->b_scale_block_n != IGNIS_GEMM_SCALE_BLOCK || p->a_dtype != IGNIS_FP8_E4M3 ||
      p->b_dtype != IGNIS_FP8_E4M3 || (p->out_dtype != IGNIS_BF16 && p->out_dtype != IGNIS_F16))
    return 0;
  /* rows in bytes = elements (e4m3) */
  if (p->k % 16 != 0 || !aligned16(p->a) || !aligned16(p->b) || (p->m > 1 && p->a_row_stride % 16 != 0) ||
      p->b_stride_n % 16 != 0 || p->b_stride_n * p->n >= ((int64_t)1 << 40) ||
      (p->m > 1 && p->a_row_stride * p->m >= ((int64_t)1 << 40)))
    return 0;
  return ignis_cuda_gemm_sm90_mode() != IGNIS_GEMM_SM90_OFF && ignis_cuda_gemm_sm90_device(device);
}

/* Routed only with IGNIS_GEMM_SM90=all: on the H100 (13b8ac1) it ran N2112 K7168 at M 64 in
 * 31.7-33.3 us and N7168 K2048 at M 64 in 20.7, where cuBLASLt took 19-20 and 13.4 in earlier runs
 * (notes/PERF.md), so by default these calls stay on cuBLASLt. */
extern "C" int ignis_cuda_gemm_small_m_sm90_takes(const ignis_gemm_params *p, int32_t device) {
  return ignis_cuda_gemm_sm90_mode() == IGNIS_GEMM_SM90_ALL && p->m >= IGNIS_GEMM_SMALL_M_SM90_MIN_M &&
         ignis_cuda_gemm_small_m_sm90_fits(p, device);
}

extern "C" ignis_status ignis_cuda_gemm_small_m_sm90(const ignis_gemm_params *gp, int32_t device,
                                                     void *stream, float *partials, size_t partial_floats,
                                                     unsigned *counters, int counters_count, int max_splits,
                                                     int per_sm) {
  if (gp->kind != IGNIS_GEMM_FP8_BLOCK)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis small-M GEMM (sm90): only block-scaled fp8 runs here");
  IGNIS_CUDA_ON_DEVICE(device);
  const int sms = ignis_cuda_sm_count(device);
  const int m = (int)gp->m, n = (int)gp->n;
  const int n_tiles = (n + BM - 1) / BM, k_blocks = (int)((gp->k + ROW_BYTES - 1) / ROW_BYTES);
  /* splits: as many as fill the SMs with per_sm blocks each, if the room holds their partials */
  per_sm = per_sm == 2 ? 2 : 1;
  int splits = n_tiles < sms * per_sm ? sms * per_sm / n_tiles : 1;
  splits = splits < max_splits ? splits : max_splits;
  splits = splits < k_blocks ? splits : k_blocks;
  if (splits < 1 || !partials || !counters || (size_t)splits * m * n > partial_floats ||
      n_tiles > counters_count)
    splits = 1;
  const int kb_per_split = (k_blocks + splits - 1) / splits;
  splits = (k_blocks + kb_per_split - 1) / kb_per_split; /* no empty split */

  Params p;
  memset(&p, 0, sizeof p);
  const CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const cuuint32_t k_box = ROW_BYTES;
  const int bn = m <= 16 ? 16 : (m <= 32 ? 32 : 64);
  const cuuint64_t w_dims[2] = {(cuuint64_t)gp->k, (cuuint64_t)n};
  const cuuint64_t w_strides[1] = {(cuuint64_t)gp->b_stride_n};
  const cuuint32_t w_box[2] = {k_box, BM};
  IGNIS_TRY(ignis_tensor_map_encode(&p.map_w, type, 2, gp->b, w_dims, w_strides, w_box,
                                    "ignis small-M GEMM (sm90): b"));
  const cuuint64_t a_dims[2] = {(cuuint64_t)gp->k, (cuuint64_t)m};
  const cuuint64_t a_strides[1] = {(cuuint64_t)(m > 1 ? gp->a_row_stride : gp->k)};
  const cuuint32_t a_box[2] = {k_box, (cuuint32_t)bn};
  IGNIS_TRY(ignis_tensor_map_encode(&p.map_a, type, 2, gp->a, a_dims, a_strides, a_box,
                                    "ignis small-M GEMM (sm90): a"));
  p.out = gp->out;
  p.out_row_stride = gp->out_row_stride;
  p.out_dtype = gp->out_dtype;
  p.m = m;
  p.n = n;
  p.k_blocks = k_blocks;
  p.kb_per_split = kb_per_split;
  p.splits = splits;
  p.a_scale = gp->a_scale;
  p.b_scale = gp->b_scale;
  p.scale_u8 = gp->scale_dtype == IGNIS_U8;
  p.a_scale_sm = gp->a_scale_stride_m;
  p.a_scale_sk = gp->a_scale_stride_k;
  p.b_scale_sn = gp->b_scale_stride_n;
  p.b_scale_sk = gp->b_scale_stride_k;
  p.partials = splits > 1 ? partials : nullptr;
  p.counters = splits > 1 ? counters : nullptr;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_for_rows(p, n_tiles, per_sm, s);
}
