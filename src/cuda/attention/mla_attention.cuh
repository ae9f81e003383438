/* The CUDA kernels of MLA attention (include/ignis/mla.h): attention of one work item per block,
 * and the merge of split requests.
 *
 * Attention (mla_attention_kernel): one block of 8 warps per work item (sched/mla_plan.h: a tile
 * of MLA_TILE_M = 64 query rows, row = token * num_heads + head, against a chunk of the request's
 * keys). The tile's queries (q_nope | q_pe, 576 values a row) stay in shared memory; the keys
 * stream through a two-stage ring of MLA_KEY_TILE = 32 keys x 576 values (ckv | kpe, gathered
 * through the page table with 16-byte cp.async, zero-filled past the chunk), the next tile's copy
 * in flight while the current one computes (an fp8 e4m3 cache lands in raw stages and is converted
 * exactly into the 16-bit key stage at the top of its step; the dequantization scales are applied
 * in f32: the ckv and kpe parts of each score are summed apart and joined as
 * ckv_scale * <q_nope, ckv> + kpe_scale * <q_pe, kpe>, and ckv_scale goes into the output's
 * normalisation). Rows are padded to 584 values so the 8 row addresses
 * of every ldmatrix phase fall in distinct banks. Per key tile:
 *   1. scores S[64 x 32] = Q . K^T on tensor cores (mma.sync m16n8k16, f32 accumulators): warp w
 *      takes rows 16 (w % 4).. and keys 16 (w / 4).., 32 k-steps over the 512 ckv dimensions and 4
 *      over the 64 kpe ones into separate accumulators, joined with the cache's scales; scaled to
 *      base 2, masked (chunk end, causal position, rows past the request), stored to shared memory
 *   2. online softmax, 4 threads a row: running maximum m, sum l, the rescale alpha of the row's
 *      output, and P = 2^(S - m) rounded to the 16-bit dtype into shared memory
 *   3. O[64 x 512] = alpha O + P . ckv: the 512 output columns split across the 8 warps (64 each,
 *      all 64 rows: 4 x 8 fragments, 128 f32 accumulators a thread), ckv read from the same
 *      key tile with ldmatrix.trans
 * The epilogue divides by l and writes out / lse, or for a chunk of a split request the f32
 * partial row and its base-2 LSE. Merge (mla_merge_kernel): one block per (split query token,
 * head), 4 groups of 128 threads x 4 columns, each group folding a share of the chunks' partial
 * rows by their LSEs (lse_merge.cuh), then the groups' states in shared memory (one group under
 * IGNIS_MLA_MERGE_GROUPS=1). */
#ifndef IGNIS_CUDA_ATTENTION_MLA_ATTENTION_CUH
#define IGNIS_CUDA_ATTENTION_MLA_ATTENTION_CUH

#include "core/mla_params.h"
#include "cuda/attention/attention_tile.cuh"
#include "cuda/attention/lse_merge.cuh"

#define MLA_CKV 512
#define MLA_KPE 64
#define MLA_DIM 576
#define MLA_TILE_M IGNIS_MLA_TILE_ROWS
#define MLA_KEY_TILE IGNIS_MLA_KEY_TILE
#define MLA_THREADS 256
#define MLA_ROW 584                  /* padded shared row, in 16-bit values (1168 bytes) */
#define MLA_CHUNKS (MLA_DIM / 8)     /* 16-byte chunks of a row */
#define MLA_S_ROW (MLA_KEY_TILE + 4) /* f32 score row */
#define MLA_P_ROW (MLA_KEY_TILE + 8) /* 16-bit probability row */

/* Shared memory, in bytes: Q | two key stages | S | P | m, l, alpha. */
#define MLA_SMEM_Q 0
#define MLA_SMEM_K (MLA_SMEM_Q + MLA_TILE_M * MLA_ROW * 2)
#define MLA_SMEM_S (MLA_SMEM_K + 2 * MLA_KEY_TILE * MLA_ROW * 2)
#define MLA_SMEM_P (MLA_SMEM_S + MLA_TILE_M * MLA_S_ROW * 4)
#define MLA_SMEM_STATS (MLA_SMEM_P + MLA_TILE_M * MLA_P_ROW * 2)
#define MLA_SMEM_BYTES (MLA_SMEM_STATS + 3 * MLA_TILE_M * 4)
/* An fp8 cache lands in two raw stages (576 bytes a key) after that, and is converted into the
 * 16-bit key stages. */
#define MLA_SMEM_RAW MLA_SMEM_BYTES
#define MLA_RAW_STAGE (MLA_KEY_TILE * MLA_DIM)
#define MLA_RAW_CHUNKS (MLA_DIM / 16) /* 16-byte chunks of an fp8 row */
#define MLA_SMEM_BYTES_FP8 (MLA_SMEM_RAW + 2 * MLA_RAW_STAGE)

static_assert(MLA_TILE_M == 64 && MLA_KEY_TILE == 32, "the warp layout assumes 64 x 32 tiles");

/* Issue the copies of key tile [k0, k0 + 32) of the item into stage `stage` (keys at or past
 * `stop` zero-filled): 16-bit rows into a key stage, fp8 rows (FP8) into a raw stage. */
template <typename K, int CHUNKS>
__device__ __forceinline__ void mla_load_keys(const ignis_mla_params &p, const ignis_mla_work &w, int k0,
                                              int stop, uint32_t stage, int row_bytes) {
  constexpr int PER_CHUNK = 16 / (int)sizeof(K), CKV_CHUNKS = MLA_CKV / PER_CHUNK;
  const K *ckv = (const K *)p.ckv, *kpe = (const K *)p.kpe;
  for (int i = threadIdx.x; i < MLA_KEY_TILE * CHUNKS; i += MLA_THREADS) {
    const int key = i / CHUNKS, chunk = i % CHUNKS, j = k0 + key;
    const bool live = j < stop;
    const K *src = ckv;
    if (live) {
      const int64_t page = p.kv_indices[w.page_base + j / (int)p.page_size], slot = j % (int)p.page_size;
      src =
          chunk < CKV_CHUNKS
              ? ckv + page * p.ckv_stride_page + slot * p.ckv_stride_token + chunk * PER_CHUNK
              : kpe + page * p.kpe_stride_page + slot * p.kpe_stride_token + (chunk - CKV_CHUNKS) * PER_CHUNK;
    }
    copy_async16(stage + (uint32_t)(key * row_bytes + chunk * 16), src, live);
  }
}

template <typename T, bool FP8>
__device__ __forceinline__ void mla_issue_keys(const ignis_mla_params &p, const ignis_mla_work &w, int k0,
                                               int stop, uint32_t base, int stage) {
  if (FP8)
    mla_load_keys<uint8_t, MLA_RAW_CHUNKS>(p, w, k0, stop,
                                           base + MLA_SMEM_RAW + (uint32_t)(stage * MLA_RAW_STAGE), MLA_DIM);
  else
    mla_load_keys<T, MLA_CHUNKS>(
        p, w, k0, stop, base + MLA_SMEM_K + (uint32_t)(stage * MLA_KEY_TILE * MLA_ROW * 2), MLA_ROW * 2);
}

/* An f16 pair as a pair of T (exact: e4m3 values fit bf16 too). */
template <typename T> __device__ __forceinline__ uint32_t mla_pair_from_f16x2(uint32_t h2);
template <> __device__ __forceinline__ uint32_t mla_pair_from_f16x2<__half>(uint32_t h2) {
  return h2;
}
template <> __device__ __forceinline__ uint32_t mla_pair_from_f16x2<__nv_bfloat16>(uint32_t h2) {
  __half2_raw raw;
  raw.x = (unsigned short)(h2 & 0xffffu);
  raw.y = (unsigned short)(h2 >> 16);
  const float2 f = __half22float2(__half2(raw));
  const __nv_bfloat162 b = __float22bfloat162_rn(f);
  const __nv_bfloat162_raw braw = b;
  return (uint32_t)braw.x | ((uint32_t)braw.y << 16);
}

/* Convert a raw stage (MLA_KEY_TILE fp8 e4m3 rows of MLA_DIM bytes) into a key stage (T rows of
 * MLA_ROW values). */
template <typename T> __device__ __forceinline__ void mla_convert_keys(const unsigned char *raw, T *keys) {
  for (int i = threadIdx.x; i < MLA_KEY_TILE * MLA_RAW_CHUNKS; i += MLA_THREADS) {
    const int key = i / MLA_RAW_CHUNKS, chunk = i % MLA_RAW_CHUNKS;
    const uint4 bytes = *(const uint4 *)(raw + key * MLA_DIM + chunk * 16);
    const uint32_t words[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
    uint32_t pairs[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t lo, hi;
      fp8x4_to_f16x2x2<KV_E4M3>(words[k], lo, hi);
      pairs[2 * k] = mla_pair_from_f16x2<T>(lo);
      pairs[2 * k + 1] = mla_pair_from_f16x2<T>(hi);
    }
    uint4 *dst = (uint4 *)(keys + key * MLA_ROW + chunk * 16);
    dst[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    dst[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
  }
}

template <typename T> struct mla_is_bf16 { static constexpr bool value = false; };
template <> struct mla_is_bf16<__nv_bfloat16> { static constexpr bool value = true; };

/* Issue the copies of a work item's ROWS query rows (q_nope | q_pe, 576 values) into rows of MLA_ROW
 * values at `dst`; rows past the request are zero-filled. */
template <typename T, int ROWS>
__device__ __forceinline__ void mla_issue_queries(const ignis_mla_params &p, const ignis_mla_work &w, uint32_t dst) {
  const int H = (int)p.num_heads, rows_total = w.q_len * H;
  const T *q_nope = (const T *)p.q_nope, *q_pe = (const T *)p.q_pe;
  for (int i = threadIdx.x; i < ROWS * MLA_CHUNKS; i += MLA_THREADS) {
    const int r = i / MLA_CHUNKS, chunk = i % MLA_CHUNKS, row = w.row_start + r;
    const bool live = row < rows_total;
    const T *src = q_nope;
    if (live) {
      const int64_t t = w.q_row + row / H, h = row % H;
      src = chunk < MLA_CKV / 8
                ? q_nope + t * p.q_nope_stride_token + h * p.q_nope_stride_head + chunk * 8
                : q_pe + t * p.q_pe_stride_token + h * p.q_pe_stride_head + (chunk - MLA_CKV / 8) * 8;
    }
    copy_async16(dst + (uint32_t)(r * MLA_ROW + chunk * 8) * 2, src, live);
  }
}

template <typename T, bool FP8>
__global__ void __launch_bounds__(MLA_THREADS, 1) mla_attention_kernel(const ignis_mla_params p) {
  constexpr bool BF16 = mla_is_bf16<T>::value;
  if ((int)blockIdx.x >= p.header->num_work)
    return; /* a captured grid of the plan's maximum */
  const ignis_mla_work w = p.work[blockIdx.x];
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(smem);
  float *s_score = (float *)(smem + MLA_SMEM_S);
  T *s_prob = (T *)(smem + MLA_SMEM_P);
  float *s_m = (float *)(smem + MLA_SMEM_STATS), *s_l = s_m + MLA_TILE_M, *s_alpha = s_l + MLA_TILE_M;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int H = (int)p.num_heads, rows_total = w.q_len * H;

  mla_issue_queries<T, MLA_TILE_M>(p, w, base + MLA_SMEM_Q); /* rows past the request zero */
  /* keys the tile sees: up to the last row's causal limit, within the chunk */
  const int last_row = min(w.row_start + MLA_TILE_M, rows_total) - 1;
  const int tile_last_key = p.causal ? w.kv_len - w.q_len + last_row / H : w.kv_len - 1;
  const int stop = min(w.kv_end, tile_last_key + 1);
  const int num_tiles = stop > w.kv_start ? (stop - w.kv_start + MLA_KEY_TILE - 1) / MLA_KEY_TILE : 0;
  if (num_tiles > 0)
    mla_issue_keys<T, FP8>(p, w, w.kv_start, stop, base, 0);
  copy_async_commit();
  if (tid < MLA_TILE_M) {
    s_m[tid] = -CUDART_INF_F;
    s_l[tid] = 0.0f;
  }

  float acc[4][8][4];
#pragma unroll
  for (int mg = 0; mg < 4; ++mg)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[mg][nt][e] = 0.0f;

  const int score_rows = 16 * (warp % 4), score_keys = 16 * (warp / 4);
  for (int tile = 0; tile < num_tiles; ++tile) {
    copy_async_wait<0>();
    __syncthreads();
    const int k0 = w.kv_start + tile * MLA_KEY_TILE;
    const uint32_t stage = base + MLA_SMEM_K + (uint32_t)(tile & 1) * MLA_KEY_TILE * MLA_ROW * 2;
    if (tile + 1 < num_tiles) {
      mla_issue_keys<T, FP8>(p, w, k0 + MLA_KEY_TILE, stop, base, (tile + 1) & 1);
      copy_async_commit();
    }
    if (FP8)
      mla_convert_keys<T>(smem + MLA_SMEM_RAW + (tile & 1) * MLA_RAW_STAGE,
                          (T *)(smem + MLA_SMEM_K) + (tile & 1) * MLA_KEY_TILE * MLA_ROW);
    if (FP8)
      __syncthreads();
    /* 1. scores */
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    float s_pe[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const uint32_t a_addr =
        base + MLA_SMEM_Q + (uint32_t)((score_rows + lane % 16) * MLA_ROW + (lane / 16) * 8) * 2;
    const uint32_t b_addr =
        stage + (uint32_t)((score_keys + lane % 8 + (lane / 16) * 8) * MLA_ROW + ((lane / 8) % 2) * 8) * 2;
#pragma unroll 4
    for (int kk = 0; kk < MLA_CKV / 16; ++kk) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a_addr + kk * 32, a);
      ldmatrix_x4(b_addr + kk * 32, b);
      mma16816<BF16>(s[0], a, b[0], b[1]);
      mma16816<BF16>(s[1], a, b[2], b[3]);
    }
#pragma unroll
    for (int kk = MLA_CKV / 16; kk < MLA_DIM / 16; ++kk) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a_addr + kk * 32, a);
      ldmatrix_x4(b_addr + kk * 32, b);
      mma16816<BF16>(s_pe[0], a, b[0], b[1]);
      mma16816<BF16>(s_pe[1], a, b[2], b[3]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[nt][e] = s[nt][e] * p.ckv_scale + s_pe[nt][e] * p.kpe_scale;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = score_rows + lane / 4 + half * 8, row = w.row_start + r;
      const int last = row >= rows_total ? -1 : p.causal ? w.kv_len - w.q_len + row / H : w.kv_len - 1;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = score_keys + nt * 8 + (lane % 4) * 2 + e, j = k0 + col;
          s_score[r * MLA_S_ROW + col] =
              j <= last && j < stop ? s[nt][half * 2 + e] * p.sm_scale_log2 : -CUDART_INF_F;
        }
    }
    __syncthreads();
    /* 2. online softmax: row tid / 4, keys 8 (tid % 4).. */
    {
      const int r = tid / 4, part = tid % 4;
      float v[8], top = -CUDART_INF_F;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = s_score[r * MLA_S_ROW + part * 8 + e];
        top = fmaxf(top, v[e]);
      }
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
      const float m_old = s_m[r], m_new = fmaxf(m_old, top);
      float sum = 0.0f;
      alignas(16) T prob[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float pe = m_new == -CUDART_INF_F ? 0.0f : exp2f(v[e] - m_new);
        sum += pe;
        prob[e] = ignis_from_float<T>(pe);
      }
      *(uint4 *)(s_prob + r * MLA_P_ROW + part * 8) = *(const uint4 *)prob;
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (part == 0) {
        const float alpha = m_new == -CUDART_INF_F ? 1.0f : exp2f(m_old - m_new);
        s_l[r] = s_l[r] * alpha + sum;
        s_m[r] = m_new;
        s_alpha[r] = alpha;
      }
    }
    __syncthreads();
    /* 3. O = alpha O + P . ckv over this warp's 64 columns */
#pragma unroll
    for (int mg = 0; mg < 4; ++mg) {
      const float a0 = s_alpha[16 * mg + lane / 4], a1 = s_alpha[16 * mg + lane / 4 + 8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        acc[mg][nt][0] *= a0;
        acc[mg][nt][1] *= a0;
        acc[mg][nt][2] *= a1;
        acc[mg][nt][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < MLA_KEY_TILE / 16; ++ks) {
      uint32_t a[4][4];
#pragma unroll
      for (int mg = 0; mg < 4; ++mg)
        ldmatrix_x4(base + MLA_SMEM_P +
                        (uint32_t)((16 * mg + lane % 16) * MLA_P_ROW + ks * 16 + (lane / 16) * 8) * 2,
                    a[mg]);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(stage + (uint32_t)((ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * MLA_ROW +
                                             64 * warp + np * 16 + (lane / 16) * 8) *
                                      2,
                          b);
#pragma unroll
        for (int mg = 0; mg < 4; ++mg) {
          mma16816<BF16>(acc[mg][2 * np], a[mg], b[0], b[1]);
          mma16816<BF16>(acc[mg][2 * np + 1], a[mg], b[2], b[3]);
        }
      }
    }
  }
  copy_async_wait<0>(); /* an item without keys still issued its query copies */
  __syncthreads();

  /* epilogue: out / lse, or the chunk's partial row */
#pragma unroll
  for (int mg = 0; mg < 4; ++mg)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 16 * mg + lane / 4 + half * 8, row = w.row_start + r;
      if (row >= rows_total)
        continue;
      const float l = s_l[r], inv = l > 0.0f ? p.ckv_scale / l : 0.0f; /* values are ckv_scale * ckv */
      const int64_t token = row / H, h = row % H;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const int col = 64 * warp + nt * 8 + (lane % 4) * 2;
        const float x0 = acc[mg][nt][half * 2] * inv, x1 = acc[mg][nt][half * 2 + 1] * inv;
        if (w.partial < 0) {
          alignas(4) T pair[2] = {ignis_from_float<T>(x0), ignis_from_float<T>(x1)};
          *(uint32_t *)((T *)p.out + (w.q_row + token) * p.out_stride_token + h * p.out_stride_head + col) =
              *(const uint32_t *)pair;
        } else {
          *(float2 *)(p.partial_out + ((w.partial + token) * H + h) * MLA_CKV + col) = make_float2(x0, x1);
        }
      }
    }
  if (tid < MLA_TILE_M && w.row_start + tid < rows_total) {
    const int row = w.row_start + tid;
    const int64_t token = row / H, h = row % H;
    const float l = s_l[tid], lse2 = l > 0.0f ? s_m[tid] + log2f(l) : -CUDART_INF_F;
    if (w.partial >= 0)
      p.partial_lse[(w.partial + token) * H + h] = lse2;
    else if (p.lse)
      p.lse[(w.q_row + token) * p.lse_stride_token + h * p.lse_stride_head] = lse2 * p.lse_scale;
  }
}

/* One block per (merge item, head): GROUPS groups of 128 threads, each thread 4 of the 512 columns.
 * Group g folds chunks g * BATCH .., every GROUPS-th batch of BATCH, loading a batch's LSEs and
 * values before folding any: a split token at 128 heads has up to 64 chunks, and one chunk at a time
 * was two dependent L2 round trips each. With more than one group the groups' normalised states
 * then meet in shared memory and group 0 folds them and writes. Values of empty chunks (LSE -inf)
 * are loaded (their rows lie in the workspace) but never used. mla.cu launches <4, 4> by default
 * and <1, 8> under IGNIS_MLA_MERGE_GROUPS=1. */
template <typename T, int GROUPS, int BATCH>
__global__ void __launch_bounds__(128 * GROUPS) mla_merge_kernel(const ignis_mla_params p) {
  if ((int)blockIdx.x >= p.header->num_merge)
    return;
  const ignis_mla_merge mg = p.merge[blockIdx.x];
  const int64_t H = p.num_heads, h = blockIdx.y;
  const int group = GROUPS > 1 ? (int)threadIdx.x / 128 : 0;
  const int col = (GROUPS > 1 ? (int)threadIdx.x % 128 : (int)threadIdx.x) * 4;
  float m = -CUDART_INF_F, d = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c0 = group * BATCH; c0 < mg.count; c0 += GROUPS * BATCH) {
    float t[BATCH];
    float4 v[BATCH];
#pragma unroll
    for (int u = 0; u < BATCH; ++u) {
      t[u] = -CUDART_INF_F;
      if (c0 + u < mg.count) {
        const int64_t prow = ((int64_t)mg.partial + (int64_t)(c0 + u) * mg.stride) * H + h;
        t[u] = p.partial_lse[prow];
        v[u] = *(const float4 *)(p.partial_out + prow * MLA_CKV + col);
      }
    }
#pragma unroll
    for (int u = 0; u < BATCH; ++u)
      if (t[u] != -CUDART_INF_F) {
        const float x[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        lse_merge_fold<4>(t[u], x, m, d, acc);
      }
  }
  if constexpr (GROUPS > 1) {
    __shared__ float4 group_values[GROUPS - 1][128];
    __shared__ float group_lse[GROUPS - 1];
    if (group > 0) {
      const float lse2 = lse_merge_finish<4>(acc, m, d, -CUDART_INF_F);
      group_values[group - 1][col / 4] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      if (col == 0)
        group_lse[group - 1] = lse2;
    }
    __syncthreads();
    if (group > 0)
      return;
#pragma unroll
    for (int g = 0; g < GROUPS - 1; ++g)
      if (group_lse[g] != -CUDART_INF_F) {
        const float4 v = group_values[g][col / 4];
        const float x[4] = {v.x, v.y, v.z, v.w};
        lse_merge_fold<4>(group_lse[g], x, m, d, acc);
      }
  }
  const float lse2 = lse_merge_finish<4>(acc, m, d, -CUDART_INF_F);
  alignas(8) T out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    out[k] = ignis_from_float<T>(acc[k]);
  *(uint2 *)((T *)p.out + (int64_t)mg.q_row * p.out_stride_token + h * p.out_stride_head + col) =
      *(const uint2 *)out;
  if (col == 0 && p.lse)
    p.lse[(int64_t)mg.q_row * p.lse_stride_token + h * p.lse_stride_head] = lse2 * p.lse_scale;
}

/* append_paged_mla_kv_cache: one block per appended token, one thread per 16-byte chunk of its 576
 * values (K: the 16-bit dtype, or uint8_t for fp8 rows); tokens whose batch index or page is out of
 * range are skipped (device index arrays are not checked on the host). */
template <typename K>
__global__ void __launch_bounds__(MLA_CHUNKS) mla_append_kernel(const ignis_append_mla_params p) {
  constexpr int PER_CHUNK = 16 / (int)sizeof(K), CKV_CHUNKS = MLA_CKV / PER_CHUNK;
  const int64_t t = blockIdx.x;
  const int32_t b = p.batch_indices[t], pos = p.positions[t];
  if (b < 0 || b >= p.batch_size || pos < 0)
    return;
  const int64_t page = p.kv_indices[p.kv_indptr[b] + pos / p.page_size], slot = pos % p.page_size;
  if (page < 0 || page >= p.num_pages)
    return;
  const int chunk = threadIdx.x;
  const bool ckv = chunk < CKV_CHUNKS;
  const int64_t offset = (ckv ? chunk : chunk - CKV_CHUNKS) * PER_CHUNK;
  const K *src = ckv ? (const K *)p.append_ckv + t * p.append_ckv_stride + offset
                     : (const K *)p.append_kpe + t * p.append_kpe_stride + offset;
  K *dst = ckv ? (K *)p.ckv + page * p.ckv_stride_page + slot * p.ckv_stride_token + offset
               : (K *)p.kpe + page * p.kpe_stride_page + slot * p.kpe_stride_token + offset;
  *(uint4 *)dst = *(const uint4 *)src;
}

#endif
