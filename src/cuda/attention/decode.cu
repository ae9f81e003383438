/* CUDA backend of decode attention (include/ignis/decode.h): one query token per request against
 * its paged or contiguous KV cache, with the results of the CPU backend.
 *
 * Two kernels, launched back to back on the stream with ignis_launch:
 *   - decode_attention_kernel, grid (work items, KV heads): block (w, kvh) runs work item w (keys
 *     [kv_start, kv_end) of one request) for every query head of KV head kvh, so each K/V row is
 *     read from memory once for the whole GQA group. A whole request writes out / lse directly;
 *     a chunk of a split request writes an f32 partial row and its base-2 LSE.
 *   - decode_merge_kernel, grid (requests): combines the partial rows of each split request.
 *
 * Attention block: 128 threads (256 for large groups) in row groups of LANES = head_dim / 8
 * threads, each thread owning one 16-byte piece (8 elements) of a row. K and V stream through a
 * ring of DECODE_STAGES shared-memory tiles of 2 * (row groups) rows with cp.async (16-byte,
 * zero-filled where a row is masked), three tiles in flight while one is used. Each thread issues
 * the copies of two rows per tile and looks up their pages one tile ahead, so the page-table read
 * never sits on the path of a copy. Compute: the row groups are laid out as `slots` head slots x
 * `splits` key splits (splits > 1 only when the group has fewer heads than row groups); a slot
 * holds q and the output accumulators of up to DECODE_HEADS_PER_THREAD heads in registers, a split
 * takes every splits-th row of the tile. Two rows at a time: dot products reduced by shuffles
 * across the LANES threads, one online-softmax rescale per pair of rows, exp2 throughout. The key
 * splits are merged through shared memory at the end. A group larger than slots x
 * DECODE_HEADS_PER_THREAD takes several passes over the keys.
 *
 * Key range of an item: [max(kv_start, kv_len - 1 - window_left), min(kv_end, kv_len)); keys
 * outside it are never read. Page indices are bounds-checked (entry within the request's pages and
 * kv_indices, page within the cache); a key on a bad page is masked. An empty range gives out = 0,
 * lse = -inf.
 *
 * Schedule without a work list (p->work == NULL, single decode): request 0 is cut into chunks of
 * implicit_chunk_tokens(p) keys, item w being chunk w; the grid and the merge are sized on the
 * host from contiguous_kv_len, and the merge combines partial rows 0 .. items - 1. */
#include <math.h>
#include <math_constants.h>

#include "cuda/common/cuda_common.cuh"

enum {
  DECODE_STAGES = 4,           /* shared-memory tiles in the ring */
  DECODE_HEADS_PER_THREAD = 4, /* query heads one head slot holds in registers */
  DECODE_BASE_THREADS = 128,
  DECODE_MAX_THREADS = 256,
  MERGE_THREADS = 128
};

/* Launch facts derived once on the host. */
struct decode_config {
  int32_t group;          /* query heads per KV head */
  int32_t slots;          /* head slots (row groups / splits) */
  int32_t splits;         /* key splits, a power of two */
  int32_t implicit_chunk; /* work == NULL: keys per chunk of request 0 */
  int32_t implicit_items; /* work == NULL: chunks of request 0 */
  float cap_in;           /* soft cap on: base-2 score = cap_out * tanh(qk * cap_in) */
  float cap_out;          /* 0: soft cap off, score = qk * sm_scale_log2 */
};

/* Keys per chunk of the implicit single-decode schedule (work == NULL). */
static int64_t implicit_chunk_tokens(const ignis_decode_params &p) {
  return p.implicit_chunk_tokens;
}

/* ---- cp.async ---------------------------------------------------------------------------------- */
/* 16 bytes from global to shared memory; when !fill nothing is read and the destination is zeroed. */
__device__ __forceinline__ void copy_async16(void *smem_dst, const void *src, bool fill) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(fill ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ---- the keys of one work item ------------------------------------------------------------------ */
struct kv_range {
  int32_t start, end;  /* visible keys [start, end) */
  int32_t page_size;   /* contiguous keys: 2^30, so every key is on "page" 0 */
  int64_t first_entry; /* kv_indices position of the request's first page */
  int64_t entry_end;   /* one past its last page, capped by the length of kv_indices */
  bool paged;
};

/* Page of key j (start <= j < end), or -1 when its page entry or number is out of range. */
__device__ __forceinline__ int32_t page_of_key(const ignis_decode_params &p, const kv_range &r, int32_t j) {
  if (!r.paged)
    return 0;
  const int64_t entry = r.first_entry + (uint32_t)j / (uint32_t)r.page_size;
  if (entry >= r.entry_end)
    return -1;
  const int32_t page = p.cache.indices[entry];
  return page >= 0 && page < p.cache.num_pages ? page : -1;
}

/* Item w of the schedule, or false when w is past the batch's items. */
__device__ __forceinline__ bool fetch_item(const ignis_decode_params &p, const decode_config &c, int w,
                                           ignis_decode_work *item) {
  if (p.work == nullptr) {
    if (w >= c.implicit_items)
      return false;
    const int64_t start = (int64_t)w * c.implicit_chunk;
    item->request = 0;
    item->kv_start = (int32_t)start;
    item->kv_end = (int32_t)min(start + c.implicit_chunk, (int64_t)INT32_MAX);
    item->partial = c.implicit_items > 1 ? w : -1;
    return true;
  }
  if (w >= *p.num_work)
    return false;
  *item = p.work[w];
  return true;
}

/* Visible key range of an item, or false when its request is outside the cache's batch. */
__device__ __forceinline__ bool item_range(const ignis_decode_params &p, const ignis_decode_work &item,
                                           kv_range *r) {
  int64_t kv_len;
  r->paged = p.contiguous_kv_len == 0 && p.cache.indptr != nullptr;
  if (r->paged) {
    if (item.request < 0 || item.request >= p.cache.batch_size)
      return false;
    const int64_t begin = p.cache.indptr[item.request], end = p.cache.indptr[item.request + 1];
    kv_len = end > begin ? (end - begin - 1) * p.cache.page_size + p.cache.last_page_len[item.request] : 0;
    r->page_size = (int32_t)p.cache.page_size;
    r->first_entry = begin;
    r->entry_end = min(end, p.cache.num_page_entries);
    if (begin < 0)
      kv_len = 0;
  } else {
    if (item.request != 0)
      return false;
    kv_len = p.contiguous_kv_len;
    r->page_size = 1 << 30;
    r->first_entry = r->entry_end = 0;
  }
  int64_t start = max((int64_t)item.kv_start, (int64_t)0);
  if (p.window_left >= 0)
    start = max(start, kv_len - 1 - p.window_left);
  const int64_t end = max(min((int64_t)item.kv_end, kv_len), (int64_t)0);
  r->start = (int32_t)min(start, end);
  r->end = (int32_t)end;
  return true;
}

/* Base-2 score of a raw dot product. */
__device__ __forceinline__ float decode_score(float qk, const ignis_decode_params &p,
                                              const decode_config &c) {
  return c.cap_out > 0.0f ? c.cap_out * tanhf(qk * c.cap_in) : qk * p.sm_scale_log2;
}

/* ---- attention ----------------------------------------------------------------------------------- */
/* Shared memory: DECODE_STAGES x (K tile, V tile) of tile_rows x LANES 16-byte pieces, then one
 * validity byte per (stage, row). After the key loop the tiles are reused for the split merge. */
template <int LANES> __host__ __device__ constexpr size_t decode_smem_bytes(int threads) {
  return (size_t)DECODE_STAGES * (2 * (2 * threads / LANES) * LANES * 16 + 2 * threads / LANES);
}

/* Issue the copies of this thread's two rows of tile `tile` into its stage; pages[rr] < 0 masks. */
template <typename T, int LANES>
__device__ __forceinline__ void issue_tile(const ignis_decode_params &p, const kv_range &r, int kvh, int tile,
                                           const int32_t (&pages)[2], uint4 *smem, uint8_t *row_ok) {
  const int groups = blockDim.x / LANES, tile_rows = 2 * groups;
  const int lane = threadIdx.x % LANES, row0 = threadIdx.x / LANES;
  const int stage = tile % DECODE_STAGES;
  uint4 *k_tile = smem + (size_t)stage * 2 * tile_rows * LANES, *v_tile = k_tile + tile_rows * LANES;
  const T *k_base = static_cast<const T *>(p.cache.k_cache) + kvh * p.cache.k_stride_head + lane * 8;
  const T *v_base = static_cast<const T *>(p.cache.v_cache) + kvh * p.cache.v_stride_head + lane * 8;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = row0 + rr * groups;
    const bool ok = pages[rr] >= 0;
    const int64_t page = ok ? pages[rr] : 0;
    const int64_t slot = ok ? (uint32_t)(r.start + tile * tile_rows + row) % (uint32_t)r.page_size : 0;
    copy_async16(k_tile + row * LANES + lane,
                 k_base + page * p.cache.k_stride_page + slot * p.cache.k_stride_token, ok);
    copy_async16(v_tile + row * LANES + lane,
                 v_base + page * p.cache.v_stride_page + slot * p.cache.v_stride_token, ok);
    if (lane == 0)
      row_ok[stage * tile_rows + row] = ok;
  }
}

/* Pages of this thread's two rows of tile `tile` (-1: past the range or a bad page). */
template <int LANES>
__device__ __forceinline__ void lookup_tile(const ignis_decode_params &p, const kv_range &r, int tile,
                                            int32_t (&pages)[2]) {
  const int groups = blockDim.x / LANES, tile_rows = 2 * groups;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int64_t j = (int64_t)r.start + (int64_t)tile * tile_rows + threadIdx.x / LANES + rr * groups;
    pages[rr] = j < r.end ? page_of_key(p, r, (int32_t)j) : -1;
  }
}

/* Sum over the LANES threads of a row group. */
template <int LANES> __device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename T, int HEAD_DIM, int HPT>
__global__ void __launch_bounds__(DECODE_MAX_THREADS, 1)
    decode_attention_kernel(const ignis_decode_params p, const decode_config c) {
  constexpr int LANES = HEAD_DIM / 8;
  extern __shared__ uint4 decode_smem[];
  const int groups = blockDim.x / LANES, tile_rows = 2 * groups;
  uint8_t *row_ok = reinterpret_cast<uint8_t *>(decode_smem + (size_t)DECODE_STAGES * 2 * tile_rows * LANES);
  const int lane = threadIdx.x % LANES, group_id = threadIdx.x / LANES;
  const int slot = group_id % c.slots, split = group_id / c.slots;
  /* lane 0's slot is the smallest of its warp, so it has the most heads: the warp's loop bound */
  const int warp_slot = (threadIdx.x / 32 * (32 / LANES)) % c.slots;
  const int kvh = blockIdx.y;

  ignis_pdl_wait();
  ignis_decode_work item;
  kv_range r;
  if (!fetch_item(p, c, blockIdx.x, &item) || !item_range(p, item, &r))
    return;
  const int num_tiles = (r.end - r.start + tile_rows - 1) / tile_rows;
  const int rows_per_split = tile_rows / c.splits;

  for (int pass_base = 0; pass_base < c.group; pass_base += c.slots * HPT) {
    const int pass_heads = min(c.group - pass_base, c.slots * HPT);
    const int heads = max(0, (pass_heads - slot + c.slots - 1) / c.slots);
    const int warp_heads = max(0, (pass_heads - warp_slot + c.slots - 1) / c.slots);

    float q[HPT][8], o[HPT][8], m[HPT], d[HPT];
#pragma unroll
    for (int i = 0; i < HPT; ++i) {
      const int64_t qh = (int64_t)kvh * c.group + pass_base + slot + i * c.slots;
      if (i < heads)
        ignis_load_floats<IGNIS_CACHE_READ_ONLY>(
            static_cast<const T *>(p.q) + item.request * p.q_stride_batch + qh * p.q_stride_head + lane * 8,
            q[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (i >= heads)
          q[i][e] = 0.0f;
        o[i][e] = 0.0f;
      }
      m[i] = -CUDART_INF_F;
      d[i] = 0.0f;
    }

    /* prologue: tiles 0 .. STAGES-2 in flight, pages of tile STAGES-1 on their way */
    int32_t pages[2];
#pragma unroll
    for (int t = 0; t < DECODE_STAGES - 1; ++t) {
      if (t < num_tiles) {
        lookup_tile<LANES>(p, r, t, pages);
        issue_tile<T, LANES>(p, r, kvh, t, pages, decode_smem, row_ok);
      }
      copy_async_commit();
    }
    if (DECODE_STAGES - 1 < num_tiles)
      lookup_tile<LANES>(p, r, DECODE_STAGES - 1, pages);

    for (int t = 0; t < num_tiles; ++t) {
      if (t + DECODE_STAGES - 1 < num_tiles) {
        issue_tile<T, LANES>(p, r, kvh, t + DECODE_STAGES - 1, pages, decode_smem, row_ok);
        if (t + DECODE_STAGES < num_tiles)
          lookup_tile<LANES>(p, r, t + DECODE_STAGES, pages);
      }
      copy_async_commit();
      copy_async_wait<DECODE_STAGES - 1>();
      __syncthreads();

      const int stage = t % DECODE_STAGES;
      const uint4 *k_tile = decode_smem + (size_t)stage * 2 * tile_rows * LANES;
      const uint4 *v_tile = k_tile + tile_rows * LANES;
      const uint8_t *ok = row_ok + stage * tile_rows;
#pragma unroll 1
      for (int k = 0; k < rows_per_split; k += 2) {
        const int ra = split + k * c.splits, rb = ra + c.splits;
        float ka[8], kb[8], sa[HPT], sb[HPT];
        ignis_raw_to_floats<T>(k_tile[ra * LANES + lane], ka);
        ignis_raw_to_floats<T>(k_tile[rb * LANES + lane], kb);
#pragma unroll
        for (int i = 0; i < HPT; ++i) {
          if (i < warp_heads) {
            float xa = 0.0f, xb = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              xa = fmaf(q[i][e], ka[e], xa);
              xb = fmaf(q[i][e], kb[e], xb);
            }
            sa[i] = group_sum<LANES>(xa);
            sb[i] = group_sum<LANES>(xb);
          }
        }
        const bool ok_a = ok[ra], ok_b = ok[rb];
        float va[8], vb[8];
        ignis_raw_to_floats<T>(v_tile[ra * LANES + lane], va);
        ignis_raw_to_floats<T>(v_tile[rb * LANES + lane], vb);
#pragma unroll
        for (int i = 0; i < HPT; ++i) {
          if (i < heads) {
            const float xa = ok_a ? decode_score(sa[i], p, c) : -CUDART_INF_F;
            const float xb = ok_b ? decode_score(sb[i], p, c) : -CUDART_INF_F;
            const float mx = fmaxf(m[i], fmaxf(xa, xb));
            if (mx != -CUDART_INF_F) {
              const float rescale = exp2f(m[i] - mx), pa = exp2f(xa - mx), pb = exp2f(xb - mx);
              d[i] = fmaf(d[i], rescale, pa + pb);
#pragma unroll
              for (int e = 0; e < 8; ++e)
                o[i][e] = fmaf(o[i][e], rescale, fmaf(pa, va[e], pb * vb[e]));
              m[i] = mx;
            }
          }
        }
      }
      __syncthreads();
    }
    copy_async_wait<0>();
    ignis_pdl_launch_dependents();

    /* merge the key splits of each head slot (splits > 1: at most one head per slot) */
    if (c.splits > 1) {
      float *merge_o = reinterpret_cast<float *>(decode_smem);
      float *merge_m = merge_o + groups * HEAD_DIM, *merge_d = merge_m + groups;
      __syncthreads();
      if (heads > 0) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          merge_o[group_id * HEAD_DIM + lane * 8 + e] = o[0][e];
        if (lane == 0) {
          merge_m[group_id] = m[0];
          merge_d[group_id] = d[0];
        }
      }
      __syncthreads();
      if (split == 0 && heads > 0) {
        float mx = -CUDART_INF_F;
        for (int s = 0; s < c.splits; ++s)
          mx = fmaxf(mx, merge_m[s * c.slots + slot]);
        if (mx != -CUDART_INF_F) {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            o[0][e] = 0.0f;
          d[0] = 0.0f;
          for (int s = 0; s < c.splits; ++s) {
            const int from = s * c.slots + slot;
            const float w = exp2f(merge_m[from] - mx);
            d[0] = fmaf(merge_d[from], w, d[0]);
#pragma unroll
            for (int e = 0; e < 8; ++e)
              o[0][e] = fmaf(merge_o[from * HEAD_DIM + lane * 8 + e], w, o[0][e]);
          }
          m[0] = mx;
        }
      }
    }

    if (split == 0) {
#pragma unroll
      for (int i = 0; i < HPT; ++i) {
        if (i >= heads)
          continue;
        const int64_t qh = (int64_t)kvh * c.group + pass_base + slot + i * c.slots;
        const bool any = d[i] > 0.0f || isnan(d[i]);
        const float inv = any ? 1.0f / d[i] : 0.0f;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = any ? o[i][e] * inv : 0.0f;
        const float lse2 = any ? m[i] + log2f(d[i]) : -CUDART_INF_F;
        if (item.partial < 0) {
          ignis_store_floats(static_cast<T *>(p.out) + item.request * p.out_stride_batch +
                                 qh * p.out_stride_head + lane * 8,
                             v);
          if (p.lse != nullptr && lane == 0)
            p.lse[item.request * p.lse_stride_batch + qh * p.lse_stride_head] = lse2 * p.lse_scale;
        } else {
          const int64_t row = (int64_t)item.partial * p.num_qo_heads + qh;
          ignis_store_floats(p.partial_out + row * HEAD_DIM + lane * 8, v);
          if (lane == 0)
            p.partial_lse[row] = lse2;
        }
      }
    }
    __syncthreads();
  }
}

/* ---- merge of split requests ------------------------------------------------------------------- */
/* Block b merges the partial rows of request b; a thread handles 8 values of one query head. */
template <typename T>
__global__ void __launch_bounds__(MERGE_THREADS)
    decode_merge_kernel(const ignis_decode_params p, const decode_config c) {
  ignis_pdl_wait();
  int64_t first, last;
  if (p.work == nullptr) {
    if (blockIdx.x > 0 || c.implicit_items <= 1)
      return;
    first = 0;
    last = c.implicit_items;
  } else {
    if ((int)blockIdx.x >= *p.batch_size)
      return;
    first = p.request_partials[blockIdx.x];
    last = p.request_partials[blockIdx.x + 1];
  }
  if (last <= first)
    return;
  const int64_t b = blockIdx.x;
  const int chunks = (int)(p.head_dim / 8);
  const int64_t heads = p.num_qo_heads;
  for (int64_t idx = threadIdx.x; idx < heads * chunks; idx += blockDim.x) {
    const int64_t h = idx / chunks;
    const int e0 = (int)(idx - h * chunks) * 8;
    float mx = -CUDART_INF_F;
    for (int64_t row = first; row < last; ++row)
      mx = fmaxf(mx, p.partial_lse[row * heads + h]);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
    if (mx != -CUDART_INF_F) {
      for (int64_t row = first; row < last; ++row) {
        const float w = exp2f(p.partial_lse[row * heads + h] - mx);
        float x[8];
        ignis_load_floats<IGNIS_CACHE_STREAM>(p.partial_out + (row * heads + h) * p.head_dim + e0, x);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[e] = fmaf(w, x[e], acc[e]);
        sum += w;
      }
    }
    const bool any = sum > 0.0f || isnan(sum);
    const float inv = any ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      acc[e] = any ? acc[e] * inv : 0.0f;
    ignis_store_floats(static_cast<T *>(p.out) + b * p.out_stride_batch + h * p.out_stride_head + e0, acc);
    if (p.lse != nullptr && e0 == 0)
      p.lse[b * p.lse_stride_batch + h * p.lse_stride_head] =
          (any ? mx + log2f(sum) : -CUDART_INF_F) * p.lse_scale;
  }
  ignis_pdl_launch_dependents();
}

/* ---- host side ------------------------------------------------------------------------------------ */
static bool aligned16(const void *ptr, int64_t elem, const int64_t *strides, int count) {
  if ((uintptr_t)ptr % 16 != 0)
    return false;
  for (int i = 0; i < count; ++i)
    if (strides[i] * elem % 16 != 0)
      return false;
  return true;
}

static decode_config make_config(const ignis_decode_params &p, int lanes, int threads) {
  decode_config c;
  c.group = (int32_t)(p.num_qo_heads / p.num_kv_heads);
  const int groups = threads / lanes;
  c.splits = 1;
  while (c.splits * 2 * c.group <= groups)
    c.splits *= 2;
  c.slots = groups / c.splits;
  const int64_t len = p.contiguous_kv_len;
  int64_t chunk = implicit_chunk_tokens(p);
  if (chunk <= 0 || chunk >= len)
    chunk = len > 0 ? len : INT32_MAX; /* one item: the whole sequence */
  c.implicit_chunk = (int32_t)chunk;
  c.implicit_items = (int32_t)(len > 0 ? (len + chunk - 1) / chunk : 1);
  const double log2e = 1.4426950408889634;
  const double cap = p.logits_soft_cap;
  c.cap_in = cap > 0.0 ? (float)((double)p.sm_scale_log2 / log2e / cap) : 0.0f;
  c.cap_out = cap > 0.0 ? (float)(cap * log2e) : 0.0f;
  return c;
}

template <typename T, int HEAD_DIM>
static ignis_status launch(const ignis_decode_params &p, cudaStream_t stream) {
  constexpr int LANES = HEAD_DIM / 8;
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  const int64_t base_groups = DECODE_BASE_THREADS / LANES;
  const int threads =
      group > DECODE_HEADS_PER_THREAD * base_groups ? DECODE_MAX_THREADS : DECODE_BASE_THREADS;
  /* one head per slot whenever the group fits the row groups: a quarter of the registers */
  void (*kernel)(const ignis_decode_params, const decode_config) =
      group <= base_groups ? decode_attention_kernel<T, HEAD_DIM, 1>
                           : decode_attention_kernel<T, HEAD_DIM, DECODE_HEADS_PER_THREAD>;
  const decode_config c = make_config(p, LANES, threads);
  const size_t smem = decode_smem_bytes<LANES>(threads);
  if (smem > 48 * 1024)
    IGNIS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const int64_t items = p.work != nullptr ? p.max_work : c.implicit_items;
  if (items > 0 && p.num_kv_heads > 0) {
    IGNIS_CUDA_CHECK(ignis_launch(kernel, dim3((unsigned)items, (unsigned)p.num_kv_heads), dim3(threads),
                                  smem, stream, p, c));
    const ignis_status status = ignis_check_launch("decode attention");
    if (status != IGNIS_OK)
      return status;
  }
  const int64_t merges = p.work != nullptr ? p.max_batch : (c.implicit_items > 1 ? 1 : 0);
  if (merges > 0) {
    IGNIS_CUDA_CHECK(
        ignis_launch(decode_merge_kernel<T>, dim3((unsigned)merges), dim3(MERGE_THREADS), 0, stream, p, c));
    return ignis_check_launch("decode merge");
  }
  return IGNIS_OK;
}

/* The build compiles the head dims of IGNIS_HEAD_DIMS (CMake); a lone nvcc compile gets all three. */
#if !defined(IGNIS_WITH_HEAD_DIM_64) && !defined(IGNIS_WITH_HEAD_DIM_128) && !defined(IGNIS_WITH_HEAD_DIM_256)
#define IGNIS_WITH_HEAD_DIM_64 1
#define IGNIS_WITH_HEAD_DIM_128 1
#define IGNIS_WITH_HEAD_DIM_256 1
#endif

template <typename T> static ignis_status launch_dtype(const ignis_decode_params &p, cudaStream_t stream) {
  switch (p.head_dim) {
#ifdef IGNIS_WITH_HEAD_DIM_64
  case 64:
    return launch<T, 64>(p, stream);
#endif
#ifdef IGNIS_WITH_HEAD_DIM_128
  case 128:
    return launch<T, 128>(p, stream);
#endif
#ifdef IGNIS_WITH_HEAD_DIM_256
  case 256:
    return launch<T, 256>(p, stream);
#endif
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: head_dim %lld is not compiled in this build (IGNIS_HEAD_DIMS)",
                           (long long)p.head_dim);
  }
}

extern "C" ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const ignis_decode_params &p = *params;
  const int64_t elem = 2;
  const bool paged = p.contiguous_kv_len == 0 && p.cache.indptr != nullptr;
  const int64_t q_strides[] = {p.q_stride_batch, p.q_stride_head};
  const int64_t out_strides[] = {p.out_stride_batch, p.out_stride_head};
  const int64_t k_strides[] = {p.cache.k_stride_token, p.cache.k_stride_head, p.cache.k_stride_page};
  const int64_t v_strides[] = {p.cache.v_stride_token, p.cache.v_stride_head, p.cache.v_stride_page};
  if (!aligned16(p.q, elem, q_strides, 2) || !aligned16(p.out, elem, out_strides, 2) ||
      !aligned16(p.cache.k_cache, elem, k_strides, paged ? 3 : 2) ||
      !aligned16(p.cache.v_cache, elem, v_strides, paged ? 3 : 2))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "decode: q, out, k_cache and v_cache must be 16-byte aligned, with strides of "
                           "multiples of 8 elements");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.dtype) {
  case IGNIS_F16:
    return launch_dtype<__half>(p, s);
  case IGNIS_BF16:
    return launch_dtype<__nv_bfloat16>(p, s);
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: dtype must be f16 or bf16");
  }
}
