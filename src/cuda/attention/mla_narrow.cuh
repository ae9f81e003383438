/* The narrow MLA attention kernel: work items of 16 or 32 query rows (MT = 1 or 2 row groups of
 * 16), the decode shape of DeepSeek-V3 at tensor-parallel 8 (16 heads, one or two query tokens).
 * There the wide kernel (mla_attention.cuh) spends three quarters of its tensor work on empty rows
 * and keeps one key tile in flight; this one is built to stream the latent cache.
 *
 * One block of 8 warps per work item (sched/mla_plan.h), one block per SM (~210 KB of shared
 * memory). The keys (ckv | kpe, 576 values) stream through a ring of STAGES tiles of MLA_KEY_TILE
 * = 32 keys, 16-bit rows padded to MLA_ROW values (conflict-free ldmatrix, as in the wide kernel).
 * Each warp issues the 16-byte cp.async copies of 4 keys of a tile (one page lookup per key),
 * zero-filled past the item's keys. An fp8 cache lands in a ring of raw tiles (576 bytes a key) and
 * is converted into three f16 tiles in turn, two tiles ahead of the softmax; its tensor work runs
 * in f16 (bf16 queries scaled per row into f16: mla_queries_to_f16).
 *
 * Each step t is software-pipelined around one block barrier: after it, the warps issue the copies
 * of a later tile, (fp8: convert tile t + 2,) compute the scores of tile t + 1 and then the softmax
 * and P . V of tile t, whose scores the previous step left in the other half of a double-buffered
 * exchange, so the score GEMM of one tile overlaps the softmax and output GEMM of the other:
 *   scores S[16 MT x 32] on tensor cores (mma.sync m16n8k16, f32): warp w takes the 8 keys
 *     8 (w % 4).. over half of the 576 dimensions (w / 4: 288 each, in 4 / MT independent
 *     accumulator chains; the kpe part, with its own scale, in another); the halves meet in f32 in
 *     the exchange
 *   online softmax in registers, computed by every warp for all rows (16 MT x 32 values: 16 MT per
 *     lane), straight into the A fragments of P; each lane keeps m and a partial l of its two rows
 *     per group, reduced over the row's 4 lanes at the end
 *   O[16 MT x 512] = alpha O + P . ckv: warp w owns the 64 output columns 64 w.., the keys' ckv
 *     part read with ldmatrix.trans (16 MT x 64 f32 accumulators a warp)
 * With MT = 1 a warp's query fragments (its 288 dimensions) stay in registers for the whole item.
 * The epilogue is the wide kernel's: out / lse, or f32 partial rows and their base-2 LSE for a
 * split request (mla_merge_kernel folds them).
 */
#ifndef IGNIS_CUDA_ATTENTION_MLA_NARROW_CUH
#define IGNIS_CUDA_ATTENTION_MLA_NARROW_CUH

#include <type_traits>

#include "cuda/attention/mla_attention.cuh"

#define MLA_NARROW_S_ROW 40 /* f32 row of the score exchange (conflict-free float2 access) */
#define MLA_HALF_STEPS 18   /* k-steps of 16 dimensions in half of the 576 */

/* Shared memory, in bytes: Q | score exchange [2 buffers][2 halves][rows] | 16-bit key tiles
 * (the ring; an fp8 cache: three converted tiles) | the raw fp8 ring and the rows' query scales
 * (an fp8 cache only). */
template <int MT, bool FP8> struct mla_narrow_layout {
  static constexpr int ROWS = 16 * MT;
  static constexpr int STAGES = FP8 ? (MT == 1 ? 4 : 3) : MT == 1 ? 5 : 4;
  static constexpr int KEY_TILE_BYTES = MLA_KEY_TILE * MLA_ROW * 2;
  static constexpr int EXCHANGE_BYTES = 2 * ROWS * MLA_NARROW_S_ROW * 4; /* one buffer */
  static constexpr int Q = 0;
  static constexpr int S = Q + ROWS * MLA_ROW * 2;
  static constexpr int KEYS = S + 2 * EXCHANGE_BYTES;
  static constexpr int RAW = KEYS + (FP8 ? 3 : STAGES) * KEY_TILE_BYTES;
  static constexpr int SCALES = RAW + (FP8 ? STAGES * MLA_RAW_STAGE : 0); /* fp8: f32 [ROWS] */
  static constexpr int BYTES = SCALES + (FP8 ? ROWS * 4 : 0);
  /* tiles issued ahead by the prologue; the tile, ahead of the softmax's, that a step needs landed */
  static constexpr int PRIMED = FP8 ? STAGES : STAGES - 1;
  static constexpr int AHEAD = FP8 ? 2 : 1;
  static_assert(BYTES <= 227 * 1024, "one block per SM");
  static_assert(PRIMED - AHEAD - 1 >= 0, "the ring holds the tiles a step reads");
};

/* A ring row's bytes: 16-bit rows padded to MLA_ROW values, fp8 rows of MLA_DIM bytes. */
template <typename K> __host__ __device__ constexpr int mla_ring_row_bytes() {
  return sizeof(K) == 1 ? MLA_DIM : MLA_ROW * 2;
}

/* The copies of a key tile: warp w copies keys 4 w .. 4 w + 3, 8 lanes a key, lane l the 16-byte
 * chunks l % 8 + 8 i of its key's row (ckv chunks, then kpe ones), so one copy instruction moves 4
 * runs of 128 bytes. A lane's key walks the item 32 keys a tile (mla_key_cursor: its page-table
 * index and slot, advanced without a division), and each step looks up the page of the tile it
 * issues next a step ahead, so the lookup's latency hides behind the step. */
struct mla_key_cursor {
  int key, index, slot;   /* this lane's key in the tile to look up next: kv_indices index, slot */
  int index_step, slot_step; /* 32 keys as whole pages and slots */
  int64_t page;           /* the looked-up tile's: page (-1: past the item's keys), slot */
  int page_slot;
  /* this lane's key within every tile: group + member (a warp's first key, the lane's among them) */
  __device__ __forceinline__ void start(const ignis_mla_params &p, const ignis_mla_work &w, int group, int member) {
    const int ps = (int)p.page_size;
    key = w.kv_start + group + member;
    index = w.page_base + key / ps;
    slot = key % ps;
    index_step = MLA_KEY_TILE / ps;
    slot_step = MLA_KEY_TILE % ps;
  }
  /* look up this lane's key of the next tile, then move to the tile after */
  __device__ __forceinline__ void look_up(const ignis_mla_params &p, int stop) {
    page = key < stop ? (int64_t)p.kv_indices[index] : -1;
    page_slot = slot;
    key += MLA_KEY_TILE;
    index += index_step;
    slot += slot_step;
    if (slot >= (int)p.page_size) {
      slot -= (int)p.page_size;
      ++index;
    }
  }
};

/* Issue the copies of the looked-up tile (keys past the item zero-filled) into the tile at `dst`
 * (16-bit rows of MLA_ROW values, or fp8 rows of MLA_DIM bytes). */
template <typename K>
__device__ __forceinline__ void mla_narrow_issue(const ignis_mla_params &p, const mla_key_cursor &c, uint32_t dst) {
  constexpr int ROW_BYTES = mla_ring_row_bytes<K>();
  constexpr int CKV_CHUNKS = MLA_CKV * (int)sizeof(K) / 16, KPE_CHUNKS = MLA_KPE * (int)sizeof(K) / 16;
  static_assert(CKV_CHUNKS % 8 == 0 && KPE_CHUNKS <= 8, "8 lanes a key");
  const int key = (threadIdx.x / 32) * (MLA_KEY_TILE / 8) + (threadIdx.x % 32) / 8, part = threadIdx.x % 8;
  const bool live = c.page >= 0;
  const int64_t page = live ? c.page : 0, slot = live ? c.page_slot : 0; /* dead: a valid address, unread */
  const char *ckv_row = (const char *)((const K *)p.ckv + page * p.ckv_stride_page + slot * p.ckv_stride_token) + part * 16;
  const char *kpe_row = (const char *)((const K *)p.kpe + page * p.kpe_stride_page + slot * p.kpe_stride_token) + part * 16;
  const uint32_t row = dst + (uint32_t)(key * ROW_BYTES + part * 16);
#pragma unroll
  for (int i = 0; i < CKV_CHUNKS / 8; ++i)
    copy_async16(row + (uint32_t)(i * 128), ckv_row + i * 128, live);
  if (part < KPE_CHUNKS)
    copy_async16(row + (uint32_t)(MLA_CKV * sizeof(K)), kpe_row, live);
}

/* Scores of one key tile (16-bit rows at `keys`) for this warp's 8 keys and half of the dimensions,
 * joined with the cache's scales and the rows' query scales (row_scale: 1, or an fp8 cache's f16
 * queries' power of two), in base-2 logits (sm_scale * log2(e) applied), stored to the exchange
 * buffer at `exchange`. */
template <bool BF16, int MT>
__device__ __forceinline__ void mla_narrow_scores(const ignis_mla_params &p, uint32_t keys, uint32_t q_addr,
                                                  const uint32_t (&q_frag)[MT == 1 ? MLA_HALF_STEPS : 1][4],
                                                  const float (&row_scale)[MT][2], float *exchange) {
  constexpr int ROWS = 16 * MT, CHAINS = 4 / MT;
  /* the exchange holds base-2 logits: the cache's scales and sm_scale * log2(e) applied */
  const float ckv_scale = p.ckv_scale * p.sm_scale_log2, kpe_scale = p.kpe_scale * p.sm_scale_log2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, key_group = warp % 4, half = warp / 4;
  float s[CHAINS][MT][4], s_pe[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s_pe[mt][e] = 0.0f;
#pragma unroll
      for (int c = 0; c < CHAINS; ++c)
        s[c][mt][e] = 0.0f;
    }
  const uint32_t b_addr = keys + (uint32_t)((key_group * 8 + lane % 8) * MLA_ROW + half * 288 + (lane / 8) * 8) * 2;
#pragma unroll
  for (int kk = 0; kk < MLA_HALF_STEPS / 2; ++kk) {
    uint32_t b[4];
    ldmatrix_x4(b_addr + (uint32_t)(kk * 64), b);
    /* steps 2 kk and 2 kk + 1 of this half; the kpe dimensions are the second half's last four */
    const bool pe = half == 1 && kk >= (MLA_CKV / 16 - MLA_HALF_STEPS) / 2;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        if (MT == 1) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[e] = q_frag[MT == 1 ? 2 * kk + j : 0][e];
        } else {
          ldmatrix_x4(q_addr + (uint32_t)(mt * 16 * MLA_ROW * 2 + (2 * kk + j) * 32), a);
        }
        if (pe)
          mma16816<BF16>(s_pe[mt], a, b[2 * j], b[2 * j + 1]);
        else
          mma16816<BF16>(s[(2 * kk + j) % CHAINS][mt], a, b[2 * j], b[2 * j + 1]);
      }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < CHAINS; ++c)
          sum += s[c][mt][2 * hh + e];
        v[e] = (sum * ckv_scale + s_pe[mt][2 * hh + e] * kpe_scale) * row_scale[mt][hh];
      }
      const int r = 16 * mt + lane / 4 + 8 * hh;
      *(float2 *)(exchange + (half * ROWS + r) * MLA_NARROW_S_ROW + key_group * 8 + (lane % 4) * 2) =
          make_float2(v[0], v[1]);
    }
}

/* The power of two a query row whose largest magnitude is `top` is multiplied by on its way to f16:
 * 2^(14 - e) for top in [2^e, 2^(e+1)); 1 for an empty row. */
__device__ __forceinline__ float mla_f16_query_scale(float top) {
  const int e = top > 0.0f ? (int)((__float_as_uint(top) >> 23) & 0xff) - 127 : 14;
  return __uint_as_float((uint32_t)min(254, max(1, 127 + 14 - e)) << 23);
}

/* An fp8 cache with bf16 queries runs the tensor work in f16 (e4m3 converts to f16 in one
 * instruction; bf16 would take four): each query row of the tile, in shared memory, is multiplied
 * by the power of two that brings its largest magnitude into [2^14, 2^15) and rounded to f16 (exact
 * for every value down to 2^-38 of the row's largest: bf16's 8 significant bits fit f16's 11), and
 * the inverse goes to the scores. P (in [0, 1]) and the converted keys are exact or finer in f16.
 * One row, shared by PER_ROW adjacent lanes, thread `sub` taking the 16-byte chunks sub,
 * sub + PER_ROW, ..; load(c) and store(c, value) reach chunk c. Returns the inverse scale. */
template <int PER_ROW, typename Load, typename Store>
__device__ __forceinline__ float mla_query_row_to_f16(int sub, Load load, Store store) {
  float top = 0.0f;
  for (int c = sub; c < MLA_CHUNKS; c += PER_ROW) {
    float x[8];
    ignis_raw_to_floats<__nv_bfloat16>(load(c), x);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      top = fmaxf(top, fabsf(x[k]));
  }
#pragma unroll
  for (int d = 1; d < PER_ROW; d *= 2)
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, d));
  const float scale = mla_f16_query_scale(top);
  for (int c = sub; c < MLA_CHUNKS; c += PER_ROW) {
    float x[8];
    ignis_raw_to_floats<__nv_bfloat16>(load(c), x);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      x[k] *= scale;
    store(c, ignis_floats_to_raw<__half>(x));
  }
  return 1.0f / scale;
}

/* The tile's query rows (padded rows of MLA_ROW values) to f16, their inverse scales to `scales`. */
template <int ROWS>
__device__ __forceinline__ void mla_queries_to_f16(unsigned char *q_tile, float *scales) {
  constexpr int PER_ROW = MLA_THREADS / ROWS; /* threads a row, adjacent lanes */
  const int row = threadIdx.x / PER_ROW, sub = threadIdx.x % PER_ROW;
  uint4 *q = (uint4 *)(q_tile + row * MLA_ROW * 2);
  const float inverse = mla_query_row_to_f16<PER_ROW>(
      sub, [&](int c) { return q[c]; }, [&](int c, uint4 v) { q[c] = v; });
  if (sub == 0)
    scales[row] = inverse;
}

template <typename T, bool FP8, int MT>
__global__ void __launch_bounds__(MLA_THREADS, 1) mla_narrow_kernel(const ignis_mla_params p) {
  using L = mla_narrow_layout<MT, FP8>;
  using K = typename std::conditional<FP8, uint8_t, T>::type;
  /* the tensor cores' type: the queries', or f16 for an fp8 cache (mla_queries_to_f16) */
  using C = typename std::conditional<FP8, __half, T>::type;
  constexpr bool BF16 = mla_is_bf16<C>::value, SCALED = FP8 && mla_is_bf16<T>::value;
  constexpr int ROWS = L::ROWS, STAGES = L::STAGES;
  if ((int)blockIdx.x >= p.header->num_work)
    return; /* a captured grid of the plan's maximum */
  const ignis_mla_work w = p.work[blockIdx.x];
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int H = (int)p.num_heads, rows_total = w.q_len * H;

  mla_issue_queries<T, ROWS>(p, w, base + L::Q); /* rows past the request zero; the first copy group */
  const int last_row = min(w.row_start + ROWS, rows_total) - 1;
  const int tile_last_key = p.causal ? w.kv_len - w.q_len + last_row / H : w.kv_len - 1;
  const int stop = min(w.kv_end, tile_last_key + 1);
  const int num_tiles = stop > w.kv_start ? (stop - w.kv_start + MLA_KEY_TILE - 1) / MLA_KEY_TILE : 0;
  /* the ring: 16-bit tiles, or raw fp8 tiles; tile x in slot x % STAGES */
  const uint32_t ring = base + (FP8 ? L::RAW : L::KEYS);
  constexpr int RING_TILE = FP8 ? MLA_RAW_STAGE : L::KEY_TILE_BYTES;
  if (num_tiles == 0) {
    copy_async_commit();
    copy_async_wait<0>(); /* the queries (nothing to attend: the epilogue writes empty rows) */
  }
  /* one cp.async copy group a tile, PRIMED tiles ahead */
  mla_key_cursor cursor;
  cursor.start(p, w, (threadIdx.x / 32) * (MLA_KEY_TILE / 8), (threadIdx.x % 32) / 8);
  if (num_tiles > 0) {
#pragma unroll
    for (int x = 0; x < L::PRIMED; ++x) {
      if (x < num_tiles) {
        cursor.look_up(p, stop);
        mla_narrow_issue<K>(p, cursor, ring + (uint32_t)(x * RING_TILE));
      }
      copy_async_commit();
    }
    cursor.look_up(p, stop); /* tile PRIMED, issued by step 0 */
  }

  /* the last key each of this lane's rows sees (-1: a row past the request), within the item */
  int limit[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = w.row_start + 16 * mt + lane / 4 + 8 * hh;
      const int last = row >= rows_total ? -1 : p.causal ? w.kv_len - w.q_len + row / H : w.kv_len - 1;
      limit[mt][hh] = min(last, stop - 1);
    }
  /* tiles ending at or before every live row's last key need no mask (rows past the request: their
   * q is zero and their output unwritten, so unmasked scores are harmless there) */
  const int first_row = w.row_start, min_limit = min(p.causal ? w.kv_len - w.q_len + first_row / H : w.kv_len - 1,
                                                     stop - 1);
  float m[MT][2], l[MT][2], acc[MT][8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      m[mt][hh] = -CUDART_INF_F;
      l[mt][hh] = 0.0f;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[mt][nt][e] = 0.0f;
  }

  const uint32_t q_addr =
      base + L::Q + (uint32_t)((lane % 16) * MLA_ROW + (warp / 4) * 288 + (lane / 16) * 8) * 2;
  uint32_t q_frag[MT == 1 ? MLA_HALF_STEPS : 1][4]; /* MT = 1: this warp's query fragments */
  float row_scale[MT][2];                            /* the query scales of this lane's rows */
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    row_scale[mt][0] = row_scale[mt][1] = 1.0f;
  float *exchange = (float *)(smem + L::S);
  constexpr int EXCHANGE_FLOATS = L::EXCHANGE_BYTES / 4;
  /* the 16-bit tile of key tile x */
  auto key_tile = [&](int x) -> uint32_t {
    return base + L::KEYS + (uint32_t)((FP8 ? x % 3 : x % STAGES) * L::KEY_TILE_BYTES);
  };
  auto convert = [&](int x) {
    mla_convert_keys<C>(smem + L::RAW + (x % STAGES) * MLA_RAW_STAGE,
                        (C *)(smem + L::KEYS + (x % 3) * L::KEY_TILE_BYTES));
  };

  /* prologue: the queries and the first tiles landed (fp8: tiles 0 and 1 converted), the scores of
   * tile 0 in exchange buffer 0 */
  if (num_tiles > 0) {
    if (FP8) {
      copy_async_wait<L::PRIMED - 2>();
      __syncthreads();
      convert(0);
      convert(1);
      if (SCALED)
        mla_queries_to_f16<ROWS>(smem + L::Q, (float *)(smem + L::SCALES));
    } else {
      copy_async_wait<L::PRIMED - 1>();
    }
    __syncthreads();
    if (SCALED) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          row_scale[mt][hh] = ((const float *)(smem + L::SCALES))[16 * mt + lane / 4 + 8 * hh];
    }
    if (MT == 1) {
#pragma unroll
      for (int x = 0; x < (MT == 1 ? MLA_HALF_STEPS : 1); ++x)
        ldmatrix_x4(q_addr + (uint32_t)(x * 32), q_frag[x]);
    }
    mla_narrow_scores<BF16, MT>(p, key_tile(0), q_addr, q_frag, row_scale, exchange);
  }

  for (int t = 0; t < num_tiles; ++t) {
    copy_async_wait<L::PRIMED - L::AHEAD - 1>();
    __syncthreads(); /* tile t + AHEAD landed; tile t's scores in the exchange; step t - 1 done */
    {
      const int next = t + L::PRIMED;
      if (next < num_tiles) {
        mla_narrow_issue<K>(p, cursor, ring + (uint32_t)((next % STAGES) * RING_TILE));
        cursor.look_up(p, stop);
      }
      copy_async_commit();
    }
    if (FP8)
      convert(t + 2); /* past the last tile: bytes nobody reads */
    /* the scores of tile t + 1 (past the last tile: unread) */
    mla_narrow_scores<BF16, MT>(p, key_tile(t + 1), q_addr, q_frag, row_scale,
                                exchange + ((t + 1) & 1) * EXCHANGE_FLOATS);

    /* online softmax of tile t for this lane's rows, into P's A fragments (every warp alike); the
     * mask only where a row's last key falls inside the tile */
    const float *scores = exchange + (t & 1) * EXCHANGE_FLOATS;
    const int k0 = w.kv_start + t * MLA_KEY_TILE;
    const bool whole = k0 + MLA_KEY_TILE - 1 <= min_limit;
    uint32_t prob[MT][2][4];
    bool moved = false; /* a row maximum of this lane rose: the output rescales */
    float alpha[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = 16 * mt + lane / 4 + 8 * hh;
        float x[2][2][2]; /* [k-step][column half][pair] */
        float top = -CUDART_INF_F;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int c8 = 0; c8 < 2; ++c8) {
            const int col = ks * 16 + c8 * 8 + (lane % 4) * 2;
            const float2 lo = *(const float2 *)(scores + r * MLA_NARROW_S_ROW + col);
            const float2 hi = *(const float2 *)(scores + (ROWS + r) * MLA_NARROW_S_ROW + col);
            x[ks][c8][0] = lo.x + hi.x;
            x[ks][c8][1] = lo.y + hi.y;
            if (!whole) {
              x[ks][c8][0] = k0 + col <= limit[mt][hh] ? x[ks][c8][0] : -CUDART_INF_F;
              x[ks][c8][1] = k0 + col + 1 <= limit[mt][hh] ? x[ks][c8][1] : -CUDART_INF_F;
            }
            top = fmaxf(top, fmaxf(x[ks][c8][0], x[ks][c8][1]));
          }
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        moved |= top > m[mt][hh];
        const float offset = online_max<true>(m[mt][hh], top, &alpha[mt][hh]);
        float sum = 0.0f;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int c8 = 0; c8 < 2; ++c8) {
            float e[2];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
              e[k] = exp2_approx(x[ks][c8][k] - offset);
              sum += e[k];
            }
            prob[mt][ks][hh + 2 * c8] = ignis_pack_word<C>(e);
          }
        l[mt][hh] = l[mt][hh] * alpha[mt][hh] + sum;
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          acc[mt][nt][0] *= alpha[mt][0];
          acc[mt][nt][1] *= alpha[mt][0];
          acc[mt][nt][2] *= alpha[mt][1];
          acc[mt][nt][3] *= alpha[mt][1];
        }
    }
    /* O += P . ckv of tile t over this warp's 64 columns */
    const uint32_t keys = key_tile(t);
#pragma unroll
    for (int ks = 0; ks < MLA_KEY_TILE / 16; ++ks)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(keys + (uint32_t)((ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * MLA_ROW + 64 * warp +
                                            np * 16 + (lane / 16) * 8) *
                                     2,
                          b);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<BF16>(acc[mt][2 * np], prob[mt][ks], b[0], b[1]);
          mma16816<BF16>(acc[mt][2 * np + 1], prob[mt][ks], b[2], b[3]);
        }
      }
  }
  copy_async_wait<0>();

  /* epilogue: out / lse, or the chunk's partial rows */
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float sum = l[mt][hh];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = w.row_start + 16 * mt + lane / 4 + 8 * hh;
      if (row >= rows_total)
        continue;
      const float inv = sum > 0.0f ? p.ckv_scale / sum : 0.0f; /* values are ckv_scale * ckv */
      const int64_t token = row / H, h = row % H;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int col = 64 * warp + nt * 8 + (lane % 4) * 2;
        const float x[2] = {acc[mt][nt][2 * hh] * inv, acc[mt][nt][2 * hh + 1] * inv};
        if (w.partial < 0)
          *(uint32_t *)((T *)p.out + (w.q_row + token) * p.out_stride_token + h * p.out_stride_head + col) =
              ignis_pack_word<T>(x);
        else
          *(float2 *)(p.partial_out + ((w.partial + token) * H + h) * MLA_CKV + col) = make_float2(x[0], x[1]);
      }
      if (warp == 0 && lane % 4 == 0) {
        const float lse2 = sum > 0.0f ? m[mt][hh] + log2f(sum) : -CUDART_INF_F;
        if (w.partial >= 0)
          p.partial_lse[(w.partial + token) * H + h] = lse2;
        else if (p.lse)
          p.lse[(w.q_row + token) * p.lse_stride_token + h * p.lse_stride_head] = lse2 * p.lse_scale;
      }
    }
}

#endif
