/* The Hopper (sm_90a) MLA attention kernel for 16- and 32-row tiles of a 16-bit cache: DeepSeek-V3's
 * decode at tensor-parallel 8 (16 heads, one or two query tokens). It takes the narrow kernel's work
 * items (mla_narrow.cuh) and writes the same results; mla.cu runs it where the device is compute
 * capability 9.0 and the build has sm_90a (IGNIS_MLA_WGMMA).
 *
 * The operands are swapped so the 64 keys of a tile fill wgmma's M and the few query rows its N:
 *   S^T [64 keys x ROWS] = K Q^T   m64nROWSk16 over the 576 dims (32 ckv steps into one accumulator,
 *                                  4 kpe steps into another, joined with the cache's scales)
 *   O^T [512 x ROWS] += V^T P^T    8 m64nROWSk16 blocks of 64 ckv dims, 4 key steps each, V^T read
 *                                  as the MN-major A operand straight from the key tile
 * so the tensor work of a key is 2 ROWS x 1088 multiply-adds whatever the row count, and a 64-key
 * tile costs ~1400 cycles of shared-memory operand traffic, well under the ~4500 its 72 KB take to
 * stream at the H200's bandwidth.
 *
 * Block: 256 threads, one block per SM. Warpgroup 0 computes; warpgroup 1 copies the keys (8
 * threads a key, 16-byte cp.async through the page table, the pages of the next tile looked up
 * while the current one's copies fly). Two stages of 64 keys x 576 in the 128-byte-swizzle layout
 * (9 panels of 64 dims, mla_wgmma.cuh's), each guarded by a full mbarrier (128 copier arrivals,
 * cp.async.mbarrier.arrive.noinc) and an empty one (the 4 computing warps, after their P V has read
 * it). Shared memory past the stages: Q (ROWS x 576, 9 panels of ROWS x 128 bytes), P (ROWS rows x
 * 64 keys, K-major: the B operand of the output product), the warps' row maxima and sums.
 * An fp8 cache: warpgroup 1 copies raw tiles of 32 keys (4 threads a key) into a ring of 3 (16
 * rows) or 2 (32 rows), and each thread converts the bytes it copied exactly to f16 into the key
 * stage (two raw tiles to a stage, the stage's full mbarrier then taking 128 plain arrivals), so
 * the conversion of one key tile overlaps the tensor work on the other; bf16 queries are scaled per
 * row into f16 (mla_f16_query_scale) and the scores divided back.
 *
 * Per tile, warpgroup 0: S^T (thread holds keys 16 w + l / 4 (+8) of warp w, lane l, for rows
 * 8 j + 2 (l % 4) + e), scale to base 2 and mask (chunk end, causal position, rows past the
 * request), row maxima over the warp's 16 keys by shuffles and over the 4 warps through shared
 * memory (a named barrier), the online softmax, P to shared memory (a second named barrier), the
 * output's rescale and P V. Each thread keeps partial row sums, reduced at the end. The epilogue
 * stages O (f32, normalized) through the first key stage and writes whole rows: out / lse, or the
 * f32 partial row and its base-2 LSE for a chunk of a split request. */
#ifndef IGNIS_CUDA_ATTENTION_MLA_WGMMA_NARROW_CUH
#define IGNIS_CUDA_ATTENTION_MLA_WGMMA_NARROW_CUH

#include <type_traits>

#include "cuda/attention/mla_narrow.cuh"
#include "cuda/attention/mla_wgmma.cuh"

/* Shared memory, in bytes from a 1024-byte aligned base: the two 16-bit key stages, an fp8 cache's
 * ring of raw tiles, Q, P, the warps' row maxima and sums, the rows' query scales (fp8), the
 * mbarriers. */
template <int ROWS, bool FP8> struct mla_wgn_layout {
  static constexpr int Q_PANEL = ROWS * 128;
  static constexpr int STAGES = 2;                             /* 16-bit key tiles of MLA_WG_TILE */
  /* an fp8 cache's raw tiles of RAW_KEYS keys x 576 bytes (two to a key tile), as many as fit */
  static constexpr int RAW_KEYS = 32;
  static constexpr int RAW_STAGES = FP8 ? (ROWS == 16 ? 3 : 2) : 0;
  static constexpr int RAW_TILE = RAW_KEYS * MLA_DIM;
  static constexpr int KEYS = 0;
  static constexpr int RAW = KEYS + STAGES * MLA_WG_TILE;
  static constexpr int Q = RAW + RAW_STAGES * RAW_TILE;        /* 9 panels of Q_PANEL */
  static constexpr int P = Q + (MLA_DIM / 64) * Q_PANEL;       /* ROWS x 64 16-bit values */
  static constexpr int MAX = P + ROWS * 128;                   /* float [4 warps][ROWS] */
  static constexpr int SUM = MAX + 4 * ROWS * 4;               /* float [4 warps][ROWS] */
  static constexpr int SCALES = SUM + 4 * ROWS * 4;            /* float [ROWS] */
  static constexpr int BARS = SCALES + ROWS * 4;               /* full[STAGES], empty[STAGES] */
  static constexpr int BYTES = BARS + 4 * 8 + 1024;            /* + alignment slack */
  static constexpr int O_ROW = MLA_CKV + 4;                    /* f32 staging row (conflict-free) */
  static_assert(ROWS * O_ROW * 4 <= MLA_WG_TILE, "O stages through the first key tile");
  static_assert(RAW % 1024 == 0 && Q % 1024 == 0 && P % 1024 == 0, "wgmma operands 1024-byte aligned");
  static_assert(BYTES <= 227 * 1024, "one block per SM");
};

/* A barrier of warpgroup 0 alone (named barrier 1). */
__device__ __forceinline__ void mla_wgn_sync() {
  asm volatile("bar.sync 1, 128;" ::: "memory");
}

/* An fp8 cache's copier thread c (PARTS a key): raw 16-byte chunks c % PARTS + PARTS i of key
 * c / PARTS, its ckv chunks (0-31) then its kpe ones (32-35), into the raw tile at dst; zeros past
 * the keys. */
template <int PARTS>
__device__ __forceinline__ void mla_wgn_issue_raw(const ignis_mla_params &p, mla_wg_key_rows<uint8_t> rows,
                                                  uint32_t dst, int c) {
  const int key = c / PARTS, part = c % PARTS;
  const bool live = rows.nope != nullptr;
#pragma unroll
  for (int i = 0; i < MLA_DIM / 16 / PARTS; ++i) {
    const int rc = part + PARTS * i;
    const void *src = !live ? p.ckv : rc < MLA_CKV / 16 ? (const void *)(rows.nope + rc * 16)
                                                        : (const void *)(rows.pe + (rc - MLA_CKV / 16) * 16);
    copy_async16(dst + (uint32_t)(key * MLA_DIM + rc * 16), src, live);
  }
}

/* The same thread's chunks converted exactly to f16 into row first_key + c / PARTS of the 16-bit key
 * tile at `keys` (raw chunk rc: the tile's 16-byte chunks 2 rc and 2 rc + 1 of the key's row). */
template <int PARTS>
__device__ __forceinline__ void mla_wgn_convert(uint32_t raw_tile, uint32_t keys, int first_key, int c) {
  const int part = c % PARTS, key = first_key + c / PARTS;
#pragma unroll
  for (int i = 0; i < MLA_DIM / 16 / PARTS; ++i) {
    const int rc = part + PARTS * i;
    const uint4 v = load_shared16(raw_tile + (uint32_t)((c / PARTS) * MLA_DIM + rc * 16));
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int chunk = 2 * rc + half;
      uint4 out;
      out.x = fp8x2_to_f16x2<KV_E4M3>(words[2 * half] & 0xffffu);
      out.y = fp8x2_to_f16x2<KV_E4M3>(words[2 * half] >> 16);
      out.z = fp8x2_to_f16x2<KV_E4M3>(words[2 * half + 1] & 0xffffu);
      out.w = fp8x2_to_f16x2<KV_E4M3>(words[2 * half + 1] >> 16);
      store_shared16(keys + (uint32_t)((chunk >> 3) * MLA_WG_PANEL + key * 128 + (((chunk & 7) ^ (key & 7)) << 4)),
                     out);
    }
  }
}

template <typename T, int ROWS, bool FP8>
__global__ void __launch_bounds__(MLA_WG_THREADS, 1) mla_wgmma_narrow_kernel(const ignis_mla_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = mla_wgn_layout<ROWS, FP8>;
  /* the tensor cores' type: the queries', or f16 for an fp8 cache (e4m3 converts to f16 exactly;
   * bf16 queries are scaled per row into f16, as in the narrow kernel) */
  constexpr ignis_wgmma_type WT = !FP8 && mla_is_bf16<T>::value ? IGNIS_WGMMA_BF16 : IGNIS_WGMMA_F16;
  using C = typename std::conditional<FP8, __half, T>::type;
  constexpr bool SCALED = FP8 && mla_is_bf16<T>::value;
  constexpr int NR = ROWS / 4; /* rows a thread holds: 8 j + 2 (l % 4) + e as index 2 j + e */
  if ((int)blockIdx.x >= p.header->num_work)
    return; /* a captured grid of the plan's maximum */
  const ignis_mla_work w = p.work[blockIdx.x];
  extern __shared__ __align__(1024) unsigned char mla_wgn_smem[];
  unsigned char *smem;
  const uint32_t base = mla_wg_aligned(mla_wgn_smem, &smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, quad = lane & 3;
  const int H = (int)p.num_heads, rows_total = w.q_len * H;
  const uint32_t full = base + L::BARS, empty = full + 8 * L::STAGES;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < L::STAGES; ++s) {
      ignis_mbar_init(full + 8 * s, 128);
      ignis_mbar_init(empty + 8 * s, 4);
    }
    ignis_mbar_init_fence();
  }
  __syncthreads();

  /* keys the tile sees: up to the last row's causal limit, within the chunk */
  const int last_row = min(w.row_start + ROWS, rows_total) - 1;
  const int tile_last_key = p.causal ? w.kv_len - w.q_len + last_row / H : w.kv_len - 1;
  const int stop = min(w.kv_end, tile_last_key + 1);
  const int num_tiles = stop > w.kv_start ? (stop - w.kv_start + MLA_WG_KEYS - 1) / MLA_WG_KEYS : 0;

  if (tid >= 128) {
    const int c = tid - 128;
    if constexpr (FP8) {
      /* warpgroup 1, fp8: raw tiles of RAW_KEYS keys, PARTS threads a key, RAW_STAGES ahead; each
       * thread converts the bytes it copied into its key's row of the key tile (two raw tiles to a
       * key tile) once the computing warpgroup has released that stage */
      constexpr int RK = L::RAW_KEYS, PER = MLA_WG_KEYS / RK, PARTS = 128 / RK;
      const int num_raw = num_tiles * PER;
      mla_wg_key_rows<uint8_t> rows = mla_wg_look_up<uint8_t, PARTS>(p, w, w.kv_start, stop, c);
#pragma unroll
      for (int x = 0; x < L::RAW_STAGES; ++x) {
        if (x < num_raw) {
          mla_wgn_issue_raw<PARTS>(p, rows, base + L::RAW + (uint32_t)(x * L::RAW_TILE), c);
          rows = mla_wg_look_up<uint8_t, PARTS>(p, w, w.kv_start + (x + 1) * RK, stop, c);
        }
        copy_async_commit();
      }
      for (int x = 0; x < num_raw; ++x) {
        const int tile = x / PER, part_of_tile = x % PER, s = tile % L::STAGES;
        const uint32_t raw_tile = base + L::RAW + (uint32_t)((x % L::RAW_STAGES) * L::RAW_TILE);
        copy_async_wait<L::RAW_STAGES - 1>(); /* this thread's copies of raw tile x */
        if (part_of_tile == 0)
          ignis_mbar_wait(empty + 8 * s, ((tile / L::STAGES) & 1) ^ 1);
        mla_wgn_convert<PARTS>(raw_tile, base + L::KEYS + (uint32_t)s * MLA_WG_TILE, part_of_tile * RK, c);
        if (part_of_tile == PER - 1) {
          ignis_fence_proxy_async(); /* the converted tile, before wgmma reads it */
          ignis_mbar_arrive(full + 8 * s);
        }
        if (x + L::RAW_STAGES < num_raw) {
          mla_wgn_issue_raw<PARTS>(p, rows, raw_tile, c);
          rows = mla_wg_look_up<uint8_t, PARTS>(p, w, w.kv_start + (x + L::RAW_STAGES + 1) * RK, stop, c);
        }
        copy_async_commit();
      }
      copy_async_wait<0>();
    } else {
      /* warpgroup 1, 16-bit: thread c copies 16-byte chunks c % 8 + 8 i of keys c / 8 + 16 pass */
      mla_wg_tile_copier<T, 8, 128> ahead;
      ahead.look_up(p, w, w.kv_start, stop, c);
      for (int tile = 0; tile < num_tiles; ++tile) {
        const int s = tile & 1;
        ignis_mbar_wait(empty + 8 * s, ((tile >> 1) & 1) ^ 1);
        ahead.issue(p, base + L::KEYS + (uint32_t)s * MLA_WG_TILE, c);
        mbar_arrive_copies(full + 8 * s);
        if (tile + 1 < num_tiles)
          ahead.look_up(p, w, w.kv_start + (tile + 1) * MLA_WG_KEYS, stop, c);
      }
    }
    return;
  }

  /* warpgroup 0: the queries, 128 / ROWS threads a row (rows past the request zero) */
  constexpr int PARTS = 128 / ROWS;
  {
    const int r = tid / PARTS, row = w.row_start + r;
    const T *nope = nullptr, *pe = nullptr;
    if (row < rows_total) {
      const int64_t t = w.q_row + row / H, h = row % H;
      nope = (const T *)p.q_nope + t * p.q_nope_stride_token + h * p.q_nope_stride_head;
      pe = (const T *)p.q_pe + t * p.q_pe_stride_token + h * p.q_pe_stride_head;
    }
    mla_wg_copy_row<T, PARTS, L::Q_PANEL>(base + L::Q, r, tid % PARTS, nope, pe, p.q_nope);
    copy_async_commit();
    copy_async_wait<0>();
  }
  float *const s_scales = (float *)(smem + L::SCALES);
  if constexpr (SCALED) { /* bf16 queries to f16 per row; each thread converts the chunks it copied */
    const int r = tid / PARTS, part = tid % PARTS;
    auto chunk_addr = [&](int c) {
      return base + L::Q + (uint32_t)((c >> 3) * L::Q_PANEL + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    };
    const float inverse = mla_query_row_to_f16<PARTS>(
        part, [&](int c) { return load_shared16(chunk_addr(c)); },
        [&](int c, uint4 v) { store_shared16(chunk_addr(c), v); });
    if (part == 0)
      s_scales[r] = inverse;
  }
  ignis_fence_proxy_async(); /* the queries, before wgmma reads them */
  float *const s_max = (float *)(smem + L::MAX), *const s_sum = (float *)(smem + L::SUM);
  unsigned char *const s_p = smem + L::P;
  /* the last key each of this thread's rows sees (-1: a row past the request) */
  int last[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    const int row = w.row_start + 8 * (i >> 1) + 2 * quad + (i & 1);
    last[i] = row >= rows_total ? -1 : min(stop - 1, p.causal ? w.kv_len - w.q_len + row / H : w.kv_len - 1);
  }
  float m[NR], l[NR], o[8][ROWS / 2];
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    m[i] = -CUDART_INF_F;
    l[i] = 0.0f;
  }
#pragma unroll
  for (int mb = 0; mb < 8; ++mb)
#pragma unroll
    for (int i = 0; i < ROWS / 2; ++i)
      o[mb][i] = 0.0f;
  const int key_in_tile = 16 * warp + (lane >> 2); /* and + 8 */
  mla_wgn_sync(); /* every warp's queries landed (and scaled) */
  /* the scores' factors: the cache's scales, sm_scale * log2(e), and the rows' query scales */
  float ckv_scale[NR], kpe_scale[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    const float q_scale = SCALED ? s_scales[8 * (i >> 1) + 2 * quad + (i & 1)] : 1.0f;
    ckv_scale[i] = p.ckv_scale * p.sm_scale_log2 * q_scale;
    kpe_scale[i] = p.kpe_scale * p.sm_scale_log2 * q_scale;
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int s = tile % L::STAGES, k0 = w.kv_start + tile * MLA_WG_KEYS;
    const uint32_t stage = base + L::KEYS + (uint32_t)s * MLA_WG_TILE;
    ignis_mbar_wait(full + 8 * s, (tile / L::STAGES) & 1);
    ignis_fence_proxy_async(); /* the copies' generic-proxy writes, before wgmma reads them */
    /* 1. S^T = K Q^T */
    float sc[ROWS / 2], sp[ROWS / 2];
    ignis_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < MLA_CKV / 16; ++kk)
      ignis_wgmma_m64n_small<WT, ROWS>(sc, ignis_wgmma_desc(stage + (kk >> 2) * MLA_WG_PANEL + (kk & 3) * 32),
                                       ignis_wgmma_desc(base + L::Q + (kk >> 2) * L::Q_PANEL + (kk & 3) * 32),
                                       kk > 0);
#pragma unroll
    for (int kk = 0; kk < MLA_KPE / 16; ++kk)
      ignis_wgmma_m64n_small<WT, ROWS>(sp, ignis_wgmma_desc(stage + 8 * MLA_WG_PANEL + kk * 32),
                                       ignis_wgmma_desc(base + L::Q + 8 * L::Q_PANEL + kk * 32), kk > 0);
    ignis_wgmma_commit();
    ignis_wgmma_wait<0>();
    ignis_wgmma_pin(sc);
    ignis_wgmma_pin(sp);
    /* 2. base-2 logits, masked; the row maxima of this warp's 16 keys, then of the tile */
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      float mx = -CUDART_INF_F;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int x = 4 * (i >> 1) + 2 * h + (i & 1);
        const float v = sc[x] * ckv_scale[i] + sp[x] * kpe_scale[i];
        sc[x] = k0 + key_in_tile + 8 * h <= last[i] ? v : -CUDART_INF_F;
        mx = fmaxf(mx, sc[x]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      if (lane < 4)
        s_max[warp * ROWS + 8 * (i >> 1) + 2 * quad + (i & 1)] = mx;
    }
    mla_wgn_sync();
    float alpha[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int r = 8 * (i >> 1) + 2 * quad + (i & 1);
      const float top = fmaxf(fmaxf(s_max[r], s_max[ROWS + r]), fmaxf(s_max[2 * ROWS + r], s_max[3 * ROWS + r]));
      const float m_use = online_max<true>(m[i], top, &alpha[i]);
      float sum = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int x = 4 * (i >> 1) + 2 * h + (i & 1), key = key_in_tile + 8 * h;
        const float e = exp2_approx(sc[x] - m_use);
        sum += e;
        /* P [row][key], K-major swizzled: 16-byte chunk key / 8 of row r */
        *(C *)(s_p + r * 128 + (((key >> 3) ^ (r & 7)) << 4) + (key & 7) * 2) = ignis_from_float<C>(e);
      }
      l[i] = fmaf(l[i], alpha[i], sum);
    }
    ignis_fence_proxy_async(); /* P, before wgmma reads it */
    mla_wgn_sync();            /* every warp's P written, every warp's maxima read */
    /* 3. O^T = alpha O^T + V^T P^T */
    bool moved = false;
#pragma unroll
    for (int i = 0; i < NR; ++i)
      moved |= alpha[i] != 1.0f;
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mb = 0; mb < 8; ++mb)
#pragma unroll
        for (int x = 0; x < ROWS / 2; ++x)
          o[mb][x] *= alpha[2 * (x >> 2) + (x & 1)];
    }
    ignis_wgmma_fence();
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int kk = 0; kk < MLA_WG_KEYS / 16; ++kk)
        ignis_wgmma_m64n_small<WT, ROWS, true>(
            o[mb], ignis_wgmma_desc(stage + mb * MLA_WG_PANEL + kk * 16 * 128, MLA_WG_PANEL),
            ignis_wgmma_desc(base + L::P + kk * 32), 1);
    ignis_wgmma_commit();
    ignis_wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
      ignis_wgmma_pin(o[mb]);
    if (lane == 0)
      ignis_mbar_arrive(empty + 8 * s); /* this warp is done with the stage */
  }

  /* epilogue: the row sums over the lanes and warps */
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    if (lane < 4)
      s_sum[warp * ROWS + 8 * (i >> 1) + 2 * quad + (i & 1)] = sum;
  }
  mla_wgn_sync(); /* the sums, and every warp's last P V done with the stages */
  float *const o_stage = (float *)(smem + L::KEYS);
#pragma unroll
  for (int i = 0; i < NR; ++i) {
    const int r = 8 * (i >> 1) + 2 * quad + (i & 1);
    const float lsum = s_sum[r] + s_sum[ROWS + r] + s_sum[2 * ROWS + r] + s_sum[3 * ROWS + r];
    const float inv = lsum > 0.0f ? p.ckv_scale / lsum : 0.0f; /* values are ckv_scale * ckv */
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        o_stage[r * L::O_ROW + 64 * mb + key_in_tile + 8 * h] = o[mb][4 * (i >> 1) + 2 * h + (i & 1)] * inv;
    if (warp == 0 && lane < 4) {
      const int row = w.row_start + r;
      if (row < rows_total) {
        const int64_t token = row / H, head = row % H;
        const float lse2 = lsum > 0.0f ? m[i] + log2f(lsum) : -CUDART_INF_F;
        if (w.partial >= 0)
          p.partial_lse[(w.partial + token) * H + head] = lse2;
        else if (p.lse)
          p.lse[(w.q_row + token) * p.lse_stride_token + head * p.lse_stride_head] = lse2 * p.lse_scale;
      }
    }
  }
  mla_wgn_sync();
  /* whole rows: thread t writes dims 4 t .. 4 t + 3 of each row */
  for (int r = 0; r < ROWS; ++r) {
    const int row = w.row_start + r;
    if (row >= rows_total)
      break;
    const int64_t token = row / H, head = row % H;
    const float4 v = *(const float4 *)(o_stage + r * L::O_ROW + 4 * tid);
    if (w.partial < 0) {
      const float x[4] = {v.x, v.y, v.z, v.w};
      uint2 pair;
      pair.x = ignis_pack_word<T>(x);
      pair.y = ignis_pack_word<T>(x + 2);
      *(uint2 *)((T *)p.out + (w.q_row + token) * p.out_stride_token + head * p.out_stride_head + 4 * tid) = pair;
    } else {
      *(float4 *)(p.partial_out + ((w.partial + token) * H + head) * MLA_CKV + 4 * tid) = v;
    }
  }
#endif
}

#endif
