/* The decode planner (see decode_plan.h): bounds from the configuration, the chunk choice for a
 * batch (binary search over the chunk size in pages), and the schedule image. */
#include "sched/decode_plan.h"
#include "sched/plan_math.h"

#include <string.h>

/* Smallest auto chunk, in pages: at least IGNIS_DECODE_MIN_CHUNK_TOKENS tokens. */
static int64_t min_chunk_pages(int64_t page_size) {
  return ceil_div(IGNIS_DECODE_MIN_CHUNK_TOKENS, page_size);
}

/* Items of the longest request the plan admits, with chunks of chunk_pages pages. */
static int64_t longest_request_items(const ignis_decode_planner *pl, int64_t chunk_pages) {
  int64_t pages = ceil_div(pl->max_kv_len, pl->page_size);
  return max64(1, ceil_div(pages, chunk_pages));
}

int ignis_decode_planner_init(ignis_decode_planner *pl, int64_t max_batch, int64_t max_kv_len,
                              int64_t page_size, int64_t num_kv_heads, int64_t sm_count,
                              int64_t blocks_per_sm, int32_t disable_split_kv, int64_t fixed_split_pages) {
  pl->max_batch = max_batch;
  pl->max_kv_len = max_kv_len;
  pl->page_size = page_size;
  pl->num_kv_heads = num_kv_heads;
  pl->wave = sm_count * blocks_per_sm;
  pl->disable_split_kv = disable_split_kv;
  pl->fixed_split_pages = disable_split_kv ? 0 : fixed_split_pages;
  if (max_batch >= INT32_MAX || max_kv_len > INT32_MAX)
    return -1;
  if (disable_split_kv) {
    pl->max_work = max_batch;
    pl->max_partials = 0;
  } else if (pl->fixed_split_pages > 0) {
    int64_t items = longest_request_items(pl, pl->fixed_split_pages);
    if (items > INT32_MAX / max_batch)
      return -1;
    pl->max_work = max_batch * items;
    pl->max_partials = items > 1 ? pl->max_work : 0;
  } else {
    int64_t items = longest_request_items(pl, min_chunk_pages(page_size));
    int64_t wave_items = pl->wave / num_kv_heads;
    if (items > 1) {
      /* filling a wave (small batches), or at most IGNIS_DECODE_BALANCE_SPLITS items per request */
      int64_t per_request = min64(items, IGNIS_DECODE_BALANCE_SPLITS);
      int64_t fill = items > INT32_MAX / max_batch ? wave_items : min64(wave_items, max_batch * items);
      int64_t split_cap = max64(fill, max_batch * per_request);
      pl->max_work = max64(max_batch, split_cap);
      pl->max_partials = split_cap;
    } else {
      pl->max_work = max_batch;
      pl->max_partials = 0;
    }
  }
  return pl->max_work <= INT32_MAX ? 0 : -1;
}

size_t ignis_decode_schedule_work_offset(const ignis_decode_planner *pl) {
  /* request_partials, kv_indptr, kv_last_page_len */
  size_t arrays_bytes = (size_t)(3 * pl->max_batch + 2) * sizeof(int32_t);
  return sizeof(ignis_decode_schedule_header) + pad16(arrays_bytes);
}

/* Group g of split request b, partials [f, f + n), counts in counter f / 8 + g + b (per KV head;
 * 8 = IGNIS_DECODE_MERGE_GROUP). Unique: a later split request b' > b starts at f' >= f + n, so
 * f' / 8 + b' >= f / 8 + n / 8 + b + 1 > f / 8 + ceil(n / 8) - 1 + b, the last group of b. Below
 * num_partials / 8 + batch_size: f / 8 + ceil(n / 8) - 1 <= (f + n) / 8 <= num_partials / 8. */
int64_t ignis_decode_merge_counters(int64_t num_partials, int64_t batch_size, int64_t num_kv_heads) {
  return ignis_decode_merge_counter_count(num_partials, batch_size, num_kv_heads);
}

size_t ignis_decode_schedule_bytes(const ignis_decode_planner *pl) {
  int64_t counters = ignis_decode_merge_counters(pl->max_partials, pl->max_batch, pl->num_kv_heads);
  return ignis_decode_schedule_work_offset(pl) + (size_t)pl->max_work * sizeof(ignis_decode_work) +
         pad16((size_t)counters * sizeof(uint32_t));
}

/* The requests' page counts as the chunk choice sees them: kv_indptr's, or (kv_indptr NULL) batch
 * requests of `uniform` pages each. */
typedef struct batch_pages {
  const int32_t *kv_indptr;
  const int32_t *pages; /* or each request's page count (length plans) */
  int64_t uniform;
  int64_t batch;
} batch_pages;

static int64_t request_pages(const batch_pages *s, int64_t b) {
  return s->kv_indptr ? (int64_t)s->kv_indptr[b + 1] - s->kv_indptr[b] : s->pages ? s->pages[b] : s->uniform;
}

/* Items of the whole batch with chunks of chunk_pages pages. */
static int64_t count_items(const batch_pages *s, int64_t chunk_pages) {
  if (!s->kv_indptr && !s->pages)
    return s->batch * max64(1, ceil_div(s->uniform, chunk_pages));
  int64_t total = 0;
  for (int64_t b = 0; b < s->batch; ++b)
    total += max64(1, ceil_div(request_pages(s, b), chunk_pages));
  return total;
}

/* A batch that fills the GPU: split each request into at most IGNIS_DECODE_BALANCE_SPLITS chunks
 * when that evens out the waves, by the cost model waves(chunk) * (chunk tokens + a block's fixed
 * cost); 0 (no split) when splitting does not pay. A request of p pages has 1 + #{k : p > k * chunk}
 * items, so one pass over the batch counts the requests above each threshold k * chunk of every
 * candidate (at most 1 + 2 + 3 of them; unused ones never pass), with no division and no branch. */
static int64_t balance_chunk_pages(const ignis_decode_planner *pl, const batch_pages *s, int64_t longest) {
  enum { MAX_SPLITS = IGNIS_DECODE_BALANCE_SPLITS, THRESHOLDS = MAX_SPLITS * (MAX_SPLITS - 1) / 2 };
  int64_t chunk[MAX_SPLITS + 1];
  int32_t threshold[THRESHOLDS];
  int candidates = 1;
  for (int splits = 2; splits <= MAX_SPLITS; ++splits) {
    int64_t c = ceil_div(longest, splits);
    if (c < min_chunk_pages(pl->page_size))
      break;
    chunk[splits] = c;
    candidates = splits;
  }
  if (candidates == 1)
    return 0;
  /* candidate `splits` owns thresholds [first(splits), first(splits) + splits - 1), first(s) =
   * (s - 1)(s - 2) / 2; page counts fit int32, so a threshold past INT32_MAX is never passed */
  for (int splits = 2, t = 0; splits <= MAX_SPLITS; ++splits)
    for (int k = 1; k < splits; ++k, ++t)
      threshold[t] = splits <= candidates ? (int32_t)min64(k * chunk[splits], INT32_MAX) : INT32_MAX;
  int64_t above[THRESHOLDS] = {0};
  if (!s->kv_indptr) { /* a uniform batch: one request, times batch */
    for (int t = 0; t < THRESHOLDS; ++t)
      above[t] = s->uniform > threshold[t] ? s->batch : 0;
  } else {
    int32_t count[THRESHOLDS] = {0};
    for (int64_t b = 0; b < s->batch; ++b) {
      const int32_t pages = s->kv_indptr[b + 1] - s->kv_indptr[b];
      for (int t = 0; t < THRESHOLDS; ++t)
        count[t] += pages > threshold[t];
    }
    for (int t = 0; t < THRESHOLDS; ++t)
      above[t] = count[t];
  }
  int64_t best = 0;
  int64_t best_cost = ceil_div(s->batch * pl->num_kv_heads, pl->wave) *
                      (longest * pl->page_size + IGNIS_DECODE_BLOCK_COST_TOKENS);
  for (int splits = 2; splits <= candidates; ++splits) {
    int64_t items = s->batch;
    for (int k = 1, t = (splits - 1) * (splits - 2) / 2; k < splits; ++k, ++t)
      items += above[t];
    int64_t cost = ceil_div(items * pl->num_kv_heads, pl->wave) *
                   (chunk[splits] * pl->page_size + IGNIS_DECODE_BLOCK_COST_TOKENS);
    if (cost < best_cost) {
      best_cost = cost;
      best = chunk[splits];
    }
  }
  return best;
}

/* A batch below one wave whose longest request has `longest` pages: the smallest chunk of at least
 * lo pages whose items fit wave_items, 0 when no request is longer than lo. */
static int64_t fill_chunk_pages(const batch_pages *s, int64_t longest, int64_t lo, int64_t wave_items) {
  if (longest <= lo) /* every request fits one smallest chunk */
    return 0;
  /* count_items(longest) == batch <= wave_items; find the smallest chunk in [lo, longest] that fits. */
  if (count_items(s, lo) <= wave_items)
    return lo;
  int64_t hi = longest;
  while (hi - lo > 1) { /* invariant: lo does not fit, hi fits */
    int64_t mid = lo + (hi - lo) / 2;
    if (count_items(s, mid) <= wave_items)
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

int64_t ignis_decode_min_chunk_pages(int64_t page_size) {
  return min_chunk_pages(page_size);
}

int64_t ignis_decode_choose_chunk_pages(const ignis_decode_planner *pl, const int32_t *kv_indptr,
                                        int64_t longest_pages, int64_t batch) {
  if (pl->disable_split_kv)
    return 0;
  if (pl->fixed_split_pages > 0)
    return pl->fixed_split_pages;
  const batch_pages s = {kv_indptr, NULL, longest_pages, batch};
  const int64_t longest = batch > 0 ? longest_pages : 0;
  if (batch * pl->num_kv_heads >= pl->wave)
    return balance_chunk_pages(pl, &s, longest);
  return fill_chunk_pages(&s, longest, min_chunk_pages(pl->page_size), pl->wave / pl->num_kv_heads);
}

int64_t ignis_decode_length_chunk_pages(const ignis_decode_length_plan *lp, const int32_t *pages, int64_t batch) {
  const batch_pages s = {NULL, pages, 0, batch};
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b)
    longest = max64(longest, pages[b]);
  return fill_chunk_pages(&s, longest, lp->min_chunk_pages, lp->wave_items);
}

int32_t ignis_decode_plan_lengths(const ignis_decode_length_plan *lp, const int32_t *lens, const int32_t *pages,
                                  int64_t batch, int64_t page_size, int32_t *request_partials,
                                  ignis_decode_work *work) {
  const int32_t chunk_pages = (int32_t)ignis_decode_length_chunk_pages(lp, pages, batch);
  const int64_t chunk_tokens = (int64_t)chunk_pages * page_size;
  int32_t num_work = 0, num_partials = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t items = ignis_decode_length_items(pages[b], chunk_pages);
    request_partials[b] = num_partials;
    for (int32_t i = 0; i < items; ++i) {
      ignis_decode_work w = {(int32_t)b, (int32_t)(i * chunk_tokens),
                             i == items - 1 ? lens[b] : (int32_t)((i + 1) * chunk_tokens), items > 1 ? num_partials++ : -1};
      work[num_work++] = w;
    }
  }
  request_partials[batch] = num_partials;
  return num_work;
}

size_t ignis_decode_plan_batch(const ignis_decode_planner *pl, int64_t chunk_pages, const int32_t *kv_indptr,
                               const int32_t *kv_last_page_len, int64_t batch, void *image) {
  ignis_decode_schedule_header *header = ignis_decode_schedule_header_of(image);
  int32_t *partials = ignis_decode_schedule_partials_of(image);
  ignis_decode_work *work = ignis_decode_schedule_work_of(pl, image);
  int32_t num_work = 0, num_partials = 0, any_split = 0;
  if (chunk_pages <= 0) { /* no split: one item per request */
    for (int64_t b = 0; b < batch; ++b) {
      partials[b] = 0;
      ignis_decode_work w = {(int32_t)b, 0,
                             (int32_t)ignis_paged_request_len(kv_indptr, kv_last_page_len, b, pl->page_size), -1};
      work[b] = w;
    }
    num_work = (int32_t)batch;
  } else {
    /* a request of more than chunk_pages pages: items from every chunk_tokens-th key on, as many
     * as ceil(pages / chunk_pages) (the last page holds a key), with no division */
    const int64_t chunk_tokens = chunk_pages * pl->page_size;
    for (int64_t b = 0; b < batch; ++b) {
      int64_t pages = (int64_t)kv_indptr[b + 1] - kv_indptr[b];
      int64_t kv_len = ignis_paged_request_len(kv_indptr, kv_last_page_len, b, pl->page_size);
      partials[b] = num_partials;
      if (pages <= chunk_pages) {
        ignis_decode_work w = {(int32_t)b, 0, (int32_t)kv_len, -1};
        work[num_work++] = w;
        continue;
      }
      any_split = 1;
      for (int64_t start = 0; start < kv_len; start += chunk_tokens) {
        ignis_decode_work w = {(int32_t)b, (int32_t)start, (int32_t)min64(start + chunk_tokens, kv_len),
                               num_partials++};
        work[num_work++] = w;
      }
    }
  }
  partials[batch] = num_partials;
  memcpy(ignis_decode_schedule_indptr_of(pl, image), kv_indptr, sizeof(int32_t) * (size_t)(batch + 1));
  if (batch > 0)
    memcpy(ignis_decode_schedule_last_page_len_of(pl, image), kv_last_page_len, sizeof(int32_t) * (size_t)batch);
  header->num_work = num_work;
  header->batch_size = (int32_t)batch;
  header->num_partials = num_partials;
  header->chunk_pages = any_split ? (int32_t)chunk_pages : 0;
  size_t counter_bytes = (size_t)ignis_decode_merge_counters(num_partials, batch, pl->num_kv_heads) * sizeof(uint32_t);
  memset(work + num_work, 0, counter_bytes);
  return ignis_decode_schedule_work_offset(pl) + (size_t)num_work * sizeof(ignis_decode_work) + counter_bytes;
}

int64_t ignis_decode_single_max_chunks(int64_t max_kv_len) {
  return max64(1, min64(IGNIS_DECODE_SINGLE_MAX_CHUNKS, max_kv_len / IGNIS_DECODE_MIN_CHUNK_TOKENS));
}

int64_t ignis_decode_single_chunk_tokens(int64_t kv_len, int64_t num_kv_heads, int64_t wave) {
  int64_t unsplit = max64(kv_len, 1);
  if (num_kv_heads >= wave)
    return unsplit;
  int64_t chunks = min64(wave / num_kv_heads, ignis_decode_single_max_chunks(kv_len));
  if (chunks <= 1)
    return unsplit;
  /* >= kv_len / chunks >= IGNIS_DECODE_MIN_CHUNK_TOKENS; a multiple of 64 keeps tiles aligned. */
  int64_t chunk = ceil_div(ceil_div(kv_len, chunks), 64) * 64;
  return chunk >= kv_len ? unsplit : chunk;
}
