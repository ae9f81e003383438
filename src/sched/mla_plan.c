/* The MLA planner (sched/mla_plan.h): tiles of query rows, split-KV chunks for batches below a
 * wave, and the merge items of split requests. */
#include "sched/mla_plan.h"

#include <string.h>

static int64_t ceil_div64(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

static int64_t request_tiles(const ignis_mla_planner *planner, int64_t q_len) {
  return ceil_div64(q_len * planner->num_heads, planner->tile_rows);
}

int ignis_mla_planner_init(ignis_mla_planner *planner, int64_t num_heads, int64_t tile_rows, int64_t max_batch,
                           int64_t max_q_tokens, int64_t max_kv_len, int64_t wave) {
  memset(planner, 0, sizeof *planner);
  planner->num_heads = num_heads;
  planner->tile_rows = tile_rows > 0 ? tile_rows : ignis_mla_tile_rows(num_heads);
  planner->wave = wave;
  /* unsplit: every request with a token has its tiles; split batches fit one wave */
  const int64_t requests = max_batch < max_q_tokens ? max_batch : max_q_tokens;
  int64_t unsplit = (max_q_tokens * num_heads) / planner->tile_rows + requests;
  planner->max_work = unsplit > wave ? unsplit : wave;
  if (max_kv_len > IGNIS_MLA_MIN_CHUNK) {
    planner->max_partial_tokens = IGNIS_MLA_MAX_PARTIAL_TOKENS;
    const int64_t merged = IGNIS_MLA_MAX_PARTIAL_TOKENS / 2; /* a split token has >= 2 chunks */
    planner->max_merge = merged < max_q_tokens ? merged : max_q_tokens;
  }
  if (planner->max_work > INT32_MAX / 64 || max_q_tokens * num_heads > INT32_MAX)
    return -1;
  return 0;
}

size_t ignis_mla_schedule_bytes(const ignis_mla_planner *planner) {
  return sizeof(ignis_mla_schedule_header) + sizeof(ignis_mla_work) * (size_t)planner->max_work +
         sizeof(ignis_mla_merge) * (size_t)planner->max_merge;
}

/* Whether chunks of `chunk` keys fit: items within the wave, partial tokens within the room. */
static int chunk_fits(const ignis_mla_planner *planner, const int32_t *qo_indptr, const int32_t *kv_len,
                      int64_t batch_size, int64_t chunk) {
  int64_t items = 0, partial_tokens = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t q_len = qo_indptr[b + 1] - qo_indptr[b];
    if (q_len == 0)
      continue;
    const int64_t splits = kv_len[b] > chunk ? ceil_div64(kv_len[b], chunk) : 1;
    items += request_tiles(planner, q_len) * splits;
    if (splits > 1)
      partial_tokens += splits * q_len;
  }
  return items <= planner->wave && partial_tokens <= planner->max_partial_tokens;
}

int64_t ignis_mla_choose_chunk(const ignis_mla_planner *planner, const int32_t *qo_indptr,
                               const int32_t *kv_len, int64_t batch_size) {
  if (planner->max_partial_tokens == 0)
    return 0;
  int64_t tiles = 0, longest = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t q_len = qo_indptr[b + 1] - qo_indptr[b];
    if (q_len == 0)
      continue;
    tiles += request_tiles(planner, q_len);
    longest = kv_len[b] > longest ? kv_len[b] : longest;
  }
  if (tiles * 2 > planner->wave || longest <= IGNIS_MLA_MIN_CHUNK)
    return 0; /* half a wave or more already: splitting buys little and costs the merge */
  /* the smallest fitting chunk, in key tiles: lo fails or is the answer; at hi (the longest
   * request in one chunk) nothing splits, which fits */
  int64_t lo = IGNIS_MLA_MIN_CHUNK / IGNIS_MLA_KEY_TILE, hi = ceil_div64(longest, IGNIS_MLA_KEY_TILE);
  if (!chunk_fits(planner, qo_indptr, kv_len, batch_size, lo * IGNIS_MLA_KEY_TILE)) {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (chunk_fits(planner, qo_indptr, kv_len, batch_size, mid * IGNIS_MLA_KEY_TILE))
        hi = mid;
      else
        lo = mid;
    }
    lo = hi;
  }
  return lo * IGNIS_MLA_KEY_TILE < longest ? lo * IGNIS_MLA_KEY_TILE : 0;
}

size_t ignis_mla_plan_batch(const ignis_mla_planner *planner, const int32_t *qo_indptr,
                            const int32_t *kv_indptr, const int32_t *kv_len, int64_t batch_size,
                            void *image) {
  const int64_t chunk = ignis_mla_choose_chunk(planner, qo_indptr, kv_len, batch_size);
  ignis_mla_work *work = ignis_mla_schedule_work(image);
  ignis_mla_merge *merge = ignis_mla_schedule_merge(planner, image);
  int32_t num_work = 0, num_merge = 0, partial_tokens = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    const int32_t q_len = qo_indptr[b + 1] - qo_indptr[b], len = kv_len[b];
    if (q_len == 0)
      continue;
    const int64_t splits = chunk > 0 && len > chunk ? ceil_div64(len, chunk) : 1;
    const int64_t rows = (int64_t)q_len * planner->num_heads;
    for (int64_t c = 0; c < splits; ++c) {
      const int32_t kv_start = splits > 1 ? (int32_t)(c * chunk) : 0;
      const int32_t kv_end = splits > 1 && (c + 1) * chunk < len ? (int32_t)((c + 1) * chunk) : len;
      for (int64_t r = 0; r < rows; r += planner->tile_rows) {
        ignis_mla_work w = {
            qo_indptr[b], q_len,  (int32_t)r,   len,
            kv_start,     kv_end, kv_indptr[b], splits > 1 ? partial_tokens + (int32_t)c * q_len : -1};
        work[num_work++] = w;
      }
    }
    if (splits > 1) {
      for (int32_t i = 0; i < q_len; ++i) {
        ignis_mla_merge m = {qo_indptr[b] + i, partial_tokens + i, q_len, (int32_t)splits};
        merge[num_merge++] = m;
      }
      partial_tokens += (int32_t)splits * q_len;
    }
  }
  ignis_mla_schedule_header *header = (ignis_mla_schedule_header *)image;
  header->num_work = num_work;
  header->num_merge = num_merge;
  header->num_partial_tokens = partial_tokens;
  header->batch_size = (int32_t)batch_size;
  if (num_merge == 0)
    return sizeof *header + sizeof(ignis_mla_work) * (size_t)num_work;
  return (size_t)((char *)(merge + num_merge) - (char *)image);
}
