/* The schedules the planners write and the attention kernels read: the ground floor both
 * src/sched (the planners) and src/core/params.h (the kernels' params) stand on, so the planners
 * include nothing above them. Also the two facts every layer needs of a schedule: a paged
 * request's length, and the implicit schedule single decode / prefill pass instead of a list
 * (usable from C and CUDA alike). params.h describes how the kernels use each field. */
#ifndef IGNIS_SCHED_SCHEDULE_H
#define IGNIS_SCHED_SCHEDULE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define IGNIS_SCHED_INLINE __host__ __device__ __forceinline__
#else
#define IGNIS_SCHED_INLINE static inline
#endif

/* ---- decode ---- */
typedef struct ignis_decode_work {
  int32_t request;
  int32_t kv_start;          /* first key (token index within the request) */
  int32_t kv_end;            /* one past the last key */
  int32_t partial;           /* -1: writes out/lse; else a row of partial_out / partial_lse */
} ignis_decode_work;

#define IGNIS_DECODE_MERGE_GROUP 8  /* partials a first-level merge combines (merge counters) */
#define IGNIS_DECODE_MERGE_LEVEL 16 /* a second-level arrival on a group-0 counter (> the group) */

/* Merge counters a batch with num_partials partial rows and batch_size requests uses (0 when no
 * request is split; sched/decode_plan.c says why they suffice). */
IGNIS_SCHED_INLINE int64_t ignis_decode_merge_counter_count(int64_t num_partials, int64_t batch_size,
                                                           int64_t num_kv_heads) {
  return num_partials > 0 ? (num_partials / IGNIS_DECODE_MERGE_GROUP + batch_size) * num_kv_heads : 0;
}

/* The implicit decode schedule (single decode, and block-table runs: no list, nothing copied): a
 * batch of `requests`, each cut into `splits` items of chunk_tokens keys, item w being chunk
 * i = w % splits of request w / splits, keys [i * chunk_tokens, (i + 1) * chunk_tokens), except
 * that the last chunk of a request runs to its end (kv_end INT32_MAX: the reader clips it to the
 * request's length, so a request longer than splits * chunk_tokens loses no key), partial row w
 * when splits > 1. Single decode: one request of kv_len keys, splits =
 * ignis_decode_implicit_items(kv_len, chunk_tokens). Every backend and the front end use these. */
IGNIS_SCHED_INLINE int64_t ignis_decode_implicit_items(int64_t kv_len, int64_t chunk_tokens) {
  return kv_len > chunk_tokens ? (kv_len + chunk_tokens - 1) / chunk_tokens : 1;
}
/* (32-bit arithmetic: w < items <= INT32_MAX, and every chunk but a request's last ends within its
 * bound; a 64-bit division would cost the kernels registers) */
IGNIS_SCHED_INLINE ignis_decode_work ignis_decode_implicit_item(int32_t w, int32_t chunk_tokens, int32_t splits) {
  const uint32_t request = (uint32_t)w / (uint32_t)splits, i = (uint32_t)w - request * (uint32_t)splits;
  const int32_t start = (int32_t)(i * (uint32_t)chunk_tokens);
  const int32_t end = i == (uint32_t)splits - 1 ? INT32_MAX : start + chunk_tokens;
  ignis_decode_work item = {(int32_t)request, start, end, splits > 1 ? w : -1};
  return item;
}

/* A block-table batch planned from its lengths where it runs (core/params.h: length_plan; on CUDA
 * each attention block plans it, the CPU backend on the host): the decode planner's policy for a batch
 * below one wave (decode_plan.h: the smallest chunk of at least min_chunk_pages pages whose items
 * fit wave_items; no split when no request is longer than min_chunk_pages) over the requests' own
 * page counts, each counted as at most bound_pages (the host's bound on the lengths, so the items
 * stay within the plan's bounds: a request past it gets its extra keys in its last chunk). The
 * schedule is the planned one (request_partials, work): the item of chunk i of a request of len
 * keys ends at min((i + 1) * chunk_tokens, len), its last at len. */
#define IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH 2048 /* the largest batch planned from its lengths */
typedef struct ignis_decode_length_plan {
  int32_t wave_items;      /* 0: off */
  int32_t min_chunk_pages;
  int32_t bound_pages;
} ignis_decode_length_plan;

/* Pages a length plan counts for a request of len keys (ignis_block_table_request_len). */
IGNIS_SCHED_INLINE int32_t ignis_decode_length_pages(int32_t len, int32_t page_size, int32_t bound_pages) {
  const int32_t pages = (int32_t)(((int64_t)len + page_size - 1) / page_size);
  return pages < bound_pages ? pages : bound_pages;
}
/* Items of a request of `pages` (counted) pages with chunks of chunk_pages (0: no split). */
IGNIS_SCHED_INLINE int32_t ignis_decode_length_items(int32_t pages, int32_t chunk_pages) {
  return chunk_pages > 0 && pages > chunk_pages ? (int32_t)(((uint32_t)pages + (uint32_t)chunk_pages - 1u) / (uint32_t)chunk_pages) : 1;
}

/* ---- prefill ---- */
typedef struct ignis_prefill_request {
  int64_t mask_offset;        /* custom mask: byte offset of the request's bits in custom_mask */
  int32_t q_start;            /* first row of q / out / lse */
  int32_t q_len;              /* query tokens */
  int32_t kv_start;           /* ragged: first row of k / v; paged: first entry of cache.indices */
  int32_t kv_len;             /* keys */
} ignis_prefill_request;

typedef struct ignis_prefill_work {
  int32_t request;
  int32_t row_start;          /* first packed row of the tile (rows row_start .. +q_tile_rows, clipped) */
  int32_t kv_start;           /* first key (token index within the request) */
  int32_t kv_end;             /* one past the last key; kv_start == kv_end: no key */
  int32_t partial;            /* -1: writes out / lse; else a partial slot */
} ignis_prefill_work;

typedef struct ignis_prefill_merge {
  int32_t request;
  int32_t row_start;          /* the tile (as its items' row_start) */
  int32_t first_partial;
  int32_t num_partials;       /* >= 2 */
} ignis_prefill_merge;

/* The implicit prefill schedule (single prefill): request 0 of q_len tokens and kv_len keys, its
 * q_len * group packed rows cut into tiles of q_tile_rows and its keys into chunks of
 * chunk_tokens; item i (of tiles * chunks) is tile i / chunks against chunk i % chunks, partial slot
 * i when the request is split (chunks > 1), and merge entry t combines slots t * chunks ..
 * t * chunks + chunks - 1 of tile t. Every backend and the front end use these. */
IGNIS_SCHED_INLINE int64_t ignis_prefill_implicit_tiles(int64_t q_len, int64_t group, int64_t q_tile_rows) {
  return (q_len * group + q_tile_rows - 1) / q_tile_rows;
}
IGNIS_SCHED_INLINE int64_t ignis_prefill_implicit_chunks(int64_t kv_len, int64_t chunk_tokens) {
  return kv_len > chunk_tokens ? (kv_len + chunk_tokens - 1) / chunk_tokens : 1;
}
IGNIS_SCHED_INLINE ignis_prefill_request ignis_prefill_implicit_request(int64_t q_len, int64_t kv_len) {
  ignis_prefill_request r = {0, 0, (int32_t)q_len, 0, (int32_t)kv_len};
  return r;
}
IGNIS_SCHED_INLINE ignis_prefill_work ignis_prefill_implicit_item(int64_t i, int64_t chunks, int64_t chunk_tokens,
                                                                  int64_t kv_len, int64_t q_tile_rows) {
  const int64_t c = i % chunks, start = c * chunk_tokens, end = start + chunk_tokens;
  ignis_prefill_work w = {0, (int32_t)(i / chunks * q_tile_rows), (int32_t)(start < kv_len ? start : kv_len),
                          (int32_t)(end < kv_len ? end : kv_len), chunks > 1 ? (int32_t)i : -1};
  return w;
}
IGNIS_SCHED_INLINE ignis_prefill_merge ignis_prefill_implicit_merge(int64_t t, int64_t chunks, int64_t q_tile_rows) {
  ignis_prefill_merge m = {0, (int32_t)(t * q_tile_rows), (int32_t)(t * chunks), (int32_t)chunks};
  return m;
}
/* The block-table prefill schedule (ignis_prefill_run_block_table: no list, nothing copied): a batch
 * of requests each given tiles = ignis_prefill_implicit_tiles(max_q_len, group, q_tile_rows) items
 * (the longest request's), item i being tile i % tiles of request i / tiles against every key of the
 * request (no split: partial -1); a tile past its request's packed rows does nothing, and the rows
 * of a request longer than max_q_len past its tiles are not computed. Request b's query rows are
 * qo_indptr[b] .. qo_indptr[b + 1]; it writes nothing (returns 0) when its length is negative or its
 * rows leave [0, q_rows). Its keys are ignis_block_table_request_len of seq_lens[b] (capacity: the
 * keys a table row holds) and its pages row b of the block table (kv_start: that row's first entry,
 * b * table_stride, which the front end keeps within int32). */
IGNIS_SCHED_INLINE int ignis_prefill_block_table_request(const int32_t *qo_indptr, const int32_t *seq_lens, int32_t b,
                                                         int32_t q_rows, int32_t table_stride, int32_t capacity,
                                                         ignis_prefill_request *r) {
  const int32_t q_start = qo_indptr[b], q_end = qo_indptr[b + 1], seq_len = seq_lens[b];
  if (q_start < 0 || q_end < q_start || q_end > q_rows)
    return 0;
  r->mask_offset = 0;
  r->q_start = q_start;
  r->q_len = q_end - q_start;
  r->kv_start = b * table_stride;
  r->kv_len = seq_len < 0 ? 0 : seq_len < capacity ? seq_len : capacity;
  return 1;
}

/* Keys of paged request b: (pages - 1) * page_size + last_page_len[b], 0 with no page. */
IGNIS_SCHED_INLINE int64_t ignis_paged_request_len(const int32_t *kv_indptr, const int32_t *kv_last_page_len,
                                                  int64_t b, int64_t page_size) {
  int64_t pages = (int64_t)kv_indptr[b + 1] - kv_indptr[b];
  return pages > 0 ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
}

/* Keys of block-table request b (core/params.h: the block-table form): its seq_len, counted as 0
 * when negative and as the table's capacity past it. */
IGNIS_SCHED_INLINE int64_t ignis_block_table_request_len(int64_t seq_len, int64_t pages_per_seq, int64_t page_size) {
  const int64_t capacity = pages_per_seq * page_size;
  return seq_len < 0 ? 0 : seq_len < capacity ? seq_len : capacity;
}

#endif
