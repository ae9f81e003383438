/* The prefill planner (see prefill_plan.h): bounds from the configuration, the tiles of a batch and
 * their key ranges, the chunk choice (binary search over the chunk in pages) and the image. */
#include "sched/prefill_plan.h"
#include "sched/plan_math.h"

int64_t ignis_prefill_q_tile_rows(int64_t head_dim_qk, int64_t head_dim_vo) {
  const int64_t d = max64(head_dim_qk, head_dim_vo);
  return d <= 128 ? 128 : d <= 256 ? 64 : 16;
}

static int64_t min_chunk_pages(const ignis_prefill_planner *pl) {
  return ceil_div(IGNIS_PREFILL_MIN_CHUNK_TOKENS, pl->page_size);
}

int ignis_prefill_planner_init(ignis_prefill_planner *pl, int64_t max_batch, int64_t max_qo_tokens,
                               int64_t max_kv_len, int64_t page_size, int64_t num_kv_heads, int64_t group,
                               int64_t q_tile_rows, int32_t causal, int32_t window_left, int64_t wave,
                               int32_t disable_split_kv, int64_t fixed_split_pages) {
  pl->max_batch = max_batch;
  pl->max_qo_tokens = max_qo_tokens;
  pl->max_kv_len = max_kv_len;
  pl->page_size = page_size;
  pl->num_kv_heads = num_kv_heads;
  pl->group = group;
  pl->q_tile_rows = q_tile_rows;
  pl->causal = causal;
  pl->window_left = window_left;
  pl->wave = max64(wave, 1);
  pl->disable_split_kv = disable_split_kv;
  pl->fixed_split_pages = disable_split_kv ? 0 : fixed_split_pages;
  if (max_batch >= INT32_MAX || max_kv_len > INT32_MAX || max_qo_tokens > INT32_MAX / group)
    return -1;
  /* sum over requests of ceil(q_b * group / T) <= (Q * group + B * (T - 1)) / T */
  pl->max_tiles = (max_qo_tokens * group + max_batch * (q_tile_rows - 1)) / q_tile_rows;
  int64_t pages = ceil_div(max_kv_len, page_size);
  pl->max_work = pl->max_tiles;
  pl->max_partials = pl->max_merge = 0;
  if (pl->fixed_split_pages > 0) {
    /* a range within [0, max_kv_len) touches at most this many aligned chunks */
    int64_t chunks = max64(1, ceil_div(pages, pl->fixed_split_pages));
    if (chunks > 1) {
      if (pl->max_tiles > 0 && chunks > INT32_MAX / pl->max_tiles)
        return -1;
      pl->max_work = pl->max_tiles * chunks;
      pl->max_partials = pl->max_work;
      pl->max_merge = pl->max_tiles;
    }
  } else if (!disable_split_kv && pages > min_chunk_pages(pl)) {
    int64_t wave_items = max64(1, pl->wave / num_kv_heads);
    pl->max_work = max64(pl->max_tiles, wave_items);
    pl->max_partials = wave_items;
    pl->max_merge = wave_items / 2;
  }
  return pl->max_work <= INT32_MAX ? 0 : -1;
}

size_t ignis_prefill_schedule_work_offset(const ignis_prefill_planner *pl) {
  return sizeof(ignis_prefill_schedule_header) + pad16((size_t)pl->max_batch * sizeof(ignis_prefill_request));
}

size_t ignis_prefill_schedule_merge_offset(const ignis_prefill_planner *pl) {
  return ignis_prefill_schedule_work_offset(pl) + pad16((size_t)pl->max_work * sizeof(ignis_prefill_work));
}

size_t ignis_prefill_schedule_bytes(const ignis_prefill_planner *pl) {
  return ignis_prefill_schedule_merge_offset(pl) + pad16((size_t)pl->max_merge * sizeof(ignis_prefill_merge));
}

static int64_t request_kv_len(const ignis_prefill_planner *pl, const int32_t *kv_indptr,
                              const int32_t *kv_last_page_len, int64_t b) {
  if (!kv_last_page_len)
    return (int64_t)kv_indptr[b + 1] - kv_indptr[b]; /* ragged: the rows are the keys */
  return ignis_paged_request_len(kv_indptr, kv_last_page_len, b, pl->page_size);
}

/* Keys [*lo, *hi) any row of the tile starting at packed row r0 may see. */
static void tile_range(const ignis_prefill_planner *pl, int64_t q_len, int64_t kv_len, int64_t r0,
                       int64_t *lo, int64_t *hi) {
  int64_t r1 = min64(r0 + pl->q_tile_rows, q_len * pl->group);
  int64_t first_pos = kv_len - q_len + r0 / pl->group, last_pos = kv_len - q_len + (r1 - 1) / pl->group;
  *hi = pl->causal ? max64(0, min64(kv_len, last_pos + 1)) : kv_len;
  *lo = pl->window_left >= 0 ? max64(0, first_pos - pl->window_left) : 0;
  if (*lo >= *hi)
    *lo = *hi = 0;
}

/* Items of a range with chunks of chunk_tokens keys (0: no split). */
static int64_t range_items(int64_t lo, int64_t hi, int64_t chunk_tokens) {
  if (chunk_tokens <= 0 || hi <= lo)
    return 1;
  return (hi - 1) / chunk_tokens - lo / chunk_tokens + 1;
}

typedef struct batch_view {
  const int32_t *qo_indptr, *kv_indptr, *kv_last_page_len;
  int64_t batch;
} batch_view;

/* Items of the whole batch with chunks of chunk_tokens keys; *longest gets the longest range end. */
static int64_t count_items(const ignis_prefill_planner *pl, const batch_view *v, int64_t chunk_tokens,
                           int64_t *longest) {
  int64_t total = 0;
  for (int64_t b = 0; b < v->batch; ++b) {
    int64_t q_len = (int64_t)v->qo_indptr[b + 1] - v->qo_indptr[b];
    int64_t kv_len = request_kv_len(pl, v->kv_indptr, v->kv_last_page_len, b);
    for (int64_t r0 = 0; r0 < q_len * pl->group; r0 += pl->q_tile_rows) {
      int64_t lo, hi;
      tile_range(pl, q_len, kv_len, r0, &lo, &hi);
      total += range_items(lo, hi, chunk_tokens);
      if (longest)
        *longest = max64(*longest, hi);
    }
  }
  return total;
}

/* Chunk for a batch, in pages; 0 means no split. */
static int64_t choose_chunk_pages(const ignis_prefill_planner *pl, const batch_view *v) {
  if (pl->disable_split_kv)
    return 0;
  if (pl->fixed_split_pages > 0)
    return pl->fixed_split_pages;
  int64_t wave_items = max64(1, pl->wave / pl->num_kv_heads), longest = 0;
  int64_t tiles = count_items(pl, v, 0, &longest);
  int64_t lo = min_chunk_pages(pl), hi = ceil_div(longest, pl->page_size);
  if (tiles >= wave_items || hi <= lo)
    return 0;
  if (count_items(pl, v, lo * pl->page_size, NULL) <= wave_items)
    return lo;
  while (hi - lo > 1) { /* invariant: lo does not fit, hi fits (one item per tile) */
    int64_t mid = lo + (hi - lo) / 2;
    if (count_items(pl, v, mid * pl->page_size, NULL) <= wave_items)
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

size_t ignis_prefill_plan_batch(const ignis_prefill_planner *pl, const int32_t *qo_indptr,
                                const int32_t *kv_indptr, const int32_t *kv_last_page_len, int64_t batch,
                                void *image) {
  ignis_prefill_schedule_header *header = ignis_prefill_schedule_header_of(image);
  ignis_prefill_request *requests = ignis_prefill_schedule_requests_of(image);
  ignis_prefill_work *work = ignis_prefill_schedule_work_of(pl, image);
  ignis_prefill_merge *merge = ignis_prefill_schedule_merge_of(pl, image);
  batch_view view = {qo_indptr, kv_indptr, kv_last_page_len, batch};
  int64_t chunk_tokens = choose_chunk_pages(pl, &view) * pl->page_size;
  int32_t num_work = 0, num_merge = 0, num_partials = 0;
  int64_t mask_offset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t q_len = (int64_t)qo_indptr[b + 1] - qo_indptr[b];
    int64_t kv_len = request_kv_len(pl, kv_indptr, kv_last_page_len, b);
    ignis_prefill_request request = {mask_offset, qo_indptr[b], (int32_t)q_len, kv_indptr[b], (int32_t)kv_len};
    requests[b] = request;
    mask_offset += (q_len * kv_len + 7) / 8;
    for (int64_t r0 = 0; r0 < q_len * pl->group; r0 += pl->q_tile_rows) {
      int64_t lo, hi;
      tile_range(pl, q_len, kv_len, r0, &lo, &hi);
      int64_t items = range_items(lo, hi, chunk_tokens);
      if (items == 1) {
        ignis_prefill_work w = {(int32_t)b, (int32_t)r0, (int32_t)lo, (int32_t)hi, -1};
        work[num_work++] = w;
        continue;
      }
      ignis_prefill_merge m = {(int32_t)b, (int32_t)r0, num_partials, (int32_t)items};
      merge[num_merge++] = m;
      for (int64_t start = lo; start < hi; start = (start / chunk_tokens + 1) * chunk_tokens) {
        ignis_prefill_work w = {(int32_t)b, (int32_t)r0, (int32_t)start,
                                (int32_t)min64((start / chunk_tokens + 1) * chunk_tokens, hi), num_partials++};
        work[num_work++] = w;
      }
    }
  }
  header->num_work = num_work;
  header->num_merge = num_merge;
  header->batch_size = (int32_t)batch;
  header->num_partials = num_partials;
  return ignis_prefill_schedule_merge_offset(pl) + (size_t)num_merge * sizeof(ignis_prefill_merge);
}

int64_t ignis_prefill_single_max_partials(int64_t max_kv_len, int64_t num_kv_heads) {
  if (max_kv_len < 2 * IGNIS_PREFILL_MIN_CHUNK_TOKENS)
    return 0;
  return IGNIS_PREFILL_SINGLE_MAX_BLOCKS / num_kv_heads;
}

int64_t ignis_prefill_single_chunk_tokens(int64_t q_len, int64_t kv_len, int64_t group, int64_t num_kv_heads,
                                          int64_t q_tile_rows, int64_t wave) {
  int64_t unsplit = max64(kv_len, 1);
  int64_t blocks = ignis_prefill_implicit_tiles(q_len, group, q_tile_rows) * num_kv_heads;
  if (blocks == 0 || blocks >= wave)
    return unsplit;
  int64_t chunks = min64(min64(wave, IGNIS_PREFILL_SINGLE_MAX_BLOCKS) / blocks,
                         kv_len / IGNIS_PREFILL_MIN_CHUNK_TOKENS);
  if (chunks <= 1)
    return unsplit;
  int64_t chunk = ceil_div(ceil_div(kv_len, chunks), 64) * 64;
  return chunk >= kv_len ? unsplit : chunk;
}

void ignis_prefill_implicit_schedule(int64_t q_len, int64_t kv_len, int64_t group, int64_t q_tile_rows,
                                     int64_t chunk_tokens, ignis_prefill_work *work, ignis_prefill_merge *merge) {
  int64_t tiles = ignis_prefill_implicit_tiles(q_len, group, q_tile_rows);
  int64_t chunks = ignis_prefill_implicit_chunks(kv_len, chunk_tokens);
  for (int64_t i = 0; i < tiles * chunks; ++i)
    work[i] = ignis_prefill_implicit_item(i, chunks, chunk_tokens, kv_len, q_tile_rows);
  for (int64_t t = 0; chunks > 1 && t < tiles; ++t)
    merge[t] = ignis_prefill_implicit_merge(t, chunks, q_tile_rows);
}
