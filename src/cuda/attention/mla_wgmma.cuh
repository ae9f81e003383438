/* The Hopper (sm_90a) MLA attention kernel for 64-row tiles of a 16-bit cache (64 heads and more:
 * DeepSeek-V3's 128). It takes the plan's work items, partial rows and merge kernel as
 * mla_attention_kernel does (mla_attention.cuh) and writes the same results; mla.cu runs it where
 * the device is compute capability 9.0 and the build has sm_90a (IGNIS_MLA_WGMMA).
 *
 * Block: 256 threads, two warpgroups, one block per SM. Shared memory, from a 1024-byte aligned
 * base, every operand in the canonical 128-byte-swizzle layout (hopper.cuh: 64-element panels of
 * 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r & 7)):
 *   Q       the tile's 64 query rows x 576 (q_nope | q_pe): 9 panels of 8 KB
 *   stages  two key tiles of 64 keys x 576 (ckv | kpe), 9 panels each, gathered through the page
 *           table with 16-byte cp.async (the page lookups a tile ahead of their copies), the next
 *           tile's copy in flight while the current one computes
 *   P       64 rows x 64 keys of 16-bit probabilities, one panel (a row of 64 keys is one
 *           swizzled 128-byte row)
 *   stats   row maxima or rescale factors passed between the warpgroups, then row sums
 * Output: O = sum P V over the ckv part of the keys, warpgroup g holding dimensions 256 g .. +255
 * (m64n256k16 wgmma, 128 f32 accumulators a thread), the key tile's ckv part read as the MN-major
 * B operand (transpose flag; LBO = the 8 KB panel step along dimensions, SBO 1024 B between 8-key
 * groups, a k16 step adds 2 KB). Two forms of the scores and softmax (ONE_SCORER):
 *   one scorer (true; the cache scales equal): warpgroup 0 computes S = Q K^T for all 64 keys (36
 *     m64n64k16, both operands in shared memory: 4 KB a 32-cycle instruction, what shared memory
 *     delivers), masks, runs the online softmax of whole rows in registers, writes P and the rows'
 *     rescale factors to shared memory and keeps P as A fragments for its own P V (register-A
 *     wgmma); warpgroup 1 meanwhile issues the next tile's copies (8 threads a key), then takes P
 *     from shared memory. Two block barriers a tile: the tile landed, P written.
 *   split scores (false; any scales): warpgroup g scores keys 32 g .. +31 (m64n32k16) with the kpe
 *     dimensions in a separate accumulator joined with the cache's scales, the two warpgroups'
 *     row maxima meet through shared memory so both move the same running maximum, each writes
 *     its half of P; every thread copies (4 threads a key). Three block barriers a tile.
 * Cluster form of the one scorer (CLUSTER; mla.cu's launch_wgmma_cluster, opt-in): at 128 heads a
 *   tile is half a query token's heads, and the two halves read the same keys, so a 64-row tile per
 *   CTA streams every key tile from L2 twice (ncu at B128 L4096 128 heads: L2 83% busy, DRAM 49%).
 *   The two items of a pair run as a 2-CTA cluster: warpgroup 1's first thread in each CTA loads its
 *   share of a key tile's panels (rank 0 panels 0-4, rank 1 panels 5-8; boxes of MLA_WG_BOX_KEYS
 *   keys of one page) by TMA multicast into both CTAs, counted on each CTA's full barrier of the
 *   stage; a stage is refilled once both CTAs released it (their empty barriers, one arrival from
 *   each CTA's first thread after its block barrier). Keys at and past the stop in the last tile
 *   are the page's later slots (anything, even NaN) or stale rows: warpgroup 1 zeroes their ckv
 *   values before P V.
 * Masks: chunk end, causal position, rows past the request, per row. The epilogue adds the
 * warpgroups' row sums and writes out / lse, or the f32 partial row and its base-2 LSE for a
 * chunk of a split request. */
#ifndef IGNIS_CUDA_ATTENTION_MLA_WGMMA_CUH
#define IGNIS_CUDA_ATTENTION_MLA_WGMMA_CUH

#include "cuda/attention/mla_attention.cuh"
#include "cuda/common/hopper.cuh"

enum {
  MLA_WG_THREADS = 256,
  MLA_WG_KEYS = 64,                               /* keys per tile */
  MLA_WG_PANEL = 64 * 128,                        /* 64 rows of 64 16-bit values */
  MLA_WG_TILE = (MLA_DIM / 64) * MLA_WG_PANEL,    /* 64 rows x 576 */
  MLA_WG_Q = 0,
  MLA_WG_STAGE = MLA_WG_Q + MLA_WG_TILE,          /* two stages */
  MLA_WG_P = MLA_WG_STAGE + 2 * MLA_WG_TILE,
  MLA_WG_STATS = MLA_WG_P + MLA_WG_PANEL,         /* float [2][64] */
  MLA_WG_BARS = MLA_WG_STATS + 2 * 64 * 4,        /* the cluster form's mbarriers: full[2], empty[2] */
  MLA_WG_SMEM_BYTES = MLA_WG_BARS + 4 * 8 + 1024, /* + alignment slack */
  MLA_WG_BOX_KEYS = 32,                           /* keys of one TMA box (the cluster form) */
};

/* The cluster form's TMA maps: ckv as [pages][page_size][512], kpe as [pages][page_size][64], boxes
 * of 64 values x MLA_WG_BOX_KEYS keys of one page in the 128-byte swizzle (mla.cu encodes them). */
struct mla_key_maps {
  CUtensorMap ckv, kpe;
};

/* Issue the copies of one row of 576 16-bit values into a 9-panel tile at dst (panels of PANEL
 * bytes), shared by PARTS threads: part p copies chunks p, p + PARTS, .. from `nope` (chunks 0-63)
 * and `pe` (64-71); a null `nope` zero-fills the row (the source then only names a valid address). */
template <typename T, int PARTS, int PANEL = MLA_WG_PANEL>
__device__ __forceinline__ void mla_wg_copy_row(uint32_t dst, int row, int part, const T *nope, const T *pe,
                                                const void *valid) {
  const bool live = nope != nullptr;
#pragma unroll
  for (int i = 0; i < MLA_CHUNKS / PARTS; ++i) {
    const int c = part + PARTS * i; /* i < 64 / PARTS: a ckv chunk */
    const void *src = !live                      ? valid
                      : i < MLA_CKV / 8 / PARTS ? (const void *)(nope + c * 8)
                                                 : (const void *)(pe + (c - MLA_CKV / 8) * 8);
    copy_async16(dst + (uint32_t)((c >> 3) * PANEL + row * 128 + (((c & 7) ^ (row & 7)) << 4)), src,
                 live);
  }
}

/* The cache rows of one key: nope null for a key at or past the item's stop (zero-filled). */
template <typename T> struct mla_wg_key_rows {
  const T *nope, *pe;
};

/* Thread t's key of tile [k0, k0 + 64) (PARTS threads a key): its page looked up a tile ahead of
 * the copies (mla_wg_issue_keys), so the lookup's latency hides behind a tile's work. */
template <typename T, int PARTS>
__device__ __forceinline__ mla_wg_key_rows<T> mla_wg_look_up(const ignis_mla_params &p, const ignis_mla_work &w,
                                                             int k0, int stop, int t) {
  const int j = k0 + t / PARTS;
  mla_wg_key_rows<T> rows = {nullptr, nullptr};
  if (j < stop) {
    const int64_t page = p.kv_indices[w.page_base + j / (int)p.page_size], slot = j % (int)p.page_size;
    rows.nope = (const T *)p.ckv + page * p.ckv_stride_page + slot * p.ckv_stride_token;
    rows.pe = (const T *)p.kpe + page * p.kpe_stride_page + slot * p.kpe_stride_token;
  }
  return rows;
}

/* Thread t's copies of a key tile looked up by mla_wg_look_up into the stage at dst. */
template <typename T, int PARTS>
__device__ __forceinline__ void mla_wg_issue_keys(const ignis_mla_params &p, mla_wg_key_rows<T> rows, uint32_t dst,
                                                  int t) {
  mla_wg_copy_row<T, PARTS>(dst, t / PARTS, t % PARTS, rows.nope, rows.pe, p.ckv);
}

/* A copying thread's share of a 64-key tile, COPIERS threads with PARTS a key: PASSES keys (thread
 * t's pass i: thread t + COPIERS i of the tile), their pages looked up a tile ahead of the copies.
 * The copiers of both wgmma kernels' 16-bit caches. */
template <typename T, int PARTS, int COPIERS> struct mla_wg_tile_copier {
  static constexpr int PASSES = MLA_WG_KEYS * PARTS / COPIERS;
  mla_wg_key_rows<T> rows[PASSES];
  /* the keys of the tile from k0 */
  __device__ __forceinline__ void look_up(const ignis_mla_params &p, const ignis_mla_work &w, int k0, int stop,
                                          int t) {
#pragma unroll
    for (int pass = 0; pass < PASSES; ++pass)
      rows[pass] = mla_wg_look_up<T, PARTS>(p, w, k0, stop, t + COPIERS * pass);
  }
  /* their copies into the stage at dst */
  __device__ __forceinline__ void issue(const ignis_mla_params &p, uint32_t dst, int t) const {
#pragma unroll
    for (int pass = 0; pass < PASSES; ++pass)
      mla_wg_issue_keys<T, PARTS>(p, rows[pass], dst, t + COPIERS * pass);
  }
};

/* s[4 n + 2 h + e] = 2^(s - m_use) over the row h (0, 1) of a thread's m64nN accumulators; returns
 * their sum. */
template <int N> __device__ __forceinline__ float mla_wg_exp_row(float (&s)[N], int h, float m_use) {
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < N / 4; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[4 * n + 2 * h + e] = exp2_approx(s[4 * n + 2 * h + e] - m_use);
      sum += s[4 * n + 2 * h + e];
    }
  return sum;
}

/* The dynamic shared memory from its first 1024-byte boundary (the swizzled operands' alignment;
 * the kernels ask for 1 KB of slack): its shared-window address, and the generic pointer in
 * *aligned. */
__device__ __forceinline__ uint32_t mla_wg_aligned(unsigned char *dynamic, unsigned char **aligned) {
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(dynamic);
  const uint32_t base = (raw + 1023u) & ~1023u;
  *aligned = dynamic + (base - raw);
  return base;
}

/* A barrier of both warpgroups where they run apart code (named barrier 1). */
__device__ __forceinline__ void mla_wg_sync() {
  asm volatile("bar.sync 1, 256;" ::: "memory");
}

template <typename T, bool ONE_SCORER, bool CLUSTER = false>
__global__ void __launch_bounds__(MLA_WG_THREADS, 1)
    mla_wgmma_kernel(const ignis_mla_params p, const __grid_constant__ mla_key_maps maps) {
  static_assert(ONE_SCORER || !CLUSTER, "the cluster form is the one scorer's");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr ignis_wgmma_type WT = mla_is_bf16<T>::value ? IGNIS_WGMMA_BF16 : IGNIS_WGMMA_F16;
  if ((int)blockIdx.x >= p.header->num_work)
    return; /* a captured grid of the plan's maximum */
  const ignis_mla_work w = p.work[blockIdx.x];
  extern __shared__ __align__(1024) unsigned char mla_wg_smem[];
  unsigned char *smem;
  const uint32_t base = mla_wg_aligned(mla_wg_smem, &smem);
  float *const s_stats = (float *)(smem + MLA_WG_STATS);
  unsigned char *const s_p = smem + MLA_WG_P;
  const int tid = threadIdx.x, g = tid >> 7, lane = tid & 31, quad = lane & 3;
  const int H = (int)p.num_heads, rows_total = w.q_len * H;

  /* the queries: row tid / 4 */
  {
    const int r = tid >> 2, row = w.row_start + r;
    const T *nope = nullptr, *pe = nullptr;
    if (row < rows_total) {
      const int64_t t = w.q_row + row / H, h = row % H;
      nope = (const T *)p.q_nope + t * p.q_nope_stride_token + h * p.q_nope_stride_head;
      pe = (const T *)p.q_pe + t * p.q_pe_stride_token + h * p.q_pe_stride_head;
    }
    mla_wg_copy_row<T, 4>(base + MLA_WG_Q, r, tid & 3, nope, pe, p.q_nope);
  }
  /* keys the tile sees: up to the last row's causal limit, within the chunk */
  const int last_row = min(w.row_start + 64, rows_total) - 1;
  const int tile_last_key = p.causal ? w.kv_len - w.q_len + last_row / H : w.kv_len - 1;
  const int stop = min(w.kv_end, tile_last_key + 1);
  const int num_tiles = stop > w.kv_start ? (stop - w.kv_start + MLA_WG_KEYS - 1) / MLA_WG_KEYS : 0;
  /* the cluster form: the pair's barriers ready before any multicast or remote arrival; warpgroup
   * 1's first thread (the producer) issues tile 0 */
  const uint32_t full_bar = base + MLA_WG_BARS, empty_bar = full_bar + 16; /* + 8 * stage */
  uint32_t rank = 0;
  auto issue_cluster_tile = [&](int t) { /* the producer: this CTA's panels of tile t, to both */
    const uint32_t dst = base + MLA_WG_STAGE + (uint32_t)(t & 1) * MLA_WG_TILE;
    const int k0 = w.kv_start + t * MLA_WG_KEYS;
    const int boxes = stop - k0 > MLA_WG_BOX_KEYS ? 2 : 1; /* the second box only with live keys */
    ignis_mbar_arrive_expect_tx(full_bar + 8 * (t & 1), (uint32_t)(boxes * (MLA_DIM / 64) * MLA_WG_BOX_KEYS * 128));
    for (int b = 0; b < boxes; ++b) {
      const int j = k0 + b * MLA_WG_BOX_KEYS;
      const int32_t page = p.kv_indices[w.page_base + j / (int)p.page_size], slot = j % (int)p.page_size;
      for (int panel = rank == 0 ? 0 : 5; panel < (rank == 0 ? 5 : MLA_DIM / 64); ++panel)
        ignis_tma_load_3d_multicast(dst + (uint32_t)(panel * MLA_WG_PANEL + b * MLA_WG_BOX_KEYS * 128),
                                    panel < 8 ? &maps.ckv : &maps.kpe, full_bar + 8 * (t & 1),
                                    panel < 8 ? 64 * panel : 0, slot, page, (uint16_t)3);
    }
  };
  if constexpr (CLUSTER) {
    rank = ignis_cluster_rank();
    if (tid == 0) {
      for (int s = 0; s < 2; ++s) {
        ignis_mbar_init(full_bar + 8 * s, 1);  /* this CTA's producer, then the bytes of both */
        ignis_mbar_init(empty_bar + 8 * s, 2); /* one release from each CTA of the pair */
      }
      ignis_mbar_init_fence();
    }
    ignis_cluster_sync();
    if (tid == 128 && num_tiles > 0)
      issue_cluster_tile(0);
  }
  /* otherwise the copying threads (every thread, 4 a key; or warpgroup 1 for the one scorer, 8 a key, so a
   * copy instruction moves runs of 128 bytes, over 4 passes of 16 keys): tile 0 now, the pages of
   * tile 1 looked up */
  const int copier = ONE_SCORER ? tid - 128 : tid;
  mla_wg_tile_copier<T, ONE_SCORER ? 8 : 4, ONE_SCORER ? 128 : 256> ahead;
  if (!CLUSTER && copier >= 0 && num_tiles > 0) {
    ahead.look_up(p, w, w.kv_start, stop, copier);
    ahead.issue(p, base + MLA_WG_STAGE, copier);
    if (num_tiles > 1)
      ahead.look_up(p, w, w.kv_start + MLA_WG_KEYS, stop, copier);
  }
  copy_async_commit();

  /* this thread's two rows (h = 0, 1) of the tile, and the last key each sees */
  const int r0 = 16 * ((tid >> 5) & 3) + (lane >> 2);
  int last[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = w.row_start + r0 + 8 * h;
    last[h] = row >= rows_total ? -1 : min(stop - 1, p.causal ? w.kv_len - w.q_len + row / H : w.kv_len - 1);
  }
  float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i)
    o[i] = 0.0f;
  const float score_scale = p.ckv_scale * p.sm_scale_log2;

  if constexpr (CLUSTER) {
    copy_async_wait<0>(); /* the queries */
    ignis_fence_proxy_async();
  }
  for (int tile = 0; tile < num_tiles; ++tile) {
    if constexpr (CLUSTER) {
      __syncthreads(); /* both warpgroups past tile - 1 (and the queries landed) */
      if (tid == 0 && tile > 0) { /* its stage released in both CTAs' eyes */
        ignis_mbar_arrive_cluster(empty_bar + 8 * ((tile - 1) & 1), 0);
        ignis_mbar_arrive_cluster(empty_bar + 8 * ((tile - 1) & 1), 1);
      }
      ignis_mbar_wait(full_bar + 8 * (tile & 1), (uint32_t)(tile >> 1) & 1u);
    } else {
      copy_async_wait<0>();
      ignis_fence_proxy_async(); /* the landed copies, before wgmma reads them */
      __syncthreads();
    }
    const int k0 = w.kv_start + tile * MLA_WG_KEYS;
    const uint32_t stage = base + MLA_WG_STAGE + (uint32_t)(tile & 1) * MLA_WG_TILE;
    const uint32_t next = base + MLA_WG_STAGE + (uint32_t)((tile + 1) & 1) * MLA_WG_TILE;
    float rescale[2];
    if constexpr (ONE_SCORER) {
      if (g == 1) {
        if constexpr (CLUSTER) {
          if (tid == 128 && tile + 1 < num_tiles) {
            if (tile > 0) /* tile - 1 released by both CTAs: its stage takes tile + 1 */
              ignis_mbar_wait<true>(empty_bar + 8 * ((tile + 1) & 1), (uint32_t)(((tile + 1) >> 1) - 1) & 1u);
            issue_cluster_tile(tile + 1);
          }
          if (k0 + MLA_WG_KEYS > stop) {
            /* the last tile: keys at and past stop came from the page's later slots or were not
             * loaded (stale); their scores are masked, and their values zeroed so that 0 x value
             * stays 0 in P V. Warpgroup 0's S wgmma may read these rows while they are zeroed:
             * harmless, as the mask replaces those scores by a select, whatever they are. */
            const int from = stop - k0, chunks = (MLA_WG_KEYS - from) * (MLA_CKV / 8);
            for (int i = tid - 128; i < chunks; i += 128) {
              const int row = from + i / (MLA_CKV / 8), c = i % (MLA_CKV / 8);
              *(uint4 *)(smem + (stage - base) + (c >> 3) * MLA_WG_PANEL + row * 128 + (c & 7) * 16) =
                  make_uint4(0u, 0u, 0u, 0u);
            }
            ignis_fence_proxy_async();
          }
        } else if (tile + 1 < num_tiles) {
          ahead.issue(p, next, copier);
          copy_async_commit();
          if (tile + 2 < num_tiles)
            ahead.look_up(p, w, k0 + 2 * MLA_WG_KEYS, stop, copier);
        }
      } else {
        /* 1. scores of the tile's 64 keys (kpe_scale == ckv_scale: mla.cu's choice) */
        float s[32];
        ignis_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < MLA_KPE / 16; ++kk)
          ignis_wgmma_m64n_small<WT, 64>(s, ignis_wgmma_desc(base + MLA_WG_Q + 8 * MLA_WG_PANEL + kk * 32),
                                         ignis_wgmma_desc(stage + 8 * MLA_WG_PANEL + kk * 32), kk > 0);
#pragma unroll
        for (int kk = 0; kk < MLA_CKV / 16; ++kk)
          ignis_wgmma_m64n_small<WT, 64>(
              s, ignis_wgmma_desc(base + MLA_WG_Q + (kk >> 2) * MLA_WG_PANEL + (kk & 3) * 32),
              ignis_wgmma_desc(stage + (kk >> 2) * MLA_WG_PANEL + (kk & 3) * 32), 1);
        ignis_wgmma_commit();
        ignis_wgmma_wait<0>();
        ignis_wgmma_pin(s);
        /* 2. mask, online softmax of whole rows, P into shared memory for warpgroup 1 */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = -CUDART_INF_F;
#pragma unroll
          for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = 4 * n + 2 * h + e;
              s[i] = k0 + 8 * n + 2 * quad + e <= last[h] ? s[i] * score_scale : -CUDART_INF_F;
              mx = fmaxf(mx, s[i]);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_use = online_max<true>(m[h], mx, &rescale[h]);
          l[h] = fmaf(l[h], rescale[h], mla_wg_exp_row(s, h, m_use));
          if (quad == 0)
            s_stats[r0 + 8 * h] = rescale[h];
        }
        uint32_t pa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int v = 0; v < 4; ++v)
            pa[kk][v] = ignis_pack_word<T>(&s[8 * kk + 2 * v]);
        /* pa[kk][v]: row r0 + 8 (v & 1), keys 16 kk + 8 (v >> 1) + 2 quad .. +1 */
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const int r = r0 + 8 * (v & 1), chunk = 2 * kk + (v >> 1);
            *(uint32_t *)(s_p + r * 128 + ((chunk ^ (r & 7)) << 4) + 4 * quad) = pa[kk][v];
          }
        ignis_fence_proxy_async(); /* P, before warpgroup 1's wgmma reads it */
        mla_wg_sync();
        /* 3. O = alpha O + P V over dimensions 0-255, P from registers */
        wgmma_rescale_rows(o, rescale);
        ignis_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < MLA_WG_KEYS / 16; ++kk)
          ignis_wgmma_rs<WT, 256>(o, pa[kk], ignis_wgmma_desc(stage + kk * 16 * 128, MLA_WG_PANEL));
        ignis_wgmma_commit();
        ignis_wgmma_wait<0>(); /* before the next tile's copies overwrite this stage */
        ignis_wgmma_pin(o);
        continue;
      }
      mla_wg_sync(); /* warpgroup 0's P and rescale factors */
      rescale[0] = s_stats[r0];
      rescale[1] = s_stats[r0 + 8];
    } else {
      if (tile + 1 < num_tiles) {
        ahead.issue(p, next, copier);
        copy_async_commit();
        if (tile + 2 < num_tiles)
          ahead.look_up(p, w, k0 + 2 * MLA_WG_KEYS, stop, copier);
      }
      /* 1. scores of this warpgroup's 32 keys */
      float s[16], s_pe[16];
      ignis_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < MLA_CKV / 16; ++kk)
        ignis_wgmma_m64n_small<WT, 32>(
            s, ignis_wgmma_desc(base + MLA_WG_Q + (kk >> 2) * MLA_WG_PANEL + (kk & 3) * 32),
            ignis_wgmma_desc(stage + (kk >> 2) * MLA_WG_PANEL + 32 * 128 * g + (kk & 3) * 32), kk > 0);
#pragma unroll
      for (int kk = 0; kk < MLA_KPE / 16; ++kk)
        ignis_wgmma_m64n_small<WT, 32>(s_pe, ignis_wgmma_desc(base + MLA_WG_Q + 8 * MLA_WG_PANEL + kk * 32),
                                       ignis_wgmma_desc(stage + 8 * MLA_WG_PANEL + 32 * 128 * g + kk * 32),
                                       kk > 0);
      ignis_wgmma_commit();
      ignis_wgmma_wait<0>();
      ignis_wgmma_pin(s);
      ignis_wgmma_pin(s_pe);
      /* scale to base 2, mask, the row maxima of these 32 keys */
      float mx[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int h = (i >> 1) & 1, j = k0 + 32 * g + 8 * (i >> 2) + 2 * quad + (i & 1);
        const float x = (s[i] * p.ckv_scale + s_pe[i] * p.kpe_scale) * p.sm_scale_log2;
        s[i] = j <= last[h] ? x : -CUDART_INF_F;
        mx[h] = fmaxf(mx[h], s[i]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        if (quad == 0)
          s_stats[64 * g + r0 + 8 * h] = mx[h];
      }
      __syncthreads();
      /* 2. the running maxima (the same in both warpgroups), P of these keys */
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float top = fmaxf(mx[h], s_stats[64 * (1 - g) + r0 + 8 * h]);
        const float m_use = online_max<true>(m[h], top, &rescale[h]);
        l[h] = fmaf(l[h], rescale[h], mla_wg_exp_row(s, h, m_use));
      }
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + 8 * h;
          *(uint32_t *)(s_p + r * 128 + (((4 * g + n) ^ (r & 7)) << 4) + 4 * quad) =
              ignis_pack_word<T>(&s[4 * n + 2 * h]);
        }
      ignis_fence_proxy_async(); /* P, before wgmma reads it */
      __syncthreads();
    }
    /* 3. O = alpha O + P V over this warpgroup's 256 dimensions, P from shared memory */
    wgmma_rescale_rows(o, rescale);
    ignis_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < MLA_WG_KEYS / 16; ++kk)
      ignis_wgmma_m64n256<WT, true>(o, ignis_wgmma_desc(base + MLA_WG_P + kk * 32),
                                    ignis_wgmma_desc(stage + 4 * g * MLA_WG_PANEL + kk * 16 * 128, MLA_WG_PANEL),
                                    1);
    ignis_wgmma_commit();
    ignis_wgmma_wait<0>(); /* before the next tile's copies overwrite this stage */
    ignis_wgmma_pin(o);
  }
  copy_async_wait<0>(); /* an item without keys still issued its query copies */
  __syncthreads();
  if constexpr (CLUSTER)
    ignis_cluster_sync(); /* no remote arrival or multicast may reach a CTA that has exited */

  /* epilogue: the row sums of both warpgroups, then out / lse or the chunk's partial row */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (quad == 0)
      s_stats[64 * g + r0 + 8 * h] = l[h];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h, row = w.row_start + r;
    if (row >= rows_total)
      continue;
    const float lsum = s_stats[r] + s_stats[64 + r];
    const float inv = lsum > 0.0f ? p.ckv_scale / lsum : 0.0f; /* values are ckv_scale * ckv */
    const int64_t token = row / H, head = row % H;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      const int col = 256 * g + 8 * n + 2 * quad;
      const float x0 = o[4 * n + 2 * h] * inv, x1 = o[4 * n + 2 * h + 1] * inv;
      if (w.partial < 0) {
        alignas(4) T pair[2] = {ignis_from_float<T>(x0), ignis_from_float<T>(x1)};
        *(uint32_t *)((T *)p.out + (w.q_row + token) * p.out_stride_token + head * p.out_stride_head + col) =
            *(const uint32_t *)pair;
      } else {
        *(float2 *)(p.partial_out + ((w.partial + token) * H + head) * MLA_CKV + col) = make_float2(x0, x1);
      }
    }
    if (g == 0 && quad == 0) {
      const float lse2 = lsum > 0.0f ? m[h] + log2f(lsum) : -CUDART_INF_F;
      if (w.partial >= 0)
        p.partial_lse[(w.partial + token) * H + head] = lse2;
      else if (p.lse)
        p.lse[(w.q_row + token) * p.lse_stride_token + head * p.lse_stride_head] = lse2 * p.lse_scale;
    }
  }
#endif
}

#endif
