/* The decode planner (pure C, no CUDA): how a batch of decode requests is cut into work items.
 *
 * A work item (core/params.h: ignis_decode_work) is a chunk [kv_start, kv_end) of one request's
 * keys; the attention kernel runs one block per (item, KV head). A request cut into several items
 * is "split": each item writes a partial row (f32 output + base-2 LSE) and the merge step combines
 * them. Policy, from the plan's configuration:
 *   - disable_split_kv: one item per request (batch-invariant).
 *   - fixed_split_pages > 0: chunks of exactly that many pages (the last one shorter), whatever
 *     the batch: a request's items, and so its result, do not depend on the other requests.
 *   - auto, batch * num_kv_heads below one wave (SMs * blocks per SM): the smallest chunk, in
 *     pages, of at least IGNIS_DECODE_MIN_CHUNK_TOKENS tokens, such that all items *
 *     num_kv_heads fit one wave (found by binary search over the chunk).
 *   - auto, a batch that fills a wave: the longest request cut into 1..IGNIS_DECODE_BALANCE_SPLITS
 *     chunks, whichever minimises waves * (chunk tokens + IGNIS_DECODE_BLOCK_COST_TOKENS), so a
 *     batch of 1.3 waves is not run as 2 (1 chunk: no split).
 * A request with no keys gets one item (the kernel writes out = 0, lse = -inf).
 *
 * The schedule travels as one byte image (the same layout in host staging and device workspace,
 * so plan_update copies it with one memcpy):
 *   [0, 16)                    ignis_decode_schedule_header
 *   [16, ...)                  request_partials [max_batch + 1] int32, then the batch's kv_indptr
 *                              [max_batch + 1] and kv_last_page_len [max_batch] int32 (copies of
 *                              the planned host arrays, so a run can read them from the workspace:
 *                              ignis_decode_plan_index_views), padded to 16 bytes
 *   [work_offset, ...)         work [max_work] (16 bytes each); only num_work are meaningful
 *   [work_offset + 16 num_work, ...)  when a request is split: the merge counters of this batch,
 *                              ignis_decode_merge_counters() uint32 zeros (core/params.h: the CUDA
 *                              kernel merges split requests with them and leaves them zero), so
 *                              every plan_update re-arms them
 * The bounds max_work / max_partials depend only on the configuration, so a workspace sized from
 * them holds every schedule the plan can produce. Planning allocates nothing and is deterministic.
 * Block-table batches below a wave are planned from their lengths where they run, by the same
 * search (ignis_decode_length_chunk_pages; the CUDA attention blocks mirror it). */
#ifndef IGNIS_SCHED_DECODE_PLAN_H
#define IGNIS_SCHED_DECODE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sched/schedule.h"

#define IGNIS_DECODE_BLOCKS_PER_SM 2        /* CPU plans: attention blocks assumed resident per SM */
#define IGNIS_DECODE_MIN_CHUNK_TOKENS 256   /* auto split: no chunk shorter (but a request's last) */
#define IGNIS_DECODE_BALANCE_SPLITS 4       /* auto split of a full batch: at most this many chunks */
#define IGNIS_DECODE_BLOCK_COST_TOKENS 128  /* auto split: a block's fixed cost, in keys */
#define IGNIS_DECODE_SINGLE_MAX_CHUNKS 1024 /* single decode: at most this many chunks, any device */
#define IGNIS_DECODE_CPU_NOMINAL_SMS 132    /* the CPU backend plans as for an H100/H200 */
#define IGNIS_DECODE_PAGE_MIN_FILL 0.9      /* the page kernel's schedule: busy fraction of its waves */

typedef struct ignis_decode_planner {
  int64_t max_batch;
  int64_t max_kv_len;
  int64_t page_size;
  int64_t num_kv_heads;
  int64_t wave; /* attention blocks resident at once */
  int32_t disable_split_kv;
  int64_t fixed_split_pages; /* > 0: fixed chunks; 0: auto */
  int64_t max_work;          /* bounds over every batch within the maxima */
  int64_t max_partials;
} ignis_decode_planner;

typedef struct ignis_decode_schedule_header {
  int32_t num_work;
  int32_t batch_size;
  int32_t num_partials; /* request_partials[batch_size] */
  int32_t chunk_pages;  /* pages per chunk of split requests; 0 when no request is split */
} ignis_decode_schedule_header;

/* Fill the planner and its bounds. Returns 0, or -1 when a bound does not fit the int32 fields of
 * the schedule (max_batch, max_kv_len or the item count). Arguments must be positive, except
 * max_kv_len >= 0 and fixed_split_pages >= 0. */
int ignis_decode_planner_init(ignis_decode_planner *planner, int64_t max_batch, int64_t max_kv_len,
                              int64_t page_size, int64_t num_kv_heads, int64_t sm_count,
                              int64_t blocks_per_sm, int32_t disable_split_kv, int64_t fixed_split_pages);

/* Merge counters a batch with num_partials partial rows and batch_size requests uses (0 when no
 * request is split): (num_partials / IGNIS_DECODE_MERGE_GROUP + batch_size) * num_kv_heads. */
int64_t ignis_decode_merge_counters(int64_t num_partials, int64_t batch_size, int64_t num_kv_heads);

/* Byte offset of the work list in the image, and the image's full size (both multiples of 16). */
size_t ignis_decode_schedule_work_offset(const ignis_decode_planner *planner);
size_t ignis_decode_schedule_bytes(const ignis_decode_planner *planner);

/* The chunk, in pages, of a batch's split requests by the planner's policy; 0: no request is split.
 * The batch is kv_indptr's requests (page counts kv_indptr[b + 1] - kv_indptr[b], valid as
 * ignis_decode_plan_batch needs them), whose longest has longest_pages pages (the caller found it
 * while validating them); or with kv_indptr NULL batch_size requests of longest_pages pages each
 * (block-table runs, which know only a bound on the lengths: the chunk of a batch whose every
 * request has that bound). At most one pass over kv_indptr above a wave, a binary search of
 * passes below. */
int64_t ignis_decode_choose_chunk_pages(const ignis_decode_planner *planner, const int32_t *kv_indptr,
                                        int64_t longest_pages, int64_t batch_size);

/* The smallest chunk, in pages, an automatic split takes (IGNIS_DECODE_MIN_CHUNK_TOKENS tokens). */
int64_t ignis_decode_min_chunk_pages(int64_t page_size);

/* Block-table batches planned from their lengths (sched/schedule.h: ignis_decode_length_plan), on
 * the host (the CPU backend; the CUDA attention blocks compute the same): the chunk of a batch whose
 * requests count pages[b] pages (ignis_decode_length_pages), by the same search as
 * ignis_decode_choose_chunk_pages below a wave; and its schedule, requests of lens[b] keys:
 * request_partials [batch + 1] and the work items (at most wave_items), returning their number. */
int64_t ignis_decode_length_chunk_pages(const ignis_decode_length_plan *lp, const int32_t *pages, int64_t batch);
int32_t ignis_decode_plan_lengths(const ignis_decode_length_plan *lp, const int32_t *lens, const int32_t *pages,
                                  int64_t batch, int64_t page_size, int32_t *request_partials,
                                  ignis_decode_work *work);

/* Plan a batch into `image` (ignis_decode_schedule_bytes bytes, 16-byte aligned) with chunks of
 * chunk_pages pages (ignis_decode_choose_chunk_pages of the same batch). The inputs must already
 * be valid: kv_indptr non-decreasing, last_page_len in 1..page_size for requests with pages,
 * lengths <= max_kv_len, batch_size <= max_batch. Returns the bytes of the image that hold the
 * schedule (header, request_partials, the num_work items used and the zeroed merge counters). */
size_t ignis_decode_plan_batch(const ignis_decode_planner *planner, int64_t chunk_pages, const int32_t *kv_indptr,
                               const int32_t *kv_last_page_len, int64_t batch_size, void *image);

/* Typed views of an image. */
static inline ignis_decode_schedule_header *ignis_decode_schedule_header_of(void *image) {
  return (ignis_decode_schedule_header *)image;
}
static inline int32_t *ignis_decode_schedule_partials_of(void *image) {
  return (int32_t *)((char *)image + sizeof(ignis_decode_schedule_header));
}
static inline int32_t *ignis_decode_schedule_indptr_of(const ignis_decode_planner *planner, void *image) {
  return ignis_decode_schedule_partials_of(image) + planner->max_batch + 1;
}
static inline int32_t *ignis_decode_schedule_last_page_len_of(const ignis_decode_planner *planner, void *image) {
  return ignis_decode_schedule_indptr_of(planner, image) + planner->max_batch + 1;
}
static inline ignis_decode_work *ignis_decode_schedule_work_of(const ignis_decode_planner *planner,
                                                               void *image) {
  return (ignis_decode_work *)((char *)image + ignis_decode_schedule_work_offset(planner));
}

/* Single decode: keys per chunk for one request of kv_len keys (kv_len, at least 1, when it is not
 * split), from the same policy with at most IGNIS_DECODE_SINGLE_MAX_CHUNKS chunks. */
int64_t ignis_decode_single_chunk_tokens(int64_t kv_len, int64_t num_kv_heads, int64_t wave);
/* The most chunks single decode can use for any kv_len <= max_kv_len on any device. */
int64_t ignis_decode_single_max_chunks(int64_t max_kv_len);

#endif
