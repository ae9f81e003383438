/* The transposed decode kernel's pieces (decode_attention_kernel with TRANSPOSED runs them, for blocks
 * of at most DECODE_TRANSPOSED_ROWS = 8 query rows, e.g. group 4 or 8 at q_len 1, group 4 at q_len
 * 2; every option, dtype and head dim). An m16 tile of R <= 8 rows would be mostly padding, so the
 * block computes the transpose: the R rows are the N = 8 columns. S^T = K Q^T with K the A operand
 * (16 keys x 16 dims by ldmatrix from the K tile, not transposed) and Q^T the B operand (lane (g, t)
 * holds row g, dims as frag_dim); lane (g, t) then holds keys g, g+8 of rows 2t, 2t+1, and the online
 * softmax of a row reduces over the 8 lanes g. P^T, the B operand of O^T += V^T P^T, is the C
 * fragment with each 8x8 half transposed across the warp (movmatrix); V^T is the A operand by
 * ldmatrix.trans from the V tile. Per 16 keys: KSTEPS + HEAD_DIM / 16 mma instead of twice that, and
 * half the Q registers and O accumulators of the m16 kernel, so 4 blocks share an SM where the ring
 * allows (decode_tile: 3 stages for 128-byte rows, the split ring for 256-byte rows). fp8 V: m-rows
 * g and g + 8 of a 16-dim m-tile of O^T are dims 2g and 2g + 1. transposed_keys16 is also the page
 * kernel's step (decode_page.cuh). */
#ifndef IGNIS_CUDA_DECODE_TRANSPOSED_CUH
#define IGNIS_CUDA_DECODE_TRANSPOSED_CUH

#include "cuda/attention/decode_common.cuh"

/* Transposed kernel: dim of accumulator o[j][e] (m-tile j of O^T) for lane g. 16-bit: m-rows g and
 * g + 8 are dims g, g + 8 of the 16-dim tile; fp8: dims 2g and 2g + 1 (the byte order of a V
 * fragment, see the header). */
template <bool FP8> __device__ __forceinline__ int transposed_dim(int j, int e, int g) {
  return FP8 ? 16 * j + 2 * g + (e >> 1) : 16 * j + g + 8 * (e >> 1);
}

/* The transposed kernel's epilogue, one warp: sums l over the lanes of each row, then stores O
 * (rows 2t, 2t + 1 of the lanes g; dims as transposed_dim) as f32 rows of o_stride into wo and the
 * rows' m and l into wm, wl (store: false keeps only the sums, as an idle warp does). */
template <bool FP8, int OTILES>
__device__ __forceinline__ void store_transposed_rows(const float (&o)[OTILES][4], const float (&m)[2],
                                                      float (&l)[2], bool store, float *wo, int o_stride,
                                                      float *wm, float *wl) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 4);
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 8);
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 16);
  }
  if (!store)
    return;
#pragma unroll
  for (int j = 0; j < OTILES; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      wo[(2 * t + (e & 1)) * o_stride + transposed_dim<FP8>(j, e, g)] = o[j][e];
  if (g == 0) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      wm[2 * t + h2] = m[h2];
      wl[2 * t + h2] = l[h2];
    }
  }
}

/* ---- 16 keys of the transposed kernel ----------------------------------------------------------- */
/* One warp's S^T = K Q^T, online softmax and O^T += V^T P^T over keys key0 .. key0 + 15 of a K and
 * a V tile (rows of ROW_BYTES, 16-byte chunks XOR-swizzled by SWIZZLE); key_abs0: the position of
 * key key0; key_bits: bit i set when key key0 + i is on a good page. after_scores() runs once the
 * K fragments are read (the split ring issues its next V copy there). */
template <int KIND, int HEAD_DIM, bool ROPE, int ROW_BYTES, int SWIZZLE, typename AfterScores>
__device__ __forceinline__ void transposed_keys16(const ignis_decode_params &p, const decode_config &c,
                                                  const query_frags<HEAD_DIM, ROPE, true> &q, uint32_t k_tile,
                                                  uint32_t v_tile, int key0, int key_abs0, uint32_t key_bits,
                                                  bool row_masks, float (&o)[HEAD_DIM / 16][4], float (&m)[2],
                                                  float (&l)[2], AfterScores after_scores) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  constexpr bool BF16 = KIND == KV_BF16;
  typedef typename mma_type<KIND>::type MT;
  constexpr int KSTEPS = HEAD_DIM / 16, OTILES = HEAD_DIM / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const int mi = lane >> 3, mrow = lane & 7;
  /* S^T = K Q^T: A = K (the sub-tile's 16 keys x the 16 dims of a k-step), B = Q^T; element e
   * of s: key key0 + g + 8 (e >> 1), score row 2t + (e & 1). Even and odd k-steps accumulate
   * apart (two chains of dependent mma instead of one). */
  float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  /* A fragments of k-steps kk, kk + 1 (fp8: one ldmatrix) or kk (16-bit): {key g: e0 e1,
   * key g+8: e0 e1, key g: e2 e3, key g+8: e2 e3}, e the dims of frag_dim */
  auto load_k = [&](int kk, uint32_t(&ka)[2][4]) {
    if constexpr (!FP8) {
      ldmatrix_x4(k_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, 2 * kk + (mi >> 1)),
                  ka[0]);
    } else {
      /* x[2i], x[2i + 1]: keys g, g + 8 (dims 4t..4t+3 of 16-dim chunk kk + i) */
      uint32_t x[4];
      ldmatrix_x4(k_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, kk + (mi >> 1)), x);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        fp8x4_to_f16x2x2<KIND>(x[2 * i], ka[i][0], ka[i][2]);
        fp8x4_to_f16x2x2<KIND>(x[2 * i + 1], ka[i][1], ka[i][3]);
      }
    }
  };
  constexpr int KSTEP_LOAD = FP8 ? 2 : 1; /* k-steps one load_k covers */
  if constexpr (!ROPE) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
      uint32_t ka[2][4];
      load_k(kk, ka);
#pragma unroll
      for (int i = 0; i < KSTEP_LOAD; ++i)
        mma16816<BF16>(s2[(kk + i) & 1], ka[i], q.qa[kk + i][0], q.qa[kk + i][1]);
    }
  } else {
    /* all k-steps first: RoPE pairs dims d and d + HEAD_DIM / 2 (k-steps kk and kk + KSTEPS / 2) */
    uint32_t kall[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
      uint32_t ka[2][4];
      load_k(kk, ka);
#pragma unroll
      for (int i = 0; i < KSTEP_LOAD; ++i)
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4)
          kall[kk + i][q4] = ka[i][q4];
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) { /* key g + 8n: registers n (e0 e1) and n + 2 (e2 e3) */
      float kf[KSTEPS][4];
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        ignis_unpack_word<MT>(kall[kk][n], &kf[kk][0]);
        ignis_unpack_word<MT>(kall[kk][n + 2], &kf[kk][2]);
      }
      rotate_halves<KSTEPS>(kf, q.kfreq, (float)(key_abs0 + n * 8 + g));
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        kall[kk][n] = ignis_pack_word<MT>(&kf[kk][0]);
        kall[kk][n + 2] = ignis_pack_word<MT>(&kf[kk][2]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
      mma16816<BF16>(s2[kk & 1], kall[kk], q.qa[kk][0], q.qa[kk][1]);
  }
  float s[4];
#pragma unroll
  for (int e = 0; e < 4; ++e)
    s[e] = s2[0][e] + s2[1][e];
  after_scores();

  /* scores (base 2) and masks; the key of element e is bit g + 8 (e >> 1) of bits */
  const uint32_t bits = key_bits >> g;
  if (!c.transform && !row_masks) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[e] = (bits >> (8 * (e >> 1))) & 1u ? s[e] * q.row_scale[e & 1] : -CUDART_INF_F;
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[e] = general_score(p, c, q, s[e], e & 1, key_abs0 + g + 8 * (e >> 1), (bits >> (8 * (e >> 1))) & 1u,
                           row_masks);
  }
  /* online softmax by score row, a column of S^T: its 16 keys are elements h2 and h2 + 2 of
   * the 8 lanes g (same t) */
  float pr[4], rescales[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float mx = fmaxf(s[h2], s[h2 + 2]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float m_use = online_max<true>(m[h2], mx, &rescales[h2]);
    pr[h2] = exp2_approx(s[h2] - m_use);
    pr[h2 + 2] = exp2_approx(s[h2 + 2] - m_use);
    l[h2] = fmaf(l[h2], rescales[h2], pr[h2] + pr[h2 + 2]);
  }
  /* P^T as the B fragment of V^T P^T (keys 2t, 2t+1 | 2t+8, 2t+9 of row g): each 8-key half of
   * the C fragment (key g | g+8 of rows 2t, 2t+1) transposed across the warp */
  const uint32_t pb0 = movmatrix_trans(ignis_pack_word<MT>(&pr[0]));
  const uint32_t pb1 = movmatrix_trans(ignis_pack_word<MT>(&pr[2]));
  rescale_rows<true>(o, rescales);

  /* O^T += V^T P^T: A = V^T (16 dims x the 16 keys) by ldmatrix.trans; o[j][e] is score row
   * 2t + (e & 1) of dim transposed_dim(j, e) */
  if constexpr (!FP8) {
#pragma unroll
    for (int j = 0; j < OTILES; ++j) {
      uint32_t va[4]; /* dims g | g+8 of keys 2t, 2t+1 | 2t+8, 2t+9 */
      ldmatrix_x4_trans(v_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi >> 1) * 8, 2 * j + (mi & 1)),
                        va);
      mma16816<BF16>(o[j], va, pb0, pb1);
    }
  } else {
#pragma unroll
    for (int cc = 0; cc < ROW_BYTES / 16; cc += 2) {
      uint32_t x[4]; /* x[2 half], x[2 half + 1]: keys 0-7, 8-15 of 16-dim chunk cc + half */
      ldmatrix_x4_trans(v_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, cc + (mi >> 1)), x);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        /* bytes {key 2t: dims 2g, 2g+1; key 2t+1: dims 2g, 2g+1} -> {dim 2g: keys 2t, 2t+1;
         * dim 2g+1: keys 2t, 2t+1}: m-row g is dim 2g, m-row g+8 dim 2g+1 */
        const uint32_t first = __byte_perm(x[2 * half], 0, 0x3120);
        const uint32_t second = __byte_perm(x[2 * half + 1], 0, 0x3120);
        uint32_t va[4];
        fp8x4_to_f16x2x2<KIND>(first, va[0], va[1]);
        fp8x4_to_f16x2x2<KIND>(second, va[2], va[3]);
        mma16816<false>(o[cc + half], va, pb0, pb1);
      }
    }
  }
}

#endif
