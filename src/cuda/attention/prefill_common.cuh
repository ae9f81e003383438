/* Pieces shared by the prefill kernels (prefill_kernel.cuh, prefill_wgmma.cuh; prefill.cu launches
 * them): the launch facts (prefill_config), the schedule (work items, merge entries, and the implicit
 * schedules of single prefill and block-table runs), the page of a key, and prefill_merge_kernel, which
 * combines the partial slots of a split tile by their base-2 LSEs and joins the sink. */
#ifndef IGNIS_CUDA_PREFILL_COMMON_CUH
#define IGNIS_CUDA_PREFILL_COMMON_CUH

#include "cuda/attention/attention_tile.cuh"
#include "ignis/prefill.h"

enum { PREFILL_MERGE_THREADS = 128 };

/* Launch facts derived once on the host. */
struct prefill_config {
  int32_t group; /* query heads per KV head */
  int32_t causal;
  int32_t custom_mask;
  int32_t rope;      /* ROPE_LLAMA (general instance) */
  int32_t transform; /* ALiBi or soft cap (general instance) */
  float score_scale; /* raw q.k to the base-2 logit, or to natural units when transform */
  attention_score_transform st;
  /* implicit schedule (p.implicit_chunk_tokens > 0), and block-table runs' tiles per request */
  int32_t implicit_tiles;
  int32_t implicit_chunks;
  int64_t implicit_chunk;
  int64_t merge_blocks;         /* merge blocks per merge entry */
  int32_t block_table_capacity; /* block-table runs: keys a table row holds */
};

/* ---- schedule ---------------------------------------------------------------------------------- */
/* Work item `slot` (items run last first, so the longest causal tiles start early) and its request;
 * false when slot is past the batch's items. */
__device__ __forceinline__ bool prefill_fetch_item(const ignis_prefill_params &p, const prefill_config &c,
                                                   int64_t slot, ignis_prefill_work *item,
                                                   ignis_prefill_request *req) {
  if (p.qo_indptr != nullptr) { /* a block-table run: c.implicit_tiles tiles per request (the kernels
                                   skip a tile past its request's rows) */
    const uint32_t tiles = (uint32_t)c.implicit_tiles, items = tiles * (uint32_t)p.cache.batch_size;
    if (slot >= items)
      return false;
    const uint32_t i = items - 1 - (uint32_t)slot, b = i / tiles,
                   row = (i - b * tiles) * (uint32_t)p.q_tile_rows;
    if (!ignis_prefill_block_table_request(p.qo_indptr, p.cache.seq_lens, (int32_t)b, (int32_t)p.num_q_rows,
                                           (int32_t)p.cache.block_table_stride, c.block_table_capacity, req))
      return false;
    *item = {(int32_t)b, (int32_t)row, 0, req->kv_len, -1};
    return true;
  }
  if (p.implicit_chunk_tokens > 0) {
    const int64_t items = (int64_t)c.implicit_tiles * c.implicit_chunks;
    if (slot >= items)
      return false;
    *item = ignis_prefill_implicit_item(items - 1 - slot, c.implicit_chunks, c.implicit_chunk,
                                        p.contiguous_kv_len, p.q_tile_rows);
    *req = ignis_prefill_implicit_request(p.contiguous_q_len, p.contiguous_kv_len);
    return true;
  }
  const int64_t items = *p.num_work;
  if (slot >= items)
    return false;
  *item = p.work[items - 1 - slot];
  if (item->request < 0 || item->request >= *p.batch_size)
    return false;
  *req = p.requests[item->request];
  return true;
}

/* Merge entry e, or false when e is past the batch's entries. */
__device__ __forceinline__ bool prefill_fetch_merge(const ignis_prefill_params &p, const prefill_config &c,
                                                    int64_t e, ignis_prefill_merge *entry,
                                                    ignis_prefill_request *req) {
  if (p.implicit_chunk_tokens > 0) {
    if (c.implicit_chunks <= 1 || e >= c.implicit_tiles)
      return false;
    *entry = ignis_prefill_implicit_merge(e, c.implicit_chunks, p.q_tile_rows);
    *req = ignis_prefill_implicit_request(p.contiguous_q_len, p.contiguous_kv_len);
    return true;
  }
  if (e >= *p.num_merge)
    return false;
  *entry = p.merge[e];
  if (entry->request < 0 || entry->request >= *p.batch_size)
    return false;
  *req = p.requests[entry->request];
  return true;
}

/* Page of key j of request req (j inside the item's range): 0 when the keys are not paged, -1 when
 * its page-table entry or page is out of bounds (the key is then masked). Both attention kernels. */
static __device__ __forceinline__ int32_t prefill_key_page(const ignis_prefill_params &p, bool paged,
                                                           const ignis_prefill_request &req, int64_t j) {
  if (!paged)
    return 0;
  const int64_t entry = (int64_t)req.kv_start + (uint32_t)j / (uint32_t)p.cache.page_size;
  if (req.kv_start < 0 || entry >= p.cache.num_page_entries)
    return -1;
  const int32_t page = p.cache.indices[entry];
  return page >= 0 && page < p.cache.num_pages ? page : -1;
}

/* ---- merge of split tiles ---------------------------------------------------------------------- */
/* Merge entry e takes merge_blocks blocks; a thread combines 8 values of one (KV head, tile row). */
template <typename QT, int DVO, int ROWS>
__global__ void __launch_bounds__(PREFILL_MERGE_THREADS)
    prefill_merge_kernel(const ignis_prefill_params p, const prefill_config c) {
  constexpr int PIECES = DVO / 8;
  ignis_pdl_wait();
  const int64_t e = blockIdx.x / c.merge_blocks;
  const int64_t idx = (blockIdx.x % c.merge_blocks) * PREFILL_MERGE_THREADS + threadIdx.x;
  ignis_prefill_merge entry;
  ignis_prefill_request req;
  if (idx >= p.num_kv_heads * ROWS * PIECES || !prefill_fetch_merge(p, c, e, &entry, &req))
    return;
  const int kvh = (int)(idx / (ROWS * PIECES)), r = (int)(idx / PIECES % ROWS), e0 = (int)(idx % PIECES) * 8;
  const int64_t packed = (int64_t)entry.row_start + r;
  if (packed >= (int64_t)req.q_len * c.group)
    return;
  const int64_t token = req.q_start + packed / c.group, head = (int64_t)kvh * c.group + packed % c.group;
  const int64_t row0 = ((int64_t)entry.first_partial * p.num_kv_heads + kvh) * ROWS + r;
  const float sink2 = p.sinks != nullptr ? p.sinks[head] * IGNIS_LOG2E_F : -CUDART_INF_F;
  float acc[8];
  const float lse2 = attention_merge_partials(p.partial_out, p.partial_lse, row0, p.num_kv_heads * ROWS,
                                              entry.num_partials, DVO, e0, sink2, acc);
  ignis_store_floats(static_cast<QT *>(p.out) + token * p.out_stride_token + head * p.out_stride_head + e0,
                     acc);
  if (p.lse != nullptr && e0 == 0)
    p.lse[token * p.lse_stride_token + head * p.lse_stride_head] = lse2 * p.lse_scale;
  ignis_pdl_launch_dependents();
}

#endif
