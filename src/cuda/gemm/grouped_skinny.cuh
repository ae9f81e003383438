/* The small-M grouped GEMM kernel (MoE decode): out[m, :] = a[m, :] @ w[g]^T for the rows m of
 * group g (m_indptr on the device), when the groups hold a few rows each and the work is streaming
 * each busy group's weight [N, K] once. The template and its host launcher are here so that
 * src/cuda/gemm/grouped_skinny.cu instantiates the library's shape and
 * bench/micro/grouped_skinny.cu the shapes it compares.
 *
 * Layout: a [M, K] (row stride lda), weights [W, N, K] with K contiguous (row stride ldb, weight
 * stride ldb_group: the NT form), out [M, N] (row stride ldo); bf16 or f16 inputs with out bf16,
 * f16 or f32, or fp8 e4m3 inputs with block scales (a_scale[m, k / 128], b_scale[g, n / 128,
 * k / 128], f32 or UE8M0 u8) and out bf16 or f16. K a multiple of 16 bytes, N of 8, rows 16-byte
 * aligned.
 *
 * Grid: x = slots, y = slices of N. A group's rows are cut into chunks of 8 * NT rows; slot s is
 * the s-th chunk in group order, found by the block from m_indptr (grouped_rows.cuh), so a grid of
 * ignis_grouped_chunk_slots(M, G, 8 NT) slots covers any distribution and a block whose slot has
 * no chunk (the groups held fewer) exits after the search. A group of up to 8 NT rows is one chunk:
 * its weight is read once in total, each slice of N by one block. A larger group's chunks are
 * neighbouring slots, so the blocks that read the same weight slice for its chunks run together
 * and the repeats come from L2. Slots vary fastest, so the blocks running at once cover every busy
 * group's weight.
 *
 * Block: 8 warps; the host picks k_warps (1, 2, 4 or 8) so that the grid has enough blocks for
 * every SM: the 8 / k_warps warp columns each own 16 RT weight rows (the block 16 RT 8 / k_warps
 * rows of N), and the k_warps warps of a column split K (k_per_warp each, a multiple of a batch).
 * No workspace and no split across blocks: the warps' sums meet in shared memory and are added in
 * k order (the same bits on every call), then the block writes out with paired stores.
 *
 * Warp (swap-AB, as in skinny.cuh): out^T = w a^T, weight rows on the 16-row side of mma.sync
 * (m16n8k16 for 16-bit, m16n8k32 e4m3 for fp8), the chunk's rows on the 8-column side (NT tiles
 * of 8). A sum over K may run in any order, so lane (g, t) loads 16 bytes of weight rows g and
 * g + 8 and 16 bytes of a's row g at the same k (k0 + 4 t 16-byte units), and those words are the
 * A and B fragments of two mma: no shared memory, no shuffles. A batch is U steps of 64 bytes of
 * K of weight (2 RT 16-byte loads per step and lane, ld.global.nc.L1::no_allocate: read once);
 * with PREFETCH the next batch loads while the current one multiplies. a's words (and fp8's
 * scales) are loaded when a batch multiplies, through L1, which the warps of a block at the same
 * k share: the wait for them overlaps the next weight batch in flight, so it costs no weight
 * bandwidth, and they hold no registers across batches (what keeps 2 blocks per SM spill-free).
 *
 * fp8 block scales (the same math as grouped_gemm.cu): the mma sums of each 128-wide K block (two
 * steps) go to a zeroed partial, then acc += partial * a_scale[row, kb] * b_scale[g, n / 128, kb].
 * A warp's 16 RT rows sit inside one 128-row scale block, and batches start at multiples of 128 K
 * (U even).
 *
 * The kernel is launched with PDL (ignis_launch) and waits (griddepcontrol.wait) before its first
 * global access. */
#ifndef IGNIS_CUDA_GEMM_GROUPED_SKINNY_CUH
#define IGNIS_CUDA_GEMM_GROUPED_SKINNY_CUH

#include "core/grouped_gemm_params.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"
#include "cuda/gemm/grouped_rows.cuh"
#include "cuda/gemm/skinny.cuh"

#define IGNIS_GROUPED_SKINNY_THREADS 256
#define IGNIS_GROUPED_SKINNY_WARPS 8
/* The calls the path takes (include/ignis/gemm.h): M at most this, and at most 8 rows per group on
 * average (M <= 8 G). */
#define IGNIS_GROUPED_SKINNY_MAX_M 512
#define IGNIS_GROUPED_SKINNY_MAX_AVERAGE_ROWS 8
/* A dense fp8 block-scaled product (one group, no m_indptr) takes the path up to this M: on the
 * H100 (bench/micro/grouped_skinny.cu, after 67093a3) it ran N2112 K7168 in 11.1 / 13.3 / 13.8 /
 * 24.4 us at M 4 / 16 / 32 / 64 against cuBLASLt's 18.5-19.1, and N7168 K2048 in 12.6 / 33.4 us at
 * M 16 / 64 against 13.1 / 13.4: one group is too few blocks past 16 rows (no split of K across
 * blocks). */
#define IGNIS_GROUPED_SKINNY_MAX_DENSE_M 16

/* The device-side arguments; strides in elements of each tensor. */
struct ignis_grouped_skinny_args {
  const void *a, *b;
  void *out;
  int64_t lda, ldb, ldb_group, ldo;
  int m, n, k;
  int out_kind; /* 0 bf16, 1 f16, 2 f32 */
  ignis_grouped_rows rows;
  int k_warps, k_per_warp;
  /* split-K across blocks (blockIdx.z): splits ranges of k_per_split; with splits > 1 the f32
   * partials [splits, M, N] and one counter per (slot, slice of N), zero between calls */
  int splits, k_per_split;
  float *partials;
  unsigned *counters;
  /* fp8 */
  const void *a_scale, *b_scale;
  int scale_u8;
  int64_t a_scale_sm, a_scale_sk, b_scale_sg, b_scale_sn, b_scale_sk;
};

/* A compile-time shape: RT 16-row tiles per warp, U steps of 64 bytes of K per batch, PREFETCH
 * the next batch while multiplying, LOAD the weight loads' L2 treatment (ignis_skinny_load),
 * MIN_BLOCKS __launch_bounds__'s minimum resident blocks. */
template <int RT, int U, bool PREFETCH, int LOAD, int MIN_BLOCKS> struct ignis_grouped_skinny_config {
  static constexpr int row_tiles = RT, unroll = U, load = LOAD, min_blocks = MIN_BLOCKS;
  static constexpr bool prefetch = PREFETCH;
};

/* fp8 e4m3 elements are handled as bytes. */
typedef unsigned char ignis_grouped_skinny_e4m3;

template <typename T>
__device__ __forceinline__ void ignis_grouped_skinny_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (sizeof(T) == 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
  } else {
    ignis_skinny_mma<T>::run(c, a0, a1, a2, a3, b0, b1);
  }
}

/* A scale as stored (f32 bits, or a UE8M0 byte), and its value: 2^(e - 127), 255 NaN. */
__device__ __forceinline__ uint32_t ignis_grouped_skinny_scale_raw(const unsigned char *ptr, int u8) {
  return ignis_block_scale_raw(ptr, u8 != 0, 0);
}
__device__ __forceinline__ float ignis_grouped_skinny_scale(uint32_t raw, int u8) {
  return ignis_block_scale_value(raw, u8 != 0);
}

/* A 16-byte load through L1 (a's rows, shared by the warps of a block). */
__device__ __forceinline__ uint4 ignis_grouped_skinny_load_x(const void *ptr) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

/* What a lane reads: weight rows g and g + 8 of each 16-row tile, a's row g of each 8-row tile
 * (NULL past the chunk's rows), and for fp8 the scale rows 2t, 2t + 1 of each tile (NULL past the
 * chunk's rows) and the warp's weight scale row, at K block 0 (the args' strides step K blocks). */
template <typename T, int RT, int NT> struct ignis_grouped_skinny_lane {
  const T *w[RT][2];
  const T *x[NT];
  const unsigned char *a_scale[NT][2];
  const unsigned char *b_scale;
};

/* One batch of weight words in registers (U steps at k). */
template <int RT, int U> struct ignis_grouped_skinny_batch {
  uint4 w[RT][2][U];
  int k;
};

/* Load the weight batch at k; PREDICATED: zeros at or past k_stop (K is a multiple of 16 bytes,
 * so a 16-byte piece is all in or all out). */
template <typename T, int RT, int NT, typename Cfg, bool PREDICATED>
__device__ __forceinline__ void ignis_grouped_skinny_load(ignis_grouped_skinny_batch<RT, Cfg::unroll> &buf,
                                                          const ignis_grouped_skinny_lane<T, RT, NT> &lane,
                                                          int k, int k_stop, int t, uint64_t policy) {
  constexpr int VEC = 16 / sizeof(T), STEP = 4 * VEC;
  buf.k = k;
#pragma unroll
  for (int u = 0; u < Cfg::unroll; ++u) {
    const int col = k + STEP * u + VEC * t;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        buf.w[r][h][u] = !PREDICATED || col < k_stop
                             ? ignis_skinny_load_w<Cfg::load>(lane.w[r][h] + col, policy)
                             : make_uint4(0, 0, 0, 0);
  }
}

/* Multiply one batch into acc[r][j][e] (weight row 16 r + g + 8 (e >> 1), chunk row 8 j + 2 t +
 * (e & 1)). a's words (and fp8's scales) are loaded here, from L1 or L2, while the next weight
 * batch is in flight: waiting for them costs no weight bandwidth, and they need no registers
 * across batches. Words at or past k_stop are zeros. fp8 goes through a per-K-block partial,
 * scaled when the block ends. */
template <typename T, int RT, int NT, int U>
__device__ __forceinline__ void
ignis_grouped_skinny_multiply(float (&acc)[RT][NT][4], const ignis_grouped_skinny_batch<RT, U> &buf,
                              const ignis_grouped_skinny_lane<T, RT, NT> &lane,
                              const ignis_grouped_skinny_args &p, int k_stop, int t) {
  constexpr bool FP8 = sizeof(T) == 1;
  constexpr int VEC = 16 / sizeof(T), STEP = 4 * VEC;
  uint4 x[NT][U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int col = buf.k + STEP * u + VEC * t;
#pragma unroll
    for (int j = 0; j < NT; ++j)
      x[j][u] =
          lane.x[j] && col < k_stop ? ignis_grouped_skinny_load_x(lane.x[j] + col) : make_uint4(0, 0, 0, 0);
  }
  constexpr int BLOCKS = FP8 ? U / 2 : 1;
  uint32_t b_raw[BLOCKS], a_raw[BLOCKS][NT][2];
  if constexpr (FP8) {
#pragma unroll
    for (int i = 0; i < BLOCKS; ++i) {
      const bool in = buf.k + 128 * i < k_stop;
      const int64_t kb = buf.k / 128 + i, shift = p.scale_u8 ? 0 : 2; /* bytes of a scale: 1 or 4 */
      b_raw[i] =
          in ? ignis_grouped_skinny_scale_raw(lane.b_scale + (kb * p.b_scale_sk << shift), p.scale_u8) : 0u;
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          a_raw[i][j][e] = in && lane.a_scale[j][e]
                               ? ignis_grouped_skinny_scale_raw(
                                     lane.a_scale[j][e] + (kb * p.a_scale_sk << shift), p.scale_u8)
                               : 0u;
    }
  }
  float part[FP8 ? RT : 1][FP8 ? NT : 1][4];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if constexpr (FP8) {
      if (u % 2 == 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              part[r][j][e] = 0.0f;
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 xv = x[j][u];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        const uint4 lo = buf.w[r][0][u], hi = buf.w[r][1][u];
        if constexpr (FP8) {
          ignis_grouped_skinny_mma<T>(part[r][j], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
          ignis_grouped_skinny_mma<T>(part[r][j], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
        } else {
          ignis_grouped_skinny_mma<T>(acc[r][j], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
          ignis_grouped_skinny_mma<T>(acc[r][j], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
        }
      }
    }
    if constexpr (FP8) {
      if (u % 2 == 1) {
        const float b_scale = ignis_grouped_skinny_scale(b_raw[u / 2], p.scale_u8);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float s = ignis_grouped_skinny_scale(a_raw[u / 2][j][e], p.scale_u8) * b_scale;
#pragma unroll
            for (int r = 0; r < RT; ++r) {
              acc[r][j][e] = fmaf(part[r][j][e], s, acc[r][j][e]);
              acc[r][j][e + 2] = fmaf(part[r][j][e + 2], s, acc[r][j][e + 2]);
            }
          }
      }
    }
  }
}

__device__ __forceinline__ void ignis_grouped_skinny_store(const ignis_grouped_skinny_args &p, int64_t row,
                                                           int col, float x, float y) {
  const int64_t at = row * p.ldo + col;
  if (p.out_kind == 0)
    *reinterpret_cast<__nv_bfloat162 *>(static_cast<__nv_bfloat16 *>(p.out) + at) =
        __floats2bfloat162_rn(x, y);
  else if (p.out_kind == 1)
    *reinterpret_cast<__half2 *>(static_cast<__half *>(p.out) + at) = __floats2half2_rn(x, y);
  else
    *reinterpret_cast<float2 *>(static_cast<float *>(p.out) + at) = make_float2(x, y);
}

template <typename T, int NT, typename Cfg, bool SPLIT>
__device__ __forceinline__ void ignis_grouped_skinny_body(const ignis_grouped_skinny_args &p) {
  constexpr bool FP8 = sizeof(T) == 1;
  constexpr int RT = Cfg::row_tiles, U = Cfg::unroll, VEC = 16 / sizeof(T), BATCH = U * 4 * VEC;
  constexpr int ROWS = 8 * NT, THREADS = IGNIS_GROUPED_SKINNY_THREADS, WARPS = IGNIS_GROUPED_SKINNY_WARPS;
  static_assert(!FP8 || U % 2 == 0, "fp8: a batch holds whole 128-wide scale blocks");
  static_assert(RT == 1 || RT == 2 || RT == 4 || RT == 8, "a warp's rows sit in one 128-row scale block");
  /* the warps' sums: [k_warps][ROWS][block_rows + 4] (the pad spreads a warp's stores over 32 banks) */
  __shared__ __align__(16) float sums[ROWS * (WARPS * 16 * RT + 4 * WARPS)];

  ignis_pdl_wait();
  const ignis_grouped_chunk chunk = ignis_grouped_find_chunk<THREADS>(p.rows, blockIdx.x, ROWS);
  if (chunk.group < 0)
    return;

  const int warp = threadIdx.x >> 5, lane_id = threadIdx.x & 31, g = lane_id >> 2, t = lane_id & 3;
  const int k_warps = p.k_warps, block_rows = 16 * RT * (WARPS / k_warps);
  const int n_slice = warp / k_warps, k_slice = warp - n_slice * k_warps;
  const int n_block = blockIdx.y * block_rows, n_warp = n_block + n_slice * 16 * RT;
  /* with splits, k_per_split is k_warps * k_per_warp (the plan's rule), so a warp's range never
   * crosses into the next split */
  const int k_begin = (SPLIT ? (int)blockIdx.z * p.k_per_split : 0) + k_slice * p.k_per_warp,
            k_stop = min(p.k, k_begin + p.k_per_warp);
  const bool live = n_warp < p.n;

  /* rows past N read row N - 1 (their sums are never written) */
  ignis_grouped_skinny_lane<T, RT, NT> lane;
  const T *w = static_cast<const T *>(p.b) + (int64_t)chunk.weight * p.ldb_group;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      lane.w[r][h] = w + (int64_t)min(n_warp + 16 * r + 8 * h + g, p.n - 1) * p.ldb;
#pragma unroll
  for (int j = 0; j < NT; ++j)
    lane.x[j] = 8 * j + g < chunk.rows
                    ? static_cast<const T *>(p.a) + (int64_t)(chunk.row0 + 8 * j + g) * p.lda
                    : nullptr;
  if constexpr (FP8) {
    const int scale_bytes = p.scale_u8 ? 1 : 4;
    const unsigned char *sa = static_cast<const unsigned char *>(p.a_scale);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = 8 * j + 2 * t + e;
        lane.a_scale[j][e] =
            row < chunk.rows ? sa + (int64_t)(chunk.row0 + row) * p.a_scale_sm * scale_bytes : nullptr;
      }
    lane.b_scale =
        static_cast<const unsigned char *>(p.b_scale) +
        ((int64_t)chunk.group * p.b_scale_sg + (int64_t)(min(n_warp, p.n - 1) / 128) * p.b_scale_sn) *
            scale_bytes;
  }

  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[r][j][e] = 0.0f;

  uint64_t policy = 0;
  if constexpr (Cfg::load == IGNIS_SKINNY_LOAD_EVICT_FIRST)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));

  if (live && k_begin < k_stop) {
    typedef ignis_grouped_skinny_batch<RT, U> batch;
    const int steps = (k_stop - k_begin + BATCH - 1) / BATCH;
    const bool ragged = (k_stop - k_begin) % BATCH != 0; /* the last batch is predicated */
    auto load = [&](batch &buf, int s) {
      if (ragged && s + 1 == steps)
        ignis_grouped_skinny_load<T, RT, NT, Cfg, true>(buf, lane, k_begin + s * BATCH, k_stop, t, policy);
      else
        ignis_grouped_skinny_load<T, RT, NT, Cfg, false>(buf, lane, k_begin + s * BATCH, k_stop, t, policy);
    };
    batch buf0, buf1;
    load(buf0, 0);
    if constexpr (Cfg::prefetch) {
      for (int s = 0; s < steps; s += 2) {
        if (s + 1 < steps)
          load(buf1, s + 1);
        ignis_grouped_skinny_multiply<T, RT, NT, U>(acc, buf0, lane, p, k_stop, t);
        if (s + 2 < steps)
          load(buf0, s + 2);
        if (s + 1 < steps)
          ignis_grouped_skinny_multiply<T, RT, NT, U>(acc, buf1, lane, p, k_stop, t);
      }
    } else {
      (void)buf1;
      for (int s = 0; s < steps; ++s) {
        if (s > 0)
          load(buf0, s);
        ignis_grouped_skinny_multiply<T, RT, NT, U>(acc, buf0, lane, p, k_stop, t);
      }
    }
  }
  ignis_pdl_launch_dependents();

  const int ld = block_rows + 4;
  if (live) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n_local = n_slice * 16 * RT + 16 * r + g + 8 * (e >> 1), m = 8 * j + 2 * t + (e & 1);
          sums[(k_slice * ROWS + m) * ld + n_local] = acc[r][j][e];
        }
  }
  __syncthreads();
  const int pairs = block_rows / 2;
  float *part = SPLIT ? p.partials + (int64_t)blockIdx.z * p.m * p.n : nullptr;
  for (int i = threadIdx.x; i < chunk.rows * pairs; i += THREADS) {
    const int m = i / pairs, n_local = 2 * (i - m * pairs);
    if (n_block + n_local >= p.n)
      continue;
    float2 sum = make_float2(0.0f, 0.0f);
    for (int s = 0; s < k_warps; ++s) {
      const float2 v = *reinterpret_cast<const float2 *>(&sums[(s * ROWS + m) * ld + n_local]);
      sum.x += v.x;
      sum.y += v.y;
    }
    const int64_t row = (int64_t)chunk.row0 + m;
    if (SPLIT) /* N is even: the pair sits in one 8-byte word */
      __stcg(reinterpret_cast<float2 *>(part + row * p.n + n_block + n_local), sum);
    else
      ignis_grouped_skinny_store(p, row, n_block + n_local, sum.x, sum.y);
  }
  if constexpr (!SPLIT)
    return;

  /* split-K: the last block of this (slot, slice) to arrive adds the splits in order 0..S-1 */
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  unsigned *counter = p.counters + (int64_t)blockIdx.x * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0)
    is_last = atomicAdd(counter, 1u) == (unsigned)p.splits - 1;
  __syncthreads();
  if (!is_last)
    return;
  __threadfence();
  for (int i = threadIdx.x; i < chunk.rows * pairs; i += THREADS) {
    const int m = i / pairs, n_local = 2 * (i - m * pairs);
    if (n_block + n_local >= p.n)
      continue;
    const int64_t row = (int64_t)chunk.row0 + m;
    const float2 *src = reinterpret_cast<const float2 *>(p.partials + row * p.n + n_block + n_local);
    float2 sum = make_float2(0.0f, 0.0f);
    for (int s = 0; s < p.splits; ++s) {
      const float2 v = __ldcg(src + (int64_t)s * p.m * p.n / 2);
      sum.x += v.x;
      sum.y += v.y;
    }
    ignis_grouped_skinny_store(p, row, n_block + n_local, sum.x, sum.y);
  }
  if (threadIdx.x == 0)
    *counter = 0u;
}

/* SPLIT: K split across blocks (blockIdx.z), the last block of each tile adding the partials; an
 * instance of its own so that the unsplit kernel keeps its registers. */
template <typename T, int NT, typename Cfg, bool SPLIT>
__global__ void __launch_bounds__(IGNIS_GROUPED_SKINNY_THREADS, Cfg::min_blocks)
    ignis_grouped_skinny_kernel(const ignis_grouped_skinny_args p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  if constexpr (sizeof(T) == 1) /* no e4m3 mma below sm_89: the host never launches it there */
    __trap();
  else
#endif
    ignis_grouped_skinny_body<T, NT, Cfg, SPLIT>(p);
}

/* ---- host --------------------------------------------------------------------------------- */
/* A call's launch: chunks of 8 nt rows in `slots` slots, N in n_blocks slices of block_rows, K cut
 * into `splits` ranges of k_per_split (one block each, blockIdx.z), each split over k_warps warps of
 * k_per_warp. */
struct ignis_grouped_skinny_plan {
  int nt, slots, n_blocks, block_rows, k_warps, k_per_warp, splits, k_per_split;
};

/* Room for split-K, which only a caller with a workspace offers (the dense GEMM: gemm_cublaslt.c):
 * partials for partial_floats f32, counters_count counters that are zero (and left zero), and the
 * most splits allowed. */
struct ignis_grouped_skinny_split_room {
  float *partials;
  size_t partial_floats;
  unsigned *counters;
  int counters_count, max_splits;
};

/* The plan: nt 1 (8-row chunks) when the groups that may hold rows (min(G, M)) average at most 4
 * rows, else 2, or `nt` when not 0 (bench/micro/grouped_skinny.cu's forced variants). k_warps:
 * the fewest warps per K (the widest slices of N) that still give `per_sm` blocks per SM when
 * every group that may hold rows is busy, at most 8 and at most one batch of K per warp. splits (with room):
 * enough blocks to fill one wave of `resident` blocks per SM, each warp at least one batch of each split,
 * within the room; a split's batches a multiple of k_warps where K allows, so no warp idles (planned for the
 * chunks chosen). */
static inline ignis_grouped_skinny_plan
ignis_grouped_skinny_plan_of(int64_t m, int64_t n, int64_t k, int64_t groups, int row_tiles, int batch,
                             int sms, int per_sm, int resident = 1,
                             const ignis_grouped_skinny_split_room *room = nullptr, int nt = 0) {
  ignis_grouped_skinny_plan plan;
  const int64_t busy = groups < m ? groups : m;
  plan.nt = nt ? nt : (m + busy - 1) / busy <= 4 ? 1 : 2;
  plan.slots = (int)ignis_grouped_chunk_slots(m, groups, 8 * plan.nt);
  const int64_t target = (int64_t)sms * per_sm, batches = (k + batch - 1) / batch;
  int k_warps = 1;
  while (2 * k_warps <= IGNIS_GROUPED_SKINNY_WARPS && 2 * k_warps <= batches) {
    const int64_t rows = 16 * row_tiles * (IGNIS_GROUPED_SKINNY_WARPS / k_warps);
    if (busy * ((n + rows - 1) / rows) >= target)
      break;
    k_warps *= 2;
  }
  plan.k_warps = k_warps;
  plan.block_rows = 16 * row_tiles * (IGNIS_GROUPED_SKINNY_WARPS / k_warps);
  plan.n_blocks = (int)((n + plan.block_rows - 1) / plan.block_rows);
  plan.splits = 1;
  plan.k_per_split = (int)k;
  const int64_t blocks = (int64_t)plan.slots * plan.n_blocks;
  if (room && room->max_splits > 1 && room->partials && room->counters && blocks <= room->counters_count) {
    int64_t splits = ((int64_t)sms * resident + blocks - 1) / blocks;
    const int64_t most_by_k = batches / k_warps,
                  most_by_room = (int64_t)(room->partial_floats / (size_t)(m * n));
    splits = splits < room->max_splits ? splits : room->max_splits;
    splits = splits < most_by_k ? splits : most_by_k;
    splits = splits < most_by_room ? splits : most_by_room;
    if (splits > 1) { /* the kernel relies on k_per_split == k_warps * k_per_warp here */
      int64_t per = (batches + splits - 1) / splits;
      per = (per + k_warps - 1) / k_warps * k_warps;
      plan.k_per_split = (int)(per * batch);
      plan.splits = (int)((k + plan.k_per_split - 1) / plan.k_per_split);
    }
  }
  const int64_t per_warp = (plan.k_per_split + k_warps - 1) / k_warps;
  plan.k_per_warp = (int)((per_warp + batch - 1) / batch * batch);
  return plan;
}

/* The device arguments of a call (the NT weight form; 16-bit, or fp8 with block scales). */
static inline ignis_grouped_skinny_args ignis_grouped_skinny_args_of(const ignis_grouped_gemm_params *gp) {
  ignis_grouped_skinny_args s = {};
  s.a = gp->a;
  s.b = gp->b;
  s.out = gp->out;
  s.lda = gp->a_row_stride;
  s.ldb = gp->b_stride_n;
  s.ldb_group = gp->b_group_stride;
  s.ldo = gp->out_row_stride;
  s.m = (int)gp->m;
  s.n = (int)gp->n;
  s.k = (int)gp->k;
  s.out_kind = gp->out_dtype == IGNIS_BF16 ? 0 : gp->out_dtype == IGNIS_F16 ? 1 : 2;
  s.rows.m_indptr = gp->m_indptr;
  s.rows.weight_indices = gp->weight_indices;
  s.rows.indptr_i64 = gp->index_dtype == IGNIS_I64;
  s.rows.weight_i64 = gp->weight_index_dtype == IGNIS_I64;
  s.rows.groups = (int)gp->groups;
  s.rows.num_weights = (int)gp->num_weights;
  s.rows.m = (int)gp->m;
  if (gp->fp8) {
    s.a_scale = gp->a_scale;
    s.b_scale = gp->b_scale;
    s.scale_u8 = gp->scale_dtype == IGNIS_U8;
    s.a_scale_sm = gp->a_scale_stride_m;
    s.a_scale_sk = gp->a_scale_stride_k;
    s.b_scale_sg = gp->b_scale_stride_g;
    s.b_scale_sn = gp->b_scale_stride_n;
    s.b_scale_sk = gp->b_scale_stride_k;
  }
  return s;
}

template <typename T, int NT, typename Cfg>
static inline ignis_status ignis_grouped_skinny_launch_nt(const ignis_grouped_skinny_args &args,
                                                          const ignis_grouped_skinny_plan &plan,
                                                          cudaStream_t stream) {
  const dim3 grid((unsigned)plan.slots, (unsigned)plan.n_blocks, (unsigned)plan.splits);
  if constexpr (sizeof(T) == 1) /* split-K: the dense block-scaled fp8 product only */
    if (plan.splits > 1) {
      IGNIS_CUDA_CHECK(ignis_launch(ignis_grouped_skinny_kernel<T, NT, Cfg, true>, grid,
                                    dim3(IGNIS_GROUPED_SKINNY_THREADS), 0, stream, args));
      return IGNIS_OK;
    }
  IGNIS_CUDA_CHECK(ignis_launch(ignis_grouped_skinny_kernel<T, NT, Cfg, false>, grid,
                                dim3(IGNIS_GROUPED_SKINNY_THREADS), 0, stream, args));
  return IGNIS_OK;
}

/* Plan and launch one call on the current device (`sms` SMs, `per_sm` the blocks per SM the plan
 * aims at); T is __nv_bfloat16, __half or ignis_grouped_skinny_e4m3. plan_out (may be NULL)
 * receives the plan; nt (bench/micro/grouped_skinny.cu's variants), when not 0, replaces the
 * plan's 8-row tiles per chunk (1 or 2); room (may be NULL: no split-K) offers a workspace for
 * split-K, which fp8 takes. */
template <typename T, typename Cfg>
static inline ignis_status
ignis_grouped_skinny_launch(ignis_grouped_skinny_args args, int sms, int per_sm, cudaStream_t stream,
                            ignis_grouped_skinny_plan *plan_out = nullptr, int nt = 0,
                            const ignis_grouped_skinny_split_room *room = nullptr) {
  constexpr int batch = Cfg::unroll * 4 * (16 / (int)sizeof(T));
  if (sizeof(T) != 1) /* split-K is instantiated for fp8 only (the dense block-scaled product) */
    room = nullptr;
  const ignis_grouped_skinny_plan plan =
      ignis_grouped_skinny_plan_of(args.m, args.n, args.k, args.rows.groups, Cfg::row_tiles, batch, sms,
                                   per_sm, Cfg::min_blocks, room, nt);
  args.k_warps = plan.k_warps;
  args.k_per_warp = plan.k_per_warp;
  args.splits = plan.splits;
  args.k_per_split = plan.k_per_split;
  args.partials = plan.splits > 1 ? room->partials : nullptr;
  args.counters = plan.splits > 1 ? room->counters : nullptr;
  if (plan_out)
    *plan_out = plan;
  return plan.nt == 1 ? ignis_grouped_skinny_launch_nt<T, 1, Cfg>(args, plan, stream)
                      : ignis_grouped_skinny_launch_nt<T, 2, Cfg>(args, plan, stream);
}

#endif
