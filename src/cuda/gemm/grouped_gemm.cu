/* CUDA backend of the grouped GEMM ops (include/ignis/gemm.h): ignis' own kernel, one launch over
 * every group, for bf16/f16 (sm_80+) and block-scaled fp8 e4m3 (sm_89+).
 *
 * Tiles. A block of 256 threads (8 warps, 2 x 4) computes a 128 x 128 tile of out; each warp a
 * 64 x 32 sub-tile with mma.sync (m16n8k16 for 16-bit, m16n8k32 e4m3 for fp8) into f32
 * accumulators. K advances 64 bytes per stage (32 16-bit or 64 fp8 elements); STAGES stages of
 * a and b tiles are in flight through cp.async (16-byte copies, zero-filled past the group's rows,
 * N and K), read back with ldmatrix (.trans for weights stored [K, N]). Shared rows of 64 bytes
 * are swizzled by chunk ^ ((row >> 1) & 3), rows of 256 bytes ([K, N] weights) by chunk ^ (row & 7),
 * so the 8 addresses of an ldmatrix phase hit 8 different bank groups.
 *
 * Scheduling without the host: the grid has (M / 128 + G) m-slots times ceil(N / 128) n-tiles
 * (enough for any split of M rows into G groups, each group needing ceil(rows / 128) m-tiles), in
 * bands of 8 m-slots with the n-tiles of a band consecutive (blocks running together share rows
 * of a and weight tiles in L2). A block scans m_indptr (256 groups per step: per-thread tile counts,
 * a block-wide prefix sum) to find which group and m-tile its m-slot is; a slot past the last
 * tile, or a group whose weight index is out of range, exits at once. Offsets are clamped into
 * [0, M]; a decreasing pair is an empty group.
 *
 * fp8 block scales (DeepSeek's "promotion"): the mma partial sums of one 128-wide K block (two
 * stages) are scaled on the CUDA cores by a_scale[row, kb] * b_scale[g, n_tile, kb] (a 128-column
 * tile is exactly one weight scale block) and added to the f32 result; the block's scales are
 * loaded when it starts, overlapping its mma. The epilogue writes pairs of columns straight from
 * the accumulators (bf16, f16 or f32).
 *
 * On Hopper the calls grouped_gemm_sm90.h lists run on grouped_gemm_sm90.cu's wgmma kernel instead
 * (ignis_cuda_grouped_gemm below routes); this kernel takes the rest (weights stored [K, N], other
 * GPUs, IGNIS_GEMM_SM90=0). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"
#include "cuda/cuda_backend.h"
#include "cuda/gemm/grouped_skinny.h"
#include "cuda/gemm/grouped_gemm_sm90.h"

namespace {

constexpr int BM = 128, BN = 128, THREADS = 256, STAGES = 4;
constexpr int ROW_BYTES = 64;                       /* K bytes per stage */
constexpr int TILE_BYTES = BM * ROW_BYTES;          /* one operand's stage: 8 KB (both layouts) */
constexpr int SMEM_BYTES = STAGES * 2 * TILE_BYTES; /* 64 KB */
constexpr int BAND = 8;                             /* m-slots per raster band */
constexpr int MT = 4, NT = 4;                       /* m16 / n8 tiles per warp */

enum class Elem { BF16, F16, E4M3 };

struct Params {
  const char *a, *b;
  char *out;
  int64_t a_row_bytes, b_group_bytes, b_row_bytes; /* b_row_bytes: stride of N rows (NT) or K rows (KN) */
  int64_t out_row_stride;
  int m, n, k, groups, num_weights, m_slots, n_tiles;
  const void *m_indptr, *weight_indices;
  bool indptr_i64, weight_i64;
  ignis_dtype out_dtype;
  const void *a_scale, *b_scale;
  bool scale_u8;
  int64_t a_scale_sm, a_scale_sk, b_scale_sg, b_scale_sn, b_scale_sk;
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* d += a * b for one m16 x n8 tile over 32 bytes of K. */
template <Elem E>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (E == Elem::BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (E == Elem::F16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap(); /* the host refuses fp8 below sm_89 */
#endif
  }
}

__device__ __forceinline__ int64_t load_index(const void *base, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t *>(base)[i] : static_cast<const int32_t *>(base)[i];
}

__device__ __forceinline__ float load_scale(const void *base, bool u8, int64_t i) {
  return ignis_block_scale_value(ignis_block_scale_raw(base, u8, i), u8);
}

/* 64-byte rows: byte offset of 16-byte chunk c (0..3) of row r. */
__device__ __forceinline__ uint32_t swz64(int r, int c) {
  return r * ROW_BYTES + ((c ^ ((r >> 1) & 3)) << 4);
}
/* 256-byte rows (a [K, N] weight stage: 32 K rows of 128 N elements): chunk c (0..15) of row r. */
__device__ __forceinline__ uint32_t swz256(int r, int c) {
  return r * 256 + ((c ^ (r & 7)) << 4);
}

struct Tile {
  int group, weight;
  int row0, row_end; /* rows of a and out: row0 .. min(row0 + BM, row_end) */
};

/* Which (group, m-tile) m-slot `slot` is; group -1 when none. Every thread returns the same. */
__device__ Tile find_tile(const Params &p, int slot) {
  __shared__ int s_group, s_row0, s_row_end, s_warp[THREADS / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0)
    s_group = -1;
  __syncthreads();
  int carry = 0; /* tiles of the groups before this step */
  for (int base = 0; base < p.groups; base += THREADS) {
    const int g = base + tid;
    int start = 0, end = 0, count = 0;
    if (g < p.groups) {
      int64_t s = load_index(p.m_indptr, p.indptr_i64, g), e = load_index(p.m_indptr, p.indptr_i64, g + 1);
      s = s < 0 ? 0 : (s > p.m ? p.m : s);
      e = e < s ? s : (e > p.m ? p.m : e);
      start = (int)s;
      end = (int)e;
      count = (end - start + BM - 1) / BM;
    }
    int incl = ignis_warp_inclusive_sum(count);
    if (lane == 31)
      s_warp[warp] = incl;
    __syncthreads();
    int before = carry, total = carry;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) {
      before += w < warp ? s_warp[w] : 0;
      total += s_warp[w];
    }
    incl += before;
    if (count > 0 && slot >= incl - count && slot < incl) {
      s_group = g;
      s_row0 = start + (slot - (incl - count)) * BM;
      s_row_end = end;
    }
    carry = total;
    __syncthreads();
    if (s_group >= 0 || slot < carry)
      break;
  }
  Tile t;
  t.group = s_group;
  t.row0 = s_group >= 0 ? s_row0 : 0;
  t.row_end = s_group >= 0 ? s_row_end : 0;
  t.weight = t.group;
  if (t.group >= 0 && p.weight_indices) {
    const int64_t w = load_index(p.weight_indices, p.weight_i64, t.group);
    t.weight = (w < 0 || w >= p.num_weights) ? -1 : (int)w;
    if (t.weight < 0)
      t.group = -1;
  }
  return t;
}

template <Elem E>
__device__ __forceinline__ void store_pair(const Params &p, int64_t row, int col, float x, float y) {
  char *dst = p.out;
  const int64_t i = row * p.out_row_stride + col;
  if (p.out_dtype == IGNIS_BF16)
    *reinterpret_cast<__nv_bfloat162 *>(dst + i * 2) = __floats2bfloat162_rn(x, y);
  else if (p.out_dtype == IGNIS_F16)
    *reinterpret_cast<__half2 *>(dst + i * 2) = __floats2half2_rn(x, y);
  else
    *reinterpret_cast<float2 *>(dst + i * 4) = make_float2(x, y);
}

/* KN: weights stored [K, N] (16-bit only). */
template <Elem E, bool KN>
__global__ void __launch_bounds__(THREADS, E == Elem::E4M3 ? 1 : 2) grouped_gemm_kernel(const Params p) {
  constexpr int ELEM_BYTES = E == Elem::E4M3 ? 1 : 2;
  constexpr int K_STAGE = ROW_BYTES / ELEM_BYTES; /* K elements per stage */
  constexpr bool FP8 = E == Elem::E4M3;
  extern __shared__ __align__(128) unsigned char smem[];

  /* raster: bands of BAND m-slots, the n-tiles of a band consecutive */
  const int64_t id = blockIdx.x;
  const int64_t band_tiles = (int64_t)BAND * p.n_tiles;
  const int band = (int)(id / band_tiles), within = (int)(id % band_tiles);
  const int band_rows = min(BAND, p.m_slots - band * BAND);
  const int slot = band * BAND + within % band_rows, n_tile = within / band_rows;
  const Tile tile = find_tile(p, slot);
  if (tile.group < 0)
    return;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp >> 2, warp_n = warp & 3;
  const int n0 = n_tile * BN;
  const char *a_base = p.a + (int64_t)tile.row0 * p.a_row_bytes;
  const char *b_base = p.b + (int64_t)tile.weight * p.b_group_bytes;
  const uint32_t smem_a = smem_u32(smem), smem_b = smem_a + STAGES * TILE_BYTES;
  const int rows = min(BM, tile.row_end - tile.row0);
  const int k_tiles = (p.k + K_STAGE - 1) / K_STAGE;

  /* this thread's two 16-byte copies per operand and stage */
  auto load_stage = [&](int kt, int stage) {
    const int k0 = kt * K_STAGE;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * THREADS;
      {
        const int r = c >> 2, ch = c & 3, kk = k0 + ch * (16 / ELEM_BYTES);
        const bool ok = r < rows && kk < p.k;
        const char *src = ok ? a_base + (int64_t)r * p.a_row_bytes + (int64_t)kk * ELEM_BYTES : p.a;
        cp_async16(smem_a + stage * TILE_BYTES + swz64(r, ch), src, ok);
      }
      if constexpr (!KN) {
        const int r = c >> 2, ch = c & 3, kk = k0 + ch * (16 / ELEM_BYTES);
        const bool ok = n0 + r < p.n && kk < p.k;
        const char *src = ok ? b_base + (int64_t)(n0 + r) * p.b_row_bytes + (int64_t)kk * ELEM_BYTES : p.b;
        cp_async16(smem_b + stage * TILE_BYTES + swz64(r, ch), src, ok);
      } else {
        const int r = c >> 4, ch = c & 15, nn = n0 + ch * 8;
        const bool ok = k0 + r < p.k && nn < p.n;
        const char *src = ok ? b_base + (int64_t)(k0 + r) * p.b_row_bytes + (int64_t)nn * 2 : p.b;
        cp_async16(smem_b + stage * TILE_BYTES + swz256(r, ch), src, ok);
      }
    }
  };

  float acc[MT][NT][4];
  float part[FP8 ? MT : 1][FP8 ? NT : 1][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] = 0.0f;
  __shared__ float s_a_scale[FP8 ? BM : 1]; /* a_scale of the tile's rows for the current K block */
  float b_sc = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles)
      load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < k_tiles)
      load_stage(kt + STAGES - 1, (kt + STAGES - 1) % STAGES);
    cp_async_commit();

    if constexpr (FP8) {
      if ((kt & 1) == 0) { /* a new 128-wide scale block: its scales, and a zeroed partial sum */
        const int kb = kt >> 1;
        if (tid < BM)
          s_a_scale[tid] =
              tid < rows ? load_scale(p.a_scale, p.scale_u8,
                                      (int64_t)(tile.row0 + tid) * p.a_scale_sm + (int64_t)kb * p.a_scale_sk)
                         : 0.0f;
        b_sc = load_scale(p.b_scale, p.scale_u8,
                          (int64_t)tile.group * p.b_scale_sg + (int64_t)n_tile * p.b_scale_sn +
                              (int64_t)kb * p.b_scale_sk);
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              part[i][j][e] = 0.0f;
      }
    }

    const int stage = kt % STAGES;
    const uint32_t sa = smem_a + stage * TILE_BYTES, sb = smem_b + stage * TILE_BYTES;
#pragma unroll FP8 ? 1 : 2
    for (int ks = 0; ks < 2;
         ++ks) { /* two 32-byte mma steps per stage (fp8: not unrolled, fewer live registers) */
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i)
        ldmatrix_x4(af[i], sa + swz64(warp_m * 64 + i * 16 + (lane & 15), 2 * ks + (lane >> 4)));
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        uint32_t r[4];
        if constexpr (!KN) {
          ldmatrix_x4(r, sb + swz64(warp_n * 32 + j * 16 + (lane & 7) + ((lane >> 4) << 3),
                                    2 * ks + ((lane >> 3) & 1)));
        } else {
          ldmatrix_x4_trans(r, sb + swz256(ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                           (warp_n * 32 + j * 16) / 8 + (lane >> 4)));
        }
        bf[2 * j][0] = r[0];
        bf[2 * j][1] = r[1];
        bf[2 * j + 1][0] = r[2];
        bf[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (FP8)
            mma<E>(part[i][j], af[i], bf[j][0], bf[j][1]);
          else
            mma<E>(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }

    if constexpr (FP8) {
      if ((kt & 1) == 1 || kt == k_tiles - 1) { /* promotion: the block's scaled partial into acc */
        if ((kt & 1) == 0)
          __syncthreads(); /* a one-stage last block: its a scales were written in this iteration */
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float sc = s_a_scale[warp_m * 64 + i * 16 + (lane >> 2) + h * 8] * b_sc;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              acc[i][j][2 * h] += part[i][j][2 * h] * sc;
              acc[i][j][2 * h + 1] += part[i][j][2 * h + 1] * sc;
            }
          }
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_m * 64 + i * 16 + (lane >> 2) + h * 8;
      if (r >= rows)
        continue;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int col = n0 + warp_n * 32 + j * 8 + (lane & 3) * 2;
        if (col < p.n)
          store_pair<E>(p, (int64_t)tile.row0 + r, col, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
}

template <Elem E, bool KN> ignis_status launch(const Params &p, int64_t blocks, cudaStream_t stream) {
  cudaError_t err = ignis_allow_dynamic_smem<grouped_gemm_kernel<E, KN>>(SMEM_BYTES);
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis grouped GEMM: cannot allow %d bytes of shared memory: %s",
                           SMEM_BYTES, cudaGetErrorString(err));
  grouped_gemm_kernel<E, KN><<<(unsigned)blocks, THREADS, SMEM_BYTES, stream>>>(p);
  return ignis_check_launch("ignis grouped GEMM");
}

bool aligned16(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

} // namespace

extern "C" ignis_status ignis_cuda_grouped_gemm_mma(const ignis_grouped_gemm_params *gp, int32_t device,
                                                    void *stream) {
  const char *fn = gp->fp8 ? "ignis_grouped_mm_fp8_blockscale" : "ignis_grouped_mm";
  IGNIS_CUDA_ON_DEVICE(device);
  const int cc = ignis_compute_capability(device);
  if (cc < (gp->fp8 ? 89 : 80))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: the CUDA kernel needs sm_%d or later; cuda:%d is sm_%d", fn,
                           gp->fp8 ? 89 : 80, (int)device, cc);
  const int64_t es = gp->fp8 ? 1 : 2, out_es = (int64_t)ignis_dtype_size(gp->out_dtype);
  const bool kn = gp->b_stride_k != 1;
  if (gp->k % (16 / es))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: a.shape[1]=K=%lld but the CUDA kernel needs a multiple of %d", fn,
                           (long long)gp->k, (int)(16 / es));
  if (gp->n % 8)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: b.shape[1]=N=%lld but the CUDA kernel needs a multiple of 8", fn,
                           (long long)gp->n);
  const int64_t b_row = kn ? gp->b_stride_k : gp->b_stride_n;
  if (!aligned16(gp->a) || (gp->a_row_stride * es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: a.data and a.strides[0] must keep rows 16-byte aligned on CUDA", fn);
  if (!aligned16(gp->b) || (b_row * es) % 16 || (gp->b_group_stride * es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: b.data and b.strides must keep rows 16-byte aligned on CUDA", fn);
  if (!aligned16(gp->out) || (gp->out_row_stride * out_es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: out.data and out.strides[0] must keep rows 16-byte aligned on CUDA", fn);
  if (gp->m > INT32_MAX / 2 || gp->n > INT32_MAX / 2 || gp->k > INT32_MAX / 2 || gp->groups > INT32_MAX / 2)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: sizes past 2^30 are not supported on CUDA", fn);

  Params p = {};
  p.a = static_cast<const char *>(gp->a);
  p.b = static_cast<const char *>(gp->b);
  p.out = static_cast<char *>(gp->out);
  p.a_row_bytes = gp->a_row_stride * es;
  p.b_group_bytes = gp->b_group_stride * es;
  p.b_row_bytes = b_row * es;
  p.out_row_stride = gp->out_row_stride;
  p.m = (int)gp->m;
  p.n = (int)gp->n;
  p.k = (int)gp->k;
  p.groups = (int)gp->groups;
  p.num_weights = (int)gp->num_weights;
  p.m_slots = (int)(gp->m / BM + gp->groups);
  p.n_tiles = (int)((gp->n + BN - 1) / BN);
  p.m_indptr = gp->m_indptr;
  p.indptr_i64 = gp->index_dtype == IGNIS_I64;
  p.weight_indices = gp->weight_indices;
  p.weight_i64 = gp->weight_index_dtype == IGNIS_I64;
  p.out_dtype = gp->out_dtype;
  p.a_scale = gp->a_scale;
  p.b_scale = gp->b_scale;
  p.scale_u8 = gp->scale_dtype == IGNIS_U8;
  p.a_scale_sm = gp->a_scale_stride_m;
  p.a_scale_sk = gp->a_scale_stride_k;
  p.b_scale_sg = gp->b_scale_stride_g;
  p.b_scale_sn = gp->b_scale_stride_n;
  p.b_scale_sk = gp->b_scale_stride_k;
  const int64_t blocks = (int64_t)p.m_slots * p.n_tiles;
  if (blocks > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %lld tiles exceed one launch", fn,
                           (long long)blocks);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (gp->fp8)
    return launch<Elem::E4M3, false>(p, blocks, s);
  if (gp->a_dtype == IGNIS_BF16)
    return kn ? launch<Elem::BF16, true>(p, blocks, s) : launch<Elem::BF16, false>(p, blocks, s);
  return kn ? launch<Elem::F16, true>(p, blocks, s) : launch<Elem::F16, false>(p, blocks, s);
}

/* The Hopper kernel where it takes the call (grouped_gemm_sm90.h), else this file's. */
extern "C" ignis_status ignis_cuda_grouped_gemm(const ignis_grouped_gemm_params *gp, int32_t device,
                                                void *stream) {
  if (ignis_cuda_grouped_skinny_takes(gp, device)) /* small M (MoE decode): grouped_skinny.cu */
    return ignis_cuda_grouped_skinny(gp, device, stream);
  if (ignis_cuda_grouped_gemm_sm90_takes(gp, device)) /* Hopper: grouped_gemm_sm90.cu */
    return ignis_cuda_grouped_gemm_sm90(gp, device, stream);
  return ignis_cuda_grouped_gemm_mma(gp, device, stream);
}
