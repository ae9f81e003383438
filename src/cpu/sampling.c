/* CPU backend of the sampling ops (include/ignis/sampling.h), one row at a time, rows in parallel.
 * It runs the algorithm of the CUDA backend step for step, with the same bit-exact helpers
 * (core/philox.h), so both backends return the same samples:
 *
 *   weights   probs: w = p if finite and > 0, else 0; logits: w = ignis_exp_nonpos(x - max).
 *   threshold the allowed set is always {w_i > 0, key(w_i) >= thr} for an order key thr. It is found
 *             by a radix search over the keys' bits in three levels (12, 11 and 9 bits): a
 *             histogram of the elements in the current bin, holding counts and fixed-point masses;
 *             the digit where the suffix sum first reaches the target (k for top-k, p * W for top-p)
 *             becomes the next bin, and the target drops by what lies above it. A level whose bin
 *             holds less than the target (fixed-point truncation) ends the search: the whole bin is
 *             allowed. Masses: level 1 sums each bin in its own exponent's units and shifts the sum
 *             to the row's largest exponent; levels 2 and 3 shift each element (core/philox.h).
 *   sample    argmax over the allowed set of w_i / E_i, E_i = -ln(u_i) from Philox (draw 0, group
 *             i / 4, word i % 4), the lowest index on ties.
 *
 * Top-k selection, the logits mask and softmax use the same order keys; softmax sums in f64 here
 * (the CUDA backend in f32), so the two agree to rounding only. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/error.h"
#include "core/philox.h"
#include "cpu/cpu_common.h"

enum { LEVELS = 3 };
static const int level_shift[LEVELS] = {20, 9, 0};
static const int level_bits[LEVELS] = {12, 11, 9};
#define MAX_DIGITS 4096

static float sanitize_prob(float p) {
  return (p > 0.0f && p <= FLT_MAX) ? p : 0.0f;
}

static float sanitize_logit(float x) {
  return isnan(x) ? -INFINITY : (x > FLT_MAX ? FLT_MAX : x);
}

static int64_t load_index(const void *base, ignis_dtype dtype, int64_t i) {
  return dtype == IGNIS_I32 ? ((const int32_t *)base)[i] : ((const int64_t *)base)[i];
}

static void store_index(void *base, ignis_dtype dtype, int64_t i, int64_t value) {
  if (dtype == IGNIS_I32)
    ((int32_t *)base)[i] = (int32_t)value;
  else
    ((int64_t *)base)[i] = value;
}

static uint64_t rng_seed(const ignis_philox_source *rng, int64_t row) {
  if (!rng->seed_arr)
    return rng->seed;
  return (uint64_t)rng->seed_arr[rng->seed_len == 1 ? 0 : row];
}

static uint64_t rng_offset(const ignis_philox_source *rng, int64_t row) {
  if (!rng->offset_arr)
    return rng->offset;
  return (uint64_t)rng->offset_arr[rng->offset_len == 1 ? 0 : row];
}

/* ---- radix threshold search -------------------------------------------------------------------- */
/* Elements take part when valid[i]; key[i] is their order key. Masses (with_mass) are of the
 * positive float w[i] at the scale of exponent field e_max. */
typedef struct search_row {
  int64_t n;
  const uint32_t *key;
  const unsigned char *valid;
  const float *w;
  int with_mass;
  int e_max;
  int64_t *count; /* MAX_DIGITS scratch */
  uint64_t *mass; /* MAX_DIGITS scratch */
} search_row;

typedef struct search_result {
  uint32_t thr;        /* allowed: key >= thr */
  uint64_t mass_above; /* mass of the elements with key >= thr (with_mass) */
} search_result;

/* Histogram of level `level` over the elements of bin `prefix` (the digits of the earlier levels). */
static void histogram(const search_row *s, int level, uint32_t prefix) {
  const int digits = 1 << level_bits[level];
  const int shift = level_shift[level];
  const int prefix_shift = shift + level_bits[level];
  memset(s->count, 0, sizeof(int64_t) * (size_t)digits);
  memset(s->mass, 0, sizeof(uint64_t) * (size_t)digits);
  /* Every element of a level-1 bin has the bin's exponent field (key bits 30..23). */
  const uint32_t level1_digit = level == 2 ? prefix >> level_bits[1] : prefix;
  const int bin_e = ignis_mass_exponent((level1_digit & 0x7FFu) << 20);
  for (int64_t i = 0; i < s->n; ++i) {
    if (!s->valid[i])
      continue;
    const uint32_t k = s->key[i];
    if (level > 0 && (k >> prefix_shift) != prefix)
      continue;
    const uint32_t d = (k >> shift) & (uint32_t)(digits - 1);
    s->count[d] += 1;
    if (s->with_mass) {
      const uint32_t bits = ignis_float_bits(s->w[i]);
      s->mass[d] += level == 0 ? ignis_mass_own(bits) : ignis_mass_at(ignis_mass_own(bits), bin_e, s->e_max);
    }
  }
  if (level == 0 && s->with_mass)
    for (int d = 2048; d < digits; ++d)
      s->mass[d] = ignis_mass_at(s->mass[d], ignis_mass_exponent((uint32_t)(d - 2048) << 20), s->e_max);
}

/* Radix search for the smallest key whose suffix (count or mass) reaches the target. */
static search_result search(const search_row *s, int by_mass, int64_t count_target, double mass_target) {
  search_result r = {0, 0};
  uint32_t prefix = 0;
  uint64_t mass_above = 0;
  for (int level = 0; level < LEVELS; ++level) {
    histogram(s, level, prefix);
    const int digits = 1 << level_bits[level];
    int64_t total_count = 0;
    uint64_t total_mass = 0;
    for (int d = 0; d < digits; ++d) {
      total_count += s->count[d];
      total_mass += s->mass[d];
    }
    const int short_of_target = by_mass ? (double)total_mass < mass_target : total_count < count_target;
    if (short_of_target) { /* the whole bin is allowed */
      r.thr = level == 0 ? 0 : prefix << (level_shift[level] + level_bits[level]);
      r.mass_above = mass_above + total_mass;
      return r;
    }
    int64_t suffix_count = 0;
    uint64_t suffix_mass = 0;
    int digit = 0;
    for (int d = digits - 1; d >= 0; --d) {
      const int reached = by_mass ? (double)(suffix_mass + s->mass[d]) >= mass_target
                                  : suffix_count + s->count[d] >= count_target;
      if (reached) {
        digit = d;
        break;
      }
      suffix_count += s->count[d];
      suffix_mass += s->mass[d];
    }
    if (by_mass)
      mass_target -= (double)suffix_mass;
    else
      count_target -= suffix_count;
    mass_above += suffix_mass;
    prefix = (prefix << level_bits[level]) | (uint32_t)digit;
    if (level == LEVELS - 1)
      mass_above += s->mass[digit];
  }
  r.thr = prefix;
  r.mass_above = mass_above;
  return r;
}

/* ---- one row of the filter ops ------------------------------------------------------------------- */
typedef struct row_scratch {
  float *x;
  float *w;
  uint32_t *key;
  unsigned char *valid;
  int64_t *count;
  uint64_t *mass;
} row_scratch;

static void free_scratch(row_scratch *s) {
  free(s->x);
  free(s->w);
  free(s->key);
  free(s->valid);
  free(s->count);
  free(s->mass);
}

static int alloc_scratch(row_scratch *s, int64_t n) {
  s->x = malloc(sizeof(float) * (size_t)n);
  s->w = malloc(sizeof(float) * (size_t)n);
  s->key = malloc(sizeof(uint32_t) * (size_t)n);
  s->valid = malloc((size_t)n);
  s->count = malloc(sizeof(int64_t) * MAX_DIGITS);
  s->mass = malloc(sizeof(uint64_t) * MAX_DIGITS);
  return s->x && s->w && s->key && s->valid && s->count && s->mass;
}

/* Per-row thresholds (clamped as the header says). */
static int64_t row_top_k(const ignis_sampling_params *p, int64_t b) {
  return p->top_k_arr ? load_index(p->top_k_arr, p->top_k_dtype, b) : p->top_k_val;
}

static double row_top_p(const ignis_sampling_params *p, int64_t b) {
  double v = p->top_p_arr ? (double)p->top_p_arr[b] : p->top_p_val;
  return v > 0.0 ? v : DBL_MIN;
}

static float row_min_p(const ignis_sampling_params *p, int64_t b) {
  float v = p->min_p_arr ? p->min_p_arr[b] : p->min_p_val;
  return v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
}

/* Exponential race over the allowed elements: argmax of w_i / E_i. */
static int64_t race(const float *w, const unsigned char *allowed, int64_t n, uint64_t seed, uint64_t offset,
                    uint32_t draw, int64_t row) {
  int64_t best = -1, group = -1;
  float best_score = 0.0f;
  ignis_philox_out words = {{0, 0, 0, 0}};
  for (int64_t i = 0; i < n; ++i) {
    if (!allowed[i])
      continue;
    if (i >> 2 != group) {
      group = i >> 2;
      words = ignis_philox_group(seed, offset, draw, (uint64_t)row, (uint64_t)group);
    }
    const float score = w[i] / ignis_neg_log_uniform(words.w[i & 3]);
    if (best < 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best < 0 ? 0 : best;
}

/* Mask of a row: top-k of the logits' own keys (NaN masked), no weights. */
static void mask_row(const ignis_sampling_params *p, int64_t b, row_scratch *s) {
  const int64_t n = p->vocab_size;
  float *x = s->x;
  ignis_cpu_load_row(ignis_cpu_at(p->input, p->dtype, b * p->input_row_stride), p->dtype, n, x);
  void *out = ignis_cpu_at_mut(p->out, p->dtype, b * p->out_row_stride);
  const int64_t k = row_top_k(p, b);
  if (k <= 0 || k >= n) {
    ignis_cpu_store_row(out, p->dtype, n, x);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    s->valid[i] = 1;
    s->key[i] = ignis_order_key(isnan(x[i]) ? -INFINITY : x[i]);
  }
  search_row sr = {n, s->key, s->valid, NULL, 0, 0, s->count, s->mass};
  const search_result r = search(&sr, 0, k, 0.0);
  for (int64_t i = 0; i < n; ++i)
    s->w[i] = (!isnan(x[i]) && s->key[i] >= r.thr) ? x[i] : -INFINITY;
  ignis_cpu_store_row(out, p->dtype, n, s->w);
}

static void filter_row(const ignis_sampling_params *p, int64_t b, row_scratch *s) {
  if (p->output == IGNIS_SAMPLING_OUT_MASK) {
    mask_row(p, b, s);
    return;
  }
  const int64_t n = p->vocab_size;
  const int64_t src = p->indices ? load_index(p->indices, p->indices_dtype, b) : b;
  if (src < 0 || src >= p->num_rows) {
    store_index(p->samples, p->samples_dtype, b, 0);
    return;
  }
  float *x = s->x, *w = s->w;
  ignis_cpu_load_row(ignis_cpu_at(p->input, p->dtype, src * p->input_row_stride), p->dtype, n, x);
  float w_max = 0.0f;
  if (p->logits) {
    float x_max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = sanitize_logit(x[i]);
      x_max = x[i] > x_max ? x[i] : x_max;
    }
    for (int64_t i = 0; i < n; ++i)
      w[i] = x_max == -INFINITY ? 0.0f : ignis_exp_nonpos(x[i] - x_max);
  } else {
    for (int64_t i = 0; i < n; ++i)
      w[i] = sanitize_prob(x[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    s->valid[i] = w[i] > 0.0f;
    s->key[i] = ignis_order_key(w[i]);
    w_max = w[i] > w_max ? w[i] : w_max;
  }
  const int e_max = ignis_mass_exponent(ignis_float_bits(w_max));
  const int want_mass = p->output == IGNIS_SAMPLING_OUT_RENORM || p->filter == IGNIS_SAMPLING_TOP_P ||
                        p->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                        p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  search_row sr = {n, s->key, s->valid, w, want_mass, e_max, s->count, s->mass};

  /* Total mass: the level-1 histogram's sum (the search's own first step). */
  uint64_t total = 0;
  if (want_mass) {
    histogram(&sr, 0, 0);
    for (int d = 0; d < MAX_DIGITS; ++d)
      total += s->mass[d];
  }
  search_result r = {0, total};
  const int has_k = p->filter == IGNIS_SAMPLING_TOP_K || p->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                    p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const int has_p = p->filter == IGNIS_SAMPLING_TOP_P || p->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                    p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  if (has_k) {
    const int64_t k = row_top_k(p, b);
    if (k > 0)
      r = search(&sr, 0, k, 0.0);
  }
  if (has_p) {
    const double top_p = row_top_p(p, b);
    const uint64_t base = p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P ? r.mass_above : total;
    if (top_p < 1.0) {
      const search_result rp = search(&sr, 1, 0, IGNIS_DMUL(top_p, (double)base));
      if (rp.thr >= r.thr)
        r = rp;
    }
  }
  if (p->filter == IGNIS_SAMPLING_MIN_P)
    r.thr = ignis_order_key(IGNIS_FMUL(row_min_p(p, b), w_max));
  for (int64_t i = 0; i < n; ++i)
    s->valid[i] = s->valid[i] && s->key[i] >= r.thr;

  if (p->output == IGNIS_SAMPLING_OUT_RENORM) {
    void *out = ignis_cpu_at_mut(p->out, p->dtype, b * p->out_row_stride);
    const float inv = r.mass_above ? (float)(1.0 / ldexp((double)r.mass_above, e_max - 165)) : 0.0f;
    for (int64_t i = 0; i < n; ++i)
      x[i] = s->valid[i] ? IGNIS_FMUL(w[i], inv) : 0.0f;
    ignis_cpu_store_row(out, p->dtype, n, x);
    return;
  }
  const int64_t token = race(w, s->valid, n, rng_seed(&p->rng, b), rng_offset(&p->rng, b), 0, b);
  store_index(p->samples, p->samples_dtype, b, token);
}

ignis_status ignis_cpu_sampling(const ignis_sampling_params *p) {
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->batch_size * p->vocab_size >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    row_scratch s;
    if (!alloc_scratch(&s, p->vocab_size)) {
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (int64_t b = 0; b < p->batch_size; ++b)
        filter_row(p, b, &s);
    }
    free_scratch(&s);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu sampling: out of host memory for a row buffer");
  return IGNIS_OK;
}

/* ---- softmax ------------------------------------------------------------------------------------- */
ignis_status ignis_cpu_softmax(const ignis_softmax_params *p) {
  int failed = 0;
  const int64_t n = p->vocab_size;
#ifdef _OPENMP
#pragma omp parallel if (p->num_rows * n >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    float *x = malloc(sizeof(float) * (size_t)n);
    if (!x) {
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (int64_t r = 0; r < p->num_rows; ++r) {
        ignis_cpu_load_row(ignis_cpu_at(p->logits, p->dtype, r * p->logits_row_stride), p->dtype, n, x);
        float x_max = -INFINITY;
        int64_t arg_max = 0;
        for (int64_t i = 0; i < n; ++i) {
          x[i] = sanitize_logit(x[i]);
          if (x[i] > x_max) {
            x_max = x[i];
            arg_max = i;
          }
        }
        const float t = p->temperature_arr ? p->temperature_arr[r] : p->temperature_val;
        if (x_max == -INFINITY) {
          memset(x, 0, sizeof(float) * (size_t)n);
        } else if (!(t > 0.0f)) {
          memset(x, 0, sizeof(float) * (size_t)n);
          x[arg_max] = 1.0f;
        } else {
          const float inv_t = 1.0f / t;
          double sum = 0.0;
          for (int64_t i = 0; i < n; ++i) {
            x[i] = x[i] == x_max ? 1.0f : ignis_exp_nonpos(IGNIS_FMUL(x[i] - x_max, inv_t));
            sum += x[i];
          }
          const float inv_sum = (float)(1.0 / sum);
          for (int64_t i = 0; i < n; ++i)
            x[i] = IGNIS_FMUL(x[i], inv_sum);
        }
        ignis_cpu_store_row(ignis_cpu_at_mut(p->probs, p->out_dtype, r * p->probs_row_stride), p->out_dtype,
                            n, x);
      }
    }
    free(x);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu softmax: out of host memory for a row buffer");
  return IGNIS_OK;
}

/* ---- chain speculative sampling ------------------------------------------------------------------- */
/* Uniform in (0, 1) with 24 bits for the acceptance test of position i (draw 0). */
static float acceptance_uniform(uint64_t seed, uint64_t offset, int64_t row, int64_t i) {
  const ignis_philox_out words = ignis_philox_group(seed, offset, 0, (uint64_t)row, (uint64_t)(i >> 2));
  return ((float)(words.w[i & 3] >> 8) + 0.5f) * 0x1p-24f;
}

ignis_status ignis_cpu_speculative(const ignis_speculative_params *p) {
  const int64_t n = p->num_draft, vocab = p->vocab_size;
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->batch_size * n * vocab >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    float *q = malloc(sizeof(float) * (size_t)vocab), *t = malloc(sizeof(float) * (size_t)vocab);
    unsigned char *allowed = malloc((size_t)vocab);
    if (!q || !t || !allowed) {
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (int64_t b = 0; b < p->batch_size; ++b) {
        const uint64_t seed = rng_seed(&p->rng, b), offset = rng_offset(&p->rng, b);
        int64_t accepted = 0, emitted = -1;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t d = load_index(p->draft_ids, p->draft_ids_dtype,
                                       b * p->draft_ids_stride_batch + i * p->draft_ids_stride_pos);
          int ok = 0;
          if (d >= 0 && d < vocab) {
            const float qd = sanitize_prob(ignis_cpu_load(
                p->draft_probs, p->dtype, b * p->draft_stride_batch + i * p->draft_stride_pos + d));
            const float pd = sanitize_prob(ignis_cpu_load(
                p->target_probs, p->dtype, b * p->target_stride_batch + i * p->target_stride_pos + d));
            ok = IGNIS_FMUL(acceptance_uniform(seed, offset, b, i), qd) < pd;
          }
          accepted += ok;
          if (!ok && emitted < 0)
            emitted = i;
        }
        if (emitted < 0)
          emitted = n;
        const int64_t out_row = b * p->output_stride_batch;
        for (int64_t i = 0; i < emitted; ++i)
          store_index(p->output_ids, p->output_ids_dtype, out_row + i * p->output_stride_pos,
                      load_index(p->draft_ids, p->draft_ids_dtype,
                                 b * p->draft_ids_stride_batch + i * p->draft_ids_stride_pos));
        ignis_cpu_load_row(ignis_cpu_at(p->target_probs, p->dtype,
                                        b * p->target_stride_batch + emitted * p->target_stride_pos),
                           p->dtype, vocab, t);
        int any = 0;
        for (int64_t j = 0; j < vocab; ++j)
          t[j] = sanitize_prob(t[j]);
        if (emitted < n) {
          ignis_cpu_load_row(ignis_cpu_at(p->draft_probs, p->dtype,
                                          b * p->draft_stride_batch + emitted * p->draft_stride_pos),
                             p->dtype, vocab, q);
          for (int64_t j = 0; j < vocab; ++j) {
            const float r = t[j] - sanitize_prob(q[j]);
            q[j] = r > 0.0f ? r : 0.0f;
            any |= q[j] > 0.0f;
          }
        }
        const float *weights = any ? q : t;
        for (int64_t j = 0; j < vocab; ++j)
          allowed[j] = weights[j] > 0.0f;
        const int64_t token = race(weights, allowed, vocab, seed, offset, 1, b);
        store_index(p->output_ids, p->output_ids_dtype, out_row + emitted * p->output_stride_pos, token);
        for (int64_t i = emitted + 1; i <= n; ++i)
          store_index(p->output_ids, p->output_ids_dtype, out_row + i * p->output_stride_pos, -1);
        store_index(p->accepted, p->accepted_dtype, b,
                    load_index(p->accepted, p->accepted_dtype, b) + accepted);
        store_index(p->emitted, p->emitted_dtype, b, load_index(p->emitted, p->emitted_dtype, b) + emitted);
      }
    }
    free(q);
    free(t);
    free(allowed);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu speculative sampling: out of host memory");
  return IGNIS_OK;
}

/* ---- top-k selection ---------------------------------------------------------------------------- */
/* Order key of a selection entry: NaN ranks below -Inf. */
static uint32_t select_key(float v) {
  return isnan(v) ? 0u : ignis_order_key(v);
}

typedef struct key_index {
  uint32_t key;
  int64_t index;
} key_index;

static int by_key_desc(const void *a, const void *b) {
  const key_index *x = a, *y = b;
  if (x->key != y->key)
    return x->key > y->key ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index);
}

ignis_status ignis_cpu_top_k(const ignis_top_k_params *p) {
  const int64_t n = p->vocab_size, k = p->k;
  const size_t elem = ignis_dtype_size(p->dtype);
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->num_rows * n >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    row_scratch s;
    key_index *picked = malloc(sizeof(key_index) * (size_t)k);
    if (!alloc_scratch(&s, n) || !picked) {
      failed = 1;
    } else {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
      for (int64_t r = 0; r < p->num_rows; ++r) {
        const void *row = ignis_cpu_at(p->input, p->dtype, r * p->input_row_stride);
        ignis_cpu_load_row(row, p->dtype, n, s.x);
        for (int64_t i = 0; i < n; ++i) {
          s.valid[i] = 1;
          s.key[i] = select_key(s.x[i]);
        }
        search_row sr = {n, s.key, s.valid, NULL, 0, 0, s.count, s.mass};
        const uint32_t thr = search(&sr, 0, k, 0.0).thr;
        int64_t above = 0, equal = 0;
        for (int64_t i = 0; i < n; ++i)
          above += s.key[i] > thr;
        for (int64_t i = 0, a = 0; i < n; ++i) {
          if (s.key[i] > thr) {
            picked[a].key = s.key[i];
            picked[a++].index = i;
          } else if (s.key[i] == thr && above + equal < k) {
            picked[above + equal].key = s.key[i];
            picked[above + equal++].index = i;
          }
        }
        if (p->sorted)
          qsort(picked, (size_t)above, sizeof(key_index), by_key_desc);
        char *values = ignis_cpu_at_mut(p->values, p->dtype, r * p->values_row_stride);
        for (int64_t j = 0; j < k; ++j) {
          memcpy(values + (size_t)j * elem, (const char *)row + (size_t)picked[j].index * elem, elem);
          store_index(p->indices, p->indices_dtype, r * p->indices_row_stride + j, picked[j].index);
        }
      }
    }
    free_scratch(&s);
    free(picked);
  }
  if (failed)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu top_k: out of host memory for a row buffer");
  return IGNIS_OK;
}
