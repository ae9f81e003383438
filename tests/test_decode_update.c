/* The decode plan update's host path against plain references: its one-pass validation
 * (op_decode.c: scan_update) must accept exactly the host arrays the named checks accept, over
 * random small batches that are valid or broken in every way (negative, decreasing or huge
 * kv_indptr entries, last_page_len out of range, requests just past max_kv_len); and the planner's
 * chunk choice and schedule (sched/decode_plan.h, which take the longest request from the caller
 * and count items without division) must equal a direct implementation of the policy over random
 * batches below and above a wave. CPU backend only: it is host code. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sched/decode_plan.h"

static unsigned rng_state = 1;
static unsigned rng(void) {
  rng_state = rng_state * 1103515245u + 12345u;
  return rng_state >> 8;
}

/* ---- validation ---------------------------------------------------------------------------- */
/* Whether the named checks accept the arrays (decode.h: monotonic from >= 0, last_page_len in
 * 1..page_size for requests with pages and 0..page_size without, lengths <= max_kv_len). */
static int reference_valid(const int32_t *indptr, const int32_t *last, int64_t batch, int64_t page_size,
                           int64_t max_kv_len) {
  if (indptr[0] < 0)
    return 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t pages = (int64_t)indptr[b + 1] - indptr[b];
    if (pages < 0 || last[b] < (pages > 0 ? 1 : 0) || last[b] > page_size)
      return 0;
    if (pages > 0 && (pages - 1) * page_size + last[b] > max_kv_len)
      return 0;
  }
  return 1;
}

static void test_validation(void) {
  enum { MAX_BATCH = 6 };
  static const int64_t page_sizes[] = {1, 4, 16};
  static const int64_t max_kv_lens[] = {0, 1, 37, 64, 2147483647};
  for (size_t p = 0; p < sizeof page_sizes / sizeof page_sizes[0]; ++p)
    for (size_t m = 0; m < sizeof max_kv_lens / sizeof max_kv_lens[0]; ++m) {
      const int64_t page_size = page_sizes[p], max_kv_len = max_kv_lens[m];
      h_case("validation, page %lld, max_kv_len %lld", (long long)page_size, (long long)max_kv_len);
      ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
      config.num_qo_heads = 4;
      config.num_kv_heads = 1;
      config.head_dim = 64;
      config.page_size = page_size;
      config.max_batch_size = MAX_BATCH;
      config.max_kv_len = max_kv_len;
      ignis_decode_plan *plan = NULL;
      if (!CHECK_STATUS(ignis_decode_plan_create(&config, &plan), IGNIS_OK))
        continue;
      int accepted = 0, refused = 0;
      for (int trial = 0; trial < 4000; ++trial) {
        const int64_t batch = rng() % (MAX_BATCH + 1);
        int32_t indptr[MAX_BATCH + 1], last[MAX_BATCH];
        /* pages of a length near max_kv_len, mostly valid, sometimes broken */
        const int64_t near = max_kv_len / page_size + 1;
        indptr[0] = rng() % 50 == 0 ? -(int32_t)(rng() % 3 + 1) : (int32_t)(rng() % 3);
        for (int64_t b = 0; b < batch; ++b) {
          int64_t pages = rng() % 4 == 0 ? near - 1 + (int64_t)(rng() % 3) : (int64_t)(rng() % 4);
          if (near > 1000000)
            pages = rng() % 4;
          int64_t next = indptr[b] + pages;
          switch (rng() % 40) {
          case 0: next = indptr[b] - 1; break;               /* decreasing */
          case 1: next = -(int64_t)(rng() % 5) - 1; break;   /* negative */
          case 2: next = 2147483647; break;                  /* huge */
          default: break;
          }
          indptr[b + 1] = (int32_t)(next > 2147483647 ? 2147483647 : next < -2147483647 ? -2147483647 : next);
          int64_t l = pages > 0 ? 1 + (int64_t)(rng() % (uint64_t)page_size) : 0;
          switch (rng() % 30) {
          case 0: l = 0; break;
          case 1: l = page_size + 1; break;
          case 2: l = -1; break;
          case 3: l = page_size; break;
          default: break;
          }
          last[b] = (int32_t)l;
        }
        const int valid = reference_valid(indptr, last, batch, page_size, max_kv_len);
        ignis_status status = ignis_decode_plan_update(plan, indptr, last, batch, NULL, 0, NULL);
        if (!CHECKF((status == IGNIS_OK) == valid, "trial %d: status %d but the arrays are %s", trial, (int)status,
                    valid ? "valid" : "invalid"))
          break;
        accepted += valid;
        refused += !valid;
      }
      CHECKF(accepted > 100 && refused > 100, "accepted %d, refused %d", accepted, refused);
      ignis_decode_plan_destroy(plan);
    }
}

/* ---- planner ------------------------------------------------------------------------------- */
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t items_of(int64_t pages, int64_t chunk) { return chunk > 0 && pages > chunk ? cdiv(pages, chunk) : 1; }

/* The policy of decode_plan.h, directly: fixed / disabled splits, the balance of a full batch by
 * the cost model, else the smallest chunk whose items fit one wave. */
static int64_t reference_chunk(const ignis_decode_planner *pl, const int32_t *indptr, int64_t batch) {
  if (pl->disable_split_kv)
    return 0;
  if (pl->fixed_split_pages > 0)
    return pl->fixed_split_pages;
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b)
    longest = indptr[b + 1] - indptr[b] > longest ? indptr[b + 1] - indptr[b] : longest;
  const int64_t lo = cdiv(IGNIS_DECODE_MIN_CHUNK_TOKENS, pl->page_size);
  if (batch * pl->num_kv_heads >= pl->wave) {
    int64_t best = 0, best_cost = cdiv(batch * pl->num_kv_heads, pl->wave) *
                                  (longest * pl->page_size + IGNIS_DECODE_BLOCK_COST_TOKENS);
    for (int64_t splits = 2; splits <= IGNIS_DECODE_BALANCE_SPLITS; ++splits) {
      const int64_t chunk = cdiv(longest, splits);
      if (chunk < lo)
        break;
      int64_t items = 0;
      for (int64_t b = 0; b < batch; ++b)
        items += items_of(indptr[b + 1] - indptr[b], chunk);
      const int64_t cost = cdiv(items * pl->num_kv_heads, pl->wave) *
                           (chunk * pl->page_size + IGNIS_DECODE_BLOCK_COST_TOKENS);
      if (cost < best_cost) {
        best_cost = cost;
        best = chunk;
      }
    }
    return best;
  }
  if (longest <= lo)
    return 0;
  for (int64_t chunk = lo;; ++chunk) {
    int64_t items = 0;
    for (int64_t b = 0; b < batch; ++b)
      items += items_of(indptr[b + 1] - indptr[b], chunk);
    if (items <= pl->wave / pl->num_kv_heads)
      return chunk;
  }
}

static void test_planner(void) {
  enum { MAX_BATCH = 300 };
  static int32_t indptr[MAX_BATCH + 1], last[MAX_BATCH];
  const size_t image_bytes = 8 << 20;
  void *image = malloc(image_bytes);
  for (int trial = 0; trial < 600; ++trial) {
    const int64_t page_size = (int64_t[]){1, 4, 16}[rng() % 3];
    const int64_t heads = (int64_t[]){1, 2, 8}[rng() % 3];
    const int64_t batch = 1 + rng() % MAX_BATCH;
    const int64_t max_pages = (int64_t[]){3, 40, 600}[rng() % 3];
    const int uniform = rng() % 4 == 0;
    indptr[0] = 0;
    const int64_t shared = rng() % (max_pages + 1);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pages = uniform ? shared : (int64_t)(rng() % (max_pages + 1));
      indptr[b + 1] = indptr[b] + (int32_t)pages;
      last[b] = pages > 0 ? (int32_t)(1 + rng() % page_size) : 0;
    }
    int64_t longest = 0;
    for (int64_t b = 0; b < batch; ++b)
      longest = indptr[b + 1] - indptr[b] > longest ? indptr[b + 1] - indptr[b] : longest;
    ignis_decode_planner pl;
    const int mode = rng() % 6; /* 0: disabled splits, 1: fixed, else auto */
    if (ignis_decode_planner_init(&pl, MAX_BATCH, max_pages * page_size, page_size, heads, 132, 2, mode == 0,
                                  mode == 1 ? 1 + rng() % 50 : 0) != 0)
      continue;
    h_case("planner trial %d: batch %lld, page %lld, %lld heads, mode %d", trial, (long long)batch,
           (long long)page_size, (long long)heads, mode);
    const int64_t chunk = ignis_decode_choose_chunk_pages(&pl, indptr, longest, batch);
    CHECKF(chunk == reference_chunk(&pl, indptr, batch), "chunk %lld, reference %lld", (long long)chunk,
           (long long)reference_chunk(&pl, indptr, batch));
    if (uniform) /* the uniform form of the same batch */
      CHECK(ignis_decode_choose_chunk_pages(&pl, NULL, shared, batch) == chunk);
    if (!CHECK(ignis_decode_schedule_bytes(&pl) <= image_bytes))
      continue;
    ignis_decode_plan_batch(&pl, chunk, indptr, last, batch, image);
    /* the schedule: each request's items cover its keys in chunks of chunk * page_size */
    const ignis_decode_schedule_header *h = ignis_decode_schedule_header_of(image);
    const int32_t *partials = ignis_decode_schedule_partials_of(image);
    const ignis_decode_work *work = ignis_decode_schedule_work_of(&pl, image);
    int64_t w = 0, partial = 0, bad = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t pages = indptr[b + 1] - indptr[b];
      const int64_t kv_len = pages > 0 ? (pages - 1) * page_size + last[b] : 0;
      const int64_t n = items_of(pages, chunk);
      bad += partials[b] != partial;
      for (int64_t i = 0; i < n; ++i, ++w) {
        const int64_t start = i * chunk * page_size, end = n == 1 ? kv_len : start + chunk * page_size;
        bad += work[w].request != b || work[w].kv_start != start || work[w].kv_end != (end < kv_len ? end : kv_len) ||
               work[w].partial != (n > 1 ? partial + i : -1);
      }
      partial += n > 1 ? n : 0;
    }
    CHECKF(bad == 0 && h->num_work == w && h->num_partials == partial && partials[batch] == partial,
           "%lld wrong entries, %d items (expected %lld), %d partials (expected %lld)", (long long)bad, h->num_work,
           (long long)w, h->num_partials, (long long)partial);
  }
  free(image);
}

int main(void) {
  h_init("test_decode_update");
  test_validation();
  test_planner();
  return h_finish();
}
