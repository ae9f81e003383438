/* The page decode kernel (sm_90): for 16-bit K/V at head dim 128 with 8 KV heads in NHD order,
 * pages of a multiple of 16 tokens, and rows for the transposed kernel, the common shape of
 * Llama-style models; decode.cu launches it when the plan chose it (op_decode.c: automatic splits,
 * a batch it need not split and that fills its waves). A block is a work item for all 8 KV heads,
 * one per SM: 8 consumer warps (a head each) and a producer warp. Each stage is 16 tokens of one
 * page for all 8 heads, which NHD keeps as one 32 KB run for K and one for V: two bulk copies
 * (cp.async.bulk, completing on an mbarrier) into a 2-slot ring; runs of that size stream at the
 * rate of contiguous K/V, the 4 KB runs per head and page of the other kernels do not
 * (notes/PERF.md). In the ring a head's 16 rows lie 2 KB apart (one bank group), so each consumer
 * warp first copies its head's K and V rows into a private swizzled 16-key tile (zeroing the rows
 * of masked keys), releases the slot (an empty mbarrier of 256 arrivals: every consumer lane
 * releases its own reads), and runs the transposed kernel's 16-key step on it (transposed_keys16).
 * Each warp owns its head's rows outright, so its epilogue writes out or the partial row with no
 * key-split merge; a split item (a CUDA-graph replay of a later plan, or
 * IGNIS_DECODE_PAGE_KERNEL=always) merges inside the kernel, each consumer warp on its own head's
 * counters. Its planner counts the block as 8 (item, head) blocks. */
#ifndef IGNIS_CUDA_DECODE_PAGE_CUH
#define IGNIS_CUDA_DECODE_PAGE_CUH

#include "cuda/attention/decode_transposed.cuh"

/* Shape of decode_page_kernel (see the header): 8 consumer warps (a KV head each) and a producer
 * warp; a ring of PAGE_STAGES slots, each the K and the V of 16 tokens x 8 heads as they lie in the
 * cache (two 32 KB bulk copies); a private 16-key K and V tile per consumer warp, swizzled as the
 * transposed kernel's tiles. One block per SM. */
enum {
  PAGE_HEADS = 8,
  PAGE_TOKENS = 16,
  PAGE_STAGES = 2,
  PAGE_THREADS = (PAGE_HEADS + 1) * 32,
  PAGE_ROW_BYTES = 256, /* head dim 128, 16-bit */
  PAGE_KV_BYTES = PAGE_TOKENS * PAGE_HEADS * PAGE_ROW_BYTES,
  PAGE_TILE_BYTES = PAGE_TOKENS * PAGE_ROW_BYTES,
  PAGE_O_STRIDE = 128 + 8, /* f32 O rows of the epilogue, in a warp's private tiles */
  PAGE_PRIVATE_OFFSET = PAGE_STAGES * 2 * PAGE_KV_BYTES,
  PAGE_BAR_OFFSET = PAGE_PRIVATE_OFFSET + PAGE_HEADS * 2 * PAGE_TILE_BYTES,
  PAGE_SMEM_BYTES = PAGE_BAR_OFFSET + 2 * PAGE_STAGES * 8 + PAGE_STAGES * 4
};
/* Whether the page kernel has an instance for K/V of kv_kind at head_dim (the rest of its shape is
 * checked on the host, decode.cu). */
constexpr bool decode_page_takes(int kv_kind, int head_dim) {
  return head_dim == 128 && (kv_kind == KV_F16 || kv_kind == KV_BF16);
}
static_assert(DECODE_TRANSPOSED_ROWS * PAGE_O_STRIDE * 4 + 2 * DECODE_TRANSPOSED_ROWS * 4 <=
                  2 * PAGE_TILE_BYTES,
              "page kernel epilogue space");

template <typename QT, int KIND, bool ROPE>
__global__ void __launch_bounds__(PAGE_THREADS, 1)
    decode_page_kernel(const ignis_decode_params p, const decode_config c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int HEAD_DIM = 128;
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const uint32_t smem = (uint32_t)__cvta_generic_to_shared(decode_smem);
  const uint32_t full0 = smem + PAGE_BAR_OFFSET, empty0 = full0 + PAGE_STAGES * 8;
  uint32_t *valid = reinterpret_cast<uint32_t *>(decode_smem + PAGE_BAR_OFFSET + 2 * PAGE_STAGES * 8);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  ignis_decode_work item;
  kv_range r;
  const bool fetched = fetch_item(p, c, (int)blockIdx.x, &item);
  if (tid == 0) {
    for (int s = 0; s < PAGE_STAGES; ++s) {
      ignis_mbar_init(full0 + 8 * s, 1);
      ignis_mbar_init(empty0 + 8 * s, PAGE_HEADS * 32); /* every consumer lane releases its own reads */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  ignis_pdl_wait();
  if (!fetched || !item_range(p, item, &r))
    return; /* the whole block */
  /* stages: 16 keys from key0 = s0 + 16 s, inside one page (page size a multiple of 16) */
  const int32_t s0 = r.start & ~(PAGE_TOKENS - 1);
  const int stages = r.end > r.start ? (r.end - s0 + PAGE_TOKENS - 1) / PAGE_TOKENS : 0;

  if (warp == PAGE_HEADS) { /* producer */
    const char *k_cache = static_cast<const char *>(p.cache.k_cache);
    const char *v_cache = static_cast<const char *>(p.cache.v_cache);
    /* pages of stages (s & ~31) + lane and 32 later, read a window ahead */
    auto page_of_stage = [&](int st) { return st < stages ? page_of_key(p, r, s0 + st * PAGE_TOKENS) : -1; };
    int32_t lane_page = page_of_stage(lane), next_page = page_of_stage(32 + lane);
    for (int s = 0; s < stages; ++s) {
      if (s > 0 && (s & 31) == 0) {
        lane_page = next_page;
        next_page = page_of_stage(s + 32 + lane);
      }
      const int32_t page = __shfl_sync(0xffffffffu, lane_page, s & 31);
      const int slot = s % PAGE_STAGES;
      if (s >= PAGE_STAGES)
        ignis_mbar_wait(empty0 + 8 * slot, (s / PAGE_STAGES - 1) & 1);
      if (lane == 0) {
        const int32_t key0 = s0 + s * PAGE_TOKENS;
        const int lo = max(r.start - key0, 0), hi = min(r.end - key0, (int32_t)PAGE_TOKENS);
        valid[slot] = page >= 0 && hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u;
        const uint32_t full = full0 + 8 * slot, dst = smem + slot * 2 * PAGE_KV_BYTES;
        if (page >= 0) {
          const int64_t token = (uint32_t)key0 % (uint32_t)r.page_size;
          ignis_mbar_arrive_expect_tx(full, 2 * PAGE_KV_BYTES);
          bulk_copy_to_shared(dst,
                              k_cache + (page * p.cache.k_stride_page + token * p.cache.k_stride_token) * 2,
                              PAGE_KV_BYTES, full);
          bulk_copy_to_shared(dst + PAGE_KV_BYTES,
                              v_cache + (page * p.cache.v_stride_page + token * p.cache.v_stride_token) * 2,
                              PAGE_KV_BYTES, full);
        } else {
          ignis_mbar_arrive(full); /* nothing to copy: the consumers zero the rows */
        }
      }
      __syncwarp();
    }
    ignis_pdl_launch_dependents();
  } else { /* consumer: KV head `warp` */
    const int kvh = warp;
    query_frags<HEAD_DIM, ROPE, true> q;
    load_query<QT, KIND, HEAD_DIM, ROPE, true>(p, c, item, r, kvh, 0, true, q);
    const bool row_masks = p.q_len > 1 || p.window_left >= 0;
    float o[HEAD_DIM / 16][4];
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 16; ++j)
      o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};
    const uint32_t k_tile = smem + PAGE_PRIVATE_OFFSET + warp * 2 * PAGE_TILE_BYTES,
                   v_tile = k_tile + PAGE_TILE_BYTES;
    for (int s = 0; s < stages; ++s) {
      const int slot = s % PAGE_STAGES;
      ignis_mbar_wait(full0 + 8 * slot, (s / PAGE_STAGES) & 1);
      const uint32_t bits = valid[slot];
      /* this head's 16 K and V rows into the private tiles (rows of masked keys as zeros): lane
       * copies chunk lane % 16 of rows 2i + lane / 16 */
      const uint32_t src = smem + slot * 2 * PAGE_KV_BYTES + kvh * PAGE_ROW_BYTES;
#pragma unroll
      for (int i = 0; i < PAGE_TOKENS / 2; ++i) {
        const int row = 2 * i + (lane >> 4), chunk = lane & 15;
        const uint32_t at = src + row * (PAGE_HEADS * PAGE_ROW_BYTES) + chunk * 16;
        const uint32_t to = swizzled<PAGE_ROW_BYTES, 7>(row, chunk);
        uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
        if ((bits >> row) & 1u) {
          kx = load_shared16(at);
          vx = load_shared16(at + PAGE_KV_BYTES);
        }
        store_shared16(k_tile + to, kx);
        store_shared16(v_tile + to, vx);
      }
      __syncwarp();
      ignis_mbar_arrive(empty0 + 8 * slot);
      transposed_keys16<KIND, HEAD_DIM, ROPE, PAGE_ROW_BYTES, 7>(
          p, c, q, k_tile, v_tile, 0, s0 + s * PAGE_TOKENS, bits, row_masks, o, m, l, [] {});
      __syncwarp();
    }
    ignis_pdl_launch_dependents();

    /* epilogue: O (rows 2t, 2t + 1 of the lanes g) through the private tiles, a lane per 8 dims of a
     * row; a whole request writes out (the sink joins there), a chunk its partial row */
    float *wo = reinterpret_cast<float *>(decode_smem + PAGE_PRIVATE_OFFSET + warp * 2 * PAGE_TILE_BYTES);
    float *wm = wo + DECODE_TRANSPOSED_ROWS * PAGE_O_STRIDE, *wl = wm + DECODE_TRANSPOSED_ROWS;
    store_transposed_rows<false>(o, m, l, true, wo, PAGE_O_STRIDE, wm, wl);
    __syncwarp();
    for (int idx = lane; idx < c.rows * (HEAD_DIM / 8); idx += 32) {
      const int row = idx / (HEAD_DIM / 8), d0 = (idx % (HEAD_DIM / 8)) * 8;
      float acc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] = wo[row * PAGE_O_STRIDE + d0 + e];
      const int tok = row / c.group;
      const int64_t h = (int64_t)kvh * c.group + row % c.group;
      write_merged_row<QT, HEAD_DIM, 8>(p, acc, wl[row], wm[row], p.v_scale, d0, item.partial < 0,
                                        (int64_t)item.request * p.q_len + tok, h,
                                        ((int64_t)item.partial * p.q_len + tok) * p.num_qo_heads + h);
    }
  }
  /* a split item: each consumer warp counts on its own head's counters and, if last, merges it */
  if (item.partial >= 0 && warp < PAGE_HEADS)
    merge_in_kernel<QT, HEAD_DIM, 2, true>(p, c, item, warp);
#endif
}

#endif
