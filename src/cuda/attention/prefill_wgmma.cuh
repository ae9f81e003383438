/* The Hopper (sm_90a) prefill attention kernel for the hot case: 16-bit q and K/V of the same dtype,
 * head dim 128, causal or no mask, none of the general options (prefill.cu routes everything else
 * to prefill_attention_kernel). It takes the same work items, partial slots and merge kernel
 * (prefill_common.cuh) and writes the same results.
 *
 * Block: 384 threads in three warpgroups. Warpgroup 0 is the producer (setmaxnreg down to 40
 * registers): its 128 threads gather K and V rows with 16-byte cp.async (all tiles of paged keys, a
 * request's partial last tile, and every tile without the TMA form below); lane l of warp w
 * computes the K and V row addresses of key 32 w + l of a tile (through cache.indices when paged,
 * the page entry read one tile ahead), and the warp copies its 32 keys two rows per instruction
 * with the addresses passed by shuffles. Warpgroups 1 and 2 are consumers (232 registers), 64
 * packed query rows each (the plan's 128-row tile; row r: token r / group, head kvh * group + r %
 * group).
 *
 * Shared memory, from a 1024-byte aligned base, every operand in the canonical 128-byte-swizzle
 * layout (64-element panels of 128-byte rows, 16-byte chunk c of row r stored at chunk c ^ (r & 7),
 * panels and 8-row atoms 1024-byte aligned):
 *   Q       per consumer: 2 panels (head dims 0-63, 64-127) of its 64 rows, 8 KB each
 *   stages  WGMMA_STAGES x {K: 2 panels of 128 keys (16 KB each), V: the same}
 *   barriers per stage: K full and V full (the producer's 128 threads arrive when their copies
 *           land: cp.async.mbarrier.arrive.noinc), K empty and V empty (one arrival per consumer
 *           warp once its wgmma no longer reads that tile: K after S, V after P V, a step later)
 * Q and K are K-major operands (SBO 1024 B between 8-row atoms, a k16 step adds 32 B inside a
 * panel); V is the MN-major B operand of P V (transpose flag; LBO = the 16 KB panel stride along
 * head dims, SBO 1024 B between 8-key groups, a k16 step adds 2 KB).
 *
 * Consumer step for key tile j (128 keys): S = Q K_j^T by 8 wgmma m64n128k16 (both operands in
 * shared memory) is issued together with O += P_{j-1} V_{j-1} (P in registers: the f32 accumulator
 * layout of a warp is the m16n8 layout of mma.sync repeated 16 times, which packs directly into the
 * 16-bit A fragments), then wait_group 1 leaves S ready while P V runs: mask (causal diagonal and
 * the range's end, only on tiles that need it), online softmax in base 2 (scale folded into one
 * FFMA), wait_group 0, release V_{j-1}, rescale O and pack P_j. K_j is released as soon as S is
 * ready, so with three stages the producer copies up to two tiles ahead of the slower warpgroup.
 * Rows past the item's tile compute on zero queries and are never written. A warpgroup stops at its
 * own last visible tile (causal) and only releases the stages after it. The epilogue is
 * prefill_attention_kernel's: out / lse, or the f32 partial slot and its base-2 LSE when the item
 * is split.
 *
 * Ping-pong form (PINGPONG; IGNIS_PREFILL_WGMMA=2 or 4, opt-in: +1-3% without TMA, none with it on
 * the H100): the two consumers take turns issuing their step's GEMMs, as FlashAttention-3 does, so
 * one warpgroup's softmax runs while the other's GEMMs hold the tensor cores. Named barrier 3 + w
 * is warpgroup w's turn (256 threads: its own 128 wait, the other's 128 arrive): a warpgroup waits
 * for its turn once its tiles landed, issues, and hands the turn over before it waits for the
 * results. Both take the same number of turns, max(n0, n1) + 1 (n_w: warpgroup w's tiles; one turn
 * a tile for S with the previous tile's P V, one for the last P V), or none where a warpgroup has
 * no tiles; a warpgroup past its diagonal takes its remaining turns empty, turn t once it released
 * K_t and V_{t-1} (what the other's turn t waits for). Warpgroup 1 hands warpgroup 0 its first turn
 * and does not hand over after its last.
 *
 * TMA form (TMA; the default, IGNIS_PREFILL_WGMMA=4 with ping-pong, 1 and 2 without; contiguous and
 * ragged keys; 1.35-1.39x the cp.async form on the H100): the producer's first thread loads each
 * whole key tile of K and V by two bulk tensor copies (maps: [rows][kv heads][128] of k and v,
 * boxes of 64 dims x 128 keys of one head in the 128-byte swizzle, the layout above), counted on
 * the full barriers by bytes; the other 127 threads only arrive. A tile that ends past the item's
 * keys is gathered by cp.async as before, so keys past them are zeros, never another request's
 * values.
 *
 * prefill.cu runs it on sm_90a devices for the calls it takes (IGNIS_PREFILL_WGMMA=0 turns it off);
 * it fits one block per SM, which the planner's wave counts (ignis_cuda_prefill_choose). */
#ifndef IGNIS_CUDA_PREFILL_WGMMA_CUH
#define IGNIS_CUDA_PREFILL_WGMMA_CUH

#include <type_traits>

#include "cuda/attention/prefill_common.cuh"

enum {
  WGMMA_THREADS = 384,
  WGMMA_ROWS = 128,   /* packed rows per block: 64 per consumer warpgroup */
  WGMMA_KT = 128,     /* keys per tile */
  WGMMA_D = 128,      /* head dim of q, k, v and out */
  WGMMA_STAGES = 3,
  WGMMA_PRODUCER_REGS = 40,
  WGMMA_CONSUMER_REGS = 232,
};

/* Byte offsets from the aligned base. */
enum {
  WGMMA_Q_PANEL = 64 * 128,             /* 64 rows x 128 bytes */
  WGMMA_Q_BYTES = 2 * 2 * WGMMA_Q_PANEL, /* two consumers x two panels */
  WGMMA_KV_PANEL = WGMMA_KT * 128,
  WGMMA_STAGE_BYTES = 4 * WGMMA_KV_PANEL, /* K panels, then V panels */
  WGMMA_BAR_OFFSET = WGMMA_Q_BYTES + WGMMA_STAGES * WGMMA_STAGE_BYTES,
  WGMMA_SMEM_BYTES = WGMMA_BAR_OFFSET + 4 * WGMMA_STAGES * 8 + 1024, /* + alignment slack */
};

/* The TMA form's maps of k and v (prefill.cu encodes them; unused by the other forms). */
struct prefill_kv_maps {
  CUtensorMap k, v;
};

/* ---- consumer math ---------------------------------------------------------------------------- */
/* Issue s = Q K^T for a warpgroup: q and k are the shared addresses of their first panels. */
template <bool BF16> static __device__ __forceinline__ void wgmma_scores(float (&s)[64], uint32_t q, uint32_t k) {
#pragma unroll
  for (int kk = 0; kk < WGMMA_D / 16; ++kk) {
    ignis_wgmma_m64n128<BF16 ? IGNIS_WGMMA_BF16 : IGNIS_WGMMA_F16>(
        s, ignis_wgmma_desc(q + (kk / 4) * WGMMA_Q_PANEL + (kk % 4) * 32),
        ignis_wgmma_desc(k + (kk / 4) * WGMMA_KV_PANEL + (kk % 4) * 32), kk > 0);
  }
}

/* Issue o += P V over the tile's 128 keys (v: the shared address of the first V panel). */
template <bool BF16>
static __device__ __forceinline__ void wgmma_pv(float (&o)[64], const uint32_t (&pa)[WGMMA_KT / 16][4], uint32_t v) {
#pragma unroll
  for (int kk = 0; kk < WGMMA_KT / 16; ++kk)
    ignis_wgmma_rs<BF16 ? IGNIS_WGMMA_BF16 : IGNIS_WGMMA_F16, 128>(
        o, pa[kk], ignis_wgmma_desc(v + kk * 16 * 128, WGMMA_KV_PANEL));
}

/* Keys from k0 at or past vis_hi[h] (the thread's rows h = 0, 1) get -inf. */
static __device__ __forceinline__ void wgmma_mask(float (&s)[64], uint32_t k0, const uint32_t (&vis_hi)[2],
                                                  int t) {
#pragma unroll
  for (int n = 0; n < WGMMA_KT / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (k0 + 8 * n + 2 * t + (e & 1) >= vis_hi[e >> 1])
        s[4 * n + e] = -CUDART_INF_F;
}

/* Online softmax on s (raw scores; scale turns them into base-2 logits, -inf: masked): updates the
 * running maxima m and the thread's partial sums l, leaves exp2 values in s and the factors by
 * which O must be rescaled in rescale. */
static __device__ __forceinline__ void wgmma_softmax(float (&s)[64], float scale, float (&m)[2], float (&l)[2],
                                                     float (&rescale)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int n = 0; n < WGMMA_KT / 8; ++n)
      mx = fmaxf(mx, fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_use = online_max(m[h], mx * scale, &rescale[h]);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < WGMMA_KT / 8; ++n)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[4 * n + e] = exp2_approx(fmaf(s[4 * n + e], scale, -m_use));
        sum += s[4 * n + e];
      }
    l[h] = fmaf(l[h], rescale[h], sum);
  }
}

/* O *= rescale per row (skipped when no row of the warp moved), then P = s as A fragments. */
template <typename QT>
static __device__ __forceinline__ void wgmma_rescale_pack(const float (&s)[64], const float (&rescale)[2],
                                                          float (&o)[64], uint32_t (&pa)[WGMMA_KT / 16][4]) {
  wgmma_rescale_rows(o, rescale);
#pragma unroll
  for (int kk = 0; kk < WGMMA_KT / 16; ++kk)
#pragma unroll
    for (int w = 0; w < 4; ++w)
      pa[kk][w] = ignis_pack_word<QT>(&s[8 * kk + 2 * w]);
}

/* ---- kernel ------------------------------------------------------------------------------------- */
template <typename QT, bool PINGPONG, bool TMA>
__global__ void __launch_bounds__(WGMMA_THREADS, 1)
    prefill_wgmma_kernel(const ignis_prefill_params p, const prefill_config c,
                         const __grid_constant__ prefill_kv_maps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool BF16 = std::is_same<QT, __nv_bfloat16>::value;
  extern __shared__ __align__(1024) unsigned char wgmma_smem[];
  const uint32_t base = ((uint32_t)__cvta_generic_to_shared(wgmma_smem) + 1023u) & ~1023u;
  const uint32_t bar_full_k = base + WGMMA_BAR_OFFSET, bar_full_v = bar_full_k + 8 * WGMMA_STAGES,
                 bar_empty_k = bar_full_v + 8 * WGMMA_STAGES, bar_empty_v = bar_empty_k + 8 * WGMMA_STAGES;
  const int tid = threadIdx.x, lane = tid & 31;
  const int kvh = (int)(blockIdx.x % (unsigned)p.num_kv_heads);
  const int64_t slot = blockIdx.x / (unsigned)p.num_kv_heads;

  ignis_pdl_wait();
  ignis_prefill_work item;
  ignis_prefill_request req;
  if (!prefill_fetch_item(p, c, slot, &item, &req))
    return;
  const int group = c.group, row0 = item.row_start;
  const int rows = (int)min((int64_t)WGMMA_ROWS, (int64_t)req.q_len * group - row0);
  if (rows <= 0)
    return;
  /* keys [lo, hi): the item's keys that some row of the tile sees */
  const int32_t pos_base = req.kv_len - req.q_len; /* q_pos of token i: pos_base + i */
  const int32_t last_pos = pos_base + (row0 + rows - 1) / group;
  const int32_t lo = max(item.kv_start, 0);
  int32_t hi = min(item.kv_end, req.kv_len);
  if (c.causal)
    hi = (int32_t)min((int64_t)hi, (int64_t)last_pos + 1);
  hi = max(hi, lo);
  const int num_tiles = (int)(((int64_t)hi - lo + WGMMA_KT - 1) / WGMMA_KT);

  if (tid == 0) {
    for (int s = 0; s < WGMMA_STAGES; ++s) {
      ignis_mbar_init(bar_full_k + 8 * s, 128);
      ignis_mbar_init(bar_full_v + 8 * s, 128);
      ignis_mbar_init(bar_empty_k + 8 * s, 8);
      ignis_mbar_init(bar_empty_v + 8 * s, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (tid < 128) { /* ---- producer ---- */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"((int)WGMMA_PRODUCER_REGS));
    const bool paged = p.kv_source == IGNIS_PREFILL_KV_PAGED;
    const int warp = tid >> 5;
    /* page of key lane of the warp's 32 in tile tl: 0 when not paged, -1 for no key */
    auto lookup_page = [&](int tl) -> int32_t {
      const int64_t j = (int64_t)lo + (int64_t)tl * WGMMA_KT + 32 * warp + lane;
      return tl >= num_tiles || j >= hi ? -1 : prefill_key_page(p, paged, req, j);
    };
    const char *k_cache = static_cast<const char *>(p.cache.k_cache);
    const char *v_cache = static_cast<const char *>(p.cache.v_cache);
    /* copies of the warp's 32 rows from the row addresses at (lane-owned), two rows per instruction */
    auto copy_rows = [&](uint32_t panels, const char *at, const char *dummy) {
      const int ch = lane & 15;
      const uint32_t dst0 = panels + (ch >> 3) * WGMMA_KV_PANEL;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int r = 32 * warp + 2 * i + (lane >> 4);
        const char *src = reinterpret_cast<const char *>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(at), 2 * i + (lane >> 4)));
        copy_async16(dst0 + r * 128 + (((ch & 7) ^ (r & 7)) << 4), src ? src + ch * 16 : dummy, src != nullptr);
      }
    };
    int32_t page = lookup_page(0);
    const int64_t row_base = p.kv_source == IGNIS_PREFILL_KV_RAGGED ? (int64_t)req.kv_start : 0;
    /* the TMA form's whole tile from row `row` into the two panels at dst: the first thread's two
     * boxes, counted on `full` by bytes; the other threads only arrive */
    auto load_tile = [&](uint32_t dst, const CUtensorMap *map, uint32_t full, int32_t row) {
      if (tid == 0) {
        ignis_mbar_arrive_expect_tx(full, 2 * WGMMA_KV_PANEL);
        ignis_tma_load_3d(dst, map, full, 0, kvh, row);
        ignis_tma_load_3d(dst + WGMMA_KV_PANEL, map, full, 64, kvh, row);
      } else {
        ignis_mbar_arrive(full);
      }
    };
    for (int tl = 0; tl < num_tiles; ++tl) {
      const int s = tl % WGMMA_STAGES;
      const int64_t k0 = (int64_t)lo + (int64_t)tl * WGMMA_KT;
      const bool whole = TMA && !paged && k0 + WGMMA_KT <= hi; /* the TMA form's tiles */
      const char *kp = nullptr, *vp = nullptr;
      if (!whole && page >= 0) {
        const int64_t j = k0 + 32 * warp + lane;
        const int64_t token = paged ? (int64_t)((uint32_t)j % (uint32_t)p.cache.page_size) : row_base + j;
        kp = k_cache + (kvh * p.cache.k_stride_head + page * p.cache.k_stride_page + token * p.cache.k_stride_token) * 2;
        vp = v_cache + (kvh * p.cache.v_stride_head + page * p.cache.v_stride_page + token * p.cache.v_stride_token) * 2;
      }
      page = lookup_page(tl + 1);
      const uint32_t stage = base + WGMMA_Q_BYTES + s * WGMMA_STAGE_BYTES, parity = (tl / WGMMA_STAGES - 1) & 1;
      if (tl >= WGMMA_STAGES)
        ignis_mbar_wait(bar_empty_k + 8 * s, parity);
      if (whole) {
        load_tile(stage, &maps.k, bar_full_k + 8 * s, (int32_t)(row_base + k0));
      } else {
        copy_rows(stage, kp, k_cache);
        mbar_arrive_copies(bar_full_k + 8 * s);
      }
      if (tl >= WGMMA_STAGES)
        ignis_mbar_wait(bar_empty_v + 8 * s, parity);
      if (whole) {
        load_tile(stage + 2 * WGMMA_KV_PANEL, &maps.v, bar_full_v + 8 * s, (int32_t)(row_base + k0));
      } else {
        copy_rows(stage + 2 * WGMMA_KV_PANEL, vp, v_cache);
        mbar_arrive_copies(bar_full_v + 8 * s);
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    ignis_pdl_launch_dependents();
    return;
  }

  /* ---- consumers ---- */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"((int)WGMMA_CONSUMER_REGS));
  const int wg = (tid >> 7) - 1, ctid = tid & 127, wrow0 = 64 * wg;
  const int g = lane >> 2, t = lane & 3, trow0 = wrow0 + 16 * (ctid >> 5) + g; /* rows trow0, trow0 + 8 */
  const uint32_t q_tile = base + wg * 2 * WGMMA_Q_PANEL;
  {
    const QT *q = static_cast<const QT *>(p.q);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int idx = ctid + 128 * i, r = idx >> 4, ch = idx & 15;
      const int packed = row0 + min(wrow0 + r, rows - 1); /* rows past the tile are zero-filled */
      const int64_t token = req.q_start + packed / group, head = (int64_t)kvh * group + packed % group;
      const QT *src = q + token * p.q_stride_token + head * p.q_stride_head + ch * 8;
      copy_async16(q_tile + (ch >> 3) * WGMMA_Q_PANEL + r * 128 + (((ch & 7) ^ (r & 7)) << 4),
                   wrow0 + r < rows ? (const void *)src : p.q, wrow0 + r < rows);
    }
    copy_async_commit();
    copy_async_wait<0>();
    ignis_fence_proxy_async(); /* generic-proxy writes visible to wgmma */
    if (wg == 0) /* the warpgroup's own named barrier */
      asm volatile("bar.sync 1, 128;" ::: "memory");
    else
      asm volatile("bar.sync 2, 128;" ::: "memory");
  }

  /* the thread's rows (past the tile: as the tile's last row, computed and never written) */
  uint32_t vis_hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t pos = pos_base + (row0 + min(trow0 + 8 * h, rows - 1)) / group;
    vis_hi[h] = (uint32_t)(c.causal ? max(lo, min(hi, pos + 1)) : hi);
  }
  /* tiles this warpgroup computes, and the keys below which a tile needs no mask */
  int n_wg = 0;
  int64_t full_hi = lo;
  if (wrow0 < rows) {
    const int32_t wpos_lo = pos_base + (row0 + wrow0) / group;
    const int32_t wpos_hi = pos_base + (row0 + min(wrow0 + 63, rows - 1)) / group;
    const int64_t wg_hi = c.causal ? max((int64_t)lo, min((int64_t)hi, (int64_t)wpos_hi + 1)) : hi;
    n_wg = (int)((wg_hi - lo + WGMMA_KT - 1) / WGMMA_KT);
    full_hi = c.causal ? min((int64_t)hi, (int64_t)wpos_lo + 1) : hi;
  }
  /* the ping-pong form's turns, the same count in both warpgroups: the other's tiles too (its rows
   * start 64 later or earlier; causal) */
  int turns = 0;
  if constexpr (PINGPONG) {
    const int other = 64 * (1 - wg);
    int n_other = 0;
    if (other < rows) {
      const int32_t opos_hi = pos_base + (row0 + min(other + 63, rows - 1)) / group;
      const int64_t o_hi = c.causal ? max((int64_t)lo, min((int64_t)hi, (int64_t)opos_hi + 1)) : hi;
      n_other = (int)((o_hi - lo + WGMMA_KT - 1) / WGMMA_KT);
    }
    turns = n_wg > 0 && n_other > 0 ? max(n_wg, n_other) + 1 : 0; /* 0: no turns (one side idle) */
  }
  int turn = 0;
  auto turn_wait = [&]() {
    if constexpr (PINGPONG) {
      if (turns == 0)
        return;
      if (wg == 0)
        asm volatile("bar.sync 3, 256;" ::: "memory");
      else
        asm volatile("bar.sync 4, 256;" ::: "memory");
    }
  };
  auto turn_pass = [&]() { /* after this warpgroup's issue of turn `turn` */
    if constexpr (PINGPONG) {
      if (turns == 0)
        return;
      if (wg == 0)
        asm volatile("bar.arrive 4, 256;" ::: "memory");
      else if (turn + 1 < turns)
        asm volatile("bar.arrive 3, 256;" ::: "memory");
      ++turn;
    }
  };
  if (PINGPONG && wg == 1 && turns > 0)
    asm volatile("bar.arrive 3, 256;" ::: "memory"); /* warpgroup 0 goes first */

  float o[64], m[2], l[2], rescale[2];
#pragma unroll
  for (int i = 0; i < 64; ++i)
    o[i] = 0.0f;
  m[0] = m[1] = -CUDART_INF_F;
  l[0] = l[1] = 0.0f;
  uint32_t pa[WGMMA_KT / 16][4];
  float s[64];
  const uint32_t stages = base + WGMMA_Q_BYTES;
  auto release = [&](uint32_t bar, int j) {
    if (lane == 0)
      ignis_mbar_arrive(bar + 8 * (j % WGMMA_STAGES));
  };
  auto mask_tile = [&](int j) {
    const int64_t k0 = (int64_t)lo + (int64_t)j * WGMMA_KT;
    if (k0 + WGMMA_KT > full_hi)
      wgmma_mask(s, (uint32_t)k0, vis_hi, t);
  };
  if (n_wg > 0) {
    ignis_mbar_wait(bar_full_k, 0);
    ignis_fence_proxy_async(); /* generic-proxy writes visible to wgmma */
    turn_wait();
    ignis_wgmma_fence();
    wgmma_scores<BF16>(s, q_tile, stages);
    ignis_wgmma_commit();
    turn_pass();
    ignis_wgmma_wait<0>();
    ignis_wgmma_pin(s);
    release(bar_empty_k, 0);
    mask_tile(0);
    wgmma_softmax(s, c.score_scale, m, l, rescale);
    wgmma_rescale_pack<QT>(s, rescale, o, pa);
  }
  for (int j = 1; j < n_wg; ++j) {
    const int sj = j % WGMMA_STAGES, sp = (j - 1) % WGMMA_STAGES;
    ignis_mbar_wait(bar_full_k + 8 * sj, (j / WGMMA_STAGES) & 1);
    ignis_mbar_wait(bar_full_v + 8 * sp, ((j - 1) / WGMMA_STAGES) & 1);
    ignis_fence_proxy_async(); /* generic-proxy writes visible to wgmma */
    turn_wait();
    ignis_wgmma_fence();
    wgmma_scores<BF16>(s, q_tile, stages + sj * WGMMA_STAGE_BYTES);
    ignis_wgmma_commit();
    wgmma_pv<BF16>(o, pa, stages + sp * WGMMA_STAGE_BYTES + 2 * WGMMA_KV_PANEL);
    ignis_wgmma_commit();
    turn_pass();
    ignis_wgmma_wait<1>();
    ignis_wgmma_pin(s);
    release(bar_empty_k, j);
    mask_tile(j);
    wgmma_softmax(s, c.score_scale, m, l, rescale);
    ignis_wgmma_wait<0>();
    ignis_wgmma_pin(o);
    release(bar_empty_v, j - 1);
    wgmma_rescale_pack<QT>(s, rescale, o, pa);
  }
  if (n_wg > 0) {
    const int sp = (n_wg - 1) % WGMMA_STAGES;
    ignis_mbar_wait(bar_full_v + 8 * sp, ((n_wg - 1) / WGMMA_STAGES) & 1);
    ignis_fence_proxy_async(); /* generic-proxy writes visible to wgmma */
    turn_wait();
    ignis_wgmma_fence();
    wgmma_pv<BF16>(o, pa, stages + sp * WGMMA_STAGE_BYTES + 2 * WGMMA_KV_PANEL);
    ignis_wgmma_commit();
    turn_pass();
    ignis_wgmma_wait<0>();
    ignis_wgmma_pin(o);
    release(bar_empty_v, n_wg - 1);
  }
  /* tiles past this warpgroup's diagonal: released once loaded, so the ring's phases stay in step;
   * the ping-pong form's empty turns, turn t once K_t and V_{t-1} are released (what the other's
   * turn t waits for: the producer loads them once both released the stage's last tile) */
  for (int j = n_wg; j < num_tiles; ++j) {
    ignis_mbar_wait(bar_full_k + 8 * (j % WGMMA_STAGES), (j / WGMMA_STAGES) & 1);
    release(bar_empty_k, j);
    while (PINGPONG && turn < turns && turn <= j) {
      turn_wait();
      turn_pass();
    }
    ignis_mbar_wait(bar_full_v + 8 * (j % WGMMA_STAGES), (j / WGMMA_STAGES) & 1);
    release(bar_empty_v, j);
  }
  while (PINGPONG && turn < turns) {
    turn_wait();
    turn_pass();
  }
  ignis_pdl_launch_dependents();

  /* finish the rows: join the sink (whole tiles), normalise, write out / lse or the partial slot */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  const int32_t partial = item.partial;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = trow0 + 8 * h;
    if (r >= rows)
      continue;
    const int packed = row0 + r;
    const int64_t token = req.q_start + packed / group, head = (int64_t)kvh * group + packed % group;
    const float sink2 = partial < 0 && p.sinks != nullptr ? p.sinks[head] * IGNIS_LOG2E_F : -CUDART_INF_F;
    const float mm = m[h], ll = l[h], top = fmaxf(mm, sink2);
    const float kept = ll > 0.0f ? exp2f(mm - top) : 0.0f;
    const float total = ll * kept + (sink2 != -CUDART_INF_F ? exp2f(sink2 - top) : 0.0f);
    const float inv = ll > 0.0f ? kept / total * p.v_scale : 0.0f;
    const float lse2 = total > 0.0f ? top + log2f(total) : -CUDART_INF_F;
    if (partial < 0) {
      QT *out = static_cast<QT *>(p.out) + token * p.out_stride_token + head * p.out_stride_head + 2 * t;
#pragma unroll
      for (int n = 0; n < WGMMA_D / 8; ++n) {
        const float two[2] = {o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv};
        *reinterpret_cast<uint32_t *>(out + 8 * n) = ignis_pack_word<QT>(two);
      }
      if (p.lse != nullptr && t == 0)
        p.lse[token * p.lse_stride_token + head * p.lse_stride_head] = lse2 * p.lse_scale;
    } else {
      const int64_t prow = ((int64_t)partial * p.num_kv_heads + kvh) * WGMMA_ROWS + r;
      float *out = p.partial_out + prow * WGMMA_D + 2 * t;
#pragma unroll
      for (int n = 0; n < WGMMA_D / 8; ++n)
        *reinterpret_cast<float2 *>(out + 8 * n) = make_float2(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
      if (t == 0)
        p.partial_lse[prow] = lse2;
    }
  }
#endif
}

#endif
