/* CPU backend of the sampling ops (include/ignis/sampling.h), one row at a time, rows in parallel.
 * It computes plainly what the header defines, with the bit-exact helpers of core/philox.h, so it
 * returns exactly the thresholds and samples of the CUDA backend (which gets there another way):
 *
 *   weights   probs: w = p if finite and > 0, else 0; logits: w = ignis_exp_nonpos(x - max).
 *   masses    m_i = the mass of w_i at the exponent field of the row's largest weight (64-bit
 *             fixed point, exact; core/philox.h).
 *   threshold the allowed set is {w_i > 0, key(w_i) >= thr} for an order key thr: the largest key
 *             whose suffix (the count of keys >= it, or their mass, compared in f64 with the
 *             target) reaches the target. Found by a radix search over the keys' bits in three
 *             levels (12, 11 and 9 bits): a histogram of counts and masses of the elements in the
 *             current bin, then the largest digit whose exact suffix (plus everything above the
 *             bin) reaches the target.
 *   sample    inverse transform: one 64-bit uniform U (Philox draw 0, counter group 0, words 0 and
 *             1), t = floor(U * M / 2^64) for the allowed mass M, and the first allowed element in
 *             index order at which the running mass exceeds t.
 *
 * Top-k selection, the logits mask and softmax use the same order keys; softmax sums in f64 here
 * (the CUDA backend in f32), so the two agree to rounding only. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
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

/* The high 64 bits of the 128-bit product a * b. */
static uint64_t mul_high(uint64_t a, uint64_t b) {
  const uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, lo_hi = a_lo * b_hi, hi_lo = a_hi * b_lo, hi_hi = a_hi * b_hi;
  const uint64_t middle = (lo_lo >> 32) + (uint32_t)lo_hi + (uint32_t)hi_lo;
  return hi_hi + (lo_hi >> 32) + (hi_lo >> 32) + (middle >> 32);
}

/* ---- radix threshold search -------------------------------------------------------------------- */
/* Elements take part when valid[i]; key[i] is their order key and, in mass searches, mass[i] their
 * fixed-point mass. */
typedef struct search_row {
  int64_t n;
  const uint32_t *key;
  const unsigned char *valid;
  const uint64_t *mass; /* NULL: counts only */
  int64_t *count;       /* MAX_DIGITS scratch */
  uint64_t *bin_mass;   /* MAX_DIGITS scratch */
} search_row;

/* Histogram of level `level` over the elements of bin `prefix` (the digits of the earlier levels). */
static void histogram(const search_row *s, int level, uint32_t prefix) {
  const int digits = 1 << level_bits[level];
  const int shift = level_shift[level];
  const int prefix_shift = shift + level_bits[level];
  memset(s->count, 0, sizeof(int64_t) * (size_t)digits);
  memset(s->bin_mass, 0, sizeof(uint64_t) * (size_t)digits);
  for (int64_t i = 0; i < s->n; ++i) {
    if (!s->valid[i])
      continue;
    const uint32_t k = s->key[i];
    if (level > 0 && (k >> prefix_shift) != prefix)
      continue;
    const uint32_t d = (k >> shift) & (uint32_t)(digits - 1);
    s->count[d] += 1;
    if (s->mass)
      s->bin_mass[d] += s->mass[i];
  }
}

/* The largest key K whose suffix {valid, key >= K} reaches the target: count >= count_target, or
 * (by_mass) (double)mass >= mass_target. Returns 0 when even the whole set falls short (nothing is
 * filtered). */
static uint32_t search(const search_row *s, int by_mass, int64_t count_target, double mass_target) {
  uint32_t prefix = 0;
  int64_t above_count = 0;
  uint64_t above_mass = 0;
  for (int level = 0; level < LEVELS; ++level) {
    histogram(s, level, prefix);
    const int digits = 1 << level_bits[level];
    int digit = -1;
    for (int d = digits - 1; d >= 0; --d) {
      const int reached = by_mass ? (double)(above_mass + s->bin_mass[d]) >= mass_target
                                  : above_count + s->count[d] >= count_target;
      if (reached) {
        digit = d;
        break;
      }
      above_count += s->count[d];
      above_mass += s->bin_mass[d];
    }
    if (digit < 0)
      return 0;
    prefix = (prefix << level_bits[level]) | (uint32_t)digit;
  }
  return prefix;
}

/* ---- one row of the filter ops ------------------------------------------------------------------- */
typedef struct row_scratch {
  float *x;
  float *w;
  uint32_t *key;
  unsigned char *valid;
  uint64_t *mass;
  int64_t *count;
  uint64_t *bin_mass;
} row_scratch;

static void free_scratch(row_scratch *s) {
  free(s->x);
  free(s->w);
  free(s->key);
  free(s->valid);
  free(s->mass);
  free(s->count);
  free(s->bin_mass);
}

static int alloc_scratch(row_scratch *s, int64_t n) {
  s->x = malloc(sizeof(float) * (size_t)n);
  s->w = malloc(sizeof(float) * (size_t)n);
  s->key = malloc(sizeof(uint32_t) * (size_t)n);
  s->valid = malloc((size_t)n);
  s->mass = malloc(sizeof(uint64_t) * (size_t)n);
  s->count = malloc(sizeof(int64_t) * MAX_DIGITS);
  s->bin_mass = malloc(sizeof(uint64_t) * MAX_DIGITS);
  return s->x && s->w && s->key && s->valid && s->mass && s->count && s->bin_mass;
}

/* Keys, validity and masses of the weights w[0, n) (their largest into *w_max); returns the exponent
 * field of the largest. */
static int weigh(const float *w, int64_t n, row_scratch *s, float *w_max_out) {
  float w_max = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    w_max = w[i] > w_max ? w[i] : w_max;
  *w_max_out = w_max;
  const int e_max = ignis_mass_exponent(ignis_float_bits(w_max));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = ignis_float_bits(w[i]);
    s->valid[i] = w[i] > 0.0f;
    s->key[i] = ignis_order_key(w[i]);
    s->mass[i] = s->valid[i] ? ignis_mass_at(ignis_mass_own(bits), ignis_mass_exponent(bits), e_max) : 0;
  }
  return e_max;
}

/* Mass of the valid elements with key >= thr. */
static uint64_t mass_from(const row_scratch *s, int64_t n, uint32_t thr) {
  uint64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    m += s->valid[i] && s->key[i] >= thr ? s->mass[i] : 0;
  return m;
}

/* Inverse transform over the valid elements with key >= thr (total mass `total`): the first, in index
 * order, at which the running mass exceeds floor(U * total / 2^64); 0 when total is 0. */
static int64_t draw(const row_scratch *s, int64_t n, uint32_t thr, uint64_t total, uint64_t seed,
                    uint64_t offset, uint32_t stream, int64_t row) {
  if (total == 0)
    return 0;
  const ignis_philox_out words = ignis_philox_group(seed, offset, stream, (uint64_t)row, 0);
  const uint64_t target = mul_high((uint64_t)words.w[1] << 32 | words.w[0], total);
  uint64_t run = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!s->valid[i] || s->key[i] < thr)
      continue;
    run += s->mass[i];
    if (run > target)
      return i;
  }
  return 0;
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
  search_row sr = {n, s->key, s->valid, NULL, s->count, s->bin_mass};
  const uint32_t thr = search(&sr, 0, k, 0.0);
  for (int64_t i = 0; i < n; ++i)
    s->w[i] = (!isnan(x[i]) && s->key[i] >= thr) ? x[i] : -INFINITY;
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
  float w_max;
  const int e_max = weigh(w, n, s, &w_max);
  search_row sr = {n, s->key, s->valid, s->mass, s->count, s->bin_mass};

  const int has_k = p->filter == IGNIS_SAMPLING_TOP_K || p->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                    p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const int has_p = p->filter == IGNIS_SAMPLING_TOP_P || p->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                    p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  uint32_t thr = 0;
  if (has_k) {
    const int64_t k = row_top_k(p, b);
    if (k > 0)
      thr = search(&sr, 0, k, 0.0);
  }
  if (has_p) {
    const double top_p = row_top_p(p, b);
    if (top_p < 1.0) {
      uint32_t thr_p;
      if (p->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P) {
        /* top-p within the top-k set: its mass is the base, its keys the candidates */
        const uint64_t base = mass_from(s, n, thr);
        for (int64_t i = 0; i < n; ++i)
          s->valid[i] = s->valid[i] && s->key[i] >= thr;
        thr_p = search(&sr, 1, 0, IGNIS_DMUL(top_p, (double)base));
      } else {
        thr_p = search(&sr, 1, 0, IGNIS_DMUL(top_p, (double)mass_from(s, n, 0)));
      }
      thr = thr_p > thr ? thr_p : thr;
    }
  }
  if (p->filter == IGNIS_SAMPLING_MIN_P)
    thr = ignis_order_key(IGNIS_FMUL(row_min_p(p, b), w_max));
  const uint64_t allowed_mass = mass_from(s, n, thr);

  if (p->output == IGNIS_SAMPLING_OUT_RENORM) {
    void *out = ignis_cpu_at_mut(p->out, p->dtype, b * p->out_row_stride);
    const float inv = allowed_mass ? (float)(1.0 / ldexp((double)allowed_mass, e_max - 165)) : 0.0f;
    for (int64_t i = 0; i < n; ++i)
      x[i] = s->valid[i] && s->key[i] >= thr ? IGNIS_FMUL(w[i], inv) : 0.0f;
    ignis_cpu_store_row(out, p->dtype, n, x);
    return;
  }
  const int64_t token = draw(s, n, thr, allowed_mass, rng_seed(&p->rng, b), rng_offset(&p->rng, b), 0, b);
  store_index(p->samples, p->samples_dtype, b, token);
}

ignis_status ignis_cpu_sampling(const ignis_sampling_params *p, int32_t device, void *stream) {
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
ignis_status ignis_cpu_softmax(const ignis_softmax_params *p, int32_t device, void *stream) {
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

ignis_status ignis_cpu_speculative(const ignis_speculative_params *p, int32_t device, void *stream) {
  const int64_t n = p->num_draft, vocab = p->vocab_size;
  int failed = 0;
#ifdef _OPENMP
#pragma omp parallel if (p->batch_size * n * vocab >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS)
#endif
  {
    row_scratch s; /* x: the target row, w: the weights sampled */
    if (!alloc_scratch(&s, vocab)) {
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
        float *t = s.x, *weights = s.w;
        ignis_cpu_load_row(ignis_cpu_at(p->target_probs, p->dtype,
                                        b * p->target_stride_batch + emitted * p->target_stride_pos),
                           p->dtype, vocab, t);
        int any = 0;
        for (int64_t j = 0; j < vocab; ++j)
          t[j] = sanitize_prob(t[j]);
        if (emitted < n) {
          ignis_cpu_load_row(ignis_cpu_at(p->draft_probs, p->dtype,
                                          b * p->draft_stride_batch + emitted * p->draft_stride_pos),
                             p->dtype, vocab, weights);
          for (int64_t j = 0; j < vocab; ++j) {
            const float r = t[j] - sanitize_prob(weights[j]);
            weights[j] = r > 0.0f ? r : 0.0f;
            any |= weights[j] > 0.0f;
          }
        }
        if (!any)
          memcpy(weights, t, sizeof(float) * (size_t)vocab);
        float w_max;
        weigh(weights, vocab, &s, &w_max);
        const int64_t token = draw(&s, vocab, 0, mass_from(&s, vocab, 0), seed, offset, 1, b);
        store_index(p->output_ids, p->output_ids_dtype, out_row + emitted * p->output_stride_pos, token);
        for (int64_t i = emitted + 1; i <= n; ++i)
          store_index(p->output_ids, p->output_ids_dtype, out_row + i * p->output_stride_pos, -1);
        store_index(p->accepted, p->accepted_dtype, b,
                    load_index(p->accepted, p->accepted_dtype, b) + accepted);
        store_index(p->emitted, p->emitted_dtype, b, load_index(p->emitted, p->emitted_dtype, b) + emitted);
      }
    }
    free_scratch(&s);
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

ignis_status ignis_cpu_top_k(const ignis_top_k_params *p, int32_t device, void *stream) {
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
        search_row sr = {n, s.key, s.valid, NULL, s.count, s.bin_mass};
        const uint32_t thr = search(&sr, 0, k, 0.0);
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
