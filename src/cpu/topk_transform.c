/* CPU backend of the fused top-k transforms (include/ignis/topk.h), the reference: one row at a
 * time, rows in parallel, exact and deterministic.
 *
 * A row: clamp its window [start, start + len) into the row; when len <= k every local index is
 * selected. Otherwise each score gets a 32-bit order key (NaN 0, below every number; core/philox.h
 * for the rest) and a radix select over the keys' bits (digits of 11, 11 and 10 bits: a histogram
 * of the keys still matching the digits chosen so far, then the highest digit whose suffix count
 * reaches what is still needed) finds the k-th largest key t, how many keys equal it and how many
 * of those the row takes. One pass in index order then selects every key above t and the first
 * (tie_break SMALL / NONE) or last (LARGE) of the ties, so the selected local indices come out in
 * ascending order, and the transform maps each one as it is written. */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/philox.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

enum { LEVELS = 3, MAX_BINS = 1 << 11 };
static const int level_shift[LEVELS] = {21, 10, 0};
static const int level_bits[LEVELS] = {11, 11, 10};

/* The k-th largest key of keys[0..n) (1 <= k <= n), the number of keys equal to it (*equal) and
 * how many of those are among the k largest (*take). */
static uint32_t kth_largest_key(const uint32_t *keys, int64_t n, int64_t k, int64_t *equal, int64_t *take) {
  uint32_t prefix = 0, mask = 0;
  int64_t need = k, in_bin = n;
  int64_t count[MAX_BINS];
  for (int level = 0; level < LEVELS; ++level) {
    const int shift = level_shift[level], bins = 1 << level_bits[level];
    for (int d = 0; d < bins; ++d)
      count[d] = 0;
    for (int64_t i = 0; i < n; ++i)
      if ((keys[i] & mask) == prefix)
        ++count[(keys[i] >> shift) & (uint32_t)(bins - 1)];
    int d = bins - 1;
    while (count[d] < need) { /* the digits' counts sum to in_bin >= need: the loop stops at d >= 0 */
      need -= count[d];
      --d;
    }
    prefix |= (uint32_t)d << shift;
    mask |= (uint32_t)(bins - 1) << shift;
    in_bin = count[d];
  }
  *equal = in_bin;
  *take = need;
  return prefix;
}

static uint32_t score_key(const ignis_topk_transform_params *p, const void *row, int64_t i) {
  const float v = ignis_cpu_load(row, p->dtype, i);
  return isnan(v) ? 0u : ignis_order_key(v);
}

/* The selected local indices of row r in ascending order into picked; returns how many. */
static int64_t select_row(const ignis_topk_transform_params *p, int64_t r, int64_t start, int64_t len,
                          uint32_t *keys, int32_t *picked) {
  if (len <= p->k) {
    for (int64_t j = 0; j < len; ++j)
      picked[j] = (int32_t)j;
    return len;
  }
  const void *row = ignis_cpu_at(p->input, p->dtype, r * p->input_row_stride + start);
  for (int64_t j = 0; j < len; ++j)
    keys[j] = score_key(p, row, j);
  int64_t equal, take;
  const uint32_t thr = kth_largest_key(keys, len, p->k, &equal, &take);
  const int64_t skip = p->prefer_large ? equal - take : 0; /* ties passed over before the taken ones */
  int64_t picks = 0, tie = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (keys[j] > thr) {
      picked[picks++] = (int32_t)j;
    } else if (keys[j] == thr) {
      if (tie >= skip && tie < skip + take)
        picked[picks++] = (int32_t)j;
      ++tie;
    }
  }
  return picks; /* = k */
}

/* The low 32 bits of a transformed index (the header: the caller keeps it within int32). */
static int32_t low32(int64_t v) {
  return (int32_t)(uint32_t)(uint64_t)v;
}

static void write_row(const ignis_topk_transform_params *p, int64_t r, const int32_t *picked, int64_t picks) {
  int32_t *out = p->out + r * p->out_row_stride;
  int32_t *raw = p->raw_out ? p->raw_out + r * p->raw_out_row_stride : NULL;
  const int32_t *pages = NULL;
  int64_t pt_start = 0;
  if (p->kind == IGNIS_TOPK_TRANSFORM_PAGE_TABLE) {
    const int64_t b = p->row_to_batch ? p->row_to_batch[r] : r;
    if (b >= 0 && b < p->page_table_rows)
      pages = p->page_table + b * p->page_table_row_stride;
    pt_start = p->page_table_row_starts ? p->page_table_row_starts[r] : 0;
  }
  for (int64_t i = 0; i < p->k; ++i) {
    const int64_t j = i < picks ? picked[i] : -1;
    int32_t value = -1;
    if (j >= 0 && p->kind == IGNIS_TOPK_TRANSFORM_RAGGED) {
      value = low32(j + p->offsets[r]);
    } else if (j >= 0 && pages) {
      const int64_t slot = pt_start + (j >> p->page_shift);
      if (slot >= 0 && slot < p->page_table_width)
        value = low32((int64_t)pages[slot] * p->page_size + (j & (p->page_size - 1)));
    }
    out[i] = value;
    if (raw)
      raw[i] = (int32_t)j;
  }
}

ignis_status ignis_cpu_topk_transform(const ignis_topk_transform_params *p, int32_t device, void *stream) {
  const int64_t picks_max = p->k < p->max_len ? p->k : p->max_len;
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->num_rows * p->max_len >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    uint32_t *keys = malloc(sizeof(uint32_t) * (size_t)(p->max_len > 0 ? p->max_len : 1));
    int32_t *picked = malloc(sizeof(int32_t) * (size_t)(picks_max > 0 ? picks_max : 1));
    if (!keys || !picked) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
      failed = 1;
    }
#ifdef _OPENMP
#pragma omp barrier
#endif
    if (!failed) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (int64_t r = 0; r < p->num_rows; ++r) {
        int64_t start = p->row_starts ? p->row_starts[r] : 0, len = p->lengths[r];
        start = start < 0 ? 0 : start > p->max_len ? p->max_len : start;
        len = len < 0 ? 0 : len > p->max_len - start ? p->max_len - start : len;
        write_row(p, r, picked, select_row(p, r, start, len, keys, picked));
      }
    }
    free(keys);
    free(picked);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL,
                           "ignis cpu top-k transform: out of host memory for a row buffer");
  return IGNIS_OK;
}
