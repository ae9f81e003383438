/* Tests of the sampling ops (include/ignis/sampling.h) on every backend.
 *
 *   generator   Philox 4x32-10 known-answer vectors; the bit-exact e^d helper against libm in f64.
 *   rule        the samples equal the header's inverse transform computed here (fixed-point masses,
 *               one 64-bit uniform per output row, the first allowed token in index order whose
 *               running mass exceeds floor(U * M / 2^64)).
 *   statistics  for each sampling op and filter: many draws of one distribution (output rows
 *               mapped to it through `indices`, calls with successive offsets; >= 1M draws on the
 *               GPU): every sample inside the allowed set computed here in f64 from the header's
 *               rules, frequencies against the renormalized allowed distribution (cosine above 0.99
 *               of what exact sampling expects at that many draws, and a chi-square test),
 *               vocabularies 1, 2, 1000, 32000 (CPU) and up to 151936 (GPU).
 *   backends    the CUDA samples equal the CPU samples for the same inputs, seeds and offsets.
 *   rules       reproducibility (same seed and offset, same samples; another offset, others),
 *               per-row thresholds, seed/offset tensors (1 and per row), edge rows (all zero, NaN,
 *               Inf, k > vocab, p = 1, p near 0, vocab 1), out-of-range indices.
 *   renorm/mask top_p_renorm_probs, top_k_renorm_probs and top_k_mask_logits against f64.
 *   speculative the accept/reject decisions against the rule evaluated here with the same
 *               uniforms, padding and counts, and the marginal of the first output token against
 *               the target distribution.
 *   top_k       values and indices against a sort here, sorted and unsorted, ties, NaN, k = vocab.
 *   softmax     against f64, scalar and per-row temperature, one-hot rows.
 *   bad input   each error names its parameter and leaves every buffer unchanged.
 *
 * Failures print the case (op, backend, vocab, dtype, ...) and the expected and observed values. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/philox.h"
#include "core/sampling_split.h"
#include "harness.h"

/* ---- the generator and the bit-exact helpers ---------------------------------------------------- */
static void test_philox(void) {
  h_case("philox 4x32-10 known answers");
  static const uint32_t kat[3][10] = {{0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                                       0xffffffffu, 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                      {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u,
                                       0x299f31d0u, 0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int t = 0; t < 3; ++t) {
    ignis_philox_out o = ignis_philox4x32(kat[t][0], kat[t][1], kat[t][2], kat[t][3], kat[t][4], kat[t][5]);
    for (int j = 0; j < 4; ++j)
      CHECKF(o.w[j] == kat[t][6 + j], "vector %d word %d: got 0x%08x expected 0x%08x", t, j, o.w[j],
             kat[t][6 + j]);
  }
  h_case("e^d against libm");
  double worst_exp = 0.0;
  h_rng rng = h_rng_make(5);
  for (int i = 0; i < 200000; ++i) {
    double d = -h_rng_uniform(&rng, 0.0, i % 2 ? 87.0 : 2.0);
    double e_ref = exp((double)(float)d);
    double e_got = ignis_exp_nonpos((float)d);
    double e_err = fabs(e_got - e_ref) / e_ref;
    if (e_err > worst_exp)
      worst_exp = e_err;
  }
  CHECKF(worst_exp < 2e-6, "worst relative error of e^d: %.3g", worst_exp);
  CHECK(ignis_exp_nonpos(0.0f) == 1.0f && ignis_exp_nonpos(-INFINITY) == 0.0f &&
        ignis_exp_nonpos(-200.0f) == 0.0f);
  CHECK(fabs(ignis_exp_nonpos(-80.0f) / exp(-80.0) - 1.0) < 1e-5);
  CHECK(ignis_exp_nonpos(-100.0f) > 0.0f &&
        fabs(ignis_exp_nonpos(-100.0f) / exp(-100.0) - 1.0) < 0.05); /* denormal */
}

/* ---- the ops as one table ------------------------------------------------------------------------- */
typedef enum op_kind {
  OP_PROBS,
  OP_LOGITS,
  OP_TOP_K,
  OP_TOP_P,
  OP_MIN_P,
  OP_KP_JOINT,
  OP_KP_FIRST,
  OP_LOGITS_KP_JOINT,
  OP_LOGITS_KP_FIRST,
  OP_COUNT
} op_kind;

static const char *const op_names[OP_COUNT] = {"sampling_from_probs",
                                               "sampling_from_logits",
                                               "top_k_sampling_from_probs",
                                               "top_p_sampling_from_probs",
                                               "min_p_sampling_from_probs",
                                               "top_k_top_p_from_probs(joint)",
                                               "top_k_top_p_from_probs(top_k_first)",
                                               "top_k_top_p_from_logits(joint)",
                                               "top_k_top_p_from_logits(top_k_first)"};

static int op_logits(op_kind op) {
  return op == OP_LOGITS || op == OP_LOGITS_KP_JOINT || op == OP_LOGITS_KP_FIRST;
}
static int op_has_k(op_kind op) {
  return op == OP_TOP_K || op == OP_KP_JOINT || op == OP_KP_FIRST || op == OP_LOGITS_KP_JOINT ||
         op == OP_LOGITS_KP_FIRST;
}
static int op_has_p(op_kind op) {
  return op == OP_TOP_P || op == OP_KP_JOINT || op == OP_KP_FIRST || op == OP_LOGITS_KP_JOINT ||
         op == OP_LOGITS_KP_FIRST;
}
static int op_first(op_kind op) {
  return op == OP_KP_FIRST || op == OP_LOGITS_KP_FIRST;
}

typedef struct thresholds {
  int64_t k;
  double p;
  double min_p;
  const ignis_tensor *k_arr, *p_arr, *min_p_arr;
} thresholds;

static ignis_status call_op(op_kind op, const ignis_tensor *input, const thresholds *t, ignis_tensor *samples,
                            const ignis_sampling_options *o) {
  switch (op) {
  case OP_PROBS:
    return ignis_sampling_from_probs(input, samples, o, NULL);
  case OP_LOGITS:
    return ignis_sampling_from_logits(input, samples, o, NULL);
  case OP_TOP_K:
    return ignis_top_k_sampling_from_probs(input, t->k_arr, t->k, samples, o, NULL);
  case OP_TOP_P:
    return ignis_top_p_sampling_from_probs(input, t->p_arr, t->p, samples, o, NULL);
  case OP_MIN_P:
    return ignis_min_p_sampling_from_probs(input, t->min_p_arr, t->min_p, samples, o, NULL);
  case OP_KP_JOINT:
  case OP_KP_FIRST:
    return ignis_top_k_top_p_sampling_from_probs(
        input, t->k_arr, t->k, t->p_arr, t->p,
        op == OP_KP_JOINT ? IGNIS_FILTER_JOINT : IGNIS_FILTER_TOP_K_FIRST, samples, o, NULL);
  default:
    return ignis_top_k_top_p_sampling_from_logits(
        input, t->k_arr, t->k, t->p_arr, t->p,
        op == OP_LOGITS_KP_JOINT ? IGNIS_FILTER_JOINT : IGNIS_FILTER_TOP_K_FIRST, samples, o, NULL);
  }
}

/* ---- the f64 reference of the allowed set ------------------------------------------------------- */
static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x > y ? -1 : x < y;
}

/* Weights of a row as the header defines them. */
static void ref_weights(int logits, const double *x, int64_t n, double *w) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double v = isnan(x[i]) ? -INFINITY : (x[i] > FLT_MAX ? FLT_MAX : x[i]);
    if (logits && v > m)
      m = v;
    w[i] = v;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (logits)
      w[i] = (m == -INFINITY || w[i] - m < -104.0) ? 0.0 : exp(w[i] - m);
    else
      w[i] = (w[i] > 0.0 && w[i] <= FLT_MAX) ? w[i] : 0.0;
  }
}

/* The smallest allowed weight of a top-k (count) or top-p (mass) filter over weights w (0 if none
 * filtered). sorted: scratch of n doubles. */
static double ref_kth(const double *w, int64_t n, int64_t k, double *sorted) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (w[i] > 0.0)
      sorted[m++] = w[i];
  if (k <= 0 || k >= m)
    return 0.0;
  qsort(sorted, (size_t)m, sizeof(double), cmp_desc);
  return sorted[k - 1];
}

static double ref_top_p_thr(const double *w, int64_t n, double p, double base, double floor_thr,
                            double *sorted) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (w[i] > 0.0 && w[i] >= floor_thr)
      sorted[m++] = w[i];
  if (p >= 1.0 || m == 0)
    return floor_thr;
  qsort(sorted, (size_t)m, sizeof(double), cmp_desc);
  double above = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    int64_t j = i;
    double group = 0.0;
    while (j < m && sorted[j] == sorted[i])
      group += sorted[j++];
    if (above < p * base && above + group >= p * base)
      return sorted[i];
    above += group;
    i = j - 1;
  }
  return sorted[m - 1];
}

/* allowed[i] and the renormalized distribution prob[i] of a row under op and thresholds. */
static void ref_allowed(op_kind op, const double *x, int64_t n, int64_t k, double p, double min_p, double *w,
                        double *prob, unsigned char *allowed, double *scratch) {
  ref_weights(op_logits(op), x, n, w);
  double total = 0.0, max = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    total += w[i];
    max = w[i] > max ? w[i] : max;
  }
  double thr = 0.0;
  if (op_has_k(op))
    thr = ref_kth(w, n, k, scratch);
  if (op_has_p(op)) {
    double base = total;
    if (op_first(op)) {
      base = 0.0;
      for (int64_t i = 0; i < n; ++i)
        base += w[i] >= thr ? w[i] : 0.0;
    }
    double tp = ref_top_p_thr(w, n, p, base, op_first(op) ? thr : 0.0, scratch);
    thr = tp > thr ? tp : thr;
  }
  if (op == OP_MIN_P)
    thr = (double)((float)min_p * (float)max);
  double mass = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    allowed[i] = w[i] > 0.0 && w[i] >= thr;
    mass += allowed[i] ? w[i] : 0.0;
  }
  for (int64_t i = 0; i < n; ++i)
    prob[i] = allowed[i] ? w[i] / mass : 0.0;
}

/* ---- statistics ---------------------------------------------------------------------------------- */
/* Every sample allowed; cosine(counts, prob) above 0.99 times the cosine that exact sampling
 * expects at this number of draws; chi-square over the categories expected >= 5 times (the rest
 * pooled) below df + 6 sqrt(2 df) + 10.
 * The expected cosine: for multinomial counts E[sum c_i^2] = D + (D^2 - D) S and E[sum c_i p_i] =
 * D S, with D draws and S = sum p_i^2, so cosine ~ sqrt(D S / (1 + (D - 1) S)). It is ~1 when the
 * draws are many per category (the bar is then 0.99), but a flat distribution over ~1e5 tokens
 * drawn 2.6e5 times gives ~0.92 even to a perfect sampler. */
static void check_frequencies(const int64_t *counts, const double *prob, const unsigned char *allowed,
                              int64_t n, int64_t draws) {
  int64_t outside = 0, first_outside = -1;
  double dot = 0.0, cc = 0.0, pp = 0.0, chi = 0.0, pool_o = 0.0, pool_e = 0.0;
  int64_t df = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (counts[i] && !allowed[i]) {
      outside += counts[i];
      if (first_outside < 0)
        first_outside = i;
    }
    dot += counts[i] * prob[i];
    cc += (double)counts[i] * counts[i];
    pp += prob[i] * prob[i];
    double e = prob[i] * (double)draws;
    if (e >= 5.0) {
      chi += (counts[i] - e) * (counts[i] - e) / e;
      ++df;
    } else {
      pool_o += counts[i];
      pool_e += e;
    }
  }
  if (pool_e >= 5.0) {
    chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
    ++df;
  }
  double cosine = (cc > 0 && pp > 0) ? dot / sqrt(cc * pp) : (cc == pp ? 1.0 : 0.0);
  double d = (double)draws, expected = pp > 0 ? sqrt(d * pp / (1.0 + (d - 1.0) * pp)) : 1.0;
  CHECKF(outside == 0, "%lld of %lld samples outside the allowed set (first token %lld)", (long long)outside,
         (long long)draws, (long long)first_outside);
  CHECKF(cosine > 0.99 * expected,
         "cosine similarity of frequencies and probabilities %.5f <= 0.99 x %.5f (expected of exact "
         "sampling at %lld draws)",
         cosine, expected, (long long)draws);
  if (df > 0) {
    double limit = (double)df + 6.0 * sqrt(2.0 * (double)df) + 10.0;
    CHECKF(chi < limit, "chi-square %.1f >= %.1f (df %lld, %lld draws)", chi, limit, (long long)df,
           (long long)draws);
  }
}

/* Logits x[0, n) in place -> their softmax. */
static void probs_of_logits(double *x, int64_t n) {
  double m = -INFINITY, s = 0.0;
  for (int64_t i = 0; i < n; ++i)
    m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < n; ++i)
    s += (x[i] = exp(x[i] - m));
  for (int64_t i = 0; i < n; ++i)
    x[i] /= s;
}

/* A test distribution of n entries: logits of scale `spread` (probabilities = their softmax). */
static void make_row(h_rng *rng, int64_t n, double spread, int logits, double *x) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = spread * h_rng_normal(rng);
  if (!logits)
    probs_of_logits(x, n);
}

static int64_t get_index(const h_buf *b, int64_t i) {
  return (int64_t)h_get(b, i);
}

/* Draw `batch * calls` samples of one distribution row and check them. */
static void stat_case(h_backend backend, op_kind op, ignis_dtype dtype, int64_t n, int64_t batch, int calls,
                      int64_t k, double p, double min_p, double spread, h_rng *rng) {
  h_case("statistics %s on %s: vocab=%lld dtype=%s k=%lld p=%g min_p=%g spread=%g draws=%lld", op_names[op],
         h_backend_name(backend), (long long)n, ignis_dtype_name(dtype), (long long)k, p, min_p, spread,
         (long long)(batch * calls));
  double *x = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
  double *prob = malloc(sizeof(double) * (size_t)n), *scratch = malloc(sizeof(double) * (size_t)n);
  unsigned char *allowed = malloc((size_t)n);
  int64_t *counts = calloc((size_t)n, sizeof(int64_t));
  make_row(rng, n, spread, op_logits(op), x);
  h_buf in = h_buf_alloc(backend, dtype, n), idx = h_buf_alloc(backend, IGNIS_I32, batch);
  h_buf out = h_buf_alloc(backend, IGNIS_I64, batch);
  for (int64_t i = 0; i < n; ++i) {
    h_set(&in, i, x[i]);
    x[i] = h_get(&in, i);
  }
  h_buf_upload(&in);
  h_buf_upload(&idx);
  ref_allowed(op, x, n, k, p, min_p, w, prob, allowed, scratch);
  int64_t shape[2] = {1, n};
  ignis_tensor input = h_view(&in, 0, 2, shape, NULL), indices = h_view(&idx, 0, 1, &batch, NULL);
  ignis_tensor samples = h_view(&out, 0, 1, &batch, NULL);
  thresholds t = {k, p, min_p, NULL, NULL, NULL};
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.indices = &indices;
  o.seed = 1234 + (uint64_t)op;
  int64_t bad = 0;
  for (int c = 0; c < calls; ++c) {
    o.offset = (uint64_t)c;
    if (!CHECK_STATUS(call_op(op, &input, &t, &samples, &o), IGNIS_OK))
      break;
    h_buf_download(&out);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t s = get_index(&out, b);
      if (s < 0 || s >= n)
        ++bad;
      else
        ++counts[s];
    }
  }
  CHECKF(bad == 0, "%lld samples outside [0, %lld)", (long long)bad, (long long)n);
  check_frequencies(counts, prob, allowed, n, batch * calls);
  h_buf_free(&in);
  h_buf_free(&idx);
  h_buf_free(&out);
  free(x);
  free(w);
  free(prob);
  free(scratch);
  free(allowed);
  free(counts);
}

static void test_statistics(h_backend backend) {
  h_rng rng = h_rng_make(77 + (uint64_t)backend);
  const int gpu = backend == H_CUDA;
  /* CPU: 100k draws over small vocabularies; GPU: >= 1M draws, vocabularies up to 151936. */
  const int64_t batch = gpu ? 16384 : 1024;
  const int calls = gpu ? 64 : 20;
  for (int op = 0; op < OP_COUNT; ++op) {
    stat_case(backend, (op_kind)op, IGNIS_F32, 1000, batch, calls, 50, 0.9, 0.05, 1.5, &rng);
    stat_case(backend, (op_kind)op, op % 2 ? IGNIS_BF16 : IGNIS_F16, 257, batch, calls, 7, 0.5, 0.2, 1.0,
              &rng);
  }
  stat_case(backend, OP_TOP_P, IGNIS_F32, 1000, batch, calls, 0, 1.0, 0, 1.0, &rng);
  stat_case(backend, OP_TOP_P, IGNIS_F32, 1000, batch, calls, 0, 0.05, 0, 3.0, &rng);
  stat_case(backend, OP_TOP_K, IGNIS_F32, 1000, batch, calls, 1000, 0, 0, 1.0, &rng);
  stat_case(backend, OP_TOP_K, IGNIS_F32, 2, batch, calls, 1, 0, 0, 1.0, &rng);
  stat_case(backend, OP_PROBS, IGNIS_F32, 2, batch, calls, 0, 0, 0, 1.0, &rng);
  stat_case(backend, OP_KP_JOINT, IGNIS_F32, 1, batch, calls, 1, 0.5, 0, 1.0, &rng);
  if (gpu) {
    /* Large vocabularies: 1M draws where the allowed set is small; 256k for top-p (0.99 takes the
     * search's refine pass) and 64k for unfiltered sampling, whose draws read the whole row each. */
    static const int64_t vocabs[] = {32000, 128256, 151936};
    for (int v = 0; v < 3; ++v) {
      stat_case(backend, OP_TOP_K, IGNIS_F32, vocabs[v], batch, calls, 50, 0, 0, 2.5, &rng);
      stat_case(backend, OP_LOGITS_KP_FIRST, IGNIS_BF16, vocabs[v], batch, calls, 100, 0.8, 0, 2.5, &rng);
      stat_case(backend, OP_LOGITS_KP_JOINT, IGNIS_F32, vocabs[v], batch, calls, 100, 0.8, 0, 2.5, &rng);
      stat_case(backend, OP_MIN_P, IGNIS_F16, vocabs[v], batch, calls, 0, 0, 0.1, 2.5, &rng);
      stat_case(backend, OP_TOP_P, IGNIS_F32, vocabs[v], batch, 16, 0, 0.9, 0, 2.5, &rng);
      stat_case(backend, OP_TOP_P, IGNIS_F32, vocabs[v], batch, 16, 0, 0.99, 0, 1.0, &rng);
      stat_case(backend, OP_PROBS, IGNIS_F32, vocabs[v], batch, 4, 0, 0, 0, 4.0, &rng);
    }
  } else {
    stat_case(backend, OP_TOP_P, IGNIS_F32, 32000, 512, 4, 0, 0.5, 0, 3.0, &rng);
    stat_case(backend, OP_TOP_K, IGNIS_F32, 32000, 512, 4, 20, 0, 0, 3.0, &rng);
  }
}

/* ---- the sampling rule ------------------------------------------------------------------------------- */
/* The high 64 bits of a * b. */
static uint64_t ref_mul_high(uint64_t a, uint64_t b) {
  uint64_t high = 0, low = 0;
  for (int bit = 63; bit >= 0; --bit) { /* shift-and-add: slow, obviously right */
    high = high << 1 | low >> 63;
    low <<= 1;
    if (b >> bit & 1) {
      const uint64_t sum = low + a;
      high += sum < low;
      low = sum;
    }
  }
  return high;
}

/* The header's inverse transform over the allowed weights w (exact f32 values) of output row b. */
static int64_t ref_sample(const double *w, const unsigned char *allowed, int64_t n, uint64_t seed,
                          uint64_t offset, int64_t b) {
  float w_max = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    w_max = (float)w[i] > w_max ? (float)w[i] : w_max;
  const int e_max = ignis_mass_exponent(ignis_float_bits(w_max));
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = ignis_float_bits((float)w[i]);
    total += allowed[i] ? ignis_mass_at(ignis_mass_own(bits), ignis_mass_exponent(bits), e_max) : 0;
  }
  if (total == 0)
    return 0;
  const ignis_philox_out words = ignis_philox_group(seed, offset, 0, (uint64_t)b, 0);
  const uint64_t target = ref_mul_high((uint64_t)words.w[1] << 32 | words.w[0], total);
  uint64_t run = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!allowed[i])
      continue;
    const uint32_t bits = ignis_float_bits((float)w[i]);
    run += ignis_mass_at(ignis_mass_own(bits), ignis_mass_exponent(bits), e_max);
    if (run > target)
      return i;
  }
  return -1;
}

static void test_rule(h_backend backend) {
  enum { ROWS = 12 };
  static const int64_t vocabs[] = {1, 3, 1000, 32001};
  h_rng rng = h_rng_make(19);
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; ++v)
    for (int with_k = 0; with_k < 2; ++with_k) {
      const int64_t n = vocabs[v], rows = ROWS, k = n > 40 ? 40 : 1;
      h_case("inverse transform rule on %s: vocab=%lld top_k=%lld", h_backend_name(backend), (long long)n,
             with_k ? (long long)k : 0LL);
      double *x = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
      double *prob = malloc(sizeof(double) * (size_t)n), *scratch = malloc(sizeof(double) * (size_t)n);
      unsigned char *allowed = malloc((size_t)n);
      h_buf in = h_buf_alloc(backend, IGNIS_F32, rows * n), out = h_buf_alloc(backend, IGNIS_I64, rows);
      h_buf seeds = h_buf_alloc(backend, IGNIS_I64, rows), offsets = h_buf_alloc(backend, IGNIS_I64, rows);
      for (int64_t r = 0; r < rows; ++r) {
        make_row(&rng, n, 0.5 + (double)(r % 4), 0, x);
        if (r % 3 == 1 && n > 2)
          x[1] = 1e-30; /* allowed, but of mass 0 at the row's scale */
        for (int64_t i = 0; i < n; ++i)
          h_set(&in, r * n + i, x[i]);
        h_set(&seeds, r, (double)(1000 + 7 * r));
        h_set(&offsets, r, (double)(3 * r));
      }
      h_buf_poison(&out);
      h_buf_upload(&in);
      h_buf_upload(&out);
      h_buf_upload(&seeds);
      h_buf_upload(&offsets);
      int64_t shape[2] = {rows, n}, len = rows;
      ignis_tensor input = h_view(&in, 0, 2, shape, NULL), samples = h_view(&out, 0, 1, &len, NULL);
      ignis_tensor st = h_view(&seeds, 0, 1, &len, NULL), ot = h_view(&offsets, 0, 1, &len, NULL);
      ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
      o.seed_tensor = &st;
      o.offset_tensor = &ot;
      CHECK_STATUS(with_k ? ignis_top_k_sampling_from_probs(&input, NULL, k, &samples, &o, NULL)
                          : ignis_sampling_from_probs(&input, &samples, &o, NULL),
                   IGNIS_OK);
      h_buf_download(&out);
      int64_t mismatches = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; ++i)
          x[i] = h_get(&in, r * n + i);
        ref_allowed(with_k ? OP_TOP_K : OP_PROBS, x, n, k, 1.0, 0.0, w, prob, allowed, scratch);
        const int64_t want = ref_sample(w, allowed, n, (uint64_t)(1000 + 7 * r), (uint64_t)(3 * r), r);
        const int64_t got = get_index(&out, r);
        if (got != want && mismatches++ < 3)
          CHECKF(0, "row %lld: sampled %lld, the rule gives %lld", (long long)r, (long long)got,
                 (long long)want);
      }
      CHECKF(mismatches == 0, "%lld of %lld rows differ from the rule", (long long)mismatches,
             (long long)rows);
      h_buf_free(&in);
      h_buf_free(&out);
      h_buf_free(&seeds);
      h_buf_free(&offsets);
      free(x);
      free(w);
      free(prob);
      free(scratch);
      free(allowed);
    }
}

/* ---- many rows at once: thresholds per row, indices, seeds; CPU against CUDA ------------------------ */
typedef struct batch_case {
  int64_t rows, n;
  ignis_dtype dtype;
  int per_row;       /* thresholds as arrays */
  int seed_tensor;   /* 0: values, 1: one-element tensors, 2: per-row tensors */
  int flat_near_one; /* flat rows (logits of scale 0.5 or 1) and top_p 0.99 to 0.9999: the allowed set
                        is most of the row */
  int concentrated;  /* the runs of 4 at every 4096th element (what one thread of the CUDA one-block
                        kernel reads) raised to logits near 6: the thresholds' window falls on
                        them, more entries than one thread's slice of the gather holds */
} batch_case;

/* Runs op over `rows` distinct rows on `backend`; writes the samples to tokens. Checks membership. */
static void run_batch(h_backend backend, op_kind op, const batch_case *bc, uint64_t seed, uint64_t offset,
                      const h_buf *workspace, int64_t *tokens) {
  const int64_t rows = bc->rows, n = bc->n;
  h_rng rng = h_rng_make(4242 + (uint64_t)op * 7 + (uint64_t)n);
  h_buf in = h_buf_alloc(backend, bc->dtype, rows * n), out = h_buf_alloc(backend, IGNIS_I32, rows);
  h_buf karr = h_buf_alloc(backend, IGNIS_I32, rows), parr = h_buf_alloc(backend, IGNIS_F32, rows);
  h_buf marr = h_buf_alloc(backend, IGNIS_F32, rows);
  h_buf sarr = h_buf_alloc(backend, IGNIS_I64, rows), oarr = h_buf_alloc(backend, IGNIS_I64, rows);
  double *x = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
  double *prob = malloc(sizeof(double) * (size_t)n), *scratch = malloc(sizeof(double) * (size_t)n);
  unsigned char *allowed = malloc((size_t)n);
  for (int64_t r = 0; r < rows; ++r) {
    make_row(&rng, n, bc->flat_near_one ? 0.5 + 0.5 * (double)(r % 2) : 0.5 + (double)(r % 5), 1, x);
    if (bc->concentrated)
      for (int64_t i = 0; i < n; ++i)
        if (((i >> 2) & 1023) == 0)
          x[i] = 6.0 + 0.001 * (double)(i % 13);
    if (!op_logits(op))
      probs_of_logits(x, n);
    for (int64_t i = 0; i < n; ++i)
      h_set(&in, r * n + i, x[i]);
    h_set(&karr, r, (double)((r * 37) % (n + 3)) - 1.0); /* includes -1 and 0 (no filter) and > n */
    h_set(&parr, r,
          bc->flat_near_one ? 1.0 - pow(10.0, -2.0 - (double)(r % 3))
                            : (r % 7 == 0 ? 1.0 : 0.05 + 0.9 * (double)(r % 11) / 10.0));
    h_set(&marr, r, 0.02 * (double)(r % 9));
    h_set(&sarr, r, (double)(seed + (uint64_t)r * 3));
    h_set(&oarr, r, (double)(offset + (uint64_t)r));
  }
  h_buf_upload(&in);
  h_buf_upload(&karr);
  h_buf_upload(&parr);
  h_buf_upload(&marr);
  h_buf_upload(&sarr);
  h_buf_upload(&oarr);
  int64_t shape[2] = {rows, n}, one = 1;
  ignis_tensor input = h_view(&in, 0, 2, shape, NULL), samples = h_view(&out, 0, 1, &rows, NULL);
  ignis_tensor kt = h_view(&karr, 0, 1, &rows, NULL), pt = h_view(&parr, 0, 1, &rows, NULL);
  ignis_tensor mt = h_view(&marr, 0, 1, &rows, NULL);
  ignis_tensor st = h_view(&sarr, 0, 1, bc->seed_tensor == 1 ? &one : &rows, NULL);
  ignis_tensor ot = h_view(&oarr, 0, 1, bc->seed_tensor == 1 ? &one : &rows, NULL);
  thresholds t = {13, 0.7, 0.1, NULL, NULL, NULL};
  if (bc->per_row) {
    t.k_arr = &kt;
    t.p_arr = &pt;
    t.min_p_arr = &mt;
  }
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.seed = seed;
  o.offset = offset;
  if (bc->seed_tensor) {
    o.seed_tensor = &st;
    o.offset_tensor = &ot;
  }
  if (workspace) {
    o.workspace = workspace->data;
    o.workspace_bytes = (size_t)workspace->count * workspace->elem_size;
  }
  CHECK_STATUS(call_op(op, &input, &t, &samples, &o), IGNIS_OK);
  h_buf_download(&out);
  int64_t outside = 0;
  for (int64_t r = 0; r < rows; ++r) {
    tokens[r] = get_index(&out, r);
    for (int64_t i = 0; i < n; ++i)
      x[i] = h_get(&in, r * n + i);
    int64_t k = bc->per_row ? (int64_t)h_get(&karr, r) : t.k;
    double p = bc->per_row ? h_get(&parr, r) : t.p, mp = bc->per_row ? h_get(&marr, r) : t.min_p;
    ref_allowed(op, x, n, k, p, mp, w, prob, allowed, scratch);
    if (tokens[r] < 0 || tokens[r] >= n || !allowed[tokens[r]]) {
      if (outside++ < 5)
        CHECKF(0, "row %lld: token %lld is not allowed (k=%lld p=%g min_p=%g)", (long long)r,
               (long long)tokens[r], (long long)k, p, mp);
    }
  }
  CHECKF(outside == 0, "%lld of %lld rows sampled a token outside the allowed set", (long long)outside,
         (long long)rows);
  h_buf_free(&in);
  h_buf_free(&out);
  h_buf_free(&karr);
  h_buf_free(&parr);
  h_buf_free(&marr);
  h_buf_free(&sarr);
  h_buf_free(&oarr);
  free(x);
  free(w);
  free(prob);
  free(scratch);
  free(allowed);
}

/* A zero-filled CUDA workspace for the multi-block path of `rows` rows of n (NULL buffer: none). */
static h_buf split_workspace(int64_t rows, int64_t n) {
  size_t bytes = 0;
  CHECK_STATUS(ignis_sampling_workspace_size(rows, n, &bytes), IGNIS_OK);
  return h_buf_alloc(H_CUDA, IGNIS_I64, bytes ? (int64_t)((bytes + 7) / 8) : 1);
}

static void test_batches(int backends) {
  /* the multi-block path (rows <= IGNIS_SAMPLING_SPLIT_MAX_ROWS, vocab >= 4096, a workspace) runs
     for every case of a vocabulary >= 4096 (blocks of several tiles from 6 rows of 128256 up); the
     CUDA samples of both paths must equal the CPU's */
  static const batch_case cases[] = {{37, 1000, IGNIS_F32, 1, 2, 0, 0},   {16, 32000, IGNIS_BF16, 1, 1, 0, 0},
                                     {9, 4097, IGNIS_F16, 0, 0, 0, 0},    {5, 1, IGNIS_F32, 1, 0, 0, 0},
                                     {6, 2, IGNIS_F32, 0, 2, 0, 0},       {3, 128256, IGNIS_F32, 1, 0, 0, 0},
                                     {2, 151936, IGNIS_BF16, 0, 2, 0, 0}, {6, 128256, IGNIS_F32, 1, 2, 1, 0},
                                     {6, 151936, IGNIS_F32, 1, 0, 1, 0},  {1, 128256, IGNIS_F32, 0, 0, 0, 0},
                                     {1, 4096, IGNIS_F16, 1, 0, 1, 0},    {4, 65536, IGNIS_BF16, 1, 2, 0, 0},
                                     {8, 16384, IGNIS_F32, 1, 1, 0, 0},   {2, 262144, IGNIS_F32, 1, 0, 0, 0},
                                     {1, 200003, IGNIS_BF16, 1, 2, 1, 0}, {32, 65536, IGNIS_F32, 1, 0, 0, 0},
                                     {24, 32000, IGNIS_BF16, 1, 2, 1, 0}, {6, 128256, IGNIS_F32, 1, 0, 0, 1},
                                     {40, 151936, IGNIS_BF16, 1, 2, 0, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
    for (int op = 0; op < OP_COUNT; ++op) {
      const batch_case *bc = &cases[c];
      int64_t *a = malloc(sizeof(int64_t) * (size_t)bc->rows),
              *b = malloc(sizeof(int64_t) * (size_t)bc->rows);
      int64_t *cuda = malloc(sizeof(int64_t) * (size_t)bc->rows);
      h_case("batch %s on cpu: rows=%lld vocab=%lld dtype=%s per_row=%d seed_tensor=%d flat_near_one=%d "
             "concentrated=%d",
             op_names[op], (long long)bc->rows, (long long)bc->n, ignis_dtype_name(bc->dtype), bc->per_row,
             bc->seed_tensor, bc->flat_near_one, bc->concentrated);
      run_batch(H_CPU, (op_kind)op, bc, 99, 5, NULL, a);
      run_batch(H_CPU, (op_kind)op, bc, 99, 5, NULL, b);
      int same = 1;
      for (int64_t r = 0; r < bc->rows; ++r)
        same &= a[r] == b[r];
      CHECKF(same, "the same seed and offset gave different samples");
      if (bc->n >= 1000) {
        run_batch(H_CPU, (op_kind)op, bc, 99, 6, NULL, b);
        int64_t differ = 0;
        for (int64_t r = 0; r < bc->rows; ++r)
          differ += a[r] != b[r];
        CHECKF(differ > 0 || bc->rows < 4, "another offset gave the same %lld samples", (long long)bc->rows);
      }
      if (backends > 1) {
        h_case("batch %s on cuda vs cpu: rows=%lld vocab=%lld dtype=%s per_row=%d seed_tensor=%d "
               "flat_near_one=%d concentrated=%d",
               op_names[op], (long long)bc->rows, (long long)bc->n, ignis_dtype_name(bc->dtype), bc->per_row,
               bc->seed_tensor, bc->flat_near_one, bc->concentrated);
        h_buf ws = split_workspace(bc->rows, bc->n);
        /* one block per row; then the multi-block path twice on one workspace (the second call
           finds the counters the first left zero) */
        for (int pass = 0; pass < 3; ++pass) {
          run_batch(H_CUDA, (op_kind)op, bc, 99, 5, pass ? &ws : NULL, cuda);
          int64_t mismatches = 0;
          for (int64_t r = 0; r < bc->rows; ++r)
            if (cuda[r] != a[r] && mismatches++ < 5)
              CHECKF(0, "%s: row %lld: cuda sampled %lld, cpu %lld", pass ? "workspace" : "one block",
                     (long long)r, (long long)cuda[r], (long long)a[r]);
          CHECKF(mismatches == 0, "%s: %lld of %lld rows differ between cuda and cpu",
                 pass ? "workspace" : "one block", (long long)mismatches, (long long)bc->rows);
        }
        h_buf_free(&ws);
      }
      free(a);
      free(b);
      free(cuda);
    }
}

/* ---- the multi-block path on edge rows: CUDA with a workspace against the CPU ----------------------- */
static void split_edge_rows(int64_t n, double *x) {
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double v = 0.0;
      switch (r) {
      case 0: /* all zero */
        break;
      case 1: /* NaN / Inf / negative everywhere, one valid entry */
        v = i == 4321 ? 0.25 : (i % 3 == 0 ? NAN : (i % 3 == 1 ? INFINITY : -1.0));
        break;
      case 2: /* negatives, two positives */
        v = i == n - 1 ? 0.125 : (i == 17 ? 0.5 : -0.5);
        break;
      case 3: /* flat: one level-1 bin holds the whole row */
        v = 1.0;
        break;
      case 4: /* one large weight over a floor of tiny ones (masses truncated to 0) */
        v = i == 2500 ? 1.0 : 1e-30;
        break;
      default: /* 60 binades: masses shifted far right */
        v = ldexp(1.0 + (double)(i % 7) / 8.0, -(int)(i % 60));
        break;
      }
      x[r * n + i] = v;
    }
}

/* The edge rows of test_split_edges: the inputs, index maps and outputs of both backends. */
typedef struct split_edge_bufs {
  h_buf in[2], idx[2], out[2];
  int64_t shape[2], batch;
} split_edge_bufs;

/* op's samples of the edge rows on the CPU (got[0]) and on CUDA (got[1]) through workspace_bytes of
 * ws. */
static void split_edge_samples(split_edge_bufs *e, op_kind op, const thresholds *t, uint64_t seed,
                               uint64_t offset, const h_buf *ws, size_t workspace_bytes, int64_t got[2][8]) {
  for (int b = 0; b < 2; ++b) {
    ignis_tensor input = h_view(&e->in[b], 0, 2, e->shape, NULL);
    ignis_tensor samples = h_view(&e->out[b], 0, 1, &e->batch, NULL);
    ignis_tensor indices = h_view(&e->idx[b], 0, 1, &e->batch, NULL);
    ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
    o.indices = &indices;
    o.seed = seed;
    o.offset = offset;
    if (b) {
      o.workspace = ws->data;
      o.workspace_bytes = workspace_bytes;
    }
    h_buf_poison(&e->out[b]);
    h_buf_upload(&e->out[b]);
    CHECK_STATUS(call_op(op, &input, t, &samples, &o), IGNIS_OK);
    h_buf_download(&e->out[b]);
    for (int i = 0; i < e->batch; ++i)
      got[b][i] = get_index(&e->out[b], i);
  }
}

static void test_split_edges(int backends) {
  if (backends < 2)
    return;
  const int64_t n = 5000, rows = 6, batch = 8;
  static const double idx_values[8] = {5, -1, 0, 3, 2, 4, 1, 6};
  double *x = malloc(sizeof(double) * (size_t)(rows * n));
  split_edge_rows(n, x);
  split_edge_bufs e = {.shape = {rows, n}, .batch = batch};
  for (int b = 0; b < 2; ++b) {
    e.in[b] = h_buf_alloc(b ? H_CUDA : H_CPU, IGNIS_F32, rows * n);
    e.idx[b] = h_buf_alloc(b ? H_CUDA : H_CPU, IGNIS_I64, batch);
    e.out[b] = h_buf_alloc(b ? H_CUDA : H_CPU, IGNIS_I64, batch);
    for (int64_t i = 0; i < rows * n; ++i)
      h_set(&e.in[b], i, x[i]);
    for (int i = 0; i < batch; ++i)
      h_set(&e.idx[b], i, idx_values[i]);
    h_buf_upload(&e.in[b]);
    h_buf_upload(&e.idx[b]);
  }
  h_buf ws = split_workspace(batch, n);
  const size_t ws_bytes = (size_t)ws.count * ws.elem_size;
  static const int64_t ks[] = {1, 3, 4999, 100000};
  static const double ps[] = {1e-9, 0.5, 0.999999, 1.0};
  for (int op = 0; op < OP_COUNT; ++op)
    for (int v = 0; v < 4; ++v) {
      h_case("multi-block edge rows %s: k=%lld p=%g", op_names[op], (long long)ks[v], ps[v]);
      int64_t got[2][8];
      thresholds t = {ks[v], ps[v], ps[v], NULL, NULL, NULL};
      split_edge_samples(&e, (op_kind)op, &t, 7, (uint64_t)v, &ws, ws_bytes, got);
      for (int i = 0; i < batch; ++i)
        CHECKF(got[0][i] == got[1][i], "output row %d (row %g): cuda sampled %lld, cpu %lld", i,
               idx_values[i], (long long)got[1][i], (long long)got[0][i]);
      CHECKF(got[1][1] == 0 && got[1][7] == 0, "rows outside [0, rows) must give token 0");
    }
  /* every call left the row counters at the workspace's start zero, as the next call needs them */
  h_case("multi-block edge rows: the workspace's counters are zero after the calls");
  h_buf_download(&ws);
  int64_t dirty = 0;
  for (int64_t i = 0; i < IGNIS_SAMPLING_SPLIT_MAX_ROWS * IGNIS_SPLIT_STATE_WORDS / 2; ++i)
    dirty += h_get(&ws, i) != 0.0;
  CHECKF(dirty == 0, "%lld counter words are not zero", (long long)dirty);
  /* a workspace one word short of the size query is not an error: one block a row, the same samples */
  h_case("multi-block edge rows: a workspace one word short");
  {
    int64_t got[2][8];
    thresholds t = {0, 0.5, 0.0, NULL, NULL, NULL};
    split_edge_samples(&e, OP_TOP_P, &t, 9, 0, &ws, ws_bytes - 8, got);
    for (int i = 0; i < batch; ++i)
      CHECKF(got[0][i] == got[1][i], "output row %d: cuda sampled %lld, cpu %lld", i, (long long)got[1][i],
             (long long)got[0][i]);
  }
  for (int b = 0; b < 2; ++b) {
    h_buf_free(&e.in[b]);
    h_buf_free(&e.idx[b]);
    h_buf_free(&e.out[b]);
  }
  h_buf_free(&ws);
  free(x);
}

static void test_split_workspace_size(void) {
  h_case("ignis_sampling_workspace_size");
  size_t a = 1, b = 0, c = 0;
  CHECK_STATUS(ignis_sampling_workspace_size(IGNIS_SAMPLING_SPLIT_MAX_ROWS + 1, 128256, &a), IGNIS_OK);
  CHECKF(a == 0, "a batch above IGNIS_SAMPLING_SPLIT_MAX_ROWS: %zu bytes", a);
  CHECK_STATUS(ignis_sampling_workspace_size(1, 4095, &a), IGNIS_OK);
  CHECKF(a == 0, "vocab 4095 is below the multi-block path's: %zu bytes", a);
  CHECK_STATUS(ignis_sampling_workspace_size(1, 128256, &b), IGNIS_OK);
  CHECK_STATUS(ignis_sampling_workspace_size(8, 128256, &c), IGNIS_OK);
  CHECKF(b >= (size_t)128256 * 8 && c > b, "sizes %zu (1 row) and %zu (8 rows)", b, c);
  CHECK_STATUS(ignis_sampling_workspace_size(1, 128256, NULL), IGNIS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ignis_sampling_workspace_size(-1, 128256, &a), IGNIS_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(ignis_sampling_workspace_size(1, ((int64_t)1 << 24) + 1, &a), IGNIS_ERROR_INVALID_ARGUMENT);
}

/* ---- edge rows ----------------------------------------------------------------------------------------- */
static void test_edges(h_backend backend) {
  enum { N = 8 };
  const double nan = NAN, inf = INFINITY;
  /* rows: all zero; NaN and Inf around one valid entry; negative entries; one entry */
  static const double rows_probs[4][N] = {{0, 0, 0, 0, 0, 0, 0, 0},
                                          {NAN, INFINITY, 0, 0.25, -1, NAN, 0, -INFINITY},
                                          {-0.5, -0.1, 0, 0, 0, 0, 0, 0.125},
                                          {0, 0, 0, 0, 0, 0, 0.5, 0}};
  static const int64_t expect_probs[4] = {0, 3, 7, 6};
  h_buf in = h_buf_alloc(backend, IGNIS_F32, 4 * N), out = h_buf_alloc(backend, IGNIS_I64, 4);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < N; ++i)
      h_set(&in, r * N + i, rows_probs[r][i]);
  h_buf_upload(&in);
  int64_t shape[2] = {4, N}, rows = 4;
  ignis_tensor input = h_view(&in, 0, 2, shape, NULL), samples = h_view(&out, 0, 1, &rows, NULL);
  for (int op = 0; op < OP_COUNT; ++op) {
    if (op_logits((op_kind)op))
      continue;
    static const int64_t ks[] = {1, 3, 100};
    static const double ps[] = {1e-9, 0.5, 1.0};
    for (int v = 0; v < 3; ++v) {
      h_case("edge rows %s on %s: k=%lld p=%g", op_names[op], h_backend_name(backend), (long long)ks[v],
             ps[v]);
      thresholds t = {ks[v], ps[v], ps[v], NULL, NULL, NULL};
      h_buf_poison(&out);
      h_buf_upload(&out);
      CHECK_STATUS(call_op((op_kind)op, &input, &t, &samples, NULL), IGNIS_OK);
      h_buf_download(&out);
      for (int r = 0; r < 4; ++r)
        CHECKF(get_index(&out, r) == expect_probs[r], "row %d: got token %lld expected %lld", r,
               (long long)get_index(&out, r), (long long)expect_probs[r]);
    }
  }
  /* logits: all NaN or -Inf -> 0; one +Inf wins; NaN never sampled; -Inf never sampled */
  static const double rows_logits[4][N] = {{NAN, NAN, -INFINITY, NAN, NAN, NAN, NAN, NAN},
                                           {0, 1, 2, INFINITY, 3, 0, 0, 0},
                                           {NAN, -INFINITY, -INFINITY, -INFINITY, 5, NAN, -INFINITY, NAN},
                                           {-1e30, -1e30, -1e30, -1e30, -1e30, -1e30, -1e30, 0}};
  static const int64_t expect_logits[4] = {0, 3, 4, 7};
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < N; ++i)
      h_set(&in, r * N + i, rows_logits[r][i]);
  h_buf_upload(&in);
  for (int op = 0; op < OP_COUNT; ++op) {
    if (!op_logits((op_kind)op))
      continue;
    h_case("edge logits %s on %s", op_names[op], h_backend_name(backend));
    thresholds t = {2, 0.9, 0, NULL, NULL, NULL};
    CHECK_STATUS(call_op((op_kind)op, &input, &t, &samples, NULL), IGNIS_OK);
    h_buf_download(&out);
    for (int r = 0; r < 4; ++r)
      CHECKF(get_index(&out, r) == expect_logits[r], "row %d: got token %lld expected %lld", r,
             (long long)get_index(&out, r), (long long)expect_logits[r]);
  }
  /* indices out of range give token 0 */
  h_case("indices out of range on %s", h_backend_name(backend));
  h_buf idx = h_buf_alloc(backend, IGNIS_I64, 4);
  h_set(&idx, 0, -1);
  h_set(&idx, 1, 4);
  h_set(&idx, 2, 1);
  h_set(&idx, 3, 1000000);
  h_buf_upload(&idx);
  ignis_tensor it = h_view(&idx, 0, 1, &rows, NULL);
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.indices = &it;
  CHECK_STATUS(ignis_sampling_from_logits(&input, &samples, &o, NULL), IGNIS_OK);
  h_buf_download(&out);
  CHECK(get_index(&out, 0) == 0 && get_index(&out, 1) == 0 && get_index(&out, 2) == 3 &&
        get_index(&out, 3) == 0);
  (void)nan;
  (void)inf;
  h_buf_free(&idx);
  h_buf_free(&in);
  h_buf_free(&out);
}

/* ---- renorm and mask ------------------------------------------------------------------------------------
 */
static void test_renorm_mask(h_backend backend) {
  static const int64_t vocabs[] = {1, 2, 7, 1000, 32000};
  static const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_F16, IGNIS_BF16};
  h_rng rng = h_rng_make(31);
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; ++v)
    for (int d = 0; d < 3; ++d)
      for (int kind = 0; kind < 3; ++kind)
        for (int per_row = 0; per_row < 2; ++per_row) {
          const int64_t n = vocabs[v], rows = 5;
          const ignis_dtype dtype = dtypes[d];
          static const char *const kinds[] = {"top_p_renorm_probs", "top_k_renorm_probs",
                                              "top_k_mask_logits"};
          h_case("%s on %s: vocab=%lld dtype=%s per_row=%d", kinds[kind], h_backend_name(backend),
                 (long long)n, ignis_dtype_name(dtype), per_row);
          int64_t row_stride = n + 3;
          h_buf in = h_buf_alloc(backend, dtype, rows * row_stride),
                out = h_buf_alloc(backend, dtype, rows * row_stride);
          h_buf karr = h_buf_alloc(backend, IGNIS_I64, rows), parr = h_buf_alloc(backend, IGNIS_F32, rows);
          double *x = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
          double *prob = malloc(sizeof(double) * (size_t)n), *scratch = malloc(sizeof(double) * (size_t)n);
          unsigned char *allowed = malloc((size_t)n);
          for (int64_t r = 0; r < rows; ++r) {
            make_row(&rng, n, 1.0 + (double)r, kind == 2, x);
            for (int64_t i = 0; i < n; ++i)
              h_set(&in, r * row_stride + i, x[i]);
            h_set(&karr, r, (double)((r * 5 + 1) % (n + 2)));
            h_set(&parr, r, 0.15 + 0.2 * (double)r);
          }
          h_buf_poison(&out);
          h_buf_upload(&in);
          h_buf_upload(&out);
          h_buf_upload(&karr);
          h_buf_upload(&parr);
          int64_t shape[2] = {rows, n}, strides[2] = {row_stride, 1};
          ignis_tensor input = h_view(&in, 0, 2, shape, strides), output = h_view(&out, 0, 2, shape, strides);
          ignis_tensor kt = h_view(&karr, 0, 1, &rows, NULL), pt = h_view(&parr, 0, 1, &rows, NULL);
          const int64_t k_val = n > 3 ? n / 3 : 1;
          const double p_val = 0.6;
          ignis_status st =
              kind == 0   ? ignis_top_p_renorm_probs(&input, per_row ? &pt : NULL, p_val, &output, NULL)
              : kind == 1 ? ignis_top_k_renorm_probs(&input, per_row ? &kt : NULL, k_val, &output, NULL)
                          : ignis_top_k_mask_logits(&input, per_row ? &kt : NULL, k_val, &output, NULL);
          CHECK_STATUS(st, IGNIS_OK);
          h_buf_download(&out);
          h_cmp cmp;
          h_cmp_init(&cmp);
          h_tol tol = h_tol_for(dtype, 1.0);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < n; ++i)
              x[i] = h_get(&in, r * row_stride + i);
            int64_t k = per_row ? (int64_t)h_get(&karr, r) : k_val;
            double p = per_row ? h_get(&parr, r) : p_val;
            if (kind == 2) {
              int64_t kk = (k <= 0 || k >= n) ? n : k;
              for (int64_t i = 0; i < n; ++i)
                scratch[i] = x[i];
              qsort(scratch, (size_t)n, sizeof(double), cmp_desc);
              for (int64_t i = 0; i < n; ++i) {
                double ref = (kk == n || x[i] >= scratch[kk - 1]) ? x[i] : -INFINITY;
                h_cmp_add(&cmp, r * row_stride + i, h_get(&out, r * row_stride + i), ref, 0.0);
              }
            } else {
              ref_allowed(kind == 0 ? OP_TOP_P : OP_TOP_K, x, n, k, p, 0, w, prob, allowed, scratch);
              for (int64_t i = 0; i < n; ++i)
                h_cmp_add_tol(&cmp, r * row_stride + i, h_get(&out, r * row_stride + i), prob[i], tol);
            }
          }
          CHECK_CMP(&cmp, "output matches the f64 reference");
          int64_t changed_padding = 0;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = n; i < row_stride; ++i)
              changed_padding += !h_elem_unchanged(&out, r * row_stride + i);
          CHECKF(changed_padding == 0, "%lld padding elements written", (long long)changed_padding);
          h_buf_free(&in);
          h_buf_free(&out);
          h_buf_free(&karr);
          h_buf_free(&parr);
          free(x);
          free(w);
          free(prob);
          free(scratch);
          free(allowed);
        }
}

/* ---- speculative sampling ------------------------------------------------------------------------------ */
static void test_speculative(h_backend backend) {
  enum { B = 6, NDRAFT = 3 };
  static const int64_t vocabs[] = {1, 5, 1000};
  h_rng rng = h_rng_make(8);
  for (int v = 0; v < 3; ++v) {
    const int64_t n = vocabs[v];
    h_case("chain_speculative_sampling rule on %s: vocab=%lld", h_backend_name(backend), (long long)n);
    h_buf dp = h_buf_alloc(backend, IGNIS_F32, B * NDRAFT * n),
          tp = h_buf_alloc(backend, IGNIS_F32, B * (NDRAFT + 1) * n);
    h_buf ids = h_buf_alloc(backend, IGNIS_I32, B * NDRAFT),
          out = h_buf_alloc(backend, IGNIS_I32, B * (NDRAFT + 1));
    h_buf acc = h_buf_alloc(backend, IGNIS_I32, B), emi = h_buf_alloc(backend, IGNIS_I64, B);
    double *x = malloc(sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < B * NDRAFT; ++r) {
      make_row(&rng, n, 1.0, 0, x);
      for (int64_t i = 0; i < n; ++i)
        h_set(&dp, r * n + i, x[i]);
      h_set(&ids, r, (double)h_rng_int(&rng, r % 5 == 4 ? -1 : 0, n - 1));
    }
    for (int64_t r = 0; r < B * (NDRAFT + 1); ++r) {
      make_row(&rng, n, 1.0, 0, x);
      for (int64_t i = 0; i < n; ++i)
        h_set(&tp, r * n + i,
              r % 4 == 1 ? h_get(&dp, (r / (NDRAFT + 1) * NDRAFT + r % (NDRAFT + 1)) * n + i) : x[i]);
    }
    for (int64_t b = 0; b < B; ++b) {
      h_set(&acc, b, 10);
      h_set(&emi, b, 100);
    }
    h_buf_poison(&out);
    h_buf_upload(&dp);
    h_buf_upload(&tp);
    h_buf_upload(&ids);
    h_buf_upload(&out);
    h_buf_upload(&acc);
    h_buf_upload(&emi);
    int64_t s3d[3] = {B, NDRAFT, n}, s3t[3] = {B, NDRAFT + 1, n}, sids[2] = {B, NDRAFT},
            sout[2] = {B, NDRAFT + 1};
    int64_t b1 = B;
    ignis_tensor tdp = h_view(&dp, 0, 3, s3d, NULL), ttp = h_view(&tp, 0, 3, s3t, NULL);
    ignis_tensor tids = h_view(&ids, 0, 2, sids, NULL), tout = h_view(&out, 0, 2, sout, NULL);
    ignis_tensor tacc = h_view(&acc, 0, 1, &b1, NULL), temi = h_view(&emi, 0, 1, &b1, NULL);
    ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
    o.seed = 17;
    o.offset = 3;
    CHECK_STATUS(ignis_chain_speculative_sampling(&tdp, &tids, &ttp, &tout, &tacc, &temi, &o, NULL),
                 IGNIS_OK);
    h_buf_download(&out);
    h_buf_download(&acc);
    h_buf_download(&emi);
    for (int64_t b = 0; b < B; ++b) {
      int64_t accepted = 0, emitted = -1;
      for (int64_t i = 0; i < NDRAFT; ++i) {
        int64_t d = get_index(&ids, b * NDRAFT + i);
        int ok = 0;
        if (d >= 0 && d < n) {
          ignis_philox_out words = ignis_philox_group(17, 3, 0, (uint64_t)b, (uint64_t)(i >> 2));
          double u = ((double)(words.w[i & 3] >> 8) + 0.5) / 16777216.0;
          double q = h_get(&dp, (b * NDRAFT + i) * n + d), p = h_get(&tp, (b * (NDRAFT + 1) + i) * n + d);
          ok = (float)(u * q) < p;
        }
        accepted += ok;
        if (!ok && emitted < 0)
          emitted = i;
      }
      if (emitted < 0)
        emitted = NDRAFT;
      CHECKF(get_index(&acc, b) == 10 + accepted, "row %lld: accepted %lld expected 10 + %lld", (long long)b,
             (long long)get_index(&acc, b), (long long)accepted);
      CHECKF(get_index(&emi, b) == 100 + emitted, "row %lld: emitted %lld expected 100 + %lld", (long long)b,
             (long long)get_index(&emi, b), (long long)emitted);
      for (int64_t i = 0; i <= NDRAFT; ++i) {
        int64_t got = get_index(&out, b * (NDRAFT + 1) + i);
        if (i < emitted)
          CHECKF(got == get_index(&ids, b * NDRAFT + i), "row %lld pos %lld: %lld is not the draft token",
                 (long long)b, (long long)i, (long long)got);
        else if (i == emitted)
          CHECKF(got >= 0 && got < n, "row %lld pos %lld: token %lld out of range", (long long)b,
                 (long long)i, (long long)got);
        else
          CHECKF(got == -1, "row %lld pos %lld: %lld is not the -1 padding", (long long)b, (long long)i,
                 (long long)got);
      }
    }
    free(x);
    h_buf_free(&dp);
    h_buf_free(&tp);
    h_buf_free(&ids);
    h_buf_free(&out);
    h_buf_free(&acc);
    h_buf_free(&emi);
  }

  /* The first output token of speculative sampling is distributed as target[0] when the draft token
   * is drawn from draft[0]. */
  const int64_t n = 50, rows = backend == H_CUDA ? 16384 : 2048;
  const int calls = backend == H_CUDA ? 64 : 20;
  h_case("chain_speculative_sampling marginal on %s: vocab=%lld draws=%lld", h_backend_name(backend),
         (long long)n, (long long)(rows * calls));
  double *q = malloc(sizeof(double) * n), *p = malloc(sizeof(double) * n), *cdf = malloc(sizeof(double) * n);
  make_row(&rng, n, 1.0, 0, q);
  make_row(&rng, n, 1.0, 0, p);
  h_buf dp = h_buf_alloc(backend, IGNIS_F32, rows * n), tp = h_buf_alloc(backend, IGNIS_F32, rows * 2 * n);
  h_buf ids = h_buf_alloc(backend, IGNIS_I64, rows), out = h_buf_alloc(backend, IGNIS_I64, rows * 2);
  h_buf acc = h_buf_alloc(backend, IGNIS_I64, rows), emi = h_buf_alloc(backend, IGNIS_I64, rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      h_set(&dp, r * n + i, q[i]);
      h_set(&tp, r * 2 * n + i, p[i]);
      h_set(&tp, r * 2 * n + n + i, 1.0 / n);
    }
  for (int64_t i = 0; i < n; ++i) {
    q[i] = h_get(&dp, i);
    p[i] = h_get(&tp, i);
    cdf[i] = (i ? cdf[i - 1] : 0.0) + q[i];
  }
  double psum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    psum += p[i];
  h_buf_upload(&dp);
  h_buf_upload(&tp);
  int64_t s3d[3] = {rows, 1, n}, s3t[3] = {rows, 2, n}, sids[2] = {rows, 1}, sout[2] = {rows, 2};
  ignis_tensor tdp = h_view(&dp, 0, 3, s3d, NULL), ttp = h_view(&tp, 0, 3, s3t, NULL);
  ignis_tensor tids = h_view(&ids, 0, 2, sids, NULL), tout = h_view(&out, 0, 2, sout, NULL);
  int64_t rows1 = rows;
  ignis_tensor tacc = h_view(&acc, 0, 1, &rows1, NULL), temi = h_view(&emi, 0, 1, &rows1, NULL);
  int64_t *counts = calloc((size_t)n, sizeof(int64_t));
  double *prob = malloc(sizeof(double) * n);
  unsigned char *allowed = malloc((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    prob[i] = p[i] / psum;
    allowed[i] = p[i] > 0;
  }
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.seed = 2024;
  for (int c = 0; c < calls; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      double u = h_rng_uniform(&rng, 0.0, cdf[n - 1]);
      int64_t d = 0;
      while (d < n - 1 && cdf[d] <= u)
        ++d;
      h_set(&ids, r, (double)d);
    }
    h_buf_upload(&ids);
    o.offset = (uint64_t)c;
    if (!CHECK_STATUS(ignis_chain_speculative_sampling(&tdp, &tids, &ttp, &tout, &tacc, &temi, &o, NULL),
                      IGNIS_OK))
      break;
    h_buf_download(&out);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t t0 = get_index(&out, r * 2);
      if (t0 >= 0 && t0 < n)
        ++counts[t0];
    }
  }
  check_frequencies(counts, prob, allowed, n, rows * calls);
  free(q);
  free(p);
  free(cdf);
  free(counts);
  free(prob);
  free(allowed);
  h_buf_free(&dp);
  h_buf_free(&tp);
  h_buf_free(&ids);
  h_buf_free(&out);
  h_buf_free(&acc);
  h_buf_free(&emi);
}

/* ---- top-k selection ------------------------------------------------------------------------------------
 */
typedef struct ref_entry {
  double value;
  int64_t index;
} ref_entry;

static int ref_entry_desc(const void *a, const void *b) {
  const ref_entry *x = a, *y = b;
  int xn = isnan(x->value), yn = isnan(y->value);
  if (xn != yn)
    return xn - yn;
  if (!xn && x->value != y->value)
    return x->value > y->value ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index);
}

static void test_top_k(h_backend backend) {
  static const int64_t vocabs[] = {1, 2, 33, 1000, 32000};
  static const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_BF16, IGNIS_F16};
  h_rng rng = h_rng_make(12);
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; ++v)
    for (int d = 0; d < 3; ++d)
      for (int sorted = 0; sorted < 2; ++sorted) {
        const int64_t n = vocabs[v], rows = 3;
        const int64_t ks[3] = {n, n > 1 ? n / 2 : 1, n > 50 ? 50 : 1};
        for (int ki = 0; ki < 3; ++ki) {
          const int64_t k = ks[ki];
          h_case("top_k on %s: vocab=%lld k=%lld dtype=%s sorted=%d", h_backend_name(backend), (long long)n,
                 (long long)k, ignis_dtype_name(dtypes[d]), sorted);
          h_buf in = h_buf_alloc(backend, dtypes[d], rows * n),
                vals = h_buf_alloc(backend, dtypes[d], rows * k);
          h_buf idx = h_buf_alloc(backend, IGNIS_I64, rows * k);
          for (int64_t i = 0; i < rows * n; ++i) {
            double x = (i % 3 == 0) ? (double)h_rng_int(&rng, -3, 3) : h_rng_normal(&rng); /* ties */
            if (i % 97 == 5)
              x = NAN;
            if (i % 89 == 7)
              x = -INFINITY;
            h_set(&in, i, x);
          }
          h_buf_poison(&vals);
          h_buf_poison(&idx);
          h_buf_upload(&in);
          h_buf_upload(&vals);
          h_buf_upload(&idx);
          int64_t shape[2] = {rows, n}, oshape[2] = {rows, k};
          ignis_tensor input = h_view(&in, 0, 2, shape, NULL), tv = h_view(&vals, 0, 2, oshape, NULL);
          ignis_tensor ti = h_view(&idx, 0, 2, oshape, NULL);
          CHECK_STATUS(ignis_top_k(&input, k, sorted, &tv, &ti, NULL), IGNIS_OK);
          h_buf_download(&vals);
          h_buf_download(&idx);
          ref_entry *e = malloc(sizeof(ref_entry) * (size_t)n);
          int64_t bad = 0;
          for (int64_t r = 0; r < rows && bad < 3; ++r) {
            for (int64_t i = 0; i < n; ++i) {
              e[i].value = h_get(&in, r * n + i);
              e[i].index = i;
            }
            qsort(e, (size_t)n, sizeof(ref_entry), ref_entry_desc);
            /* expected order: sorted = reference order; unsorted = above-threshold in index order, then ties
             */
            ref_entry *want = malloc(sizeof(ref_entry) * (size_t)k);
            for (int64_t j = 0; j < k; ++j)
              want[j] = e[j];
            if (!sorted) {
              int64_t above = 0;
              for (int64_t j = 0; j < k; ++j)
                above += ref_entry_desc(&e[j], &e[k - 1]) != 0 &&
                         !(e[j].value == e[k - 1].value || (isnan(e[j].value) && isnan(e[k - 1].value)));
              for (int64_t a = 1; a < above; ++a)
                for (int64_t j = a; j > 0 && want[j].index < want[j - 1].index; --j) {
                  ref_entry tmp = want[j];
                  want[j] = want[j - 1];
                  want[j - 1] = tmp;
                }
            }
            for (int64_t j = 0; j < k; ++j) {
              int64_t gi = get_index(&idx, r * k + j);
              double gv = h_get(&vals, r * k + j);
              int ok = gi == want[j].index && (gv == want[j].value || (isnan(gv) && isnan(want[j].value)));
              if (!ok) {
                CHECKF(0, "row %lld slot %lld: got (%g, %lld) expected (%g, %lld)", (long long)r,
                       (long long)j, gv, (long long)gi, want[j].value, (long long)want[j].index);
                if (++bad >= 3)
                  break;
              }
            }
            free(want);
          }
          CHECKF(bad == 0, "top_k values/indices differ from the reference");
          free(e);
          h_buf_free(&in);
          h_buf_free(&vals);
          h_buf_free(&idx);
        }
      }
}

/* ---- softmax --------------------------------------------------------------------------------------------
 */
static void test_softmax(h_backend backend) {
  static const int64_t vocabs[] = {1, 2, 1000, 32001};
  static const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_BF16, IGNIS_F16};
  h_rng rng = h_rng_make(3);
  for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; ++v)
    for (int d = 0; d < 3; ++d)
      for (int variant = 0; variant < 3; ++variant) {
        const int64_t n = vocabs[v], rows = 4;
        const ignis_dtype out_dtype = variant == 2 ? dtypes[d] : IGNIS_F32;
        h_case("softmax on %s: vocab=%lld dtype=%s out=%s temperature=%s", h_backend_name(backend),
               (long long)n, ignis_dtype_name(dtypes[d]), ignis_dtype_name(out_dtype),
               variant == 1 ? "per-row" : "0.7");
        h_buf in = h_buf_alloc(backend, dtypes[d], rows * n), out = h_buf_alloc(backend, out_dtype, rows * n);
        h_buf temp = h_buf_alloc(backend, IGNIS_F32, rows);
        for (int64_t i = 0; i < rows * n; ++i)
          h_set(&in, i, i % 101 == 3 ? NAN : i % 103 == 4 ? -INFINITY : 3.0 * h_rng_normal(&rng));
        static const double temps[4] = {0.5, 0.0, 2.0, -1.0};
        for (int64_t r = 0; r < rows; ++r)
          h_set(&temp, r, temps[r]);
        h_buf_poison(&out);
        h_buf_upload(&in);
        h_buf_upload(&out);
        h_buf_upload(&temp);
        int64_t shape[2] = {rows, n};
        ignis_tensor input = h_view(&in, 0, 2, shape, NULL), output = h_view(&out, 0, 2, shape, NULL);
        ignis_tensor tt = h_view(&temp, 0, 1, &rows, NULL);
        CHECK_STATUS(ignis_softmax(&input, variant == 1 ? &tt : NULL, 0.7, &output, NULL), IGNIS_OK);
        h_buf_download(&out);
        h_cmp cmp;
        h_cmp_init(&cmp);
        h_tol tol = h_tol_for(out_dtype, 1.0);
        tol.rtol *= 4;
        for (int64_t r = 0; r < rows; ++r) {
          double t = variant == 1 ? temps[r] : 0.7, m = -INFINITY, s = 0.0;
          int64_t arg = 0;
          for (int64_t i = 0; i < n; ++i) {
            double x = h_get(&in, r * n + i);
            x = isnan(x) ? -INFINITY : x;
            if (x > m) {
              m = x;
              arg = i;
            }
          }
          for (int64_t i = 0; i < n; ++i) {
            double x = h_get(&in, r * n + i);
            s += isnan(x) ? 0.0 : exp((x - m) / t);
          }
          for (int64_t i = 0; i < n; ++i) {
            double x = h_get(&in, r * n + i), ref;
            if (m == -INFINITY)
              ref = 0.0;
            else if (t <= 0)
              ref = i == arg ? 1.0 : 0.0;
            else
              ref = isnan(x) ? 0.0 : exp((x - m) / t) / s;
            h_cmp_add_tol(&cmp, r * n + i, h_get(&out, r * n + i), ref, tol);
          }
        }
        CHECK_CMP(&cmp, "softmax matches the f64 reference");
        h_buf_free(&in);
        h_buf_free(&out);
        h_buf_free(&temp);
      }
}

/* ---- bad inputs
 * -------------------------------------------------------------------------------------------- */
static void test_bad_inputs(h_backend backend) {
  enum { R = 3, V = 16 };
  h_case("sampling bad inputs on %s", h_backend_name(backend));
  h_buf in = h_buf_alloc(backend, IGNIS_F32, R * V), out = h_buf_alloc(backend, IGNIS_I32, R);
  h_buf o2 = h_buf_alloc(backend, IGNIS_F32, R * V), fr = h_buf_alloc(backend, IGNIS_F32, R);
  h_buf ir = h_buf_alloc(backend, IGNIS_I32, R), seed = h_buf_alloc(backend, IGNIS_I64, R);
  for (int i = 0; i < R * V; ++i)
    h_set(&in, i, 1.0 / V);
  h_buf_poison(&out);
  h_buf_poison(&o2);
  h_buf_upload(&in);
  h_buf_upload(&out);
  h_buf_upload(&o2);
  h_buf_upload(&fr);
  h_buf_upload(&ir);
  h_buf_upload(&seed);
  int64_t shape[2] = {R, V}, rows = R, two = 2;
  ignis_tensor probs = h_view(&in, 0, 2, shape, NULL), samples = h_view(&out, 0, 1, &rows, NULL);
  ignis_tensor renorm = h_view(&o2, 0, 2, shape, NULL), farr = h_view(&fr, 0, 1, &rows, NULL);
  ignis_tensor iarr = h_view(&ir, 0, 1, &rows, NULL), seeds = h_view(&seed, 0, 1, &rows, NULL);
  ignis_tensor t;
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
#define UNTOUCHED()                                                                                          \
  CHECKF(h_buf_untouched(&in) && h_buf_untouched(&out) && h_buf_untouched(&o2) && h_buf_untouched(&fr) &&    \
             h_buf_untouched(&ir) && h_buf_untouched(&seed),                                                 \
         "a rejected call changed a buffer")
#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    UNTOUCHED();                                                                                             \
  } while (0)
  BAD(ignis_top_k_sampling_from_probs(&probs, NULL, -1, &samples, NULL, NULL), INV, "top_k=-1");
  BAD(ignis_top_p_sampling_from_probs(&probs, NULL, 0.0, &samples, NULL, NULL), INV, "top_p=0");
  BAD(ignis_top_p_sampling_from_probs(&probs, NULL, 1.5, &samples, NULL, NULL), INV, "top_p=1.5");
  BAD(ignis_top_p_sampling_from_probs(&probs, NULL, NAN, &samples, NULL, NULL), INV, "top_p");
  BAD(ignis_min_p_sampling_from_probs(&probs, NULL, -0.1, &samples, NULL, NULL), INV, "min_p");
  BAD(ignis_top_k_top_p_sampling_from_probs(&probs, NULL, 5, NULL, 2.0, IGNIS_FILTER_JOINT, &samples, NULL,
                                            NULL),
      INV, "top_p");
  BAD(ignis_top_k_top_p_sampling_from_logits(&probs, NULL, 5, NULL, 0.5, (ignis_filter_apply_order)7,
                                             &samples, NULL, NULL),
      INV, "filter_apply_order");
  BAD(ignis_sampling_from_probs(&probs, NULL, NULL, NULL), INV, "samples is NULL");
  {
    ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
    o.workspace_bytes = 4096;
    BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "options.workspace is NULL");
    o.workspace = (char *)fr.data + 4;
    BAD(ignis_top_p_sampling_from_probs(&probs, NULL, 0.5, &samples, &o, NULL), INV, "options.workspace");
  }
  BAD(ignis_sampling_from_probs(NULL, &samples, NULL, NULL), INV, "probs is NULL");
  t = samples;
  t.dtype = IGNIS_F32;
  BAD(ignis_sampling_from_probs(&probs, &t, NULL, NULL), INV, "samples.dtype");
  t = samples;
  t.shape[0] = R - 1;
  BAD(ignis_sampling_from_probs(&probs, &t, NULL, NULL), INV, "samples.shape[0]");
  t = probs;
  t.dtype = IGNIS_I32;
  BAD(ignis_sampling_from_probs(&t, &samples, NULL, NULL), INV, "probs.dtype");
  t = probs;
  t.ndim = 1;
  BAD(ignis_sampling_from_logits(&t, &samples, NULL, NULL), INV, "logits.ndim");
  t = probs;
  t.shape[1] = 0;
  BAD(ignis_sampling_from_probs(&t, &samples, NULL, NULL), INV, "probs.shape[1]");
  t = probs;
  t.shape[1] = V / 2;
  t.strides[1] = 2;
  BAD(ignis_sampling_from_probs(&t, &samples, NULL, NULL), UNS, "probs.strides[-1]");
  BAD(ignis_top_k_sampling_from_probs(&probs, &farr, 0, &samples, NULL, NULL), INV, "top_k_arr.dtype");
  BAD(ignis_top_p_sampling_from_probs(&probs, &iarr, 0.5, &samples, NULL, NULL), INV, "top_p_arr.dtype");
  t = farr;
  t.shape[0] = R - 1;
  BAD(ignis_min_p_sampling_from_probs(&probs, &t, 0.5, &samples, NULL, NULL), INV, "min_p_arr.shape[0]");
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.size = 8;
  BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "options.size");
  o = (ignis_sampling_options)IGNIS_SAMPLING_OPTIONS_INIT;
  t = seeds;
  t.shape[0] = 2;
  o.seed_tensor = &t;
  BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "seed has 2 elements");
  o.seed_tensor = NULL;
  o.offset_tensor = &farr;
  BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "offset.dtype");
  o.offset_tensor = NULL;
  o.indices = &farr;
  BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "indices.dtype");
  t = iarr;
  t.shape[0] = 2;
  o.indices = &t;
  BAD(ignis_sampling_from_probs(&probs, &samples, &o, NULL), INV, "samples.shape[0]");
  /* renorm / mask */
  BAD(ignis_top_p_renorm_probs(&probs, NULL, 0.0, &renorm, NULL), INV, "top_p=0");
  BAD(ignis_top_k_renorm_probs(&probs, NULL, -2, &renorm, NULL), INV, "top_k=-2");
  BAD(ignis_top_k_mask_logits(&probs, NULL, 3, NULL, NULL), INV, "masked_logits is NULL");
  t = renorm;
  t.dtype = IGNIS_F16;
  BAD(ignis_top_k_renorm_probs(&probs, NULL, 2, &t, NULL), INV, "renorm_probs.dtype");
  t = renorm;
  t.shape[1] = V - 1;
  BAD(ignis_top_k_mask_logits(&probs, NULL, 2, &t, NULL), INV, "masked_logits.shape[1]");
  /* softmax */
  BAD(ignis_softmax(&probs, NULL, 0.0, &renorm, NULL), INV, "temperature=0");
  BAD(ignis_softmax(&probs, NULL, NAN, &renorm, NULL), INV, "temperature");
  BAD(ignis_softmax(&probs, &iarr, 1.0, &renorm, NULL), INV, "temperature_arr.dtype");
  BAD(ignis_softmax(&probs, NULL, 1.0, NULL, NULL), INV, "probs is NULL");
  /* top_k selection */
  {
    int64_t oshape[2] = {R, 4};
    ignis_tensor vals = h_view(&o2, 0, 2, oshape, NULL), idxs = h_view(&seed, 0, 1, &rows, NULL);
    BAD(ignis_top_k(&probs, V + 1, 0, &vals, &idxs, NULL), INV, "k=17");
    BAD(ignis_top_k(&probs, -1, 0, &vals, &idxs, NULL), INV, "k=-1");
    BAD(ignis_top_k(&probs, 4, 0, &vals, NULL, NULL), INV, "indices is NULL");
    BAD(ignis_top_k(&probs, 4, 0, &vals, &idxs, NULL), INV, "indices.ndim");
    BAD(ignis_top_k(&probs, 3, 0, &vals, &idxs, NULL), INV, "values.shape[1]");
  }
  /* speculative */
  {
    int64_t s3[3] = {1, 2, V}, s3t[3] = {1, 3, V}, sid[2] = {1, 2}, sout[2] = {1, 3};
    ignis_tensor dp = h_view(&in, 0, 3, s3, NULL), tp = h_view(&o2, 0, 3, s3t, NULL);
    ignis_tensor ids = h_view(&ir, 0, 2, sid, NULL), outs = h_view(&seed, 0, 2, sout, NULL);
    int64_t one = 1;
    ignis_tensor acc = h_view(&out, 0, 1, &one, NULL), emi = h_view(&out, 1, 1, &one, NULL);
    ignis_tensor bad_tp = tp;
    bad_tp.shape[1] = 2;
    BAD(ignis_chain_speculative_sampling(&dp, &ids, &bad_tp, &outs, &acc, &emi, NULL, NULL), INV,
        "target_probs.shape[1]");
    BAD(ignis_chain_speculative_sampling(&dp, &ids, &tp, NULL, &acc, &emi, NULL, NULL), INV,
        "output_token_ids is NULL");
    BAD(ignis_chain_speculative_sampling(&dp, &ids, &tp, &outs, &acc, &acc, NULL, NULL), INV, "overlaps");
    ignis_sampling_options oi = IGNIS_SAMPLING_OPTIONS_INIT;
    oi.indices = &iarr;
    BAD(ignis_chain_speculative_sampling(&dp, &ids, &tp, &outs, &acc, &emi, &oi, NULL), INV, "indices");
    ignis_tensor bad_ids = ids;
    bad_ids.dtype = IGNIS_F32;
    BAD(ignis_chain_speculative_sampling(&dp, &bad_ids, &tp, &outs, &acc, &emi, NULL, NULL), INV,
        "draft_token_ids.dtype");
  }
  (void)two;
#undef BAD
#undef UNTOUCHED
  h_buf_free(&in);
  h_buf_free(&out);
  h_buf_free(&o2);
  h_buf_free(&fr);
  h_buf_free(&ir);
  h_buf_free(&seed);
}

int main(void) {
  h_init("test_sampling");
  test_philox();
  const int backends = h_backend_count();
  for (int b = 0; b < backends && h_selected("one block"); ++b) {
    const h_backend backend = h_backend_at(b);
    test_bad_inputs(backend);
    test_edges(backend);
    test_renorm_mask(backend);
    test_top_k(backend);
    test_softmax(backend);
    test_speculative(backend);
    test_rule(backend);
    test_statistics(backend);
  }
  test_split_workspace_size();
  /* IGNIS_TEST_ONLY=multi-block (the sanitizer's run of the multi-block path): its edge rows only */
  if (h_selected("multi-block edge rows"))
    test_split_edges(backends);
  if (h_selected("batch"))
    test_batches(backends);
  return h_finish();
}
