/* prefill_attention_kernel, the prefill kernel for every call shape (prefill.cu launches it and
 * tells the grid, the work items and the instances).
 *
 * FlashAttention-2 on mma.sync m16n8k16 (f32 accumulators). Tiles: ROWS = 128 packed rows for head
 * dims up to 128 (4 warps of 2 m-tiles), 64 to 256 (4 warps of 1 m-tile); KT = 64 keys (32 at head
 * dim 256). Q is copied once into swizzled shared memory and read by ldmatrix at each k-step; K and
 * V tiles stream through a ring of 2-3 stages filled with 16-byte cp.async (zero-filled past the
 * range). The row addresses of every key are computed a stage ahead by threads 0..KT-1 (contiguous,
 * ragged, or through cache.indices for paged keys, whose page-table read is issued one more tile
 * ahead) and left in a small ring, so any page size and any strides cost the copies nothing. Each
 * warp takes a tile in steps of KC keys (32 at head dim 128, where S of 64 keys next to O of 2
 * m-tiles would not fit the registers; else KT): S = Q K^T on its m-tiles, an online softmax in
 * base 2 (sm_scale * log2(e) * k_scale folded into one FFMA with the running max; the row sum
 * reduced across the quad only at the end), P packed into 16-bit A fragments in registers, O += P V
 * (V by ldmatrix.trans). Per step and warp the keys are skipped (beyond the causal diagonal or
 * before the window), taken without any mask (fully visible), or masked per element (diagonal,
 * window edges, range end, custom-mask bits gathered once per tile into shared memory).
 *
 * Head dim 512 (prefill_shape): tiles of 16 rows and 16 keys; the 4 warps share the one m-tile,
 * each computing the whole S (the same in every warp) and a quarter of O's dims, since O of a
 * 512-dim row would not fit one warp's registers.
 *
 * fp8 K/V tiles land as bytes and are converted once per tile, by the whole block, into a 16-bit
 * tile of q's dtype (exact for both formats), which is also where ROPE_LLAMA rotates the keys
 * (16-bit keys rotate in place; Q rotates once after its copy). k_scale joins the score scale,
 * v_scale the final normalisation.
 *
 * Layout of the block's shared memory (prefill_shape):
 *   Q tile     ROWS rows of DQK 16-bit values, swizzled 16-byte chunks
 *   ring       STAGES stages, each a K tile (KT rows of DQK) then a V tile (KT rows of DVO), in the
 *              K/V dtype: swizzled 16-bit rows, or plain fp8 rows
 *   conversion fp8 only: the current tile as swizzled 16-bit K and V rows (q's dtype)
 *   addresses  SLOTS x KT pairs of K / V row pointers (NULL: the key is past the range or on a bad
 *              page, its rows are zero-filled)
 *   rows       per tile row (prefill_row): its visible keys, q_pos and ALiBi slope for the masked
 *              steps, its token and head for the epilogue; then the item's partial slot
 *   mask       custom mask: per tile row, the bits of the current tile's keys (64-bit words)
 *   freq       DQK / 2 RoPE frequencies (general instance with ROPE_LLAMA)
 * Fragment conventions of mma.sync m16n8k16 (g = lane / 4, t = lane % 4): score / output element
 * (n, e) of an m-tile is row g + 8 (e / 2), column 8 n + 2 t + e % 2. */
#ifndef IGNIS_CUDA_PREFILL_KERNEL_CUH
#define IGNIS_CUDA_PREFILL_KERNEL_CUH

#include <type_traits>

#include "cuda/attention/prefill_common.cuh"

enum { PREFILL_THREADS = 128, PREFILL_WARPS = 4 };

/* What the masked steps need of a tile row (shared memory, filled once per block). */
struct prefill_row {
  int32_t vis_lo, vis_hi; /* keys of [lo, hi) that pass causal and window; empty for rows past the tile */
  int32_t pos;            /* q_pos */
  float slope;            /* ALiBi (natural units), 0 without */
  int32_t token;          /* row of q / out / lse; -1 past the tile */
  int32_t head;           /* query head */
};

template <int DQK, int DVO, int KV_BYTES> struct prefill_shape {
  static constexpr int DMAX = DQK > DVO ? DQK : DVO;
  /* Head dim split (head dim 512): the 4 warps share the tile's one m-tile, each computing its S
   * (the same in every warp) and a quarter of O's dims; O of a whole 512-dim row would not fit a
   * warp's registers. */
  static constexpr int DSPLIT = DMAX >= 512 ? PREFILL_WARPS : 1;
  static constexpr int ROWS = DMAX <= 128 ? 128 : DMAX <= 256 ? 64 : 16; /* ignis_prefill_q_tile_rows */
  static constexpr int MT = ROWS * DSPLIT / (16 * PREFILL_WARPS);        /* m-tiles per warp */
  static constexpr int NV = DVO / 8 / DSPLIT;                            /* O n-tiles per warp */
  static constexpr int KT = DQK >= 512 ? 16 : DQK >= 256 ? 32 : 64;      /* keys per tile */
  /* keys per softmax step: two steps per tile where S of a whole tile would crowd out O */
  static constexpr int KC = MT * NV * 4 + MT * (KT / 8) * 4 > 160 ? 32 : KT;
  static constexpr int STAGES = DQK <= 64 ? 3 : 2;
  static constexpr int SLOTS = STAGES + 1;
  static constexpr bool FP8 = KV_BYTES == 1;
  static constexpr int Q_ROW = DQK * 2, K_ROW = DQK * 2, V_ROW = DVO * 2; /* 16-bit rows */
  static constexpr int K_RAW_ROW = DQK * KV_BYTES, V_RAW_ROW = DVO * KV_BYTES;
  static constexpr int K_CHUNKS = K_RAW_ROW / 16, V_CHUNKS = V_RAW_ROW / 16, Q_CHUNKS = Q_ROW / 16;
  static constexpr int STAGE_BYTES = KT * (K_RAW_ROW + V_RAW_ROW);
  static constexpr size_t Q_OFFSET = 0;
  static constexpr size_t RING_OFFSET = (size_t)ROWS * Q_ROW;
  static constexpr size_t CONV_OFFSET = RING_OFFSET + (size_t)STAGES * STAGE_BYTES;
  static constexpr size_t ADDR_OFFSET = CONV_OFFSET + (FP8 ? (size_t)KT * (K_ROW + V_ROW) : 0);
  static constexpr size_t ROWS_OFFSET = ADDR_OFFSET + (size_t)SLOTS * KT * 16;
  static constexpr size_t MASK_OFFSET = ROWS_OFFSET + (size_t)ROWS * sizeof(prefill_row) + 16;
  static constexpr size_t FREQ_OFFSET = MASK_OFFSET + (size_t)ROWS * 8;
  static constexpr size_t SMEM_BYTES = FREQ_OFFSET + (size_t)DQK / 2 * 4;
  static_assert(MT >= 1 && KT <= PREFILL_THREADS && KT <= 64 && KT % KC == 0, "tile shape");
  /* swizzled_step: every 16-bit tile and row starts 128-byte aligned */
  static_assert(RING_OFFSET % 128 == 0 && STAGE_BYTES % 128 == 0 && CONV_OFFSET % 128 == 0 &&
                    (KT * K_ROW) % 128 == 0 && (KT * K_RAW_ROW) % 128 == 0 && Q_ROW % 128 == 0 &&
                    V_ROW % 128 == 0,
                "128-byte rows");
  static_assert(KT * K_CHUNKS % PREFILL_THREADS == 0 && KT * V_CHUNKS % PREFILL_THREADS == 0 &&
                    ROWS * Q_CHUNKS % PREFILL_THREADS == 0,
                "copy mapping");
};

/* ---- shared-memory rows --------------------------------------------------------------------------- */
/* 8 values of chunk c of row r (16-bit swizzled rows of ROW bytes, or fp8 rows of ROW / 2 bytes) as f32. */
template <typename QT, int KIND, int ROW>
__device__ __forceinline__ void load_chunk8(const unsigned char *tile, int r, int c, float (&x)[8]) {
  if constexpr (KIND == KV_E4M3 || KIND == KV_E5M2) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(tile + r * (ROW / 2) + c * 8);
    const uint32_t words[4] = {fp8x2_to_f16x2<KIND>(raw.x), fp8x2_to_f16x2<KIND>(raw.x >> 16),
                               fp8x2_to_f16x2<KIND>(raw.y), fp8x2_to_f16x2<KIND>(raw.y >> 16)};
#pragma unroll
    for (int w = 0; w < 4; ++w)
      ignis_unpack_word<__half>(words[w], x + 2 * w);
  } else {
    ignis_raw_to_floats<QT>(*reinterpret_cast<const uint4 *>(tile + swizzled<ROW, 7>(r, c)), x);
  }
}

template <typename QT, int ROW>
__device__ __forceinline__ void store_chunk8(unsigned char *tile, int r, int c, const float (&x)[8]) {
  *reinterpret_cast<uint4 *>(tile + swizzled<ROW, 7>(r, c)) = ignis_floats_to_raw<QT>(x);
}

/* sin and cos of x (|x| up to ~1e5): two-part reduction by 2 pi, then the hardware functions (absolute
 * error ~1e-6); sincosf's slow path for huge arguments would cost the kernel registers and stack. */
__device__ __forceinline__ void rope_sincos(float x, float *sn, float *cs) {
  const float k = rintf(x * 0.159154943091895336f);
  float r = fmaf(-k, 6.28318548202514648f, x); /* float(2 pi) */
  r = fmaf(-k, -1.74845553146951785e-07f, r);  /* 2 pi - float(2 pi) */
  __sincosf(r, sn, cs);
}

/* Row r of a tile of D-wide rows rotated at position pos (ROPE_LLAMA: dim d pairs with d + D / 2);
 * the thread takes chunk pair (c, c + D / 16). src and dst may be the same tile. */
template <typename QT, int KIND, int D>
__device__ __forceinline__ void rotate_row_chunks(const unsigned char *src, unsigned char *dst, int r, int c,
                                                  float pos, const float *freq) {
  float a[8], b[8];
  load_chunk8<QT, KIND, D * 2>(src, r, c, a);
  load_chunk8<QT, KIND, D * 2>(src, r, c + D / 16, b);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float sn, cs;
    rope_sincos(pos * freq[8 * c + e], &sn, &cs);
    const float x = a[e], y = b[e];
    a[e] = x * cs - y * sn;
    b[e] = y * cs + x * sn;
  }
  store_chunk8<QT, D * 2>(dst, r, c, a);
  store_chunk8<QT, D * 2>(dst, r, c + D / 16, b);
}

/* fp8 row chunk (8 values) to q's 16-bit type: exact for both fp8 formats. */
template <typename QT, int KIND, int D>
__device__ __forceinline__ void convert_row_chunk(const unsigned char *src, unsigned char *dst, int r,
                                                  int c) {
  const uint2 raw = *reinterpret_cast<const uint2 *>(src + r * D + c * 8);
  uint32_t w[4] = {fp8x2_to_f16x2<KIND>(raw.x), fp8x2_to_f16x2<KIND>(raw.x >> 16),
                   fp8x2_to_f16x2<KIND>(raw.y), fp8x2_to_f16x2<KIND>(raw.y >> 16)};
  if constexpr (std::is_same<QT, __nv_bfloat16>::value) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float two[2];
      ignis_unpack_word<__half>(w[i], two);
      w[i] = ignis_pack_word<__nv_bfloat16>(two);
    }
  }
  *reinterpret_cast<uint4 *>(dst + swizzled<D * 2, 7>(r, c)) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Bits of keys k0 .. k0 + 63 for one query row: custom-mask bits bit0 .. bit0 + 63, never reading past
 * byte last_byte. */
__device__ __forceinline__ uint64_t mask_bits64(const uint8_t *mask, int64_t bit0, int64_t last_byte) {
  const int64_t first = bit0 >> 3;
  const int shift = (int)(bit0 & 7);
  uint64_t lo = 0, hi = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b)
    if (first + b <= last_byte)
      lo |= (uint64_t)__ldg(mask + first + b) << (8 * b);
  if (first + 8 <= last_byte)
    hi = __ldg(mask + first + 8);
  return shift ? (lo >> shift) | (hi << (64 - shift)) : lo;
}

/* cp.async copies of the KT rows of a tile (CHUNKS 16-byte chunks each) whose source rows are
 * at[2 r] (NULL: zero-fill; `base` is a valid dummy address). Thread tid takes chunk tid % CHUNKS of
 * rows tid / CHUNKS + i * (THREADS / CHUNKS) when CHUNKS divides the block, so a swizzled row step of
 * 8 keeps one swizzle; PLAIN tiles (fp8 bytes) are not swizzled. */
template <int KT, int CHUNKS, bool PLAIN>
__device__ __forceinline__ void copy_tile_rows(uint32_t stage, const char *const *at, const char *base,
                                               int tid) {
  constexpr int ROW_BYTES = CHUNKS * 16, STEP = PREFILL_THREADS / CHUNKS;
  constexpr bool FIXED = PREFILL_THREADS % CHUNKS == 0 && (PLAIN || STEP % 8 == 0);
  const int ch = tid % CHUNKS, r0 = tid / CHUNKS;
  const uint32_t dst0 = r0 * ROW_BYTES + ((ch ^ (r0 & 7)) << 4);
#pragma unroll
  for (int i = 0; i < KT * CHUNKS / PREFILL_THREADS; ++i) {
    const int idx = tid + i * PREFILL_THREADS;
    const int r = FIXED ? r0 + i * STEP : idx / CHUNKS, c = FIXED ? ch : idx % CHUNKS;
    const uint32_t dst = PLAIN   ? idx * 16
                         : FIXED ? dst0 + i * STEP * ROW_BYTES
                                 : swizzled<ROW_BYTES, 7>(r, c);
    const char *src = at[r * 2];
    copy_async16(stage + dst, src ? src + c * 16 : base, src != nullptr);
  }
}

/* ---- warp tile math -------------------------------------------------------------------------------- */
/* ldmatrix address of chunk c (even) + hi of a swizzled row: `lane_row` is the row's address with
 * (hi ^ (row & 7)) << 4 added. Rows start 128-byte aligned, so the swizzle of the low three chunk
 * bits is one XOR with a constant and the rest an immediate offset. */
__device__ __forceinline__ uint32_t swizzled_step(uint32_t lane_row, int c) {
  return (lane_row ^ (uint32_t)((c & 7) << 4)) + (uint32_t)((c & ~7) << 4);
}

/* s = Q K^T for the warp's MT m-tiles (tile rows wrow0 ..) against KC keys (rows key0 ..) of a K tile. */
template <bool BF16, int MT, int KC, int DQK>
__device__ __forceinline__ void tile_scores(uint32_t q_tile, uint32_t k_tile, int wrow0, int key0, int lane,
                                            float (&s)[MT][KC / 8][4]) {
  constexpr int ROW = DQK * 2;
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_hi = lane >> 4;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_hi = (lane >> 3) & 1;
  const uint32_t q_lane = q_tile + (wrow0 + a_row) * ROW + ((a_hi ^ (lane & 7)) << 4);
  const uint32_t k_lane = k_tile + (key0 + b_row) * ROW + ((b_hi ^ (lane & 7)) << 4);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < KC / 8; ++n)
      s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < DQK / 16; ++kk) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(swizzled_step(q_lane, 2 * kk) + mt * 16 * ROW, qa[mt]);
#pragma unroll
    for (int np = 0; np < KC / 16; ++np) {
      uint32_t x[4];
      ldmatrix_x4(swizzled_step(k_lane, 2 * kk) + np * 16 * ROW, x);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<BF16>(s[mt][2 * np], qa[mt], x[0], x[1]);
        mma16816<BF16>(s[mt][2 * np + 1], qa[mt], x[2], x[3]);
      }
    }
  }
}

/* Online softmax step: s in units that `scale` turns into base-2 logits (-inf: masked). Updates the
 * running maxima m (base 2) and the thread's partial sums l, rescales o, and leaves P (q's 16-bit
 * type) as A fragments: pa[mt][kk] covers keys 16 kk .. 16 kk + 15. */
template <typename QT, int MT, int KC, int NV>
__device__ __forceinline__ void tile_softmax(float (&s)[MT][KC / 8][4], float scale, float (&m)[MT][2],
                                             float (&l)[MT][2], float (&o)[MT][NV][4],
                                             uint32_t (&pa)[MT][KC / 16][4]) {
  float rescale[MT][2];
  bool moved = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      float mx = -CUDART_INF_F;
#pragma unroll
      for (int n = 0; n < KC / 8; ++n)
        mx = fmaxf(mx, fmaxf(s[mt][n][2 * h2], s[mt][n][2 * h2 + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = online_max(m[mt][h2], mx * scale, &rescale[mt][h2]);
      moved |= rescale[mt][h2] != 1.0f;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < KC / 8; ++n)
#pragma unroll
        for (int e = 2 * h2; e < 2 * h2 + 2; ++e) {
          s[mt][n][e] = exp2f(fmaf(s[mt][n][e], scale, -m_use));
          sum += s[mt][n][e];
        }
      l[mt][h2] = fmaf(l[mt][h2], rescale[mt][h2], sum);
    }
  /* the running maxima settle early: most tiles leave O as it is */
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NV; ++j) {
        o[mt][j][0] *= rescale[mt][0];
        o[mt][j][1] *= rescale[mt][0];
        o[mt][j][2] *= rescale[mt][1];
        o[mt][j][3] *= rescale[mt][1];
      }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KC / 16; ++kk) {
      pa[mt][kk][0] = ignis_pack_word<QT>(&s[mt][2 * kk][0]);
      pa[mt][kk][1] = ignis_pack_word<QT>(&s[mt][2 * kk][2]);
      pa[mt][kk][2] = ignis_pack_word<QT>(&s[mt][2 * kk + 1][0]);
      pa[mt][kk][3] = ignis_pack_word<QT>(&s[mt][2 * kk + 1][2]);
    }
}

/* o += P V over KC keys (rows key0 ..) of a V tile, for the NV n-tiles of dims from v_tile's column
 * (a multiple of 64 dims past a row's start, so the swizzle is the row's). */
template <bool BF16, int MT, int KC, int DVO, int NV = DVO / 8>
__device__ __forceinline__ void tile_pv(uint32_t v_tile, int key0, int lane,
                                        const uint32_t (&pa)[MT][KC / 16][4], float (&o)[MT][NV][4]) {
  constexpr int ROW = DVO * 2;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_hi = lane >> 4;
  const uint32_t v_lane = v_tile + (key0 + v_row) * ROW + ((v_hi ^ (lane & 7)) << 4);
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk)
#pragma unroll
    for (int j = 0; j < NV; j += 2) {
      uint32_t x[4];
      ldmatrix_x4_trans(swizzled_step(v_lane, j) + kk * 16 * ROW, x);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<BF16>(o[mt][j], pa[mt][kk], x[0], x[1]);
        mma16816<BF16>(o[mt][j + 1], pa[mt][kk], x[2], x[3]);
      }
    }
}

/* ---- attention ------------------------------------------------------------------------------------ */
template <typename QT, int KIND, int DQK, int DVO, bool GENERAL>
__global__ void __launch_bounds__(PREFILL_THREADS, 2)
    prefill_attention_kernel(const ignis_prefill_params p, const prefill_config c) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  constexpr bool BF16 = std::is_same<QT, __nv_bfloat16>::value;
  constexpr int KV_BYTES = FP8 ? 1 : 2;
  typedef prefill_shape<DQK, DVO, KV_BYTES> sh;
  constexpr int KT = sh::KT, KC = sh::KC, MT = sh::MT, NV = sh::NV, DSPLIT = sh::DSPLIT;
  extern __shared__ __align__(128) unsigned char prefill_smem[];
  const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(prefill_smem);
  const uint32_t q_tile = smem_base + sh::Q_OFFSET;
  const char **rows_at =
      reinterpret_cast<const char **>(prefill_smem + sh::ADDR_OFFSET); /* [slot][key][K, V] */
  float *freq = reinterpret_cast<float *>(prefill_smem + sh::FREQ_OFFSET);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int kvh = (int)(blockIdx.x % (unsigned)p.num_kv_heads);
  const int64_t slot = blockIdx.x / (unsigned)p.num_kv_heads;

  ignis_pdl_wait();
  ignis_prefill_work item;
  ignis_prefill_request req;
  if (!prefill_fetch_item(p, c, slot, &item, &req))
    return;
  const int group = c.group;
  const int row0 = item.row_start;
  const int rows = (int)min((int64_t)sh::ROWS, (int64_t)req.q_len * group - row0);
  if (rows <= 0)
    return;
  /* keys [lo, hi): the item's keys that some row of the tile sees; positions fit int32 */
  const int32_t pos_base = req.kv_len - req.q_len; /* q_pos of token i: pos_base + i */
  const int32_t first_pos = pos_base + row0 / group, last_pos = pos_base + (row0 + rows - 1) / group;
  int32_t lo = max(item.kv_start, 0), hi = min(item.kv_end, req.kv_len);
  if (c.causal)
    hi = (int32_t)min((int64_t)hi, (int64_t)last_pos + 1);
  if (GENERAL && p.window_left >= 0)
    lo = (int32_t)max((int64_t)lo, (int64_t)first_pos - p.window_left);
  hi = max(hi, lo);
  const int num_tiles = (int)(((int64_t)hi - lo + KT - 1) / KT);

  const bool paged = p.kv_source == IGNIS_PREFILL_KV_PAGED;
  /* K / V rows of this KV head (re-derived where used: registers are scarce in the loop) */
  auto k_base = [&]() {
    return static_cast<const char *>(p.cache.k_cache) + kvh * p.cache.k_stride_head * KV_BYTES;
  };
  auto v_base = [&]() {
    return static_cast<const char *>(p.cache.v_cache) + kvh * p.cache.v_stride_head * KV_BYTES;
  };

  /* Page of key lo + tl * KT + tid (threads 0..KT-1): 0 when not paged, -1 for no key. */
  auto lookup_page = [&](int tl) -> int32_t {
    const int64_t j = (int64_t)lo + (int64_t)tl * KT + tid;
    return tl >= num_tiles || j >= hi ? -1 : prefill_key_page(p, paged, req, j);
  };
  /* The addresses of that key's K and V rows into its slot of the address ring. */
  auto store_rows = [&](int tl, int32_t page) {
    const int64_t j = (int64_t)lo + (int64_t)tl * KT + tid;
    const char *kp = nullptr, *vp = nullptr;
    if (page >= 0) {
      const int64_t token = paged ? (int64_t)((uint32_t)j % (uint32_t)p.cache.page_size)
                                  : (p.kv_source == IGNIS_PREFILL_KV_RAGGED ? req.kv_start : 0) + j;
      kp = k_base() + (page * p.cache.k_stride_page + token * p.cache.k_stride_token) * KV_BYTES;
      vp = v_base() + (page * p.cache.v_stride_page + token * p.cache.v_stride_token) * KV_BYTES;
    }
    rows_at[((tl % sh::SLOTS) * KT + tid) * 2] = kp;
    rows_at[((tl % sh::SLOTS) * KT + tid) * 2 + 1] = vp;
  };
  /* Copies of tile tl into its stage. */
  auto issue_tile = [&](int tl) {
    const uint32_t k_stage = smem_base + sh::RING_OFFSET + (tl % sh::STAGES) * sh::STAGE_BYTES;
    const char *const *at = rows_at + (tl % sh::SLOTS) * KT * 2;
    copy_tile_rows<KT, sh::K_CHUNKS, FP8>(k_stage, at, static_cast<const char *>(p.cache.k_cache), tid);
    copy_tile_rows<KT, sh::V_CHUNKS, FP8>(k_stage + KT * sh::K_RAW_ROW, at + 1,
                                          static_cast<const char *>(p.cache.v_cache), tid);
  };

  const bool rope = GENERAL && c.rope;
  if (rope)
    for (int d = tid; d < DQK / 2; d += PREFILL_THREADS)
      freq[d] = p.rope_rcp_scale * exp2f(-(float)(2 * d) / DQK * p.rope_log2_theta);
  /* prologue: Q (its own copy group), row addresses of tiles 0..STAGES-1, copies of 0..STAGES-2 */
  {
    const QT *q = static_cast<const QT *>(p.q);
#pragma unroll
    for (int i = 0; i < sh::ROWS * sh::Q_CHUNKS / PREFILL_THREADS; ++i) {
      const int idx = tid + i * PREFILL_THREADS, r = idx / sh::Q_CHUNKS, ch = idx % sh::Q_CHUNKS;
      const int packed = row0 + min(r, rows - 1); /* rows past the tile are zero-filled */
      const int64_t token = req.q_start + packed / group, head = (int64_t)kvh * group + packed % group;
      const QT *src = q + token * p.q_stride_token + head * p.q_stride_head + ch * 8;
      copy_async16(q_tile + swizzled<sh::Q_ROW, 7>(r, ch), r < rows ? (const void *)src : p.q, r < rows);
    }
    copy_async_commit();
  }
  if (tid < KT)
    for (int tl = 0; tl < sh::STAGES; ++tl)
      store_rows(tl, lookup_page(tl));
  __syncthreads();
#pragma unroll
  for (int tl = 0; tl < sh::STAGES - 1; ++tl) {
    if (tl < num_tiles)
      issue_tile(tl);
    copy_async_commit();
  }
  /* the page of tile tl + STAGES is read one iteration before its addresses are stored */
  int32_t pending = tid < KT ? lookup_page(sh::STAGES) : -1;
  if (rope) { /* rotate Q in place once it has landed */
    copy_async_wait<sh::STAGES - 1>();
    __syncthreads();
    for (int u = tid; u < sh::ROWS * (DQK / 16); u += PREFILL_THREADS) {
      const int r = u / (DQK / 16), ch = u % (DQK / 16);
      if (r < rows)
        rotate_row_chunks<QT, BF16 ? KV_BF16 : KV_F16, DQK>(prefill_smem + sh::Q_OFFSET,
                                                            prefill_smem + sh::Q_OFFSET, r, ch,
                                                            (float)(pos_base + (row0 + r) / group), freq);
    }
  }

  /* the tile's rows and the item's slot, in shared memory rather than registers through the loop
   * (visible after the loop's first barrier or the one before the epilogue) */
  prefill_row *row_info = reinterpret_cast<prefill_row *>(prefill_smem + sh::ROWS_OFFSET);
  int32_t *block_partial =
      reinterpret_cast<int32_t *>(prefill_smem + sh::ROWS_OFFSET + sh::ROWS * sizeof(prefill_row));
  uint64_t *mask_words = reinterpret_cast<uint64_t *>(prefill_smem + sh::MASK_OFFSET);
  if (tid == 0)
    *block_partial = item.partial;
  for (int r = tid; r < sh::ROWS; r += PREFILL_THREADS) {
    const int packed = row0 + min(r, rows - 1); /* rows past the tile get an empty key range */
    const int32_t pos = pos_base + packed / group;
    int64_t a = lo, b = hi;
    if (c.causal)
      b = min(b, (int64_t)pos + 1);
    if (GENERAL && p.window_left >= 0)
      a = max(a, (int64_t)pos - p.window_left);
    if (r >= rows || a > b)
      a = b = lo;
    prefill_row info;
    info.vis_lo = (int32_t)a;
    info.vis_hi = (int32_t)b;
    info.pos = pos;
    info.slope =
        GENERAL && c.st.alibi_n > 0 ? alibi_slope(c.st.alibi_n, (int64_t)kvh * group + packed % group) : 0.0f;
    info.token = r < rows ? req.q_start + packed / group : -1;
    info.head = kvh * group + packed % group;
    row_info[r] = info;
  }
  /* DSPLIT: warp = the part of O's dims it takes, all warps on the same rows */
  const int wrow0 = (warp / DSPLIT) * MT * 16, dpart = warp % DSPLIT;
  const bool warp_active = wrow0 < rows;
  const int32_t wpos_lo = pos_base + (row0 + min(wrow0, rows - 1)) / group;
  const int32_t wpos_hi = pos_base + (row0 + min(wrow0 + MT * 16, rows) - 1) / group;
  const int64_t mask_last_byte = req.mask_offset + ((int64_t)req.q_len * req.kv_len + 7) / 8 - 1;
  const bool window = GENERAL && p.window_left >= 0;

  float o[MT][NV][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NV; ++j)
      o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    m[mt][0] = m[mt][1] = -CUDART_INF_F, l[mt][0] = l[mt][1] = 0.0f;

  for (int tl = 0; tl < num_tiles; ++tl) {
    copy_async_wait<sh::STAGES - 2>();
    __syncthreads();
    if (tl + sh::STAGES - 1 < num_tiles)
      issue_tile(tl + sh::STAGES - 1);
    copy_async_commit();
    if (tid < KT && tl + sh::STAGES < num_tiles) {
      store_rows(tl + sh::STAGES, pending);
      pending = lookup_page(tl + sh::STAGES + 1);
    }
    const int32_t tile_k0 = lo + tl * KT;
    unsigned char *stage = prefill_smem + sh::RING_OFFSET + (tl % sh::STAGES) * sh::STAGE_BYTES;
    unsigned char *tile = FP8 ? prefill_smem + sh::CONV_OFFSET : stage;
    const bool custom = GENERAL && c.custom_mask;
    if (FP8 || rope || custom) { /* the tile as the mma reads it: fp8 converted, keys rotated; mask bits */
      /* one chunk pair at a time: O is live here */
      if (rope) {
#pragma unroll 1
        for (int u = tid; u < KT * (DQK / 16); u += PREFILL_THREADS)
          rotate_row_chunks<QT, KIND, DQK>(stage, tile, u / (DQK / 16), u % (DQK / 16),
                                           (float)((int64_t)tile_k0 + u / (DQK / 16)), freq);
      } else if constexpr (FP8) {
        for (int u = tid; u < KT * (DQK / 8); u += PREFILL_THREADS)
          convert_row_chunk<QT, KIND, DQK>(stage, tile, u / (DQK / 8), u % (DQK / 8));
      }
      if constexpr (FP8)
        for (int u = tid; u < KT * (DVO / 8); u += PREFILL_THREADS)
          convert_row_chunk<QT, KIND, DVO>(stage + KT * DQK, tile + KT * sh::K_ROW, u / (DVO / 8),
                                           u % (DVO / 8));
      if (custom && tid < sh::ROWS) {
        const prefill_row info = row_info[tid];
        mask_words[tid] =
            info.vis_lo < info.vis_hi
                ? mask_bits64(p.custom_mask,
                              req.mask_offset * 8 + (int64_t)(info.pos - pos_base) * req.kv_len + tile_k0,
                              mask_last_byte)
                : 0;
      }
      __syncthreads();
    }
    const uint32_t k_tile = (uint32_t)__cvta_generic_to_shared(tile), v_tile = k_tile + KT * sh::K_ROW;

#pragma unroll
    for (int sub = 0; sub < KT / KC; ++sub) {
      /* this warp's rows against keys [k0, k0 + KC): skipped, unmasked, or masked (key indices are
       * compared unsigned: k0 + KC may pass INT32_MAX) */
      const int64_t k0 = (int64_t)tile_k0 + sub * KC, k_last = k0 + KC - 1;
      if (!warp_active || k0 >= hi || (c.causal && k0 > wpos_hi) ||
          (window && k_last < (int64_t)wpos_lo - p.window_left))
        continue;
      const bool full = k_last < hi && (!c.causal || k_last <= wpos_lo) &&
                        (!GENERAL || ((!window || k0 >= (int64_t)wpos_hi - p.window_left) && !c.custom_mask));
      float s[MT][KC / 8][4];
      tile_scores<BF16, MT, KC, DQK>(q_tile, k_tile, wrow0, sub * KC, lane, s);
      if (GENERAL) { /* base-2 logits: ALiBi, soft cap, masks */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            const int r = wrow0 + mt * 16 + g + 8 * h2;
            const prefill_row info = row_info[r];
            const uint64_t bits = custom ? mask_words[r] >> (sub * KC) : ~0ull;
#pragma unroll
            for (int n = 0; n < KC / 8; ++n)
#pragma unroll
              for (int e1 = 0; e1 < 2; ++e1) {
                const int key = 8 * n + 2 * t + e1;
                const uint32_t j = (uint32_t)k0 + key;
                float x = s[mt][n][2 * h2 + e1] * c.score_scale;
                if (c.transform) {
                  x = fmaf(info.slope, (float)((int64_t)j - info.pos), x);
                  x = c.st.cap_out > 0.0f ? c.st.cap_out * tanhf(x * c.st.cap_in) : x * IGNIS_LOG2E_F;
                }
                const bool ok =
                    full || (j >= (uint32_t)info.vis_lo && j < (uint32_t)info.vis_hi && ((bits >> key) & 1));
                s[mt][n][2 * h2 + e1] = ok ? x : -CUDART_INF_F;
              }
          }
      } else if (!full) { /* causal diagonal and the range's end */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            const uint32_t vis_hi = (uint32_t)row_info[wrow0 + mt * 16 + g + 8 * h2].vis_hi;
#pragma unroll
            for (int n = 0; n < KC / 8; ++n)
#pragma unroll
              for (int e1 = 0; e1 < 2; ++e1)
                if ((uint32_t)k0 + 8 * n + 2 * t + e1 >= vis_hi)
                  s[mt][n][2 * h2 + e1] = -CUDART_INF_F;
          }
      }
      uint32_t pa[MT][KC / 16][4];
      tile_softmax<QT, MT, KC, NV>(s, GENERAL ? 1.0f : c.score_scale, m, l, o, pa);
      tile_pv<BF16, MT, KC, DVO, NV>(v_tile + dpart * NV * 16, sub * KC, lane, pa, o);
    }
  }
  copy_async_wait<0>(); /* no copy outlives the block (the ring's last groups are empty or unused) */
  ignis_pdl_launch_dependents();
  __syncthreads(); /* the row table, even when no tile ran */

  /* finish the rows: join the sink (whole tiles), normalise, write out / lse or the partial slot */
  const int32_t partial = *block_partial;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      l[mt][h2] += __shfl_xor_sync(0xffffffffu, l[mt][h2], 1);
      l[mt][h2] += __shfl_xor_sync(0xffffffffu, l[mt][h2], 2);
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = wrow0 + mt * 16 + g + 8 * h2;
      const prefill_row info = row_info[r];
      if (info.token < 0)
        continue;
      const float sink2 =
          partial < 0 && p.sinks != nullptr ? p.sinks[info.head] * IGNIS_LOG2E_F : -CUDART_INF_F;
      const float mm = m[mt][h2], ll = l[mt][h2], top = fmaxf(mm, sink2);
      const float kept = ll > 0.0f ? exp2f(mm - top) : 0.0f;
      const float total = ll * kept + (sink2 != -CUDART_INF_F ? exp2f(sink2 - top) : 0.0f);
      const float inv = ll > 0.0f ? kept / total * p.v_scale : 0.0f;
      const float lse2 = total > 0.0f ? top + log2f(total) : -CUDART_INF_F;
      if (partial < 0) {
        QT *out = static_cast<QT *>(p.out) + info.token * p.out_stride_token + info.head * p.out_stride_head +
                  dpart * NV * 8 + 2 * t;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
          const float two[2] = {o[mt][j][2 * h2] * inv, o[mt][j][2 * h2 + 1] * inv};
          *reinterpret_cast<uint32_t *>(out + 8 * j) = ignis_pack_word<QT>(two);
        }
        if (p.lse != nullptr && t == 0 && dpart == 0)
          p.lse[info.token * p.lse_stride_token + info.head * p.lse_stride_head] = lse2 * p.lse_scale;
      } else {
        const int64_t prow =
            ((int64_t)partial * p.num_kv_heads + blockIdx.x % (unsigned)p.num_kv_heads) * sh::ROWS + r;
        float *out = p.partial_out + prow * DVO + dpart * NV * 8 + 2 * t;
#pragma unroll
        for (int j = 0; j < NV; ++j)
          *reinterpret_cast<float2 *>(out + 8 * j) =
              make_float2(o[mt][j][2 * h2] * inv, o[mt][j][2 * h2 + 1] * inv);
        if (t == 0 && dpart == 0)
          p.partial_lse[prow] = lse2;
      }
    }
}

#endif
