/* The Hopper (sm_90a) small-M GEMM (gemm_small_m_sm90.h): block-scaled fp8, out[m, :] = sum over
 * K blocks kb of (a[m, kb] . b[:, kb]) * a_scale[m, kb] * b_scale[n / 128, kb], or 16-bit,
 * out = a b^T, for a few rows m (decode, M <= 64), where the time is the weight's bytes: each
 * weight element must be read once, by one block, and the whole GPU must be reading.
 *
 * Swap AB: a block owns 64 weight rows (n0 .. n0 + 63) and one range of K blocks. wgmma computes
 * out^T tiles, D[64 weight rows, BN tokens] = W[64, 128-byte K block] A[BN, K block]^T with
 * m64nBNk32 e4m3 or m64nBNk16 bf16 / f16 (BN = 16, 32 or 64: the smallest that holds M; a K step
 * is 32 bytes either way, a stage 128 bytes of K), both operands read from shared memory where TMA
 * wrote them in the 128-byte swizzle layout (common/hopper.cuh); rows of A past M
 * and K past the end arrive as zeros. So the weight tile, not the activation, sits on the 64-row
 * side, and the few activation rows pad only up to 16, not 64.
 *
 * Block: WG consumer warpgroups (warps 0 .. 4 WG - 1; WG 1, 2 or 4) and a producer warp, whose
 * lane 0 issues the TMA loads of every K block of the block's range into a ring of stages (with one
 * block per SM the whole range is in flight at once when it fits: 12 to 16 stages of 10 to 16 KB;
 * half that with two), each stage guarded by a full mbarrier (the producer's arrival with the byte
 * count) and an empty one (one arrival per warp of the consuming warpgroup). The warpgroups take
 * the K blocks in turn (warpgroup g the blocks kb0 + g, + WG, ...), so one's waits and promotion
 * run under another's wgmma. Per K block a warpgroup issues 4 wgmma into a zeroed partial tile,
 * waits for them, releases the stage and adds the partial to its f32 tile scaled by
 * b_scale[n0 / 128, kb] (one per block: 64 rows sit inside a 128-row scale block) times
 * a_scale[token, kb] (one per column; its next block's scales load while this one multiplies).
 * At the end warpgroups 1 .. WG-1 hand their tiles to warpgroup 0 through the idle ring, which
 * adds them in warpgroup order.
 * 16-bit: the wgmma accumulate into the f32 tile directly.
 * DEPTH 2 keeps two K blocks in flight per warpgroup: fp8 issues the next block's wgmma into a second
 * partial tile before waiting for this one's; 16-bit leaves one wgmma group in flight and releases
 * each stage one block late.
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

constexpr int BM = 64, ROW_BYTES = 128, K_STEP_BYTES = 32;
constexpr int MAX_SPLITS = 8;           /* K splits at most (the last block's sum keeps them in registers) */
constexpr int SMEM_BUDGET = 200 * 1024; /* stages; barriers and alignment slack come on top */
constexpr int MAX_STAGES = 16;

enum class Elem { E4M3, BF16, F16 };

template <Elem E, int BN> struct Config {
  static constexpr bool FP8 = E == Elem::E4M3;
  static constexpr ignis_wgmma_type TYPE =
      E == Elem::BF16 ? IGNIS_WGMMA_BF16 : (E == Elem::F16 ? IGNIS_WGMMA_F16 : IGNIS_WGMMA_E4M3);
  static constexpr int K_STAGE = E == Elem::E4M3 ? ROW_BYTES : ROW_BYTES / 2; /* K elements per stage */
  static constexpr int W_BYTES = BM * ROW_BYTES;                              /* 8 KB */
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
  else if (p.out_dtype == IGNIS_BF16)
    static_cast<__nv_bfloat16 *>(p.out)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float *>(p.out)[i] = v;
}
#endif

/* WG consumer warpgroups (warps 0 .. 4 WG - 1), then the producer warp. */
template <Elem E, int BN, int WG, int DEPTH>
__global__ void __launch_bounds__(128 * WG + 32, 1) small_m_sm90_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef Config<E, BN> C;
  constexpr int THREADS = 128 * WG + 32;
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
      ignis_mbar_init(empty + 8 * s, 4); /* lane 0 of each warp of the consuming warpgroup */
    }
    ignis_mbar_init_fence();
  }
  __syncthreads();
  ignis_pdl_wait();

  if (warp == 4 * WG) { /* ---- producer ---- */
    if (lane == 0) {
      ignis_tma_prefetch(&p.map_w);
      ignis_tma_prefetch(&p.map_a);
      int stage = 0;
      uint32_t phase = 0;
      for (int kb = kb0; kb < kb_end; ++kb) {
        ignis_mbar_wait(empty + 8 * stage, phase ^ 1u);
        const uint32_t dst = base + stage * C::STAGE_BYTES, bar = full + 8 * stage;
        ignis_tma_load_2d(dst, &p.map_w, bar, kb * C::K_STAGE, n0);
        ignis_tma_load_2d(dst + C::W_BYTES, &p.map_a, bar, kb * C::K_STAGE, 0);
        ignis_mbar_arrive_expect_tx(bar, C::STAGE_BYTES);
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
  } else { /* ---- consumers: warpgroup wg takes the K blocks kb0 + wg, + WG, ... ---- */
    const int wg = warp >> 2, wt = tid & 127;
    const int row_a = 16 * (warp & 3) + (lane >> 2); /* the thread's tile rows row_a, row_a + 8 */
    const int col0 = 2 * (lane & 3);                 /* its tokens col0 + 8 j + e */
    float acc[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i)
      acc[i] = 0.0f;
    int stage = wg % stages;
    uint32_t phase = (uint32_t)((wg / stages) & 1);
    auto wait_full = [&]() -> uint32_t {
      ignis_mbar_wait(full + 8 * stage, phase);
      return base + stage * C::STAGE_BYTES;
    };
    auto release = [&] {
      if (lane == 0)
        ignis_mbar_arrive(empty + 8 * stage);
      stage += WG;
      if (stage >= stages) {
        stage -= stages;
        phase ^= 1u;
      }
    };
    /* DEPTH 2: `issue_at` is the stage the next issue waits for (`stage` stays the next release);
     * issue() waits for it and issues its K block's wgmma into d (d = the block's products when
     * accumulate is 0, d += them when 1) as one commit group. */
    int issue_at = stage;
    uint32_t issue_phase = phase;
    auto issue = [&](float(&d)[C::ACC], int accumulate) {
      ignis_mbar_wait(full + 8 * issue_at, issue_phase);
      const uint32_t w_tile = base + issue_at * C::STAGE_BYTES, a_tile = w_tile + C::W_BYTES;
      issue_at += WG;
      if (issue_at >= stages) {
        issue_at -= stages;
        issue_phase ^= 1u;
      }
      ignis_wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < ROW_BYTES / K_STEP_BYTES; ++ks)
        ignis_wgmma_m64n_small<C::TYPE, BN>(d, ignis_wgmma_desc(w_tile + ks * K_STEP_BYTES),
                                            ignis_wgmma_desc(a_tile + ks * K_STEP_BYTES), accumulate | ks);
      ignis_wgmma_commit();
    };
    if constexpr (C::FP8) {
      constexpr int COLUMNS = BN / 4; /* distinct tokens per thread (scales) */
      const int64_t b_sc = (int64_t)(n0 / 128) * p.b_scale_sn;
      int64_t a_sc[COLUMNS];
#pragma unroll
      for (int c = 0; c < COLUMNS; ++c)
        a_sc[c] = (int64_t)min(col0 + 8 * (c >> 1) + (c & 1), p.m - 1) * p.a_scale_sm;
      /* K block kb's raw scales: the thread's tokens' (sa) and the weight tile's (sb) */
      auto load_scales = [&](uint32_t(&sa)[COLUMNS], uint32_t &sb, int kb) {
#pragma unroll
        for (int c = 0; c < COLUMNS; ++c)
          sa[c] = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc[c] + (int64_t)kb * p.a_scale_sk);
        sb = ignis_block_scale_raw(p.b_scale, p.scale_u8, b_sc + (int64_t)kb * p.b_scale_sk);
      };
      /* once a K block's wgmma into part are waited for: release its stage, acc += part scaled */
      auto promote = [&](float(&part)[C::ACC], const uint32_t(&sa)[COLUMNS], uint32_t sb) {
        ignis_wgmma_pin(part);
        release();
        const float b_scale = ignis_block_scale_value(sb, p.scale_u8);
#pragma unroll
        for (int c = 0; c < COLUMNS; ++c) {
          const float sc = ignis_block_scale_value(sa[c], p.scale_u8) * b_scale;
          const int j = c >> 1, e = c & 1;
          acc[4 * j + e] = fmaf(part[4 * j + e], sc, acc[4 * j + e]);
          acc[4 * j + 2 + e] = fmaf(part[4 * j + 2 + e], sc, acc[4 * j + 2 + e]);
        }
      };
      if constexpr (DEPTH == 2) {
        /* Two K blocks in flight per warpgroup: block i + WG's wgmma is issued before block i's are
         * waited for, into the other partial tile, so the wait and the promotion of one run under
         * the other's wgmma. */
        float part_x[C::ACC], part_y[C::ACC];
        uint32_t sa_x[COLUMNS], sa_y[COLUMNS], sb_x = 0, sb_y = 0;
        int kb = kb0 + wg;
        if (kb < kb_end) {
          load_scales(sa_x, sb_x, kb);
          issue(part_x, 0);
        }
        /* block kb is in flight in `cur`: issue block kb + WG into `next`, then promote kb; false
         * once no block is left */
        auto step = [&](float(&cur)[C::ACC], const uint32_t(&sa_cur)[COLUMNS], const uint32_t &sb_cur,
                        float(&next)[C::ACC], uint32_t(&sa_next)[COLUMNS], uint32_t &sb_next) {
          if (kb + WG < kb_end) {
            load_scales(sa_next, sb_next, kb + WG);
            issue(next, 0);
            ignis_wgmma_wait<1>();
          } else {
            ignis_wgmma_wait<0>();
          }
          promote(cur, sa_cur, sb_cur);
          kb += WG;
          return kb < kb_end;
        };
        while (kb < kb_end && step(part_x, sa_x, sb_x, part_y, sa_y, sb_y) &&
               step(part_y, sa_y, sb_y, part_x, sa_x, sb_x)) {
        }
        ignis_wgmma_wait<0>(); /* nothing is in flight here; said on every path, ptxas needs no wait of its own */
      } else { /* one K block at a time; the next block's scales load while this one multiplies */
        uint32_t next_a[COLUMNS], next_b = 0;
        float part[C::ACC];
        if (kb0 + wg < kb_end)
          load_scales(next_a, next_b, kb0 + wg);
        for (int kb = kb0 + wg; kb < kb_end; kb += WG) {
          uint32_t cur_a[COLUMNS];
#pragma unroll
          for (int c = 0; c < COLUMNS; ++c)
            cur_a[c] = next_a[c];
          const uint32_t cur_b = next_b;
          if (kb + WG < kb_end)
            load_scales(next_a, next_b, kb + WG);
          const uint32_t w_tile = wait_full(), a_tile = w_tile + C::W_BYTES;
          ignis_wgmma_fence();
#pragma unroll
          for (int ks = 0; ks < ROW_BYTES / K_STEP_BYTES; ++ks)
            ignis_wgmma_m64n_small<C::TYPE, BN>(part, ignis_wgmma_desc(w_tile + ks * K_STEP_BYTES),
                                                ignis_wgmma_desc(a_tile + ks * K_STEP_BYTES), ks);
          ignis_wgmma_commit();
          ignis_wgmma_wait<0>();
          promote(part, cur_a, cur_b);
        }
      }
    } else if constexpr (DEPTH == 2) {
      /* 16-bit, one wgmma group left in flight: K block i + WG's wgmma are issued into the tile
       * before block i's are waited for, and block i's stage is released after that wait. */
      int kb = kb0 + wg;
      if (kb < kb_end) {
        issue(acc, 0);
        for (kb += WG; kb < kb_end; kb += WG) {
          issue(acc, 1);
          ignis_wgmma_wait<1>();
          release();
        }
        ignis_wgmma_wait<0>();
        release();
      }
      ignis_wgmma_wait<0>(); /* said on every path (see the fp8 form) */
      ignis_wgmma_pin(acc);
    } else { /* 16-bit: the wgmma accumulate into the f32 tile */
      for (int kb = kb0 + wg; kb < kb_end; kb += WG) {
        const uint32_t w_tile = wait_full(), a_tile = w_tile + C::W_BYTES;
        ignis_wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < ROW_BYTES / K_STEP_BYTES; ++ks)
          ignis_wgmma_m64n_small<C::TYPE, BN>(acc, ignis_wgmma_desc(w_tile + ks * K_STEP_BYTES),
                                              ignis_wgmma_desc(a_tile + ks * K_STEP_BYTES),
                                              (kb > kb0 + wg) | ks);
        ignis_wgmma_commit();
        ignis_wgmma_wait<0>();
        ignis_wgmma_pin(acc);
        release();
      }
    }
    if constexpr (WG > 1) { /* warpgroups 1 .. WG-1 hand their sums to warpgroup 0 through the idle ring */
      float *red = reinterpret_cast<float *>(smem + (base - ignis_smem_addr(smem)));
      asm volatile("bar.sync 1, %0;" ::"n"(128 * WG) : "memory"); /* every stage consumed */
      if (wg > 0) {
#pragma unroll
        for (int i = 0; i < C::ACC; ++i)
          red[((wg - 1) * C::ACC + i) * 128 + wt] = acc[i];
      }
      asm volatile("bar.sync 1, %0;" ::"n"(128 * WG) : "memory");
      if (wg == 0)
        for (int g = 1; g < WG; ++g)
#pragma unroll
          for (int i = 0; i < C::ACC; ++i)
            acc[i] += red[((g - 1) * C::ACC + i) * 128 + wt];
    }
    /* acc[4 j + 2 h + e]: tile row row_a + 8 h, token col0 + 8 j + e */
    float *part_out = p.splits > 1 ? p.partials + (int64_t)split * p.m * p.n : nullptr;
    if (wg == 0) {
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
    float v[MAX_SPLITS];
#pragma unroll
    for (int s = 0; s < MAX_SPLITS; ++s) /* all loads in flight, then the sum in split order */
      v[s] = s < p.splits ? __ldcg(src + s * split_stride) : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int s = 0; s < MAX_SPLITS; ++s)
      if (s < p.splits)
        sum += v[s];
    store_out(p, token, col, sum);
  }
  if (tid == 0)
    *counter = 0u;
#endif
}

/* ---- host --------------------------------------------------------------------------------------- */
bool device_runs(int32_t device) {
  return ignis_cuda_gemm_sm90_mode() != IGNIS_GEMM_SM90_OFF && ignis_cuda_gemm_sm90_device(device);
}

bool aligned16(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

template <Elem E, int BN, int WG, int DEPTH>
ignis_status launch(Params p, int n_tiles, int per_sm, cudaStream_t stream) {
  typedef Config<E, BN> C;
  constexpr int threads = 128 * WG + 32;
  p.stages = C::stages(per_sm);
  const int smem = C::smem_bytes(p.stages);
  auto kernel = small_m_sm90_kernel<E, BN, WG, DEPTH>;
  cudaError_t err = ignis_allow_dynamic_smem<small_m_sm90_kernel<E, BN, WG, DEPTH>>(C::smem_bytes(C::stages(1)));
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA,
                           "ignis small-M GEMM (sm90): cannot allow %d bytes of shared memory: %s",
                           C::smem_bytes(C::stages(1)), cudaGetErrorString(err));
  err = ignis_launch(kernel, dim3(n_tiles, p.splits), dim3(threads), smem, stream, p);
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis small-M GEMM (sm90): launch failed: %s",
                           cudaGetErrorString(err));
  return IGNIS_OK;
}

/* The consumer warpgroups (1, 2, or 4 where BN <= 32: at BN 64 a thread holds 167 registers, too
 * many for 544 threads) and the K blocks in flight per warpgroup (1 or 2). */
template <Elem E, int BN, int WG>
ignis_status launch_for_depth(const Params &p, int n_tiles, int per_sm, int depth, cudaStream_t stream) {
  if (depth == 2)
    return launch<E, BN, WG, 2>(p, n_tiles, per_sm, stream);
  return launch<E, BN, WG, 1>(p, n_tiles, per_sm, stream);
}

template <Elem E, int BN>
ignis_status launch_for_consumers(const Params &p, int n_tiles, int per_sm, int consumers, int depth,
                                  cudaStream_t stream) {
  if (consumers == 1)
    return launch_for_depth<E, BN, 1>(p, n_tiles, per_sm, depth, stream);
  if constexpr (BN <= 32)
    if (consumers == 4)
      return launch_for_depth<E, BN, 4>(p, n_tiles, per_sm, depth, stream);
  return launch_for_depth<E, BN, 2>(p, n_tiles, per_sm, depth, stream);
}

/* The token tile (BN): the smallest of 16, 32, 64 that holds M. */
template <Elem E>
ignis_status launch_for_rows(const Params &p, int n_tiles, int per_sm, int consumers, int depth,
                             cudaStream_t stream) {
  if (p.m <= 16)
    return launch_for_consumers<E, 16>(p, n_tiles, per_sm, consumers, depth, stream);
  if (p.m <= 32)
    return launch_for_consumers<E, 32>(p, n_tiles, per_sm, consumers, depth, stream);
  return launch_for_consumers<E, 64>(p, n_tiles, per_sm, consumers, depth, stream);
}

} // namespace

extern "C" int ignis_cuda_gemm_small_m_sm90_fits(const ignis_gemm_params *p, int32_t device) {
  const int64_t limit = (int64_t)1 << 30;
  if (p->batch != 1 || p->b_stride_k != 1 || p->m < 1 || p->m > IGNIS_GEMM_SMALL_M_SM90_MAX_M || p->n < 1 ||
      p->n >= limit || p->k <= 0 || p->k >= limit)
    return 0;
  if (p->kind == IGNIS_GEMM_FP8_BLOCK) {
    if (p->b_scale_block_n != IGNIS_GEMM_SCALE_BLOCK || p->a_dtype != IGNIS_FP8_E4M3 ||
        p->b_dtype != IGNIS_FP8_E4M3 || (p->out_dtype != IGNIS_BF16 && p->out_dtype != IGNIS_F16))
      return 0;
  } else if (p->kind == IGNIS_GEMM_PLAIN) {
    if (p->a_dtype != p->b_dtype || (p->a_dtype != IGNIS_BF16 && p->a_dtype != IGNIS_F16) || p->bias ||
        (p->out_dtype != IGNIS_BF16 && p->out_dtype != IGNIS_F16 && p->out_dtype != IGNIS_F32))
      return 0;
  } else {
    return 0;
  }
  const int64_t es = (int64_t)ignis_dtype_size(p->a_dtype);
  const int64_t a_row = p->a_row_stride * es, b_row = p->b_stride_n * es;
  if ((p->k * es) % 16 != 0 || !aligned16(p->a) || !aligned16(p->b) || (p->m > 1 && a_row % 16 != 0) ||
      b_row % 16 != 0 || b_row * p->n >= ((int64_t)1 << 40) ||
      (p->m > 1 && a_row * p->m >= ((int64_t)1 << 40)))
    return 0;
  return device_runs(device);
}

/* Routed by default (IGNIS_GEMM_SM90=0 turns it off). On the H100 (375420d, notes/PERF.md) the
 * block-scaled form with 4 consumer warpgroups beat the small-M grouped kernel at 4 and 16 rows
 * (N2112 K7168 10.1 / 10.9 us against 11.1 / 12.6; N7168 K2048 M16 8.5 against 12.4) and cuBLASLt at
 * 32 (13.5 against 18.8 in earlier runs), but not cuBLASLt at 64 (21.2 against 19.4; 15.0 against
 * 13.7); the 16-bit form, unsplit, beat cuBLASLt by 3-9% at 1 to 16 rows and lost at 64. */
extern "C" int ignis_cuda_gemm_small_m_sm90_takes(const ignis_gemm_params *p, int32_t device) {
  const int64_t most = p->kind == IGNIS_GEMM_FP8_BLOCK ? IGNIS_GEMM_SMALL_M_SM90_ROUTED_FP8_MAX_M
                                                       : IGNIS_GEMM_SMALL_M_SM90_ROUTED_PLAIN_MAX_M;
  return p->m <= most && ignis_cuda_gemm_small_m_sm90_fits(p, device);
}

extern "C" ignis_status ignis_cuda_gemm_small_m_sm90(const ignis_gemm_params *gp, int32_t device,
                                                     void *stream, float *partials, size_t partial_floats,
                                                     unsigned *counters, int counters_count, int max_splits,
                                                     int per_sm, int consumers, int depth) {
  IGNIS_CUDA_ON_DEVICE(device);
  const int sms = ignis_cuda_sm_count(device);
  const bool fp8 = gp->kind == IGNIS_GEMM_FP8_BLOCK;
  const int64_t es = fp8 ? 1 : 2;
  const int m = (int)gp->m, n = (int)gp->n;
  const int n_tiles = (n + BM - 1) / BM, k_blocks = (int)((gp->k * es + ROW_BYTES - 1) / ROW_BYTES);
  /* splits: as many as fill the SMs with per_sm blocks each, if the room holds their partials */
  per_sm = per_sm == 2 ? 2 : 1;
  int splits = n_tiles < sms * per_sm ? sms * per_sm / n_tiles : 1;
  if (max_splits == 0) /* the library's choice: 16-bit unsplit (splitting N4096 K4096 in two was slower) */
    max_splits = fp8 ? MAX_SPLITS : 1;
  max_splits = max_splits < MAX_SPLITS ? max_splits : MAX_SPLITS;
  splits = splits < max_splits ? splits : max_splits;
  splits = splits < k_blocks ? splits : k_blocks;
  if (splits < 1 || !partials || !counters || (size_t)splits * m * n > partial_floats ||
      n_tiles > counters_count)
    splits = 1;
  const int kb_per_split = (k_blocks + splits - 1) / splits;
  splits = (k_blocks + kb_per_split - 1) / kb_per_split; /* no empty split */

  Params p;
  memset(&p, 0, sizeof p);
  const CUtensorMapDataType type =
      fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
          : (gp->a_dtype == IGNIS_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  const cuuint32_t k_box = (cuuint32_t)(ROW_BYTES / es);
  const int bn = m <= 16 ? 16 : (m <= 32 ? 32 : 64);
  const cuuint64_t w_dims[2] = {(cuuint64_t)gp->k, (cuuint64_t)n};
  const cuuint64_t w_strides[1] = {(cuuint64_t)(gp->b_stride_n * es)};
  const cuuint32_t w_box[2] = {k_box, BM};
  IGNIS_TRY(ignis_tensor_map_encode(&p.map_w, type, 2, gp->b, w_dims, w_strides, w_box,
                                    "ignis small-M GEMM (sm90): b"));
  const cuuint64_t a_dims[2] = {(cuuint64_t)gp->k, (cuuint64_t)m};
  const cuuint64_t a_strides[1] = {(cuuint64_t)((m > 1 ? gp->a_row_stride : gp->k) * es)};
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
  if (consumers == 0) /* the library's choice (notes/PERF.md): 4 where the tile allows it for fp8 */
    consumers = fp8 && bn <= 32 ? 4 : 2;
  if (fp8)
    return launch_for_rows<Elem::E4M3>(p, n_tiles, per_sm, consumers, depth, s);
  if (gp->a_dtype == IGNIS_BF16)
    return launch_for_rows<Elem::BF16>(p, n_tiles, per_sm, consumers, depth, s);
  return launch_for_rows<Elem::F16>(p, n_tiles, per_sm, consumers, depth, s);
}
