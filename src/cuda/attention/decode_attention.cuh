/* decode_attention_kernel: the m16 kernel and, with TRANSPOSED, the transposed kernel (decode.cu
 * takes the transposed one for blocks of at most DECODE_TRANSPOSED_ROWS query rows). One body for
 * the two: they share the block's walk over its keys (the item, the ring of key tiles, the page
 * lookups, the end of a pass), and two kernels with that walk as shared functions compiled to other
 * code (registers and instruction counts of most instances moved; notes/PERF.md).
 *
 * m16: tensor cores, mma.sync m16n8k16 with f32 accumulators. The R = q_len * group query rows of
 * a block (row r: token r / group, head r % group of the group) are packed into the M dimension, 16
 * rows per m-tile. The 4 warps are (m-tiles of a pass) x (key splits): a warp owns one m-tile and
 * takes every ksplit-th 16-key sub-tile of each tile; its S = Q K^T (Q fragments in registers for
 * the whole run, K fragments by ldmatrix), online softmax in base 2 on the S fragments, P converted
 * to the 16-bit type in registers and O += P V (V fragments by ldmatrix.trans). The key splits are
 * merged through shared memory at the end of a pass; groups with more m-tiles than warps run
 * several passes over the keys. fp8 V: the transposed b16 lane holds dims 2g, 2g+1 of two keys,
 * split by a byte permute into an even-dim and an odd-dim n-tile.
 *
 * Transposed: each warp takes one 16-key sub-tile of every tile and runs transposed_keys16 on it
 * (decode_transposed.cuh); split requests of a planned schedule merge inside the kernel. */
#ifndef IGNIS_CUDA_DECODE_ATTENTION_CUH
#define IGNIS_CUDA_DECODE_ATTENTION_CUH

#include "cuda/attention/decode_common.cuh"
#include "cuda/attention/decode_transposed.cuh"

/* Blocks per SM the register allocation must allow (__launch_bounds__), where the shared-memory ring
 * would allow them (decode_tile): without RoPE, at head dim <= 128 4 for the transposed kernel and 3
 * for the m16 one, and 3 for the transposed kernel over fp8 K/V at head dim 256 (its 256-byte rows
 * are those of 16-bit head dim 128). Left alone the compiler takes a few registers more once the
 * implicit schedule's item arithmetic is in the kernel (128 -> 166 for the transposed one at head
 * dim 128 with 16-bit K/V: one block fewer per SM, B64 L4k decode 8% slower); at these bounds nothing
 * spills but the m16 kernel's 16 bytes. Other shapes are bounded by shared memory or registers
 * anyway: no bound. */
template <int KIND, int HEAD_DIM, bool ROPE, bool TRANSPOSED>
constexpr int decode_min_blocks() {
  return ROPE                  ? 1
         : HEAD_DIM <= 128     ? (TRANSPOSED ? 4 : 3)
         : TRANSPOSED && HEAD_DIM == 256 && (KIND == KV_E4M3 || KIND == KV_E5M2) ? 3
                               : 1;
}

template <typename QT, int KIND, int HEAD_DIM, bool ROPE, bool TRANSPOSED>
__global__ void __launch_bounds__(DECODE_THREADS, (decode_min_blocks<KIND, HEAD_DIM, ROPE, TRANSPOSED>()))
    decode_attention_kernel(const ignis_decode_params p, const decode_config c) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  constexpr bool BF16 = KIND == KV_BF16;
  constexpr int KV_BYTES = FP8 ? 1 : 2;
  typedef decode_tile<HEAD_DIM, KV_BYTES, TRANSPOSED> tile;
  typedef typename mma_type<KIND>::type MT;
  /* DSPLIT: the warps split the head dim (decode_tile); KT keys per tile */
  constexpr int DSPLIT = tile::DSPLIT, KT = tile::KT;
  constexpr int KSTEPS = HEAD_DIM / 16 / DSPLIT; /* k-steps of Q K^T (S^T = K Q^T) of a warp */
  /* O accumulator tiles of a warp: n-tiles of 8 dims of P V, or m-tiles of 16 dims of V^T P^T */
  constexpr int OTILES = TRANSPOSED ? HEAD_DIM / 16 : HEAD_DIM / 8 / DSPLIT;
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(decode_smem);
  const char **rows_at =
      reinterpret_cast<const char **>(decode_smem + tile::RING_BYTES); /* [slot][key][K, V] */
  uint32_t *valid_bits = reinterpret_cast<uint32_t *>(decode_smem + tile::RING_BYTES + tile::SLOTS * KT * 16);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kvh = (int)(blockIdx.x % (unsigned)p.num_kv_heads);
  const int64_t work_index = blockIdx.x / (unsigned)p.num_kv_heads;
  /* DSPLIT: one m-tile per pass, warp = its dim part, no key split */
  const int mt_warps = DSPLIT > 1 ? 1 : c.mt_warps, ksplit = DSPLIT > 1 ? 1 : c.ksplit;
  const int mt_slot = warp % mt_warps, ks = DSPLIT > 1 ? 0 : warp / mt_warps, dpart = DSPLIT > 1 ? warp : 0;

  /* the item comes from the schedule before the wait on the previous kernel: the plan's copy of
   * it lands before any kernel this launch can overlap (its key range too would cost registers,
   * notes/PERF.md) */
  ignis_decode_work item;
  kv_range r;
  __shared__ length_plan_found planned; /* c.block_plan: the item and its request's partial rows */
  bool fetched;
  if (c.block_plan) { /* the block plans the batch itself (and waits on the previous kernel); block 0
                         writes request_partials for the merge kernel (m16) */
    fetched = decode_length_item<DECODE_THREADS>(
        p, (int)work_index, reinterpret_cast<int32_t *>(decode_smem), &planned,
        !c.fused_merge && blockIdx.x == 0 ? const_cast<int32_t *>(p.request_partials) : nullptr);
    item = planned.item;
  } else {
    fetched = fetch_item(p, c, (int)work_index, &item);
    ignis_pdl_wait();
  }
  if (!fetched || !item_range(p, item, &r))
    return;
  const int num_tiles = (r.end - r.start + KT - 1) / KT;
  const bool row_masks = p.q_len > 1 || p.window_left >= 0;
  const char *k_base = static_cast<const char *>(p.cache.k_cache) + kvh * p.cache.k_stride_head * KV_BYTES;
  const char *v_base = static_cast<const char *>(p.cache.v_cache) + kvh * p.cache.v_stride_head * KV_BYTES;

  /* Page of key `start + tile * KT + tid` (threads 0..KT-1), -1 when masked. */
  auto lookup_page = [&](int tl) -> int32_t {
    const int64_t j = (int64_t)r.start + (int64_t)tl * KT + tid;
    return j < r.end ? page_of_key(p, r, (int32_t)j) : -1;
  };
  /* Addresses of that key's K and V rows (NULL when masked) and the tile's validity bits. */
  auto store_rows = [&](int tl, int32_t page) {
    const int64_t j = (int64_t)r.start + (int64_t)tl * KT + tid;
    const char *kp = nullptr, *vp = nullptr;
    if (page >= 0) {
      const int64_t slot = (uint32_t)j % (uint32_t)r.page_size;
      kp = k_base + (page * p.cache.k_stride_page + slot * p.cache.k_stride_token) * KV_BYTES;
      vp = v_base + (page * p.cache.v_stride_page + slot * p.cache.v_stride_token) * KV_BYTES;
    }
    const int at = tl % tile::SLOTS;
    rows_at[(at * KT + tid) * 2] = kp;
    rows_at[(at * KT + tid) * 2 + 1] = vp;
    const uint32_t bits = __ballot_sync(0xffffffffu, page >= 0);
    if ((tid & 31) == 0)
      valid_bits[at * (KT / 32) + tid / 32] = bits;
  };
  /* Copies of tile tl into its stage: thread tid copies chunk tid % CHUNKS of rows
   * tid / CHUNKS + i * (THREADS / CHUNKS). When the row step is a multiple of the swizzle period
   * the swizzle is the same for all of a thread's rows. */
  const int copy_chunk = tid % tile::CHUNKS, copy_row0 = tid / tile::CHUNKS;
  constexpr int ROW_STEP = DECODE_THREADS / tile::CHUNKS;
  constexpr bool ONE_SWIZZLE = ROW_STEP % (tile::SWIZZLE + 1) == 0;
  /* shared-memory K and V tiles of tile tl */
  auto k_tile_of = [&](int tl) -> uint32_t {
    return smem_base + (tile::SPLIT ? (2 * tl) % 3 : (tl % tile::STAGES) * 2) * tile::TILE_BYTES;
  };
  auto v_tile_of = [&](int tl) -> uint32_t {
    return smem_base + (tile::SPLIT ? (2 * tl + 1) % 3 : (tl % tile::STAGES) * 2 + 1) * tile::TILE_BYTES;
  };
  /* copy_k, copy_v: which of the two (both outside the split ring) */
  auto issue_tile = [&](int tl, bool copy_k, bool copy_v) {
    const uint32_t k_tile = k_tile_of(tl), v_tile = v_tile_of(tl);
    const char *const *at = rows_at + (size_t)(tl % tile::SLOTS) * KT * 2;
#pragma unroll
    for (int i = 0; i < tile::ROWS_PER_THREAD; ++i) {
      const int row = copy_row0 + i * ROW_STEP;
      const uint32_t dst = ONE_SWIZZLE ? swizzled<tile::ROW_BYTES, tile::SWIZZLE>(copy_row0, copy_chunk) +
                                             i * ROW_STEP * tile::ROW_BYTES
                                       : swizzled<tile::ROW_BYTES, tile::SWIZZLE>(row, copy_chunk);
      const char *kp = at[row * 2], *vp = at[row * 2 + 1];
      const bool ok = kp != nullptr;
      if (copy_k)
        copy_async16(k_tile + dst, ok ? kp + copy_chunk * 16 : k_base, ok);
      if (copy_v)
        copy_async16(v_tile + dst, ok ? vp + copy_chunk * 16 : v_base, ok);
    }
  };

  for (int pass_base = 0; pass_base < c.mtiles; pass_base += mt_warps) {
    const int mt = pass_base + mt_slot;
    const bool active = mt < c.mtiles;

    query_frags<HEAD_DIM, ROPE, TRANSPOSED, DSPLIT> q;
    load_query<QT, KIND, HEAD_DIM, ROPE, TRANSPOSED, DSPLIT>(p, c, item, r, kvh, mt, active, q, dpart);
    const auto &qa = q.qa;
    const auto &row_scale = q.row_scale;
    const auto &kfreq = q.kfreq;

    float o[OTILES][4];
#pragma unroll
    for (int j = 0; j < OTILES; ++j)
      o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};

    /* prologue: row addresses of tiles 0..STAGES-1, copies of tiles 0..STAGES-2, page of tile STAGES */
    if (tid < KT)
      for (int tl = 0; tl < tile::STAGES; ++tl)
        store_rows(tl, tl < num_tiles ? lookup_page(tl) : -1);
    __syncthreads();
    if constexpr (tile::SPLIT) { /* K and V of tile 0, apart */
      if (num_tiles > 0)
        issue_tile(0, true, false);
      copy_async_commit();
      if (num_tiles > 0)
        issue_tile(0, false, true);
      copy_async_commit();
    } else {
#pragma unroll
      for (int tl = 0; tl < tile::STAGES - 1; ++tl) {
        if (tl < num_tiles)
          issue_tile(tl, true, true);
        copy_async_commit();
      }
    }
    /* pages of tiles STAGES .. STAGES + LOOKAHEAD - 1, loaded LOOKAHEAD iterations before use so
     * that a page-table read never holds up an iteration, even when loads queue behind the stream */
    int32_t pending[DECODE_LOOKAHEAD];
#pragma unroll
    for (int i = 0; i < DECODE_LOOKAHEAD; ++i)
      pending[i] = tid < KT && tile::STAGES + i < num_tiles ? lookup_page(tile::STAGES + i) : -1;

    for (int tl = 0; tl < num_tiles; ++tl) {
      /* split ring: K of tile tl is in (V may not be) and every warp is done with tile tl - 1 */
      copy_async_wait<tile::SPLIT ? 1 : tile::STAGES - 2>();
      __syncthreads();
      if (tl + tile::STAGES - 1 < num_tiles)
        issue_tile(tl + tile::STAGES - 1, true, !tile::SPLIT);
      copy_async_commit();
      if (tid < KT && tl + tile::STAGES < num_tiles) {
        store_rows(tl + tile::STAGES, pending[0]);
#pragma unroll
        for (int i = 0; i + 1 < DECODE_LOOKAHEAD; ++i)
          pending[i] = pending[i + 1];
        pending[DECODE_LOOKAHEAD - 1] = tl + tile::STAGES + DECODE_LOOKAHEAD < num_tiles
                                            ? lookup_page(tl + tile::STAGES + DECODE_LOOKAHEAD)
                                            : -1;
      }
      if (!active)
        continue;

      const uint32_t k_tile = k_tile_of(tl), v_tile = v_tile_of(tl);
      const uint32_t *tile_valid = valid_bits + (tl % tile::SLOTS) * (KT / 32);
      const int tile_key0 = r.start + tl * KT;
      /* transposed: one m-tile, so each warp takes exactly one sub-tile (the split ring's barrier
       * inside relies on it) */
      for (int sub = ks; sub < KT / 16; sub += TRANSPOSED ? DECODE_WARPS : ksplit) {
        const int key0 = sub * 16;
        const int mi = lane >> 3, mrow = lane & 7;
        if constexpr (TRANSPOSED) {
          transposed_keys16<KIND, HEAD_DIM, ROPE, tile::ROW_BYTES, tile::SWIZZLE>(
              p, c, q, k_tile, v_tile, key0, tile_key0 + key0,
              (tile_valid[key0 >> 5] >> (key0 & 31)) & 0xffffu, row_masks, o, m, l, [&] {
                if constexpr (tile::SPLIT) {
                  /* every warp has read K of tile tl (each takes one sub-tile: rows <= 8 is one m-tile
                   * and 4 key splits): its slot takes V of tile tl + 1, once V of tile tl is in */
                  copy_async_wait<1>();
                  __syncthreads();
                  if (tl + 1 < num_tiles)
                    issue_tile(tl + 1, false, true);
                  copy_async_commit();
                }
              });
        } else {
          float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
          /* K fragments of k-steps kk, kk + 1 (fp8: one ldmatrix) or kk (16-bit): kb[i][n] = {b0b1, b2b3}
           * of n-tile n (keys key0 + 8n .. +7) */
          auto load_k = [&](int kk, uint32_t(&kb)[2][2][2]) {
            uint32_t x[4];
            if constexpr (!FP8) {
              ldmatrix_x4(k_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi >> 1) * 8,
                                                                            2 * kk + (mi & 1)),
                          x);
              kb[0][0][0] = x[0];
              kb[0][0][1] = x[1];
              kb[0][1][0] = x[2];
              kb[0][1][1] = x[3];
            } else {
              ldmatrix_x4(k_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi & 1) * 8,
                                                                            kk + (mi >> 1)),
                          x);
#pragma unroll
              for (int q2 = 0; q2 < 4; ++q2) {
                fp8x4_to_f16x2x2<KIND>(x[q2], kb[q2 >> 1][q2 & 1][0], kb[q2 >> 1][q2 & 1][1]);
              }
            }
          };
          constexpr int KSTEP_LOAD = FP8 ? 2 : 1; /* k-steps one load_k covers */
          if constexpr (!ROPE) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
              uint32_t kb[2][2][2];
              load_k(qk_step<HEAD_DIM, DSPLIT>(kk, dpart), kb);
#pragma unroll
              for (int i = 0; i < KSTEP_LOAD; ++i) {
                mma16816<BF16>(s[0], qa[kk + i], kb[i][0][0], kb[i][0][1]);
                mma16816<BF16>(s[1], qa[kk + i], kb[i][1][0], kb[i][1][1]);
              }
            }
          } else {
            /* all k-steps first: RoPE pairs dims d and d + HEAD_DIM / 2 (k-steps kk and kk + KSTEPS / 2) */
            uint32_t kall[KSTEPS][2][2];
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
              uint32_t kb[2][2][2];
              load_k(qk_step<HEAD_DIM, DSPLIT>(kk, dpart), kb);
#pragma unroll
              for (int i = 0; i < KSTEP_LOAD; ++i)
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                  kall[kk + i][n][0] = kb[i][n][0];
                  kall[kk + i][n][1] = kb[i][n][1];
                }
            }
            if constexpr (DSPLIT > 1) {
              /* rotated in place, pair by pair: f32 keys of all k-steps would not fit next to the
               * head-dim split's registers */
#pragma unroll
              for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int kk = 0; kk < KSTEPS / 2; ++kk)
#pragma unroll
                  for (int w = 0; w < 2; ++w) {
                    float a[2], b[2];
                    ignis_unpack_word<MT>(kall[kk][n][w], a);
                    ignis_unpack_word<MT>(kall[kk + KSTEPS / 2][n][w], b);
#pragma unroll
                    for (int e2 = 0; e2 < 2; ++e2) {
                      float sn, co;
                      sincosf((float)(tile_key0 + key0 + n * 8 + g) * kfreq[kk][2 * w + e2], &sn, &co);
                      const float x = a[e2], y = b[e2];
                      a[e2] = x * co - y * sn;
                      b[e2] = y * co + x * sn;
                    }
                    kall[kk][n][w] = ignis_pack_word<MT>(a);
                    kall[kk + KSTEPS / 2][n][w] = ignis_pack_word<MT>(b);
                  }
            } else {
#pragma unroll
              for (int n = 0; n < 2; ++n) {
                float kf[KSTEPS][4];
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) {
                  ignis_unpack_word<MT>(kall[kk][n][0], &kf[kk][0]);
                  ignis_unpack_word<MT>(kall[kk][n][1], &kf[kk][2]);
                }
                rotate_halves<KSTEPS>(kf, kfreq, (float)(tile_key0 + key0 + n * 8 + g));
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) {
                  kall[kk][n][0] = ignis_pack_word<MT>(&kf[kk][0]);
                  kall[kk][n][1] = ignis_pack_word<MT>(&kf[kk][2]);
                }
              }
            }
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
              mma16816<BF16>(s[0], qa[kk], kall[kk][0][0], kall[kk][0][1]);
              mma16816<BF16>(s[1], qa[kk], kall[kk][1][0], kall[kk][1][1]);
            }
          }

          if constexpr (DSPLIT > 1) {
            /* the warps' partial scores (their dims) summed in one order, so every warp holds the
             * same S; buffer sub & 1: the next write to it follows the tile's barrier */
            float *xs =
                reinterpret_cast<float *>(decode_smem + tile::XS_OFFSET) + (sub & 1) * DECODE_WARPS * 32 * 8;
            float4 *mine = reinterpret_cast<float4 *>(xs + (warp * 32 + lane) * 8);
            mine[0] = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
            mine[1] = make_float4(s[1][0], s[1][1], s[1][2], s[1][3]);
            __syncthreads();
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                float sum = 0.0f;
#pragma unroll
                for (int w = 0; w < DSPLIT; ++w)
                  sum += xs[(w * 32 + lane) * 8 + n * 4 + e];
                s[n][e] = sum;
              }
          }

          /* scores (base 2) and masks; element (n, e): row g + 8 * (e >> 1), key key0 + 8n + 2t + (e & 1) */
          const uint32_t bits = tile_valid[key0 >> 5] >> ((key0 & 31) + 2 * t);
          if (!c.transform && !row_masks) {
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                s[n][e] = (bits >> (n * 8 + (e & 1))) & 1u ? s[n][e] * row_scale[e >> 1] : -CUDART_INF_F;
          } else {
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const bool ok = (bits >> (n * 8 + (e & 1))) & 1u;
                s[n][e] = general_score(p, c, q, s[n][e], e >> 1, tile_key0 + key0 + n * 8 + 2 * t + (e & 1),
                                        ok, row_masks);
              }
          }
          uint32_t pa[4];
          float rescales[2];
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            float mx = fmaxf(fmaxf(s[0][2 * h2], s[0][2 * h2 + 1]), fmaxf(s[1][2 * h2], s[1][2 * h2 + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_use = online_max<true>(m[h2], mx, &rescales[h2]);
            float pr[2][2];
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                pr[n][e] = exp2_approx(s[n][2 * h2 + e] - m_use);
            l[h2] = fmaf(l[h2], rescales[h2], (pr[0][0] + pr[0][1]) + (pr[1][0] + pr[1][1]));
            pa[h2] = ignis_pack_word<MT>(pr[0]);
            pa[2 + h2] = ignis_pack_word<MT>(pr[1]);
          }
          rescale_rows<false>(o, rescales);

          /* O += P V */
          if constexpr (!FP8) {
#pragma unroll
            for (int j = 0; j < OTILES; j += 2) {
              uint32_t x[4];
              ldmatrix_x4_trans(v_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(
                                             key0 + mrow + (mi & 1) * 8, dpart * OTILES + j + (mi >> 1)),
                                x);
              mma16816<BF16>(o[j], pa, x[0], x[1]);
              mma16816<BF16>(o[j + 1], pa, x[2], x[3]);
            }
          } else {
#pragma unroll
            for (int cc = 0; cc < tile::CHUNKS / DSPLIT; cc += 2) {
              uint32_t x[4];
              ldmatrix_x4_trans(
                  v_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(
                               key0 + mrow + (mi & 1) * 8, dpart * (tile::CHUNKS / DSPLIT) + cc + (mi >> 1)),
                  x);
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                /* bytes {key 2t: dims 2g, 2g+1; key 2t+1: dims 2g, 2g+1} -> even dims, odd dims */
                const uint32_t lo = __byte_perm(x[2 * half], 0, 0x3120),
                               hi = __byte_perm(x[2 * half + 1], 0, 0x3120);
                const int tile_even = 2 * (cc + half);
                uint32_t lo01, lo23, hi01, hi23;
                fp8x4_to_f16x2x2<KIND>(lo, lo01, lo23);
                fp8x4_to_f16x2x2<KIND>(hi, hi01, hi23);
                mma16816<false>(o[tile_even], pa, lo01, hi01);
                mma16816<false>(o[tile_even + 1], pa, lo23, hi23);
              }
            }
          }
        }
      }
    }
    copy_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring: reuse it for the split merge */

    /* each warp leaves its O (f32, by dim), m and l (summed over the lanes of a row) in shared memory */
    float *merge_o = reinterpret_cast<float *>(decode_smem);
    float *merge_m = merge_o + DECODE_WARPS / DSPLIT * 16 * tile::O_STRIDE,
          *merge_l = merge_m + DECODE_WARPS * 16;
    /* DSPLIT: one slot, the warp's dims of it */
    float *wo =
        DSPLIT > 1 ? merge_o + dpart * (HEAD_DIM / DSPLIT) : merge_o + (size_t)warp * 16 * tile::O_STRIDE;
    if constexpr (TRANSPOSED) { /* rows 2t, 2t + 1 of the lanes g */
      store_transposed_rows<FP8>(o, m, l, active, wo, tile::O_STRIDE, merge_m + warp * 16,
                                 merge_l + warp * 16);
    } else { /* rows g, g + 8 of the quads */
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
      }
      if (active) {
#pragma unroll
        for (int j = 0; j < OTILES; ++j)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            float *at = wo + (g + h2 * 8) * tile::O_STRIDE;
            if constexpr (FP8) { /* dims 4t + (j & 1) and that + 2 of 16-dim chunk j / 2 */
              at[16 * (j >> 1) + 4 * t + (j & 1)] = o[j][2 * h2];
              at[16 * (j >> 1) + 4 * t + (j & 1) + 2] = o[j][2 * h2 + 1];
            } else {
              *reinterpret_cast<float2 *>(at + 8 * j + 2 * t) = make_float2(o[j][2 * h2], o[j][2 * h2 + 1]);
            }
          }
        if (t == 0 && dpart == 0) {
          merge_m[warp * 16 + g] = m[0];
          merge_m[warp * 16 + g + 8] = m[1];
          merge_l[warp * 16 + g] = l[0];
          merge_l[warp * 16 + g + 8] = l[1];
        }
      }
    }
    __syncthreads();
    ignis_pdl_launch_dependents();

    /* combine the key splits and write: one thread per (m-tile slot, row, 8 dims) */
    constexpr int PIECES = HEAD_DIM / 8;
    for (int idx = tid; idx < mt_warps * 16 * PIECES; idx += DECODE_THREADS) {
      const int slot = idx / (16 * PIECES), row16 = (idx / PIECES) % 16, d0 = (idx % PIECES) * 8;
      const int row = (pass_base + slot) * 16 + row16;
      if (pass_base + slot >= c.mtiles || row >= c.rows)
        continue;
      float mx = -CUDART_INF_F;
      for (int s2 = 0; s2 < ksplit; ++s2)
        mx = fmaxf(mx, merge_m[(s2 * mt_warps + slot) * 16 + row16]);
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
      if (mx != -CUDART_INF_F) {
        for (int s2 = 0; s2 < ksplit; ++s2) {
          const int w = s2 * mt_warps + slot;
          const float wt = exp2f(merge_m[w * 16 + row16] - mx);
          sum = fmaf(merge_l[w * 16 + row16], wt, sum);
          const float4 *src =
              reinterpret_cast<const float4 *>(merge_o + ((size_t)w * 16 + row16) * tile::O_STRIDE + d0);
          const float4 lo = src[0], hi = src[1];
          const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int e = 0; e < 8; ++e)
            acc[e] = fmaf(x[e], wt, acc[e]);
        }
      }
      const int tok = row / c.group;
      const int64_t h = (int64_t)kvh * c.group + row % c.group;
      /* a whole request writes out (the sink joins here), a chunk its partial row */
      write_merged_row<QT, HEAD_DIM, 8>(p, acc, sum, mx, p.v_scale, d0, item.partial < 0,
                                        (int64_t)item.request * p.q_len + tok, h,
                                        ((int64_t)item.partial * p.q_len + tok) * p.num_qo_heads + h);
    }
    __syncthreads();
  }
  /* the m16 kernel keeps the merge kernel: the merge code inlined there costs it registers and a
   * block per SM (notes/PERF.md) */
  if constexpr (TRANSPOSED)
    if (c.fused_merge && item.partial >= 0)
      merge_in_kernel<QT, HEAD_DIM, 1>(p, c, item, kvh, planned.rows);
}

#endif
