/* The Hopper (sm_90a) grouped GEMM: out[m, :] = a[m, :] @ b[w]^T for the rows m of each group
 * (include/ignis/gemm.h), 16-bit (bf16, f16) and block-scaled fp8 e4m3 (1x128 activation scales,
 * 128x128 weight scales), one persistent launch over every group. grouped_gemm_sm90.h says which
 * calls it takes; the rest run on grouped_gemm.cu's mma.sync kernel.
 *
 * Block: 384 threads, one CTA per SM. Warpgroup 0 is the producer (setmaxnreg down to 40): one
 * thread issues TMA loads of a and b tiles into a ring of STAGES shared-memory stages. Warpgroups 1
 * and 2 are consumers (setmaxnreg up to 232): each owns 64 rows of the 128-row tile and multiplies
 * them by all BN columns with wgmma m64nBNk16 (16-bit) or m64nBNk32 (e4m3), both operands read
 * from shared memory. A stage holds 128 bytes of K (64 16-bit or 128 fp8 elements) of the tile's
 * 128 a-rows and BN b-rows, in the 128-byte-swizzle layout TMA writes and wgmma reads
 * (common/hopper.cuh); stage s is guarded by two mbarriers: full[s] (the producer's arrival with the
 * stage's byte count, completed by the TMA transactions) and empty[s] (one arrival per consumer
 * warp once its wgmma no longer reads the stage). Tiles: BM = 128 rows by BN = 128 or 256 columns
 * (16-bit: 256 when the calls' tiles fill the SMs at that width; fp8: 128, one weight-scale block).
 *
 * Tensor maps (encoded on the host per call): a as [M, K] (rows past M read as zero), b as the 3-D
 * [W, N, K] tensor (rows past N and K past the end read as zero), so K tails need no code.
 *
 * Scheduler (no host sync, graph safe). Tile t of the call is (group g, m-tile, n-tile), counted
 * group by group: group g (rows m_indptr[g] .. m_indptr[g + 1], clamped into [0, M], a decreasing
 * pair empty; weight g or weight_indices[g], a group whose weight is out of range has no tiles)
 * holds ceil(rows / 128) * n_tiles tiles, in bands of BAND m-tiles with the n-tiles of a band
 * consecutive. CTA c takes tiles c, c + grid, c + 2 grid, ...; the producer warp and every
 * consumer warp walk m_indptr themselves, 32 groups per step (one per lane, a warp prefix sum of the
 * tile counts, the group found by a ballot), forward only, so they agree on every tile and the
 * ring's stage and phase run on across tiles. An m-tile starts at its group's row, not at a multiple
 * of 128: a rows past the group's end (the next group's, or zeros past M) are loaded and multiplied
 * but their output rows are never written. A consumer warpgroup whose 64 rows all lie past the end
 * only waits and releases the stages.
 *
 * Consumer step (one stage): wait full, issue the stage's 4 wgmma, commit, wait for them, release
 * the stage. 16-bit: the wgmma accumulate into the f32 tile. fp8 (DeepGEMM's promotion): they form
 * the 128-wide K block's partial sum in a second register tile, which the CUDA cores then add to the
 * f32 tile scaled by a_scale[row, kb] * b_scale[w, n_tile, kb]; the scales of block kb + 1 are
 * loaded from global memory (any strides, f32 or UE8M0) while block kb multiplies. The two consumer
 * warpgroups interleave, so one's waits and promotion run under the other's wgmma.
 *
 * Epilogue: each thread writes its rows (those inside the group) straight from the accumulators,
 * two columns per store, bf16 / f16 / f32 (f32 for the 16-bit inputs only). */
#include <limits.h>
#include <string.h>

#include "core/env.h"
#include "core/validate.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"
#include "cuda/common/hopper.cuh"
#include "cuda/gemm/grouped_gemm_sm90.h"

namespace {

constexpr int BM = 128, THREADS = 384, ROW_BYTES = 128;
constexpr int SMEM_BUDGET = 224 * 1024; /* stages; barriers and alignment slack come on top */

enum class Elem { BF16, F16, E4M3 };

/* Shared memory: STAGES x {a: 128 rows, b: BN rows} of 128 bytes, then full[STAGES], empty[STAGES]. */
template <Elem E, int BN> struct Config {
  static constexpr int A_BYTES = BM * ROW_BYTES; /* 16 KB */
  static constexpr int B_BYTES = BN * ROW_BYTES; /* 16 or 32 KB */
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int STAGES = SMEM_BUDGET / STAGE_BYTES > 8 ? 8 : SMEM_BUDGET / STAGE_BYTES;
  static constexpr int BAR_OFFSET = STAGES * STAGE_BYTES;
  static constexpr int SMEM_BYTES = BAR_OFFSET + 2 * STAGES * 8 + 1024; /* + alignment slack */
  static_assert(E != Elem::E4M3 || BN == 128, "fp8: one weight-scale block per tile");
};

struct Params {
  CUtensorMap map_a, map_b;
  char *out;
  int64_t out_row_stride; /* elements */
  ignis_dtype out_dtype;
  int m, n, groups, num_weights, n_tiles, k_blocks;
  const void *m_indptr; /* NULL: one group of all M rows */
  const void *weight_indices;
  bool indptr_i64, weight_i64;
  const void *a_scale, *b_scale;
  bool scale_u8;
  int64_t a_scale_sm, a_scale_sk, b_scale_sg, b_scale_sn, b_scale_sk;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* the device code below: sm_90a only */
constexpr int BAND = 8;                /* m-tiles per raster band */
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

/* The wgmma side of a configuration. */
template <Elem E, int BN> struct Mma {
  static constexpr int ELEM_BYTES = E == Elem::E4M3 ? 1 : 2;
  static constexpr int K_STAGE = ROW_BYTES / ELEM_BYTES;   /* K elements per stage */
  static constexpr int K_STEP = E == Elem::E4M3 ? 32 : 16; /* K of one wgmma */
  static constexpr int STEPS = K_STAGE / K_STEP;           /* wgmma per stage: 4 */
  static constexpr int ACC = BN / 2;                       /* f32 accumulators per thread */
  static constexpr ignis_wgmma_type TYPE =
      E == Elem::BF16 ? IGNIS_WGMMA_BF16 : (E == Elem::F16 ? IGNIS_WGMMA_F16 : IGNIS_WGMMA_E4M3);
};

__device__ __forceinline__ int64_t load_index(const void *base, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t *>(base)[i] : static_cast<const int32_t *>(base)[i];
}

/* ---- scheduler ------------------------------------------------------------------------------------ */
/* A warp's window of 32 groups (lane l: group g_base + l) and its place in the tile order. */
struct Sched {
  int g_base, before, total; /* first group, tiles of the groups before the window, tiles in it */
  int start, end, weight;    /* this lane's group: rows and weight (-1: out of range) */
  int incl;                  /* tiles of the window's groups up to and including this lane's */
};

struct Tile {
  int row0, rows, n_tile, weight; /* rows row0 .. row0 + rows - 1 (1..128) of out are the group's */
};

/* Loads the window at s.g_base (warp-collective). */
__device__ void sched_window(const Params &p, Sched &s) {
  const int lane = threadIdx.x & 31, g = s.g_base + lane;
  int start = 0, end = 0, weight = -1, tiles = 0;
  if (g < p.groups) {
    if (p.m_indptr) {
      int64_t lo = load_index(p.m_indptr, p.indptr_i64, g), hi = load_index(p.m_indptr, p.indptr_i64, g + 1);
      lo = lo < 0 ? 0 : (lo > p.m ? p.m : lo);
      hi = hi < lo ? lo : (hi > p.m ? p.m : hi);
      start = (int)lo;
      end = (int)hi;
    } else {
      end = p.m;
    }
    weight = g;
    if (p.weight_indices) {
      const int64_t w = load_index(p.weight_indices, p.weight_i64, g);
      weight = w < 0 || w >= p.num_weights ? -1 : (int)w;
    }
    if (weight >= 0)
      tiles = (end - start + BM - 1) / BM * p.n_tiles;
  }
  const int incl = ignis_warp_inclusive_sum(tiles);
  s.start = start;
  s.end = end;
  s.weight = weight;
  s.incl = incl;
  s.total = __shfl_sync(0xffffffffu, incl, 31);
}

__device__ void sched_init(const Params &p, Sched &s) {
  s.g_base = 0;
  s.before = 0;
  sched_window(p, s);
}

/* Tile t (t only grows between calls), or false past the last tile (warp-collective). */
__device__ bool sched_next(const Params &p, Sched &s, int t, Tile &tile) {
  while (t >= s.before + s.total) {
    s.before += s.total;
    s.g_base += 32;
    if (s.g_base >= p.groups)
      return false;
    sched_window(p, s);
  }
  const int local = t - s.before;
  const int src = __ffs(__ballot_sync(0xffffffffu, s.incl > local)) - 1;
  const int incl = __shfl_sync(0xffffffffu, s.incl, src), start = __shfl_sync(0xffffffffu, s.start, src),
            end = __shfl_sync(0xffffffffu, s.end, src);
  tile.weight = __shfl_sync(0xffffffffu, s.weight, src);
  const int m_tiles = (end - start + BM - 1) / BM;
  const int in_group = local - (incl - m_tiles * p.n_tiles);
  const int band_tiles = BAND * p.n_tiles, band = in_group / band_tiles,
            within = in_group - band * band_tiles;
  const int band_rows = min(BAND, m_tiles - band * BAND);
  tile.row0 = start + (band * BAND + within % band_rows) * BM;
  tile.rows = min(BM, end - tile.row0);
  tile.n_tile = within / band_rows;
  return true;
}

/* ---- epilogue --------------------------------------------------------------------------------------- */
__device__ __forceinline__ void store_pair(__nv_bfloat16 *dst, float x, float y) {
  *reinterpret_cast<__nv_bfloat162 *>(dst) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_pair(__half *dst, float x, float y) {
  *reinterpret_cast<__half2 *>(dst) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store_pair(float *dst, float x, float y) {
  *reinterpret_cast<float2 *>(dst) = make_float2(x, y);
}

/* The thread's two rows (tile rows r0 and r0 + 8) and its columns col0 + 8 j, + 1 of the tile. */
template <typename OutT, int ACC>
__device__ __forceinline__ void store_tile(const Params &p, const Tile &tile, int r0, int col0,
                                           const float (&acc)[ACC]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (r >= tile.rows)
      continue;
    OutT *row = reinterpret_cast<OutT *>(p.out) + (int64_t)(tile.row0 + r) * p.out_row_stride;
#pragma unroll
    for (int j = 0; j < ACC / 4; ++j) {
      const int col = col0 + 8 * j;
      if (col < p.n)
        store_pair(row + col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

#endif

/* ---- kernel --------------------------------------------------------------------------------------- */
template <Elem E, int BN>
__global__ void __launch_bounds__(THREADS, 1) grouped_gemm_sm90_kernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef Config<E, BN> C;
  typedef Mma<E, BN> W;
  constexpr bool FP8 = E == Elem::E4M3;
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t base = (ignis_smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t full = base + C::BAR_OFFSET, empty = full + 8 * C::STAGES;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      ignis_mbar_init(full + 8 * s, 1);
      ignis_mbar_init(empty + 8 * s, 8); /* lane 0 of each consumer warp */
    }
    ignis_mbar_init_fence();
  }
  __syncthreads();
  ignis_pdl_wait();

  Sched sched;
  Tile tile;
  int stage = 0;
  uint32_t phase = 0;
  auto advance = [&] {
    if (++stage == C::STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  };

  if (warp < 4) { /* ---- producer ---- */
    ignis_setmaxnreg_dec<PRODUCER_REGS>();
    if (warp != 0)
      return;
    if (lane == 0) {
      ignis_tma_prefetch(&p.map_a);
      ignis_tma_prefetch(&p.map_b);
    }
    sched_init(p, sched);
    for (int t = blockIdx.x; sched_next(p, sched, t, tile); t += gridDim.x) {
      if (lane == 0) {
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          ignis_mbar_wait(empty + 8 * stage, phase ^ 1u);
          const uint32_t a_dst = base + stage * C::STAGE_BYTES, bar = full + 8 * stage;
          ignis_tma_load_2d(a_dst, &p.map_a, bar, kb * W::K_STAGE, tile.row0);
          ignis_tma_load_3d(a_dst + C::A_BYTES, &p.map_b, bar, kb * W::K_STAGE, tile.n_tile * BN,
                            tile.weight);
          ignis_mbar_arrive_expect_tx(bar, C::STAGE_BYTES);
          advance();
        }
      }
      __syncwarp();
    }
    return;
  }

  /* ---- consumers ---- */
  ignis_setmaxnreg_inc<CONSUMER_REGS>();
  const int wg = (warp >> 2) - 1, wrow0 = 64 * wg;      /* the warpgroup's rows of the tile */
  const int r0 = wrow0 + 16 * (warp & 3) + (lane >> 2); /* the thread's rows r0, r0 + 8 */
  float acc[W::ACC];
  float part[FP8 ? W::ACC : 1];
  sched_init(p, sched);
  for (int t = blockIdx.x; sched_next(p, sched, t, tile); t += gridDim.x) {
    if (wrow0 >= tile.rows) { /* none of this warpgroup's rows is the group's */
      for (int kb = 0; kb < p.k_blocks; ++kb) {
        ignis_mbar_wait(full + 8 * stage, phase);
        if (lane == 0)
          ignis_mbar_arrive(empty + 8 * stage);
        advance();
      }
      continue;
    }
    /* fp8: the scales of K block 0, then each block's prefetched while the one before multiplies */
    const int last_row = tile.row0 + tile.rows - 1;
    const int64_t a_sc0 = (int64_t)min(tile.row0 + r0, last_row) * p.a_scale_sm,
                  a_sc1 = (int64_t)min(tile.row0 + r0 + 8, last_row) * p.a_scale_sm,
                  b_sc = (int64_t)tile.weight * p.b_scale_sg + (int64_t)tile.n_tile * p.b_scale_sn;
    uint32_t next_a0 = 0, next_a1 = 0, next_b = 0;
    if constexpr (FP8) {
      next_a0 = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc0);
      next_a1 = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc1);
      next_b = ignis_block_scale_raw(p.b_scale, p.scale_u8, b_sc);
#pragma unroll
      for (int i = 0; i < W::ACC; ++i)
        acc[i] = 0.0f;
    }
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      const uint32_t sa0 = next_a0, sa1 = next_a1, sb = next_b;
      if constexpr (FP8) {
        if (kb + 1 < p.k_blocks) {
          next_a0 = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc0 + (int64_t)(kb + 1) * p.a_scale_sk);
          next_a1 = ignis_block_scale_raw(p.a_scale, p.scale_u8, a_sc1 + (int64_t)(kb + 1) * p.a_scale_sk);
          next_b = ignis_block_scale_raw(p.b_scale, p.scale_u8, b_sc + (int64_t)(kb + 1) * p.b_scale_sk);
        }
      }
      ignis_mbar_wait(full + 8 * stage, phase);
      const uint32_t a_tile = base + stage * C::STAGE_BYTES + wrow0 * ROW_BYTES,
                     b_tile = base + stage * C::STAGE_BYTES + C::A_BYTES;
      ignis_wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < W::STEPS; ++ks) {
        const uint64_t da = ignis_wgmma_desc(a_tile + ks * 32), db = ignis_wgmma_desc(b_tile + ks * 32);
        if constexpr (FP8) {
          if constexpr (BN == 256)
            ignis_wgmma_m64n256<W::TYPE>(part, da, db, ks);
          else
            ignis_wgmma_m64n128<W::TYPE>(part, da, db, ks);
        } else {
          if constexpr (BN == 256)
            ignis_wgmma_m64n256<W::TYPE>(acc, da, db, kb | ks);
          else
            ignis_wgmma_m64n128<W::TYPE>(acc, da, db, kb | ks);
        }
      }
      ignis_wgmma_commit();
      ignis_wgmma_wait<0>();
      if constexpr (FP8)
        ignis_wgmma_pin(part);
      else
        ignis_wgmma_pin(acc);
      if (lane == 0)
        ignis_mbar_arrive(empty + 8 * stage);
      advance();
      if constexpr (FP8) { /* promotion: the block's partial sums, scaled, into the f32 tile */
        const float b_scale = ignis_block_scale_value(sb, p.scale_u8), s0 = ignis_block_scale_value(sa0, p.scale_u8) * b_scale,
                    s1 = ignis_block_scale_value(sa1, p.scale_u8) * b_scale;
#pragma unroll
        for (int j = 0; j < W::ACC / 4; ++j) {
          acc[4 * j] = fmaf(part[4 * j], s0, acc[4 * j]);
          acc[4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
        }
      }
    }
    const int col0 = tile.n_tile * BN + 2 * (lane & 3);
    if (p.out_dtype == IGNIS_BF16)
      store_tile<__nv_bfloat16>(p, tile, r0, col0, acc);
    else if (p.out_dtype == IGNIS_F16)
      store_tile<__half>(p, tile, r0, col0, acc);
    else if constexpr (!FP8)
      store_tile<float>(p, tile, r0, col0, acc);
  }
#endif
}

/* ---- host --------------------------------------------------------------------------------------- */
bool aligned16(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

/* The shape and layout rules of the kernel (grouped_gemm_sm90.h), device and mode aside. */
bool shape_fits(const ignis_grouped_gemm_params *p) {
  const int64_t es = p->fp8 ? 1 : 2, out_es = (int64_t)ignis_dtype_size(p->out_dtype);
  const int64_t limit = (int64_t)1 << 30;
  if (p->b_stride_k != 1 || p->k <= 0 || p->k % (16 / es) || p->n % 8)
    return false;
  if (p->m >= limit || p->n >= limit || p->k >= limit || p->groups >= limit || p->num_weights < 1 ||
      p->num_weights >= limit)
    return false;
  if ((p->m / BM + p->groups) * ((p->n + 127) / 128) >= (int64_t)INT_MAX - (1 << 20))
    return false; /* tile indices stay int */
  if (!aligned16(p->a) || !aligned16(p->b) || !aligned16(p->out))
    return false;
  const int64_t a_row = p->a_row_stride * es, b_row = p->b_stride_n * es, b_group = p->b_group_stride * es;
  if (a_row % 16 || b_row % 16 || (p->out_row_stride * out_es) % 16)
    return false;
  if (a_row >= ((int64_t)1 << 40) || b_row * p->n >= ((int64_t)1 << 40))
    return false;
  if (p->num_weights > 1 && (b_group % 16 || b_group < b_row * p->n || b_group >= ((int64_t)1 << 40)))
    return false;
  return true;
}

template <Elem E, int BN> ignis_status launch(const Params &p, int sms, cudaStream_t stream) {
  typedef Config<E, BN> C;
  const int64_t upper = (int64_t)(p.m / BM + p.groups) * p.n_tiles; /* tiles of any split of M rows */
  const int grid = (int)(upper < sms ? upper : sms);
  if (grid <= 0)
    return IGNIS_OK;
  auto kernel = grouped_gemm_sm90_kernel<E, BN>;
  cudaError_t err = ignis_allow_dynamic_smem<grouped_gemm_sm90_kernel<E, BN>>(C::SMEM_BYTES);
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA,
                           "ignis grouped GEMM (sm90): cannot allow %d bytes of shared memory: %s",
                           C::SMEM_BYTES, cudaGetErrorString(err));
  err = ignis_launch(kernel, dim3(grid), dim3(THREADS), C::SMEM_BYTES, stream, p);
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis grouped GEMM (sm90): launch failed: %s",
                           cudaGetErrorString(err));
  return IGNIS_OK;
}

CUtensorMapDataType map_type(const ignis_grouped_gemm_params *p) {
  if (p->fp8)
    return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  return p->a_dtype == IGNIS_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

/* Tensor maps of a ([M, K], boxes of 128 rows) and b ([W, N, K], boxes of bn rows of one weight). */
ignis_status encode_maps(const ignis_grouped_gemm_params *gp, int bn, Params *p) {
  const int64_t es = gp->fp8 ? 1 : 2;
  const cuuint32_t k_box = (cuuint32_t)(ROW_BYTES / es);
  const cuuint64_t a_dims[2] = {(cuuint64_t)gp->k, (cuuint64_t)gp->m};
  const cuuint64_t a_strides[1] = {(cuuint64_t)(gp->a_row_stride * es)};
  const cuuint32_t a_box[2] = {k_box, (cuuint32_t)BM};
  IGNIS_TRY(ignis_tensor_map_encode(&p->map_a, map_type(gp), 2, gp->a, a_dims, a_strides, a_box,
                                    "ignis grouped GEMM (sm90): a"));
  const int64_t b_row = gp->b_stride_n * es;
  const int64_t b_group = gp->num_weights > 1 ? gp->b_group_stride * es : b_row * gp->n;
  const cuuint64_t b_dims[3] = {(cuuint64_t)gp->k, (cuuint64_t)gp->n, (cuuint64_t)gp->num_weights};
  const cuuint64_t b_strides[2] = {(cuuint64_t)b_row, (cuuint64_t)b_group};
  const cuuint32_t b_box[3] = {k_box, (cuuint32_t)bn, 1};
  return ignis_tensor_map_encode(&p->map_b, map_type(gp), 3, gp->b, b_dims, b_strides, b_box,
                                 "ignis grouped GEMM (sm90): b");
}

ignis_status run(const ignis_grouped_gemm_params *gp, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const int sms = ignis_cuda_sm_count(device);
  /* 16-bit: 256-wide tiles when the call has enough of them to fill the SMs (M / 128 m-tiles) */
  const int64_t m_tiles = gp->m / BM > 0 ? gp->m / BM : 1;
  const int bn = !gp->fp8 && gp->n > 128 && m_tiles * ((gp->n + 255) / 256) >= sms ? 256 : 128;
  Params p;
  memset(&p, 0, sizeof p);
  IGNIS_TRY(encode_maps(gp, bn, &p));
  p.out = static_cast<char *>(gp->out);
  p.out_row_stride = gp->out_row_stride;
  p.out_dtype = gp->out_dtype;
  p.m = (int)gp->m;
  p.n = (int)gp->n;
  p.groups = (int)gp->groups;
  p.num_weights = (int)gp->num_weights;
  p.n_tiles = (int)((gp->n + bn - 1) / bn);
  p.k_blocks = (int)((gp->k * (gp->fp8 ? 1 : 2) + ROW_BYTES - 1) / ROW_BYTES);
  p.m_indptr = gp->m_indptr;
  p.indptr_i64 = gp->index_dtype == IGNIS_I64;
  p.weight_indices = gp->weight_indices;
  p.weight_i64 = gp->weight_index_dtype == IGNIS_I64;
  p.a_scale = gp->a_scale;
  p.b_scale = gp->b_scale;
  p.scale_u8 = gp->scale_dtype == IGNIS_U8;
  p.a_scale_sm = gp->a_scale_stride_m;
  p.a_scale_sk = gp->a_scale_stride_k;
  p.b_scale_sg = gp->b_scale_stride_g;
  p.b_scale_sn = gp->b_scale_stride_n;
  p.b_scale_sk = gp->b_scale_stride_k;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (gp->fp8)
    return launch<Elem::E4M3, 128>(p, sms, s);
  if (gp->a_dtype == IGNIS_BF16)
    return bn == 256 ? launch<Elem::BF16, 256>(p, sms, s) : launch<Elem::BF16, 128>(p, sms, s);
  return bn == 256 ? launch<Elem::F16, 256>(p, sms, s) : launch<Elem::F16, 128>(p, sms, s);
}

} // namespace

/* IGNIS_GEMM_SM90, read once: "0" off, "all" the grouped ops and the dense block-scaled GEMMs, else
 * (the default) the grouped ops only: cuBLASLt was faster on the dense ones (include/ignis/gemm.h). */
extern "C" ignis_gemm_sm90_mode ignis_cuda_gemm_sm90_mode(void) {
  static const ignis_gemm_sm90_mode mode = [] {
    const char *value = ignis_env(IGNIS_ENV_GEMM_SM90);
    if (value && strcmp(value, "0") == 0)
      return IGNIS_GEMM_SM90_OFF;
    if (value && strcmp(value, "all") == 0)
      return IGNIS_GEMM_SM90_ALL;
    return IGNIS_GEMM_SM90_GROUPED;
  }();
  return mode;
}

extern "C" int ignis_cuda_gemm_sm90_device(int32_t device) {
  static const bool compiled = strstr(IGNIS_CUDA_TARGETS, "sm_90a") != nullptr;
  return compiled && ignis_compute_capability(device) == 90 && ignis_tensor_map_encoder() != nullptr;
}

extern "C" int ignis_cuda_grouped_gemm_sm90_takes(const ignis_grouped_gemm_params *p, int32_t device) {
  return ignis_cuda_gemm_sm90_mode() != IGNIS_GEMM_SM90_OFF && shape_fits(p) &&
         ignis_cuda_gemm_sm90_device(device);
}

extern "C" ignis_status ignis_cuda_grouped_gemm_sm90(const ignis_grouped_gemm_params *p, int32_t device,
                                                     void *stream) {
  return run(p, device, stream);
}

extern "C" int ignis_cuda_gemm_sm90_takes(const ignis_gemm_params *p, int32_t device) {
  if (p->kind != IGNIS_GEMM_FP8_BLOCK || p->batch != 1 || p->b_scale_block_n != IGNIS_GEMM_SCALE_BLOCK ||
      p->m < BM || p->a_dtype != IGNIS_FP8_E4M3 || p->b_dtype != IGNIS_FP8_E4M3 ||
      (p->out_dtype != IGNIS_BF16 && p->out_dtype != IGNIS_F16) ||
      ignis_cuda_gemm_sm90_mode() != IGNIS_GEMM_SM90_ALL)
    return 0;
  const ignis_grouped_gemm_params g = ignis_grouped_params_of_dense(p);
  return shape_fits(&g) && ignis_cuda_gemm_sm90_device(device);
}

extern "C" ignis_status ignis_cuda_gemm_sm90(const ignis_gemm_params *p, int32_t device, void *stream) {
  const ignis_grouped_gemm_params g = ignis_grouped_params_of_dense(p);
  return run(&g, device, stream);
}
