/* The MLA planner (pure C, no CUDA): how a batch of MLA requests is cut into work items.
 *
 * Decode's planner (sched/decode_plan.h) plans one query row group per (request, KV head); MLA has
 * one latent KV head shared by all query heads and a query length per request (qo_indptr:
 * speculative tokens, chunked prefill), so its unit is a tile of query rows of one request, row
 * r = token * num_heads + head (the heads of a token side by side, the tokens after each other).
 * The tile height follows the head count (ignis_mla_tile_rows): 16 rows for up to 16 heads, 32 for
 * up to 32, else IGNIS_MLA_TILE_ROWS, so the 16 heads of DeepSeek-V3 at tensor-parallel 8 fill a
 * tile at one query token instead of a quarter of one (the CUDA backend runs the narrow tiles on
 * a kernel of its own). A work item is one tile against a chunk [kv_start, kv_end) of the request's
 * keys. Splitting (split-KV) follows decode's policy for batches below a wave: no split when the
 * tiles fill a wave; else the smallest chunk (a multiple of IGNIS_MLA_KEY_TILE keys, at least
 * IGNIS_MLA_MIN_CHUNK) whose items fit one wave and whose partial rows fit the workspace's fixed
 * room (IGNIS_MLA_MAX_PARTIAL_TOKENS query tokens of split requests, counted once per chunk), found
 * by binary search. A split request's chunk c writes partial token rows partial + i (f32 rows of
 * all heads, base-2 LSE); a merge item then combines the chunks of one query token.
 *
 * The schedule is one byte image, the same on the host and in the plan's device memory:
 *   [0, 16)                    ignis_mla_schedule_header
 *   [16, ...)                  work [max_work] (32 bytes each)
 *   then                       merge [max_merge] (16 bytes each)
 * The bounds depend only on the configuration, so one grid of max_work blocks (a CUDA graph's)
 * serves every update. Planning allocates nothing and is deterministic. */
#ifndef IGNIS_SCHED_MLA_PLAN_H
#define IGNIS_SCHED_MLA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define IGNIS_MLA_TILE_ROWS 64           /* the most query rows (token x head) per work item */
#define IGNIS_MLA_KEY_TILE 32            /* keys per step of the kernels; chunks are multiples */
#define IGNIS_MLA_MIN_CHUNK 256          /* no split chunk shorter (but a request's last) */
#define IGNIS_MLA_MAX_PARTIAL_TOKENS 256 /* partial token rows of one batch (workspace room) */
#define IGNIS_MLA_NOMINAL_WAVE 132       /* blocks resident at once (one per SM of an H100 / H200) */

typedef struct ignis_mla_work {
  int32_t q_row;     /* the request's first query row (qo_indptr[b]) */
  int32_t q_len;     /* its query tokens */
  int32_t row_start; /* the tile's first row, token * num_heads + head */
  int32_t kv_len;    /* the request's keys */
  int32_t kv_start;  /* the chunk */
  int32_t kv_end;
  int32_t page_base; /* kv_indptr[b] */
  int32_t partial;   /* -1: write out / lse; else the chunk's first partial token row */
} ignis_mla_work;

typedef struct ignis_mla_merge {
  int32_t q_row;   /* the query token's row of out */
  int32_t partial; /* its row in the first chunk's partials */
  int32_t stride;  /* partial token rows from one chunk to the next (the request's q_len) */
  int32_t count;   /* chunks */
} ignis_mla_merge;

typedef struct ignis_mla_schedule_header {
  int32_t num_work;
  int32_t num_merge;
  int32_t num_partial_tokens;
  int32_t batch_size;
} ignis_mla_schedule_header;

typedef struct ignis_mla_planner {
  int64_t num_heads;
  int64_t tile_rows; /* query rows per work item: ignis_mla_tile_rows(num_heads) */
  int64_t wave;
  int64_t max_work;
  int64_t max_merge;
  int64_t max_partial_tokens; /* 0: no batch within the maxima is ever split */
} ignis_mla_planner;

/* Query rows per work item for num_heads heads: 16, 32 or IGNIS_MLA_TILE_ROWS. */
static inline int64_t ignis_mla_tile_rows(int64_t num_heads) {
  return num_heads <= 16 ? 16 : num_heads <= 32 ? 32 : IGNIS_MLA_TILE_ROWS;
}

/* The planner's bounds for these maxima, with tiles of tile_rows query rows (16, 32 or
 * IGNIS_MLA_TILE_ROWS; 0: ignis_mla_tile_rows(num_heads)); -1 when they do not fit the int32
 * fields. */
int ignis_mla_planner_init(ignis_mla_planner *planner, int64_t num_heads, int64_t tile_rows, int64_t max_batch,
                           int64_t max_q_tokens, int64_t max_kv_len, int64_t wave);

size_t ignis_mla_schedule_bytes(const ignis_mla_planner *planner);
static inline ignis_mla_work *ignis_mla_schedule_work(void *image) {
  return (ignis_mla_work *)((char *)image + sizeof(ignis_mla_schedule_header));
}
static inline ignis_mla_merge *ignis_mla_schedule_merge(const ignis_mla_planner *planner, void *image) {
  return (ignis_mla_merge *)(ignis_mla_schedule_work(image) + planner->max_work);
}

/* The chunk, in keys, of a batch's split requests (0: no split). Inputs valid (see plan_batch). */
int64_t ignis_mla_choose_chunk(const ignis_mla_planner *planner, const int32_t *qo_indptr,
                               const int32_t *kv_len, int64_t batch_size);

/* Plan a valid batch (qo_indptr / kv_indptr non-decreasing from 0 within the maxima, kv_len within
 * the pages) into image (ignis_mla_schedule_bytes, 16-byte aligned). Returns the bytes used (the
 * header, the work items and the merge area: the merge area sits at a fixed offset). */
size_t ignis_mla_plan_batch(const ignis_mla_planner *planner, const int32_t *qo_indptr,
                            const int32_t *kv_indptr, const int32_t *kv_len, int64_t batch_size, void *image);

#endif
