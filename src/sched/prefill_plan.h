/* The prefill planner (pure C, no CUDA): how a batch of prefill requests is cut into work items.
 *
 * Tiles. Request b's queries are packed rows (core/params.h): row r is query token r / group of
 * query head kv_head * group + r % group, so a tile of q_tile_rows rows reads each key once for
 * the whole GQA group. A request with q_len tokens has ceil(q_len * group / q_tile_rows) tiles (none
 * when q_len = 0: nothing to write). q_tile_rows is fixed by the head dims
 * (ignis_prefill_q_tile_rows) when the plan is made, so a captured launch never changes shape.
 *
 * Key range of a tile: the keys any of its rows may see, [lo, hi) with hi = min(kv_len, q_pos of
 * its last token + 1) under IGNIS_MASK_CAUSAL (else kv_len) and lo = max(0, q_pos of its first
 * token - window_left) with a window (else 0); empty ranges are [0, 0) (the kernel writes out = 0,
 * lse = -inf, or the sink). Masking inside the range is the kernel's.
 *
 * Split-KV. A tile's range is cut at multiples of chunk_pages * page_size keys (ragged plans use
 * page_size 1), giving one item per chunk it touches; a tile with one item writes out / lse, the
 * items of a split tile write partial slots merged by one merge entry. Policy:
 *   - disable_split_kv: one item per tile (batch-invariant).
 *   - fixed_split_pages > 0: chunks of exactly that many pages, whatever the batch: a request's
 *     items, and so its result, do not depend on the other requests.
 *   - auto: no split when tiles * num_kv_heads already fill a wave (SMs * blocks per SM); else the
 *     smallest chunk of at least IGNIS_PREFILL_MIN_CHUNK_TOKENS keys (in pages) whose items *
 *     num_kv_heads fit one wave (binary search over the chunk), so a few long requests spread
 *     over the GPU; no split when no tile's range is longer than that smallest chunk.
 *
 * Schedule image (the same bytes in host staging and in the device workspace; one memcpy):
 *   [0, 16)                         ignis_prefill_schedule_header
 *   [16, work_offset)               requests [max_batch] (ignis_prefill_request, 24 bytes)
 *   [work_offset, merge_offset)     work [max_work] (ignis_prefill_work, 20 bytes)
 *   [merge_offset, bytes)           merge [max_merge] (ignis_prefill_merge, 16 bytes)
 * each section padded to 16 bytes; only the first batch_size / num_work / num_merge entries are
 * meaningful. Items are listed request by request, tile by tile, chunk by chunk; the slots of a
 * split tile are consecutive. requests[b] holds q_start = qo_indptr[b], q_len, kv_start =
 * kv_indptr[b] (rows, or page entries when paged), kv_len and mask_offset (the byte offset of its
 * bit-packed custom mask: the sum of ceil(q_len * kv_len / 8) over the requests before it).
 * The bounds (max_work, max_partials, max_merge) depend only on the configuration, so a workspace
 * sized from them holds every schedule of the plan. Planning allocates nothing, is deterministic,
 * and costs O(tiles * log(max_kv_len)). */
#ifndef IGNIS_SCHED_PREFILL_PLAN_H
#define IGNIS_SCHED_PREFILL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sched/schedule.h"

#define IGNIS_PREFILL_BLOCKS_PER_SM 2        /* the CPU backend's nominal blocks per SM (the general CUDA kernel fits 2) */
#define IGNIS_PREFILL_MIN_CHUNK_TOKENS 512   /* auto split: no chunk shorter (but a range's ends) */
#define IGNIS_PREFILL_SINGLE_MAX_BLOCKS 512  /* single prefill: partial slots * KV heads, any device */
#define IGNIS_PREFILL_CPU_NOMINAL_SMS 132    /* the CPU backend plans as for an H100/H200 */

typedef struct ignis_prefill_planner {
  int64_t max_batch;
  int64_t max_qo_tokens;
  int64_t max_kv_len;
  int64_t page_size;         /* 1 for ragged keys */
  int64_t num_kv_heads;
  int64_t group;             /* num_qo_heads / num_kv_heads */
  int64_t q_tile_rows;
  int32_t causal;            /* IGNIS_MASK_CAUSAL */
  int32_t window_left;       /* -1: off */
  int64_t wave;              /* attention blocks resident at once */
  int32_t disable_split_kv;
  int64_t fixed_split_pages; /* > 0: fixed chunks; 0: auto */
  int64_t max_tiles;         /* bounds over every batch within the maxima */
  int64_t max_work;
  int64_t max_partials;
  int64_t max_merge;
} ignis_prefill_planner;

typedef struct ignis_prefill_schedule_header {
  int32_t num_work;
  int32_t num_merge;
  int32_t batch_size;
  int32_t num_partials;
} ignis_prefill_schedule_header;

/* Packed query rows per tile for these head dims: 128 up to 128, 64 up to 256, else 16 (512). */
int64_t ignis_prefill_q_tile_rows(int64_t head_dim_qk, int64_t head_dim_vo);

/* Fill the planner and its bounds. Returns 0, or -1 when a bound does not fit the int32 fields of
 * the schedule (packed rows, keys, items). Arguments positive, except max_kv_len >= 0,
 * window_left >= -1, fixed_split_pages >= 0. */
int ignis_prefill_planner_init(ignis_prefill_planner *planner, int64_t max_batch, int64_t max_qo_tokens,
                               int64_t max_kv_len, int64_t page_size, int64_t num_kv_heads, int64_t group,
                               int64_t q_tile_rows, int32_t causal, int32_t window_left, int64_t wave,
                               int32_t disable_split_kv, int64_t fixed_split_pages);

/* Byte offsets of the sections, and the image's full size (all multiples of 16). */
size_t ignis_prefill_schedule_work_offset(const ignis_prefill_planner *planner);
size_t ignis_prefill_schedule_merge_offset(const ignis_prefill_planner *planner);
size_t ignis_prefill_schedule_bytes(const ignis_prefill_planner *planner);

/* Plan a batch into `image` (ignis_prefill_schedule_bytes bytes, 16-byte aligned). Inputs already
 * valid: indptrs non-decreasing, query tokens <= max_qo_tokens, lengths <= max_kv_len,
 * batch_size <= max_batch, last_page_len within 1..page_size for requests with pages.
 * kv_last_page_len NULL: ragged (kv_len = kv_indptr[b+1] - kv_indptr[b]). Returns the bytes of
 * the image to copy (everything up to the end of the used merge entries). */
size_t ignis_prefill_plan_batch(const ignis_prefill_planner *planner, const int32_t *qo_indptr,
                                const int32_t *kv_indptr, const int32_t *kv_last_page_len, int64_t batch_size,
                                void *image);

/* Typed views of an image. */
static inline ignis_prefill_schedule_header *ignis_prefill_schedule_header_of(void *image) {
  return (ignis_prefill_schedule_header *)image;
}
static inline ignis_prefill_request *ignis_prefill_schedule_requests_of(void *image) {
  return (ignis_prefill_request *)((char *)image + sizeof(ignis_prefill_schedule_header));
}
static inline ignis_prefill_work *ignis_prefill_schedule_work_of(const ignis_prefill_planner *planner,
                                                                 void *image) {
  return (ignis_prefill_work *)((char *)image + ignis_prefill_schedule_work_offset(planner));
}
static inline ignis_prefill_merge *ignis_prefill_schedule_merge_of(const ignis_prefill_planner *planner,
                                                                   void *image) {
  return (ignis_prefill_merge *)((char *)image + ignis_prefill_schedule_merge_offset(planner));
}

/* Single prefill (implicit schedule, core/params.h): keys per chunk for one request (kv_len, at
 * least 1, when it is not split). It splits only when tiles * num_kv_heads is below the wave,
 * into chunks of at least IGNIS_PREFILL_MIN_CHUNK_TOKENS keys (multiples of 64), with at most
 * IGNIS_PREFILL_SINGLE_MAX_BLOCKS slots * KV heads. */
int64_t ignis_prefill_single_chunk_tokens(int64_t q_len, int64_t kv_len, int64_t group, int64_t num_kv_heads,
                                          int64_t q_tile_rows, int64_t wave);
/* The most partial slots single prefill uses for any kv_len <= max_kv_len on any device. */
int64_t ignis_prefill_single_max_partials(int64_t max_kv_len, int64_t num_kv_heads);
/* Write the implicit schedule (sched/schedule.h) out: work [tiles * chunks], merge [tiles when chunks > 1]. */
void ignis_prefill_implicit_schedule(int64_t q_len, int64_t kv_len, int64_t group, int64_t q_tile_rows,
                                     int64_t chunk_tokens, ignis_prefill_work *work, ignis_prefill_merge *merge);

#endif
